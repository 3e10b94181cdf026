"""The README's walkthrough in tmux, typed exactly as written (issue 22's done-when).

The steps are read from README.md's "Walkthrough in tmux" block: each ``tmux send-keys`` line's keys are sent to
the console in one burst, as tmux sends them (no waiting between the keys of a line: what a mode switch does with the
keys behind it is part of what is tested); a ``capture-pane`` line's quoted words must appear on the screen; a
``tmux new`` opens a new console. Between lines the test waits for what the line's comment says happens (an operator
waits for the screen too). The README and this list of waits must agree step by step: a changed walkthrough fails
here until the test learns the new step.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from textual import events
from textual.keys import _character_to_key
from textual.widgets import OptionList

from tests.console.conftest import console_ports, wait_for
from tui.console.app import ConsoleApp, make_console
from tui.console.screens.bench import BenchScreen
from tui.console.screens.campaign import CampaignScreen
from tui.console.screens.launch import LaunchScreen
from tui.console.screens.results import ResultsScreen
from tui.core import paths
from tui.core.bench.events import BenchDone, BenchTick
from tui.core.events import Event
from tui.core.host.base import HostOptions
from tui.core.launch.events import ServerPhase
from tui.core.record import Recording

pytestmark = pytest.mark.usefixtures("clean_layouts")
README = Path(__file__).resolve().parents[2] / "README.md"
MODEL = "qwen3.6-27b-nvfp4"
TMUX_KEYS = {"Enter": "enter", "Escape": "escape", "Space": "space", "Up": "up", "Down": "down", "Left": "left",
             "Right": "right", "Tab": "tab", "BSpace": "backspace"}


@dataclass(frozen=True)
class Step:
    session: str
    kind: str  # "new", "capture" or "keys"
    keys: tuple[str, ...] = ()
    said: tuple[str, ...] = ()  # a capture's quoted words

    def label(self) -> str:
        return f"{self.session} {self.kind} {' '.join(self.keys)}".strip()


def readme_steps() -> list[Step]:
    """The walkthrough block of README.md, one step per tmux command (``a; b`` is two)."""
    text = README.read_text(encoding="utf-8")
    block = text.split("### Walkthrough in tmux", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    steps: list[Step] = []
    for line in block.strip().splitlines():
        command, _, comment = line.partition("#")
        for part in command.split(";"):
            argv = shlex.split(part)
            assert argv[0] == "tmux", line
            session = argv[argv.index("-s" if argv[1] == "new" else "-t") + 1]
            if argv[1] == "new":
                assert argv[-1] == ".venv/bin/disagg-tui --sim", line
                steps.append(Step(session, "new"))
            elif argv[1] == "capture-pane":
                steps.append(Step(session, "capture", said=tuple(re.findall(r'"([^"]+)"', comment))))
            else:
                assert argv[1] == "send-keys", line
                steps.append(Step(session, "keys", tuple(argv[argv.index("-t") + 2:])))
    return steps


def key_events(keys: tuple[str, ...]) -> list[events.Key]:
    """tmux's key arguments as the terminal delivers them: a key name (``Enter``, ``C-l``) is that key, anything
    else is typed character by character."""
    out = []
    for arg in keys:
        if arg in TMUX_KEYS:
            out.append(events.Key(TMUX_KEYS[arg], " " if arg == "Space" else None))
        elif re.fullmatch(r"C-[a-z]", arg):
            out.append(events.Key(f"ctrl+{arg[2]}", None))
        else:
            out += [events.Key(c if c.isalnum() else _character_to_key(c), c) for c in arg]
    return out


def screen_text(app: ConsoleApp) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def models_listed(app: ConsoleApp) -> bool:
    return isinstance(app.screen, LaunchScreen) and app.screen.query_one("#models", OptionList).option_count > 0


def planned(topology: str) -> Callable[[ConsoleApp], bool]:
    def check(app: ConsoleApp) -> bool:
        s = app.screen
        return isinstance(s, LaunchScreen) and s.model_id == MODEL and s.current is not None \
            and s.current.topology == topology
    return check


def ready(topology: str) -> Callable[[ConsoleApp], bool]:
    def check(app: ConsoleApp) -> bool:
        lay = app.state.layout
        return lay is not None and lay.topology == topology and lay.status == "ready"
    return check


def bench_open(app: ConsoleApp) -> bool:
    return isinstance(app.screen, BenchScreen) and app.screen.query_one("#workloads", OptionList).option_count > 0


def bench_running(topology: str) -> Callable[[ConsoleApp], bool]:
    def check(app: ConsoleApp) -> bool:
        b = app.state.bench
        return b.running and b.started is not None and b.started.workload == "prefill-heavy" \
            and b.started.topology == topology
    return check


def bench_complete(app: ConsoleApp) -> bool:
    return app.state.bench.done is not None and app.state.bench.done.status == "complete"


def nothing_up(app: ConsoleApp) -> bool:
    return app.state.layout is None


def results_of_both(app: ConsoleApp) -> bool:
    s = app.screen
    return isinstance(s, ResultsScreen) and {c.topology for c in s.data.cells} >= {"1p1d", "dp2"}


def campaign_open(app: ConsoleApp) -> bool:
    return isinstance(app.screen, CampaignScreen) and app.screen.query_one("#c-topologies").option_count > 0


def campaign_started(app: ConsoleApp) -> bool:
    """The campaign screen lists a campaign of dp2 and 1p1d over both workloads (the one just started)."""
    s = app.screen
    return isinstance(s, CampaignScreen) and any(
        set(c.spec.get("topologies", ())) == {"dp2", "1p1d"} and c.total == 4 and c.done < c.total
        for c in s.states)


#: what each step of the README is waited on with (and, where it says so, checked): in the README's order
WAITS: list[tuple[str, Callable[[ConsoleApp], bool] | None]] = [
    ("demo new", None),
    ("demo capture", None),
    ("demo keys l", models_listed),
    ("demo keys qwen3.6 Enter", planned("1p1d")),
    ("demo keys C-l", lambda app: app.current_mode == "dashboard" and app.state.layout is not None),
    ("demo capture", ready("1p1d")),
    ("demo keys b", bench_open),
    ("demo keys Down C-s", bench_running("1p1d")),
    ("demo keys Escape", lambda app: app.current_mode == "dashboard" and bench_complete(app)),
    ("demo keys s", nothing_up),
    ("demo keys l qwen3.6 Enter Up C-l", ready("dp2")),
    ("demo keys b", None),  # the next line follows at once (one shell line): the bench screen exists by now
    ("demo keys C-s", bench_running("dp2")),
    ("demo keys r", lambda app: bench_complete(app) and results_of_both(app)),
    ("demo keys Escape", lambda app: app.current_mode == "dashboard"),
    ("demo keys s", nothing_up),
    ("demo keys c", campaign_open),
    ("demo keys Down Space C-s", campaign_started),
    ("demo keys q q", None),
    ("demo2 new", None),
    ("demo2 keys c", campaign_started),  # still running in the new console, its grid filling in
]


def test_the_readme_lists_the_steps_this_test_waits_on() -> None:
    assert [s.label() for s in readme_steps()] == [label for label, _ in WAITS], \
        "the README's walkthrough changed: teach this test its new steps"


async def test_the_readme_walkthrough_as_written() -> None:
    steps = readme_steps()
    assert [s.label() for s in steps] == [label for label, _ in WAITS]
    ports = console_ports()
    apps: dict[str, ConsoleApp] = {}
    seen: list[Event] = []  # what the first console's bus carried
    i = 0
    while i < len(steps):
        step = steps[i]
        assert step.kind == "new"
        # startups compressed and tokens paced 4× faster than real time: only the waits shrink, the keys are the same
        app = apps[step.session] = make_console(HostOptions(sim=True, sim_startup_s=1.0, sim_clock=4.0), ports=ports)
        if step.session == "demo":
            app.ctx.bus.subscribe(seen.append)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda app=app: len(app.state.gpus) == 2, 20, "two GPUs")  # type: ignore[misc]
            i += 1
            while i < len(steps) and steps[i].kind != "new":
                step, (label, until) = steps[i], WAITS[i]
                if step.kind == "keys":
                    driver = app._driver
                    assert driver is not None
                    for key in key_events(step.keys):  # one burst, as tmux sends a line
                        key.set_sender(app)
                        driver.send_message(key)
                if until is not None:
                    try:
                        await wait_for(pilot, lambda until=until, app=app: until(app), 120,  # type: ignore[misc]
                                       f"step {i + 1} ({label})")
                    except AssertionError as err:
                        raise AssertionError(f"{err}; the screen shows:\n{screen_text(app)}") from None
                else:
                    await pilot.pause(0.3)
                if step.kind == "capture":
                    app.flush()
                    await pilot.pause(0.3)
                    shown = screen_text(app)
                    for said in step.said[-1:]:  # "A ... then B": what the screen says once the step is done
                        words = said.replace("...", "").strip()
                        await wait_for(pilot, lambda words=words, app=app: words in screen_text(app), 20,  # type: ignore[misc]
                                       f"{words!r} on the screen (step {i + 1}); it shows:\n{shown}")
                i += 1
            if step.session == "demo":
                await wait_for(pilot, lambda app=app: app.return_code is not None, 10,  # type: ignore[misc]
                               "the first console to quit")
        if step.session == "demo":
            assert app.return_code == 0
    # the 1P1D start was followed phase by phase, its roles shown, and both runs measured live
    phases = [e.phase for e in seen if isinstance(e, ServerPhase) and e.server == "decode-0"]
    assert phases[0] != "ready" and "ready" in phases and len(set(phases)) >= 4, phases
    runs = [e for e in seen if isinstance(e, BenchDone)]
    assert [e.status for e in runs] == ["complete", "complete"]
    assert any(isinstance(e, BenchTick) and e.phase == "run" and e.output_tps for e in seen)
    # the first console's session was recorded (by default): both layouts, both runs, the operator's actions
    first = min(paths.recordings_dir().glob("*console*"))
    with Recording.open(first) as recording:
        kinds = {type(e).__name__ for e in recording.events()}
        marks = {m.kind for m in recording.markers_of(None)}
    assert {"GpuSampled", "ServerPhase", "BenchTick", "BenchDone", "OperatorAction"} <= kinds
    assert {"phase", "run", "operator"} <= marks
