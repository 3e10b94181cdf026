"""A ``vllm bench serve`` run against simulated servers, entirely in virtual time (pure, fast).

What the real-time simulated server does step by step, this runs without clocks: the same schedulers and the same
performance model, so its figures are the ones the simulated server paces its tokens by. Used by the calibration
tests and ``benchmarks/sim_calibration.py``. Metrics follow ``vllm bench serve``'s definitions: TTFT from request
start to first token, TPOT = (latency − TTFT) / (output tokens − 1), output throughput = output tokens / duration.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

from tui.core.models import ModelProfile
from tui.core.plan.gpuspecs import GpuSpec
from tui.core.topology import Topology, parse_topology
from tui.sim.frontend import admit
from tui.sim.knobs_model import ServeKnobs
from tui.sim.perfmodel import BLOCK_SIZE, Correction, Hardware, ModelCost, Stack, batch_defaults, memory_plan
from tui.sim.scheduler import EngineScheduler, SimRequest

PROXY_LATENCY_S = 1e-3  # our proxy: P's response read, D's request sent
STATS_WINDOW_S = 10.0  # vLLM's stats-line interval



@dataclass
class BenchResult:
    topology: str
    completed: int
    duration: float
    total_input: int
    total_output: int
    ttfts: list[float] = field(repr=False, default_factory=list)
    tpots: list[float] = field(repr=False, default_factory=list)
    itls: dict[float, int] = field(repr=False, default_factory=dict)  # inter-token gap (s) -> how many
    peak_prompt_throughput: float = 0.0  # best 10 s stats-line window, tokens/s
    preemptions: int = 0
    requests: list[tuple[float, float | None, float]] = field(repr=False, default_factory=list)  # ttft, tpot, e2el

    @property
    def request_throughput(self) -> float:
        return self.completed / self.duration if self.duration > 0 else 0.0

    def goodput(self, slo_ms: Mapping[str, float]) -> float:
        """Requests per second that met every SLO (``vllm bench serve --goodput``: ttft, tpot, e2el in ms)."""
        if self.duration <= 0:
            return 0.0
        good = 0
        for ttft, tpot, e2el in self.requests:
            values = {"ttft": ttft * 1000, "tpot": (tpot or 0.0) * 1000, "e2el": e2el * 1000}
            if all(values.get(k, 0.0) <= v for k, v in slo_ms.items()):
                good += 1
        return good / self.duration

    @property
    def output_throughput(self) -> float:
        return self.total_output / self.duration if self.duration > 0 else 0.0

    @property
    def mean_ttft_ms(self) -> float:
        return 1000 * statistics.fmean(self.ttfts) if self.ttfts else 0.0

    @property
    def median_ttft_ms(self) -> float:
        return 1000 * statistics.median(self.ttfts) if self.ttfts else 0.0

    @property
    def mean_tpot_ms(self) -> float:
        return 1000 * statistics.fmean(self.tpots) if self.tpots else 0.0

    @property
    def median_itl_ms(self) -> float:
        total = sum(self.itls.values())
        seen = 0
        for gap in sorted(self.itls):
            seen += self.itls[gap]
            if 2 * seen >= total:
                return 1000 * gap
        return 0.0

    @property
    def max_itl_ms(self) -> float:
        return 1000 * max(self.itls, default=0.0)


@dataclass
class _Tokens:
    """What the client of one request sees: first and last token times, how many tokens."""

    first: float = 0.0
    last: float = 0.0
    count: int = 0


@dataclass
class _Engine:
    sched: EngineScheduler
    clock: float = 0.0
    arrivals: list[tuple[float, int, SimRequest]] = field(default_factory=list)  # heap
    prompt_windows: dict[int, int] = field(default_factory=dict)

    def admit(self) -> None:
        """Each request reaches the engine when its API server has read it and handed it over (:mod:`frontend`)."""
        if not self.arrivals:
            return
        reqs = [r for _, _, r in sorted(self.arrivals)]
        at = admit([r.arrival for r in reqs], [r.prompt_len for r in reqs])
        for r, t in zip(reqs, at, strict=True):
            r.arrival = t
        self.arrivals = [(t, i, r) for i, (r, t) in enumerate(zip(reqs, at, strict=True))]
        heapq.heapify(self.arrivals)

    def run(self, seen: dict[str, _Tokens], itls: dict[float, int], on_finish: list[SimRequest]) -> None:
        self.admit()
        while True:
            while self.arrivals and self.arrivals[0][0] <= self.clock:
                self.sched.add(heapq.heappop(self.arrivals)[2])
            if not self.sched.has_work():
                if not self.arrivals:
                    return
                self.clock = self.arrivals[0][0]
                continue
            until = self.arrivals[0][0] if self.arrivals else math.inf
            run = self.sched.decode_run(self.clock, until)
            if run is not None:
                ends, finished = run
                prev = self.clock
                n = len(self.sched.running) + len(finished)
                for end in ends:
                    gap = end - prev
                    itls[gap] = itls.get(gap, 0) + n
                    prev = end
                for req in [*self.sched.running, *finished]:
                    tok = seen[req.rid]
                    tok.last = ends[-1]
                    tok.count += req.last_emit
                self.clock = ends[-1]
                on_finish.extend(finished)
                continue
            res = self.sched.step(self.clock)
            if res is None:
                ready = self.sched.next_ready_time()
                nxt = [t for t in (ready, self.arrivals[0][0] if self.arrivals else None) if t is not None]
                if not nxt:
                    return
                self.clock = max(self.clock, min(nxt))
                continue
            self.clock = end = res.end
            if res.prefill_tokens:
                w = int(res.start // STATS_WINDOW_S)
                self.prompt_windows[w] = self.prompt_windows.get(w, 0) + res.prefill_tokens
            for req in res.emitted:
                tok = seen.get(req.rid)
                if tok is None:
                    tok = seen[req.rid] = _Tokens(first=end, last=end)
                if tok.count:
                    gap = end - tok.last
                    itls[gap] = itls.get(gap, 0) + 1
                tok.last = end
                tok.count += req.last_emit or 1
            on_finish.extend(res.finished)


def _scheduler(profile: ModelProfile, hw: Hardware, tp: int, gmu: float, jit_stall_s: float,
               stack: Stack | None, correction: Correction | None = None, knobs: ServeKnobs | None = None
               ) -> EngineScheduler:
    kn = knobs or ServeKnobs()
    mbt, mns = batch_defaults(hw.spec)
    mbt = kn.max_num_batched_tokens or mbt
    mns = kn.max_num_seqs or mns
    mem = memory_plan(profile, hw, tp=tp, gpu_memory_utilization=gmu, max_num_batched_tokens=mbt,
                      enforce_eager=kn.enforce_eager, kv_cache_dtype=kn.kv_cache_dtype, v1_runner=kn.cpu_drafter)
    st = (stack or Stack.select(hw.spec)).with_knobs(kn)
    return EngineScheduler(ModelCost(profile, hw, tp, st, correction, kn), kv_tokens=mem.kv_tokens,
                           max_num_seqs=mns, max_num_batched_tokens=mbt,
                           state_tokens_per_seq=mem.state_tokens_per_seq, jit_stall_s=jit_stall_s)


def simulate_bench(profile: ModelProfile, gpu: GpuSpec, topology: str | Topology, *, input_len: int,
                   output_len: int, num_prompts: int = 128, gpu_memory_utilization: float | None = None,
                   jit_stall_s: float = 0.0, stack: Stack | None = None, request_rate: float | None = None,
                   seed: int = 0, correction: Correction | None = None, knobs: ServeKnobs | None = None,
                   role_knobs: Mapping[str, ServeKnobs] | None = None) -> BenchResult:
    """All ``num_prompts`` requests sent at t=0 (``--request-rate inf``), ``--ignore-eos``. ``stack``: the kernels
    the engines run with (default: what vLLM picks on ``gpu`` with nvcc present); ``jit_stall_s``: each engine's
    first batch stalls that long (a fresh server's first run with the Triton sampler); ``request_rate``: Poisson
    arrivals at that many requests per second (``vllm bench serve --request-rate``, burstiness 1) instead of all at
    once; ``correction``: a host's calibration factors; ``knobs``: the serve flags every engine runs with, and
    ``role_knobs`` those of a disaggregated layout's "prefill" and "decode" engines (a role missing: ``knobs``)."""
    topo = parse_topology(topology) if isinstance(topology, str) else topology
    hw = Hardware.for_gpu(gpu)
    gmu = gpu_memory_utilization or profile.gpu_memory_utilization
    seen: dict[str, _Tokens] = {}
    itls: dict[float, int] = {}
    done: list[SimRequest] = []
    windows: dict[int, int] = {}
    preemptions = 0
    arrivals = [0.0] * num_prompts
    if request_rate is not None and math.isfinite(request_rate) and request_rate > 0:
        rng = random.Random(seed)
        t = 0.0
        for i in range(num_prompts):
            arrivals[i] = t
            t += rng.expovariate(request_rate)
    reqs = [SimRequest(rid=str(i), prompt_len=input_len, max_tokens=output_len, arrival=arrivals[i])
            for i in range(num_prompts)]
    sent = list(arrivals)  # what the client measures from (an engine's request arrives when admitted)
    roles = role_knobs or {}

    def engine(role: str = "") -> _Engine:
        kn = roles.get(role, knobs) if role else knobs
        return _Engine(_scheduler(profile, hw, topo.tp, gmu, jit_stall_s, stack, correction, kn))

    if topo.kind in ("tp", "dp"):
        engines = [engine() for _ in range(topo.dp)]
        for i, r in enumerate(reqs):
            heapq.heappush(engines[i % len(engines)].arrivals, (r.arrival, i, r))
        for e in engines:
            e.run(seen, itls, done)
    else:
        pre = [engine("prefill") for _ in range(topo.prefill)]
        dec = [engine("decode") for _ in range(topo.decode)]
        p_reqs = [SimRequest(rid=r.rid, prompt_len=input_len, max_tokens=1, arrival=r.arrival) for r in reqs]
        for i, r in enumerate(p_reqs):
            heapq.heappush(pre[i % len(pre)].arrivals, (r.arrival, i, r))
        p_done: list[SimRequest] = []
        for e in pre:
            e.run({}, {}, p_done)
            _merge(windows, e.prompt_windows)
            preemptions += e.sched.num_preemptions
        cost = dec[0].sched.cost
        external = (input_len - 1) // BLOCK_SIZE * BLOCK_SIZE
        for k, p in enumerate(sorted(p_done, key=lambda r: r.finished_at or 0.0)):
            t = (p.finished_at or 0.0) + PROXY_LATENCY_S
            d = SimRequest(rid=p.rid, prompt_len=input_len, max_tokens=output_len, arrival=t,
                           external_tokens=external,
                           transfer_time=cost.kv_transfer_time(cost.kv_transfer_bytes(external)))
            heapq.heappush(dec[k % len(dec)].arrivals, (t, k, d))
        engines = dec
        for e in engines:
            e.run(seen, itls, done)
    for e in engines:
        _merge(windows, e.prompt_windows)
        preemptions += e.sched.num_preemptions
    return _metrics(topo.name, sent, reqs, done, seen, itls, windows, preemptions, input_len)


def _merge(into: dict[int, int], other: dict[int, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def _metrics(name: str, sent: list[float], reqs: list[SimRequest], done: list[SimRequest],
             seen: dict[str, _Tokens], itls: dict[float, int], windows: dict[int, int], preemptions: int,
             input_len: int) -> BenchResult:
    ttfts: list[float] = []
    tpots: list[float] = []
    per: list[tuple[float, float | None, float]] = []
    total_out = 0
    end = 0.0
    for r, t0 in zip(reqs, sent, strict=True):
        tok = seen.get(r.rid)
        if tok is None or not tok.count:
            continue
        total_out += tok.count
        ttfts.append(tok.first - t0)
        end = max(end, tok.last)
        tpot = (tok.last - tok.first) / (tok.count - 1) if tok.count > 1 else None
        if tpot is not None:
            tpots.append(tpot)
        per.append((tok.first - t0, tpot, tok.last - t0))
    peak = max(windows.values(), default=0) / STATS_WINDOW_S
    return BenchResult(topology=name, completed=len(done), duration=end, total_input=input_len * len(ttfts),
                       total_output=total_out, ttfts=ttfts, tpots=tpots, itls=itls, peak_prompt_throughput=peak,
                       preemptions=preemptions, requests=per)
