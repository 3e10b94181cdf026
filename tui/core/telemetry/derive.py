"""What an operator reads from a vLLM server's successive ``/metrics`` scrapes.

Gauges come from the newest scrape (summed over the ``engine`` label: one engine per DP rank, and kept per engine
too). Rates come from counter deltas over the last ``rate_window_s`` seconds, latency quantiles from histogram
bucket deltas over the last ``window_s`` seconds; both survive a counter reset (a restarted server: a value that
went down counts from zero) and series that appear mid-window (a new ``finished_reason``).

On a decode server of a disaggregated layout, the proof that disaggregation happens: prompt tokens counted under
``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}`` (KV pulled from the prefill server) against
``source="local_compute"`` (prefill recomputed locally). vLLM computes at least the last prompt token of each
request itself (it needs that position's logits), so a healthy decode server shows a large external share, and a
decode server that silently re-does the prefill shows none.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tui.core.telemetry.deltas import Scrape, counter_delta, histogram_delta
from tui.core.telemetry.kvrate import KvRate
from tui.core.telemetry.prom import Exposition, Histogram, histogram_quantile
from tui.core.telemetry.runwindow import RunWindow

# families the figures read (the poller parses only these: see KEEP_PREFIXES)
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
PREEMPTIONS = "vllm:num_preemptions_total"
REQUEST_SUCCESS = "vllm:request_success_total"
TTFT = "vllm:time_to_first_token_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"  # 0.24 has no vllm:time_per_output_token_seconds
ITL = "vllm:inter_token_latency_seconds"
E2E = "vllm:e2e_request_latency_seconds"
QUEUE = "vllm:request_queue_time_seconds"
#: the latency histograms of ServerFigures (the first one's new observations end a finished run's window)
LATENCY = (TTFT, TPOT, ITL, E2E, QUEUE)
NIXL_XFER_TIME = "vllm:nixl_xfer_time_seconds"
NIXL_BYTES = "vllm:nixl_bytes_transferred"
NIXL_FAILED_TRANSFERS = "vllm:nixl_num_failed_transfers_total"
NIXL_FAILED_NOTIFICATIONS = "vllm:nixl_num_failed_notifications_total"
NIXL_EXPIRED = "vllm:nixl_num_kv_expired_reqs_total"

KEEP_PREFIXES: tuple[str, ...] = (
    RUNNING, WAITING, KV_USAGE, "vllm:prefix_cache_", PROMPT_TOKENS, GENERATION_TOKENS, "vllm:prompt_tokens_by_source",
    "vllm:num_preemptions", "vllm:request_success", TTFT, TPOT, ITL, E2E, QUEUE, "vllm:nixl_",
)

# verdicts of the disaggregation proof
KV_TRANSFER_OK = "kv_transfer_ok"
DECODE_RECOMPUTED_PREFILL = "decode_recomputed_prefill"
PARTIAL_KV_TRANSFER = "partial_kv_transfer"
NO_TRAFFIC = "no_traffic"
DEFAULT_MIN_EXTERNAL_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Quantiles:
    """Latency over the window, seconds (bucket interpolation, as Prometheus' histogram_quantile)."""

    count: float  # observations in the window
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class EngineFigures:
    engine: str  # the DP rank ("0", "1", …)
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None  # 0..1
    prompt_tps: float | None = None
    generation_tps: float | None = None


@dataclass(frozen=True, slots=True)
class KvTransferFigures:
    """NixlConnector's figures over the window (present only where NIXL is configured)."""

    transfers: float
    transfers_per_s: float | None
    bytes: float
    bytes_per_s: float | None  # moved: bytes per wall second of the window, every transfer together
    xfer_time_mean_s: float | None
    xfer_time_p90_s: float | None
    failed_transfers: float
    failed_notifications: float
    expired_requests: float
    failed_transfers_total: float | None = None
    xfer_time_s: float = 0.0  # seconds spent transferring over the window (the histogram's sum)
    window_s: float = 0.0  # the wall seconds the window spans

    @property
    def rate(self) -> KvRate:
        """Both rates, as the bench reports them (:mod:`tui.core.telemetry.kvrate`): ``bytes_per_s`` is the
        moved one, ``mb_per_s`` the per-transfer one in MiB/s."""
        return KvRate(self.bytes, self.xfer_time_s, self.window_s or None)

    @property
    def mb_per_s(self) -> float | None:
        """Per transfer, as vLLM's log states it (MiB per second of transfer time)."""
        bps = self.rate.per_transfer_bps
        return None if bps is None else bps / float(1 << 20)


@dataclass(frozen=True, slots=True)
class DisaggProof:
    """Where a decode server's prompt tokens came from over the window."""

    verdict: str  # kv_transfer_ok | decode_recomputed_prefill | partial_kv_transfer | no_traffic
    external_tokens: float
    local_compute_tokens: float
    cache_hit_tokens: float
    external_share: float | None  # external / (external + local_compute)
    explanation: str


@dataclass(frozen=True, slots=True)
class ServerFigures:
    """Everything derived for one server at one moment."""

    ts: float  # the newest scrape
    span_s: float  # seconds between the oldest and newest scrape used for rates
    scrapes: int
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None  # 0..1, mean over engines
    kv_cache_usage_max: float | None = None
    prefix_cache_hit_rate: float | None = None  # 0..1 over the window
    prompt_tps: float | None = None  # every prompt token, wherever it came from (vllm:prompt_tokens_total)
    generation_tps: float | None = None
    #: the prompt tokens/s by where they came from (vllm:prompt_tokens_by_source_total; None where the server does
    #: not export it): computed here, served from its prefix cache, arrived by KV transfer (a 1P1D decode server's
    #: prompts all arrive so: its prompt_tps is none of its own work)
    prompt_computed_tps: float | None = None
    prompt_cached_tps: float | None = None
    prompt_transferred_tps: float | None = None
    requests_per_s: float | None = None  # finished requests, all reasons
    finished: dict[str, float] = field(default_factory=dict)  # finished_reason → count over the window
    preemptions: float | None = None  # over the window
    preemptions_total: float | None = None
    ttft: Quantiles | None = None
    tpot: Quantiles | None = None
    itl: Quantiles | None = None
    e2e: Quantiles | None = None
    queue: Quantiles | None = None
    #: what the latency quantiles above cover: None, the last ``window_s`` seconds; else the observations since
    #: this wall time (a benchmark run's start, its warm-up left out) up to ``latency_until`` (None: still going)
    latency_since: float | None = None
    latency_until: float | None = None
    engines: tuple[EngineFigures, ...] = ()
    kv_transfer: KvTransferFigures | None = None
    disagg: DisaggProof | None = None
    unavailable: tuple[tuple[str, str], ...] = ()


def quantiles(h: Histogram | None) -> Quantiles | None:
    if h is None:
        return None
    count = h.buckets[-1].count if h.buckets else 0.0
    if count <= 0:
        return Quantiles(count=0.0, mean=None, p50=None, p90=None, p99=None)
    return Quantiles(count=count, mean=(h.sum / h.count) if h.count > 0 else None,
                     p50=histogram_quantile(0.5, h.buckets), p90=histogram_quantile(0.9, h.buckets),
                     p99=histogram_quantile(0.99, h.buckets))


def disagg_proof(external: float, local: float, cache_hit: float,
                 min_external_share: float = DEFAULT_MIN_EXTERNAL_SHARE) -> DisaggProof:
    """The verdict on a decode server's prompt-token sources over a window."""
    computed = external + local
    if computed <= 0:
        return DisaggProof(NO_TRAFFIC, external, local, cache_hit, None,
                           "no prompt tokens in the window: nothing to judge")
    share = external / computed
    if external <= 0:
        return DisaggProof(DECODE_RECOMPUTED_PREFILL, external, local, cache_hit, 0.0,
                           f"{local:.0f} prompt tokens computed locally and none received over KV transfer: "
                           "this decode server is re-doing the prefill")
    if share < min_external_share:
        return DisaggProof(PARTIAL_KV_TRANSFER, external, local, cache_hit, share,
                           f"only {share:.0%} of prompt tokens arrived over KV transfer: some requests were "
                           "prefilled again on the decode server")
    return DisaggProof(KV_TRANSFER_OK, external, local, cache_hit, share,
                       f"{share:.0%} of prompt tokens arrived over KV transfer")


class MetricsWindow:
    """Successive scrapes of one server, and the figures derived from them."""

    def __init__(self, *, window_s: float = 10.0, rate_window_s: float = 5.0,
                 min_external_share: float = DEFAULT_MIN_EXTERNAL_SHARE) -> None:
        self.window_s = window_s
        self.rate_window_s = rate_window_s
        self.min_external_share = min_external_share
        self._scrapes: deque[Scrape] = deque()
        self._run: RunWindow | None = None

    # --- a benchmark run's window ------------------------------------------------------------------------------
    def mark_run(self, start: float) -> None:
        """From now on the latency quantiles cover what was observed since ``start`` (a run's start, its warm-up
        excluded), not the rolling window."""
        self._run = RunWindow(start, LATENCY)
        self._run.begin(list(self._scrapes))

    def end_run(self, end: float) -> None:
        """The run ended at ``end``: its figures stay until the server serves new requests."""
        if self._run is not None:
            self._run.finish(end, self._scrapes[-1].ts if self._scrapes else None)

    def __len__(self) -> int:
        return len(self._scrapes)

    def add(self, ts: float, exp: Exposition) -> None:
        if self._scrapes and ts <= self._scrapes[-1].ts:
            self._scrapes.clear()  # clock went back: start afresh rather than divide by zero
            self._run = None
        self._scrapes.append(Scrape(ts, exp, prev=self._scrapes[-1] if self._scrapes else None))
        if self._run is not None and len(self._scrapes) >= 2:
            self._run.step(self._scrapes[-2], self._scrapes[-1])
            if self._run.stale:  # new traffic after the run: the rolling window again
                self._run = None
        horizon = ts - max(self.window_s, self.rate_window_s)
        # keep one scrape at or before the horizon as the window's base
        while len(self._scrapes) >= 2 and self._scrapes[1].ts <= horizon:
            self._scrapes.popleft()
            self._scrapes[0].prev = None  # the running totals stay valid; the chain no longer grows forever

    def _since(self, seconds: float) -> list[Scrape]:
        if not self._scrapes:
            return []
        newest = self._scrapes[-1].ts
        items = list(self._scrapes)
        start = 0
        for i, sc in enumerate(items):
            if sc.ts <= newest - seconds:
                start = i
        return items[start:]

    def newest(self) -> Exposition | None:
        return self._scrapes[-1].exp if self._scrapes else None

    def histogram(self, name: str, **match: str) -> Histogram | None:
        """The observations of ``name`` over the latency window (None before two scrapes)."""
        return histogram_delta(self._since(self.window_s), name, **match)

    def rate(self, name: str, **match: str) -> float | None:
        """A counter's increase per second over the rate window (None before two scrapes)."""
        sc = self._since(self.rate_window_s)
        span = sc[-1].ts - sc[0].ts if len(sc) >= 2 else 0.0
        if span <= 0:
            return None
        d = counter_delta(sc, name, **match)
        return None if d is None else d / span

    def figures(self, role: str = "single") -> ServerFigures | None:
        if not self._scrapes:
            return None
        newest = self._scrapes[-1]
        exp = newest.exp
        na: list[tuple[str, str]] = []
        rate_sc = self._since(self.rate_window_s)
        hist_sc = self._since(self.window_s)
        span = rate_sc[-1].ts - rate_sc[0].ts if len(rate_sc) >= 2 else 0.0


        if span <= 0:
            na.append(("rates", "one scrape so far: rates need two"))

        engines = sorted({s.label("engine") or "" for s in exp.samples(RUNNING)} |
                         {s.label("engine") or "" for s in exp.samples(GENERATION_TOKENS)})
        per_engine = tuple(
            EngineFigures(engine=e, running=exp.total(RUNNING, engine=e), waiting=exp.total(WAITING, engine=e),
                          kv_cache_usage=exp.value(KV_USAGE, engine=e), prompt_tps=self.rate(PROMPT_TOKENS, engine=e),
                          generation_tps=self.rate(GENERATION_TOKENS, engine=e))
            for e in engines if e
        )
        kv = [s.value for s in exp.samples(KV_USAGE)]
        queries = counter_delta(rate_sc, PREFIX_QUERIES) if span > 0 else None
        hits = counter_delta(rate_sc, PREFIX_HITS) if span > 0 else None
        hit_rate = (hits / queries) if (queries and hits is not None) else None
        finished: dict[str, float] = {}
        if span > 0:
            for reason in sorted({s.label("finished_reason") or "" for s in exp.samples(REQUEST_SUCCESS)}):
                d = counter_delta(rate_sc, REQUEST_SUCCESS, finished_reason=reason)
                if d is not None:
                    finished[reason] = d
        requests_per_s = (sum(finished.values()) / span) if span > 0 and any(exp.samples(REQUEST_SUCCESS)) else None
        preempt = counter_delta(hist_sc, PREEMPTIONS) if len(hist_sc) >= 2 else None
        if len(hist_sc) < 2:
            na.append(("latency", "one scrape so far: quantiles need two"))
        latency, since, until = self._latency(hist_sc)
        figures = ServerFigures(
            ts=newest.ts, span_s=span, scrapes=len(self._scrapes),
            running=exp.total(RUNNING), waiting=exp.total(WAITING),
            kv_cache_usage=(sum(kv) / len(kv)) if kv else None, kv_cache_usage_max=max(kv) if kv else None,
            prefix_cache_hit_rate=hit_rate,
            prompt_tps=self.rate(PROMPT_TOKENS), generation_tps=self.rate(GENERATION_TOKENS),
            prompt_computed_tps=self.rate(PROMPT_BY_SOURCE, source="local_compute"),
            prompt_cached_tps=self.rate(PROMPT_BY_SOURCE, source="local_cache_hit"),
            prompt_transferred_tps=self.rate(PROMPT_BY_SOURCE, source="external_kv_transfer"),
            requests_per_s=requests_per_s,
            finished=finished, preemptions=preempt, preemptions_total=exp.total(PREEMPTIONS),
            ttft=latency[0], tpot=latency[1], itl=latency[2], e2e=latency[3], queue=latency[4],
            latency_since=since, latency_until=until,
            engines=per_engine,
            kv_transfer=self._kv_transfer(hist_sc, exp),
            disagg=self._disagg(hist_sc, exp) if role == "decode" else None,
            unavailable=tuple(na),
        )
        return figures

    def _latency(self, hist_sc: list[Scrape]) -> tuple[list[Quantiles | None], float | None, float | None]:
        """The latency quantiles (``LATENCY``'s order) over the run that was marked, else over the rolling window;
        and what they cover (since, until)."""
        run = self._run
        if run is not None:
            return ([quantiles(run.histogram(name)) for name in LATENCY], run.base_ts,
                    run.last_ts if run.frozen else None)
        return [quantiles(histogram_delta(hist_sc, name)) for name in LATENCY], None, None

    def _kv_transfer(self, sc: list[Scrape], exp: Exposition) -> KvTransferFigures | None:
        if exp.family(NIXL_XFER_TIME) is None and not any(exp.samples(NIXL_XFER_TIME + "_count")):
            return None
        if len(sc) < 2:
            return None
        span = sc[-1].ts - sc[0].ts
        xfer = histogram_delta(sc, NIXL_XFER_TIME)
        size = histogram_delta(sc, NIXL_BYTES)
        transfers = xfer.count if xfer is not None else 0.0
        nbytes = size.sum if size is not None else 0.0
        return KvTransferFigures(
            transfers=transfers, transfers_per_s=transfers / span if span > 0 else None,
            bytes=nbytes, bytes_per_s=nbytes / span if span > 0 else None,
            xfer_time_mean_s=(xfer.sum / xfer.count) if xfer is not None and xfer.count > 0 else None,
            xfer_time_p90_s=xfer.quantile(0.9) if xfer is not None else None,
            failed_transfers=counter_delta(sc, NIXL_FAILED_TRANSFERS) or 0.0,
            failed_notifications=counter_delta(sc, NIXL_FAILED_NOTIFICATIONS) or 0.0,
            expired_requests=counter_delta(sc, NIXL_EXPIRED) or 0.0,
            failed_transfers_total=exp.total(NIXL_FAILED_TRANSFERS),
            xfer_time_s=xfer.sum if xfer is not None else 0.0, window_s=span,
        )

    def _disagg(self, sc: list[Scrape], exp: Exposition) -> DisaggProof | None:
        if not any(exp.samples(PROMPT_BY_SOURCE)):
            return None
        if len(sc) < 2:
            return None
        external = counter_delta(sc, PROMPT_BY_SOURCE, source="external_kv_transfer") or 0.0
        local = counter_delta(sc, PROMPT_BY_SOURCE, source="local_compute") or 0.0
        cached = counter_delta(sc, PROMPT_BY_SOURCE, source="local_cache_hit") or 0.0
        return disagg_proof(external, local, cached, self.min_external_share)
