"""Results: the stored runs compared (topology × workload, and rate for sweeps) with the best per column marked
and the setup column, the recommendation per objective with its reasons, a latency–throughput chart for rate
sweeps, a run's details (plan, fingerprint, per-request distributions), and export to CSV or Markdown.

The scope is every run, or one campaign's (``s`` steps through them; the table's title says which): a campaign's
scope leaves out the runs measured on its layouts that are not part of it, and says so; the exports are of the
scope shown. A run that failed, was stopped or completed no request is a row of its own, in no figure.

The table and the recommendation are the core's (``tui.core.bench.table``, ``tui.core.bench.recommend``), the
same the CLI prints; they are built in a thread (the runs are files) and only drawn here.

Runs measured with serve knobs (``run --knob``) get a column per knob that varies (``attn``, ``mnbt``), the
recommendation says what each knob of a winner moved its figure by, and a chart shows one knob's effect: its
values side by side, per topology, workload and the other knobs' values (``k`` steps to the next knob, ``f`` to the
next figure: output tok/s, mean TPOT, mean TTFT).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Footer, Static

from tui.console import knobs as knob_view
from tui.console.context import ConsoleContext
from tui.console.screens.base import ConsoleScreen
from tui.console.state import ConsoleState
from tui.console.widgets.charts import BarChart, XYChart
from tui.console.widgets.header import HeaderBar
from tui.core import paths, safeio, safewrite
from tui.core.bench import recommend as rec_mod
from tui.core.bench import scope, stats, table
from tui.core.bench.events import BenchDone
from tui.core.bench.store import (
    Run,
    check_summary,
    find_runs,
    load_run,
    read_meta_dict,
    read_run_plan,
    run_workloads,
)
from tui.core.errors import AppError, InputError
from tui.core.models import Catalog, Workload

REFRESH_S = 5.0


@dataclass
class ResultsData:
    runs: list[Run] = field(default_factory=list)
    cells: list[table.Cell] = field(default_factory=list)
    frame: Any = None
    recommendation: rec_mod.Recommendation | None = None
    note: str = ""
    errors: list[str] = field(default_factory=list)
    #: what was drawn: the scope, the runs (how many, the newest end) and the GPU count the recommendation used
    stamp: tuple[str, int, float, int] = ("", 0, 0.0, 0)
    gpus: int | None = None
    #: the scope shown (every run, or a campaign's) and the campaigns there are to choose from
    scoped: scope.Scoped = field(default_factory=lambda: scope.Scoped(scope.ALL_RUNS))
    campaigns: list[str] = field(default_factory=list)


def workloads_of(runs: list[Run], catalog: Catalog) -> dict[str, Workload]:
    """The workloads the runs used: the run's own (an edited one too), else the catalog's."""
    return run_workloads(runs, catalog)


def plan_shell(run_dir: Path) -> tuple[str, bool] | None:
    """The plan a run measured as the shell commands it ran (and True), or why it cannot be read (and False); None
    when the run kept no plan (the core's reader: a teammate's copy is read bounded and strict)."""
    try:
        plan = read_run_plan(run_dir)
        if plan is None:
            return None
        text: str = safeio.guarded(plan.shell, run_dir, "plan")
    except InputError as err:
        return f"unreadable: {err.one_line()}", False
    return "\n".join(safeio.shown(line, 2000) for line in text.split("\n")), True


def recorded_runs(done: list[BenchDone]) -> tuple[list[Run], list[str]]:
    """The runs a recording holds: each finished run's record and summary, as its ``BenchDone`` carried them
    (checked as a stored run's files are); the ones that do not read, each as its one-line error."""
    runs: list[Run] = []
    errors: list[str] = []
    for d in done:
        if not d.meta:
            continue
        try:
            runs.append(Run(Path(d.run_dir or "."), read_meta_dict(d.meta, f"the recorded run {d.run_id}"),
                            check_summary(dict(d.summary), f"the recorded run {d.run_id}")))
        except AppError as err:
            errors.append(err.one_line())
    return runs, errors


def load_results(catalog: Catalog, gpus: int | None, root: Path | None = None, *,
                 recorded: list[BenchDone] | None = None, campaign: str = scope.ALL_RUNS) -> ResultsData:
    """Every stored run (or, with ``recorded``, the runs of a recording) or ``campaign``'s, its comparison cells and
    the recommendation (blocking: call from a thread). A campaign no longer stored falls back to every run."""
    data = ResultsData()
    every: list[Run] = []
    if recorded is not None:
        every, data.errors = recorded_runs(recorded)
    else:
        for p in find_runs([], root):
            try:
                every.append(load_run(p))
            except AppError as err:
                data.errors.append(err.one_line())
    data.campaigns = scope.campaign_names(every)
    data.scoped = scope.scope_runs(every, campaign if campaign in data.campaigns else scope.ALL_RUNS)
    data.runs = data.scoped.runs
    if not data.runs:
        return data
    data.cells = table.build_cells(data.runs)
    data.frame = table.comparison_frame(data.cells)
    workloads = workloads_of(data.runs, catalog)
    repeats = max((len(c.runs) for c in data.cells if c.ranked), default=1)
    try:
        rec = rec_mod.recommend(data.cells, workloads, gpus=gpus, repeats=repeats)
        if rec.slo_derived:
            data.cells = table.build_cells(data.runs, slo_by_workload=rec.slo)
            data.frame = table.comparison_frame(data.cells)
        data.recommendation = rec
    except (AppError, KeyError, ValueError) as err:
        data.errors.append(f"no recommendation: {err}")
    data.note = "\n".join(n for n in (table.simulated_note(data.runs), table.like_for_like_note(data.runs),
                                      table.unknown_flags_note(data.runs), scope.apart_note(data.scoped)) if n)
    return data


def export_text(data: ResultsData, kind: str) -> str:
    """The scope shown as CSV, or as Markdown with its notes and the recommendation."""
    if kind == "csv":
        return table.render_csv(data.frame)
    text = f"_Scope: {data.scoped.label}_\n\n" + table.render_markdown(data.frame)
    if data.note:
        text += "\n\n" + "\n".join(f"_{line}_" for line in data.note.split("\n"))
    if data.recommendation is not None:
        text += "\n\n```\n" + rec_mod.render(data.recommendation) + "\n```"
    return text


def request_distribution(run: Run) -> str:
    """Per-request TTFT, TPOT and E2E latency quantiles of a run, from its records."""
    try:
        recs = [r for r in run.records() if getattr(r, "success", True)]
    except InputError as err:  # damaged records of a copied folder
        return f"request records unreadable: {err.one_line()}"
    if not recs:
        return "no finished requests stored"
    lines = [f"{len(recs)} finished requests"]
    for name, getter in (("TTFT", lambda r: r.ttft), ("TPOT", lambda r: r.tpot), ("E2E", lambda r: r.latency)):
        vals = sorted(v for v in (getter(r) for r in recs) if isinstance(v, int | float) and v > 0)
        if not vals:
            continue
        p50, p90, p99 = (stats.percentile_sorted(vals, q) for q in (50, 90, 99))  # the summary's definition
        lines.append(f"  {name:<5} p50 {p50 * 1000:9.1f} ms   p90 {p90 * 1000:9.1f} ms   "
                     f"p99 {p99 * 1000:9.1f} ms   max {vals[-1] * 1000:9.1f} ms")
    return "\n".join(lines)


class ResultsScreen(ConsoleScreen):
    AUTO_FOCUS = "#results-table"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "next_scope", "scope", show=False),  # the table's title says it, beside the scope it shows
        Binding("ctrl+r", "reload", "reload"),
        Binding("ctrl+e", "export('csv')", "export CSV"),
        Binding("ctrl+k", "export('md')", "export Markdown"),
        Binding("enter", "details", "details", show=False),
        # the knob chart's title says them (the footer is full at 80 columns)
        Binding("k", "next_knob", "knob chart: next knob", show=False),
        Binding("f", "next_figure", "knob chart: next figure", show=False),
        Binding("escape", "app.mode('dashboard')", "dashboard"),
    ]

    def __init__(self, ctx: ConsoleContext, state: ConsoleState) -> None:
        super().__init__(ctx, state)
        self.data = ResultsData()
        self._keys: list[table.Cell] = []
        self.scope: str = scope.ALL_RUNS  # the campaign shown, or every run
        #: the knob the knob chart shows (one of those the rows differ by) and which figure of it
        self.chart_knob: str = ""
        self.chart_figure = 0

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        with Vertical(id="results-body"):
            t: DataTable[Any] = DataTable(id="results-table", cursor_type="row", zebra_stripes=True)
            t.border_title = self._title()
            yield t
            with Horizontal(id="results-lower"):
                with VerticalScroll(id="recommendation"):
                    yield Static(id="rec-text")
                with Vertical(id="results-charts"):
                    yield XYChart("latency–throughput (rate sweeps)", "output tok/s", "mean TPOT ms", id="sweep")
                    yield BarChart("a knob's effect", id="knob-chart")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#recommendation").border_title = "Recommendation"
        self.query_one("#knob-chart").display = False  # until runs with knobs that vary are shown
        self.action_reload()
        self.set_interval(REFRESH_S, self._maybe_reload)

    def on_screen_resume(self) -> None:
        self.action_reload()

    def draw(self, model: ConsoleState) -> None:
        self.query_one(HeaderBar).draw(model, screen="results")

    def _maybe_reload(self) -> None:
        if self.is_current:
            self.action_reload()

    def action_reload(self) -> None:
        # the GPU count the telemetry saw (host.facts may run `vllm --version` on a real host: not on the loop)
        # a replay's results are the recording's runs (those ended by the moment replayed), not this host's
        recorded = list(self.state.runs_done) if self.replaying else None
        self._load(len(self.state.gpus) or None, recorded, self.scope)

    def _title(self) -> str:
        scopes = [scope.ALL_RUNS, *self.data.campaigns]
        which = f"campaign {self.scope}" if self.scope else "all runs"
        at = scopes.index(self.scope) + 1 if self.scope in scopes else 1
        pick = f" (s: scope, {at} of {len(scopes)})" if len(scopes) > 1 else ""
        return f"Runs compared: {which}{pick} · * best in its workload and rate · ± 95% interval over repeats"

    def action_next_scope(self) -> None:
        """Every run, then each campaign, newest first, and round again."""
        scopes = [scope.ALL_RUNS, *self.data.campaigns]
        at = scopes.index(self.scope) if self.scope in scopes else 0
        self.scope = scopes[(at + 1) % len(scopes)]
        self.query_one("#results-table", DataTable).border_title = self._title()
        self.action_reload()

    @work(exclusive=True, group="results", thread=True, exit_on_error=False, description="reading results")
    def _load(self, gpus: int | None, recorded: list[BenchDone] | None, campaign: str) -> None:
        data = load_results(self.ctx.catalog, gpus, recorded=recorded, campaign=campaign)
        data.gpus = gpus
        self.app.call_from_thread(self._show, data)

    def _show(self, data: ResultsData) -> None:
        stamp = (data.scoped.label, len(data.runs),
                 max((r.meta.ended or r.meta.started for r in data.runs), default=0.0), data.gpus or 0)
        # the GPU count is part of it: a first load before the telemetry's first sample judged without it, and the
        # reload that knows it must not be skipped as the same runs (the recommendation's reasons name it)
        if stamp == self.data.stamp and self.data.frame is not None and data.campaigns == self.data.campaigns:
            return
        data.stamp = stamp
        self.data = data
        self.scope = data.scoped.campaign  # a campaign that is gone falls back to every run
        t = self.query_one("#results-table", DataTable)
        t.border_title = self._title()
        t.clear(columns=True)
        rec_text = self.query_one("#rec-text", Static)
        if data.frame is None:
            if self.replaying:
                t.add_column("no run of the recording has ended by the moment replayed")
                rec_text.update(Text("The recording's runs appear here as the replay reaches their end.",
                                     style="dim"))
            else:
                t.add_column("no runs stored yet")
                rec_text.update(Text("Run a benchmark (b) or a campaign (c): their results appear here.",
                                     style="dim"))
            return
        knob_cols = table.knob_columns(data.frame)
        lead = ["topology", *knob_cols, *(["setup"] if "setup" in data.frame.columns else []), "workload", "rate"]
        apart = any(c.left_out for c in data.cells)
        rows = list(data.frame.iter_rows(named=True))
        for k in lead:  # the label columns as wide as their longest (two loads in one frame left them as narrow
            # as their headers: "decode-h", "trit")
            label = k.removeprefix(table.KNOB_PREFIX)
            widest = max((cell_len(str(r[k])) + (len(f" (n={r['runs']})") if k == "topology" and r["runs"] > 1 else 0)
                          for r in rows), default=0)
            t.add_column(label, key=k, width=max(len(label), widest))
        for c in table.COLUMNS:
            t.add_column(c.title, key=c.key)
        t.add_column("flags", key="flags")
        if apart:  # a run in no figure: its status says why
            t.add_column("status", key="status")
        self._keys = list(data.cells)
        for i, (cell, r) in enumerate(zip(data.cells, rows, strict=True)):
            dim = "dim" if not cell.ranked else ""
            cells: list[Any] = [Text(str(r[k]) + (f" (n={r['runs']})" if k == "topology" and r["runs"] > 1 else ""),
                                     style=dim or ("cyan" if k in knob_cols else "")) for k in lead]
            for c in table.COLUMNS:
                text = table.cell_text(r, c, markdown=False)
                cells.append(Text(text, style="bold green" if r[f"{c.key}_best"] else dim, justify="right"))
            cells.append(Text(r["flags"] or "", style="yellow"))
            if apart:
                cells.append(Text(r["status"], style="red" if cell.left_out else ""))
            t.add_row(*cells, key=str(i))
        body = Text()
        if data.note:
            body.append(data.note + "\n", style="bold yellow")
        if not data.runs:
            body.append(f"No run in {data.scoped.label} yet.", style="dim")
        if data.recommendation is not None:
            for i, line in enumerate(rec_mod.render(data.recommendation).split("\n")):
                # what a winner's knobs moved its figure by: the line to read when knobs were swept
                body.append(("\n" if i else "") + line, style="cyan" if "knobs of the winner:" in line else "")
        for e in data.errors:
            body.append(f"\n{e}", style="red")
        rec_text.update(body)
        self._sweep(data)
        self._knob_chart()

    def _sweep(self, data: ResultsData) -> None:
        series: dict[str, list[tuple[float, float]]] = {}
        for c in data.cells:
            tps, tpot = c.values.get("output_throughput"), c.values.get("mean_tpot_ms")
            if tps is None or tpot is None or not c.ranked:
                continue  # a curve is one layout's rates of one workload, measured alike
            series.setdefault(f"{c.layout} {c.unit}", []).append((tps.mean, tpot.mean))
        sweeps = {k: sorted(v) for k, v in series.items() if len(v) > 1}
        chart = self.query_one("#sweep", XYChart)
        chart.set_series(sweeps)
        # with knobs that vary, the knob chart has the room unless there are rate sweeps to draw too
        chart.display = bool(sweeps) or not knob_view.varying_keys(data.cells)

    def _knob_chart(self) -> None:
        """One knob's values side by side (the knob ``k`` chose, the figure ``f`` chose), where knobs vary."""
        chart = self.query_one("#knob-chart", BarChart)
        keys = knob_view.varying_keys(self.data.cells)
        chart.display = bool(keys)
        if not keys:
            return
        if self.chart_knob not in keys:
            self.chart_knob = keys[0]
        figure, name, higher = knob_view.FIGURES[self.chart_figure % len(knob_view.FIGURES)]
        groups = knob_view.knob_groups(self.data.cells, self.chart_knob, figure, higher)
        head = Text("knob ", style="bold")
        head.append(self.chart_knob, style="bold cyan")
        head.append(f" · {name} ({'↑' if higher else '↓'} better)", style="bold")
        keys_line = Text(f"k: next knob ({len(keys)}) · f: next figure", style="dim")
        chart.set_groups(head, [(g.label, [(b.value, b.figure, b.best, b.flag) for b in g.bars]) for g in groups],
                         legend=[keys_line])

    def action_next_knob(self) -> None:
        keys = knob_view.varying_keys(self.data.cells)
        if not keys:
            self.notify("no knob varies among these runs (a campaign with --knob axes has them)", timeout=4)
            return
        at = keys.index(self.chart_knob) if self.chart_knob in keys else -1
        self.chart_knob = keys[(at + 1) % len(keys)]
        self._knob_chart()

    def action_next_figure(self) -> None:
        self.chart_figure = (self.chart_figure + 1) % len(knob_view.FIGURES)
        self._knob_chart()

    def _current_cell(self) -> table.Cell | None:
        t = self.query_one("#results-table", DataTable)
        if not self._keys or t.cursor_row < 0 or t.cursor_row >= len(self._keys):
            return None
        return self._keys[t.cursor_row]

    @on(DataTable.RowSelected, "#results-table")
    def _selected(self, _: DataTable.RowSelected) -> None:
        self.action_details()

    def action_details(self) -> None:
        cell = self._current_cell()
        if cell is not None:
            self._details(cell)

    @work(exclusive=True, group="details", thread=True, exit_on_error=False, description="a run's details")
    def _details(self, cell: table.Cell) -> None:
        from tui.console.screens.modals import TextModal

        body = Text()
        for run in cell.runs:
            body.append(f"{run.id}  ({run.meta.status})\n", style="bold")
            body.append(f"  {run.path}\n", style="dim")
            if run.meta.flags:
                body.append(f"  flags: {', '.join(run.meta.flags)}\n", style="yellow")
            body.append(request_distribution(run) + "\n")
            fp = run.meta.fingerprint or {}
            if fp:
                body.append("  fingerprint: " + ", ".join(f"{k}={v}" for k, v in sorted(fp.items())
                                                          if not isinstance(v, dict | list)) + "\n", style="dim")
            plan = plan_shell(run.path)
            if plan is not None:
                shell, ok = plan
                body.append("  plan:\n", style="bold")
                body.append("    " + shell.replace("\n", "\n    ") + "\n", style="cyan" if ok else "red")
            body.append("\n")
        title = f"{cell.topology} × {cell.workload} @ {table.rate_label(cell.rate)}"
        self.app.call_from_thread(self.app.push_screen, TextModal(title, body))

    def action_export(self, kind: str) -> None:
        if self.data.frame is None:
            self.notify("nothing to export", timeout=3)
            return
        self._export(kind)

    @work(group="export", thread=True, exit_on_error=False, description="export")
    def _export(self, kind: str) -> None:
        folder = paths.data_dir() / "exports"
        which = f"-{self.data.scoped.campaign}" if self.data.scoped.campaign else ""
        out = folder / f"results{which}-{time.strftime('%Y%m%d-%H%M%S')}.{kind}"
        text = export_text(self.data, kind)
        try:  # in the data folder: checked, never through a link
            safewrite.write_atomic(out, text + "\n", root=paths.data_dir())
        except OSError as exc:
            raise AppError(f"cannot write {out}: {exc.strerror or exc}") from None
        self.app.call_from_thread(self.notify, str(out), title=f"exported {kind}")
