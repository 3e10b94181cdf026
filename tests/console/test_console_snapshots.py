"""Every screen of the console at 80×24 and 160×48, drawn from scripted events with a fixed clock (pytest-textual-
snapshot: the SVGs under ``__snapshots__`` are the reference; ``pytest --snapshot-update`` redraws them)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.pilot import Pilot
from textual.widgets import OptionList

from tests.console import scripted
from tui.console.app import ConsoleApp, make_console
from tui.core import paths
from tui.core.events import Event
from tui.core.host.base import HostOptions
from tui.sim.host import SimHost

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]


@pytest.fixture(autouse=True)
def fixed_host(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No model of this machine shows: an empty Hugging Face cache, no model folders, the dummy model absent."""
    (tmp_path / "hub").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("DISAGG_TUI_MODEL_DIRS", raising=False)
    monkeypatch.setenv("DISAGG_TUI_DUMMY_MODEL_DIR", "/nonexistent/dummy-model")
    # the launch screen's preflight binds the plan's real ports: another test's server on one of them (two workers)
    # would draw "FAIL ports" into the reference; what is drawn for a held port is tested in test_launch_screen
    monkeypatch.setattr("tui.core.plan.preflight.port_free", lambda host, port: True)


pytestmark = pytest.mark.usefixtures("utc")  # the clock shown in every frame (tests/console/conftest.py)


def console(events: list[Event], *, host: bool = False) -> ConsoleApp:
    options = HostOptions(sim=True)
    return make_console(options, live=False, clock=scripted.clock, events=events,
                        host=SimHost(options) if host else None)


def settle(*keys: str, until: Callable[[ConsoleApp], bool] | None = None) -> Callable[[Pilot[object]], object]:
    async def run_before(pilot: Pilot[object]) -> None:
        app = pilot.app
        assert isinstance(app, ConsoleApp)
        for k in keys:
            await pilot.press(k)
        for _ in range(100):
            if until is None or until(app):
                break
            await pilot.pause(0.05)
        await pilot.pause(0.4)  # one flush (4 Hz) and its layout
        app.flush()
        await pilot.pause(0.1)
    return run_before


@pytest.mark.parametrize("size", SIZES)
def test_dashboard_idle(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(console(scripted.history((0.0, 0.0), n=8, loaded=False)), terminal_size=size,
                        run_before=settle())


@pytest.mark.parametrize("size", SIZES)
def test_dashboard_starting(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(console(scripted.starting()), terminal_size=size, run_before=settle())


@pytest.mark.parametrize("size", SIZES)
def test_dashboard_under_load(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(console(scripted.ready_under_load()), terminal_size=size, run_before=settle())


@pytest.mark.parametrize("size", SIZES)
def test_dashboard_diagnosis(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(console(scripted.failed()), terminal_size=size, run_before=settle())


def _planned(app: ConsoleApp) -> bool:
    screen = app.screen
    return getattr(screen, "current", None) is not None


@pytest.mark.parametrize("size", SIZES)
def test_launch(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(console(scripted.history((0.0, 0.0), n=4, loaded=False), host=True), terminal_size=size,
                        run_before=settle("l", until=_planned))


@pytest.mark.parametrize("size", SIZES)
def test_bench_running(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(console(scripted.ready_under_load()), terminal_size=size, run_before=settle("b"))


def _results_loaded(app: ConsoleApp) -> bool:
    """The runs drawn, judged with the GPU count the telemetry saw (a load before its first sample has none)."""
    data = getattr(app.screen, "data", None)
    return bool(data and data.cells and data.gpus == (len(app.state.gpus) or None))


@pytest.mark.parametrize("size", SIZES)
def test_results(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    scripted.write_runs(paths.runs_dir())
    assert snap_compare(console(scripted.history((0.0, 0.0), n=4, loaded=False)), terminal_size=size,
                        run_before=settle("r", until=_results_loaded))


def _campaigns_loaded(app: ConsoleApp) -> bool:
    return bool(getattr(app.screen, "states", None))


@pytest.mark.parametrize("size", SIZES)
def test_campaign(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    scripted.write_runs(paths.runs_dir())
    assert snap_compare(console(scripted.history((0.0, 0.0), n=4, loaded=False), host=True), terminal_size=size,
                        run_before=settle("c", until=_campaigns_loaded))


def _entries_loaded(app: ConsoleApp) -> bool:
    """The entries listed, and the failures on this host read (the layout shown now, with its diagnoses)."""
    lists = app.screen.query("#pb-entries")
    failures = app.screen.query("#pb-failures")
    return bool(lists) and lists.first(OptionList).option_count > 0 and bool(failures) \
        and failures.first(OptionList).option_count > 0


@pytest.mark.parametrize("size", SIZES)
def test_playbook(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(console(scripted.failed()), terminal_size=size, run_before=settle("p", until=_entries_loaded))


@pytest.mark.parametrize("size", SIZES)
def test_quit_dialog(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(console(scripted.ready_under_load()), terminal_size=size, run_before=settle("q"))


@pytest.mark.parametrize("size", SIZES)
def test_diagnosis_details(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(console(scripted.failed()), terminal_size=size, run_before=settle("d"))
