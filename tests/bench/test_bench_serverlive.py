"""Live run figures from the servers' /metrics (what a vllm bench run shows): windows, merged histograms."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tui.core.bench.serverlive import ServerLive
from tui.core.telemetry.deltas import merge_histograms
from tui.core.telemetry.derive import ITL, TPOT, TTFT
from tui.core.telemetry.prom import Bucket, Histogram


def _h(counts: list[tuple[float, float]], total_sum: float) -> Histogram:
    return Histogram(tuple(Bucket(le, c) for le, c in counts), total_sum, counts[-1][1])


def test_merged_histograms_add_bucket_by_bucket() -> None:
    inf = float("inf")
    a = _h([(0.1, 2), (0.5, 6), (inf, 8)], 2.0)
    b = _h([(0.1, 0), (0.25, 4), (inf, 4)], 0.8)  # a bound a lacks: a counts its lower bucket there
    m = merge_histograms([a, None, b])
    assert m is not None
    assert [(x.le, x.count) for x in m.buckets] == [(0.1, 2), (0.25, 6), (0.5, 10), (inf, 12)]
    assert m.sum == 2.8 and m.count == 12
    assert merge_histograms([None]) is None and merge_histograms([a]) is a
    # the median of the merge sits in the bucket holding rank 6: (0.1, 0.25]
    q = m.quantile(0.5)
    assert q is not None and 0.1 < q <= 0.25


async def test_live_figures_of_a_simulated_server_under_load(sims) -> None:
    """Against the simulated vLLM (real histograms on /metrics): token rate, TTFT/TPOT/ITL quantiles, queue."""
    s = sims.start(gpus=1)
    await asyncio.to_thread(s.wait_ready)
    live = ServerLive([s.url])

    async def one(c: httpx.AsyncClient) -> None:
        body = {"model": "dummy-qwen3-8b", "prompt": [7] * 64, "max_tokens": 120, "ignore_eos": True, "stream": True}
        async with c.stream("POST", s.url + "/v1/completions", json=body) as r:
            async for _ in r.aiter_lines():
                pass

    async with httpx.AsyncClient(timeout=30) as c:
        await live.poll(c)
        load = asyncio.gather(*(one(c) for _ in range(8)))
        queued = []
        for _ in range(30):
            await asyncio.sleep(0.1)
            await live.poll(c)
            queued.append(live.queued())
            if load.done():
                break
        await load
        await live.poll(c)
    assert live.answered[s.url]
    assert max(q or 0 for q in queued) >= 1 and live.queued() == 0
    tps = live.output_tps()
    assert tps is not None and tps > 0
    for name in (TTFT, TPOT, ITL):
        p50, p99 = live.quantiles_ms(name)
        assert p50 is not None and p99 is not None and 0 < p50 <= p99, name


async def test_a_server_that_does_not_answer_leaves_the_figures_empty() -> None:
    from tests.helpers import free_port

    live = ServerLive([f"http://127.0.0.1:{free_port()}"], [])
    async with httpx.AsyncClient(timeout=1) as c:
        await live.poll(c)
    assert live.output_tps() is None and live.queued() is None
    assert live.quantiles_ms(TTFT) == (None, None)
    assert not any(live.answered.values())


def test_1p1d_takes_tokens_from_decode_and_no_ttft() -> None:
    """Both servers have TTFT and TPOT histograms: in a 1P1D layout TPOT and tokens come from decode alone, and no
    TTFT is shown (neither server sees the client's)."""
    from tui.core.telemetry.prom import parse

    def page(tokens: float, ttft_fast: float, tpot_fast: float) -> str:
        out = [f'vllm:generation_tokens_total{{engine="0"}} {tokens}']
        for name, fast in (("vllm:time_to_first_token_seconds", ttft_fast),
                           ("vllm:request_time_per_output_token_seconds", tpot_fast)):
            out += [f'{name}_bucket{{engine="0",le="0.01"}} {fast}', f'{name}_bucket{{engine="0",le="1.0"}} {fast}',
                    f'{name}_bucket{{engine="0",le="+Inf"}} {fast}', f'{name}_count{{engine="0"}} {fast}',
                    f'{name}_sum{{engine="0"}} {fast * 0.005}']
        return "\n".join(out) + "\n"

    live = ServerLive(["http://p", "http://d"], ["http://d"])
    assert live.token_urls == ["http://d"] and live.disaggregated
    for url, tokens in (("http://p", 10.0), ("http://d", 1000.0)):
        live.windows[url].add(1.0, parse(page(0.0, 0.0, 0.0)))
        live.windows[url].add(2.0, parse(page(tokens, 5.0, 5.0)))
        live.answered[url] = True
    assert live.quantiles_ms(TTFT) == (None, None)
    p50, _ = live.quantiles_ms(TPOT)
    assert p50 is not None and p50 <= 10.0
    assert live.output_tps() == pytest.approx(1000.0)  # decode's rate alone (prefill's 10 tokens left out)
    single = ServerLive(["http://d"])
    single.windows["http://d"] = live.windows["http://d"]
    single.answered["http://d"] = True
    assert single.quantiles_ms(TTFT)[0] is not None  # the same server, not disaggregated: its TTFT is shown


async def test_a_server_that_stops_answering_drops_out_of_the_figures(stub) -> None:
    """Its last figures would otherwise stay frozen in the run's live line."""
    url, srv = await stub(mode="paced", ms_per_token=5.0)
    live = ServerLive([url])
    async with httpx.AsyncClient(timeout=5) as c:
        await live.poll(c)
        await c.post(url + "/v1/completions", json={"prompt": [1] * 8, "max_tokens": 20})
        await live.poll(c)
        assert live.output_tps() and live.queued() == 0
        srv.close()  # no new connections (a kept-alive one would still be served)
    async with httpx.AsyncClient(timeout=5) as fresh:
        await live.poll(fresh)
    assert live.output_tps() is None and live.queued() is None and not live.answered[url]
