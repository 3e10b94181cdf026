"""Print the simulator's calibration table: simulated figures against the real H200 captures and the design note's
2×B200 table, with ratios. Virtual time only (the performance model and schedulers the simulated server paces its
tokens by); runs in a few seconds.

    python benchmarks/sim_calibration.py
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.core.plan.gpuspecs import B200, H200  # noqa: E402
from tui.core.profiles import Catalog  # noqa: E402
from tui.sim.benchsim import BenchResult, simulate_bench  # noqa: E402
from tui.sim.faults import JIT_STALL_S  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "vllm-0.24.0-h200"
# ../shared/DESIGN.md, "Background": 2× B200, vLLM 0.24.0, 128 prompts at once, ignore_eos
# (decode-heavy tok/s, prefill-heavy tok/s, decode-heavy TPOT ms, prefill-heavy TPOT ms)
DESIGN = {
    ("qwen3.6-27b-nvfp4", "dp2"): (8245, 2230, 11.4, 32.8),
    ("qwen3.6-27b-nvfp4", "tp2"): (7655, 1545, 12.2, 44.1),
    ("qwen3.6-27b-nvfp4", "1p1d"): (6023, 1330, 14.8, 9.9),
    ("gemma-4-26b-a4b-fp8", "tp2"): (7069, 1730, 13.6, 40.9),
    ("gemma-4-26b-a4b-fp8", "1p1d"): (5766, 1474, 17.9, 8.7),
}


def real(name: str) -> dict[str, float]:
    data = json.loads((FIXTURES / "bench" / name).read_text(encoding="utf-8"))
    return {k: float(v) for k, v in data.items() if isinstance(v, int | float)}


def row(label: str, sim: float, ref: float, unit: str) -> str:
    return f"| {label} | {sim:,.1f} {unit} | {ref:,.1f} {unit} | {sim / ref:.2f} |"


def main() -> None:
    cat = Catalog.load()
    dummy = cat.model("dummy-qwen3-8b")
    b1 = real("bench1_in512_out2048_n128_trimmed.json")
    b2 = real("bench2_in7500_out200_n128.json")
    log = (FIXTURES / "startup" / "main.log").read_text(encoding="utf-8")
    prompt_peak = max(float(x) for x in re.findall(r"Avg prompt throughput: ([\d.]+) tokens/s", log))
    jit = simulate_bench(dummy, H200, "tp1", input_len=512, output_len=2048, jit_stall_s=JIT_STALL_S)
    steady = simulate_bench(dummy, H200, "tp1", input_len=512, output_len=2048)
    pre = simulate_bench(dummy, H200, "tp1", input_len=7500, output_len=200)
    print("## (a) one H200, dummy-qwen3-8b (bf16), vLLM 0.24 captures\n")
    print("| metric | simulated | real | sim/real |\n|---|---|---|---|")
    print(row("512→2048 output throughput (with the first-run Triton JIT stall)", jit.output_throughput,
              b1["output_throughput"], "tok/s"))
    print(row("512→2048 mean TTFT (with the JIT stall)", jit.mean_ttft_ms, b1["mean_ttft_ms"], "ms"))
    print(row("512→2048 mean TPOT", steady.mean_tpot_ms, b1["mean_tpot_ms"], "ms"))
    print(row("512→2048 output throughput, steady state (no JIT)", steady.output_throughput,
              b1["output_throughput"], "tok/s"))
    print(row("7500→200 output throughput", pre.output_throughput, b2["output_throughput"], "tok/s"))
    print(row("7500→200 mean TPOT", pre.mean_tpot_ms, b2["mean_tpot_ms"], "ms"))
    print(row("7500→200 mean TTFT", pre.mean_ttft_ms, b2["mean_ttft_ms"], "ms"))
    print(row("7500→200 median TTFT", pre.median_ttft_ms, b2["median_ttft_ms"], "ms"))
    print(row("7500→200 median ITL", pre.median_itl_ms, b2["median_itl_ms"], "ms"))
    print(row("peak prompt throughput (10 s stats line)", pre.peak_prompt_throughput, prompt_peak, "tok/s"))
    print("\n## (b) 2× B200, design-note table (shape: DP > TP > 1P1D; 1P1D prefill-heavy TPOT ≈ ¼)\n")
    print("| model | topology | decode-heavy tok/s sim (design, ratio) | prefill-heavy tok/s | decode-heavy TPOT ms "
          "| prefill-heavy TPOT ms |")
    print("|---|---|---|---|---|---|")
    results: dict[tuple[str, str], tuple[BenchResult, BenchResult]] = {}
    for (mid, topo), ref in DESIGN.items():
        m = cat.model(mid)
        d = simulate_bench(m, B200, topo, input_len=512, output_len=2048)
        p = simulate_bench(m, B200, topo, input_len=7500, output_len=200)
        results[(mid, topo)] = (d, p)
        cells = [(d.output_throughput, ref[0]), (p.output_throughput, ref[1]), (d.mean_tpot_ms, ref[2]),
                 (p.mean_tpot_ms, ref[3])]
        print(f"| {mid} | {topo} | " + " | ".join(f"{s:,.1f} ({r:,}, {s / r:.2f})" for s, r in cells) + " |")
    q = {t: results[("qwen3.6-27b-nvfp4", t)] for t in ("dp2", "tp2", "1p1d")}
    print("\nqwen3.6 1P1D prefill-heavy TPOT / DP's: "
          f"{q['1p1d'][1].mean_tpot_ms / q['dp2'][1].mean_tpot_ms:.2f} (design 0.30); / TP's: "
          f"{q['1p1d'][1].mean_tpot_ms / q['tp2'][1].mean_tpot_ms:.2f} (design 0.22)")
    g = {t: results[("gemma-4-26b-a4b-fp8", t)] for t in ("tp2", "1p1d")}
    print("gemma 1P1D prefill-heavy TPOT / TP's: "
          f"{g['1p1d'][1].mean_tpot_ms / g['tp2'][1].mean_tpot_ms:.2f} (design 0.21)")


if __name__ == "__main__":
    main()
