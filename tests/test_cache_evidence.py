"""A start is remembered as cold or warm from what it did, not from its cache folders (issue 22, finding 15: five
real H200 starts, each compiling 15-26 s under its own torch.compile cache key, were stored as "warm" because the
folder was not empty; the ETAs then learnt from the wrong class)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers import cli, layout_port_args
from tui.core import paths
from tui.core.launch.history import StartupHistory
from tui.core.launch.subphases import CompileEvidence

H200 = Path(__file__).parent / "fixtures" / "vllm-0.24.0-h200-default-env" / "server.log"
#: vLLM 0.24's warm-start lines (VLLM-0.24.md §5: decorators.py:311, backends.py:292)
WARM = ["(EngineCore pid=9) INFO 12-01 09:00:01 [decorators.py:311] Directly load AOT compilation from path "
        "/root/.cache/vllm/torch_compile_cache/torch_aot_compile/c8b0d8d3/rank_0_0/model",
        "(EngineCore pid=9) INFO 12-01 09:00:02 [backends.py:292] Directly load the compiled graph(s) for compile "
        "range (1, 8192) from the cache, took 0.512 s",
        "(EngineCore pid=9) INFO 12-01 09:00:02 [monitor.py:53] torch.compile took 3.10 s in total"]


def _evidence(lines: list[str]) -> CompileEvidence:
    ev = CompileEvidence()
    for line in lines:
        ev.feed(line)
    return ev


def test_the_real_cold_start_compiled_and_a_load_is_warm() -> None:
    cold = _evidence(H200.read_text(encoding="utf-8").splitlines())
    assert cold.torch_compile == "miss" and cold.cache_state([], before="warm") == "cold"
    warm = _evidence(WARM)
    assert warm.cache_state([], before="cold") == "warm"
    assert warm.cache_state(["cache_vllm"]) == "warm"  # its own log says it loaded
    assert warm.cache_state(["flashinfer_jit"]) == "cold"  # but the FlashInfer sampler was JIT-compiled
    assert CompileEvidence().cache_state([], before="warm") == "warm"  # nothing said (--enforce-eager): as judged


def test_a_start_that_compiled_into_a_filled_cache_is_remembered_cold() -> None:
    """On the simulated host: caches that other configurations filled, a first start that compiles its own (cold),
    then a second start of the same plan that loads what the first left (warm)."""
    home = paths.state_dir() / "simhome"
    other = home / ".cache" / "vllm" / "torch_compile_cache" / "0123456789" / "rank_0_0" / "backbone"
    other.mkdir(parents=True)
    (other / "cache.bin").write_bytes(b"another configuration")
    so = home / ".cache" / "flashinfer" / "0.6.12" / "90a" / "cached_ops" / "sampling" / "sampling.so"
    so.parent.mkdir(parents=True)
    so.write_bytes(b"\x7fELF")
    args = ("up", "--sim", "--sim-gpu", "h200", "--sim-gpus", "1", "--sim-startup", "0.5", "--model",
            "dummy-qwen3-8b", "--topology", "tp1", *layout_port_args())
    hist = StartupHistory(Path(os.environ["DISAGG_TUI_STATE_DIR"]))
    for expected, log_says in (("cold", "Compiling a graph for compile range"), ("warm", "Directly load")):
        up = cli(*args)
        try:
            assert up.returncode == 0, up.stderr[-3000:]
            assert f"({expected} cache" in up.stderr, up.stderr[:3000]  # the ETA's class, judged before the start
        finally:
            assert cli("down").returncode == 0
        rec = hist.records()[-1]
        assert rec.cache_state == expected, (rec, up.stderr[-2000:])
        log = max((paths.state_dir() / "layouts").glob("*/server.log"), key=lambda p: p.stat().st_mtime)
        assert log_says in log.read_text(encoding="utf-8")
