"""The proxy's own Prometheus metrics: its counters and latency histograms, never vLLM's.

Every family is named ``disagg_proxy_*`` and its help text says it is the disagg-tui proxy's, so a scraper that
also reads the vLLM servers cannot mistake one for the other. Written by hand (a few counters and histograms) so
the proxy needs no client library; the exposition follows the Prometheus text format 0.0.4.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable

from tui.core.proxy.upstream import Upstream

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: upstream latencies: vLLM 0.24's own TTFT buckets (shared/VLLM-0.24.md §4), so the figures line up with its
UPSTREAM_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                                       5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
#: the proxy's own work per request (parse, rewrite, pick): expected well under a millisecond
INTERNAL_BUCKETS: tuple[float, ...] = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                       0.1)


class Histogram:
    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: str) -> Iterable[str]:
        sep = "," if labels else ""
        running = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            yield f'{name}_bucket{{{labels}{sep}le="{_num(bound)}"}} {running}'
        yield f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.count}'
        braces = f"{{{labels}}}" if labels else ""
        yield f"{name}_sum{braces} {_num(self.sum)}"
        yield f"{name}_count{braces} {self.count}"


def _num(value: float) -> str:
    return repr(float(value)) if value != int(value) else f"{value:.1f}"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class ProxyMetrics:
    """Counters and histograms of one proxy process (single event loop: no locking needed)."""

    def __init__(self, servers: tuple[Upstream, ...]) -> None:
        self.servers = servers
        self.requests: dict[tuple[str, int], int] = defaultdict(int)  # (route, status) -> count
        self.upstream_errors: dict[tuple[str, str, str], int] = defaultdict(int)  # (role, url, reason)
        self.client_disconnects = 0
        self.kv_params_missing = 0
        self.in_flight = 0
        self.prefill = {s.url: Histogram(UPSTREAM_BUCKETS) for s in servers if s.role == "prefill"}
        self.decode_first_byte = {s.url: Histogram(UPSTREAM_BUCKETS) for s in servers if s.role == "decode"}
        self.decode_total = {s.url: Histogram(UPSTREAM_BUCKETS) for s in servers if s.role == "decode"}
        self.internal = Histogram(INTERNAL_BUCKETS)

    def render(self) -> str:
        out: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            out.append(f"# HELP {name} disagg-tui proxy (not vLLM): {help_text}")
            out.append(f"# TYPE {name} {kind}")

        family("disagg_proxy_requests_total", "counter", "requests answered, by route and HTTP status")
        for (route, code), n in sorted(self.requests.items()):
            out.append(f'disagg_proxy_requests_total{{route="{_esc(route)}",code="{code}"}} {n}')
        family("disagg_proxy_requests_in_flight", "gauge", "completion requests being served now")
        out.append(f"disagg_proxy_requests_in_flight {self.in_flight}")
        family("disagg_proxy_upstream_errors_total", "counter",
               "failed requests to a vLLM server, by role, server and reason")
        for (role, url, reason), n in sorted(self.upstream_errors.items()):
            out.append(f'disagg_proxy_upstream_errors_total{{role="{role}",server="{_esc(url)}",'
                       f'reason="{reason}"}} {n}')
        family("disagg_proxy_client_disconnects_total", "counter",
               "clients that went away before their answer was complete (the upstream request was cancelled)")
        out.append(f"disagg_proxy_client_disconnects_total {self.client_disconnects}")
        family("disagg_proxy_kv_transfer_params_missing_total", "counter",
               "prefill answers without kv_transfer_params (decode then computed the prompt itself)")
        out.append(f"disagg_proxy_kv_transfer_params_missing_total {self.kv_params_missing}")
        family("disagg_proxy_upstream_outstanding", "gauge", "requests in flight to each vLLM server")
        for s in self.servers:
            out.append(f'disagg_proxy_upstream_outstanding{{role="{s.role}",server="{_esc(s.url)}"}} {s.outstanding}')
        family("disagg_proxy_upstream_requests_total", "counter", "requests sent to each vLLM server")
        for s in self.servers:
            out.append(f'disagg_proxy_upstream_requests_total{{role="{s.role}",server="{_esc(s.url)}"}} {s.picked}')
        for name, per_server, help_text in (
            ("disagg_proxy_prefill_seconds", self.prefill, "prefill request round trip, send to full answer read"),
            ("disagg_proxy_decode_first_byte_seconds", self.decode_first_byte,
             "decode request, send to the first byte of its body"),
            ("disagg_proxy_decode_seconds", self.decode_total, "decode request, send to the last byte relayed"),
        ):
            family(name, "histogram", help_text)
            for url, h in per_server.items():
                out.extend(h.lines(name, f'server="{_esc(url)}"'))
        family("disagg_proxy_internal_seconds", "histogram",
               "time the proxy itself spent on a completion request between reading its body and sending it to decode, "
               "the prefill round trip excluded")
        out.extend(self.internal.lines("disagg_proxy_internal_seconds", ""))
        return "\n".join(out) + "\n"
