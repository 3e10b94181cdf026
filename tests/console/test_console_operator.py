"""What an operator's walk found in the console (issue 22): typed keys that left the app, failures nobody was told
of, a replay that showed this host instead of the recording, keys and palette entries that were missing.

Each test drives the console with Textual's Pilot, on scripted events (no live host) or the shipped recording;
what would start a detached command is caught at ``ConsoleApp.run_job``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from textual import events
from textual.command import DiscoveryHit
from textual.notifications import Notify
from textual.pilot import Pilot
from textual.system_commands import SystemCommandsProvider
from textual.widgets import Footer, Input, OptionList, Select
from textual.widgets._footer import FooterKey
from textual.widgets._toast import Toast

from tests.console import scripted
from tests.console.conftest import wait_for
from tui.console.app import ConsoleApp, make_console
from tui.console.commands import ConsoleCommands
from tui.console.replay import ReplayConsoleApp, make_replay
from tui.console.screens.bench import BenchScreen
from tui.console.screens.launch import LaunchScreen
from tui.console.screens.markers import MarkersModal
from tui.console.screens.modals import QuitModal, TextModal
from tui.console.screens.playbook import PlaybookScreen
from tui.console.screens.results import ResultsScreen
from tui.console.widgets.header import render_header
from tui.console.widgets.logpane import LogPane
from tui.console.widgets.servers import ServerTable
from tui.core.events import Event
from tui.core.host.base import HostOptions
from tui.core.launch.state import LayoutRecord, StateStore
from tui.sim.host import SimHost

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "recordings" / "sim-bakeoff-qwen3.6-27b-dp2-tp2-1p1d.dtrec"
MODEL = "qwen3.6-27b-nvfp4"


@pytest.fixture(autouse=True)
def fixed_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only the shipped profiles: an empty Hugging Face cache, no model folders."""
    (tmp_path / "hub").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("DISAGG_TUI_MODEL_DIRS", raising=False)
    monkeypatch.setenv("DISAGG_TUI_DUMMY_MODEL_DIR", "/nonexistent/dummy-model")


@pytest.fixture(autouse=True)
def _ports_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch screen's preflight binds the plan's real default ports: another test's server on one of them (two
    workers) refused the launch these tests type ("FAIL ports"); a held port is tested in test_launch_screen."""
    monkeypatch.setattr("tui.core.plan.preflight.port_free", lambda host, port: True)


def _console(events: list[Event] | None = None, *, host: bool = False, **options: Any) -> ConsoleApp:
    opts = HostOptions(sim=True, **options)
    app = make_console(opts, live=False, clock=scripted.clock, events=events or [],
                       host=SimHost(opts) if host else None)
    app.started = []  # type: ignore[attr-defined]
    app.run_job = lambda name, argv, done="": app.started.append(argv)  # type: ignore[method-assign,attr-defined]
    return app


class Told:
    """The notifications an app posted (title and message), from its message hook."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def __call__(self, message: object) -> None:
        if isinstance(message, Notify):
            self.items.append((message.notification.title, message.notification.message))

    def text(self) -> str:
        return "\n".join(f"{t}: {m}" for t, m in self.items)


def burst(app: ConsoleApp, *keys: str) -> None:
    """Keys as a terminal delivers a ``tmux send-keys`` line: all at once, none waiting for the one before."""
    for k in keys:
        app.post_message(events.Key(k, k if len(k) == 1 else None))


async def _planned(pilot: Pilot[object], app: ConsoleApp) -> LaunchScreen:
    screen = app.screen
    assert isinstance(screen, LaunchScreen)
    await wait_for(pilot, lambda: screen.current is not None, 30, "the plans")
    return screen


# --- finding 1: a typed key never leaves the screen or the app ---------------------------------------------------


async def test_the_readmes_second_launch_types_the_model_name_on_the_topology_list() -> None:
    """``l qwen3.6 Enter C-l``, then ``l qwen3.6 Enter Up C-l``: the second time the launch screen reopens with the
    focus on the topology list; the name typed there filters the models (its q never quits), Up picks dp2."""
    app = _console(host=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("l")
        screen = await _planned(pilot, app)
        await pilot.press(*"qwen3.6", "enter")
        await wait_for(pilot, lambda: screen.topology == "1p1d" and screen.current is not None
                       and screen.current.topology == "1p1d", 20, "1p1d planned")
        await pilot.press("ctrl+l")
        assert app.started[-1][:5] == ["up", "--model", MODEL, "--topology", "1p1d"]  # type: ignore[attr-defined]
        assert app.current_mode == "dashboard"
        await pilot.press("l")
        assert app.current_mode == "launch" and isinstance(app.focused, OptionList)
        assert app.focused.id == "topologies"
        await pilot.press("escape")
        burst(app, "l", *"qwen3.6", "enter", "up", "ctrl+l")  # one send-keys line: the mode switch comes first
        await wait_for(pilot, lambda: len(app.started) == 2, 20, "the second launch")  # type: ignore[attr-defined]
        assert app.is_running and not isinstance(app.screen, QuitModal)
        assert screen.query_one("#model-filter", Input).value == "qwen3.6"
        assert app.started[-1][:5] == ["up", "--model", MODEL, "--topology", "dp2"]  # type: ignore[attr-defined]


async def test_letters_typed_in_a_form_or_a_drop_down_stay_there() -> None:
    app = _console()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("b")
        screen = app.screen
        assert isinstance(screen, BenchScreen)
        box = screen.query_one("#f-num_prompts", Input)
        box.focus()
        await pilot.pause()
        burst(app, *"lbcrpq")
        await pilot.pause(0.3)
        assert app.current_mode == "bench" and not isinstance(app.screen, QuitModal)
        assert box.value == "lbcrpq"
        screen.query_one("#runner", Select).focus()
        await pilot.pause()
        await pilot.press("l", "q", "r")
        assert app.current_mode == "bench" and app.screen is screen and app.is_running


async def test_a_cursor_key_typed_just_before_ctrl_s_counts() -> None:
    """The README's ``Down C-s`` on the bench screen, in one line: the workload below the first is started."""
    from tui.console.messages import BenchRequested

    asked: list[BenchRequested] = []
    app = _console()
    async with app.run_test(size=(160, 48), message_hook=lambda m: asked.append(m) if isinstance(
            m, BenchRequested) else None) as pilot:
        await pilot.press("b")
        screen = app.screen
        assert isinstance(screen, BenchScreen)
        wl = screen.query_one("#workloads", OptionList)
        assert wl.highlighted == 0 and wl.option_count > 1
        second = wl.get_option_at_index(1).id
        burst(app, "down", "ctrl+s")
        await wait_for(pilot, lambda: bool(asked), 10, "the benchmark asked for")
        assert asked[0].workload.name == second


async def test_the_playbook_list_searches_what_is_typed_on_it() -> None:
    app = _console(scripted.failed())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("p")
        screen = app.screen
        assert isinstance(screen, PlaybookScreen)
        entries = screen.query_one("#pb-entries", OptionList)
        await wait_for(pilot, lambda: entries.option_count > 0, 20, "the entries")
        entries.focus()
        await pilot.pause()
        await pilot.press(*"nvcc")
        assert app.current_mode == "playbook" and screen.query_one("#pb-search", Input).value == "nvcc"
        await wait_for(pilot, lambda: 0 < entries.option_count < 10, 5, "the search")


async def test_quitting_asks_once_whatever_the_key() -> None:
    app = _console()
    async with app.run_test(size=(160, 48)) as pilot:
        for key in ("q", "ctrl+q", "ctrl+c"):
            await pilot.press(key)
            assert isinstance(app.screen, QuitModal) and app.is_running, key
            assert not app.screen.query("#stop"), "nothing is up: nothing to stop"
            await pilot.press("escape")
            assert not isinstance(app.screen, QuitModal)
        await pilot.press("q", "q")
        await pilot.pause()
    assert app.return_code == 0


async def test_with_a_layout_up_the_quit_dialog_offers_to_stop_it() -> None:
    app = _console(scripted.ready_under_load())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("ctrl+c")
        assert isinstance(app.screen, QuitModal) and app.screen.query("#stop")
        await pilot.press("escape")
        assert app.is_running


# --- finding 17: every background failure reaches the operator ---------------------------------------------------


def _ready_layout_on_record() -> None:
    with StateStore().locked() as layouts:
        layouts["L"] = LayoutRecord(id="L", created=scripted.T0, simulated=True, status="ready", owner_pid=0,
                                    plan={"topology": "tp1", "profile_id": MODEL}, processes=[],
                                    endpoint="http://127.0.0.1:9")


async def test_a_benchmark_that_cannot_start_says_why() -> None:
    told = Told()
    app = _console([*scripted.history((0.0, 0.0), n=4), *scripted.launched("ready")], vllm="/nonexistent/bin/vllm")
    async with app.run_test(size=(160, 48), message_hook=told) as pilot:
        await pilot.press("b")
        await pilot.press("ctrl+s")  # nothing is up on this host's state file
        await wait_for(pilot, lambda: "nothing is up to benchmark" in told.text(), 10, "the refusal")
        _ready_layout_on_record()
        screen = app.screen
        assert isinstance(screen, BenchScreen)
        screen.query_one("#runner", Select).value = "vllm"
        await pilot.pause()
        await pilot.press("ctrl+s")  # vllm bench serve without vLLM
        await wait_for(pilot, lambda: "is not an executable here" in told.text(), 10, "the missing vllm")
        assert "--vllm" in told.text()
        with StateStore().locked() as layouts:
            layouts["L"].status = "starting"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "the layout is starting" in told.text(), 10, "the start under way")


async def test_a_screens_worker_failure_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker.StateChanged does not bubble: a screen's failing worker reaches the app's one handler."""
    import tui.console.screens.results as results

    def broken(*_: object, **__: object) -> object:
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(results, "load_results", broken)
    told = Told()
    app = _console()
    async with app.run_test(size=(160, 48), message_hook=told) as pilot:
        await pilot.press("r")
        await wait_for(pilot, lambda: "the disk went away" in told.text(), 10, "the failure told")
        assert ("reading results failed", "RuntimeError: the disk went away") in told.items


# --- finding 19: a replay shows the recording, and offers only replay actions -----------------------------------


async def _replay_to_end(pilot: Pilot[object], app: ReplayConsoleApp) -> None:
    assert app.source is not None
    await wait_for(pilot, lambda: app.source.at_end, 60, "the replay's end")  # type: ignore[union-attr]


async def test_a_replays_results_are_the_recordings_runs() -> None:
    app = make_replay(SAMPLE, speed=100.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await _replay_to_end(pilot, app)
        await pilot.press("r")
        screen = app.screen
        assert isinstance(screen, ResultsScreen)
        await wait_for(pilot, lambda: len(screen.data.runs) == 6, 20, "the recording's six runs")
        assert {(c.topology, c.workload) for c in screen.data.cells} == {
            (t, w) for t in ("dp2", "tp2", "1p1d") for w in ("decode-heavy", "prefill-heavy")}
        assert all(len(c.runs) == 1 for c in screen.data.cells)  # a seek does not count a run twice
        # a jump back to before the first run ended: the results are the runs ended by then
        first = app.recording.markers_of("run")[0]
        app.source.pause()  # type: ignore[union-attr]
        app.source.seek(first.ts - 1)  # type: ignore[union-attr]
        await wait_for(pilot, lambda: len(app.state.runs_done) == 0, 10, "the state rebuilt")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: not screen.data.runs, 10, "no run ended yet")


async def test_a_replays_dashboard_follows_the_layout_replayed() -> None:
    app = make_replay(SAMPLE, speed=100.0)
    async with app.run_test(size=(160, 48)) as pilot:
        assert app.source is not None
        one_p = next(m for m in app.recording.markers_of("run") if "1p1d" in m.label)
        app.source.seek(one_p.ts)
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.layout.topology == "1p1d", 20,
                       "the 1P1D layout")
        app.source.pause()
        await pilot.pause(0.3)
        app.flush()
        await pilot.pause(0.1)
        table = app.screen.query_one(ServerTable)
        rows = {str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)] for i in range(table.row_count)}
        assert set(rows) == {"prefill-0", "decode-0", "proxy"}, rows  # the dp2 and tp2 "server" rows are gone
        assert app.state.servers["prefill-0"].gpus and app.state.servers["decode-0"].gpus  # the GPU column
        assert rows["prefill-0"][2] != "—" and rows["decode-0"][2] != "—"


async def test_a_replays_log_pane_keeps_following() -> None:
    app = make_replay(SAMPLE, speed=100.0)
    async with app.run_test(size=(160, 48)) as pilot:
        pane = app.screen.query_one(LogPane)

        def newest_shown() -> bool:
            view = pane.view
            if view is None or not pane.lines():
                return False
            return pane.following and pane.lines()[-1] == (view.logs if pane.show_polls else view.quiet)[-1]

        seen: set[int] = set()
        for _ in range(3):  # as the replay goes on, the pane shows each newest line
            await wait_for(pilot, lambda: pane.view is not None and len(pane.view.logs) not in seen, 30, "lines")
            assert pane.view is not None
            seen.add(len(pane.view.logs))
            app.flush()
            await pilot.pause(0.05)
            assert newest_shown()


async def test_a_replay_offers_only_replay_actions() -> None:
    app = make_replay(SAMPLE, speed=100.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.state.layout is not None, 20, "a layout of the recording")
        await pilot.pause(0.3)
        actions = {a.binding.action for a in app.active_bindings.values()}
        assert {"toggle_pause", "markers", "next_marker('')"} <= actions
        assert not {"stop", "go('launch')", "go('campaign')", "toggle_recording"} & actions
        titles = await _palette(app)
        assert {"Pause or play the replay", "Markers", "Next marker", "Results"} <= set(titles)
        assert not {"Launch a layout", "Stop the layout", "Recording on/off", "Campaign"} & set(titles)
        await pilot.press("l", "s", "ctrl+t")
        assert app.current_mode == "dashboard" and app.recorder is None and app.jobs == []
        await pilot.press("q")
        assert isinstance(app.screen, QuitModal) and not app.screen.query("#stop")  # no layout of its own
        assert "replay" in str(app.screen.query_one("Label").render()).lower()


async def test_jumps_in_a_replay_show_one_notice_at_a_time() -> None:
    app = make_replay(SAMPLE, speed=1.0)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.state.layout is not None, 20, "a layout")
        for _ in range(5):
            await pilot.press("n")
            await pilot.pause(0.1)
        await pilot.pause(0.3)
        assert len(app.screen.query(Toast)) == 1


async def test_the_markers_list_jumps_where_enter_is_pressed() -> None:
    app = make_replay(SAMPLE, speed=1.0)
    async with app.run_test(size=(160, 48)) as pilot:
        assert app.source is not None
        await pilot.press("m")
        modal = app.screen
        assert isinstance(modal, MarkersModal)
        marks = app.recording.markers_of(None)
        ol = modal.query_one(OptionList)
        target = len(marks) - 2
        ol.highlighted = target
        await pilot.press("enter")
        await wait_for(pilot, lambda: abs(app.source.now() - marks[target].ts) < 5, 10,  # type: ignore[union-attr]
                       "the jump")
        assert not isinstance(app.screen, MarkersModal)


async def test_a_replay_at_80_columns_keeps_its_header_and_its_keys() -> None:
    app = make_replay(SAMPLE, speed=1.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.state.layout is not None, 20, "a layout")
        await pilot.pause(0.3)
        app.flush()
        header = render_header(app.state, 80, replay=app.replay_label(80)).plain
        clock = time.strftime("%H:%M:%S", time.localtime(app.state.clock()))
        assert "…" not in header and header.rstrip().endswith(clock), header  # nothing cut, the clock at the end
        assert "REPLAY" in header and app.state.layout is not None and app.state.layout.topology in header
        await pilot.pause(0.2)
        keys = [k for k in app.screen.query_one(Footer).query(FooterKey) if k.region.right <= 80 and k.region.width]
        shown = {k.key for k in keys}
        assert {"space", "plus", "minus", "n", "m"} <= shown, shown


# --- finding 23: help, ctrl+c and ctrl+q, the palette, the footer ------------------------------------------------


async def _palette(app: ConsoleApp) -> list[str]:
    """The titles the command palette lists on the screen shown (the console's and Textual's providers)."""
    titles = []
    for provider in (ConsoleCommands(app.screen), SystemCommandsProvider(app.screen)):
        await provider.startup()
        titles += [str(h.text) for h in [hit async for hit in provider.discover()] if isinstance(h, DiscoveryHit)]
    return titles


async def test_help_lists_the_keys_of_the_screen() -> None:
    app = _console(scripted.ready_under_load())
    async with app.run_test(size=(160, 48)) as pilot:
        for key in ("question_mark", "f1"):
            await pilot.press(key)
            modal = app.screen
            assert isinstance(modal, TextModal), key
            body = modal.body.plain if hasattr(modal.body, "plain") else str(modal.body)
            assert "stop layout" in body and "quit" in body and "restart" in body
            await pilot.press("escape")


async def test_the_palette_lists_every_action_and_quit_once() -> None:
    app = _console(scripted.failed())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.2)
        titles = await _palette(app)
        for want in ("Apply the fix and relaunch", "Restart the layout", "Dismiss the diagnosis",
                     "Add a playbook entry from the log", "Follow the log", "Recording on/off", "Help: the keys"):
            assert want in titles, want
        assert titles.count("Quit") == 1
        await pilot.press("r")
        results = await _palette(app)
        assert {"Export the results as CSV", "Export the results as Markdown"} <= set(results)
        assert "Restart the layout" not in results  # the dashboard's, not offered on the results screen


async def test_the_footer_offers_stop_only_when_a_layout_is_up() -> None:
    idle = _console(scripted.history((0.0, 0.0), n=4, loaded=False))
    async with idle.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        assert "stop" not in {a.binding.action for a in idle.active_bindings.values()}
    up = _console(scripted.ready_under_load())
    async with up.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        assert "stop" in {a.binding.action for a in up.active_bindings.values()}
        await pilot.press("s")
        assert up.started == [["down", "--sim"]]  # type: ignore[attr-defined]
