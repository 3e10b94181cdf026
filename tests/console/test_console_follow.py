"""The console follows each remote host's layout too (issue 26): its ``follow --json`` stream (a fake here, at the
console's seam ``make_console(follows=...)``) reaches that host's servers: the log pane shows a remote server's
log (``decode-0`` on a and here are two servers), the band its start and its host's diagnosis, the GPU header its
layout's status; the stream's outage is the host's one unreachable state; the events are recorded (secrets
redacted) and replayed. The launch screen's hosts field plans a layout across hosts and starts ``up --hosts``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, OptionList, SelectionList, Static

from tests.console import scripted
from tests.console.conftest import wait_for
from tests.console.remote_fakes import T0, FakeRemote, follow, starting_on, tick, unreachable
from tests.console.test_console_snapshots import settle
from tests.console.test_launch_screen import MODEL, _console
from tui.console import across
from tui.console.app import ConsoleApp, make_console
from tui.console.screens.launch import LaunchScreen
from tui.console.widgets.band import Band
from tui.console.widgets.gpus import GpuPanel
from tui.console.widgets.logpane import LogPane
from tui.console.widgets.servers import ServerTable
from tui.core.host.base import HostOptions
from tui.core.playbook import Diagnosis
from tui.core.remote.events import HostReconnected

pytestmark = pytest.mark.usefixtures("utc")  # times drawn in UTC (tests/console/conftest.py)

SECRET = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


def following_a() -> tuple[ConsoleApp, FakeRemote, FakeRemote]:
    """This host serving 1P1D (its own decode-0); host a streaming ticks (no servers in them yet) and its layout
    stream: its 1P1D starting, its decode-0 loading weights, three log lines (one an own poll)."""
    watch = FakeRemote(tick("a", servers=False))
    layout = FakeRemote(*starting_on("a"))
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=scripted.ready_under_load(),
                       remotes={"a": watch}, follows={"a": layout})
    return app, watch, layout


async def _select(pilot: Any, app: ConsoleApp, key: str) -> None:
    table = app.screen.query_one(ServerTable)
    await wait_for(pilot, lambda: key in table._names, 5, key)
    table.move_cursor(row=table._names.index(key))
    await pilot.pause(0.4)


async def test_a_remote_servers_log_start_and_diagnosis() -> None:
    app, watch, layout = following_a()
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        def lines() -> int:
            view = app.state.remotes["a"].servers.get("decode-0")
            return len(view.logs) if view is not None else 0

        await wait_for(pilot, lambda: lines() == 3, 5, "a's log lines")
        await _select(pilot, app, "a/decode-0")
        log = app.screen.query_one(LogPane)
        assert log.view is app.state.remotes["a"].servers["decode-0"]
        assert log.view is not app.state.servers["decode-0"]  # this host's decode-0 is another server
        assert log.border_title == "Log decode-0 on a · 1 polls hidden (o shows)"
        assert log.border_subtitle == "a:/srv/state/logs/decode-0.log"
        assert [log.render_line(y).text.rstrip() for y in range(2)] == [
            "INFO 12-01 11:59:01 [loader.py:42] a decode-0 line 1",
            "INFO 12-01 11:59:03 [loader.py:42] a decode-0 line 3"]
        band = app.screen.query_one(Band).text.plain
        assert band.startswith("decode-0 on a (decode): "), band
        assert " 40% loading weights" in band and "loading weights 40 s / ~2m00s  ETA 1m20s" in band, band
        assert "On a: 1p1d of qwen3.6-27b-nvfp4 is starting at http://10.64.2.2:8000." in band
        await pilot.pause(0.5)
        head = next(ln for ln in app.screen.query_one(GpuPanel).text.plain.splitlines() if ln.startswith("▌a"))
        assert head.startswith("▌a SIMULATED · 2 GPUs · 1p1d of qwen3.6-27b-nvfp4 starting"), head

        # its host's own playbook matched line 3: the line marked, the band says it, a notification; this host's
        # banner (and its 'a' key that relaunches this host's layout) is not taken by another host's failure
        for ev in follow("a", Diagnosis(ts=T0, server="decode-0", entry_id="cuda-oom", title="CUDA out of memory",
                                        severity="error", priority=10, line_no=3, line="line 3",
                                        explanation="the KV cache did not fit", fix="lower --gpu-memory-utilization")):
            layout.push(ev)
        await wait_for(pilot, lambda: log.render_line(1).text.startswith("✖ cuda-oom "), 5, "the marked line")
        band = app.screen.query_one(Band).text.plain
        assert "failed: cuda-oom · CUDA out of memory\nFix (on a): lower --gpu-memory-utilization" in band, band
        assert app.state.diagnoses == [] and app.state.active_diagnosis() is None
        assert any(n.title == "a: decode-0 failed: cuda-oom" for n in app._notifications)

        # the layout stream drops while the ticks flow: the host's one unreachable state, told once; its next
        # tick shows it reachable, and the stream's reconnect is not a second "reconnected"
        layout.push(unreachable("a", ts=T0, reason="closed"))
        await wait_for(pilot, lambda: app.state.remotes["a"].down is not None, 5, "a down")
        watch.push(tick("a", servers=False))
        await wait_for(pilot, lambda: app.state.remotes["a"].down is None, 5, "a's next tick")
        layout.push(HostReconnected(ts=T0, host="a", down_s=1.0))
        await pilot.pause(0.5)
        titles = [n.title for n in app._notifications]
        assert titles.count("a: its log stream is down (closed)") == 1 and "a reconnected" not in titles, titles
        assert app.state.remotes["a"].down is None


def test_remote_events_are_recorded_redacted_and_replayed(tmp_path: Path) -> None:
    from tui.console.state import ConsoleState
    from tui.core.events import EventBus
    from tui.core.launch.events import LogLine
    from tui.core.record import Recorder, new_header
    from tui.core.record.present import SessionPresent
    from tui.core.record.reader import Recording

    bus = EventBus()
    present = SessionPresent(bus)
    for ev in starting_on("a"):  # before the recording began: kept for it
        bus.publish(ev)
    path = tmp_path / "r.dtrec"
    rec = Recorder(path, new_header("test", extra={"hosts": ["a"]})).start()
    rec.attach(bus, present)
    for ev in follow("a", LogLine(ts=T0, server="decode-0", lineno=4, text=f"token {SECRET} in a log line")):
        bus.publish(ev)
    rec.close()
    raw = path.read_bytes()
    events = list(Recording.open(path).events())
    assert SECRET.encode() not in raw and all(SECRET not in str(ev) for ev in events)
    assert [ev.kind for ev in events].count("remote_event") == len(starting_on("a")) + 1
    state = ConsoleState(scripted.clock)
    for ev in events:
        state.apply(ev)
    view = state.remotes["a"].servers["decode-0"]
    assert [n for n, _, _ in view.logs] == [1, 2, 3, 4]
    assert view.logs[-1][1] == "token <redacted> in a log line"
    assert view.phase_label == "loading weights" and state.remotes["a"].layout is not None


def test_a_remote_servers_log_snapshot(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """80×24: host a's decode-0 selected: its log in the pane, its start in the band."""
    app, _, _ = following_a()

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await wait_for(pilot, lambda: "decode-0" in app.state.remotes["a"].servers, 5, "a's server")
        await _select(pilot, app, "a/decode-0")
        await settle()(pilot)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


@pytest.fixture
def two_inventory_hosts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """hosts.yaml naming a and b (simulated); each host's answer faked (no SSH): b's vLLM differs for dp2. The
    plans asked of the hosts are listed."""
    import os

    (Path(os.environ["DISAGG_TUI_CONFIG_DIR"]) / "hosts.yaml").write_text(
        "hosts:\n  a:\n    ssh: ops@10.0.0.1\n    sim: true\n  b:\n    ssh: ops@10.0.0.2\n    sim: true\n")
    asked: list[tuple[str, ...]] = []

    def ask(plan: Any) -> across.HostsAnswer:
        asked.append((plan.topology, *plan.hosts))
        checks = [("a: ports", "pass", "free")]
        if plan.topology == "dp2":
            checks.append(("vllm", "fail", "a has vLLM 0.24.0, b has 0.23.1: the same on every host"))
        return across.HostsAnswer(servers={h: [(f"{h}-server", "decode", f"vllm serve {MODEL}")] for h in plan.hosts},
                                  proxies={}, warnings=[], checks=checks)

    monkeypatch.setattr(across, "ask_hosts", ask)
    return asked


async def test_launch_across_hosts_starts_up_hosts_and_follows_them(two_inventory_hosts: list[Any]) -> None:
    app, started = _console()
    connected: list[str] = []

    def connect(name: str) -> across.Connected:
        connected.append(name)
        return FakeRemote(tick(name, servers=False)), FakeRemote(), lambda: None

    app._connect = connect
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await pilot.press("l")
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        hosts = screen.query_one("#hosts", SelectionList)
        await wait_for(pilot, lambda: hosts.option_count == 2 and screen.planned is not None, 30, "hosts, plans")
        models = screen.query_one("#models", OptionList)
        models.highlighted = next(i for i in range(models.option_count) if models.get_option_at_index(i).id == MODEL)
        hosts.select("a")
        hosts.select("b")
        await wait_for(pilot, lambda: any(c.across is not None for c in screen.choices), 20, "the plans across")
        by = {c.name: c for c in screen.choices}
        assert "tp2" in by and by["tp2"].across is None and "Ray" in by["tp2"].refused  # one line, its reason
        assert by["1p1d"].across is not None
        assert [p.host for p in by["1p1d"].across.parts] == ["a", "b"]

        # dp2: b's vLLM differs: one line in the form, nothing starts
        topologies = screen.query_one("#topologies", OptionList)
        topologies.highlighted = [c.name for c in screen.choices].index("dp2")
        await wait_for(pilot, lambda: "refused across hosts" in str(screen.query_one("#form-error", Static)
                                                                     .render()), 10, "the refusal")
        assert "vllm: a has vLLM 0.24.0, b has 0.23.1" in str(screen.query_one("#form-error", Static).render())
        await pilot.press("ctrl+l")
        assert started == []

        topologies.highlighted = [c.name for c in screen.choices].index("1p1d")
        # the serve knobs across hosts come from the catalogue too, per role (each host's plan judges its part)
        assert {"prefill.mnbt", "decode.mnbt", "spec"} <= {r.key for r in screen.knob_rows["1p1d"]}
        screen.query_one("#knob", Input).value = "decode.mnbt=2048"
        await wait_for(pilot, lambda: ("1p1d", "a", "b") in two_inventory_hosts and "Launching runs here: "
                       "disagg-tui up --hosts a,b --model qwen3.6-27b-nvfp4 --topology 1p1d" in str(
                           screen.query_one("#plan-text", Static).render()), 10, "the hosts' answer")
        plan_text = str(screen.query_one("#plan-text", Static).render())
        assert "on a (10.0.0.1): prefill servers" in plan_text, plan_text
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: started, 5, "the launch")
        argv = started[0]
        assert argv[:7] == ["up", "--hosts", "a,b", "--model", MODEL, "--topology", "1p1d"], argv
        assert "--knob=decode.mnbt=2048" in argv, argv
        assert "--vllm" not in argv and "--sim" not in argv  # each host's are the inventory's
        await wait_for(pilot, lambda: set(app.state.remotes) == {"a", "b"}, 5, "both hosts followed")
        assert connected == ["a", "b"] and app.ctx.across == ("a", "b")

        # s on the dashboard (no layout of this host up): down --hosts, once confirmed
        await pilot.press("s")
        await pilot.pause(0.2)
        await pilot.press("y")
        await wait_for(pilot, lambda: len(started) == 2, 5, "the stop")
        assert started[1] == ["down", "--hosts", "a,b"]


async def test_quit_stop_servers_stops_the_layout_across_hosts_too() -> None:
    """A layout across a and b is up (no layout of this host): quitting offers to stop it, names it, and 's' runs
    'down --hosts a,b' detached before the console exits (it stopped only this host's layout before)."""
    from tui.console.screens.modals import QuitModal

    app, started = _console()
    async with app.run_test(size=(80, 24)) as pilot:
        app.ctx.across = ("a", "b")
        await pilot.press("q")
        await pilot.pause(0.2)
        modal = app.screen
        assert isinstance(modal, QuitModal) and modal.query("#stop")
        assert "A layout across a, b is up" in str(modal.query_one("#quit-across", Static).render())
        await pilot.press("s")
        await wait_for(pilot, lambda: started, 5, "the stop")
        assert started == [["down", "--hosts", "a,b"]]


async def test_a_on_a_remote_servers_diagnosis_relaunches_across_hosts_with_the_fix() -> None:
    """Another host's failure fixed in one step: 'a' with a/decode-0 selected asks, then runs 'up --hosts a,b …
    --apply-fix ENTRY' (the request this console launched across hosts, the fix added); a layout across hosts
    launched elsewhere gets the command to run instead; this host's own diagnosis is not what it fixes."""
    from tui.core.launch.events import LayoutChanged
    from tui.core.plan.request import LaunchRequest

    app, _, layout = following_a()
    started: list[list[str]] = []
    app.run_job = lambda name, argv, done_message="": started.append(argv)  # type: ignore[method-assign,assignment]
    app.add_hosts = lambda hosts: None  # type: ignore[method-assign,assignment]
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        for ev in follow("a", Diagnosis(ts=T0, server="decode-0", entry_id="ssm-conv-layout-nixl", title="SSM layout",
                                        severity="error", priority=10, line_no=3, line="line 3", fixable=True,
                                        explanation="", fix="set VLLM_SSM_CONV_STATE_LAYOUT=DS"),
                         LayoutChanged(ts=T0, layout_id="a-layout", status="failed", topology="1p1d",
                                       profile_id="qwen3.6-27b-nvfp4", endpoint="", simulated=True)):
            layout.push(ev)
        await wait_for(pilot, lambda: app.state.remotes["a"].diagnoses, 5, "a's diagnosis")
        await _select(pilot, app, "a/decode-0")
        app.ctx.across = ("a", "b")
        await pilot.press("a")  # not launched across hosts from here: the command to run
        await pilot.pause(0.2)
        assert started == []
        assert any("disagg-tui up --hosts a,b -m qwen3.6-27b-nvfp4 -t 1p1d --apply-fix ssm-conv-layout-nixl"
                   in str(n.message) for n in app._notifications)
        app.last_across = LaunchRequest(model=MODEL, topology="1p1d")
        await pilot.press("a")
        await pilot.pause(0.3)
        await pilot.press("y")
        await wait_for(pilot, lambda: started, 5, "the relaunch")
        argv = started[0]
        assert argv[:7] == ["up", "--hosts", "a,b", "--model", MODEL, "--topology", "1p1d"], argv
        assert "--apply-fix=ssm-conv-layout-nixl" in argv or argv[argv.index("--apply-fix") + 1] == \
            "ssm-conv-layout-nixl", argv
        assert app.state.remotes["a"].diagnoses == []  # the fixed failure is not shown again

        # a remote's entry id is hostile: one that is no playbook id never reaches a command line
        for ev in follow("a", Diagnosis(ts=T0, server="decode-0", entry_id="x,--vllm=/tmp/evil", title="odd",
                                        severity="error", priority=10, line_no=3, line="line 3", fixable=True,
                                        explanation="", fix="none")):
            layout.push(ev)
        await wait_for(pilot, lambda: app.state.remotes["a"].diagnoses, 5, "the odd diagnosis")
        await pilot.press("a")
        await pilot.pause(0.2)
        assert len(started) == 1 and any("is not a playbook entry id" in str(n.message) for n in app._notifications)
