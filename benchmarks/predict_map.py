"""How long the decision map takes (``disagg-tui predict``: the simulator's performance model in virtual time),
against one cell measured in the same run as the reference, for the seed's two models on 2× B200 (no nvcc).

    python benchmarks/predict_map.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.core.models import Catalog  # noqa: E402
from tui.core.plan.gpuspecs import B200  # noqa: E402
from tui.sim.predict import SEED_POINTS, decision_map, predict, stack_for  # noqa: E402


def main() -> None:
    cat = Catalog.load()
    stack = stack_for(B200, nvcc=False)
    print("| model | one cell (512→2048, 3 topologies) s | default map s | cells | map / one cell |")
    print("|---|---|---|---|---|")
    for mid in ("qwen3.6-27b-nvfp4", "gemma-4-26b-a4b-fp8"):
        prof = cat.model(mid)
        t0 = time.perf_counter()
        for topo in ("dp2", "tp2", "1p1d"):
            predict(prof, B200, topo, input_len=512, output_len=2048, stack=stack)
        one = time.perf_counter() - t0
        t0 = time.perf_counter()
        m = decision_map(prof, B200, 2, stack=stack, points=[(i, o) for i, o, _ in SEED_POINTS])
        full = time.perf_counter() - t0
        print(f"| {mid} | {one:.2f} | {full:.2f} | {len(m.cells)} | {full / one:.1f} |")


if __name__ == "__main__":
    main()
