"""Fixture paths of the benchmark engine's tests."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
H200 = FIXTURES / "vllm-0.24.0-h200"
CPU = FIXTURES / "vllm-0.24.0-cpu"
BENCH1 = H200 / "bench" / "bench1_in512_out2048_n128_trimmed.json"
BENCH2 = H200 / "bench" / "bench2_in7500_out200_n128.json"
RERUN1 = H200 / "rerun" / "bench" / "bench1_in512_out2048_n128_trimmed.json"
RERUN2 = H200 / "rerun" / "bench" / "bench2_in7500_out200_n128.json"
CPU_SAMPLE = CPU / "bench-serve-result-sample-save-detailed.json"
MODEL_DIR = H200 / "model"
