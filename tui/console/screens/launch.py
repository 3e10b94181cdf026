"""Launch: a model and a topology, the serve knobs, the exact plan and its preflight, then launch.

The form is one launch request (``tui.core.plan.request.LaunchRequest``, what ``disagg-tui up`` takes): each
field's mistake shows at once, under its field, and nothing is planned while one is wrong. Every topology that
could fit this host's GPU count is listed with the plan ``up`` makes of the request (``plan_request``, in a thread:
preflight reads ports and NVML); a refused one says why in one line (all of it in the plan pane when highlighted,
and above the list when no topology fits); warnings (MoE + DP) show before launch. A port held by this console's own
layout is said so, and launching then replaces that layout (``up --replace``). Launching posts
``LaunchRequested``: the app starts ``disagg-tui up`` detached with ``request.to_argv()``, so the start goes on
whatever happens to the console; the dashboard follows it.

With hosts of the inventory picked (the hosts list, under the models; none: this host, as before), the topologies
are those that span hosts, each planned by ``plan_across`` (pure: each host's part, its ``up`` arguments), a refused
one (``tp2`` across hosts) with its reason in one line; the highlighted one's exact commands and preflight come from
the hosts themselves (their ``plan PART --json`` and the checks across hosts, an SSH round trip each: a worker, a
line says it is asking), a failed check (a different vLLM on one host) one line in the form. Launching posts
``LaunchRequested`` with the hosts: the app starts the CLI's own ``disagg-tui up --hosts A,B ...`` detached.

The serve knobs come from the catalogue (``profiles/knobs.yaml``, ``tui.console.knobs``): one row per knob the
highlighted topology may take, ←/→ stepping through the values that fit this model, GPU and topology; those that
do not are greyed under the list with the catalogue's reason (EP on a dense model, MTP without an MTP head, a
backend the GPU lacks, no nvcc). What is chosen is the request's ``knob`` text (``attn=triton decode.mnbt=2048``,
also typed by hand: any number, a role, ``ngram:6``), planned as ``up --knob`` plans it: the plan says each knob's
change, and the launch carries them (``--knob=K=V``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Footer, Input, Label, OptionList, SelectionList, Static
from textual.widgets.option_list import Option

from tui.console import across, fmt
from tui.console.context import ConsoleContext
from tui.console.knobs import KnobRow, knob_rows, parse_pairs, set_pair
from tui.console.messages import LaunchRequested
from tui.console.screens.base import ConsoleScreen
from tui.console.state import ConsoleState
from tui.console.widgets.checklist import CheckList
from tui.console.widgets.header import HeaderBar
from tui.console.widgets.knoblist import KnobList
from tui.core.errors import AppError
from tui.core.models.modelsrc import ModelEntry, list_models
from tui.core.plan.cluster import ClusterPlan
from tui.core.plan.knobs import KnobCatalog
from tui.core.plan.preflight import FAIL, WARN, Check, preflight
from tui.core.plan.request import LaunchRequest, RequestInvalid, plan_request
from tui.core.plan.spec import LaunchPlan

#: the form's fields: (the request's value each gives, the flag of ``up`` it is: what its error names)
FIELDS: dict[str, tuple[str, str]] = {
    "gmu": ("gpu_memory_utilization", "--gpu-memory-utilization"), "mml": ("max_model_len", "--max-model-len"),
    "knob": ("knob", "--knob"), "args": ("arg", "--arg"), "env": ("env", "--env"),
}
#: what a form field's error says it is about
FIELD_NAMES = {"gmu": "GPU memory utilisation", "mml": "max model length", "knob": "knobs", "args": "extra args",
               "env": "environment"}
#: layouts whose ports a launch may take over by replacing them (a stopping one is going already)
REPLACEABLE = ("starting", "ready", "degraded", "failed")


def candidate_topologies(gpus: int) -> list[str]:
    """Every topology worth offering on ``gpus`` GPUs (the planner says which fit the model)."""
    out = ["tp1"]
    if gpus >= 2:
        out += [f"tp{gpus}", f"dp{gpus}", "1p1d"]
        if gpus >= 3:
            out += [f"1p{gpus - 1}d", f"{gpus - 1}p1d"]
        for k in (2, 4):
            if 2 * k <= gpus:
                out.append(f"1p1d-tp{k}")
        for n in (2, 4):
            if n < gpus and gpus % n == 0:
                out += [f"tp{n}", f"dp{n}"]
    seen: list[str] = []
    for t in out:
        if t not in seen:
            seen.append(t)
    return seen


@dataclass(frozen=True, slots=True)
class TopologyChoice:
    name: str
    plan: LaunchPlan | None
    refused: str = ""
    #: a layout across hosts: each host's part (``plan`` is None then)
    across: ClusterPlan | None = None

    @property
    def launchable(self) -> bool:
        return self.plan is not None or self.across is not None

    @property
    def label(self) -> Text:
        """One line whatever it says (a long refusal is cut: the plan pane has all of it)."""
        if self.across is not None:
            t = Text(f"{self.name:<10}", style="bold")
            t.append(" " + " · ".join(f"{p.host}: {p.does}" for p in self.across.parts))
        elif self.plan is None:
            t = Text.assemble((f"{self.name:<10}", "dim"), (f" ✖ {self.refused}", "dim red"))
        else:
            t = Text(f"{self.name:<10}", style="bold")
            t.append(f" GPU {','.join(map(str, self.plan.gpus))}")
            if self.plan.warnings:
                t.append("  ▲ " + self.plan.warnings[0], style="yellow")
        t.no_wrap = True
        t.overflow = "ellipsis"
        return t


def held_ports(plan: LaunchPlan, state: ConsoleState) -> list[int]:
    """The HTTP ports of ``plan`` that the console's own layout (the one it shows) holds: launching replaces it."""
    lay = state.layout
    if lay is None or lay.status not in REPLACEABLE:
        return []
    own = {int(v.port) for v in state.servers.values() if v.port}
    tail = lay.endpoint.rsplit(":", 1)[-1].rstrip("/")
    if tail.isdigit():
        own.add(int(tail))
    wanted = [s.port for s in plan.servers] + ([plan.proxy.port] if plan.proxy is not None else [])
    return sorted(own.intersection(wanted))


class LaunchScreen(ConsoleScreen):
    AUTO_FOCUS = "#model-filter"
    BINDINGS: ClassVar[list[BindingType]] = [
        # not a priority key: it comes after the keys typed before it ("qwen3.6 Enter Up C-l" launches the one up)
        Binding("ctrl+l", "launch", "launch"),
        Binding("ctrl+y", "copy_plan", "copy plan"),
        Binding("escape", "app.mode('dashboard')", "dashboard"),
    ]

    #: what a replay does not offer (it launches nothing)
    LIVE_ACTIONS: ClassVar[frozenset[str]] = frozenset({"launch"})
    #: a name typed on the model or topology list filters the models (the README's second launch)
    TYPE_TO_SEARCH = ("#models, #topologies", "#model-filter", "#topologies")

    def __init__(self, ctx: ConsoleContext, state: ConsoleState) -> None:
        super().__init__(ctx, state)
        self.choices: list[TopologyChoice] = []
        self.model_id: str | None = None
        self.topology: str | None = None
        self.current: LaunchPlan | None = None
        self.checks: list[Check] = []
        #: the request the form holds for the topology shown (what launching posts); None while it cannot launch
        self.request: LaunchRequest | None = None
        #: the form's request as last planned (every topology is planned from it)
        self.planned: LaunchRequest | None = None
        #: the ports of the plan shown that this console's own layout holds: launching replaces that layout
        self.held: list[int] = []
        self.entries: list[ModelEntry] = []
        self._gen = 0
        self._checks: dict[str, list[Check]] = {}
        #: the serve-knob catalogue (read with the models, in a thread), or why it does not read
        self.knob_catalog: KnobCatalog | None = None
        self.knob_problem = ""
        #: each topology's knob rows as last planned: every value with why it does not fit there
        self.knob_rows: dict[str, list[KnobRow]] = {}
        #: the inventory's hosts (what the hosts list offers), and the hosts' own answers for a layout across them:
        #: (hosts, topology, the request's argv) → what they said (absent: being asked)
        self.host_names: list[str] = []
        self.answers: dict[tuple[tuple[str, ...], str, tuple[str, ...]], across.HostsAnswer] = {}

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        with Horizontal(id="launch-body"):
            with VerticalScroll(id="launch-left"):  # 80×24: the form scrolls; a field that takes the focus shows
                yield Input(placeholder="filter models (type part of a name)", id="model-filter", compact=True)
                models = OptionList(id="models")
                models.border_title = "Model"
                yield models
                hosts = CheckList(id="hosts")  # [x] / [ ]: picked is said in characters, not colour alone
                hosts.border_title = "Hosts (space; none: here)"
                yield hosts
                yield Static(id="topology-note", classes="form-note")
                topologies = OptionList(id="topologies")
                topologies.border_title = "Topology"
                yield topologies
                serve = KnobList(id="serve-knobs")
                serve.border_title = "Serve knobs (←→)"
                yield serve
                yield Static(id="knob-detail", classes="form-note")
                with Vertical(id="knobs"):
                    yield Label("GPU memory utilisation · max model length")
                    with Horizontal(classes="knob-row"):
                        yield Input(placeholder="profile's", id="gmu", compact=True)
                        yield Input(placeholder="profile's", id="mml", compact=True)
                    yield Static(id="gmu-error", classes="field-error")
                    yield Static(id="mml-error", classes="field-error")
                    yield Label("knobs as text ([ROLE.]NAME=VALUE …)")
                    yield Input(placeholder="e.g. attn=triton decode.mnbt=2048", id="knob", compact=True)
                    yield Static(id="knob-error", classes="field-error")
                    yield Label("extra vllm serve args")
                    yield Input(placeholder="e.g. --enforce-eager", id="args", compact=True)
                    yield Static(id="args-error", classes="field-error")
                    yield Label("extra environment (K=V …)")
                    yield Input(placeholder="e.g. VLLM_USE_FLASHINFER_SAMPLER=0", id="env", compact=True)
                    yield Static(id="env-error", classes="field-error")
                    yield Static(id="form-error", classes="field-error")
                    yield Button("Launch (ctrl+l)", id="launch", variant="primary")
            with VerticalScroll(id="plan-view"):
                yield Static(id="plan-text")
        yield Footer()

    def on_mount(self) -> None:
        for i in self.query(Input):  # no blinking cursor: no repaint twice a second over SSH
            i.cursor_blink = False
        for s in self.query(".field-error, .form-note"):
            s.display = False
        self.query_one("#plan-view").border_title = "Plan"
        self.query_one("#hosts").display = False  # shown once the inventory names hosts
        self._list_models()

    @work(exclusive=True, group="models", thread=True, exit_on_error=False, description="listing models")
    def _list_models(self) -> None:
        entries = list_models(self.ctx.catalog)
        try:
            knobs, problem = KnobCatalog.load(), ""
        except AppError as err:  # a damaged knobs.yaml of the operator's: the text field still works
            knobs, problem = None, err.one_line()
        names, _ = across.inventory_names() if self.ctx.replay is None else ([], "")
        self.app.call_from_thread(self._show_models, entries, knobs, problem, names)

    def _show_models(self, entries: list[ModelEntry], knobs: KnobCatalog | None = None, problem: str = "",
                     host_names: list[str] | None = None) -> None:
        """Shipped and operator profiles, then what the Hugging Face cache and the model folders hold; the
        inventory's hosts (a layout across them), when it names some."""
        self.entries = entries
        self.knob_catalog, self.knob_problem = knobs, problem
        self.show_hosts(host_names or [])
        self._fill_models()

    def show_hosts(self, names: list[str]) -> None:
        """The hosts list: the inventory's hosts, none picked (this host, as before)."""
        self.host_names = list(names)
        lst = self.query_one("#hosts", SelectionList)
        with self.prevent(SelectionList.SelectedChanged):
            lst.clear_options()
            lst.add_options([(n, n) for n in names])  # a CheckList highlights the first: space picks it at once
        lst.display = bool(names)

    @property
    def hosts(self) -> tuple[str, ...]:
        """The hosts picked, in the inventory's order (the first: the head, or the prefill host)."""
        picked = set(self.query_one("#hosts", SelectionList).selected)
        return tuple(n for n in self.host_names if n in picked)

    @on(SelectionList.SelectedChanged, "#hosts")
    def _hosts_changed(self) -> None:
        self.replan()

    @on(Input.Changed, "#model-filter")
    def _filter_models(self, event: Input.Changed) -> None:
        event.stop()  # not a knob: no replanning for the same model
        self._fill_models()

    def _fill_models(self) -> None:
        q = self.query_one("#model-filter", Input).value.strip().lower()
        entries = [e for e in self.entries if not q or q in e.id.lower() or q in e.title.lower()]
        models = self.query_one("#models", OptionList)
        models.clear_options()
        for e in entries:
            label = Text.assemble((e.id, "bold" if e.problem is None else "dim"))
            label.append(f"  {e.source}", style="cyan" if e.source in ("hf-cache", "folder") else "dim")
            if e.problem:
                label.append(f"  {e.problem}"[:70], style="red")
            models.add_option(Option(label, id=e.ref, disabled=e.problem is not None))
        ok = [i for i, e in enumerate(entries) if e.problem is None]
        lay = self.state.layout
        pick = next((i for i in ok if lay is not None and entries[i].id == lay.profile_id), ok[0] if ok else None)
        if pick is not None:
            models.highlighted = pick
            if entries[pick].ref != self.model_id:
                self.model_id = entries[pick].ref
                self.replan()
        elif self.entries:  # the filter leaves nothing launchable: no plan shown
            if self.model_id is not None:
                self.model_id = None
                self._gen += 1  # a plan still being made for the model before is stale
                self.planned = self.request = self.current = None
            why = "; ".join(f"{e.id}: {e.problem}" for e in entries[:3] if e.problem)
            self.query_one("#plan-text", Static).update(Text(
                f"No launchable model matches {q!r}" + (f" ({why})" if why else "") + ".", style="yellow"))

    def draw(self, model: ConsoleState) -> None:
        self.query_one(HeaderBar).draw(model, screen="launch")

    # --- choices -----------------------------------------------------------------------------------------------
    @on(OptionList.OptionHighlighted, "#models")
    def _model(self, event: OptionList.OptionHighlighted) -> None:
        models = event.option_list
        now = models.get_option_at_index(models.highlighted) if models.highlighted is not None else None
        if now is None or now.id != event.option.id:
            return  # a highlight of a list the filter has since refilled (typed in one burst): not the model shown
        if event.option.id != self.model_id:
            self.model_id = event.option.id
            self.replan()

    @on(OptionList.OptionHighlighted, "#topologies")
    def _topology(self, event: OptionList.OptionHighlighted) -> None:
        self.topology = event.option.id
        self.show_plan()

    @on(OptionList.OptionHighlighted, "#serve-knobs")
    def _knob_row(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        self._knob_detail()
        lst = self.query_one("#serve-knobs", KnobList)
        if lst.has_focus:  # 80×24: the reasons under the list come into view with it (the list first)
            self.call_after_refresh(self._knobs_in_view)

    def _knobs_in_view(self) -> None:
        left = self.query_one("#launch-left", VerticalScroll)
        left.scroll_to_widget(self.query_one("#knob-detail"), animate=False)
        left.scroll_to_widget(self.query_one("#serve-knobs"), animate=False)

    @on(KnobList.Changed)
    def _knob_stepped(self, event: KnobList.Changed) -> None:
        """A knob stepped on the list: the text says it (and its change replans, as typing it would)."""
        event.stop()
        box = self.query_one("#knob", Input)
        row = next((r for r in self.query_one("#serve-knobs", KnobList).rows if r.key == event.key), None)
        box.value = set_pair(box.value, event.key, event.value, row.default if row is not None else "")
        self._knob_detail()

    @on(Input.Submitted, "#knobs Input")
    def _knob(self, _: Input.Submitted) -> None:
        self.replan()

    @on(Input.Submitted, "#model-filter")
    def _filter_done(self) -> None:
        self.query_one("#topologies", OptionList).focus()

    @on(Input.Changed, "#knobs Input")
    def _knob_changed(self, _: Input.Changed) -> None:
        self.replan()

    @on(Button.Pressed, "#launch")
    def _launch_button(self) -> None:
        self.action_launch()

    # --- the form: one launch request ----------------------------------------------------------------------------
    def form_request(self, topology: str = "tp1") -> LaunchRequest:
        """The request the form holds, for ``topology`` (RequestInvalid: every field's mistake at once). The
        console's ports and vllm executable are part of it, as they are of the ``up`` it starts."""
        # across hosts, each host's vllm is the inventory's (this console's --vllm is this host's)
        values: dict[str, Any] = {"model": self.model_id, "topology": topology,
                                  "vllm": None if self.hosts else self.ctx.options.vllm}
        for wid, (key, _) in FIELDS.items():
            text = self.query_one(f"#{wid}", Input).value
            values[key] = text if text.strip() else None
        if self.ctx.ports is not None:
            values["port"], values["server_port"], values["side_channel_port"] = self.ctx.ports
        return LaunchRequest.from_text(values)

    def _read_form(self) -> LaunchRequest | None:
        """The form's request, every field's error shown under it (and cleared where it is right)."""
        problems: dict[str, list[str]] = {}
        request: LaunchRequest | None = None
        try:
            request = self.form_request()
        except RequestInvalid as err:
            problems = err.by_flag()
        for wid, (_, flag) in FIELDS.items():
            if wid == "knob":
                continue  # below: the catalogue reads it too
            said = problems.pop(flag, [])
            self.query_one(f"#{wid}", Input).set_class(bool(said), "-invalid")
            key = FIELDS[wid][0]  # a message that names the setting already is not prefixed with it again
            self._say(f"#{wid}-error", "; ".join(m if m.startswith(key) else f"{FIELD_NAMES[wid]}: {m}"
                                                 for m in said))
        if request is not None and request.knobs and self.knob_catalog is not None:
            try:  # an unknown knob or value is the field's mistake, not a refusal of every topology
                self.knob_catalog.settings(request.knobs)
            except AppError as err:
                problems.setdefault("--knob", []).append(str(getattr(err, "message", err.title)))
                request = None
        said = problems.pop("--knob", [])
        self.query_one("#knob", Input).set_class(bool(said), "-invalid")
        self._say("#knob-error", "; ".join(m if m.startswith("knob") else f"knobs: {m}" for m in said))
        self._say("#form-error", "; ".join(f"{flag}: {m}" for flag, said in problems.items() for m in said))
        return request

    def _say(self, selector: str, text: str) -> None:
        widget = self.query_one(selector, Static)
        widget.update(Text(text, style="red"))
        widget.display = bool(text)

    # --- planning (a thread: host facts may run vllm --version; preflight reads ports and NVML) -----------------
    def replan(self) -> None:
        if self.model_id is None:
            return
        request = self._read_form()
        self._gen += 1  # a plan still being made for the form as it was is stale now
        if request is None:
            self.planned = self.request = self.current = None
            self.query_one("#plan-text", Static).update(
                Text("Nothing is planned while a field is wrong: see the messages under the fields.", style="red"))
            return
        hosts = self.hosts
        if hosts:
            self._plan_across(request, hosts, self._gen)
        else:
            self._plan_all(request, self._gen)

    @work(exclusive=True, group="plan", thread=True, exit_on_error=False, description="planning across hosts")
    def _plan_across(self, request: LaunchRequest, hosts: tuple[str, ...], gen: int) -> None:
        """Each topology that may span ``hosts`` planned as ``up --hosts`` plans it (``plan_across``: pure, no SSH)."""
        remotes = [self.state.remotes[h] for h in hosts if h in self.state.remotes]
        counts = [len(rv.gpus) for rv in remotes if rv.gpus]
        host = self.ctx.host
        gpus = min(counts) if len(counts) == len(hosts) else (len(host.facts.gpus) if host is not None else 1)
        choices = []
        rows: dict[str, list[KnobRow]] = {}
        chosen = dict(request.knobs)
        for topo in across.topologies_across(len(hosts), max(gpus, 1)):
            if self.knob_catalog is not None:  # the knobs the topology takes; each host's own plan judges its part
                rows[topo] = knob_rows(self.knob_catalog, topo, chosen=chosen)
            try:
                plan = across.plan_parts(replace(request, topology=topo), hosts)
                choices.append(TopologyChoice(topo, None, across=plan))
            except AppError as err:
                choices.append(TopologyChoice(topo, None, err.one_line().removeprefix("error: ")))
        self.app.call_from_thread(self._planned, gen, request, choices, {}, rows)

    @work(exclusive=True, group="plan-hosts", thread=True, exit_on_error=False, description="asking the hosts")
    def _ask_hosts(self, key: tuple[tuple[str, ...], str, tuple[str, ...]], plan: ClusterPlan) -> None:
        """Each host's own plan of its part and the preflight across hosts (an SSH round trip each)."""
        answer = across.ask_hosts(plan)
        self.app.call_from_thread(self._answered, key, answer)

    def _answered(self, key: tuple[tuple[str, ...], str, tuple[str, ...]], answer: across.HostsAnswer) -> None:
        self.answers[key] = answer
        if len(self.answers) > 32:
            self.answers.pop(next(iter(self.answers)))
        self.show_plan()

    @work(exclusive=True, group="plan", thread=True, exit_on_error=False, description="planning")
    def _plan_all(self, request: LaunchRequest, gen: int) -> None:
        """Each candidate topology planned as ``up`` plans it (``plan_request``), and preflighted."""
        ctx = self.ctx
        host = ctx.host
        if host is None:
            return
        facts = host.facts
        choices = []
        rows: dict[str, list[KnobRow]] = {}
        chosen = dict(request.knobs)
        for topo in candidate_topologies(len(facts.gpus)):
            bare = replace(request, topology=topo, knobs=())
            if self.knob_catalog is not None:  # every value judged against the plan without knobs
                try:
                    profile, plan = plan_request(bare, ctx.catalog, facts)
                    rows[topo] = knob_rows(self.knob_catalog, topo, profile, plan, facts, chosen)
                except AppError:
                    rows[topo] = knob_rows(self.knob_catalog, topo, chosen=chosen)
            try:
                choices.append(TopologyChoice(topo, plan_request(replace(request, topology=topo), ctx.catalog,
                                                                 facts)[1]))
            except AppError as err:
                choices.append(TopologyChoice(topo, None, err.title))
        nvml: Any = None
        with contextlib.suppress(Exception):
            nvml = host.nvml()
        checks: dict[str, list[Check]] = {}
        for c in choices:
            if c.plan is not None:
                checks[c.name] = preflight(c.plan, facts, nvml)
        self.app.call_from_thread(self._planned, gen, request, choices, checks, rows)

    def _planned(self, gen: int, request: LaunchRequest, choices: list[TopologyChoice],
                 checks: dict[str, list[Check]], rows: dict[str, list[KnobRow]] | None = None) -> None:
        if gen != self._gen:  # a later choice or knob is being planned: this one is stale
            return
        self.planned = request
        self.knob_rows = rows or {}
        self.choices = choices
        self._checks = checks
        ol = self.query_one("#topologies", OptionList)
        keep = self.topology
        ol.clear_options()
        for c in choices:
            ol.add_option(Option(c.label, id=c.name))
        names = [c.name for c in choices if c.launchable]
        if names:
            pick = keep if keep in names else ("1p1d" if "1p1d" in names else names[0])
        else:
            pick = keep if keep in (c.name for c in choices) else choices[0].name if choices else None
        if pick is not None:
            ol.highlighted = [c.name for c in choices].index(pick)
            self.topology = pick
        refused = [c for c in choices if not c.launchable]
        note = f"No topology fits: {refused[0].refused}" if choices and len(refused) == len(choices) else ""
        self._say("#topology-note", note)
        self.show_plan()

    def _show_knobs(self) -> None:
        """The highlighted topology's knob rows, the values the form's text chooses."""
        lst = self.query_one("#serve-knobs", KnobList)
        rows = self.knob_rows.get(self.topology or "", [])
        lst.show(rows, parse_pairs(self.query_one("#knob", Input).value))
        self._knob_detail()

    def _knob_detail(self) -> None:
        """Under the list: the highlighted knob, its values (the one chosen marked) and why those greyed out do not
        fit this model, GPU and topology."""
        lst = self.query_one("#serve-knobs", KnobList)
        detail = self.query_one("#knob-detail", Static)
        row = lst.highlighted_row
        if row is None:
            detail.update(Text(self.knob_problem or "", style=fmt.BAD))
            detail.display = bool(self.knob_problem)
            return
        value = lst.value_of(row)
        t = Text(row.knob.title, style="bold")
        if row.role:
            t.append(f" ({row.role} servers)")
        t.append(f"  vLLM ≥ {row.knob.since}\n", style=fmt.DIM)
        for i, v in enumerate(row.values):  # every value on one line: the one chosen marked, the greyed ✖
            if i:
                t.append(" · ", style=fmt.DIM)
            if v.refused:
                t.append(f"✖{v.value}", style="dim red" if v.value != value else fmt.BAD)
            else:
                t.append(f"●{v.value}" if v.value == value else v.value, style="bold" if v.value == value else "")
        if row.knob.kind == "int":
            t.append(f" · or a number {row.knob.lo}..{row.knob.hi} typed below", style=fmt.DIM)
        mine = row.fit(value)
        note = (mine.note or ("vLLM's default" if mine.default else "")) if mine is not None else ""
        if note:
            t.append(f"\n{value}: {note}", style=fmt.DIM)
        for v in row.values:
            if v.refused:
                t.append(f"\n✖ {v.value}: {v.refused}", style="red" if v.value == value else "dim red")
        t.rstrip()
        detail.update(t)
        detail.display = True

    def _answer_key(self, choice: TopologyChoice) -> tuple[tuple[str, ...], str, tuple[str, ...]]:
        assert self.planned is not None
        return (self.hosts, choice.name, tuple(replace(self.planned, topology=choice.name).to_argv()))

    def show_plan(self) -> None:
        self._show_knobs()
        choice = next((c for c in self.choices if c.name == self.topology), None)
        view = self.query_one("#plan-text", Static)
        self.held = []
        if choice is not None and choice.across is not None and self.planned is not None:
            self._show_across(choice, choice.across)
            return
        if self.hosts:
            self._say("#form-error", "")
        if choice is None or choice.plan is None or self.planned is None:
            self.current = self.request = None
            view.update(Text(f"{choice.name} refused: {choice.refused}" if choice else
                             "pick a model and a topology", style="red"))
            return
        self.current = choice.plan
        self.request = replace(self.planned, topology=choice.name)
        checks = self._checks.get(choice.name, [])
        if any(c.name == "ports" and c.status == FAIL for c in checks):
            self.held = held_ports(choice.plan, self.state)
        t = Text()
        for w in choice.plan.warnings:
            t.append(f"▲ {w}\n", style="bold yellow")
        t.append("Preflight\n", style="bold")
        for c in checks:
            style = "red" if c.status == FAIL else ("yellow" if c.status == WARN else "green")
            mark = {"pass": "ok  ", "warn": "warn", "fail": "FAIL"}[c.status]
            t.append(f" {mark} ", style=style)
            t.append(f"{c.name}: {c.reason}\n")
            if c.name == "ports" and self.held:
                lay = self.state.layout
                assert lay is not None
                t.append(f"      {', '.join(map(str, self.held))} held by your layout {lay.topology} of "
                         f"{lay.profile_id} ({lay.status}): ctrl+l replaces it (stops it first, as "
                         "'up --replace' does)\n", style="bold yellow")
        knob_changes = [w for w in choice.plan.workarounds if w.source == "knob"]
        if knob_changes:
            t.append("\nKnobs\n", style="bold")
            for change in knob_changes:
                t.append(f" {change.reason.removeprefix('knob ')}: ", style="cyan")
                t.append(f"{change.change}\n")
        t.append("\nCommands (what launching runs; ctrl+y copies)\n", style="bold")
        t.append(choice.plan.shell(), style="cyan")
        view.update(t)

    def _show_across(self, choice: TopologyChoice, plan: ClusterPlan) -> None:
        """Each host's part (its ``up`` arguments), then what the hosts said of it (asked once, in a worker)."""
        assert self.planned is not None
        self.current = None
        self.request = replace(self.planned, topology=choice.name)
        key = self._answer_key(choice)
        answer = self.answers.get(key)
        if answer is None:
            self._ask_hosts(key, plan)
        t = Text()
        t.append(f"{plan.topology} across {len(plan.parts)} hosts ({', '.join(plan.hosts)}) · endpoint "
                 f"{plan.endpoint}\n", style="bold")
        for line in plan.network:
            t.append(f" {line}\n", style=fmt.DIM)
        for part in plan.parts:
            t.append(f"\non {part.host} ({part.address}): {part.does}\n", style="bold")
            t.append(f" disagg-tui up {' '.join(part.request.to_argv())}\n", style="cyan")
            if answer is not None and not answer.error:
                for name, role, shell in answer.servers.get(part.host, []):
                    t.append(f" # {name} ({role})\n", style=fmt.DIM)
                    t.append(f" {shell}\n")
                if part.host in answer.proxies:
                    t.append(" # proxy\n", style=fmt.DIM)
                    t.append(f" {answer.proxies[part.host]}\n")
        if answer is None:
            t.append("\nasking each host for its part's commands and preflight (over SSH)…\n", style=fmt.BUSY)
            self._say("#form-error", "")
        else:
            for w in answer.warnings:
                t.append(f"▲ {w}\n", style="bold yellow")
            if answer.checks:
                t.append("\nPreflight\n", style="bold")
            for name, status, reason in answer.checks:
                style = "red" if status == FAIL else ("yellow" if status == WARN else "green")
                t.append(f" {({'pass': 'ok  ', 'warn': 'warn', 'fail': 'FAIL'}).get(status, status)} ", style=style)
                t.append(f"{name}: {reason}\n")
            self._say("#form-error", f"refused across hosts: {answer.refusal}" if answer.refusal else "")
        t.append(f"\nLaunching runs here: disagg-tui {' '.join(across.up_argv(self.request, plan.hosts))}\n",
                 style="bold")
        self.query_one("#plan-text", Static).update(t)

    # --- launching --------------------------------------------------------------------------------------------
    def action_copy_plan(self) -> None:
        if self.current is not None:
            self.app.copy_to_clipboard(self.current.shell())
            self.notify("the plan's shell is on the clipboard (OSC 52)", timeout=3)

    def action_launch(self) -> None:
        # the topology list's highlight as it is now (its highlight message may not have reached this screen yet)
        topologies = self.query_one("#topologies", OptionList)
        if topologies.highlighted is not None:
            picked = topologies.get_option_at_index(topologies.highlighted).id
            if picked is not None and picked != self.topology:
                self.topology = picked
                self.show_plan()
        choice = next((c for c in self.choices if c.name == self.topology), None)
        if self.hosts and choice is not None and choice.across is not None and self.request is not None:
            answer = self.answers.get(self._answer_key(choice))
            if answer is None:
                self.notify("still asking the hosts for their parts' plans: a moment", timeout=3)
            elif answer.refusal:
                self.notify(answer.refusal, title="refused across hosts", severity="error", timeout=8)
            else:
                self.post_message(LaunchRequested(self.request, hosts=tuple(choice.across.hosts)))
            return
        if self.hosts:
            self.notify("pick a topology that spans the hosts picked (or none of them: this host)",
                        severity="warning", timeout=4)
            return
        if self.current is None or self.request is None:
            self.notify("pick a model and a topology the planner accepts (and fix the fields marked)",
                        severity="warning", timeout=4)
            return
        replacing = bool(self.held)
        lay = self.state.layout
        own_gpus = {g for v in self.state.servers.values() for g in v.gpus} if replacing else set()
        bad = [c for c in self._checks.get(self.current_topology, []) if c.status == FAIL
               and not (replacing and (c.name == "ports" or (c.name == "gpu memory"
                                                            and set(self.current.gpus) <= own_gpus)))]
        if bad:
            self.notify("; ".join(f"{c.name}: {c.reason}" for c in bad), title="preflight fails",
                        severity="error", timeout=8)
            return
        if lay is not None and lay.status in ("starting", "ready", "stopping") and not replacing:
            self.notify(f"{lay.topology} of {lay.profile_id} is {lay.status}: stop it first (s on the dashboard)",
                        title="one layout at a time", severity="warning", timeout=6)
            return
        self.post_message(LaunchRequested(replace(self.request, replace=True) if replacing else self.request))

    @property
    def current_topology(self) -> str:
        return self.request.topology if self.request is not None and self.request.topology else ""
