"""Launch: a model and a topology, the knobs that matter, the exact plan and its preflight, then launch.

Every topology that could fit this host's GPU count is listed; those the planner refuses say why, warnings
(MoE + DP) show before launch. The plan is rebuilt (in a thread: preflight reads ports and NVML) whenever a choice
or a knob changes, and shown as the copyable shell it is. Launching starts ``disagg-tui up`` detached with the
same flags, so the start goes on whatever happens to the console; the dashboard follows it.
"""

from __future__ import annotations

import contextlib
import shlex
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Footer, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from tui.console.argv import LaunchKnobs
from tui.console.context import ConsoleContext
from tui.console.messages import LaunchRequested
from tui.console.model import ConsoleModel
from tui.console.screens.base import ConsoleScreen
from tui.console.widgets.header import HeaderBar
from tui.core.errors import AppError
from tui.core.models.modelsrc import ModelEntry, list_models
from tui.core.plan.planner import PlanOptions, plan
from tui.core.plan.preflight import FAIL, WARN, Check, preflight
from tui.core.plan.request import LaunchRequest
from tui.core.plan.spec import LaunchPlan


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

    @property
    def label(self) -> Text:
        if self.plan is None:
            return Text.assemble((f"{self.name:<10}", "dim"), (f" refused: {self.refused}", "dim red"))
        t = Text(f"{self.name:<10}", style="bold")
        gpus = ",".join(map(str, self.plan.gpus))
        t.append(f" GPU {gpus}")
        if self.plan.warnings:
            t.append("  ▲ " + self.plan.warnings[0][:60], style="yellow")
        return t


def parse_env(text: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in shlex.split(text):
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise AppError(f"environment: expected K=V, got {item!r}", hint="e.g. VLLM_USE_FLASHINFER_SAMPLER=0")
        out.append((k, v))
    return tuple(out)


def knobs_from(gmu: str, mml: str, args: str, env: str) -> LaunchKnobs:
    g: float | None = None
    if gmu.strip():
        try:
            g = float(gmu)
        except ValueError:
            raise AppError(f"GPU memory utilisation: not a number: {gmu!r}", hint="e.g. 0.9") from None
        if not 0.05 <= g <= 0.99:
            raise AppError(f"GPU memory utilisation must be within 0.05..0.99, got {g:g}")
    m: int | None = None
    if mml.strip():
        if not mml.strip().isdigit() or int(mml) < 1:
            raise AppError(f"max model length: expected a positive integer, got {mml!r}", hint="e.g. 32768")
        m = int(mml)
    try:
        extra = tuple(shlex.split(args)) if args.strip() else ()
    except ValueError as exc:
        raise AppError(f"extra args: {exc}", hint="quote values with spaces") from None
    try:
        pairs = parse_env(env) if env.strip() else ()
    except ValueError as exc:
        raise AppError(f"environment: {exc}") from None
    return LaunchKnobs(gpu_memory_utilization=g, max_model_len=m, extra_args=(shlex.join(extra),) if extra else (),
                       extra_env=pairs)


class LaunchScreen(ConsoleScreen):
    AUTO_FOCUS = "#model-filter"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+l", "launch", "launch", priority=True),
        Binding("ctrl+y", "copy_plan", "copy plan"),
        Binding("escape", "app.mode('dashboard')", "dashboard"),
    ]

    #: what a replay does not offer (it launches nothing)
    LIVE_ACTIONS: ClassVar[frozenset[str]] = frozenset({"launch"})

    def __init__(self, ctx: ConsoleContext, state: ConsoleModel) -> None:
        super().__init__(ctx, state)
        self.choices: list[TopologyChoice] = []
        self.model_id: str | None = None
        self.topology: str | None = None
        self.current: LaunchPlan | None = None
        self.checks: list[Check] = []
        self.knobs = LaunchKnobs()
        self.entries: list[ModelEntry] = []
        self._gen = 0
        self._checks: dict[str, list[Check]] = {}

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        with Horizontal(id="launch-body"):
            with Vertical(id="launch-left"):
                yield Input(placeholder="filter models (type part of a name)", id="model-filter", compact=True)
                models = OptionList(id="models")
                models.border_title = "Model"
                yield models
                topologies = OptionList(id="topologies")
                topologies.border_title = "Topology"
                yield topologies
                with Vertical(id="knobs"):
                    yield Label("GPU memory utilisation · max model length")
                    with Horizontal(classes="knob-row"):
                        yield Input(placeholder="profile's", id="gmu", compact=True)
                        yield Input(placeholder="profile's", id="mml", compact=True)
                    yield Label("extra vllm serve args")
                    yield Input(placeholder="e.g. --enforce-eager", id="args", compact=True)
                    yield Label("extra environment (K=V …)")
                    yield Input(placeholder="e.g. VLLM_USE_FLASHINFER_SAMPLER=0", id="env", compact=True)
                    yield Button("Launch (ctrl+l)", id="launch", variant="primary")
            with VerticalScroll(id="plan-view"):
                yield Static(id="plan-text")
        yield Footer()

    def on_mount(self) -> None:
        for i in self.query(Input):  # no blinking cursor: no repaint twice a second over SSH
            i.cursor_blink = False
        self.query_one("#plan-view").border_title = "Plan"
        self._list_models()

    @work(exclusive=True, group="models", thread=True, exit_on_error=False, description="listing models")
    def _list_models(self) -> None:
        entries = list_models(self.ctx.catalog)
        self.app.call_from_thread(self._show_models, entries)

    def _show_models(self, entries: list[ModelEntry]) -> None:
        """Shipped and operator profiles, then what the Hugging Face cache and the model folders hold."""
        self.entries = entries
        self._fill_models()

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

    def draw(self, model: ConsoleModel) -> None:
        self.query_one(HeaderBar).draw(model, screen="launch")

    # --- choices -----------------------------------------------------------------------------------------------
    @on(OptionList.OptionHighlighted, "#models")
    def _model(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id != self.model_id:
            self.model_id = event.option.id
            self.replan()

    @on(OptionList.OptionHighlighted, "#topologies")
    def _topology(self, event: OptionList.OptionHighlighted) -> None:
        self.topology = event.option.id
        self.show_plan()

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

    # --- planning (a thread: host facts may run vllm --version; preflight reads ports and NVML) -----------------
    def _read_knobs(self) -> LaunchKnobs | None:
        try:
            return knobs_from(self.query_one("#gmu", Input).value, self.query_one("#mml", Input).value,
                              self.query_one("#args", Input).value, self.query_one("#env", Input).value)
        except AppError as err:
            self.query_one("#plan-text", Static).update(Text(err.one_line(), style="bold red"))
            return None

    def replan(self) -> None:
        knobs = self._read_knobs()
        if knobs is None or self.model_id is None:
            return
        self.knobs = replace(knobs, ports=self.ctx.ports)
        self._gen += 1
        self._plan_all(self.model_id, self.knobs, self._gen)

    @work(exclusive=True, group="plan", thread=True, exit_on_error=False, description="planning")
    def _plan_all(self, model_id: str, knobs: LaunchKnobs, gen: int) -> None:
        ctx = self.ctx
        host = ctx.host
        if host is None:
            return
        profile = ctx.catalog.model(model_id)
        facts = host.facts
        ports = {} if knobs.ports is None else {"port": knobs.ports[0], "server_base_port": knobs.ports[1],
                                                "side_channel_base": knobs.ports[2]}
        opts = PlanOptions(gpu_memory_utilization=knobs.gpu_memory_utilization, max_model_len=knobs.max_model_len,
                           extra_args=tuple(a for item in knobs.extra_args for a in shlex.split(item)),
                           extra_env=knobs.extra_env, vllm_executable=ctx.options.vllm or "vllm", **ports)
        choices = []
        for topo in candidate_topologies(len(facts.gpus)):
            try:
                choices.append(TopologyChoice(topo, plan(profile, topo, facts, opts)))
            except AppError as err:
                choices.append(TopologyChoice(topo, None, err.title))
        nvml: Any = None
        with contextlib.suppress(Exception):
            nvml = host.nvml()
        checks: dict[str, list[Check]] = {}
        for c in choices:
            if c.plan is not None:
                checks[c.name] = preflight(c.plan, facts, nvml)
        self.app.call_from_thread(self._planned, gen, choices, checks)

    def _planned(self, gen: int, choices: list[TopologyChoice], checks: dict[str, list[Check]]) -> None:
        if gen != self._gen:  # a later choice or knob is being planned: this one is stale
            return
        self.choices = choices
        self._checks = checks
        ol = self.query_one("#topologies", OptionList)
        keep = self.topology
        ol.clear_options()
        for c in choices:
            ol.add_option(Option(c.label, id=c.name, disabled=c.plan is None))
        names = [c.name for c in choices if c.plan is not None]
        if names:
            pick = keep if keep in names else names[min(len(names) - 1, 3 if "1p1d" in names else 0)]
            if "1p1d" in names and keep is None:
                pick = "1p1d"
            ol.highlighted = [c.name for c in choices].index(pick)
            self.topology = pick
        self.show_plan()

    def show_plan(self) -> None:
        choice = next((c for c in self.choices if c.name == self.topology), None)
        view = self.query_one("#plan-text", Static)
        if choice is None or choice.plan is None:
            self.current = None
            view.update(Text(choice.refused if choice else "pick a model and a topology", style="red"))
            return
        self.current = choice.plan
        checks = self._checks.get(choice.name, [])
        t = Text()
        for w in choice.plan.warnings:
            t.append(f"▲ {w}\n", style="bold yellow")
        t.append("Preflight\n", style="bold")
        for c in checks:
            style = "red" if c.status == FAIL else ("yellow" if c.status == WARN else "green")
            mark = {"pass": "ok  ", "warn": "warn", "fail": "FAIL"}[c.status]
            t.append(f" {mark} ", style=style)
            t.append(f"{c.name}: {c.reason}\n")
        t.append("\nCommands (what launching runs; ctrl+y copies)\n", style="bold")
        t.append(choice.plan.shell(), style="cyan")
        view.update(t)

    # --- launching --------------------------------------------------------------------------------------------
    def action_copy_plan(self) -> None:
        if self.current is not None:
            self.app.copy_to_clipboard(self.current.shell())
            self.notify("the plan's shell is on the clipboard (OSC 52)", timeout=3)

    def action_launch(self) -> None:
        if self.current is None or self.model_id is None or self.topology is None:
            self.notify("pick a model and a topology the planner accepts", severity="warning", timeout=4)
            return
        bad = [c for c in self._checks.get(self.topology, []) if c.status == FAIL]
        if bad:
            self.notify("; ".join(f"{c.name}: {c.reason}" for c in bad), title="preflight fails",
                        severity="error", timeout=8)
            return
        lay = self.state.layout
        if lay is not None and lay.status in ("starting", "ready", "stopping"):
            self.notify(f"{lay.topology} of {lay.profile_id} is {lay.status}: stop it first (s on the dashboard)",
                        title="one layout at a time", severity="warning", timeout=6)
            return
        try:
            request = LaunchRequest.from_argv(["--model", self.model_id, "--topology", self.topology,
                                               *self.knobs.args()])
        except AppError as err:
            self.notify(err.hint or "", title=err.one_line(), severity="error", timeout=8)
            return
        self.post_message(LaunchRequested(request))
