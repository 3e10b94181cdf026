"""vLLM 0.24's Prometheus metrics for the simulated server: same names, labels, HELP texts and buckets.

Labels are ``engine`` (the DP rank as a string) and ``model_name`` (the first served name), sorted by name as the
real exposition prints them. Counters are exposed as ``<name>_total`` with a ``<name>_created`` gauge family; with
more than one API server (DP) vLLM serves through prometheus_client's multiprocess collector, which has no
``_created`` series and no process metrics, and so does this.
"""

from __future__ import annotations

import bisect
import math
import os
import platform
import resource
import time
from dataclasses import dataclass, field

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0)
ITERATION_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0)
PARAMS_N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
NIXL_XFER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
NIXL_POST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
NIXL_BYTES_BUCKETS = tuple(float(2 ** k) for k in range(11, 34, 2))
NIXL_DESC_BUCKETS = (10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 400.0, 1000.0, 2000.0, 4000.0, 10000.0, 20000.0,
                     50000.0)


def buckets_1_2_5(limit: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``limit`` (vLLM's token-count histograms, bounded by max_model_len)."""
    out: list[float] = []
    base = 1
    while True:
        for m in (1, 2, 5):
            v = m * base
            if v > limit:
                return tuple(out)
            out.append(float(v))
        base *= 10


def go_float(d: float) -> str:
    """prometheus_client's float rendering (Go switches to exponents sooner than Python)."""
    d = float(d)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0
    created: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += times
        self.total += value * times
        self.n += times


# name, HELP (counters are named without _total here)
_COUNTERS = (
    ("estimated_flops_per_gpu", "Estimated number of floating point operations per GPU (for Model Flops "
                                "Utilization calculations)."),
    ("estimated_read_bytes_per_gpu", "Estimated number of bytes read from memory per GPU (for Model Flops "
                                     "Utilization calculations)."),
    ("estimated_write_bytes_per_gpu", "Estimated number of bytes written to memory per GPU (for Model Flops "
                                      "Utilization calculations)."),
)
_COUNTERS_2 = (
    ("prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
    ("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
    ("external_prefix_cache_queries", "External prefix cache queries from KV connector cross-instance cache "
                                      "sharing, in terms of number of queried tokens."),
    ("external_prefix_cache_hits", "External prefix cache hits from KV connector cross-instance cache sharing, in "
                                   "terms of number of cached tokens."),
    ("mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items."),
    ("mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items."),
    ("num_preemptions", "Cumulative number of preemption from the engine."),
    ("prompt_tokens", "Number of prefill tokens processed."),
)
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
_HISTOGRAMS = (
    ("request_prompt_tokens", "Number of prefill tokens processed.", "len"),
    ("request_generation_tokens", "Number of generation tokens processed.", "len"),
    ("iteration_tokens_total", "Histogram of number of tokens per engine_step.", "iter"),
    ("request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", "len"),
    ("request_params_n", "Histogram of the n request parameter.", "n"),
    ("request_params_max_tokens", "Histogram of the max_tokens request parameter.", "len"),
    ("time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
    ("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
    ("request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", "itl"),
    ("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "lat"),
    ("request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", "lat"),
    ("request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", "lat"),
    ("request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", "lat"),
    ("request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", "lat"),
    ("request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached "
                                           "tokens).", "len"),
)
_NIXL_HISTOGRAMS = (
    ("nixl_xfer_time_seconds", "Histogram of transfer duration for NIXL KV Cache transfers.", NIXL_XFER_BUCKETS),
    ("nixl_post_time_seconds", "Histogram of transfer post time for NIXL KV Cache transfers.", NIXL_POST_BUCKETS),
    ("nixl_bytes_transferred", "Histogram of bytes transferred per NIXL KV Cache transfers.", NIXL_BYTES_BUCKETS),
    ("nixl_num_descriptors", "Histogram of number of descriptors per NIXL  KV Cache transfers.", NIXL_DESC_BUCKETS),
)
_NIXL_COUNTERS = (
    ("nixl_num_failed_transfers", "Number of failed NIXL KV Cache transfers."),
    ("nixl_num_failed_notifications", "Number of failed NIXL KV Cache notifications."),
    ("nixl_num_kv_expired_reqs", "Number of requests that had their KV expire. NOTE: This metric is tracked on "
                                 "the P instance."),
)


class EngineMetrics:
    """The counters and histograms of one engine (one DP rank)."""

    def __init__(self, max_model_len: int, *, nixl: bool = False, spec_tokens: int = 0) -> None:
        now = time.time()
        #: speculative decoding (``spec_tokens`` > 0): drafts, draft tokens, accepted tokens, accepted per position
        self.spec_tokens = spec_tokens
        self.spec = [0.0] * (3 + spec_tokens)
        kinds = {"len": buckets_1_2_5(max_model_len), "iter": ITERATION_BUCKETS, "n": PARAMS_N_BUCKETS,
                 "ttft": TTFT_BUCKETS, "itl": ITL_BUCKETS, "lat": LATENCY_BUCKETS}
        self.counters = {name: 0.0 for name, _ in (*_COUNTERS, *_COUNTERS_2)}
        self.counters["generation_tokens"] = 0.0
        self.by_source = dict.fromkeys(SOURCES, 0.0)
        self.cached = 0.0
        self.success = dict.fromkeys(FINISH_REASONS, 0.0)
        self.hist = {name: Histogram(kinds[kind], created=now) for name, _, kind in _HISTOGRAMS}
        self.nixl = nixl
        self.nixl_hist = {name: Histogram(b, created=now) for name, _, b in _NIXL_HISTOGRAMS} if nixl else {}
        self.nixl_counters = {name: 0.0 for name, _ in _NIXL_COUNTERS} if nixl else {}
        self.created = now


@dataclass
class EngineGauges:
    running: int = 0
    waiting: int = 0
    waiting_deferred: int = 0
    kv_usage: float = 0.0


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{pairs[k]}"' for k in sorted(pairs)) + "}"


class Exposition:
    def __init__(self, single_process: bool) -> None:
        self.single = single_process
        self.lines: list[str] = []

    def family(self, name: str, help_text: str, kind: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: dict[str, str], value: float) -> None:
        self.lines.append(f"{name}{_labels(labels)} {go_float(value)}")

    def counter(self, name: str, help_text: str, rows: list[tuple[dict[str, str], float, float]]) -> None:
        self.family(f"{name}_total", help_text, "counter")
        for labels, value, _ in rows:
            self.sample(f"{name}_total", labels, value)
        if self.single:
            self.family(f"{name}_created", help_text, "gauge")
            for labels, _, created in rows:
                self.sample(f"{name}_created", labels, created)

    def histogram(self, name: str, help_text: str, rows: list[tuple[dict[str, str], Histogram]]) -> None:
        self.family(name, help_text, "histogram")
        for labels, h in rows:
            acc = 0
            for bound, c in zip((*h.buckets, math.inf), h.counts, strict=True):
                acc += c
                self.sample(f"{name}_bucket", {**labels, "le": go_float(bound)}, acc)
            self.sample(f"{name}_count", labels, h.n)
            self.sample(f"{name}_sum", labels, h.total)
        if self.single:
            self.family(f"{name}_created", help_text, "gauge")
            for labels, h in rows:
                self.sample(f"{name}_created", labels, h.created)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _process_metrics(ex: Exposition) -> None:
    ex.family("python_info", "Python platform information", "gauge")
    ver = platform.python_version_tuple()
    ex.sample("python_info", {"implementation": platform.python_implementation(), "major": ver[0],
                              "minor": ver[1], "patchlevel": ver[2], "version": platform.python_version()}, 1.0)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rows = [("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge",
             usage.ru_maxrss * 1024.0),
            ("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", "counter",
             usage.ru_utime + usage.ru_stime),
            ("process_open_fds", "Number of open file descriptors.", "gauge", float(_open_fds())),
            ("process_max_fds", "Maximum number of open file descriptors.", "gauge",
             float(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))]
    for name, help_text, kind, value in rows:
        ex.family(name, help_text, kind)
        ex.lines.append(f"{name} {go_float(value)}")


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def render(engines: list[tuple[str, EngineMetrics, EngineGauges]], model_name: str, cache_info: dict[str, str],
           *, single_process: bool) -> str:
    """The whole ``/metrics`` text for these engines (engine label, counters, current gauges)."""
    ex = Exposition(single_process)
    if single_process:
        _process_metrics(ex)
    base = [({"engine": e, "model_name": model_name}, m, g) for e, m, g in engines]
    if base and base[0][1].spec_tokens:  # vLLM's first families with speculative decoding (the H200 n-gram run)
        _spec_families(ex, base)
    if base and base[0][1].nixl:
        for name, help_text, _ in _NIXL_HISTOGRAMS:
            ex.histogram(f"vllm:{name}", help_text, [(lab, m.nixl_hist[name]) for lab, m, _ in base])
        for name, help_text in _NIXL_COUNTERS:
            ex.counter(f"vllm:{name}", help_text, [(lab, m.nixl_counters[name], m.created) for lab, m, _ in base])
    for name, help_text in _COUNTERS:
        ex.counter(f"vllm:{name}", help_text, [(lab, m.counters[name], m.created) for lab, m, _ in base])
    ex.family("vllm:num_requests_running", "Number of requests in model execution batches.", "gauge")
    for lab, _, g in base:
        ex.sample("vllm:num_requests_running", lab, g.running)
    ex.family("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge")
    for lab, _, g in base:
        ex.sample("vllm:num_requests_waiting", lab, g.waiting)
    ex.family("vllm:num_requests_waiting_by_reason",
              "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
              "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of "
              "all reasons equals vllm:num_requests_waiting.", "gauge")
    for reason in ("capacity", "deferred"):
        for lab, _, g in base:
            value = g.waiting_deferred if reason == "deferred" else g.waiting - g.waiting_deferred
            ex.sample("vllm:num_requests_waiting_by_reason", {**lab, "reason": reason}, value)
    ex.family("vllm:engine_sleep_state", "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means "
              "engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
              "gauge")
    for state, v in (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0)):
        for lab, _, _ in base:
            ex.sample("vllm:engine_sleep_state", {**lab, "sleep_state": state}, v)
    ex.family("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge")
    for lab, _, g in base:
        ex.sample("vllm:kv_cache_usage_perc", lab, g.kv_usage)
    for name, help_text in _COUNTERS_2:
        ex.counter(f"vllm:{name}", help_text, [(lab, m.counters[name], m.created) for lab, m, _ in base])
    ex.counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
               [({**lab, "source": s}, m.by_source[s], m.created) for s in SOURCES for lab, m, _ in base])
    ex.counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).",
               [(lab, m.cached, m.created) for lab, m, _ in base])
    ex.counter("vllm:generation_tokens", "Number of generation tokens processed.",
               [(lab, m.counters["generation_tokens"], m.created) for lab, m, _ in base])
    ex.counter("vllm:request_success", "Count of successfully processed requests.",
               [({**lab, "finished_reason": r}, m.success[r], m.created) for r in FINISH_REASONS for lab, m, _ in base])
    for name, help_text, _ in _HISTOGRAMS:
        ex.histogram(f"vllm:{name}", help_text, [(lab, m.hist[name]) for lab, m, _ in base])
    ex.family("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge")
    for lab, _, _ in base:
        ex.sample("vllm:cache_config_info", {**cache_info, "engine": lab["engine"]}, 1.0)
    return ex.text()


_SPEC_COUNTERS = (("spec_decode_num_drafts", "Number of spec decoding drafts."),
                  ("spec_decode_num_draft_tokens", "Number of draft tokens."),
                  ("spec_decode_num_accepted_tokens", "Number of accepted tokens."))


def _spec_families(ex: Exposition, base: list[tuple[dict[str, str], EngineMetrics, EngineGauges]]) -> None:
    """vLLM's spec-decode counters (``v1/spec_decode/metrics.py``: SpecDecodingProm), only with speculative
    decoding; whole tokens, as vLLM counts them."""
    for i, (name, help_text) in enumerate(_SPEC_COUNTERS):
        ex.counter(f"vllm:{name}", help_text, [(lab, float(int(m.spec[i])), m.created) for lab, m, _ in base])
    k = base[0][1].spec_tokens
    ex.counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
               [({**lab, "position": str(p)}, float(int(m.spec[3 + p])), m.created) for lab, m, _ in base
                for p in range(k)])


#: the simulator's own series (not vLLM's): how well each simulated engine kept the pace ``DISAGG_SIM_CLOCK`` asks
PACED = "disagg_sim:paced_seconds_total"
PACING_LAG = "disagg_sim:pacing_lag_seconds_total"
PACING_LAG_MAX = "disagg_sim:pacing_lag_max_seconds"
SIM_CLOCK = "disagg_sim:clock"


@dataclass(frozen=True, slots=True)
class Pacing:
    engine: str
    clock: float
    paced_v: float  # virtual seconds of steps run
    lag_v: float  # virtual seconds the steps ended later than scheduled
    lag_max_v: float


def render_pacing(rows: list[Pacing]) -> str:
    """The pacing series, appended to ``/metrics`` after vLLM's (a bench reads them before and after a run)."""
    out = [f"# HELP {PACED} Virtual seconds the simulated engine ran steps for.", f"# TYPE {PACED} counter"]
    out += [f'{PACED}{{engine="{r.engine}"}} {go_float(r.paced_v)}' for r in rows]
    out += [f"# HELP {PACING_LAG} Virtual seconds the simulated engine's steps ended later than scheduled (the host "
            "could not keep the clock).", f"# TYPE {PACING_LAG} counter"]
    out += [f'{PACING_LAG}{{engine="{r.engine}"}} {go_float(r.lag_v)}' for r in rows]
    out += [f"# HELP {PACING_LAG_MAX} The worst single step's lag, virtual seconds.", f"# TYPE {PACING_LAG_MAX} gauge"]
    out += [f'{PACING_LAG_MAX}{{engine="{r.engine}"}} {go_float(r.lag_max_v)}' for r in rows]
    out += [f"# HELP {SIM_CLOCK} How many times faster than real time the simulated engine runs.",
            f"# TYPE {SIM_CLOCK} gauge"]
    out += [f'{SIM_CLOCK}{{engine="{r.engine}"}} {go_float(r.clock)}' for r in rows]
    return "\n".join(out) + "\n"
