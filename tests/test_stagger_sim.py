"""Servers sharing a GPU start one after the other: on the simulated host (which reproduces vLLM's memory-profiling
interference) a 1P1D layout on one GPU gives both servers the KV cache each gets alone, and only half without the
stagger."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import cli, layout_port_args
from tui.core.launch.lifecycle import shared_gpu_waits
from tui.core.launch.state import StateStore
from tui.core.models import Catalog
from tui.core.plan.gpuspecs import H200
from tui.sim.perfmodel import Hardware, memory_plan

ROOT = Path(__file__).resolve().parent.parent
KV = re.compile(r"Available KV cache memory: ([\d.]+) GiB")




def _kv_after_up(*extra: str) -> tuple[dict[str, float], str]:
    up = cli("up", "--sim", "--sim-gpu", "h200", "--sim-gpus", "1", "--sim-startup", "1", "--model",
              "dummy-qwen3-8b", "--topology", "1p1d", "--gpus", "0,0", "--allow-shared-gpus",
              "--gpu-memory-utilization", "0.4", *layout_port_args(), *extra)
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        rec = StateStore().active()
        assert rec is not None
        kv = {}
        for p in rec.processes:
            if p.role == "proxy":
                continue
            found = KV.findall(Path(p.log).read_text())
            kv[p.name] = float(found[-1])
        return kv, up.stderr
    finally:
        cli("down")


def test_waits_only_for_servers_on_the_same_gpu() -> None:
    assert shared_gpu_waits([("prefill-0", [0]), ("decode-0", [0]), ("proxy", [])]) == {"decode-0": ("prefill-0",)}
    assert shared_gpu_waits([("prefill-0", [0]), ("decode-0", [1])]) == {}
    assert shared_gpu_waits([("p", [0, 1]), ("d0", [1]), ("d1", [2]), ("d2", [0, 2])]) == {
        "d0": ("p",), "d2": ("p", "d1")}


def test_shared_gpu_1p1d_gets_the_full_kv_cache_only_when_staggered() -> None:
    # the cache one server gets on the GPU by itself (what a start one after the other gives each)
    single = memory_plan(Catalog.load().model("dummy-qwen3-8b"), Hardware.for_gpu(H200), tp=1,
                         gpu_memory_utilization=0.4, max_num_batched_tokens=8192).kv_gib
    staggered, err = _kv_after_up()
    assert set(staggered) == {"prefill-0", "decode-0"}, staggered
    assert "waits: shares GPU 0 with prefill-0" in err, err[-4000:]
    assert all(v >= 0.9 * single for v in staggered.values()), (staggered, single)
    # both at once: each one's window from its memory baseline to the end of its profiling run must overlap the
    # other's weight loading; on a start compressed to 1 s a scheduling skew of a few hundred ms on a loaded
    # machine (two test workers) moves them apart, so this start is compressed less (the last --sim-startup wins)
    together, _ = _kv_after_up("--no-stagger", "--sim-startup", "6")
    assert set(together) == {"prefill-0", "decode-0"}, together
    assert min(together.values()) < 0.75 * single, (together, single)  # the later one counted the other
