"""How KV travelled in a disaggregated run, and where its TTFT went.

- **Transfer figures**: the decode servers' NixlConnector counters (``vllm:nixl_xfer_time_seconds``,
  ``vllm:nixl_bytes_transferred``, ``vllm:nixl_num_failed_*``), deltas over the run: transfers, bytes, seconds
  spent transferring, mean size and time, and the throughput vLLM's own ``KV Transfer metrics`` log line states
  (``Throughput (MB/s)`` = MiB moved / seconds spent transferring: its "MB" are 2^20 bytes). Read from the
  histograms' ``_sum``/``_count`` (p50/p99 too where the buckets are there).
- **TTFT breakdown** (mean ms, p50/p99 where histograms allow): client → proxy (what the client saw beyond the
  proxy's two upstream legs), prefill (the proxy's prefill round trip), KV transfer (NIXL's time per transfer) and
  decode first token (the proxy's decode first byte less the transfer: the decode server's queue and its first
  step). Shares are of the client's mean TTFT.
- **Slow path**: a transfer throughput far below the GPU-to-GPU link between the prefill and decode GPUs (NVLink
  from the host's topology, else PCIe; two servers on one GPU copy through its memory) means UCX found no direct
  path and went through host memory or TCP: the run is flagged ``kv-slow-path`` and left out of recommendations.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tui.core.plan.gpuspecs import spec_for_name
from tui.core.plan.hostfacts import HostFacts
from tui.core.telemetry import prom
from tui.core.telemetry.derive import NIXL_BYTES, NIXL_FAILED_NOTIFICATIONS, NIXL_FAILED_TRANSFERS, NIXL_XFER_TIME
from tui.core.telemetry.kvrate import KvRate
from tui.core.telemetry.prom import Bucket, Histogram

MIB = float(1 << 20)
PROXY_PREFILL = "disagg_proxy_prefill_seconds"
PROXY_FIRST_BYTE = "disagg_proxy_decode_first_byte_seconds"
#: a transfer under this share of the GPU-to-GPU link's bandwidth did not go GPU to GPU (NIXL over NVLink or CUDA
#: IPC reaches tens of percent of it; the real H200's TCP fallback gave 0.003 %)
SLOW_SHARE = 0.05
#: PCIe Gen4/Gen5 x16, one direction, what a device-to-device copy without NVLink gets (bytes/s)
PCIE_BANDWIDTH = 25e9
#: two processes on one GPU copy through its memory: at least this (bytes/s), read and write
SAME_GPU_BANDWIDTH = 1e12
_LOG_LINE = re.compile(
    r"KV Transfer metrics: Num successful transfers=(?P<n>\d+), Avg xfer time \(ms\)=(?P<ms>[\d.]+), .*?"
    r"Avg MB per transfer=(?P<mb>[\d.]+), Throughput \(MB/s\)=(?P<mbps>[\d.]+)")


@dataclass(frozen=True, slots=True)
class HistTotal:
    """A histogram's cumulative totals over every engine of a server (buckets when the page has them)."""

    sum: float
    count: float
    buckets: tuple[tuple[float, float], ...] = ()  # (le, cumulative count)


@dataclass(frozen=True, slots=True)
class NixlCounters:
    """A decode server's cumulative NIXL counters at one moment (summed over engines)."""

    xfer: HistTotal
    bytes: HistTotal
    failed_transfers: float = 0.0
    failed_notifications: float = 0.0


def _hist_total(exp: prom.Exposition, name: str) -> HistTotal | None:
    count = exp.total(name + "_count")
    if count is None:
        return None
    h = exp.histogram(name)
    buckets = tuple((b.le, b.count) for b in h.buckets) if h is not None else ()
    return HistTotal(exp.total(name + "_sum") or 0.0, count, buckets)


def nixl_counters(text: str) -> NixlCounters | None:
    """The NIXL counters of a ``/metrics`` page; None when the server has no NixlConnector."""
    exp = prom.parse(text, keep=("vllm:nixl_",))
    xfer, size = _hist_total(exp, NIXL_XFER_TIME), _hist_total(exp, NIXL_BYTES)
    if xfer is None or size is None:
        return None
    return NixlCounters(xfer, size, exp.total(NIXL_FAILED_TRANSFERS) or 0.0,
                        exp.total(NIXL_FAILED_NOTIFICATIONS) or 0.0)


def proxy_histograms(text: str) -> dict[str, HistTotal]:
    """The proxy's prefill and decode-first-byte histograms (summed over servers) of a ``/metrics`` page."""
    exp = prom.parse(text, keep=("disagg_proxy_",))
    out = {}
    for name in (PROXY_PREFILL, PROXY_FIRST_BYTE):
        h = _hist_total(exp, name)
        if h is not None:
            out[name] = h
    return out


def _delta(a: HistTotal, b: HistTotal | None) -> HistTotal:
    if b is None or a.count < b.count:  # no start, or a restarted server: the end counts from zero
        return a
    before = dict(b.buckets)
    return HistTotal(a.sum - b.sum, a.count - b.count,
                     tuple((le, c - before.get(le, 0.0)) for le, c in a.buckets) if before else a.buckets)


def _quantile(h: HistTotal, q: float) -> float | None:
    """A quantile from the buckets; None when it lies above the highest finite bound (vLLM's NIXL time buckets
    end at 5 s: a 24 s transfer would read "5,000 ms")."""
    if not h.buckets or h.count <= 0:
        return None
    finite = [c for le, c in h.buckets if le != float("inf")]
    if not finite or finite[-1] < q * h.count:
        return None
    return Histogram(tuple(Bucket(le, c) for le, c in h.buckets), h.sum, h.count).quantile(q)


@dataclass(frozen=True, slots=True)
class KvTransferRun:
    """The NIXL transfers of a run, over every decode server. ``mib_per_s`` is the rate per transfer, vLLM's
    ``Throughput (MB/s)`` (MiB per second of transfer time); ``gb_per_s`` the same in 10^9 bytes per second;
    ``moved_mib_per_s`` the MiB moved per wall second of the run (:mod:`tui.core.telemetry.kvrate`: the
    dashboard's rate is the same two figures)."""

    transfers: float
    bytes: float
    xfer_time_s: float
    failed_transfers: float
    failed_notifications: float
    servers: tuple[str, ...]
    xfer_p50_s: float | None = None
    xfer_p99_s: float | None = None
    wall_s: float | None = None  # the run's wall seconds

    @property
    def rate(self) -> KvRate:
        return KvRate(self.bytes, self.xfer_time_s, self.wall_s)

    @property
    def moved_mib_per_s(self) -> float | None:
        bps = self.rate.moved_bps
        return None if bps is None else bps / MIB

    @property
    def mean_xfer_s(self) -> float | None:
        return self.xfer_time_s / self.transfers if self.transfers > 0 else None

    @property
    def mean_mib(self) -> float | None:
        return self.bytes / MIB / self.transfers if self.transfers > 0 else None

    @property
    def mib_per_s(self) -> float | None:
        return self.bytes / MIB / self.xfer_time_s if self.xfer_time_s > 0 else None

    @property
    def gb_per_s(self) -> float | None:
        return self.bytes / 1e9 / self.xfer_time_s if self.xfer_time_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(mean_xfer_ms=_ms(self.mean_xfer_s), mean_mib=self.mean_mib, mib_per_s=self.mib_per_s,
                 gb_per_s=self.gb_per_s, moved_mib_per_s=self.moved_mib_per_s)
        return d

    def line(self) -> str:
        if self.transfers <= 0:
            return "KV transfer: no NIXL transfer during the run"
        return (f"KV transfer: {self.transfers:,.0f} transfers, {self.bytes / MIB:,.1f} MiB in "
                f"{self.xfer_time_s:,.2f} s of transfer time (mean {self.mean_xfer_s or 0.0:.3f} s, "
                f"{self.mean_mib or 0.0:,.1f} MiB each): {self.rate.describe()}"
                + (f"; {self.failed_transfers:.0f} FAILED" if self.failed_transfers else ""))


def kv_transfer_run(before: Mapping[str, NixlCounters | None], after: Mapping[str, NixlCounters | None],
                    wall_s: float | None = None) -> KvTransferRun | None:
    """Deltas over the run (``wall_s`` long), summed over the decode servers that export NIXL counters (None if
    none does)."""
    n = size = secs = failed = notif = 0.0
    servers = []
    xfer_hists: list[HistTotal] = []
    for url, a in after.items():
        if a is None:
            continue
        b = before.get(url)
        x = _delta(a.xfer, b.xfer if b else None)
        nb = _delta(a.bytes, b.bytes if b else None)
        servers.append(url)
        n += x.count
        secs += x.sum
        size += nb.sum
        failed += a.failed_transfers - (b.failed_transfers if b else 0.0)
        notif += a.failed_notifications - (b.failed_notifications if b else 0.0)
        xfer_hists.append(x)
    if not servers:
        return None
    merged = xfer_hists[0] if len(xfer_hists) == 1 else None  # quantiles of one server's buckets only
    return KvTransferRun(n, size, secs, max(failed, 0.0), max(notif, 0.0), tuple(servers),
                         xfer_p50_s=_quantile(merged, 0.5) if merged else None,
                         xfer_p99_s=_quantile(merged, 0.99) if merged else None, wall_s=wall_s)


@dataclass(frozen=True, slots=True)
class LoggedTransfers:
    """One decode log ``KV Transfer metrics`` line (vLLM's figures for its last ~10 s logging interval)."""

    transfers: int
    mean_ms: float
    mean_mb: float
    mb_per_s: float


def logged_transfers(lines: Iterable[str]) -> list[LoggedTransfers]:
    out = []
    for line in lines:
        m = _LOG_LINE.search(line)
        if m:
            out.append(LoggedTransfers(int(m["n"]), float(m["ms"]), float(m["mb"]), float(m["mbps"])))
    return out


def from_logged(items: Sequence[LoggedTransfers], server: str = "log") -> KvTransferRun | None:
    """Transfer figures from log lines, for a run whose counters were not scraped (an imported or old run)."""
    if not items:
        return None
    n = sum(i.transfers for i in items)
    return KvTransferRun(float(n), sum(i.transfers * i.mean_mb for i in items) * MIB,
                         sum(i.transfers * i.mean_ms for i in items) / 1000.0, 0.0, 0.0, (server,))


@dataclass(frozen=True, slots=True)
class Part:
    """One leg of the TTFT: mean (ms), p50/p99 where a histogram gave them, and its share of the mean TTFT."""

    mean_ms: float | None
    p50_ms: float | None = None
    p99_ms: float | None = None
    share: float | None = None


@dataclass(frozen=True, slots=True)
class TtftBreakdown:
    """Where a disaggregated run's time to first token went. Legs that could not be measured are None."""

    ttft_mean_ms: float
    client_proxy: Part
    prefill: Part
    kv_transfer: Part
    decode_first_token: Part

    @property
    def transfer_share(self) -> float | None:
        return self.kv_transfer.share

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["transfer_share"] = self.transfer_share
        return d

    def line(self) -> str:
        def leg(name: str, p: Part) -> str:
            if p.mean_ms is None:
                return f"{name} ?"
            extra = f", p50 {p.p50_ms:,.0f} p99 {p.p99_ms:,.0f}" if p.p50_ms is not None and p.p99_ms is not None \
                else ""
            share = f" ({p.share:.0%})" if p.share is not None else ""
            return f"{name} {p.mean_ms:,.0f} ms{share}{extra}"

        return (f"TTFT breakdown (mean {self.ttft_mean_ms:,.0f} ms): " + "; ".join((
            leg("client→proxy", self.client_proxy), leg("prefill", self.prefill),
            leg("KV transfer", self.kv_transfer), leg("decode first token", self.decode_first_token))))


def _ms(s: float | None) -> float | None:
    return None if s is None else s * 1000.0


def ttft_breakdown(ttft_mean_ms: float, kv: KvTransferRun | None,
                   proxy_before: Mapping[str, HistTotal] | None, proxy_after: Mapping[str, HistTotal] | None
                   ) -> TtftBreakdown:
    """The breakdown of a run's mean TTFT from the proxy's histograms (deltas over the run) and the transfer
    figures. Without the proxy's figures only the transfer's share is known."""
    legs: dict[str, HistTotal] = {}
    for name in (PROXY_PREFILL, PROXY_FIRST_BYTE):
        a = (proxy_after or {}).get(name)
        if a is not None:
            legs[name] = _delta(a, (proxy_before or {}).get(name))

    def part(h: HistTotal | None) -> Part:
        if h is None or h.count <= 0:
            return Part(None)
        return Part(h.sum / h.count * 1000.0, _ms(_quantile(h, 0.5)), _ms(_quantile(h, 0.99)))

    def share(ms: float | None) -> float | None:
        return ms / ttft_mean_ms if ms is not None and ttft_mean_ms > 0 else None

    prefill = part(legs.get(PROXY_PREFILL))
    first_byte = part(legs.get(PROXY_FIRST_BYTE))
    xfer_ms = _ms(kv.mean_xfer_s) if kv is not None else None
    kv_part = Part(xfer_ms, _ms(kv.xfer_p50_s) if kv else None, _ms(kv.xfer_p99_s) if kv else None, share(xfer_ms))
    decode_ms = None
    if first_byte.mean_ms is not None:
        decode_ms = max(first_byte.mean_ms - (xfer_ms or 0.0), 0.0)
    client_ms = None
    if prefill.mean_ms is not None and first_byte.mean_ms is not None:
        client_ms = max(ttft_mean_ms - prefill.mean_ms - first_byte.mean_ms, 0.0)
    return TtftBreakdown(
        ttft_mean_ms=ttft_mean_ms,
        client_proxy=Part(client_ms, share=share(client_ms)),
        prefill=Part(prefill.mean_ms, prefill.p50_ms, prefill.p99_ms, share(prefill.mean_ms)),
        kv_transfer=kv_part,
        decode_first_token=Part(decode_ms, share=share(decode_ms)),
    )


@dataclass(frozen=True, slots=True)
class LinkBandwidth:
    """The GPU-to-GPU bandwidth between a layout's prefill and decode GPUs (bytes/s, one direction)."""

    bytes_per_s: float
    kind: str  # nvlink | pcie | same-gpu

    def describe(self) -> str:
        return f"{self.kind} ~{self.bytes_per_s / 1e9:,.0f} GB/s"


def link_bandwidth(facts: HostFacts, prefill_gpus: Sequence[int], decode_gpus: Sequence[int]) -> LinkBandwidth | None:
    """What KV could move at between the prefill and decode GPUs: the same GPU (its memory), NVLink where the
    topology matrix says ``NV#`` for every pair, else PCIe. None when the GPUs are not known."""
    if not prefill_gpus or not decode_gpus:
        return None
    if set(prefill_gpus) & set(decode_gpus):
        return LinkBandwidth(SAME_GPU_BANDWIDTH, "same-gpu")
    nv = True
    for p in prefill_gpus:
        for d in decode_gpus:
            try:
                cell = facts.nvlink[p][d]
            except IndexError:
                cell = ""
            nv = nv and cell.startswith("NV")
    if nv:
        g = facts.gpu(prefill_gpus[0])
        spec = spec_for_name(g.name) if g is not None else None
        return LinkBandwidth(spec.nvlink_bandwidth if spec else 300e9, "nvlink")
    return LinkBandwidth(PCIE_BANDWIDTH, "pcie")


def slow_path(kv: KvTransferRun | None, link: LinkBandwidth | None) -> bool:
    """A run whose KV moved far below what the link between its GPUs carries."""
    if kv is None or link is None or kv.gb_per_s is None or kv.transfers <= 0:
        return False
    return kv.gb_per_s * 1e9 < SLOW_SHARE * link.bytes_per_s
