"""Counter and histogram deltas across successive ``/metrics`` scrapes, with resets and late series handled.

A :class:`Scrape` is linked to the one before it and memoises what the figures read, so a window's increase is the
newest running total minus the oldest whatever the window's length. :mod:`tui.core.telemetry.derive` reads these.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar, cast

from tui.core.telemetry.prom import Bucket, Exposition, Histogram

SeriesKey = tuple[tuple[str, str], ...]
MemoKey = tuple[str, str, tuple[tuple[str, str], ...]]
_HistSum = tuple[dict[float, float], float, float]  # bucket counts, sum, count
_HistStep = tuple[dict[float, float], float, float, bool]  # the same between two scrapes, and "any series"
T = TypeVar("T")
D = TypeVar("D")


@dataclass(eq=False, slots=True)
class Scrape:
    """One scrape, with what the figures read from it memoised (a scrape serves many figures while it is in the
    window), linked to the scrape before it so counters and histograms keep running totals: the figures of a
    window are then the newest total minus the oldest, whatever the window's length."""

    ts: float
    exp: Exposition
    prev: Scrape | None = field(default=None, repr=False)
    memo: dict[MemoKey, object] = field(default_factory=dict, repr=False)

    def series(self, name: str, match: dict[str, str]) -> dict[SeriesKey, float]:
        key = ("series", name, tuple(sorted(match.items())))
        hit = self.memo.get(key)
        if hit is None:
            hit = {s.labels: s.value for s in self.exp.samples(name, **match)}
            self.memo[key] = hit
        return hit  # type: ignore[return-value]

    def buckets(self, name: str, match: dict[str, str]) -> dict[SeriesKey, dict[float, float]]:
        """``name_bucket`` per series (labels without ``le``) → {le: cumulative count}."""
        key = ("buckets", name, tuple(sorted(match.items())))
        hit = self.memo.get(key)
        if hit is None:
            out: dict[SeriesKey, dict[float, float]] = {}
            for s in self.exp.samples(name + "_bucket", **match):
                le = s.label("le")
                if le is None:
                    continue
                series = tuple(kv for kv in s.labels if kv[0] != "le")
                out.setdefault(series, {})[float(le)] = s.value
            hit = out
            self.memo[key] = hit
        return hit  # type: ignore[return-value]

    def _running(self, key: MemoKey, first: T, step: Callable[[Scrape, Scrape], D],
                 add: Callable[[T, D], T]) -> T:
        chain: list[Scrape] = []
        node: Scrape | None = self
        while node is not None and key not in node.memo:
            chain.append(node)
            node = node.prev
        total: T | None = cast(T, node.memo[key]) if node is not None else None
        for n in reversed(chain):
            total = first if (total is None or n.prev is None) else add(total, step(n.prev, n))
            n.memo[key] = total
        assert total is not None
        return total

    def counter_total(self, name: str, match: dict[str, str]) -> float:
        """The counter's increase since the start of this scrape's chain (resets counted from zero)."""
        key = ("counter_total", name, tuple(sorted(match.items())))
        return self._running(key, 0.0, lambda a, b: _counter_step(a, b, name, match) or 0.0, _add_float)

    def histogram_total(self, name: str, match: dict[str, str]) -> _HistSum:
        """Observations since the start of this scrape's chain: bucket counts, sum, count."""
        key = ("histogram_total", name, tuple(sorted(match.items())))
        empty: _HistSum = ({}, 0.0, 0.0)
        return self._running(key, empty, lambda a, b: _histogram_step(a, b, name, match), _add_histogram)


def _add_float(total: float, delta: float) -> float:
    return total + delta


def _add_histogram(total: _HistSum, delta: _HistStep) -> _HistSum:
    buckets, tsum, tcount = total
    dbuckets, dsum, dcount, _ = delta
    merged = dict(buckets)
    for le, c in dbuckets.items():
        merged[le] = merged.get(le, 0.0) + c
    return merged, tsum + dsum, tcount + dcount


def _linked(scrapes: list[Scrape] | tuple[Scrape, ...]) -> bool:
    return all(b.prev is a for a, b in itertools.pairwise(scrapes))


def _counter_step(prev: Scrape, cur: Scrape, name: str, match: dict[str, str]) -> float | None:
    """Increase of a counter from ``prev`` to ``cur``; None when neither has it."""
    before_all = prev.series(name, match)
    now_all = cur.series(name, match)
    if not before_all and not now_all:
        return None
    total = 0.0
    for labels, value in now_all.items():
        before = before_all.get(labels)
        if before is None or value < before:  # created in between, or reset: counts from zero
            total += value
        else:
            total += value - before
    return total


def counter_delta(scrapes: list[Scrape] | tuple[Scrape, ...], name: str, **match: str) -> float | None:
    """Increase of a counter (summed over matching series) across ``scrapes``, oldest first; resets handled.

    None when no scrape has the counter. A series absent from the previous scrape counts from zero (it was
    created in between); a series that went down was reset, and counts from zero too.
    """
    if not scrapes:
        return None
    if _linked(scrapes):
        if not scrapes[0].series(name, match) and not scrapes[-1].series(name, match):
            return None
        return scrapes[-1].counter_total(name, match) - scrapes[0].counter_total(name, match)
    seen = bool(scrapes[0].series(name, match))
    total = 0.0
    for prev, cur in itertools.pairwise(scrapes):
        d = _counter_step(prev, cur, name, match)
        if d is not None:
            seen = True
            total += d
    return total if seen else None


def _histogram_step(prev: Scrape, cur: Scrape, name: str, match: dict[str, str]) -> _HistStep:
    """Observations between two scrapes: bucket deltas, sum delta, count delta, whether any series exists."""
    inf = float("inf")
    acc: dict[float, float] = {}
    acc_sum = 0.0
    acc_count = 0.0
    prev_b = prev.buckets(name, match)
    prev_s = prev.series(name + "_sum", match)
    prev_c = prev.series(name + "_count", match)
    cur_b = cur.buckets(name, match)
    cur_s = cur.series(name + "_sum", match)
    cur_c = cur.series(name + "_count", match)
    for series, buckets in cur_b.items():
        before = prev_b.get(series)
        inf_now = buckets.get(inf, max(buckets.values(), default=0.0))
        inf_before = None if before is None else before.get(inf, max(before.values(), default=0.0))
        if before is None or inf_before is None or inf_now < inf_before:  # new series, or reset
            for le, c in buckets.items():
                acc[le] = acc.get(le, 0.0) + c
            acc_sum += cur_s.get(series, 0.0)
            acc_count += cur_c.get(series, inf_now)
            continue
        for le, c in buckets.items():
            acc[le] = acc.get(le, 0.0) + c - before.get(le, 0.0)
        acc_sum += cur_s.get(series, 0.0) - prev_s.get(series, 0.0)
        acc_count += cur_c.get(series, inf_now) - prev_c.get(series, inf_before)
    return acc, acc_sum, acc_count, bool(prev_b) or bool(cur_b)


def histogram_step(prev: Scrape, cur: Scrape, name: str, **match: str) -> _HistStep:
    """Observations of ``name`` between two successive scrapes: bucket deltas, sum, count, whether it exists."""
    return _histogram_step(prev, cur, name, match)


def histogram_delta(scrapes: list[Scrape] | tuple[Scrape, ...], name: str, **match: str) -> Histogram | None:
    """The histogram of observations made across ``scrapes`` (bucket deltas summed over series), resets handled."""
    if len(scrapes) < 2:
        return None
    if not any(sc.buckets(name, match) for sc in scrapes):
        return None
    acc: dict[float, float] = {}
    if _linked(scrapes):
        end_b, end_s, end_c = scrapes[-1].histogram_total(name, match)
        start_b, start_s, start_c = scrapes[0].histogram_total(name, match)
        acc = {le: c - start_b.get(le, 0.0) for le, c in end_b.items()}
        acc_sum, acc_count = end_s - start_s, end_c - start_c
    else:
        acc_sum = acc_count = 0.0
        for prev, cur in itertools.pairwise(scrapes):
            buckets, d_sum, d_count, _ = _histogram_step(prev, cur, name, match)
            for le, c in buckets.items():
                acc[le] = acc.get(le, 0.0) + c
            acc_sum += d_sum
            acc_count += d_count
    buckets_t = tuple(Bucket(le, max(c, 0.0)) for le, c in sorted(acc.items()))
    return Histogram(buckets_t, acc_sum, max(acc_count, 0.0))


def merge_histograms(hs: Iterable[Histogram | None]) -> Histogram | None:
    """Several servers' histograms as one (equal ``le`` buckets summed; a bound one lacks counts as its next lower
    bucket, as the cumulative counts say). None when none is given."""
    present = [h for h in hs if h is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    bounds = sorted({b.le for h in present for b in h.buckets})

    def at(h: Histogram, le: float) -> float:
        count = 0.0
        for b in h.buckets:
            if b.le > le:
                break
            count = b.count
        return count

    return Histogram(tuple(Bucket(le, sum(at(h, le) for h in present)) for le in bounds),
                     sum(h.sum for h in present), sum(h.count for h in present))
