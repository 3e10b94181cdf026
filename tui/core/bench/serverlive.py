"""Live figures of a run whose client is not ours (``vllm bench serve``), read from the servers' ``/metrics``.

vllm bench prints only a request count while it runs. The servers count everything else: generated tokens
(``vllm:generation_tokens_total``, whose rate is the output TPS) and the latency histograms
(``vllm:time_to_first_token_seconds``, ``vllm:request_time_per_output_token_seconds``,
``vllm:inter_token_latency_seconds``), whose bucket deltas over a window give p50/p99 the way Prometheus'
``histogram_quantile`` does. These are the server's view: its TTFT starts when the request reaches the engine, not
when the client sent it, and a quantile is interpolated inside vLLM's buckets, so ticks built here say
``source="server"``. In a 1P1D layout the decode servers give TPS, TPOT and ITL; neither server sees the client's
TTFT (prefill and KV transfer happen across two servers), so it is left out there.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import httpx

from tui.core.bench import serverside
from tui.core.telemetry import prom
from tui.core.telemetry.deltas import merge_histograms
from tui.core.telemetry.derive import (
    GENERATION_TOKENS,
    ITL,
    RUNNING,
    TPOT,
    TTFT,
    WAITING,
    MetricsWindow,
    quantiles,
)

_KEEP = (GENERATION_TOKENS, RUNNING, WAITING, TTFT, TPOT, ITL)


class ServerLive:
    """Successive scrapes of the servers a run drives, and the run's live figures derived from them."""

    def __init__(self, server_urls: Sequence[str], decode_urls: Sequence[str] = (), *, rate_window_s: float = 2.0,
                 window_s: float = 10.0) -> None:
        self.urls = list(dict.fromkeys(server_urls))
        # where tokens are generated: the decode servers of a 1P1D layout (its prefill servers make one token each)
        self.token_urls = list(decode_urls) or self.urls
        self.disaggregated = bool(decode_urls)
        self.windows = {u: MetricsWindow(window_s=window_s, rate_window_s=rate_window_s) for u in self.urls}
        self.answered: dict[str, bool] = dict.fromkeys(self.urls, False)

    async def poll(self, client: httpx.AsyncClient) -> None:
        """One scrape of every server, all at once. A server that does not answer drops out of the figures until
        it answers again (its last figures would otherwise stay frozen in them)."""
        pages = await serverside.scrape_metrics(self.urls, client=client)
        now = time.monotonic()
        for url, text in pages.items():
            self.answered[url] = text is not None
            if text is not None:
                self.windows[url].add(now, prom.parse(text, keep=_KEEP))

    def _live(self, urls: Sequence[str]) -> list[MetricsWindow]:
        return [self.windows[u] for u in urls if self.answered[u]]

    def queued(self) -> int | None:
        """Requests running or waiting at the servers now (the newest scrapes). Through the 1P1D proxy a request is
        at the prefill server, then at decode (the proxy asks decode once prefill has answered): the sum counts it
        once."""
        total: float | None = None
        for window in self._live(self.urls):
            exp = window.newest()
            if exp is None:
                continue
            for name in (RUNNING, WAITING):
                v = exp.total(name)
                if v is not None:
                    total = (total or 0.0) + v
        return None if total is None else int(total)

    def output_tps(self) -> float | None:
        rates = [r for w in self._live(self.token_urls) if (r := w.rate(GENERATION_TOKENS)) is not None]
        return sum(rates) if rates else None

    def quantiles_ms(self, name: str) -> tuple[float | None, float | None]:
        """p50 and p99 of ``name`` over the window, in ms, across the servers that see it."""
        urls = self.token_urls if name != TTFT else ([] if self.disaggregated else self.urls)
        q = quantiles(merge_histograms(w.histogram(name) for w in self._live(urls)))
        if q is None:
            return None, None
        return (None if q.p50 is None else q.p50 * 1000), (None if q.p99 is None else q.p99 * 1000)
