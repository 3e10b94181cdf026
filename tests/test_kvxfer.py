"""KV-transfer accounting and the TTFT breakdown, on the real H200 1P1D captures; a clean stop is no crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tui.core.bench import kvxfer
from tui.core.plan.hostfacts import sim_facts
from tui.core.playbook import load_playbook
from tui.core.playbook.offline import diagnose_file

FIX = Path(__file__).parent / "fixtures"
P1D = FIX / "vllm-0.24.0-h200-1p1d"
GRID = FIX / "vllm-0.24.0-h200-grid" / "1p1d"
URL = "http://127.0.0.1:8200"


def _counters(path: Path) -> kvxfer.NixlCounters:
    c = kvxfer.nixl_counters(path.read_text())
    assert c is not None
    return c


def test_decode_counters_give_what_the_decode_log_states() -> None:
    before = {URL: _counters(P1D / "metrics" / "metrics_8200_after_stream.samples.txt")}
    after = {URL: _counters(P1D / "metrics" / "metrics_8200_after_bench.samples.txt")}
    run = kvxfer.kv_transfer_run(before, after)
    assert run is not None
    # the two KV Transfer metrics lines logged between the two scrapes (07:01:07 and 07:01:37)
    logged = kvxfer.logged_transfers((P1D / "logs" / "decode-0.log").read_text().splitlines())[1:]
    assert [x.transfers for x in logged] == [35, 31]
    from_log = kvxfer.from_logged(logged)
    assert from_log is not None
    assert run.transfers == from_log.transfers == 66
    assert run.bytes / kvxfer.MIB == pytest.approx(from_log.bytes / kvxfer.MIB, rel=1e-3)
    assert run.xfer_time_s == pytest.approx(from_log.xfer_time_s, rel=1e-3)
    assert run.mib_per_s == pytest.approx(from_log.mib_per_s, rel=1e-3)
    assert run.mib_per_s == pytest.approx(12.43, abs=0.01)
    assert run.failed_transfers == 0
    # one line on its own: vLLM's figures for that interval
    last = kvxfer.from_logged(logged[1:])
    assert last is not None and last.mib_per_s == pytest.approx(11.855, rel=1e-3)


def test_breakdown_puts_most_of_the_31_6_s_ttft_in_the_transfer() -> None:
    bench = (P1D / "cli" / "bench.txt").read_text()
    ttft = float(next(line.split()[-1] for line in bench.splitlines() if line.startswith("Mean TTFT (ms):")))
    assert ttft == pytest.approx(31633.02)
    # the run's transfers: the decode log's interval that holds 31 of its 32 (the other came with the warm-up)
    logged = kvxfer.logged_transfers((P1D / "logs" / "decode-0.log").read_text().splitlines())
    b = kvxfer.ttft_breakdown(ttft, kvxfer.from_logged(logged[-1:]), None, None)
    assert b.kv_transfer.mean_ms == pytest.approx(24300.3, rel=1e-4)
    assert b.transfer_share is not None and b.transfer_share > 0.5
    assert "KV transfer 24,300 ms (77%)" in b.line()


def test_breakdown_with_the_proxy_histograms() -> None:
    m = GRID / "metrics"
    kv = kvxfer.kv_transfer_run({URL: _counters(m / "8200_before.txt")}, {URL: _counters(m / "8200_after.txt")})
    assert kv is not None and kv.transfers == 65 and kv.xfer_time_s == pytest.approx(837.82, rel=1e-4)
    assert kv.xfer_p50_s is not None  # the full page has the buckets
    ttft = json.loads((GRID / "summary.json").read_text())["mean_ttft_ms"]
    b = kvxfer.ttft_breakdown(ttft, kv, kvxfer.proxy_histograms((m / "8000_before.txt").read_text()),
                              kvxfer.proxy_histograms((m / "8000_after.txt").read_text()))
    assert b.prefill.mean_ms == pytest.approx(38.373 / 65 * 1000, rel=1e-3)
    assert b.prefill.p50_ms is not None and b.prefill.p99_ms is not None
    first_byte = 1123.978 / 65 * 1000
    assert b.decode_first_token.mean_ms == pytest.approx(first_byte - kv.xfer_time_s / 65 * 1000, rel=1e-3)
    assert b.client_proxy.mean_ms == pytest.approx(ttft - b.prefill.mean_ms - first_byte, rel=1e-3)
    parts = [b.client_proxy, b.prefill, b.kv_transfer, b.decode_first_token]
    assert sum(p.mean_ms or 0.0 for p in parts) == pytest.approx(ttft, rel=1e-6)
    assert b.kv_transfer.mean_ms is not None and b.kv_transfer.mean_ms > 10 * (b.prefill.mean_ms or 0.0)


def test_slow_path_against_the_link() -> None:
    facts = sim_facts("h200", 2)
    same = kvxfer.link_bandwidth(facts, [0], [0])
    nv = kvxfer.link_bandwidth(facts, [0], [1])
    assert same is not None and same.kind == "same-gpu"
    assert nv is not None and nv.kind == "nvlink"
    tcp = kvxfer.KvTransferRun(31, 31 * 302e6, 31 * 24.3, 0, 0, (URL,))  # the real H200: 0.012 GB/s
    fast = kvxfer.KvTransferRun(31, 31 * 302e6, 31 * 0.003, 0, 0, (URL,))  # ~100 GB/s over NVLink
    assert kvxfer.slow_path(tcp, same) and kvxfer.slow_path(tcp, nv)
    assert not kvxfer.slow_path(fast, nv)
    assert not kvxfer.slow_path(tcp, None)


def test_clean_stop_of_the_decode_server_is_not_a_crash() -> None:
    log = GRID / "logs" / "decode-0.log"
    assert "EngineDeadError" in log.read_text()
    result = diagnose_file(log, load_playbook()).diagnoses
    assert not [d for d in result if d.severity == "error"], [d.entry_id for d in result]
    assert "nixl-slow-transfer" in {d.entry_id for d in result}


def test_one_kv_rate_for_the_bench_and_the_dashboard() -> None:
    """Issue 22, finding 16: for the same transfers the bench said 22.3 MB/s (per transfer, vLLM's Throughput) and
    the dashboard 241 MB/s (bytes per wall second, every transfer together). One definition, both figures, each
    labelled, wherever they are shown."""
    from tui.core.telemetry import derive, prom

    texts = [(GRID / "metrics" / f"8200_{when}.txt").read_text() for when in ("before", "after")]
    run = kvxfer.kv_transfer_run({URL: kvxfer.nixl_counters(texts[0])}, {URL: kvxfer.nixl_counters(texts[1])},
                                 wall_s=30.0)
    assert run is not None
    window = derive.MetricsWindow(window_s=60.0, rate_window_s=60.0)
    window.add(1000.0, prom.parse(texts[0], keep=derive.KEEP_PREFIXES))
    window.add(1030.0, prom.parse(texts[1], keep=derive.KEEP_PREFIXES))
    f = window.figures("decode")
    assert f is not None and f.kv_transfer is not None
    live = f.kv_transfer.rate
    assert live.per_transfer_bps == pytest.approx(run.rate.per_transfer_bps)
    assert live.moved_bps == pytest.approx(run.rate.moved_bps) == pytest.approx(f.kv_transfer.bytes_per_s)
    assert live.describe() == run.rate.describe()
    assert f.kv_transfer.mb_per_s == pytest.approx(run.mib_per_s)
    moved = run.bytes / kvxfer.MIB / 30.0
    assert f"{moved:,.1f} MiB/s moved, {run.mib_per_s:,.1f} MiB/s per transfer" in run.line()
    assert run.to_dict()["moved_mib_per_s"] == pytest.approx(moved)
