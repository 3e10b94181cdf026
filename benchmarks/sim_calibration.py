"""Print the simulator's calibration table: simulated figures against the real H200 captures (bound ±10 %), the
design note's 2×B200 seed table (bound ±15 %) and the real H200 tp1 grid (bound ±10 %), with ratios. Virtual time
only (the performance model and schedulers the simulated server paces its tokens by); runs in a few seconds. Exit 1
when a cell is past its bound.

    python benchmarks/sim_calibration.py
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.core.models import Catalog  # noqa: E402
from tui.sim.calibration import (  # noqa: E402
    GRID_BOUND,
    GRID_PROMPTS,
    H200_BOUND,
    SEED_BOUND,
    SEED_TABLE,
    CalCell,
    H200Reference,
    grid_cells,
    h200_cells,
    h200_runs,
    seed_cells,
)
from tui.sim.perfmodel import H200_CAPTURE_STACK, SEED_STACK  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "vllm-0.24.0-h200"


def real(name: str) -> dict[str, float]:
    data = json.loads((FIXTURES / "bench" / name).read_text(encoding="utf-8"))
    return {k: float(v) for k, v in data.items() if isinstance(v, int | float)}


def h200_reference() -> H200Reference:
    log = (FIXTURES / "startup" / "main.log").read_text(encoding="utf-8")
    peak = max(float(x) for x in re.findall(r"Avg prompt throughput: ([\d.]+) tokens/s", log))
    return H200Reference(real("bench1_in512_out2048_n128_trimmed.json"), real("bench2_in7500_out200_n128.json"), peak)


def mark(c: CalCell) -> str:
    return "" if c.within else " **OUT**"


def main() -> int:
    cat = Catalog.load()
    dummy = cat.model("dummy-qwen3-8b")
    a = h200_cells(dummy, h200_reference())
    print(f"## (a) one H200, dummy-qwen3-8b (bf16), vLLM 0.24 captures — {H200_CAPTURE_STACK.describe()}; "
          f"bound ±{H200_BOUND:.0%}\n")
    print("| metric | simulated | real | sim/real |\n|---|---|---|---|")
    for c in a:
        print(f"| {c.label} | {c.simulated:,.1f} | {c.reference:,.1f} | {c.ratio:.2f}{mark(c)} |")
    steady = h200_runs(dummy)[1]
    print(f"| (no reference) 512→2048 output throughput, steady state | {steady.output_throughput:,.1f} | — | — |")
    profiles = {mid: cat.model(mid) for mid, _ in SEED_TABLE}
    b, refused = seed_cells(profiles)
    print(f"\n## (b) 2× B200, the seed's table (DESIGN.md) — {SEED_STACK.describe()}; decode-heavy as each server's "
          f"first run; bound ±{SEED_BOUND:.0%}\n")
    print("| model | topology | decode-heavy tok/s sim (seed, ratio) | prefill-heavy tok/s | decode-heavy TPOT ms "
          "| prefill-heavy TPOT ms |")
    print("|---|---|---|---|---|---|")
    for i in range(0, len(b), 4):
        mid, topo = b[i].label.split()[:2]
        print(f"| {mid} | {topo} | " + " | ".join(f"{c.simulated:,.1f} ({c.reference:,.1f}, {c.ratio:.2f}{mark(c)})"
                                                 for c in b[i:i + 4]) + " |")
    for mid, topo, why in refused:
        print(f"| {mid} | {topo} | {why} | | | |")
    c = grid_cells(dummy)
    print(f"\n## (c) one H200, the tp1 grid (TP1-GRID.md) — {H200_CAPTURE_STACK.describe()}; {GRID_PROMPTS} prompts "
          f"at once, a warm server; bound ±{GRID_BOUND:.0%}\n")
    print("| input → output | output tok/s sim (real, ratio) | mean TTFT ms | mean TPOT ms |\n|---|---|---|---|")
    for i in range(0, len(c), 3):
        cell = c[i].label.split()[0]
        print(f"| {cell} | " + " | ".join(f"{x.simulated:,.1f} ({x.reference:,.1f}, {x.ratio:.2f}{mark(x)})"
                                          for x in c[i:i + 3]) + " |")
    cells = a + b + c
    worst = max(cells, key=lambda c: abs(c.ratio - 1) / c.bound)
    out = [c for c in cells if not c.within]
    print(f"\n{len(cells) - len(out)} of {len(cells)} cells within their bound; the closest to its bound: "
          f"{worst.label} at {worst.ratio:.2f} (±{worst.bound:.0%})")
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main())
