"""Campaign: a bake-off (topologies × workloads × rates × repeats), its grid filling in, the current cell live.

Each cell shows the mean output tok/s and mean TPOT of its good repeats, ★ marking the best of each objective among
the campaign's layouts (the results' comparison: a run that failed or completed no request shows its status and is
in no figure); a running campaign says when it should end (:func:`tui.core.bench.campaigns.eta`: the cells left times
the mean cell measured so far, plus the layouts left times the mean bring-up), an ended one its recommendation.

A campaign started here is ``disagg-tui run`` started detached: it keeps running when the console exits or the
SSH connection drops, and this screen (in any console, later) shows it from its directory (``campaign.json`` and
each cell's run), the live figures of the cell being measured from the servers' ``/metrics``. Resume is ``run``'s:
the same campaign again skips the cells already complete.

Serve knobs are axes beside the topologies (``run --knob K=V1,V2``): the form lists every value of the catalogue
(``profiles/knobs.yaml``) that the model, GPU and topologies chosen may take, the ones that fit none of them greyed
(the reason under the list when highlighted), and says how many layouts (topology × configurations) and cells the
axes make, with each layout the planner refuses in one line (its cells fail at once, as ``run`` refuses it). The
grid has a row per layout: its topology and its knob label.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
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
from textual.widgets.selection_list import Selection

from tui.console import fmt
from tui.console.campaigns import CampaignState, CellState, campaigns
from tui.console.context import ConsoleContext
from tui.console.knobs import (
    AxisValue,
    CampaignShape,
    axes_texts,
    axis_values,
    campaign_shape,
    parse_axes,
    set_axis_value,
)
from tui.console.messages import CampaignChoice, CampaignRequested, CampaignResumeRequested
from tui.console.safetext import text
from tui.console.screens.base import ConsoleScreen
from tui.console.screens.launch import candidate_topologies
from tui.console.state import ConsoleState
from tui.console.widgets.checklist import CheckList
from tui.console.widgets.header import HeaderBar
from tui.core import paths
from tui.core.bench.campaigns import span
from tui.core.errors import AppError
from tui.core.models import ModelProfile
from tui.core.plan.hostfacts import HostFacts
from tui.core.plan.knobs import KnobCatalog
from tui.core.plan.request import LaunchRequest, plan_request
from tui.core.plan.spec import LaunchPlan

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


def _layout_label(topology: str, config: str) -> Text:
    """A grid row's head: the topology, its knob configuration under it (dim)."""
    t = Text(topology, style="bold")
    if config:
        t.append(f"\n{config}", style=fmt.DIM)
    return t


def grid(state: CampaignState) -> Table:
    """Layouts (topologies, each with its knob configurations) down, workloads (and rates) across; each cell its
    figures (the best of each objective marked) or its status."""
    spec = state.spec
    columns: list[tuple[str, str]] = []
    for c in state.cells:
        key = (c.workload, c.rate)
        if key not in columns:
            columns.append(key)
    for w in spec.get("workloads", []):
        if not any(k[0] == w for k in columns):
            columns.append((w, ""))
    # a layout's head is two lines (its topology, its knobs) as its cells are: a blank line between layouts
    t = Table(expand=True, box=None, pad_edge=False, padding=(0, 1, 1, 0) if state.configs else (0, 1))
    t.add_column("layout" if state.configs else "topology")
    for w, r in columns:
        t.add_column(text(f"{w}" + (f" @{r}" if r and r != "inf" else "")), justify="right")  # a str is markup
    for topo, config in state.layouts():
        row: list[Text | str] = [_layout_label(topo, config)]
        for w, r in columns:
            cells = [c for c in state.cells if c.topology == topo and c.config == config and c.workload == w
                     and (not r or c.rate == r)]
            if not cells:
                row.append(Text("pending", style=fmt.DIM))
                continue
            row.append(_cell_text(state, cells, (cells[0].layout, w, r)))
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


@dataclass
class KnobJudgement:
    """The form's knob values for the model and topologies chosen, and the layouts its axes make (a thread's)."""

    values: list[AxisValue] = field(default_factory=list)
    shape: CampaignShape = field(default_factory=CampaignShape)
    topologies: tuple[str, ...] = ()
    problem: str = ""  # the catalogue does not read


def _rates_count(text: str) -> int | None:
    """How many rates a campaign sweeps per workload (None: auto, known after the saturation run)."""
    t = text.strip()
    if t == "auto":
        return None
    return max(1, len([r for r in t.split(",") if r.strip()])) if t else 1


def shape_text(shape: CampaignShape, workloads: int, rates: int | None, repeat: int) -> Text:
    """``2 topologies × 4 configurations = 8 layouts · 16 cells``, then each layout the planner refuses."""
    t = Text()
    if shape.error:
        return t
    per = sorted(set(shape.layouts.values()))
    if shape.axes:
        configs = (f"{per[0]} configuration{'s' if per[0] != 1 else ''}" if len(per) == 1 else
                   "their configurations")
        t.append(f"{len(shape.layouts)} topolog{'y' if len(shape.layouts) == 1 else 'ies'} × {configs} = ",
                 style="bold")
    t.append(f"{shape.total} layout{'s' if shape.total != 1 else ''}", style="bold")
    cells = shape.total * workloads * repeat
    if rates is None:
        t.append(f" · {cells} saturation cells, then the auto rates")
    else:
        t.append(f" · {cells * rates} cells")
    if shape.refused:
        t.append(f"\n✖ {len(shape.refused)} of {shape.total} refused here (their cells fail at once):",
                 style=fmt.BAD)
        reasons: dict[str, list[str]] = {}  # one line per reason, the layouts it refuses counted
        for line in shape.refused:
            layout, _, why = line.partition("]: ") if "]: " in line else line.partition(": ")
            reasons.setdefault(why, []).append(layout.split(" [", 1)[0])
        for why, topos in list(reasons.items())[:4]:
            counted = ", ".join(f"{tp} ×{topos.count(tp)}" if topos.count(tp) > 1 else tp
                                for tp in dict.fromkeys(topos))
            t.append(f"\n  {why} ({counted})", style="red")
        if len(reasons) > 4:
            t.append(f"\n  … and {len(reasons) - 4} more reasons", style="red")
    return t


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
        #: the knob catalogue (read in a thread), the plans without knobs by (model, topology), the judgement shown
        self.knob_catalog: KnobCatalog | None = None
        self._bare: dict[tuple[str, str], tuple[ModelProfile | None, LaunchPlan | str]] = {}
        self.judged = KnobJudgement()
        self._judge_gen = 0

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
                yield Static("serve knobs: space ticks the values to sweep", classes="form-label")
                yield CheckList(id="c-knobs")
                yield Static(id="c-knob-note", classes="form-note")
                yield Static("knob axes as text ([ROLE.]NAME=V1,V2 …)", classes="form-label")
                yield Input(id="c-knob-text", placeholder="e.g. attn=auto,triton decode.mnbt=2048,8192",
                            compact=True)
                yield Static(id="c-knob-error", classes="field-error")
                yield Static(id="c-shape", classes="form-note")
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
            models.add_option(Option(text(mid), id=mid))  # an option's str prompt is markup
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
        for w in self.query("#c-knob-error, #c-knob-note, #c-shape"):
            w.display = False
        self.refresh_list()
        self.set_interval(REFRESH_S, self.refresh_list)
        self.rejudge()

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
            t.append(f"{cell.layout} × {cell.workload} @ {cell.rate} (repeat {cell.repeat})\n")
        gen = sum(v.figures.generation_tps or 0.0 for v in model.servers.values()
                  if v.figures is not None and v.role != "proxy")
        running = sum(v.figures.running or 0.0 for v in model.servers.values()
                      if v.figures is not None and v.role != "proxy")
        ttfts = [v.figures.ttft.p50 for v in model.servers.values() if v.figures is not None and v.figures.ttft
                 and v.figures.ttft.p50 is not None and v.role != "proxy"]
        t.append(f"servers: {fmt.num(gen)} gen tok/s · {running:.0f} running · TTFT p50 "
                 f"{fmt.ms(max(ttfts)) if ttfts else '—'} (from /metrics)")
        return t

    # --- the knobs -------------------------------------------------------------------------------------------
    def _model(self) -> str | None:
        ol = self.query_one("#c-model", OptionList)
        return ol.get_option_at_index(ol.highlighted).id if ol.highlighted is not None else None

    def _axes_text(self) -> str:
        return self.query_one("#c-knob-text", Input).value

    @on(OptionList.OptionHighlighted, "#c-model")
    @on(SelectionList.SelectedChanged, "#c-topologies, #c-workloads")
    @on(Input.Changed, "#c-knob-text, #c-rates, #c-repeat")
    def _form_changed(self) -> None:
        self.rejudge()

    def rejudge(self) -> None:
        """The knob values and the layouts for the form as it is now (planned in a thread)."""
        model = self._model()
        if model is None:
            return
        self._judge_gen += 1
        self._judge(model, tuple(self.query_one("#c-topologies", SelectionList).selected),
                    parse_axes(self._axes_text()), self._judge_gen)

    @work(exclusive=True, group="knob-judge", thread=True, exit_on_error=False, description="judging the knobs")
    def _judge(self, model: str, topologies: tuple[str, ...], axes: dict[str, list[str]], gen: int) -> None:
        out = KnobJudgement(topologies=topologies)
        if self.knob_catalog is None:
            try:
                self.knob_catalog = KnobCatalog.load()
            except AppError as err:  # a damaged knobs.yaml of the operator's
                out.problem = err.one_line()
                self.app.call_from_thread(self._judged, gen, out)
                return
        host = self.ctx.host
        facts: HostFacts | None = host.facts if host is not None else None
        profile: ModelProfile | None = None
        plans: dict[str, LaunchPlan | str] = {}
        for topo in topologies:
            if (model, topo) not in self._bare and facts is not None:
                self._bare[(model, topo)] = self._plan(model, topo, facts)
            got = self._bare.get((model, topo))
            if got is not None:
                profile = got[0] or profile
                plans[topo] = got[1]
        out.values = axis_values(self.knob_catalog, topologies, profile, plans, facts, axes)
        out.shape = campaign_shape(self.knob_catalog, axes_texts(axes), topologies, profile, plans, facts)
        self.app.call_from_thread(self._judged, gen, out)

    def _plan(self, model: str, topo: str, facts: HostFacts) -> tuple[ModelProfile | None, LaunchPlan | str]:
        """A topology planned as ``run`` plans it, without knobs (the console's ports), or why it is refused."""
        request = LaunchRequest(model=model, topology=topo, vllm=self.ctx.options.vllm)
        if self.ctx.ports is not None:
            port, server_port, side_channel_port = self.ctx.ports
            request = dataclasses.replace(request, port=port, server_port=server_port,
                                          side_channel_port=side_channel_port)
        try:
            profile, plan = plan_request(request, self.ctx.catalog, facts)
        except AppError as err:
            return None, err.title
        return profile, plan

    def _judged(self, gen: int, judged: KnobJudgement) -> None:
        if gen != self._judge_gen:
            return  # the form changed since: a later judgement is on its way
        self.judged = judged
        self._fill_knobs()
        self._show_shape()

    def _fill_knobs(self) -> None:
        """Every value, ticked where the axes text has it; greyed where it fits none of the topologies chosen."""
        lst = self.query_one("#c-knobs", CheckList)
        keep = lst.highlighted
        axes = parse_axes(self._axes_text())
        ticked = {f"{k}={v}" for k, vs in axes.items() for v in vs}
        topos = self.judged.topologies
        # the plain knobs' values in one column; a role's knob (prefill.mnbt, on a P/D topology) its own, wider
        plain = max((len(v.key) for v in self.judged.values if v.role is None), default=6) + 1
        options: list[Selection[str]] = []
        last = ""
        for v in self.judged.values:
            greyed = v.everywhere(topos)
            width = plain if v.role is None else len(v.key) + 1
            t = Text(f"{v.key if v.key != last else '':<{width}}", style="bold" if v.key != last else "")
            t.append(v.value, style=fmt.DIM if greyed else ("" if not v.default else fmt.DIM))
            if greyed:
                t.append(" ✖", style=fmt.BAD)
            elif v.refused:
                t.append(f" ✖{','.join(v.refused)}", style=fmt.WARN)
            t.no_wrap = True
            t.overflow = "ellipsis"
            last = v.key
            options.append(Selection(t, v.id, v.id in ticked, disabled=greyed and v.id not in ticked))
        with self.prevent(SelectionList.SelectedChanged):
            lst.clear_options()
            lst.add_options(options)
        if keep is not None and options:
            lst.highlighted = min(keep, len(options) - 1)
        self._knob_note()

    @on(SelectionList.SelectedChanged, "#c-knobs")
    def _ticked(self) -> None:
        """A value ticked or unticked: the axes text says it (in the order ticked; a value typed stays)."""
        lst = self.query_one("#c-knobs", CheckList)
        box = self.query_one("#c-knob-text", Input)
        text = box.value
        axes = parse_axes(text)
        have = {f"{k}={v}" for k, vs in axes.items() for v in vs}
        chosen = set(lst.selected)
        for v in self.judged.values:
            if (v.id in chosen) != (v.id in have):
                text = set_axis_value(text, v.key, v.value, v.id in chosen)
        if text != box.value:
            box.value = text

    @on(SelectionList.SelectionHighlighted, "#c-knobs")
    def _knob_highlighted(self) -> None:
        self._knob_note()

    def _knob_note(self) -> None:
        """Under the list: the highlighted value's knob, what it does, and where it does not fit (why)."""
        lst = self.query_one("#c-knobs", CheckList)
        note = self.query_one("#c-knob-note", Static)
        v = self.judged.values[lst.highlighted] if lst.highlighted is not None and \
            lst.highlighted < len(self.judged.values) else None
        if v is None:
            note.update(Text(self.judged.problem, style=fmt.BAD))
            note.display = bool(self.judged.problem)
            return
        t = Text(f"{v.key}={v.value}", style="bold")
        t.append(f"  {v.knob.title}" + (f", {v.role} servers" if v.role else ""), style=fmt.DIM)
        what = v.note or ("vLLM's default: the layout without this knob" if v.default else "")
        if what:
            t.append(f"\n{what}", style=fmt.DIM)
        for topo, why in v.refused.items():
            t.append(f"\n✖ {topo}: {why}", style="red")
        note.update(t)
        note.display = True

    def _show_shape(self) -> None:
        shape = self.judged.shape
        err = self.query_one("#c-knob-error", Static)
        err.update(Text(f"knobs: {shape.error}" if shape.error else "", style="red"))
        err.display = bool(shape.error)
        self.query_one("#c-knob-text", Input).set_class(bool(shape.error), "-invalid")
        box = self.query_one("#c-shape", Static)
        repeat_text = self.query_one("#c-repeat", Input).value.strip()
        repeat = int(repeat_text) if repeat_text.isdigit() and int(repeat_text) > 0 else 1
        workloads = len(self.query_one("#c-workloads", SelectionList).selected)
        rates = _rates_count(self.query_one("#c-rates", Input).value)
        text = shape_text(shape, workloads, rates, repeat) if shape.layouts else Text()
        box.update(text)
        box.display = bool(text)

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
        axes = tuple(axes_texts(parse_axes(self._axes_text())))
        shape = self.judged.shape
        if axes and shape.axes == list(axes) and shape.error:
            self.notify(shape.error, title="the knob axes do not read", severity="error", timeout=6)
            return
        if axes and shape.axes == list(axes) and shape.total and len(shape.refused) == shape.total:
            self.notify(shape.refused[0], title="every layout is refused here", severity="error", timeout=8)
            return
        self.post_message(CampaignRequested(CampaignChoice(
            model=model, topologies=topos, workloads=wls, rates=rates, repeat=int(repeat_text),
            num_prompts=int(prompts_text) if prompts_text else None, knobs=axes)))
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
            num_prompts=spec.get("num_prompts"), runner=str(spec.get("client", "ours")),
            knobs=tuple(str(k) for k in spec.get("knobs") or ()))))
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
