"""The supervisor and lifecycle with real subprocesses: start, ready, crash, hang, stop escalation, reattach."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import PROC, ScriptHost, free_port, layout_processes
from tui.core.errors import LayoutBusy, RunFailed
from tui.core.events import Event, EventBus
from tui.core.host.base import Command
from tui.core.launch.events import ServerExited, ServerPhase, ServerReady, ServerStalled
from tui.core.launch.lifecycle import UpOptions, bring_up, process_states, tear_down
from tui.core.launch.state import StateStore
from tui.core.models import Catalog
from tui.core.plan.planner import PlanOptions, ProxySpec, plan

DUMMY = Catalog.load().model("dummy-qwen3-8b")


class ProxyScriptHost(ScriptHost):
    def proxy_command(self, proxy: ProxySpec) -> Command:
        return Command(argv=[sys.executable, str(PROC), "--port", str(proxy.port), "--delay", "0.1"],
                       env=dict(os.environ))


def _plan(topology: str = "1p1d") -> Any:
    port = free_port()
    base = free_port()
    while abs(base - port) < 300 or base + 300 > 65000:
        base = free_port()
    return plan(DUMMY, topology, ScriptHost().facts,
                PlanOptions(port=port, server_base_port=base, side_channel_base=base + 1))


def _opts(**kw: Any) -> UpOptions:
    base = {"ready_timeout_s": 20.0, "stall_timeout_s": 8.0, "probe_interval_s": 0.1, "skip_preflight": True}
    base.update(kw)
    return UpOptions(**base)


def _collect(bus: EventBus) -> list[Event]:
    seen: list[Event] = []
    bus.subscribe(seen.append)
    return seen


def test_up_ready_then_down_leaves_nothing() -> None:
    p = _plan()
    bus = EventBus()
    seen = _collect(bus)
    rec = asyncio.run(bring_up(DUMMY, p, ProxyScriptHost(), bus, options=_opts()))
    assert rec.status == "ready"
    assert {pr.name for pr in rec.processes} == {"prefill-0", "decode-0", "proxy"}
    ready = [e for e in seen if isinstance(e, ServerReady)]
    assert {e.server for e in ready} == {"prefill-0", "decode-0", "proxy"}
    phases = [e.phase for e in seen if isinstance(e, ServerPhase) and e.server == "prefill-0"]
    assert phases[0] == "args" and phases[-1] == "ready" and "loaded" in phases
    assert all(process_states(rec).values())
    stored = StateStore().active()
    assert stored is not None and stored.id == rec.id and stored.status == "ready"
    assert len(layout_processes(rec.id)) == 3
    asyncio.run(tear_down(rec, bus))
    assert layout_processes(rec.id) == []
    assert StateStore().active() is None


def test_crash_reports_last_lines_and_stops_the_rest() -> None:
    p = _plan()
    bus = EventBus()
    seen = _collect(bus)
    host = ProxyScriptHost({"decode-0": ["--crash-after", "0.3"]})
    with pytest.raises(RunFailed, match=r"decode-0 exited with code 1 during startup"):
        asyncio.run(bring_up(DUMMY, p, host, bus, options=_opts()))
    exited = [e for e in seen if isinstance(e, ServerExited)]
    assert exited and exited[0].server == "decode-0"
    assert any("EngineCore failed to start" in line for line in exited[0].last_lines)
    layouts = StateStore().read()
    (rec,) = layouts.values()
    assert rec.status == "failed"
    assert layout_processes(rec.id) == []


def test_silent_start_is_reported_as_stalled() -> None:
    p = _plan("tp1")
    bus = EventBus()
    seen = _collect(bus)
    with pytest.raises(RunFailed, match="stalled: no log output"):
        asyncio.run(bring_up(DUMMY, p, ScriptHost({"server": ["--hang"]}), bus, options=_opts(stall_timeout_s=1.5)))
    stalled = [e for e in seen if isinstance(e, ServerStalled)]
    assert stalled and stalled[0].phase == "config"
    (rec,) = StateStore().read().values()
    assert layout_processes(rec.id) == []


def test_deadline() -> None:
    p = _plan("tp1")
    with pytest.raises(RunFailed, match="not ready after 1 s"):
        asyncio.run(bring_up(DUMMY, p, ScriptHost({"server": ["--delay", "30"]}), EventBus(),
                             options=_opts(ready_timeout_s=1.0)))


def test_stop_escalates_to_sigkill_and_kills_children() -> None:
    p = _plan("tp1")
    bus = EventBus()
    host = ScriptHost({"server": ["--ignore-sigint", "--ignore-sigterm", "--children", "2"]})
    rec = asyncio.run(bring_up(DUMMY, p, host, bus, options=_opts()))
    assert len(layout_processes(rec.id)) == 3
    from tui.core.launch.lifecycle import stop_layout

    steps: list[str] = []
    stop_layout(rec, int_wait=0.5, term_wait=0.5, on_step=steps.append)  # (not the 10 s an operator gets)
    assert [s.split()[0] for s in steps] == ["SIGINT", "SIGTERM", "SIGKILL"]
    assert layout_processes(rec.id) == []


def test_one_layout_per_host_and_replace() -> None:
    bus = EventBus()
    first = asyncio.run(bring_up(DUMMY, _plan("tp1"), ScriptHost(), bus, options=_opts()))
    with pytest.raises(LayoutBusy, match="one layout per host"):
        asyncio.run(bring_up(DUMMY, _plan("tp1"), ScriptHost(), bus, options=_opts()))
    second = asyncio.run(bring_up(DUMMY, _plan("tp1"), ScriptHost(), bus, options=_opts(replace=True)))
    assert layout_processes(first.id) == []
    assert StateStore().active() is not None and StateStore().active().id == second.id  # type: ignore[union-attr]
    asyncio.run(tear_down(second, bus))


LAUNCHER = textwrap.dedent("""
    import asyncio, json, sys
    sys.path.insert(0, {root!r})
    from tests.test_supervisor import DUMMY, ProxyScriptHost, _opts
    from tui.core.events import EventBus
    from tui.core.launch.lifecycle import bring_up
    from tui.core.plan.planner import LaunchPlan
    p = LaunchPlan.from_dict(json.loads(sys.argv[1]))
    rec = asyncio.run(bring_up(DUMMY, p, ProxyScriptHost(), EventBus(), options=_opts()))
    print("READY", rec.id, flush=True)
    import time
    time.sleep(3600)
""")


def test_reattach_and_down_after_launcher_sigkill(tmp_path: Path) -> None:
    p = _plan()
    root = str(Path(__file__).resolve().parent.parent)
    script = tmp_path / "launch.py"
    script.write_text(LAUNCHER.format(root=root))
    launcher = subprocess.Popen([sys.executable, str(script), json.dumps(p.to_dict())], stdout=subprocess.PIPE,
                                text=True, cwd=root)
    try:
        line = launcher.stdout.readline() if launcher.stdout else ""
        assert line.startswith("READY"), line
        layout_id = line.split()[1]
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
    # the servers outlive their launcher; a new process finds them through the state file
    time.sleep(0.2)
    rec = StateStore().active()
    assert rec is not None and rec.id == layout_id
    assert all(process_states(rec).values())
    assert len(layout_processes(layout_id)) == 3
    asyncio.run(tear_down(rec, EventBus()))
    assert layout_processes(layout_id) == []


@pytest.mark.parametrize("pgid", [0, 1, "own", "other"])
def test_stop_signals_only_the_group_its_process_is_in(pgid: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A state file from outside could name pgid 0 or 1 (init's group), this process's group, or a group the
    process is not in: none of them is signalled; the process itself still is, and stops."""
    import psutil

    from tui.core.launch import supervisor

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        started = psutil.Process(child.pid).create_time()
        wrong = {"own": os.getpgrp(), "other": os.getpgrp() + 1 if os.getpgrp() + 1 != child.pid else 2}.get(
            pgid, pgid)
        signalled: list[int] = []
        monkeypatch.setattr(supervisor.os, "killpg", lambda g, s: signalled.append(g))
        supervisor.stop_processes([supervisor.StopTarget("x", child.pid, wrong, started)], int_wait=5,
                                  popens={child.pid: child})
        assert signalled == [] and child.poll() is not None
    finally:
        child.kill()
        child.wait()
