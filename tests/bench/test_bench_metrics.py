"""Metric definitions: hand-computed cases, and the summary recomputed from real vllm bench result JSONs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.bench.benchpaths import BENCH1, BENCH2, CPU_SAMPLE, RERUN1, RERUN2
from tui.core.bench.metrics import (
    RequestRecord,
    attainment,
    goodput_of,
    parse_goodput,
    peaks,
    records_from_vllm_json,
    summarize,
)
from tui.core.errors import InputError


def _rec(i: int, start: float, ttft: float, itl: list[float], out: int | None, *, ok: bool = True,
         prompt: int = 10) -> RequestRecord:
    return RequestRecord(index=i, start=start, success=ok, ttft=ttft, latency=ttft + sum(itl), itl=itl,
                         prompt_tokens=prompt, output_tokens=out, chunks=len(itl) + 1 if ok else 0)


def test_hand_computed_summary() -> None:
    a = _rec(0, 0.0, 0.100, [0.010, 0.030], 3)  # latency 0.140, TPOT (0.140-0.100)/2 = 0.020
    b = _rec(1, 0.5, 0.200, [0.040], 2, prompt=20)  # latency 0.240, TPOT 0.040
    c = _rec(2, 0.6, 0.0, [], None, ok=False)
    s = summarize([a, b, c], duration=2.0, percentiles=(50, 99))
    assert (s["completed"], s["failed"]) == (2, 1)
    assert s["total_input_tokens"] == 30 and s["total_output_tokens"] == 5
    assert s["request_throughput"] == 1.0
    assert s["output_throughput"] == 2.5
    assert s["total_token_throughput"] == 17.5
    assert s["request_goodput"] is None  # no SLO given: null, as vllm writes it
    assert s["mean_ttft_ms"] == pytest.approx(150.0)
    assert s["median_ttft_ms"] == pytest.approx(150.0)
    assert s["std_ttft_ms"] == pytest.approx(50.0)
    assert s["mean_tpot_ms"] == pytest.approx(30.0)
    assert s["p99_tpot_ms"] == pytest.approx(20.0 + 0.99 * 20.0)
    assert s["mean_itl_ms"] == pytest.approx((10 + 30 + 40) / 3)
    assert s["mean_e2el_ms"] == pytest.approx(190.0)
    # token times: a at 0.100, 0.110, 0.140; b at 0.700, 0.740 -> bucket 0 holds all five
    assert s["max_output_tokens_per_s"] == 5.0
    assert s["max_concurrent_requests"] == 2
    keys = list(s)
    assert keys.index("duration") < keys.index("output_throughput") < keys.index("mean_ttft_ms")


def test_output_tokens_fall_back_to_chunks_and_tpot_only_above_one_token() -> None:
    r = _rec(0, 0.0, 0.1, [0.01, 0.01], None)
    assert r.output_len == 3  # no usage: one token per choice chunk
    one = _rec(1, 0.0, 0.1, [], 1)
    assert one.tpot is None
    s = summarize([one], 1.0, goodput={"tpot": 1.0})
    assert s["mean_tpot_ms"] == 0.0  # vllm: np.mean([] or 0)
    assert s["request_goodput"] == 1.0  # a 1-token request counts as TPOT 0 for goodput


def test_goodput_uses_every_slo_with_less_or_equal() -> None:
    a = _rec(0, 0.0, 0.100, [0.020], 2)  # ttft 100 ms, tpot 20 ms, e2el 120 ms
    b = _rec(1, 0.0, 0.300, [0.010], 2)  # ttft 300 ms
    assert goodput_of([a, b], 1.0, {"ttft": 100}) == 1.0  # exactly at the limit is good
    assert goodput_of([a, b], 1.0, {"ttft": 300, "tpot": 15}) == 1.0  # b only
    assert goodput_of([a, b], 2.0, {"e2el": 1000}) == 1.0
    assert attainment([a, b, _rec(2, 0, 0, [], None, ok=False)], {"ttft": 100}) == pytest.approx(1 / 3)
    s = summarize([a, b], 1.0, goodput={"ttft": 200.0})
    assert s["request_goodput"] == 1.0


def test_peaks_buckets_from_first_send() -> None:
    recs = [_rec(0, 0.0, 0.5, [0.4, 0.2, 0.05], 4), _rec(1, 1.2, 0.1, [0.1], 2)]
    # tokens: 0.5, 0.9 | 1.1, 1.15 | 1.3, 1.4 -> bucket 0: 2, bucket 1: 4
    assert peaks(recs) == (4.0, 2)
    assert peaks([]) == (0.0, 0)


def test_parse_goodput() -> None:
    assert parse_goodput(["ttft:500", "tpot:50"]) == {"ttft": 500.0, "tpot": 50.0}
    assert parse_goodput(["e2el:2000 ttft:1"]) == {"e2el": 2000.0, "ttft": 1.0}
    for bad in (["ttft"], ["itl:5"], ["tpot:x"], ["tpot:-1"], ["tpot:inf"]):
        with pytest.raises(InputError):
            parse_goodput(bad)


def _load(p: Path) -> dict:
    return json.loads(p.read_text())


@pytest.mark.parametrize("path", [BENCH2, RERUN2, CPU_SAMPLE], ids=["h200-bench2", "h200-rerun2", "cpu-sample"])
def test_summary_recomputed_from_real_result(path: Path) -> None:
    """Every summary key vllm wrote is recomputed from its per-request arrays.

    vllm does not store each request's E2E latency; it is rebuilt as TTFT + ΣITL, which differs from vllm's own
    clock read by the time between two perf_counter() calls (~µs), hence the tolerance on TPOT/E2EL keys.
    """
    data = _load(path)
    recs = records_from_vllm_json(data)
    pcts = sorted({float(k.split("_")[0][1:]) for k in data if k.startswith("p") and k.endswith("_ttft_ms")})
    slo = {"ttft": 1e9} if data["request_goodput"] is not None else None
    s = summarize(recs, data["duration"], percentiles=pcts, goodput=slo)
    checked = 0
    for key, want in data.items():
        if key not in s or not isinstance(want, int | float) or isinstance(want, bool):
            continue
        tol = 1e-4 if ("tpot" in key or "e2el" in key) else 1e-12
        assert s[key] == pytest.approx(want, rel=tol, abs=1e-9), key
        checked += 1
    assert checked >= 25


def test_trimmed_result_still_gives_ttft_and_totals() -> None:
    """bench1's JSON keeps ITLs for 16 requests only: TTFT, totals and throughputs still recompute exactly."""
    for path in (BENCH1, RERUN1):
        data = _load(path)
        recs = records_from_vllm_json(data)
        s = summarize(recs, data["duration"], percentiles=(99,))
        for key in ("completed", "total_input_tokens", "total_output_tokens", "output_throughput",
                    "request_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
                    "std_ttft_ms", "p99_ttft_ms"):
            assert s[key] == pytest.approx(data[key], rel=1e-12), key
        first16 = [r for r in recs if r.itl]
        assert len(first16) == 16
        assert all(math.isclose(r.tpot or 0, r.latency and (r.latency - r.ttft) / 2047) for r in first16)
