"""The console over several hosts (``--hosts``, issue 26): each remote host's stream through the console's seam
(``make_console(remotes=...)``, a fake source here: no SSH), its GPUs grouped under a header line, a host column in
the servers table, an unreachable host with its reason and retry, the reconnect told once; a bad tick skipped with
one notification; the committed 2-host recording replayed with its hosts grouped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.console import scripted
from tests.console.conftest import wait_for
from tests.console.remote_fakes import T0, FakeRemote, reconnected, tick, unreachable
from tests.console.test_console_snapshots import settle
from tui.console.app import ConsoleApp, make_console
from tui.console.replay import make_replay
from tui.console.widgets.gpus import GpuPanel
from tui.console.widgets.logpane import LogPane
from tui.console.widgets.servers import ServerTable
from tui.core.host.base import HostOptions
from tui.core.remote.events import RemoteTick

ROOT = Path(__file__).resolve().parents[2]
TWO_HOSTS = ROOT / "tests" / "fixtures" / "recordings" / "console-2-hosts.dtrec"
SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]


pytestmark = pytest.mark.usefixtures("utc")  # the clock shown in every frame (tests/console/conftest.py)


def two_hosts(b_down: bool = True) -> tuple[ConsoleApp, FakeRemote, FakeRemote]:
    """This host serving 1P1D under load; host a the same, streaming; host b idle, and (``b_down``) unreachable
    since a second ago, retried in four."""
    a = FakeRemote(tick("a"))
    b = FakeRemote(tick("b", util=(0.0, 0.0), loaded=False, servers=False, ts=T0 - 30))
    if b_down:
        b.push(unreachable("b", ts=T0 - 1.0, retry_in_s=4.0))
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=scripted.ready_under_load(),
                       remotes={"a": a, "b": b})
    return app, a, b


@pytest.mark.parametrize("size", SIZES)
def test_two_hosts_grouped_one_unreachable(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    app, _, _ = two_hosts()
    assert snap_compare(app, terminal_size=size, run_before=settle(
        until=lambda a: bool(a.state.remotes["b"].down and a.state.remotes["a"].tick)))


async def test_hosts_grouped_with_a_host_column_and_a_remote_server_shown() -> None:
    app, _, _ = two_hosts()
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.state.remotes["a"].tick is not None and app.state.remotes["b"].down,
                       5, "both hosts' events")
        await pilot.pause(0.6)  # the GPU panel draws at 2 Hz
        lines = app.screen.query_one(GpuPanel).text.plain.splitlines()
        heads = [ln for ln in lines if ln.startswith("▌")]
        assert [h.split()[0] for h in heads] == ["▌this", "▌a", "▌b"]  # this host first, then as asked
        assert heads[0].startswith("▌this host SIMULATED · 2 GPUs")
        assert heads[1].startswith("▌a SIMULATED · 2 GPUs · 1p1d of qwen3.6-27b-nvfp4 ready")
        assert "UNREACHABLE (refused): ssh: connect to host 10.64.2.2 port 22: Connection refused · retry in 3 s" \
            in heads[2], heads[2]
        assert "last tick 12:00:00" in heads[2]
        assert sum(ln.startswith("GPU0 ") for ln in lines) == 3
        table = app.screen.query_one(ServerTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [(r[0], r[1]) for r in rows] == [("prefill-0", "this host"), ("decode-0", "this host"),
                                                ("proxy", "this host"), ("prefill-0", "a"), ("decode-0", "a")]
        assert rows[4][5] == "up" and rows[4][9] == "11,870"  # a's decode server's figures, from its tick
        for _ in range(4):
            await pilot.press("down")
        assert table.selected == "a/decode-0"
        log = app.screen.query_one(LogPane)
        assert log.border_title == "Log decode-0 on a"
        assert log.render_line(0).text.startswith("no log lines of decode-0 from a yet")  # its follow stream
        from tui.console.widgets.band import Band

        band = app.screen.query_one(Band).text.plain
        assert band.startswith("decode-0 on a (decode): up  run 121 / wait 0  KV 61.4%"), band
        assert "On a: 1p1d of qwen3.6-27b-nvfp4 is ready at http://127.0.0.1:8000." in band


async def test_reconnect_is_told_once_and_clears_the_host() -> None:
    app, _, b = two_hosts()
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.state.remotes["b"].down is not None, 5, "b down")
        b.push(reconnected("b", down_s=12.5))
        b.push(tick("b", util=(10.0, 0.0), loaded=False, servers=False))
        await wait_for(pilot, lambda: app.state.remotes["b"].down is None and any(
            n.title == "b reconnected" for n in app._notifications), 5, "the reconnect")
        told = [n for n in app._notifications if n.title == "b reconnected"]
        assert [n.message for n in told] == ["b is reachable again after 12 s down"]
        await pilot.pause(0.6)
        head = next(ln for ln in app.screen.query_one(GpuPanel).text.plain.splitlines() if ln.startswith("▌b"))
        assert "UNREACHABLE" not in head and head.startswith("▌b SIMULATED · 2 GPUs")


async def test_a_bad_tick_is_one_notification_and_skipped() -> None:
    app, a, _ = two_hosts(b_down=False)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.state.remotes["a"].tick is not None, 5, "a's tick")
        good = app.state.remotes["a"].tick
        bad = tick("a").tick
        bad["gpus"][1]["memory_used"] = "lots"
        for _ in range(3):  # the same wrong field three times: told once, counted
            a.push(RemoteTick(ts=T0, host="a", tick=bad))
            await pilot.pause(0.3)
        a.push(RemoteTick(ts=T0, host="a", tick={"time": T0, "gpus": {"not": "a list"}}))
        await wait_for(pilot, lambda: app.state.remotes["a"].bad == 4, 5, "four bad ticks")
        await pilot.pause(0.6)
        told = [n.message for n in app._notifications if n.title == "a: a tick skipped"]
        assert told == ["field 'gpus[1].memory_used': expected a whole number, got the text 'lots'",
                        "field 'gpus': expected a list, got a mapping"], told
        assert app.state.remotes["a"].tick is good  # the last good one is still drawn
        head = next(ln for ln in app.screen.query_one(GpuPanel).text.plain.splitlines() if ln.startswith("▌a"))
        assert "· 4 bad ticks skipped" in head, head


def test_one_host_has_no_host_column_nor_header() -> None:
    from tui.console.state import ConsoleState
    from tui.console.widgets.gpus import render_gpus

    state = ConsoleState(scripted.clock)
    for ev in scripted.ready_under_load():
        state.apply(ev)
    text = render_gpus(state, 160).plain
    assert not text.startswith("▌") and text.startswith("GPU0 B200")


async def test_the_two_host_recording_replays_grouped() -> None:
    app = make_replay(TWO_HOSTS, speed=50.0)
    assert app.recorded_hosts == ["a", "b"]
    kinds = {ev.kind for ev in app.recording.events()}
    assert {"remote_tick", "host_unreachable", "host_reconnected", "gpu_sampled"} <= kinds
    async with app.run_test(size=(160, 48)) as pilot:
        assert app.source is not None
        await wait_for(pilot, lambda: app.state.remotes["a"].tick is not None
                       and app.state.remotes["b"].tick is not None and app.state.gpus, 20, "both hosts' ticks")
        await pilot.pause(0.6)  # the GPU panel draws at 2 Hz
        heads = [ln for ln in app.screen.query_one(GpuPanel).text.plain.splitlines() if ln.startswith("▌")]
        assert [h.split()[0] for h in heads] == ["▌this", "▌a", "▌b"]
        assert all("SIMULATED · 2 GPUs" in h for h in heads), heads
        markers = [m.label for m in app.recording.markers_of(None)]
        assert any(m.startswith("host b: unreachable") for m in markers), markers
        assert any(m.startswith("host b: reconnected after") for m in markers), markers


def test_the_two_host_recording_snapshot(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The replay paused where host b is unreachable: the hosts grouped, b's reason and last figures greyed."""
    app = make_replay(TWO_HOSTS, speed=1.0)
    down = next(m.ts for m in app.recording.markers_of("failure") if m.label.startswith("host b: unreachable"))

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        src = app.source
        assert src is not None
        src.pause()  # paused before the seek: the state is the recording's up to that moment, and stays
        src.seek(down + 0.5)
        await wait_for(pilot, lambda: app.state.remotes.get("b") is not None
                       and app.state.remotes["b"].down is not None, 20, "the seek")
        await pilot.pause(0.3)
        app.clear_notifications()
        app.flush()
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(160, 48), run_before=run_before)


def test_hosts_flag_names_inventory_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.cli.cmd_console import remote_hosts
    from tui.cli.main import build_parser
    from tui.core.errors import InputError

    monkeypatch.setenv("DISAGG_TUI_CONFIG_DIR", str(tmp_path))
    (tmp_path / "hosts.yaml").write_text("hosts:\n  a:\n    ssh: ops@10.0.0.1\n  b:\n    ssh: gpu-b\n    sim: true\n")
    assert [h.name for h in remote_hosts("all")] == ["a", "b"]
    assert [(h.name, h.simulated) for h in remote_hosts("b,a,b")] == [("b", True), ("a", False)]
    with pytest.raises(InputError, match="no host 'c'"):
        remote_hosts("a,c")
    assert build_parser().parse_args(["--hosts", "a,b"]).hosts == "a,b"  # bare: the console with them
    assert build_parser().parse_args(["console", "--hosts", "all"]).hosts == "all"
    assert build_parser().parse_args(["--hosts", "a", "console"]).hosts == "a"
