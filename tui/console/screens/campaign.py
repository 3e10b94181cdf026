"""Campaign: a bake-off (topologies × workloads × rates × repeats), its grid filling in, the current cell live.

Each cell shows the mean output tok/s and mean TPOT of its good repeats, ★ marking the best of each objective among
the campaign's layouts (the results' comparison: a run that failed or completed no request shows its status and is
in no figure); a running campaign says when it should end (:func:`tui.core.bench.campaigns.eta`: the cells left times
the mean cell measured so far, plus the layouts left times the mean bring-up), an ended one its recommendation.

A campaign started here is ``disagg-tui run`` started detached: it keeps running when the console exits or the
SSH connection drops, and this screen (in any console, later) shows it from its directory (``campaign.json`` and
each cell's run), the live figures of the cell being measured from the servers' ``/metrics``. Resume is ``run``'s:
the same campaign again skips the cells already complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Footer, Input, Label, OptionList, SelectionList, Static
from textual.widgets.option_list import Option

from tui.console import fmt
from tui.console.campaigns import CampaignState, CellState, campaigns
from tui.console.context import ConsoleContext
from tui.console.messages import CampaignChoice, CampaignRequested, CampaignResumeRequested
from tui.console.screens.base import ConsoleScreen
from tui.console.screens.launch import candidate_topologies
from tui.console.state import ConsoleState
from tui.console.widgets.checklist import CheckList
from tui.console.widgets.header import HeaderBar
from tui.core import paths
from tui.core.bench.campaigns import span

REFRESH_S = 2.0
STATUS_STYLE = {"complete": fmt.OK, "failed": fmt.BAD, "incomplete": fmt.WARN, "running": fmt.BUSY}


#: how a grid marks the best of an objective among the campaign's layouts
BEST = "★"


def _cell_text(state: CampaignState, cells: list[CellState], key: tuple[str, str, str]) -> Text:
    """A grid cell: the mean output tok/s and mean TPOT of its good repeats (★ where best of its column), then the
    repeats that measured nothing, each with its status."""
    parts = Text()
    fig = state.figures.get(key)
    if fig is not None:
        tps, tpot, good = (fig.values.get(k) for k in ("output_throughput", "mean_tpot_ms", "request_goodput"))
        for value, text, objective in ((tps, f"{fmt.num(tps)} tok/s", "output_throughput"),
                                       (tpot, f"TPOT {tpot:.1f} ms" if tpot is not None else "", "mean_tpot_ms"),
                                       (good, f"goodput {good:.2f}" if good is not None else "",
                                        "request_goodput")):
            if value is None:
                continue
            if parts:
                parts.append("\n")
            best = objective in fig.best
            parts.append(text + (f" {BEST}" if best else ""), style="bold green" if best else fmt.OK)
        if fig.repeats > 1:
            parts.append(f" (n={fig.repeats})", style=fmt.DIM)
    for c in sorted(cells, key=lambda c: c.repeat):
        if c.status == "complete" and not c.left_out:
            continue  # in the figures above
        if parts:
            parts.append("\n")
        label = "no request completed" if c.status == "complete" else c.status
        parts.append(label, style=STATUS_STYLE.get(c.status, fmt.BAD) if c.status != "complete" else fmt.BAD)
    return parts


def grid(state: CampaignState) -> Table:
    """Topologies down, workloads (and rates) across; each cell its figures (the best of each objective marked) or
    its status."""
    spec = state.spec
    topos = list(spec.get("topologies", [])) or sorted({c.topology for c in state.cells})
    columns: list[tuple[str, str]] = []
    for c in state.cells:
        key = (c.workload, c.rate)
        if key not in columns:
            columns.append(key)
    for w in spec.get("workloads", []):
        if not any(k[0] == w for k in columns):
            columns.append((w, ""))
    t = Table(expand=True, box=None, pad_edge=False)
    t.add_column("topology", style="bold")
    for w, r in columns:
        t.add_column(f"{w}" + (f" @{r}" if r and r != "inf" else ""), justify="right")
    for topo in topos:
        row: list[Text | str] = [topo]
        for w, r in columns:
            cells = [c for c in state.cells if c.topology == topo and c.workload == w and (not r or c.rate == r)]
            if not cells:
                row.append(Text("pending", style=fmt.DIM))
                continue
            row.append(_cell_text(state, cells, (topo, w, r)))
        t.add_row(*row)
    return t


def verdict(state: CampaignState) -> Text:
    """Under the grid: what ★ means; when the campaign should end (while it runs) and how that is computed; the
    recommendation once it has ended."""
    out = Text()
    if any(f.best for f in state.figures.values()):
        out.append(f"{BEST} best of its column: most output tok/s, lowest mean TPOT, most goodput (req/s within the "
                   "SLO)\n", style=fmt.DIM)
    if state.eta is not None:
        out.append(f"ETA ~{span(state.eta.seconds)}", style="bold")
        out.append(f" = {state.eta.how()}\n", style=fmt.DIM)
    elif state.running:
        out.append("ETA: once a cell has been measured\n", style=fmt.DIM)
    if state.recommendation:
        out.append("Recommendation\n", style="bold")
        for line in state.recommendation:
            out.append(f"  {line}\n")
    return out


class CampaignScreen(ConsoleScreen):
    AUTO_FOCUS = "#c-topologies"
    BINDINGS: ClassVar[list[BindingType]] = [
        # not priority: a burst like the README's "Down Space C-s" reaches the list (Down, Space) before ctrl+s
        # starts what the boxes then say (a priority key is taken as it arrives, ahead of the keys typed before it)
        Binding("ctrl+s", "start", "start campaign"),
        Binding("ctrl+r", "resume", "resume selected"),
        Binding("escape", "app.mode('dashboard')", "dashboard"),
    ]

    #: what a replay does not offer (it launches nothing)
    LIVE_ACTIONS: ClassVar[frozenset[str]] = frozenset({"start", "resume"})

    def __init__(self, ctx: ConsoleContext, state: ConsoleState) -> None:
        super().__init__(ctx, state)
        self.states: list[CampaignState] = []
        self.selected: str | None = None

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        with Horizontal(id="campaign-body"):
            with VerticalScroll(id="campaign-form"):
                yield Label("model")
                yield OptionList(id="c-model")
                yield Label("topologies (space ticks)")
                yield CheckList(id="c-topologies")
                yield Label("workloads")
                yield CheckList(id="c-workloads")
                # Static, not Label: the words wrap in the form's width (30 columns at 80) instead of being cut
                yield Static("rates: empty for the workload's, auto, or a list (1,2,4)", classes="form-label")
                yield Input(id="c-rates", placeholder="the workload's", compact=True)
                yield Static("repeats · prompts per run", classes="form-label")
                with Horizontal(classes="knob-row"):
                    yield Input(value="1", id="c-repeat", placeholder="1", compact=True)
                    yield Input(id="c-prompts", placeholder="the workload's", compact=True)
                yield Button("Start (ctrl+s)", id="c-start", variant="primary")
            with VerticalScroll(id="campaign-live"):  # a long grid and its verdict scroll (80×24)
                cl = OptionList(id="c-list")
                cl.border_title = "Campaigns on this host"
                yield cl
                yield Static(id="c-grid")
                yield Static(id="c-current")
        yield Footer()

    def on_mount(self) -> None:
        for i in self.query(Input):  # no blinking cursor: no repaint twice a second over SSH
            i.cursor_blink = False
        ctx = self.ctx
        models = self.query_one("#c-model", OptionList)
        for mid in sorted(ctx.catalog.models):
            models.add_option(Option(mid, id=mid))
        lay = self.state.layout or self.state.last_layout  # the model up, or up last
        ids = sorted(ctx.catalog.models)
        if ids:
            models.highlighted = ids.index(lay.profile_id) if lay is not None and lay.profile_id in ids else 0
        # the GPU count the telemetry saw (host.facts may run `vllm --version` on a real host: not on the loop)
        gpus = len(self.state.gpus) or (len(ctx.host.facts.gpus) if ctx.host is not None and
                                                 ctx.host.simulated else 2)
        topos = self.query_one("#c-topologies", SelectionList)
        for t in candidate_topologies(gpus):
            topos.add_option((t, t, t in ("dp2", "tp2", "1p1d")))
        wls = self.query_one("#c-workloads", SelectionList)
        for name in sorted(ctx.catalog.workloads):
            wls.add_option((name, name, name in ("decode-heavy", "prefill-heavy")))
        self.refresh_list()
        self.set_interval(REFRESH_S, self.refresh_list)

    def draw(self, model: ConsoleState) -> None:
        self.query_one(HeaderBar).draw(model, screen="campaign")
        self.query_one("#c-current", Static).update(self._current(model))

    # --- the campaigns ---------------------------------------------------------------------------------------
    def refresh_list(self) -> None:
        if self.is_current or not self.states:
            self._read()

    @work(exclusive=True, group="campaigns", thread=True, exit_on_error=False, description="reading campaigns")
    def _read(self) -> None:
        states = campaigns(limit=15, gpus=len(self.state.gpus) or None)
        self.app.call_from_thread(self._show, states)

    def _show(self, states: list[CampaignState]) -> None:
        self.states = states
        ol = self.query_one("#c-list", OptionList)
        keep = self.selected
        ol.clear_options()
        for s in states:
            mark = Text("● running  ", style=fmt.BUSY) if s.running else Text("           ")
            ol.add_option(Option(mark + Text(f"{s.name}  {s.done}/{s.total} cells"), id=s.name))
        names = [s.name for s in states]
        if names:
            pick = keep if keep in names else names[0]
            ol.highlighted = names.index(pick)
            self.selected = pick
        self._show_grid()

    @on(OptionList.OptionHighlighted, "#c-list")
    def _pick(self, event: OptionList.OptionHighlighted) -> None:
        self.selected = event.option.id
        self._show_grid()

    def _show_grid(self) -> None:
        state = next((s for s in self.states if s.name == self.selected), None)
        g = self.query_one("#c-grid", Static)
        if state is None:
            g.update(Text("No campaign on this host yet: choose topologies and workloads, then ctrl+s.",
                          style="dim"))
            return
        head = Text()
        head.append(f"{state.name}", style="bold")
        head.append(f"  {state.spec.get('model', '')} · {state.done}/{state.total} cells · ")
        head.append("running" if state.running else "not running (ctrl+r resumes)",
                    style=fmt.BUSY if state.running else fmt.DIM)
        head.append(f"\n{_where(state.directory)}\n", style="dim")
        g.update(_stack(head, grid(state), verdict(state)))

    def _current(self, model: ConsoleState) -> Text:
        state = next((s for s in self.states if s.name == self.selected), None)
        if state is None or not state.running:
            return Text()
        cell = next((c for c in state.cells if c.status == "running"), None)
        t = Text("\nNow: ", style="bold")
        if cell is not None:
            t.append(f"{cell.topology} × {cell.workload} @ {cell.rate} (repeat {cell.repeat})\n")
        gen = sum(v.figures.generation_tps or 0.0 for v in model.servers.values()
                  if v.figures is not None and v.role != "proxy")
        running = sum(v.figures.running or 0.0 for v in model.servers.values()
                      if v.figures is not None and v.role != "proxy")
        ttfts = [v.figures.ttft.p50 for v in model.servers.values() if v.figures is not None and v.figures.ttft
                 and v.figures.ttft.p50 is not None and v.role != "proxy"]
        t.append(f"servers: {fmt.num(gen)} gen tok/s · {running:.0f} running · TTFT p50 "
                 f"{fmt.ms(max(ttfts)) if ttfts else '—'} (from /metrics)")
        return t

    # --- starting ------------------------------------------------------------------------------------------
    @on(Button.Pressed, "#c-start")
    def _start_button(self) -> None:
        self.action_start()

    def action_start(self) -> None:
        """The campaign the form describes, asked of the app (which starts ``disagg-tui run``, or says why not)."""
        ol = self.query_one("#c-model", OptionList)
        if ol.highlighted is None:
            return
        model = ol.get_option_at_index(ol.highlighted).id
        topos = tuple(self.query_one("#c-topologies", SelectionList).selected)
        wls = tuple(self.query_one("#c-workloads", SelectionList).selected)
        if not topos or not wls or model is None:
            self.notify("choose at least one topology and one workload", severity="warning", timeout=4)
            return
        repeat_text = self.query_one("#c-repeat", Input).value.strip() or "1"
        prompts_text = self.query_one("#c-prompts", Input).value.strip()
        if not repeat_text.isdigit() or int(repeat_text) < 1 or (prompts_text and not prompts_text.isdigit()):
            self.notify("repeats and prompts are positive integers", severity="error", timeout=5)
            return
        rates = self.query_one("#c-rates", Input).value.strip() or None
        self.post_message(CampaignRequested(CampaignChoice(
            model=model, topologies=topos, workloads=wls, rates=rates, repeat=int(repeat_text),
            num_prompts=int(prompts_text) if prompts_text else None)))
        self.set_timer(1.5, self._read)  # the list shows it once it has written its campaign file

    def action_resume(self) -> None:
        state = next((s for s in self.states if s.name == self.selected), None)
        if state is None:
            return
        if state.running:
            self.notify(f"{state.name} is running", timeout=3)
            return
        spec = state.spec
        rates = spec.get("rates")
        self.post_message(CampaignResumeRequested(state.name, CampaignChoice(
            model=str(spec.get("model", "")), topologies=tuple(spec.get("topologies", [])),
            workloads=tuple(spec.get("workloads", [])),
            rates=",".join(rates) if isinstance(rates, list) else rates, repeat=int(spec.get("repeat", 1) or 1),
            num_prompts=spec.get("num_prompts"), runner=str(spec.get("client", "ours")))))
        self.set_timer(1.5, self._read)


def _where(directory: Path) -> str:
    """The campaign's folder, relative to the data directory when it lies there (shorter, and the same on every
    host)."""
    try:
        return f"<data dir>/{directory.relative_to(paths.data_dir())}"
    except ValueError:
        return str(directory)


def _stack(head: Text, body: Table, tail: Text) -> Table:
    outer = Table.grid(expand=True)
    outer.add_row(head)
    outer.add_row(body)
    if tail:
        outer.add_row(Text())
        outer.add_row(tail)
    return outer
