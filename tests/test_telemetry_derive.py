"""Derived figures from successive real scrapes (vLLM 0.24 on an H200 under load) and synthetic pairs."""

from __future__ import annotations

import json
import re

import pytest

from tests.telemetry_helpers import CPU, H200, captured_at, during_series, exposition_text
from tui.core.telemetry import deltas, derive, prom
from tui.core.telemetry.derive import MetricsWindow


def _series(bench: str) -> list[tuple[float, prom.Exposition]]:
    out = []
    for path in during_series(bench):
        text = exposition_text(path)
        out.append((captured_at(text), prom.parse(text, keep=derive.KEEP_PREFIXES)))
    assert len(out) == 12
    return out


def _bench_json(bench: str) -> dict[str, float]:
    name = f"{bench}_trimmed.json" if bench.startswith("bench1") else f"{bench}.json"
    data = json.loads((H200 / "rerun" / "bench" / name).read_text())
    return {k: v for k, v in data.items() if isinstance(v, int | float)}


def test_generation_rate_under_load_is_plausible_against_the_bench() -> None:
    bench = "bench1_in512_out2048_n128"
    series = _series(bench)
    w = MetricsWindow(window_s=60.0, rate_window_s=60.0)
    for ts, exp in series:
        w.add(ts, exp)
    fig = w.figures()
    assert fig is not None and fig.generation_tps is not None
    first, last = series[0][1], series[-1][1]
    span = series[-1][0] - series[0][0]
    exact = ((last.value(derive.GENERATION_TOKENS) or 0) - (first.value(derive.GENERATION_TOKENS) or 0)) / span
    assert fig.generation_tps == pytest.approx(exact)
    assert fig.span_s == pytest.approx(span)
    # the window is the dense decode phase: above the run's average, at most its peak 1 s bucket
    result = _bench_json(bench)
    assert result["output_throughput"] < fig.generation_tps <= result["max_output_tokens_per_s"]
    assert fig.running == 128.0 and fig.waiting == 0.0
    assert fig.kv_cache_usage == pytest.approx(last.value(derive.KV_USAGE))
    assert [e.engine for e in fig.engines] == ["0"]
    assert fig.engines[0].generation_tps == pytest.approx(fig.generation_tps)


def test_rates_follow_a_sliding_window() -> None:
    series = _series("bench1_in512_out2048_n128")
    w = MetricsWindow(window_s=10.0, rate_window_s=4.0)
    rates = []
    for ts, exp in series:
        w.add(ts, exp)
        fig = w.figures()
        assert fig is not None
        rates.append(fig.generation_tps)
    assert rates[0] is None  # one scrape: no rate yet
    assert all(r is not None and r > 0 for r in rates[1:])
    # after the initial prefill burst the decode rate falls as the KV cache (and batch cost) grows
    assert rates[3] > rates[-1]  # type: ignore[operator]
    assert len(w) == 6  # old scrapes dropped: the 10 s window of 2 s scrapes, plus its base


def test_ttft_quantiles_match_the_bench() -> None:
    bench = "bench1_in512_out2048_n128"
    series = _series(bench)
    w = MetricsWindow(window_s=10.0, rate_window_s=4.0)
    for ts, exp in series[:6]:
        w.add(ts, exp)
    fig = w.figures()
    assert fig is not None and fig.ttft is not None
    # 113 of the 128 first tokens arrived during this window (15 before the first scrape)
    assert fig.ttft.count == 113
    result = _bench_json(bench)
    median_s = result["median_ttft_ms"] / 1000.0
    # the bucket holding the median is (7.5, 10]: interpolation stays in it
    assert fig.ttft.p50 is not None and 7.5 <= fig.ttft.p50 <= 10.0
    assert abs(fig.ttft.p50 - median_s) < 2.5
    assert fig.ttft.mean == pytest.approx(median_s, rel=0.1)
    assert fig.itl is not None and fig.itl.count > 10_000 and fig.itl.p50 is not None
    assert fig.tpot is not None and fig.tpot.count == 0 and fig.tpot.p50 is None  # TPOT is observed at the end


def test_prefill_heavy_window() -> None:
    series = _series("bench2_in7500_out200_n128")
    w = MetricsWindow(window_s=10.0, rate_window_s=10.0)
    for ts, exp in series:
        w.add(ts, exp)
    fig = w.figures()
    assert fig is not None
    assert fig.prompt_tps is not None and fig.generation_tps is not None
    assert fig.prompt_tps > 5 * fig.generation_tps  # prefill-heavy
    assert fig.kv_cache_usage is not None and fig.kv_cache_usage > 0.9
    assert fig.waiting == series[-1][1].value(derive.WAITING)
    assert fig.finished["length"] >= 1  # the first requests finished in the last seconds
    assert fig.requests_per_s == pytest.approx(sum(fig.finished.values()) / fig.span_s)


def _text_with(base: str, values: dict[str, float]) -> str:
    """``base`` with the value of each sample line that starts with a key replaced."""
    out = []
    for line in base.splitlines():
        for prefix, value in values.items():
            if line.startswith(prefix):
                line = line.rpartition(" ")[0] + " " + repr(float(value))
        out.append(line)
    return "\n".join(out) + "\n"


BASE_1ENGINE = exposition_text(CPU / "metrics-engine-registry-1engine.prom")
BASE_NIXL = exposition_text(CPU / "metrics-engine-registry-dp2-nixl.prom")
SRC = 'vllm:prompt_tokens_by_source_total{engine="%s",model_name="Qwen/Qwen3-8B",source="%s"}'


def _by_source(text: str, engine: str, external: float, local: float, cached: float = 0.0) -> str:
    return _text_with(text, {SRC % (engine, "external_kv_transfer"): external, SRC % (engine, "local_compute"): local,
                             SRC % (engine, "local_cache_hit"): cached})


@pytest.mark.parametrize(("external", "local", "verdict"), [
    (12_800.0, 25.0, derive.KV_TRANSFER_OK),
    (0.0, 12_825.0, derive.DECODE_RECOMPUTED_PREFILL),
    (3_000.0, 9_825.0, derive.PARTIAL_KV_TRANSFER),
    (0.0, 0.0, derive.NO_TRAFFIC),
])
def test_decode_server_proof_on_a_synthetic_pair(external: float, local: float, verdict: str) -> None:
    w = MetricsWindow(window_s=10.0)
    w.add(100.0, prom.parse(_by_source(BASE_NIXL, "0", 1000.0, 40.0)))
    w.add(102.0, prom.parse(_by_source(BASE_NIXL, "0", 1000.0 + external, 40.0 + local)))
    fig = w.figures("decode")
    assert fig is not None and fig.disagg is not None
    assert fig.disagg.verdict == verdict
    assert fig.disagg.external_tokens == external and fig.disagg.local_compute_tokens == local
    if external + local > 0:
        assert fig.disagg.external_share == pytest.approx(external / (external + local))
    assert w.figures("prefill").disagg is None  # type: ignore[union-attr]
    assert w.figures("single").disagg is None  # type: ignore[union-attr]


def test_proof_sums_dp_engines() -> None:
    a = _by_source(_by_source(BASE_NIXL, "0", 0, 0), "1", 0, 0)
    b = _by_source(_by_source(BASE_NIXL, "0", 500, 4), "1", 700, 6)
    w = MetricsWindow()
    w.add(0.0, prom.parse(a))
    w.add(1.0, prom.parse(b))
    fig = w.figures("decode")
    assert fig is not None and fig.disagg is not None
    assert (fig.disagg.external_tokens, fig.disagg.local_compute_tokens) == (1200, 10)
    assert [e.engine for e in fig.engines] == ["0", "1"]


def test_kv_transfer_figures() -> None:
    def nixl(engine: str, count: float, total_s: float, nbytes: float, failed: float) -> dict[str, float]:
        lab = f'engine="{engine}",model_name="Qwen/Qwen3-8B"'
        return {
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="{engine}",le="0.01",': count / 2,
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="{engine}",le="0.025",': count,
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="{engine}",le="0.05",': count,
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="{engine}",le="0.075",': count,
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="{engine}",le="0.1",': count,
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="{engine}",le="0.2",': count,
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="{engine}",le="0.3",': count,
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="{engine}",le="0.5",': count,
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="{engine}",le="0.75",': count,
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="{engine}",le="1.0",': count,
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="{engine}",le="5.0",': count,
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="{engine}",le="+Inf",': count,
            f"vllm:nixl_xfer_time_seconds_count{{{lab}}}": count,
            f"vllm:nixl_xfer_time_seconds_sum{{{lab}}}": total_s,
            f"vllm:nixl_bytes_transferred_sum{{{lab}}}": nbytes,
            f"vllm:nixl_num_failed_transfers_total{{{lab}}}": failed,
        }

    w = MetricsWindow(window_s=10.0)
    w.add(10.0, prom.parse(_text_with(BASE_NIXL, nixl("0", 0, 0, 0, 0))))
    w.add(12.0, prom.parse(_text_with(BASE_NIXL, nixl("0", 40, 0.6, 8e9, 1))))
    kv = w.figures("decode").kv_transfer  # type: ignore[union-attr]
    assert kv is not None
    assert kv.transfers == 40 and kv.transfers_per_s == 20
    assert kv.bytes == 8e9 and kv.bytes_per_s == 4e9
    assert kv.xfer_time_mean_s == pytest.approx(0.015)
    assert kv.xfer_time_p90_s is not None and 0.01 < kv.xfer_time_p90_s <= 0.025
    assert kv.failed_transfers == 1 and kv.failed_transfers_total == 1
    # a server without NIXL has no KV-transfer figures
    w2 = MetricsWindow()
    w2.add(0.0, prom.parse(BASE_1ENGINE))
    w2.add(1.0, prom.parse(BASE_1ENGINE))
    assert w2.figures("decode").kv_transfer is None  # type: ignore[union-attr]


GEN = 'vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"}'


def test_counter_reset_counts_from_zero() -> None:
    w = MetricsWindow(window_s=60.0, rate_window_s=60.0)
    for t, v in ((0.0, 100.0), (1.0, 150.0), (2.0, 20.0), (3.0, 50.0)):  # the server restarted after t=1
        w.add(t, prom.parse(_text_with(BASE_1ENGINE, {GEN: v})))
    fig = w.figures()
    assert fig is not None and fig.generation_tps == pytest.approx((50 + 20 + 30) / 3)


def test_series_appearing_mid_window_counts_from_zero() -> None:
    a = prom.parse("# TYPE vllm:request_success_total counter\n"
                   'vllm:request_success_total{engine="0",finished_reason="length"} 5\n')
    b = prom.parse("# TYPE vllm:request_success_total counter\n"
                   'vllm:request_success_total{engine="0",finished_reason="length"} 9\n'
                   'vllm:request_success_total{engine="0",finished_reason="error"} 2\n')
    assert deltas.counter_delta([deltas.Scrape(0, a), deltas.Scrape(1, b)], derive.REQUEST_SUCCESS) == 6
    assert deltas.counter_delta([deltas.Scrape(0, a), deltas.Scrape(1, b)], derive.REQUEST_SUCCESS,
                                finished_reason="error") == 2
    assert deltas.counter_delta([deltas.Scrape(0, a)], "vllm:nothing_total") is None


def test_histogram_reset_is_not_a_negative_count() -> None:
    def h(c1: float, c2: float, s: float) -> prom.Exposition:
        return prom.parse("# TYPE x histogram\n"
                          f'x_bucket{{le="1"}} {c1}\nx_bucket{{le="+Inf"}} {c2}\nx_sum {s}\nx_count {c2}\n')

    scrapes = [deltas.Scrape(0, h(10, 20, 30)), deltas.Scrape(1, h(12, 25, 40)), deltas.Scrape(2, h(1, 3, 2))]
    d = deltas.histogram_delta(scrapes, "x")
    assert d is not None
    assert [(b.le, b.count) for b in d.buckets] == [(1.0, 2 + 1), (float("inf"), 5 + 3)]
    assert d.sum == pytest.approx(10 + 2) and d.count == 8


def test_clock_going_back_restarts_the_window() -> None:
    w = MetricsWindow()
    w.add(100.0, prom.parse(BASE_1ENGINE))
    w.add(101.0, prom.parse(BASE_1ENGINE))
    w.add(50.0, prom.parse(BASE_1ENGINE))
    assert len(w) == 1
    fig = w.figures()
    assert fig is not None and fig.generation_tps is None
    assert ("rates", "one scrape so far: rates need two") in fig.unavailable


def test_keep_prefixes_cover_every_family_derive_reads() -> None:
    names = [v for k, v in vars(derive).items() if k.isupper() and isinstance(v, str) and v.startswith("vllm:")]
    assert len(names) >= 18
    for name in names:
        assert name.startswith(derive.KEEP_PREFIXES), name
    assert re.match(r"vllm:request_time_per_output_token_seconds", derive.TPOT)


def test_running_totals_agree_with_pairwise_deltas_over_a_long_run() -> None:
    """The window keeps running totals (O(1) per scrape); they must equal the pairwise sums, resets included."""
    exps = [exp for _, exp in _series("bench1_in512_out2048_n128")]
    w = MetricsWindow(window_s=7.0, rate_window_s=5.0)
    for i in range(60):  # five passes over the series: every 12th scrape the counters "reset"
        w.add(float(i), exps[i % len(exps)])
        linked = w._since(7.0)
        unlinked = [deltas.Scrape(sc.ts, sc.exp) for sc in linked]
        for name in (derive.GENERATION_TOKENS, derive.PROMPT_TOKENS, derive.PREFIX_HITS):
            assert deltas.counter_delta(linked, name) == pytest.approx(deltas.counter_delta(unlinked, name))
        for name in (derive.TTFT, derive.ITL):
            a, b = deltas.histogram_delta(linked, name), deltas.histogram_delta(unlinked, name)
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert [(x.le, x.count) for x in a.buckets] == pytest.approx([(x.le, x.count) for x in b.buckets])
                assert a.sum == pytest.approx(b.sum) and a.count == pytest.approx(b.count)
    assert len(w) == 8  # bounded: the 7 s window of 1 s scrapes plus its base
    oldest = w._since(60.0)[0]
    assert oldest.prev is None  # the chain is cut behind the window: nothing old is kept alive


_TTFT_BUCKETS = (0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


def _ttft(fast: int, slow: int) -> prom.Exposition:
    """A vLLM 0.24 TTFT histogram holding ``fast`` observations of ~0.7 s and ``slow`` ones of ~7 s (cumulative)."""
    lab = 'engine="0",model_name="m"'
    lines = ["# TYPE vllm:time_to_first_token_seconds histogram"]
    for le in _TTFT_BUCKETS:
        n = (fast if le >= 0.75 else 0) + (slow if le >= 7.5 else 0)
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} {n}')
    lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="+Inf"}} {fast + slow}')
    lines.append(f"vllm:time_to_first_token_seconds_count{{{lab}}} {fast + slow}")
    lines.append(f"vllm:time_to_first_token_seconds_sum{{{lab}}} {fast * 0.7 + slow * 7.0}")
    return prom.parse("\n".join(lines) + "\n")


def test_the_servers_latency_covers_the_run_not_its_warm_up() -> None:
    """Issue 22, finding 14: the servers' view said "TTFT p50 7.5 s" (warm-up requests that had waited on a JIT)
    next to the run's 726 ms: the rolling window mixed the warm-up in. A marked run counts from its start."""
    w = MetricsWindow(window_s=10.0, rate_window_s=4.0)
    w.add(100.0, _ttft(0, 0))
    w.add(101.0, _ttft(0, 30))  # the warm-up: 30 first tokens after ~7 s
    w.add(102.0, _ttft(0, 30))
    w.mark_run(102.2)  # the run began (a tick said so a moment later)
    w.add(103.0, _ttft(20, 30))
    f = w.figures()
    assert f is not None and f.ttft is not None and f.latency_since == 102.0 and f.latency_until is None
    assert f.ttft.count == 20 and f.ttft.p99 is not None and f.ttft.p99 <= 0.75
    w.end_run(103.5)
    w.add(104.0, _ttft(25, 30))
    w.add(105.0, _ttft(25, 30))  # after the run, nothing new: its figures stay, said to end at its last scrape
    f = w.figures()
    assert f is not None and f.ttft is not None and f.ttft.count == 25 and f.latency_until == 104.0
    w.add(106.0, _ttft(26, 30))  # new traffic: the rolling window again (the warm-up still in it)
    f = w.figures()
    assert f is not None and f.ttft is not None and f.latency_since is None and f.ttft.count == 26 + 30
    rolling = MetricsWindow(window_s=10.0, rate_window_s=4.0)  # what was shown before: warm-up and run mixed
    for ts, exp in ((100.0, _ttft(0, 0)), (101.0, _ttft(0, 30)), (103.0, _ttft(20, 30))):
        rolling.add(ts, exp)
    mixed = rolling.figures()
    assert mixed is not None and mixed.ttft is not None and mixed.ttft.p50 is not None and mixed.ttft.p50 > 5.0


def test_a_decode_servers_prompt_tokens_say_where_they_came_from() -> None:
    """Issue 22, finding 16: a decode server whose prompts all arrived by KV transfer showed "prompt tok/s 3,273",
    as if it had computed them. The real 1P1D decode server of the H200 grid: every prompt token came over NIXL."""
    from tests.conftest import FIXTURES
    from tui.core.telemetry import view

    m = FIXTURES / "vllm-0.24.0-h200-grid" / "1p1d" / "metrics"
    w = MetricsWindow(window_s=60.0, rate_window_s=60.0)
    w.add(1000.0, prom.parse((m / "8200_before.txt").read_text(), keep=derive.KEEP_PREFIXES))
    w.add(1039.3, prom.parse((m / "8200_after.txt").read_text(), keep=derive.KEEP_PREFIXES))
    f = w.figures("decode")
    assert f is not None and f.prompt_tps is not None and f.prompt_tps > 1000
    assert f.prompt_computed_tps == 0.0 and f.prompt_transferred_tps is not None
    assert f.prompt_transferred_tps + (f.prompt_cached_tps or 0.0) == pytest.approx(f.prompt_tps)
    d = view.figures_dict(f)
    assert d is not None and d["prompt_tokens_per_s_by_source"]["computed"] == 0.0
    line = view.server_line({"name": "decode-0", "role": "decode", "endpoint": "http://127.0.0.1:8200",
                             "health": "up", "latency_ms": 1.0, "error": None, "metrics": d})
    assert f"prompt 0 computed + {f.prompt_transferred_tps:.0f} by KV transfer tok/s" in line, line
