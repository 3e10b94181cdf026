"""The load generator proper (it runs inside the worker process, ``tui.core.bench.worker``).

It prepares every request body before the clock starts, sends warm-up requests (excluded from the results),
then the run: requests dispatched on vllm bench's schedule (``arrivals``), at most ``max_concurrency`` in flight,
each streamed by ``httpstream``. It reports through a ``Sink``: one message per finished request, a tick every
``tick_s`` with the counts and a bounded sample of what arrived since the last tick (for live figures), and a
final message with the duration and the client's own measurements:

- event-loop lag (how late a 50 ms timer wakes: a late loop timestamps reads late);
- achieved vs requested send rate, and how late requests were dispatched against their schedule;
- client CPU (process time / wall time; the worker is single-threaded, so 1.0 is one core).

The verdict ``client_limited`` names the reasons when the client, not the server, may have set the pace.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tui.core.bench import stats
from tui.core.bench.arrivals import send_offsets
from tui.core.bench.dataset import Prompt
from tui.core.bench.httpstream import StreamResult
from tui.core.bench.metrics import pack_floats
from tui.core.bench.streamclient import StreamClient

Sink = Callable[[dict[str, Any]], None]
_perf = time.perf_counter

#: the client may have set the pace when its CPU reaches this share of one core ...
CPU_LIMIT = 0.9
#: ... or a 50 ms timer wakes this late one time in ten (reads are timestamped that late; a one-off burst such
#: as opening every connection at once shows in the p99 and the maximum, which are reported, not judged) ...
LAG_LIMIT_S = 0.010
#: ... or requests leave this much later than their schedule on average (finite rates only).
SEND_LAG_LIMIT_S = 0.010
_MAX_GAPS_PER_TICK = 4096
_LAG_PERIOD_S = 0.05


@dataclass
class LoadSettings:
    base_url: str
    model: str
    path: str = "/v1/completions"
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    ignore_eos: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    request_id_prefix: str = "bench-"
    tick_s: float = 0.25
    timeout_s: float = 6 * 3600.0  # one request, end to end
    stall_s: float = 120.0  # the run stops when no token arrives for this long while requests are out; 0: never


def request_body(settings: LoadSettings, prompt: Prompt) -> bytes:
    """The JSON body vllm bench sends (same keys and order), with the prompt as token ids where we have them."""
    head = {"model": settings.model}
    tail: dict[str, Any] = {
        "repetition_penalty": 1.0,
        "max_tokens": prompt.output_len,
        "logprobs": None,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if settings.ignore_eos:
        tail["ignore_eos"] = True
    tail.update(settings.extra_body)
    h = json.dumps(head, separators=(",", ":"))
    t = json.dumps(tail, separators=(",", ":"))
    return (h[:-1] + ',"prompt":' + prompt.prompt_json() + "," + t[1:]).encode()


@dataclass
class _Window:
    """What arrived since the last tick (bounded ITL sample; one entry per request for TPOT)."""

    ttfts: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    #: [request index, sum of its chunk gaps, how many] of each request streaming in the tick: its TPOT over the
    #: window is that sum over the tokens those chunks carried (the parent knows the tokens per chunk)
    req: list[list[float]] = field(default_factory=list)
    #: [request index, its TPOT as the summary counts it (None: none)] of each request that ended in the tick
    ended: list[list[float | None]] = field(default_factory=list)

    def add_gaps(self, new: list[float]) -> None:
        """Chunk gaps into the ITL sample (vllm bench's ITL: one gap per chunk, whatever it carries)."""
        if not new:
            return
        room = _MAX_GAPS_PER_TICK - len(self.gaps)
        if room <= 0:
            return
        if len(new) > 64:
            step = max(1, len(new) // 64)
            new = new[::step]
        self.gaps.extend(new[:room])


def _output_len(res: StreamResult) -> int:
    """A successful request's output tokens as the summary counts them (``RequestRecord.output_len``): the
    usage's completion_tokens, else one per choice chunk."""
    return int(res.completion_tokens) if res.completion_tokens else max(res.chunks, 1)


class LoadGenerator:
    def __init__(self, settings: LoadSettings, prompts: list[Prompt], warmups: list[Prompt], sink: Sink) -> None:
        self.s = settings
        self.sink = sink
        self.client = StreamClient(settings.base_url, headers=settings.headers)
        prefix = settings.request_id_prefix
        self.requests = [self.client.request_bytes(settings.path, request_body(settings, p),
                                                   {"x-request-id": f"{prefix}{i}"})
                         for i, p in enumerate(prompts)]
        self.expected = [(p.input_len, p.output_len) for p in prompts]
        self.warmups = [self.client.request_bytes(settings.path, request_body(settings, p),
                                                  {"x-request-id": f"{prefix}warmup-{i}"})
                        for i, p in enumerate(warmups)]
        self.offsets = send_offsets(len(prompts), settings.request_rate, settings.burstiness, settings.seed)
        self.phase = "setup"
        self.stop_requested = False
        self.sent = self.done = self.failed = self.waiting = 0
        #: the chunks of every request that ended, failed ones too: with the chunks of those still streaming, the
        #: live counter of tokens received, which never goes back (a request that fails after streaming took its
        #: chunks with it when only the successful ones were counted: the live figure went negative)
        self.chunks_ended = 0
        #: output tokens of the requests that ended successfully, as the summary counts them (the usage's
        #: completion_tokens), their chunks and their number: the parent scales the chunks still streaming (and
        #: those of failed requests) by these requests' tokens per chunk
        self.tokens_ok = self.chunks_ok = self.n_ok = 0
        self.failed_with_chunks = 0
        #: the same of the warm-up: its tokens per chunk stand in until a request of the run ends
        self.warm_tokens = self.warm_chunks = self.warm_n = 0
        self.warm_done = 0
        self.window = _Window()
        self.lags: list[float] = []
        self.dispatch_lags: list[float] = []
        self.dispatch_times: list[float] = []
        self.t0 = 0.0
        self.warm_t0 = 0.0  # when the warm-up began (its ticks count from there; the run's from t0)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.hold = False  # wait for go() between warm-up and the run
        self.go = asyncio.Event()
        self.stalled = ""  # why the run was stopped by the stall watch

    # --- running ------------------------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        ticker = asyncio.create_task(self._ticker())
        lag = asyncio.create_task(self._lag_monitor())
        stall = asyncio.create_task(self._stall_watch()) if self.s.stall_s > 0 else None
        try:
            warm = await self._warmup()
            if self._stall_reason():
                return {"t": "error", "message": f"warm-up {self.stalled}"}
            if warm is not None:
                return warm
            if self.hold:
                # the parent reads the servers' counters, logs and energy now, between warm-up and run
                self.sink({"t": "hold"})
                await self.go.wait()
                if self._stopped():
                    return self._final(0.0, aborted=True)
            final = await self._main()
            self.sink(self.tick())  # the last figures (a run shorter than a tick gets one too)
            if self._stall_reason():
                final["stalled"] = self.stalled
            return final
        finally:
            ticker.cancel()
            lag.cancel()
            if stall is not None:
                stall.cancel()
            for t in list(self._tasks):
                t.cancel()
            self.client.close()

    def _stall_reason(self) -> str:
        return self.stalled  # a method: the stall watch sets it while the run awaits

    def _stopped(self) -> bool:
        return self.stop_requested  # a method: the flag changes while the dispatch loop sleeps

    def stop(self) -> None:
        """Stop sending; requests in flight are abandoned (their records are not written)."""
        self.stop_requested = True
        self.go.set()
        for t in list(self._tasks):
            t.cancel()

    async def _warmup(self) -> dict[str, Any] | None:
        if not self.warmups:
            return None
        self.phase = "warmup"
        self.warm_t0 = _perf()
        self.sink({"t": "phase", "phase": "warmup", "n": len(self.warmups)})
        sem = asyncio.Semaphore(self.s.max_concurrency) if self.s.max_concurrency else None

        async def one(req: bytes) -> StreamResult:
            if sem is None:
                res = await self.client.stream(req, timeout_s=self.s.timeout_s)
            else:
                async with sem:
                    res = await self.client.stream(req, timeout_s=self.s.timeout_s)
            self.warm_done += 1
            if res.success:
                self.warm_tokens += _output_len(res)
                self.warm_chunks += res.chunks
                self.warm_n += 1
            return res

        tasks = [asyncio.create_task(one(r)) for r in self.warmups]
        self._tasks.update(tasks)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.difference_update(tasks)
        if self.stop_requested:
            return self._final(0.0, aborted=True)
        ok = [r for r in results if isinstance(r, StreamResult) and r.success]
        errors = [r.error for r in results if isinstance(r, StreamResult) and not r.success]
        self.sink({"t": "warmup", "ok": len(ok), "failed": len(results) - len(ok),
                   "error": errors[0] if errors else ""})
        if not ok:
            return {"t": "error", "message": f"every warm-up request failed: {errors[0] if errors else 'cancelled'}"}
        return None

    async def _main(self) -> dict[str, Any]:
        self.phase = "run"
        self.window = _Window()
        self.sink({"t": "phase", "phase": "run", "n": len(self.requests)})
        sem = asyncio.Semaphore(self.s.max_concurrency) if self.s.max_concurrency else None
        self.cpu0 = time.process_time()
        self.t0 = _perf()
        t0 = self.t0
        tasks: list[asyncio.Task[Any]] = []
        for i, req in enumerate(self.requests):
            if self._stopped():
                break
            due = t0 + self.offsets[i]
            now = _perf()
            if due > now:
                await asyncio.sleep(due - now)
                now = _perf()
                if self._stopped():
                    break
            self.dispatch_lags.append(max(0.0, now - due))
            self.dispatch_times.append(now - t0)
            task = asyncio.create_task(self._one(i, req, sem))
            tasks.append(task)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        duration = _perf() - t0
        return self._final(duration, aborted=self.stop_requested)

    async def _one(self, i: int, req: bytes, sem: asyncio.Semaphore | None) -> None:
        self.sent += 1
        if sem is not None:
            self.waiting += 1
            async with sem:
                self.waiting -= 1
                res = await self.client.stream(req, timeout_s=self.s.timeout_s, tag=i)
        else:
            res = await self.client.stream(req, timeout_s=self.s.timeout_s, tag=i)
        self._finished(i, res)

    def _finished(self, i: int, res: StreamResult) -> None:
        w = self.window
        self.chunks_ended += res.chunks
        if res.success:
            self.done += 1
            if not res.seen_ttft:
                w.ttfts.append(res.ttft)
            w.add_gaps(res.itl[res.seen_itl:])
            n_out = _output_len(res)
            self.tokens_ok += n_out
            self.chunks_ok += res.chunks
            self.n_ok += 1
            # the summary's TPOT of this request (RequestRecord.tpot): it replaces its in-flight figures
            w.ended.append([i, (res.latency - res.ttft) / (n_out - 1) if n_out > 1 else None])
        else:
            self.failed += 1
            self.failed_with_chunks += res.chunks > 0
            w.ended.append([i, None])  # no TPOT in the summary: its in-flight figures leave the window
        exp_in, exp_out = self.expected[i]
        prompt_tokens = res.prompt_tokens if res.prompt_tokens is not None else exp_in
        self.sink({
            "t": "r", "i": i, "st": res.start - self.t0, "ok": res.success, "ttft": res.ttft,
            "lat": res.latency, "itl": pack_floats(res.itl), "pt": prompt_tokens, "ct": res.completion_tokens,
            "ch": res.chunks, "err": res.error or res.stream_error, "ei": exp_in, "eo": exp_out,
        })

    def _progress(self) -> tuple[int, ...]:
        """What changes whenever anything arrives: requests ended, and the chunks of the ones streaming."""
        return (self.warm_done, self.done, self.failed, sum(c.chunks for c in self.client.streaming()))

    async def _stall_watch(self) -> None:
        """Stop the run when requests are out and nothing arrived for ``stall_s`` (a server that accepted the
        connection and never answers, or stopped streaming): a verdict in bounded time, finished records kept."""
        period = min(1.0, self.s.stall_s / 4)
        last, since = self._progress(), _perf()
        while True:
            await asyncio.sleep(period)
            now, seen = _perf(), self._progress()
            out = [t for t in self._tasks if not t.done()]
            if seen != last or not out:
                last, since = seen, now
                continue
            if now - since >= self.s.stall_s:
                sent = max(1, len(out) - self.waiting)  # not those still queued for a --max-concurrency slot
                self.stalled = (f"stalled: no token for {self.s.stall_s:g} s with {sent} request(s) in flight "
                                "(the server accepted them and went silent)")
                self.stop()
                return

    # --- live figures and self-measurement ----------------------------------------------------------------

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(self.s.tick_s)
            self.sink(self.tick())

    def tick(self) -> dict[str, Any]:
        w = self.window
        streaming = self.client.streaming() if self.phase == "run" else []
        in_flight_chunks = 0
        with_chunks = 0
        for conn in streaming:
            if not conn.chunks:
                continue
            in_flight_chunks += conn.chunks
            with_chunks += 1
            if not conn.seen_ttft:
                w.ttfts.append(conn.ttft)
                conn.seen_ttft = True
            n = len(conn.itl)
            if n > conn.seen_itl:
                new = conn.itl[conn.seen_itl:n]
                w.add_gaps(new)
                res = conn.res
                w.req.append([res.tag if res is not None else -1, math.fsum(new), n - conn.seen_itl])
                conn.seen_itl = n
        self.window = _Window()
        elapsed = _perf() - self.t0 if self.phase == "run" else 0.0
        if self.phase != "run":
            # the warm-up's own clock: a warm-up that waits on a server's JIT compile shows its time passing (every
            # warm-up tick said 0.0 s through an 8.5 s warm-up on the H200)
            warm_el = _perf() - self.warm_t0 if self.phase == "warmup" and self.warm_t0 else 0.0
            return {"t": "tick", "phase": self.phase, "el": warm_el, "sent": len(self.warmups),
                    "done": self.warm_done, "failed": 0, "inflight": len(self.warmups) - self.warm_done,
                    "waiting": 0, "chunks": 0, "ttfts": [], "gaps": [],
                    "lag_max": max(self.lags[-20:], default=0.0)}
        return {
            "t": "tick", "phase": self.phase, "el": elapsed, "sent": self.sent, "done": self.done,
            "failed": self.failed, "inflight": self.sent - self.done - self.failed - self.waiting,
            "waiting": self.waiting, "chunks": self.chunks_ended + in_flight_chunks,
            "tok_ok": self.tokens_ok, "ch_ok": self.chunks_ok, "n_ok": self.n_ok,
            "n_other": self.failed_with_chunks + with_chunks, "prior": self._warm_ratio(),
            "ttfts": w.ttfts, "gaps": w.gaps, "req": w.req, "ended": w.ended,
            "lag_max": max(self.lags[-20:], default=0.0),
        }

    def _warm_ratio(self) -> float | None:
        """Tokens per chunk after the first of the warm-up's requests (None: no chunk after a first one)."""
        if self.warm_chunks <= self.warm_n:
            return None
        return (self.warm_tokens - self.warm_n) / (self.warm_chunks - self.warm_n)

    async def _lag_monitor(self) -> None:
        while True:
            due = _perf() + _LAG_PERIOD_S
            await asyncio.sleep(_LAG_PERIOD_S)
            self.lags.append(max(0.0, _perf() - due))

    def _final(self, duration: float, *, aborted: bool) -> dict[str, Any]:
        wall = _perf() - self.t0 if self.t0 else 0.0
        cpu = (time.process_time() - self.cpu0) / wall if self.t0 and wall > 0 else 0.0
        lag_p90 = stats.percentile(self.lags, 90.0)
        lag_p99 = stats.percentile(self.lags, 99.0)
        lag_max = max(self.lags, default=0.0)
        rate = self.s.request_rate
        achieved = None
        if len(self.dispatch_times) > 1 and self.dispatch_times[-1] > self.dispatch_times[0]:
            achieved = (len(self.dispatch_times) - 1) / (self.dispatch_times[-1] - self.dispatch_times[0])
        send_lag_mean = stats.mean(self.dispatch_lags)
        reasons = []
        if cpu >= CPU_LIMIT:
            reasons.append(f"client CPU {cpu:.0%} of one core")
        if lag_p90 > LAG_LIMIT_S:
            reasons.append(f"event-loop lag p90 {lag_p90 * 1000:.1f} ms")
        if not math.isinf(rate) and send_lag_mean > SEND_LAG_LIMIT_S:
            reasons.append(f"requests left {send_lag_mean * 1000:.1f} ms late on average")
        return {
            "t": "done", "duration": duration, "aborted": aborted, "sent": self.sent, "done": self.done,
            "failed": self.failed,
            "client": {
                "cpu": cpu, "loop_lag_p50_ms": stats.percentile(self.lags, 50.0) * 1000,
                "loop_lag_p90_ms": lag_p90 * 1000, "loop_lag_p99_ms": lag_p99 * 1000, "loop_lag_max_ms": lag_max * 1000,
                "requested_rate": None if math.isinf(rate) else rate, "achieved_rate": achieved,
                "send_lag_mean_ms": send_lag_mean * 1000,
                "send_lag_max_ms": max(self.dispatch_lags, default=0.0) * 1000,
                "connections_opened": self.client.opened,
                "client_limited": bool(reasons), "reasons": reasons,
            },
        }
