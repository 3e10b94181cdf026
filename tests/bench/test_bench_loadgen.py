"""The load generator in its worker process against the stub: counts, timing sanity, errors, concurrency."""

from __future__ import annotations

import itertools
import math

import pytest

from tui.core.bench.events import BenchDone, BenchTick
from tui.core.bench.runner import BenchOptions, BenchTarget, run_bench
from tui.core.events import EventBus
from tui.core.models import Workload


def _wl(**kw: object) -> Workload:
    base = {"name": "t", "input_len": 32, "output_len": 20, "num_prompts": 30}
    base.update(kw)
    return Workload(**base)  # type: ignore[arg-type]


async def test_paced_run_counts_and_timing(stub) -> None:
    url, srv = await stub(mode="paced", ms_per_token=10.0, ttft_ms=30.0)
    bus = EventBus()
    seen: list[object] = []
    bus.subscribe(seen.append)
    run = await run_bench(BenchOptions(workload=_wl(output_len=40), warmup=3), BenchTarget(endpoint=url),
                          bus=bus)
    s = run.summary
    assert run.meta.status == "complete"
    assert (s["completed"], s["failed"]) == (30, 0)
    assert s["total_output_tokens"] == 30 * 40 and s["total_input_tokens"] == 30 * 32
    assert s["mean_tpot_ms"] == pytest.approx(10.0, rel=0.1)
    assert 30.0 <= s["mean_ttft_ms"] < 300.0
    assert s["mean_e2el_ms"] == pytest.approx(s["mean_ttft_ms"] + 39 * s["mean_tpot_ms"], rel=1e-6)
    assert s["output_throughput"] == pytest.approx(1200 / s["duration"])
    # warm-ups reached the server but are not in the results (3-request burst + the shape requests)
    assert srv.stats.completions > 30
    assert len(run.records()) == 30
    ticks = [e for e in seen if isinstance(e, BenchTick)]
    assert ticks and any(t.phase == "run" for t in ticks)
    done = [e for e in seen if isinstance(e, BenchDone)]
    assert len(done) == 1 and done[0].status == "complete"
    assert done[0].summary["completed"] == 30
    assert run.meta.client["cpu"] > 0 and "loop_lag_p99_ms" in run.meta.client


async def test_live_ticks_at_4hz_with_windowed_figures(stub) -> None:
    url, _ = await stub(mode="paced", ms_per_token=5.0)
    ticks: list[BenchTick] = []
    await run_bench(BenchOptions(workload=_wl(num_prompts=10, output_len=300), warmup=0),
                    BenchTarget(endpoint=url), on_tick=ticks.append)
    run_ticks = [t for t in ticks if t.phase == "run"]
    span = run_ticks[-1].elapsed_s - run_ticks[0].elapsed_s
    assert len(run_ticks) >= 4 * span * 0.8  # ≥ 4 Hz, allowing for a loaded machine
    late = [t for t in run_ticks if t.output_tps]
    assert late
    assert late[-1].tpot_p50_ms == pytest.approx(5.0, rel=0.3)
    assert late[-1].output_tps == pytest.approx(10 * 200, rel=0.4)  # 10 streams × 200 tok/s


async def test_failed_requests_are_counted_and_kept(stub) -> None:
    url, _ = await stub(mode="fast", fail_every=3)
    run = await run_bench(BenchOptions(workload=_wl(num_prompts=12), warmup=0), BenchTarget(endpoint=url))
    s = run.summary
    assert (s["completed"], s["failed"]) == (8, 4)
    recs = run.records()
    bad = [r for r in recs if not r.success]
    assert len(bad) == 4 and all("HTTP 500" in r.error and "injected failure" in r.error for r in bad)
    assert "failed-requests" in run.meta.flags


async def test_max_concurrency_is_respected(stub) -> None:
    url, srv = await stub(mode="paced", ms_per_token=2.0)
    run = await run_bench(BenchOptions(workload=_wl(num_prompts=24, output_len=30, max_concurrency=4), warmup=0),
                          BenchTarget(endpoint=url))
    assert srv.stats.max_active == 4
    assert run.summary["max_concurrency"] == 4 and run.summary["completed"] == 24
    # never more than 4 requests in flight: sweep the records' intervals
    edges = sorted([(r.start, 1) for r in run.records()] + [(r.end, -1) for r in run.records()])
    level = peak = 0
    for _, d in edges:
        level += d
        peak = max(peak, level)
    assert peak <= 4


async def test_request_rate_is_achieved(stub) -> None:
    url, _ = await stub(mode="fast")
    run = await run_bench(BenchOptions(workload=_wl(num_prompts=40, output_len=5, request_rate=80.0), warmup=0),
                          BenchTarget(endpoint=url))
    c = run.meta.client
    assert c["requested_rate"] == 80.0
    # vllm's schedule puts the last send at N/rate; the first at a random gap: achieved ≈ rate within noise
    assert c["achieved_rate"] == pytest.approx(80.0, rel=0.35)
    starts = sorted(r.start for r in run.records())
    assert starts[-1] == pytest.approx(40 / 80.0, abs=0.1)
    assert run.summary["request_rate"] == 80.0


async def test_every_warmup_failing_fails_the_run(stub) -> None:
    url, _ = await stub(mode="fast", max_model_len=10)  # every request is too long: HTTP 400
    run = await run_bench(BenchOptions(workload=_wl()), BenchTarget(endpoint=url))
    assert run.meta.status == "failed"
    assert "every warm-up request failed" in run.meta.message and "HTTP 400" in run.meta.message


async def test_goodput_and_repeatable_prompts(stub) -> None:
    url, _ = await stub(mode="paced", ms_per_token=2.0)
    run = await run_bench(BenchOptions(workload=_wl(num_prompts=10), goodput={"tpot": 1000.0, "ttft": 5000.0},
                                       warmup=0), BenchTarget(endpoint=url))
    assert run.summary["request_goodput"] == pytest.approx(run.summary["request_throughput"])
    assert math.isfinite(run.summary["p99_itl_ms"])


async def test_unreachable_endpoint_is_one_line() -> None:
    from tui.core.errors import InputError

    with pytest.raises(InputError) as e:
        await run_bench(BenchOptions(workload=_wl()), BenchTarget(endpoint="http://127.0.0.1:1"))
    assert "cannot ask" in e.value.one_line()


async def test_server_counters_exclude_the_warmup(stub, tmp_path) -> None:
    """The decode server's counters are read between warm-up and run: warm-up prompts are not in the check."""
    from tests.helpers import decode_layout

    url, srv = await stub(mode="fast", kv_source="external_kv_transfer")
    log = tmp_path / "decode.log"
    log.write_text("INFO ... [jit_monitor.py:60] Kernel JIT monitor activated\n")
    layout = decode_layout(url, log)
    run = await run_bench(BenchOptions(workload=_wl(num_prompts=10), warmup=4),
                          BenchTarget(endpoint=url, topology="1p1d", layout=layout))
    kv = run.meta.kv_transfer
    assert kv is not None and kv["external"] == run.summary["total_input_tokens"] == 320
    assert srv.stats.prompt_tokens > 320  # the warm-up did reach the server
    assert run.meta.triton_jit == [] and (run.path / "logs" / "decode.log").exists()


async def test_warm_up_ticks_count_their_own_time(stub) -> None:
    """Issue 22, finding 12: a warm-up that waited on the server (a JIT compile on the H200) showed "warmup 0/66
    done · 66 in flight · 0 s" for 8.5 s: every warm-up tick said elapsed 0.0, and the CLI printed the same line."""
    url, _ = await stub(mode="paced", ms_per_token=5.0, ttft_ms=800.0)  # each first token after 0.8 s
    ticks: list[BenchTick] = []
    await run_bench(BenchOptions(workload=_wl(num_prompts=4, output_len=4), warmup=4), BenchTarget(endpoint=url),
                    on_tick=ticks.append)
    warm = [t for t in ticks if t.phase == "warmup"]
    assert warm, "no warm-up tick"
    assert max(t.elapsed_s for t in warm) >= 0.2  # the first tick comes 0.25 s into the warm-up
    assert all(b.elapsed_s >= a.elapsed_s for a, b in itertools.pairwise(warm))
    first = warm[0]
    assert first.total >= 4 and first.inflight + first.done == first.total  # the burst (and the shapes' requests)
    assert first.line().endswith(f"{first.elapsed_s:6.1f}s  warm-up: {first.done}/{first.total} done, "
                                 f"{first.inflight} in flight")


async def test_live_output_rate_never_goes_negative_when_streams_break(stub) -> None:
    """Issue 23: a run whose server was stopped under it read "out -3,848 tok/s". The live counter of tokens
    received dropped the chunks of every request that failed after streaming; it now keeps them (they arrived)."""
    url, srv = await stub(mode="paced", ms_per_token=5.0)
    ticks: list[BenchTick] = []
    broke: list[float] = []

    def on_tick(t: BenchTick) -> None:
        ticks.append(t)
        if not broke and t.phase == "run" and (t.output_tps or 0) > 0 and t.elapsed_s > 0.5:
            broke.append(t.elapsed_s)  # the server goes away under every stream at once
            for streams in list(srv._wheel.values()):
                for s in streams:
                    if s.conn.transport is not None:
                        s.conn.transport.abort()

    run = await run_bench(BenchOptions(workload=_wl(num_prompts=10, output_len=600), warmup=0),
                          BenchTarget(endpoint=url), on_tick=on_tick)
    assert broke and (run.summary["completed"], run.summary["failed"]) == (0, 10)
    after = [t for t in ticks if t.phase == "run" and t.elapsed_s > broke[0]]
    assert after and all(t.failed == 10 for t in after[-1:])
    assert all(t.output_tps is None or t.output_tps >= 0 for t in ticks), [t.output_tps for t in ticks]


def test_a_counter_that_goes_back_starts_a_new_window() -> None:
    from tui.core.bench.live import LiveWindow

    live = LiveWindow(run_id="r", total=4)
    tick = {"phase": "run", "done": 0, "failed": 0}
    assert live.update({**tick, "el": 0.25, "chunks": 100}).output_tps is None
    assert live.update({**tick, "el": 0.5, "chunks": 200}).output_tps == pytest.approx(400.0)
    assert live.update({**tick, "el": 0.75, "chunks": 50}).output_tps is None  # a worker that counted otherwise
    assert live.update({**tick, "el": 1.0, "chunks": 150}).output_tps == pytest.approx(400.0)
