"""On the simulated host, a start with a FlashInfer JIT compile (ninja and nvcc children under the server, a cache
that grows, a silent log) shows the compile as a sub-phase, does not stall out, and the second start, with the
cache warm, shows the warm ETA and compiles nothing."""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers import cli, layout_port_args
from tui.core.launch.history import StartupHistory

ROOT = Path(__file__).resolve().parent.parent




def test_jit_compile_is_a_sub_phase_not_a_stall_and_the_second_start_is_warm() -> None:
    # a compressed start of 4 s: the compile (85 s of a ~121 s timeline) lasts ~2.8 s with no log line, over the
    # stall timeout of 2 s
    args = ("up", "--sim", "--sim-gpu", "h200", "--sim-gpus", "1", "--sim-startup", "4", "--sim-fault",
            "flashinfer-jit", "--model", "dummy-qwen3-8b", "--topology", "tp1", "--stall-timeout", "2",
            *layout_port_args())
    first = cli(*args)
    try:
        assert first.returncode == 0, first.stderr[-3000:]
        # the compile is named while it runs; its three nvcc jobs are counted (a 2 s sample may catch it before
        # ninja has started them, and the next one only at its end: "done (3 nvcc jobs, …)")
        assert "↳ JIT-compiling FlashInfer sampling kernels (" in first.stderr, first.stderr[-3000:]
        assert "(3 nvcc jobs" in first.stderr, first.stderr[-3000:]
        assert "FlashInfer JIT (writing" in first.stderr
        lines = first.stderr.splitlines()
        jit = next(i for i, line in enumerate(lines) if "JIT-compiling FlashInfer" in line)
        captured = next(i for i, line in enumerate(lines) if "CUDA graphs captured" in line)
        ready = next(i for i, line in enumerate(lines) if "engine ready" in line)
        assert captured < jit < ready  # during the log's silence after graph capture
    finally:
        cli("down")
    hist = StartupHistory(Path(os.environ["DISAGG_TUI_STATE_DIR"]))
    (rec,) = hist.records()
    assert rec.cache_state == "cold" and dict(rec.subphases).get("flashinfer_jit", 0) > 2.0
    second = cli(*args)
    try:
        assert second.returncode == 0, second.stderr[-3000:]
        assert "JIT-compiling FlashInfer" not in second.stderr
        assert "(warm cache; history (cold starts less their JIT compiles)" in second.stderr, second.stderr[:3000]
    finally:
        cli("down")
    warm = [r for r in hist.records() if r.cache_state == "warm"]
    assert len(warm) == 1 and warm[0].startup_s < rec.startup_s
