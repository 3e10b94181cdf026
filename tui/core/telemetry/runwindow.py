"""A server's latency histograms over one benchmark run: the deltas from the run's start to its end.

The poller's figures cover the last ``window_s`` seconds. During and after a benchmark, that window mixes in the
warm-up: on the H200 the servers' view said "TTFT p50 7.5 s" (warm-up requests that waited on a Triton JIT) next
to the run's 726 ms (issue 22, finding 14). A :class:`RunWindow` counts the observations made between the scrape
at (or just before) the run's start and the first scrape at or after its end, one scrape step at a time, so it
needs no scrape older than the rolling window. Once the run has ended it stays frozen until the server sees new
traffic (a first token observed after the end): its figures then return to the rolling window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tui.core.telemetry.deltas import Scrape, histogram_step
from tui.core.telemetry.prom import Bucket, Histogram

_Acc = tuple[dict[float, float], float, float]


@dataclass
class RunWindow:
    start: float  # wall time the run began (its warm-up excluded)
    names: tuple[str, ...]  # the histograms counted; the first is the one whose new observations end a frozen run
    end: float | None = None
    base_ts: float | None = None  # the scrape the figures count from
    last_ts: float | None = None  # the newest scrape counted
    frozen: bool = False  # the run ended and its last scrape is counted
    stale: bool = False  # frozen, and the server has served new requests since
    _acc: dict[str, _Acc] = field(default_factory=dict)

    def begin(self, scrapes: Sequence[Scrape]) -> None:
        """Count from the newest of ``scrapes`` at or before the start (the oldest when the start came later than
        the window reaches back), through the newest."""
        if not scrapes:
            return
        base = 0
        for i, sc in enumerate(scrapes):
            if sc.ts <= self.start:
                base = i
        self.base_ts = self.last_ts = scrapes[base].ts
        for prev, cur in zip(scrapes[base:], scrapes[base + 1:], strict=False):
            self.step(prev, cur)

    def step(self, prev: Scrape, cur: Scrape) -> None:
        """One more scrape (``cur``, after ``prev``)."""
        if self.base_ts is None:
            self.base_ts = self.last_ts = prev.ts
        if self.frozen:
            if not self.stale and self.names and histogram_step(prev, cur, self.names[0])[2] > 0:
                self.stale = True
            return
        for name in self.names:
            buckets, d_sum, d_count, _ = histogram_step(prev, cur, name)
            acc_b, acc_s, acc_c = self._acc.get(name, ({}, 0.0, 0.0))
            merged = dict(acc_b)
            for le, c in buckets.items():
                merged[le] = merged.get(le, 0.0) + c
            self._acc[name] = (merged, acc_s + d_sum, acc_c + d_count)
        self.last_ts = cur.ts
        if self.end is not None and cur.ts >= self.end:
            self.frozen = True

    def finish(self, end: float, newest: float | None) -> None:
        """The run ended at ``end``: what the next scrape at or after it brings is the last counted."""
        self.end = end
        if newest is not None and newest >= end and self.last_ts is not None and self.last_ts >= end:
            self.frozen = True

    def histogram(self, name: str) -> Histogram | None:
        acc = self._acc.get(name)
        if acc is None:
            return None
        buckets, total, count = acc
        return Histogram(tuple(Bucket(le, max(c, 0.0)) for le, c in sorted(buckets.items())), total, max(count, 0.0))
