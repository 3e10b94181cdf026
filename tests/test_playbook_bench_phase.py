"""A diagnosis knows what the benchmark was doing (issue 22, finding 13): on the H200, vLLM's "Triton kernel JIT
compilation during inference: _topk_topp_kernel" was logged inside the bench's own warm-up (07:40:20; the measured
run began at about 07:40:21 and run.json's triton_jit is []), and the console still said a request had hit a shape
the warm-up did not cover. The real decode log, followed as the console follows it, with the run's own events."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import psutil
import pytest

from tui.core.bench.events import BenchDone, BenchStarted, BenchTick
from tui.core.bench.windows import BenchWindows
from tui.core.events import Event, EventBus
from tui.core.follow import LayoutFollower
from tui.core.launch.state import LayoutRecord, ProcessRecord, StateStore
from tui.core.playbook import Diagnosis, MatchContext, load_playbook

LOG = Path(__file__).parent / "fixtures" / "vllm-0.24.0-h200-grid" / "1p1d" / "logs" / "decode-0.log"
RUN = "bench/1p1d-random-2048x128-20261201-074010"
STARTED = 1796110810.303879  # run.json: 07:40:10 UTC, the log's clock
ENDED = 1796110849.6003573
JIT = "triton-jit-during-inference"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")  # the capture's clock
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _bench(run_at: float) -> list[Event]:
    """The run's events as its bench publishes them: the start, a warm-up tick, the run's ticks, the end."""
    return [BenchStarted(ts=STARTED, run_id=RUN, runner="disagg-tui", topology="1p1d", workload="random-2048x128",
                         total=32, request_rate="inf"),
            BenchTick(ts=STARTED + 0.75, run_id=RUN, phase="warmup", elapsed_s=0.25, total=33, sent=33, done=0,
                      failed=0, inflight=33),
            BenchTick(ts=run_at + 0.6, run_id=RUN, phase="run", elapsed_s=0.6, total=32, sent=32, done=0, failed=0,
                      inflight=32),
            BenchDone(ts=ENDED, run_id=RUN, status="complete")]


def _follow(tmp_path: Path, events: list[Event]) -> list[Diagnosis]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "decode-0.log"
    shutil.copy(LOG, log)
    me = psutil.Process()
    with StateStore().locked() as layouts:
        layouts["L"] = LayoutRecord(
            id="L", created=STARTED - 200, simulated=False, status="ready", plan={"topology": "1p1d"},
            processes=[ProcessRecord("decode-0", "decode", os.getpid(), os.getpgid(0), me.create_time(), str(log),
                                     "http://127.0.0.1:1", [0], started=STARTED - 200, ready_at=STARTED - 70)])
    bus = EventBus()
    seen: list[Diagnosis] = []
    bus.subscribe(lambda ev: seen.append(ev) if isinstance(ev, Diagnosis) else None)
    follower = LayoutFollower(bus, StateStore(), load_playbook(operator=False), clock=lambda: ENDED + 1)
    for ev in events:
        bus.publish(ev)
    follower.poll_once()
    return seen


def test_a_jit_inside_the_benchmarks_own_warm_up_is_no_diagnosis(tmp_path: Path) -> None:
    seen = _follow(tmp_path, _bench(run_at=1796110821.0))
    assert JIT not in {d.entry_id for d in seen}, [d.headline() for d in seen]


def test_a_jit_during_the_measured_run_or_without_a_benchmark_still_is(tmp_path: Path) -> None:
    (during,) = [d for d in _follow(tmp_path, _bench(run_at=1796110815.0)) if d.entry_id == JIT]
    assert during.captures == {"kernel": "_topk_topp_kernel"} and during.line_no == 148
    assert [d.entry_id for d in _follow(tmp_path / "x", []) if d.entry_id == JIT] == [JIT]  # serving, no bench


def test_the_benchmark_windows_and_the_entrys_condition() -> None:
    w = BenchWindows()
    assert not w.known() and w.phase_at(STARTED) == "none"
    for ev in _bench(run_at=1796110821.0):
        w.feed(ev)
    assert [w.phase_at(STARTED + d) for d in (-5, 0.2, 5, 10.6, 11, 39, 45)] == \
        ["none", "setup", "warmup", "warmup", "run", "run", "none"]
    entry = next(e for e in load_playbook(operator=False).entries if e.id == JIT)
    assert entry.when.bench == ("none", "run")
    assert not entry.when.admits(MatchContext(bench_phase="warmup"))
    assert entry.when.admits(MatchContext(bench_phase="run")) and entry.when.admits(MatchContext())
