"""The console fed by a recording: the same screens, the recording's clock, pause, speed, seek, jumps to markers;
the replayed moment draws as the live one did."""

from __future__ import annotations

from pathlib import Path

from tests.console import scripted
from tests.console.conftest import wait_for
from tui.console.app import make_console
from tui.console.replay import make_replay
from tui.console.widgets.band import Band
from tui.console.widgets.gpus import GpuPanel
from tui.console.widgets.logpane import LogPane
from tui.console.widgets.servers import ServerTable
from tui.core.host.base import HostOptions
from tui.core.record import Recorder, new_header

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "recordings" / "sim-bakeoff-qwen3.6-27b-dp2-tp2-1p1d.dtrec"


def _record(path: Path) -> None:
    rec = Recorder(path, new_header("test", simulated=True)).start()
    for ev in scripted.ready_under_load():
        rec.record(ev)
    rec.close()


def _screen_text(app) -> tuple[str, str, list[str], str]:  # type: ignore[no-untyped-def]
    """Every panel of the dashboard as drawn (all but the header line, which says REPLAY in a replay)."""
    screen = app.screen
    table = screen.query_one(ServerTable)
    rows = [" ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
    log = screen.query_one(LogPane)
    return (screen.query_one(GpuPanel).text.plain, screen.query_one(Band).text.plain, rows,
            f"{log.border_title}\n{log.render().plain}")


async def test_the_replayed_moment_draws_as_the_live_one(tmp_path: Path) -> None:
    path = tmp_path / "moment.dtrec"
    _record(path)
    live = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=scripted.ready_under_load())
    async with live.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.5)
        live.flush()
        await pilot.pause(0.1)
        want = _screen_text(live)
    assert len(want[2]) == 3 and want[2][0].startswith("prefill-0") and want[3].startswith("Log ")  # drawn
    app = make_replay(path, speed=100.0)
    async with app.run_test(size=(160, 48)) as pilot:
        assert app.source is not None
        await wait_for(pilot, lambda: app.source.at_end, 30, "the replay's end")  # type: ignore[union-attr]
        await pilot.pause(0.4)
        app.flush()
        await pilot.pause(0.1)
        got = _screen_text(app)
        assert "REPLAY" not in got[1]
    assert got == want


async def test_the_shipped_bakeoff_replays_with_its_controls() -> None:
    app = make_replay(SAMPLE, speed=1.0)
    async with app.run_test(size=(160, 48)) as pilot:
        src = app.source
        assert src is not None and app.recording.event_count > 1000
        await wait_for(pilot, lambda: app.state.layout is not None, 30, "the first layout")
        label = app.replay_label(200) or ""  # a header this wide names the recording
        assert SAMPLE.name in label and " 1× " in label
        await pilot.press("space")
        assert src.paused
        at = src.now()
        await pilot.pause(0.3)
        assert src.now() == at  # paused: the recording's clock stands still
        await pilot.press("space")
        assert not src.paused
        await pilot.press("plus")
        assert src.speed == 2.0
        # jump to the next finished run: the console's state is rebuilt as it was there
        before = src.now()
        run_markers = [m for m in app.recording.markers_of("run") if m.ts > before]
        assert run_markers
        await pilot.press("3")
        await wait_for(pilot, lambda: src.now() >= run_markers[0].ts, 10, "the jump")
        assert src.now() - run_markers[0].ts < 5.0
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.gpus, 10, "the rebuilt state")
        # nothing is launched from a replay
        await pilot.press("l")
        await pilot.press("ctrl+l")
        assert app.jobs == []
