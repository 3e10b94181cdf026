"""Live figures under speculative decoding: one SSE chunk carries several tokens (MTP, n-gram), as vLLM sends them.

On the H200 with MTP the live line said 6,620 tok/s and TPOT p50 19.5 ms while the stored summary said
15,575 tok/s and 7.1 ms: the live path counted choice chunks as tokens. The live figures now follow
``vllm bench serve``'s definitions (output tokens from the usage, TPOT = (E2EL − TTFT)/(tokens − 1), ITL per chunk),
and a request that ended counts in them exactly as in the summary.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import AsyncIterator

import pytest

from tui.core.bench.events import BenchTick
from tui.core.bench.live import LiveWindow
from tui.core.bench.runner import BenchOptions, BenchTarget, run_bench
from tui.core.models import Workload

TOKENS_PER_CHUNK = 3  # every decode chunk after the first token carries 3 (an MTP step with 2 drafts accepted)
GAP_S = 0.012  # one chunk every 12 ms: TPOT 4 ms, ITL 12 ms


async def _spec_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Just enough of vLLM 0.24's /v1/completions: chunked SSE, the first chunk one token (the prefill's), then
    ``TOKENS_PER_CHUNK`` tokens per chunk, the usage chunk and ``[DONE]`` (keep-alive between requests)."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = json.loads(await reader.readexactly(length)) if length else {}
            if not head.startswith(b"POST /v1/completions"):
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                continue
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            n_out = int(body["max_tokens"])
            sent = 0

            def event(obj: dict[str, object]) -> None:
                data = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))

            while sent < n_out:
                await asyncio.sleep(0.02 if sent == 0 else GAP_S)
                k = 1 if sent == 0 else min(TOKENS_PER_CHUNK, n_out - sent)
                sent += k
                event({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
                       "choices": [{"index": 0, "text": " tok" * k, "logprobs": None,
                                    "finish_reason": "length" if sent == n_out else None, "stop_reason": None}]})
                await writer.drain()
            event({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [],
                   "usage": {"prompt_tokens": 16, "total_tokens": 16 + n_out, "completion_tokens": n_out}})
            data = b"data: [DONE]\n\n"
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@pytest.fixture
async def spec_url() -> AsyncIterator[str]:
    server = await asyncio.start_server(_spec_server, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.close()


async def test_live_figures_count_tokens_not_chunks_under_multi_token_chunks(spec_url: str) -> None:
    # 61 tokens: the first chunk 1, then 20 chunks of 3; 8 streams at a time, 48 requests in 6 waves
    wl = Workload(name="spec", input_len=16, output_len=61, num_prompts=48, max_concurrency=8)
    ticks: list[BenchTick] = []
    run = await run_bench(BenchOptions(workload=wl, model="m", prompt_format="ids", warmup=0, tick_s=0.1),
                          BenchTarget(endpoint=spec_url), on_tick=ticks.append)
    s = run.summary
    assert run.meta.status == "complete" and s["completed"] == 48
    assert s["total_output_tokens"] == 48 * 61
    assert s["median_tpot_ms"] == pytest.approx(GAP_S * 1000 / TOKENS_PER_CHUNK, rel=0.3)
    run_ticks = [t for t in ticks if t.phase == "run"]
    # once every request ended, the live count of tokens is the summary's
    assert run_ticks[-1].output_tokens == s["total_output_tokens"]
    # steady state (past the first wave's end, before the last wave's): the live rate is the summary's
    steady = [t for t in run_ticks if 0.4 * s["duration"] < t.elapsed_s < 0.85 * s["duration"]]
    assert steady
    live_tps = statistics.median(t.output_tps for t in steady if t.output_tps is not None)
    assert live_tps == pytest.approx(s["output_throughput"], rel=0.2)
    live_tpot = statistics.median(t.tpot_p50_ms for t in steady if t.tpot_p50_ms is not None)
    assert live_tpot == pytest.approx(s["median_tpot_ms"], rel=0.2)
    # ITL stays per chunk, as vllm bench's (several tokens in one chunk are one gap)
    live_itl = statistics.median(t.itl_p50_ms for t in steady if t.itl_p50_ms is not None)
    assert live_itl == pytest.approx(s["median_itl_ms"], rel=0.2)
    # the last window holds only requests that ended: their TPOTs are the records' own
    last = run_ticks[-1]
    assert last.tpot_p50_ms is not None
    assert min(r.tpot for r in run.records() if r.tpot) * 1000 <= last.tpot_p50_ms
    assert last.tpot_p50_ms <= max(r.tpot for r in run.records() if r.tpot) * 1000


def test_in_flight_chunks_are_scaled_by_the_ended_requests_tokens_per_chunk() -> None:
    live = LiveWindow(run_id="r", total=10, window_s=10.0)
    base = {"phase": "run", "done": 0, "failed": 0}
    # two streams, 10 chunks each, nothing ended: one token per chunk is all that is known (no warm-up)
    t1 = live.update({**base, "el": 1.0, "chunks": 20, "n_other": 2, "req": [[0, 0.09, 9], [1, 0.09, 9]]})
    assert t1.output_tokens == 20
    # request 0 ends: 31 tokens in 11 chunks (3 per chunk after the first), TPOT 10 ms exactly; request 1 streams
    t2 = live.update({**base, "el": 2.0, "chunks": 31, "tok_ok": 31, "ch_ok": 11, "n_ok": 1, "n_other": 1,
                      "req": [[1, 0.1, 10]], "ended": [[0, 0.010]]})
    # in flight: 1 + 19 × 3 tokens for request 1's 20 chunks; request 0 its usage's 31
    assert t2.output_tokens == 31 + 1 + 19 * 3
    assert t2.output_tps == pytest.approx(((31 + 58) - (2 + 18 * 3)) / 1.0)
    # request 0: its exact TPOT (its partial of the first tick is replaced); request 1: 19 gaps of 10 ms, 3 tokens each
    assert t2.tpot_p50_ms == pytest.approx((10.0 + 10.0 / 3) / 2)
    # a warm-up's tokens per chunk stand in until a request of the run ends
    live = LiveWindow(run_id="r", total=10)
    t = live.update({**base, "el": 0.5, "chunks": 10, "n_other": 1, "prior": 2.0, "req": [[0, 0.09, 9]]})
    assert t.output_tokens == 1 + 9 * 2


async def test_live_figures_against_the_simulated_server_with_mtp(sims) -> None:
    """The simulated server streams an MTP step's accepted tokens in one chunk, as vLLM does."""
    server = sims.start("--speculative-config", '{"method":"mtp","num_speculative_tokens":3}', startup_s=0.1,
                        env={"DISAGG_SIM_SPEC_ACCEPTANCE": "0.85"})  # dummy weights would accept no draft
    server.wait_ready()
    wl = Workload(name="mtp", input_len=64, output_len=96, num_prompts=16, max_concurrency=8, seed=5)
    ticks: list[BenchTick] = []
    run = await run_bench(BenchOptions(workload=wl, model="dummy-qwen3-8b", tick_s=0.1),
                          BenchTarget(endpoint=server.url, campaign="mtp"), on_tick=ticks.append)
    s = run.summary
    assert run.meta.status == "complete" and s["total_output_tokens"] == 16 * 96
    recs = run.records()
    assert sum(r.chunks for r in recs) < 0.6 * s["total_output_tokens"]  # several tokens per chunk
    run_ticks = [t for t in ticks if t.phase == "run"]
    assert run_ticks[-1].output_tokens == s["total_output_tokens"]
    tpots = [t.tpot_p50_ms for t in run_ticks if t.tpot_p50_ms is not None]
    assert tpots and statistics.median(tpots) == pytest.approx(s["median_tpot_ms"], rel=0.3)
    rates = [t.output_tps for t in run_ticks if t.output_tps]
    assert statistics.median(rates) == pytest.approx(s["output_throughput"], rel=0.3)
    # before the fix the live TPOT was the chunk gap, i.e. the ITL: ~3× the TPOT here
    assert statistics.median(tpots) < 0.6 * s["median_itl_ms"]
