"""Windowed live figures from the worker's ticks (the parent side; the worker sends bounded raw samples)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tui.core.bench import stats
from tui.core.bench.events import BenchTick

DEFAULT_WINDOW_S = 2.0


@dataclass
class _Tick:
    el: float
    chunks: int
    ttfts: list[float]
    gaps: list[float]
    req_gaps: list[float]


@dataclass
class LiveWindow:
    run_id: str
    total: int
    window_s: float = DEFAULT_WINDOW_S
    _ticks: deque[_Tick] = field(default_factory=deque)
    _ttfts: deque[tuple[float, float]] = field(default_factory=deque)  # (elapsed, ttft) kept longer

    warmup_total: int = 0
    #: the TTFT figures of the last window that had first tokens: a run whose requests have all started (a long
    #: decode) keeps showing them instead of "-/-" (they are the run's latest; the next first token replaces them)
    _last_ttft: tuple[float | None, float | None] = (None, None)

    def update(self, msg: dict[str, Any]) -> BenchTick:
        el = float(msg.get("el") or 0.0)
        phase = str(msg.get("phase") or "run")
        if phase != "run":
            self._ticks.clear()
        else:
            raw = _Tick(el, int(msg.get("chunks") or 0), list(msg.get("ttfts") or ()), list(msg.get("gaps") or ()),
                        list(msg.get("req_gaps") or ()))
            if self._ticks and (raw.chunks < self._ticks[-1].chunks or raw.el < self._ticks[-1].el):
                # the tokens received never go back and time never runs backwards: a counter that did (a worker
                # that counted otherwise, a restart) begins a new window instead of making a negative rate
                self._ticks.clear()
            self._ticks.append(raw)
            for t in raw.ttfts:
                self._ttfts.append((el, t))
            while len(self._ticks) > 1 and self._ticks[0].el < el - self.window_s:
                self._ticks.popleft()
            # TTFTs are rarer than tokens: keep them over a longer window so a p99 means something
            while self._ttfts and self._ttfts[0][0] < el - 5 * self.window_s:
                self._ttfts.popleft()
        tps = None
        span = 0.0
        if len(self._ticks) >= 2:
            first, lastt = self._ticks[0], self._ticks[-1]
            span = lastt.el - first.el
            if span > 0:
                tps = (lastt.chunks - first.chunks) / span
        gaps = sorted(g for t in list(self._ticks)[1:] for g in t.gaps)
        req = sorted(g for t in list(self._ticks)[1:] for g in t.req_gaps)
        ttfts = sorted(t for _, t in self._ttfts)

        def p(data: list[float], q: float) -> float | None:
            return stats.percentile_sorted(data, q) * 1000 if data else None

        if phase == "run" and ttfts:
            self._last_ttft = (p(ttfts, 50), p(ttfts, 99))
        ttft50, ttft99 = self._last_ttft if phase == "run" else (None, None)
        tick = BenchTick(
            run_id=self.run_id, phase=phase, elapsed_s=el,
            total=self.warmup_total if phase == "warmup" else self.total, sent=int(msg.get("sent") or 0),
            done=int(msg.get("done") or 0), failed=int(msg.get("failed") or 0),
            inflight=int(msg.get("inflight") or 0), waiting=int(msg.get("waiting") or 0), output_tps=tps,
            ttft_p50_ms=ttft50, ttft_p99_ms=ttft99, tpot_p50_ms=p(req, 50), tpot_p99_ms=p(req, 99),
            itl_p50_ms=p(gaps, 50), itl_p99_ms=p(gaps, 99), window_s=span,
            loop_lag_ms=float(msg.get("lag_max") or 0.0) * 1000,
        )
        return tick
