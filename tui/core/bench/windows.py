"""When each benchmark warmed the servers up and when it measured, from the events it publishes.

The playbook judges some server lines by what a benchmark was doing when they were logged: vLLM's "Triton kernel
JIT compilation during inference" inside a benchmark's own warm-up is the warm-up doing its job, not a request that
hit a shape the warm-up missed (issue 22, finding 13). A run's ticks carry their elapsed time from the start of
their phase (the warm-up's from the warm-up's start, the run's from the run's), so ``ts - elapsed_s`` places each
phase on the wall clock whatever the delay with which the ticks arrived.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from tui.core.bench.events import BenchDone, BenchStarted, BenchTick
from tui.core.events import Event

#: runs remembered (a session runs a handful; a campaign dozens, one after the other)
KEEP_RUNS = 64
#: seconds after a run's end that its servers may still log what it caused
END_GRACE_S = 2.0


@dataclass
class _Window:
    started: float
    warmup: float | None = None  # wall time its warm-up began
    run: float | None = None  # wall time its measured run began
    end: float | None = None


class BenchWindows:
    """Fed bench events (any thread), answers what phase a benchmark was in at a wall-clock time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: OrderedDict[str, _Window] = OrderedDict()

    def feed(self, ev: Event) -> None:
        if not isinstance(ev, BenchStarted | BenchTick | BenchDone):
            return
        with self._lock:
            w = self._runs.get(ev.run_id)
            if w is None:
                w = self._runs[ev.run_id] = _Window(started=ev.ts)
                while len(self._runs) > KEEP_RUNS:
                    self._runs.popitem(last=False)
            if isinstance(ev, BenchTick):
                began = ev.ts - max(ev.elapsed_s, 0.0)
                w.started = min(w.started, began)
                if ev.phase == "warmup":
                    w.warmup = began if w.warmup is None else min(w.warmup, began)
                elif ev.phase == "run":
                    w.run = began if w.run is None else min(w.run, began)
            elif isinstance(ev, BenchDone):
                w.end = ev.ts

    def known(self) -> bool:
        """Whether any benchmark was heard of."""
        return bool(self._runs)

    def phase_at(self, t: float) -> str:
        """``setup``, ``warmup`` or ``run`` of the benchmark going on at ``t``, else ``none``."""
        with self._lock:
            runs = list(self._runs.values())
        for w in reversed(runs):
            if t < w.started or (w.end is not None and t > w.end + END_GRACE_S):
                continue
            if w.run is not None and t >= w.run:
                return "run"
            if w.warmup is not None and t >= w.warmup:
                return "warmup"
            return "setup"
        return "none"
