"""Runs one simulated engine's scheduler against the wall clock and hands tokens to the HTTP streams.

One asyncio task per engine runs step after step: each step's duration comes from the performance model, in virtual
seconds; the task sleeps until that much wall time (divided by ``DISAGG_SIM_CLOCK``) has passed, then marks the new
token of every sequence in the step. Streams pick up what is pending when they next run, so a stream that falls
behind sends several tokens in one chunk, as vLLM's output collector merges them. Nothing runs per token on a timer:
1,000 concurrent streams cost one loop iteration per engine step.

The runtime measures its own pacing: a step that ends later on the wall clock than its scheduled time (the host
could not keep up with ``DISAGG_SIM_CLOCK``) adds that lag, in virtual seconds, to ``lag_v``, and the mapping from
wall to virtual time moves on by it (virtual time never jumps ahead to catch up, so what the clients measure is what
the engine really paced). ``paced_v`` counts the virtual seconds it ran steps for. The share ``lag_v / (paced_v +
lag_v)`` over a run says how far behind the server fell; the server exports both in its ``/metrics``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tui.sim.metrics import EngineGauges, EngineMetrics
from tui.sim.perfmodel import BLOCK_SIZE
from tui.sim.prefixcache import PrefixCache
from tui.sim.scheduler import EngineScheduler, SimRequest, StepResult

#: a step ending less than this much wall time late is on time: the next steps catch it up (event-loop wake-up
#: jitter, a busy host descheduling the process for a moment); beyond it the lag is counted and not caught up
LAG_TOLERANCE_WALL_S = 20e-3


@dataclass(eq=False)
class LiveRequest:
    """A request as the HTTP side sees it: the simulated request plus what the stream has not sent yet."""

    sim: SimRequest
    seed: int
    params_n: int = 1
    event: asyncio.Event = field(default_factory=asyncio.Event)
    sent: int = 0  # tokens already handed to the client
    done: bool = False
    error: str | None = None
    engine: int = 0
    hashes: list[int] = field(default_factory=list)  # the prompt's full-block hashes (prefix caching)

    @property
    def available(self) -> int:
        return self.sim.generated - self.sent

    def take(self) -> tuple[int, int]:
        """(first index, count) of the tokens to send now."""
        start, n = self.sent, self.available
        self.sent += n
        self.event.clear()
        return start, n


class EngineRuntime:
    def __init__(self, index: int, sched: EngineScheduler, metrics: EngineMetrics, *, clock: float,
                 jit_warning: Callable[[], None] | None = None,
                 on_expired: Callable[[EngineRuntime, SimRequest], None] | None = None,
                 prefix_caching: bool = True) -> None:
        self.index = index
        self.sched = sched
        self.metrics = metrics
        self.clock = max(clock, 1e-6)
        self.jit_warning = jit_warning
        self.on_expired = on_expired
        self.cache = PrefixCache() if prefix_caching else None
        self.in_flight_end: float | None = None
        self.live: dict[str, LiveRequest] = {}
        self._wake = asyncio.Event()
        self._w0 = time.monotonic()
        self._v0 = 0.0
        self.vnow = 0.0
        self.busy_v = 0.0  # virtual seconds spent in steps (for utilisation)
        self.lag_v = 0.0  # virtual seconds the steps ended later than scheduled (the host fell behind)
        self.lag_max_v = 0.0  # the worst single step's lag
        self.late_steps = 0
        self.mem_v = 0.0  # of which memory-bound
        self.stopped = False
        self.dead_reason: str | None = None
        # interval counters for the stats line
        self.iv_prompt = 0
        self.iv_gen = 0
        self.spec_mark: list[float] | None = None  # spec counters at the last line
        #: called after each step's tokens are delivered (a headless host forwards them to the head)
        self.on_step: Callable[[StepResult], None] | None = None

    # --- clocks ---------------------------------------------------------------------------------------------
    def v_of_wall(self, wall: float) -> float:
        return self._v0 + (wall - self._w0) * self.clock

    def wall_of_v(self, v: float) -> float:
        return self._w0 + (v - self._v0) / self.clock

    def _resync(self) -> None:
        now = time.monotonic()
        v = self.v_of_wall(now)
        if v > self.vnow:
            self.vnow = v
        else:  # we fell behind while busy: restart the mapping here
            self._w0, self._v0 = now, self.vnow

    # --- requests -------------------------------------------------------------------------------------------
    @property
    def load(self) -> int:
        return self.sched.num_running + self.sched.num_waiting

    def submit(self, live: LiveRequest) -> None:
        if not self.sched.has_work():
            self._resync()
        arrival = max(self.vnow, self.v_of_wall(time.monotonic()))
        if self.in_flight_end is not None:  # it joins the step after the one running now
            arrival = min(arrival, self.in_flight_end)
        live.sim.arrival = arrival
        live.engine = self.index
        if self.cache is not None and live.hashes and not live.sim.external_tokens:
            live.sim.cached_tokens = min(self.cache.match(live.hashes) * BLOCK_SIZE, live.sim.prompt_len - 1)
        self.live[live.sim.rid] = live
        self.sched.add(live.sim)
        self._wake.set()

    def abort(self, rid: str) -> None:
        live = self.live.pop(rid, None)
        if live is None:
            return
        if self.sched.abort(rid, self.vnow) is not None:
            self.metrics.success["abort"] += 1
        live.done = True
        live.event.set()

    def fail_all(self, message: str) -> None:
        self.dead_reason = message
        for live in list(self.live.values()):
            live.error = message
            live.done = True
            live.event.set()
        self.live.clear()
        self.stopped = True
        self._wake.set()

    def gauges(self) -> EngineGauges:
        deferred = len(self.sched.transferring)
        return EngineGauges(running=self.sched.num_running, waiting=self.sched.num_waiting,
                            waiting_deferred=deferred, kv_usage=self.sched.kv_usage)

    # --- the loop -------------------------------------------------------------------------------------------
    async def run(self) -> None:
        while not self.stopped:
            if not self.sched.has_work() and not self.sched.held:
                await self._idle(None)
                continue
            res = self.sched.step(self.vnow)
            self._expired()
            if res is None:
                nxt = self.sched.next_ready_time()
                if nxt is None and self.sched.held:
                    nxt = min(r.lease_until for r in self.sched.held.values())
                await self._idle(nxt)
                continue
            self.in_flight_end = res.end
            delay = self.wall_of_v(res.end) - time.monotonic()
            await asyncio.sleep(delay if delay > 0 else 0)
            self.in_flight_end = None
            if self.halted():
                return
            self._measure_lag(res.end)
            self.vnow = res.end
            if res.stalled and self.jit_warning is not None:
                self.jit_warning()
            self._deliver(res)
            if self.on_step is not None:
                self.on_step(res)

    def _measure_lag(self, v_end: float) -> None:
        """How much later than scheduled the step ending at virtual ``v_end`` ended; the wall-to-virtual mapping
        absorbs it, so the next step is paced from now."""
        late = time.monotonic() - self.wall_of_v(v_end)
        if late > LAG_TOLERANCE_WALL_S:
            lag = late * self.clock
            self.lag_v += lag
            self.late_steps += 1
            self.lag_max_v = max(self.lag_max_v, lag)
            self._w0 += late

    async def _idle(self, until: float | None) -> None:
        """Wait for a new request, or until virtual time ``until`` (a KV pull finishing, a lease running out)."""
        self._wake.clear()
        if until is None:
            await self._wake.wait()
            self._resync()
            return
        delay = self.wall_of_v(until) - time.monotonic()
        if delay > 0:
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass
        self._resync()
        if not self._wake.is_set():
            self.vnow = max(self.vnow, until)

    def _expired(self) -> None:
        if not self.sched.expired:
            return
        for req in self.sched.expired:
            if self.on_expired is not None:
                self.on_expired(self, req)
        self.sched.expired.clear()

    def _deliver(self, res: StepResult) -> None:
        m = self.metrics
        self.busy_v += res.duration
        self.mem_v += res.mem_time
        m.hist["iteration_tokens_total"].observe(res.tokens)
        gen = sum(r.last_emit or 1 for r in res.emitted)
        m.counters["prompt_tokens"] += res.prefill_tokens
        m.counters["generation_tokens"] += gen
        self.iv_prompt += res.prefill_tokens
        self.iv_gen += gen
        sc = self.sched
        if m.spec_tokens:
            m.spec = sc.spec_counters()
        if res.preempted:
            m.counters["num_preemptions"] += res.preempted
        decode_itl = 0
        cache = self.cache
        for req in res.emitted:
            live = self.live.get(req.rid)
            if req.generated > 1:
                decode_itl += 1
            elif cache is not None and live is not None:
                cache.insert(live.hashes)  # the prompt's blocks are computed: later requests can reuse them
            if live is not None:
                live.event.set()
        if cache is not None:
            cache.shrink(self.sched.free_blocks)
        if decode_itl:
            m.hist["inter_token_latency_seconds"].observe(res.duration, decode_itl)
        for req in res.finished:
            if req.hold_after_finish and req.rid in self.sched.held:
                self.floor_lease(req)
            self._finished(req)

    def floor_lease(self, req: SimRequest) -> None:
        """Timers the clock scales must not run out because the host was slow: a KV lease (``kv_lease_duration``,
        virtual seconds) also lasts its unscaled length in wall time from now. At ``--sim-clock 20`` a 30 s lease
        is 1.5 s of wall time, which a CPU-starved proxy or decode server misses; only abandoned requests' blocks
        stay held longer."""
        req.lease_until = max(req.lease_until, self.v_of_wall(time.monotonic() + self.sched.lease_s))

    def _finished(self, req: SimRequest) -> None:
        m = self.metrics
        live = self.live.pop(req.rid, None)
        end = req.finished_at or self.vnow
        first = req.first_token_at or end
        sched = req.scheduled_at if req.scheduled_at is not None else req.arrival
        m.success[req.finish_reason or "length"] += 1
        m.hist["request_prompt_tokens"].observe(req.prompt_len)
        m.hist["request_generation_tokens"].observe(req.generated)
        m.hist["request_max_num_generation_tokens"].observe(req.max_tokens)
        m.hist["request_params_max_tokens"].observe(req.max_tokens)
        m.hist["request_params_n"].observe(live.params_n if live else 1)
        m.hist["time_to_first_token_seconds"].observe(first - req.arrival)
        m.hist["e2e_request_latency_seconds"].observe(end - req.arrival)
        m.hist["request_queue_time_seconds"].observe(max(0.0, sched - req.arrival))
        m.hist["request_inference_time_seconds"].observe(max(0.0, end - sched))
        m.hist["request_prefill_time_seconds"].observe(max(0.0, first - sched))
        m.hist["request_decode_time_seconds"].observe(max(0.0, end - first))
        if req.generated > 1:
            m.hist["request_time_per_output_token_seconds"].observe((end - first) / (req.generated - 1))
        m.hist["request_prefill_kv_computed_tokens"].observe(req.computed_prompt)
        external = min(req.prompt_len, max(0, req.prompt_len - req.computed_prompt - req.cached_tokens))
        m.by_source["local_compute"] += req.computed_prompt
        m.by_source["local_cache_hit"] += req.cached_tokens
        m.by_source["external_kv_transfer"] += external
        if self.cache is not None:  # vLLM counts prefix-cache queries only while caching is on
            m.counters["prefix_cache_queries"] += req.prompt_len
            m.counters["prefix_cache_hits"] += req.cached_tokens
        m.cached += req.cached_tokens + external
        if external:
            m.counters["external_prefix_cache_queries"] += req.prompt_len
            m.counters["external_prefix_cache_hits"] += external
        if live is not None:
            live.done = True
            live.event.set()

    def halted(self) -> bool:
        return self.stopped

    def stop(self) -> None:
        self.stopped = True
        self._wake.set()
