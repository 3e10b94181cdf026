"""The defects issue 13's hardening pass found and left open, each with the test that failed before its fix."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.hardening.cli import no_traceback, run_cli
from tests.helpers import layout_port_args
from tui.core.events import EventBus
from tui.core.launch.events import LayoutChanged
from tui.core.launch.state import LayoutRecord, ProcessRecord, StateStore

MODEL = "dummy-qwen3-8b"


def _record(status: str, names: tuple[str, ...]) -> LayoutRecord:
    procs = [ProcessRecord(name=n, role="proxy" if n == "proxy" else "prefill", pid=1, pgid=1, create_time=0.0,
                           log="", url="") for n in names]
    return LayoutRecord(id="L", created=0.0, simulated=True, plan={}, processes=procs, status=status)


def test_layout_health_names_what_exited() -> None:
    from tui.core.launch.state import layout_health

    rec = _record("ready", ("prefill-0", "decode-0", "proxy"))
    assert layout_health(rec, {"prefill-0": True, "decode-0": True, "proxy": True}).status == "ready"
    h = layout_health(rec, {"prefill-0": True, "decode-0": False, "proxy": True})
    assert (h.status, h.recorded, h.exited) == ("degraded", "ready", ("decode-0",))
    assert h.line == "degraded (exited: decode-0)"
    assert layout_health(rec, {"prefill-0": True, "decode-0": True}).exited == ("proxy",)
    assert layout_health(rec, {}).status == "failed"
    # a layout being stopped, or stopped, or failed already: its processes are meant to be gone
    for status in ("stopping", "stopped", "failed"):
        assert layout_health(_record(status, ("proxy",)), {}).status == status


@pytest.mark.timeout(90)
def test_status_watch_and_follower_say_degraded_when_a_server_died() -> None:
    """Before the fix ``status`` showed the process EXITED but the layout ``ready``; ``watch`` and the console's
    follower said ``ready`` too."""
    up = run_cli(["up", "--sim", "--sim-startup", "0.3", "--model", MODEL, "--topology", "1p1d",
                  *layout_port_args()])
    assert up.code == 0, up.err[-2000:]
    try:
        rec = StateStore().active()
        assert rec is not None
        decode = next(p for p in rec.processes if p.role == "decode")
        os.kill(decode.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            st = run_cli(["status", "--json"])
            lay = json.loads(st.out)["layouts"][0]
            if lay["exited"]:
                break
            time.sleep(0.1)
        assert lay["status"] == "degraded" and lay["recorded_status"] == "ready", lay
        assert lay["exited"] == [decode.name]
        assert json.loads(st.out)["snapshot"]["layout"]["status"] == "degraded"
        text = run_cli(["status"])
        assert no_traceback(text) and text.code == 0
        head = text.out.splitlines()[0]
        assert f"degraded (exited: {decode.name})" in head and "ready" not in head, text.out

        watch = run_cli(["watch", "--json", "--seconds", "0.6", "--rate", "5"])
        assert watch.code == 0, watch.err
        ticks = [json.loads(line) for line in watch.out.splitlines() if line.strip()]
        assert ticks and all(t["layout"]["status"] == "degraded" for t in ticks)
        assert ticks[0]["layout"]["exited"] == [decode.name]
        watch_text = run_cli(["watch", "--seconds", "0.3", "--rate", "5"])
        assert f"degraded (exited: {decode.name})" in watch_text.out, watch_text.out

        from tui.core.follow import LayoutFollower

        bus = EventBus()
        seen: list[LayoutChanged] = []
        bus.subscribe(lambda ev: seen.append(ev) if isinstance(ev, LayoutChanged) else None)
        follower = LayoutFollower(bus, StateStore())
        follower.poll_once()
        assert seen and seen[-1].status == "degraded" and decode.name in seen[-1].note, seen
    finally:
        down = run_cli(["down"])
    assert down.code == 0, down.err
