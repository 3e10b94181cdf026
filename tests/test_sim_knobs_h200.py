"""The simulator against the real H200 knob runs (``fixtures/vllm-0.24.0-h200-knobs``, KNOBS.md), in virtual time:
every configuration × cell × metric (output tok/s, mean TTFT, mean TPOT) within ±15 %, except the documented
exceptions, which must be exactly the cells outside (a new miss fails, and so does an exception that no longer is
one). The predictions read each server's real command line through ``knobs_from_flags``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache

from tests.conftest import FIXTURES
from tui.core.models import Catalog
from tui.core.plan.gpuspecs import H200
from tui.sim.calibration import (
    KNOB_CELLS,
    KNOB_CONFIGS,
    KNOB_EXCEPTIONS,
    KnobCell,
    knob_cells,
    parse_knob_cmd,
)
from tui.sim.knobs_model import ServeKnobs, knobs_from_flags
from tui.sim.perfmodel import Hardware, memory_plan

CAPTURE = FIXTURES / "vllm-0.24.0-h200-knobs"


@cache
def cells() -> tuple[KnobCell, ...]:
    knobs: dict[str, ServeKnobs] = {}
    measured: dict[tuple[str, str], dict[str, float]] = {}
    for cf in KNOB_CONFIGS:
        knobs[cf] = knobs_from_flags(*parse_knob_cmd((CAPTURE / "logs" / f"{cf}.cmd").read_text(encoding="utf-8")))
        for i, o in KNOB_CELLS:
            data = json.loads((CAPTURE / "results" / cf / f"{i}x{o}.json").read_text(encoding="utf-8"))
            measured[(cf, f"{i}x{o}")] = {k: float(v) for k, v in data.items() if isinstance(v, int | float)}
    return tuple(knob_cells(Catalog.load().model("dummy-qwen3-8b"), knobs, measured))


def test_each_knob_command_line_is_read_as_the_server_ran_it() -> None:
    read = {cf: knobs_from_flags(*parse_knob_cmd((CAPTURE / "logs" / f"{cf}.cmd").read_text(encoding="utf-8")))
            for cf in KNOB_CONFIGS}
    base = ServeKnobs(flashinfer_sampler=False, load_format="dummy")  # every server's environment and flags
    assert read["base"] == base
    assert read["attn_triton"] == replace(base, attention_backend="TRITON_ATTN")
    assert read["attn_flashinfer"] == replace(base, attention_backend="FLASHINFER")
    assert read["mnbt_2048"] == replace(base, max_num_batched_tokens=2048)
    assert read["kv_fp8"] == replace(base, kv_cache_dtype="fp8")
    assert read["spec_ngram"] == replace(base, spec_method="ngram", spec_tokens=4)


def test_every_knob_cell_within_15_percent_or_a_documented_exception() -> None:
    all_cells = cells()
    assert len(all_cells) == len(KNOB_CONFIGS) * len(KNOB_CELLS) * 3 == 72
    outside = {(c.config, c.cell, c.metric): round(c.ratio, 3) for c in all_cells if not c.within}
    assert set(outside) == set(KNOB_EXCEPTIONS), outside
    # the exceptions are the 128-token bursts' TTFT only, never a throughput or a TPOT
    assert all(metric == "mean TTFT ms" and cell.startswith("128x") for _, cell, metric in KNOB_EXCEPTIONS)


def test_knob_effects_have_the_measured_sign_where_they_are_large() -> None:
    for c in cells():
        predicted, measured = c.effect
        if c.config != "base" and abs(measured) >= 0.10 and c.metric != "mean TTFT ms":
            assert predicted * measured > 0 and abs(predicted - measured) < 0.1, (c.config, c.cell, c.metric,
                                                                                  predicted, measured)


def test_kv_capacity_per_knob_as_the_servers_logged_it() -> None:
    # KNOBS.md's startup table: "GPU KV cache size" of each server at --gpu-memory-utilization 0.30
    real = {"base": 183_216, "mnbt_2048": 183_888, "kv_fp8": 365_952, "spec_ngram": 156_160}
    hw = Hardware.for_gpu(H200)
    for cf, tokens in real.items():
        kn = knobs_from_flags(*parse_knob_cmd((CAPTURE / "logs" / f"{cf}.cmd").read_text(encoding="utf-8")))
        mem = memory_plan(Catalog.load().model("dummy-qwen3-8b"), hw, tp=1, gpu_memory_utilization=0.30,
                          max_num_batched_tokens=kn.max_num_batched_tokens or 8192, kv_cache_dtype=kn.kv_cache_dtype,
                          v1_runner=kn.cpu_drafter)
        assert abs(mem.kv_tokens / tokens - 1) < 0.01, (cf, mem.kv_tokens, tokens)
