"""Windowed live figures from the worker's ticks (the parent side; the worker sends bounded raw samples).

They follow ``vllm bench serve``'s definitions, which count tokens, not SSE chunks (under speculative decoding one
chunk carries several tokens; ``../shared/VLLM-0.24.md`` §8):

- output tokens: a request that ended successfully counts its usage's ``completion_tokens``, as the summary does;
  the chunks of requests still streaming (and of failed ones, which arrived too) count as tokens at the rate of
  the ended requests: the first chunk one token (the prefill's), every later one ``r`` = (tokens − 1)/(chunks − 1)
  summed over those requests (before any ended, the warm-up's ``r``; without one, 1). The rate over the window
  uses the latest ``r`` at both of its ends, so a better ``r`` never shows as a jump; once every request ended
  the count is the summary's ``total_output_tokens``.
- TPOT: one figure per request active in the window: a request that ended, its (E2EL − TTFT)/(tokens − 1) as
  the summary counts it (a failed one none); one still streaming, its chunk gaps in the window over the tokens
  those chunks carried (``r`` each).
- ITL: vllm bench's, one gap per chunk whatever it carries; TTFT: the first chunk.
"""

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
    chunks: int  # every choice chunk received in the run (ended requests and those streaming)
    tok_ok: int  # output tokens of the requests that ended successfully (their usage)
    ch_ok: int  # their chunks
    n_ok: int  # their number
    n_other: int  # requests streaming or failed that received a chunk
    prior: float | None  # the warm-up's tokens per chunk after the first
    ttfts: list[float]
    gaps: list[float]
    req: list[list[float]]  # [request, sum of chunk gaps, how many] of requests streaming
    ended: list[list[float | None]]  # [request, TPOT or None] of requests that ended

    def ratio(self) -> float:
        """Tokens per chunk after a request's first (see the module docstring)."""
        if self.ch_ok > self.n_ok:
            return (self.tok_ok - self.n_ok) / (self.ch_ok - self.n_ok)
        return self.prior if self.prior is not None and self.prior > 0 else 1.0

    def tokens(self, r: float) -> float:
        """Output tokens received so far, those of requests not ended successfully estimated with ``r``."""
        other = self.chunks - self.ch_ok
        return self.tok_ok + min(self.n_other, other) + max(0, other - self.n_other) * r


def _tick_of(el: float, msg: dict[str, Any]) -> _Tick:
    prior = msg.get("prior")
    return _Tick(el, int(msg.get("chunks") or 0), int(msg.get("tok_ok") or 0), int(msg.get("ch_ok") or 0),
                 int(msg.get("n_ok") or 0), int(msg.get("n_other") or 0),
                 float(prior) if prior is not None else None, list(msg.get("ttfts") or ()),
                 list(msg.get("gaps") or ()), list(msg.get("req") or ()), list(msg.get("ended") or ()))


def _tpots(ticks: list[_Tick], r: float) -> list[float]:
    """One TPOT (s) per request in ``ticks``: an ended request's own, else its gaps over its tokens."""
    ended: dict[int, float | None] = {}
    for t in ticks:
        for i, v in t.ended:
            ended[int(i or 0)] = v
    part: dict[int, list[float]] = {}
    for t in ticks:
        for i, g, n in t.req:
            k = int(i)
            if k in ended:
                continue
            acc = part.get(k)
            if acc is None:
                part[k] = [g, n]
            else:
                acc[0] += g
                acc[1] += n
    out = [v for v in ended.values() if v is not None]
    if r > 0:
        out.extend(g / (n * r) for g, n in part.values() if n > 0)
    return out


@dataclass
class LiveWindow:
    run_id: str
    total: int
    window_s: float = DEFAULT_WINDOW_S
    _ticks: deque[_Tick] = field(default_factory=deque)
    _ttfts: deque[tuple[float, float]] = field(default_factory=deque)  # (elapsed, ttft) kept longer

    warmup_total: int = 0
    #: the TTFT figures of the window as the last first tokens arrived: a run whose requests have all started (a
    #: long decode) keeps showing them instead of "-/-" (the next first token replaces them). Computed only when
    #: first tokens arrive: the window's oldest ones leaving it later never change them (a burst of 128 showed the
    #: p50 of its last few, 3.4 s, instead of 1.6 s, once the window had let the others go)
    _last_ttft: tuple[float | None, float | None] = (None, None)

    def update(self, msg: dict[str, Any]) -> BenchTick:
        el = float(msg.get("el") or 0.0)
        phase = str(msg.get("phase") or "run")
        arrived = False
        if phase != "run":
            self._ticks.clear()
        else:
            raw = _tick_of(el, msg)
            prev = self._ticks[-1] if self._ticks else None
            if prev is not None and (raw.chunks < prev.chunks or raw.tok_ok < prev.tok_ok or raw.el < prev.el):
                # the chunks and tokens received never go back and time never runs backwards: a counter that did
                # (a worker that counted otherwise, a restart) begins a new window instead of making a negative rate
                self._ticks.clear()
            self._ticks.append(raw)
            arrived = bool(raw.ttfts)
            for t in raw.ttfts:
                self._ttfts.append((el, t))
            while len(self._ticks) > 1 and self._ticks[0].el < el - self.window_s:
                self._ticks.popleft()
            # TTFTs are rarer than tokens: keep them over a longer window so a p99 means something
            while self._ttfts and self._ttfts[0][0] < el - 5 * self.window_s:
                self._ttfts.popleft()
        tps = None
        span = 0.0
        tokens = None
        r = self._ticks[-1].ratio() if self._ticks else 1.0
        if self._ticks and phase == "run":
            tokens = round(self._ticks[-1].tokens(r))
        if len(self._ticks) >= 2:
            first, lastt = self._ticks[0], self._ticks[-1]
            span = lastt.el - first.el
            if span > 0:
                # the same r at both ends; a request that ended with fewer tokens per chunk than r may take back
                # a little of its estimate: never a negative rate
                tps = max(0.0, lastt.tokens(r) - first.tokens(r)) / span
        window = list(self._ticks)[1:]
        gaps = sorted(g for t in window for g in t.gaps)
        req = sorted(_tpots(window, r))
        ttfts = sorted(t for _, t in self._ttfts)

        def p(data: list[float], q: float) -> float | None:
            return stats.percentile_sorted(data, q) * 1000 if data else None

        if phase == "run" and ttfts and arrived:
            self._last_ttft = (p(ttfts, 50), p(ttfts, 99))
        ttft50, ttft99 = self._last_ttft if phase == "run" else (None, None)
        tick = BenchTick(
            run_id=self.run_id, phase=phase, elapsed_s=el,
            total=self.warmup_total if phase == "warmup" else self.total, sent=int(msg.get("sent") or 0),
            done=int(msg.get("done") or 0), failed=int(msg.get("failed") or 0),
            inflight=int(msg.get("inflight") or 0), waiting=int(msg.get("waiting") or 0), output_tps=tps,
            output_tokens=tokens,
            ttft_p50_ms=ttft50, ttft_p99_ms=ttft99, tpot_p50_ms=p(req, 50), tpot_p99_ms=p(req, 99),
            itl_p50_ms=p(gaps, 50), itl_p99_ms=p(gaps, 99), window_s=span,
            loop_lag_ms=float(msg.get("lag_max") or 0.0) * 1000,
        )
        return tick
