"""``bench --events-to``: a run's events as JSON lines another process follows live (the console does)."""

from __future__ import annotations

import os
from pathlib import Path

from tui.core.bench.events import BenchDone, BenchStarted, BenchTick
from tui.core.bench.eventsfile import EventsTail, EventsWriter
from tui.core.events import EventBus


def test_written_events_are_read_back_whole_and_in_order(tmp_path: Path) -> None:
    path = tmp_path / "run.events.jsonl"
    bus = EventBus()
    writer = EventsWriter(path, argv=["bench", "--workload", "decode-heavy"]).attach(bus)
    tail = EventsTail(path)
    assert tail.read() == []
    assert tail.header is not None and tail.header.pid == os.getpid() and tail.header.alive()
    assert tail.header.argv == ("bench", "--workload", "decode-heavy")
    started = BenchStarted(run_id="r1", runner="disagg-tui", topology="dp2", workload="decode-heavy", total=10,
                           request_rate="inf", endpoint="http://127.0.0.1:8000", run_dir="/x", repeat=1)
    bus.publish(started)
    ticks = [BenchTick(run_id="r1", phase="run", elapsed_s=i / 4, total=10, sent=i, done=i // 2, failed=0,
                       inflight=1, waiting=0, output_tps=100.0 + i) for i in range(5)]
    for t in ticks:
        bus.publish(t)
    assert tail.read() == [started, *ticks]
    assert tail.read() == []  # nothing new
    done = BenchDone(run_id="r1", status="complete", run_dir="/x", summary={"completed": 10})
    bus.publish(done)
    writer.close()
    bus.publish(BenchDone(run_id="r2", status="failed"))  # after close: not written
    assert tail.read() == [done]
    assert (path.stat().st_mode & 0o777) == 0o600


def test_a_partial_last_line_waits_for_its_end_and_garbage_is_counted_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    bus = EventBus()
    EventsWriter(path, argv=[]).attach(bus)
    ev = BenchDone(run_id="r", status="complete")
    line = (path.read_bytes(), ev)
    bus.publish(ev)
    whole = path.read_bytes()
    path.write_bytes(line[0])  # the header only, then the event's line in two writes
    tail = EventsTail(path)
    assert tail.read() == []
    event_line = whole[len(line[0]):]
    with open(path, "ab") as fh:
        fh.write(event_line[:10])
    assert tail.read() == []
    with open(path, "ab") as fh:
        fh.write(event_line[10:] + b'{"kind": "no-such-kind"}\n[1, 2]\nnot json\n')
    assert tail.read() == [ev]
    assert tail.bad_lines == 3


def test_a_header_of_a_process_that_is_gone_is_not_alive(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text('{"t":"header","pid":999999999,"create_time":1.0,"argv":[]}\n', encoding="utf-8")
    tail = EventsTail(path)
    tail.read()
    assert tail.header is not None and not tail.header.alive()
    # our own pid with another start time: a reused pid, not the writer
    path.write_text(f'{{"t":"header","pid":{os.getpid()},"create_time":1.0,"argv":[]}}\n', encoding="utf-8")
    tail = EventsTail(path)
    tail.read()
    assert tail.header is not None and not tail.header.alive()
