"""The startup phases the playbook's whole-log rules judge, on the real H200 logs."""

from __future__ import annotations

from tests.conftest import H200
from tui.core.launch.phases import PhaseTracker


def _phases(name: str) -> list[str]:
    tracker = PhaseTracker()
    seen: list[str] = []
    for line in (H200 / name).read_text(encoding="utf-8").split("\n"):
        update = tracker.feed(line)
        if update is not None and (not seen or seen[-1] != update.phase.key):
            seen.append(update.phase.key)
    return seen


def test_flashinfer_sampler_line_does_not_skip_the_compile_phases() -> None:
    # "Using FlashInfer for top-p & top-k sampling." is printed right after model loading, before torch.compile:
    # it must not move the tracker to the warm-up phase, or every later compile/KV line would be ignored
    assert _phases("failures/fail_flashinfer_no_nvcc.log") == [
        "args", "config", "engine_init", "loading", "loaded", "compiling", "compiled", "kv_cache", "warmup",
        "cuda_graphs", "graphs_done"]
    assert _phases("failures/fail_flashinfer_cudahome_empty.log")[-4:] == ["compiling", "compiled", "kv_cache",
                                                                          "warmup"]
    assert _phases("startup/main.log")[-1] == "api_up"
