"""A recording started after the session's layout was shown (a console that reattached, a recording switched on
later) still holds that layout: its servers, phases, ready, diagnoses and the last lines of each log (issue 22,
finding 9: the .dtrec of a reattached console held only GPU, log, health and metrics events)."""

from __future__ import annotations

import threading
from pathlib import Path

from tui.core.events import EventBus
from tui.core.launch.events import LayoutChanged, LogLine, ServerLaunched, ServerPhase, ServerReady
from tui.core.playbook.events import Diagnosis
from tui.core.record import Recorder, Recording, new_header
from tui.core.record.present import SessionPresent
from tui.core.record.summary import render, summarize
from tui.core.telemetry.events import ServerHealth

T0 = 1_800_000_000.0


def _reattach(bus: EventBus, layout_id: str = "L1") -> None:
    """What the layout follower publishes in its first look at a layout that is up."""
    bus.publish(LayoutChanged(ts=T0, layout_id=layout_id, status="ready", topology="tp1", profile_id="m"))
    bus.publish(ServerLaunched(ts=T0, layout_id=layout_id, server="server", role="single", pid=1,
                               url="http://127.0.0.1:1", command="vllm serve m", log="/x/server.log",
                               started=T0 - 60))
    for i in range(1, 2001):
        bus.publish(LogLine(ts=T0 + 0.001 * i, server="server", lineno=i, text=f"line {i}"))
    bus.publish(ServerPhase(ts=T0 + 3, server="server", phase="load", label="loading weights", progress=0.3))
    bus.publish(ServerPhase(ts=T0 + 3, server="server", phase="ready", label="ready", progress=1.0))
    bus.publish(ServerReady(ts=T0 + 3, server="server", url="http://127.0.0.1:1", startup_s=42.0))
    bus.publish(Diagnosis(ts=T0 + 3, server="server", entry_id="e1", title="t", severity="warning", priority=1,
                          line_no=3, line="warn", explanation="x", fix="y"))


def _record_late(tmp_path: Path, bus: EventBus, present: SessionPresent | None) -> Recording:
    rec = Recorder(tmp_path / "late.dtrec", new_header("disagg-tui console")).start()
    rec.attach(bus, present)
    bus.publish(ServerHealth(ts=T0 + 5, server="server", endpoint="http://127.0.0.1:1", role="single", state="up"))
    rec.close()
    return Recording.open(tmp_path / "late.dtrec")


def test_a_recording_started_after_the_layout_was_shown_holds_it(tmp_path: Path) -> None:
    bus = EventBus()
    present = SessionPresent(bus)
    _reattach(bus)
    with _record_late(tmp_path, bus, present) as recording:
        events = list(recording.events())
        summary = summarize(recording)
    kinds = [e.kind for e in events]
    assert kinds[0] == "layout_changed" and kinds[-1] == "server_health"  # the present first, in its order
    assert {"server_launched", "server_phase", "server_ready", "diagnosis"} <= set(kinds)
    lines = [e for e in events if isinstance(e, LogLine)]
    assert [e.lineno for e in lines] == list(range(1001, 2001))  # the last 1,000, as the log pane keeps
    assert [lay.layout_id for lay in summary.layouts] == ["L1"]
    text = render(summary)
    assert "tp1 of m: ready (started before the recording) (server 42.0 s); last ready" in text, text


def test_without_the_present_the_late_recording_has_no_layout(tmp_path: Path) -> None:
    """What the console did before: the recorder subscribed after the follower's first look."""
    bus = EventBus()
    _reattach(bus)
    with _record_late(tmp_path, bus, None) as recording:
        assert [e.kind for e in recording.events()] == ["server_health"]


def test_a_new_layout_replaces_the_previous_ones_present() -> None:
    bus = EventBus()
    present = SessionPresent(bus)
    _reattach(bus, "L1")
    bus.publish(LayoutChanged(ts=T0 + 9, layout_id="L2", status="starting", topology="dp2", profile_id="m"))
    kept = present.events()
    assert [type(e).__name__ for e in kept] == ["LayoutChanged"] and kept[0].layout_id == "L2"  # type: ignore[attr-defined]


def test_no_event_is_lost_or_doubled_while_a_recorder_attaches() -> None:
    """A source thread publishes while the recorder attaches from another: every line once, in order."""
    bus = EventBus()
    present = SessionPresent(bus, log_lines=1_000_000)
    got: list[int] = []
    started = threading.Event()

    def publish() -> None:
        for i in range(20_000):
            bus.publish(LogLine(server="server", lineno=i, text=""))
            if i == 100:
                started.set()

    src = threading.Thread(target=publish)
    src.start()
    started.wait(10)
    detach = present.attach(lambda ev: got.append(ev.lineno))  # type: ignore[attr-defined]
    src.join()
    detach()
    assert got == sorted(set(got)) and got[-1] == 19_999
    assert got[0] == 0 and len(got) == 20_000
