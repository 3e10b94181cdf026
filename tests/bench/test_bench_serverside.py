"""Server-side checks on real captures: KV-transfer counters, Triton JIT lines; energy; the vllm bench layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.benchpaths import BENCH2, H200
from tui.core.bench import serverside
from tui.core.bench.report import format_result
from tui.core.bench.vllmresult import import_vllm_result

METRICS = H200 / "bench"


def test_prompt_token_sources_from_real_metrics() -> None:
    before = serverside.prompt_tokens_by_source((METRICS / "bench2_in7500_out200_n128_metrics_before.txt").read_text())
    after = serverside.prompt_tokens_by_source((METRICS / "bench2_in7500_out200_n128_metrics_after.txt").read_text())
    assert before == {"local_compute": 64740.0, "local_cache_hit": 848.0, "external_kv_transfer": 0.0}
    assert after is not None
    check = serverside.kv_check({"d": before}, {"d": after})
    assert check is not None
    # every one of bench2's 960,002 prompt tokens was computed or found in the cache on that server
    assert check.local_compute + check.cache_hit == 960002.0
    assert not check.transferred
    assert check.recomputed  # as a 1P1D decode server, this would have done the prefill itself
    assert "prefill done twice" in check.line()
    assert serverside.prompt_tokens_by_source("# nothing here\n") is None
    assert serverside.kv_check({"d": None}, {"d": after}) is None


def test_kv_transfer_that_happened() -> None:
    b = {"external_kv_transfer": 0.0, "local_compute": 0.0}
    a = {"external_kv_transfer": 96000.0, "local_compute": 128.0}
    check = serverside.kv_check({"d": b}, {"d": a})
    assert check is not None and check.transferred and not check.recomputed
    assert check.to_dict()["local_share"] == pytest.approx(128 / 96128)


def test_triton_jit_lines_since_offset(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    text = (H200 / "startup" / "main.log").read_text()
    cut = text.index("Triton kernel JIT compilation during inference")
    head, tail = text[: cut - 200], text[cut - 200:]
    log.write_text(head)
    offsets = serverside.log_offsets([str(log)])
    assert serverside.jit_lines(offsets) == []
    with log.open("a") as f:
        f.write(tail)
    found = serverside.jit_lines(offsets)
    assert len(found) == 1 and "_topk_topp_kernel" in found[0]
    copied = serverside.copy_logs([str(log)], tmp_path / "logs")
    assert copied == ["server.log"] and (tmp_path / "logs" / "server.log").read_text() == text


def test_energy_per_output_token() -> None:
    e = serverside.energy_delta({0: 1_000_000.0, 1: 2_000_000.0}, {0: 1_700_000.0, 1: 2_600_000.0}, 1300)
    assert e == {"joules": 1300.0, "per_gpu_joules": {0: 700.0, 1: 600.0}, "joules_per_output_token": 1.0}
    assert serverside.energy_delta(None, {0: 1.0}, 10) is None

    class Nvml:
        def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
            return i

        def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
            return 5000 + h

    reader = serverside.nvml_energy_reader(Nvml(), [0, 1])
    assert serverside.read_energy(reader) == {0: 5000.0, 1: 5001.0}

    def broken() -> dict[int, float]:
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    assert serverside.read_energy(broken) is None


def test_result_block_matches_vllm_bench_stdout(tmp_path: Path) -> None:
    """Our text report of bench2's summary is line for line what vllm bench serve printed for it."""
    run = import_vllm_result(BENCH2, root=tmp_path)
    printed = (METRICS / "bench2_in7500_out200_n128_stdout.txt").read_text().splitlines()
    start = next(i for i, line in enumerate(printed) if "Serving Benchmark Result" in line)
    block = printed[start: start + len(format_result(run.summary).splitlines())]
    assert [line.rstrip() for line in format_result(run.summary).splitlines()] == [line.rstrip() for line in block]
