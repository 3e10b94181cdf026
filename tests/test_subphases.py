"""Sub-phases of a silent start from its process tree: the real H200 capture (a FlashInfer JIT compile under the
engine while the log said nothing), caches as progress, the cache state."""

from __future__ import annotations

from pathlib import Path

from tui.core.launch import subphases as sp

FIX = Path(__file__).parent / "fixtures" / "vllm-0.24.0-h200-default-env"


def test_fixture_snapshots_give_the_sub_phases_in_order_with_their_times() -> None:
    snaps = sp.parse_snapshots((FIX / "process_tree_during_start.txt").read_text().splitlines())
    assert len(snaps) > 60
    tracker = sp.SubPhaseTracker()
    labels = []
    progress_during_silence = []
    for t, log_bytes, procs in snaps:
        for tr in tracker.feed(t, procs):
            labels.append((t, tr.key, tr.state, tr.label))
        if 118 <= t <= 195:
            progress_during_silence.append((tracker.progress, log_bytes))
    tracker.finish(snaps[-1][0])
    order = [(k, round(a), round(b)) for k, a, b in tracker.history]
    keys = [k for k, _, _ in order]
    assert keys[:3] == ["triton_ptxas", "triton_ptxas", "flashinfer_jit"], order
    assert order[0][1] == 85  # Triton's ptxas, then torch's
    assert "ptxas (torch inductor)" in [lab for _, k, _, lab in labels if k == "triton_ptxas"][-2]
    start, end = order[2][1], order[2][2]
    assert start == 115 and 195 <= end <= 205  # 08:11:36 to 08:13:01 in the capture
    named = [lab for _, k, s, lab in labels if k == "flashinfer_jit" and s == "running"]
    assert named[0].startswith("JIT-compiling FlashInfer sampling kernels (") and "nvcc job" in named[0]
    assert any("3 nvcc jobs" in lab for lab in named), named
    # the log was silent (its size did not change) while the compile ran, and the compile counted as progress
    assert len({b for _, b in progress_during_silence}) == 1
    assert sum(p for p, _ in progress_during_silence) >= len(progress_during_silence) * 0.8


def test_an_idle_compiler_and_a_still_cache_are_no_progress(tmp_path: Path) -> None:
    ninja = sp.ProcSample(10, 1, f"ninja -v -C {tmp_path}/flashinfer/0.6.12/90a/cached_ops/sampling", cpu_s=1.0)
    nvcc = sp.ProcSample(11, 10, "/usr/local/cuda/bin/nvcc -c x.cu", cpu_s=5.0)
    tr = sp.SubPhaseTracker()
    tr.feed(0.0, [ninja, nvcc], {"vllm": ("d", 100)})
    tr.feed(1.0, [ninja, sp.ProcSample(11, 10, nvcc.cmdline, cpu_s=6.0)], {"vllm": ("d", 100)})
    assert tr.progress  # CPU moved
    tr.feed(2.0, [ninja, sp.ProcSample(11, 10, nvcc.cmdline, cpu_s=6.0)], {"vllm": ("d", 100)})
    assert not tr.progress  # neither CPU nor cache moved: a stall if it lasts
    out = tr.feed(3.0, [], {"vllm": ("d", 5_000_100)})
    assert tr.progress and any(t.key == "cache_vllm" and "torch.compile (cache miss: writing d, +5.0 MB)" in t.label
                               for t in out)
    assert any(t.key == "flashinfer_jit" and t.state == "done" for t in out)


def test_cache_state(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "VLLM_CACHE_ROOT": str(tmp_path / "v"), "FLASHINFER_WORKSPACE_BASE": str(tmp_path)}
    assert sp.cache_state(env, ["vllm", "serve"]) == "cold"
    so = tmp_path / ".cache" / "flashinfer" / "0.6.12" / "90a" / "cached_ops" / "sampling" / "sampling.so"
    so.parent.mkdir(parents=True)
    so.write_bytes(b"x")
    assert sp.cache_state(env, ["vllm", "serve", "--enforce-eager"]) == "warm"
    assert sp.cache_state(env, ["vllm", "serve"]) == "cold"  # no torch.compile cache yet
    (tmp_path / "v" / "torch_compile_cache" / "abc").mkdir(parents=True)
    assert sp.cache_state(env, ["vllm", "serve"]) == "warm"
    assert sp.cache_state({**env, "VLLM_USE_FLASHINFER_SAMPLER": "0"}, ["vllm"]) == "warm"


def test_a_sub_phase_needs_its_evidence_not_a_touched_folder(tmp_path: Path) -> None:
    """Issue 22, finding 11 (a cold start on the H200): vLLM writes ``modelinfos`` under its cache root while it
    resolves the model config, ~35 s before torch.compile runs, and FlashInfer's autotuner appends 216 bytes to its
    ``flashinfer_jit.log`` during the KV-cache and CUDA-graph phases with nothing compiled. Neither is a compile:
    torch.compile is shown from its own cache's first write, with its time counted from there, and ends when the
    writing stops; no "FlashInfer JIT (… +0 kB)"."""
    env = {"HOME": str(tmp_path), "VLLM_CACHE_ROOT": str(tmp_path / "vllm"), "FLASHINFER_WORKSPACE_BASE": str(tmp_path)}
    dirs = sp.cache_dirs(env)
    tracker = sp.SubPhaseTracker()

    def feed(t: float) -> list[sp.Transition]:
        return tracker.feed(t, [], sp.cache_sizes(dirs))

    assert feed(0.0) == []
    info = tmp_path / "vllm" / "modelinfos" / "Qwen3ForCausalLM.json"  # resolving the model config
    info.parent.mkdir(parents=True)
    info.write_bytes(b"{}" * 60_000)
    assert feed(2.0) == []  # not torch.compile's cache: nothing shown
    compiled = tmp_path / "vllm" / "torch_compile_cache" / "8f7ed09847" / "rank_0_0" / "backbone" / "artifact"
    compiled.parent.mkdir(parents=True)
    compiled.write_bytes(b"\0" * 1_000_000)
    (out,) = feed(37.0)  # torch.compile runs
    assert out.key == "cache_vllm" and out.state == "running" and out.elapsed_s == 0.0
    assert out.label.startswith("torch.compile (cache miss: writing ") and "torch_compile_cache, +1.0 MB)" in out.label
    with compiled.open("ab") as f:
        f.write(b"\0" * 1_000_000)
    (out,) = feed(39.0)
    assert out.elapsed_s == 2.0 and "+2.0 MB" in out.label
    log = tmp_path / ".cache" / "flashinfer" / "0.6.12" / "90a" / "flashinfer_jit.log"  # the autotuner, no compile
    log.parent.mkdir(parents=True)
    log.write_text("2026-12-01 08:11:23,298 - INFO - autotuner.py:622 - flashinfer.jit: [Autotuner]: Autotuning "
                   "process starts ...\n2026-12-01 08:11:23,327 - INFO - autotuner.py:641 - flashinfer.jit: "
                   "[Autotuner]: Autotuning process ends\n")
    assert feed(41.0) == []
    (done,) = feed(45.0)  # torch.compile's cache has been still for 6 s: its sub-phase is over
    assert done.key == "cache_vllm" and done.state == "done" and done.elapsed_s == 2.0
    assert done.label == "torch.compile cache written (+2.0 MB in 2 s)"
    assert feed(60.0) == []
    so = tmp_path / ".cache" / "flashinfer" / "0.6.12" / "90a" / "cached_ops" / "sampling" / "sampling.so"
    so.parent.mkdir(parents=True)
    so.write_bytes(b"\x7fELF" + b"\0" * 200_000)  # a real JIT build writes its module here
    (fi,) = feed(62.0)
    assert fi.key == "cache_flashinfer" and fi.label.startswith("FlashInfer JIT (writing ") and "+0.2 MB" in fi.label
