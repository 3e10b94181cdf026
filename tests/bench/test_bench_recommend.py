"""Recommendations from the design note's table: winners per objective, the four factors, noise, thin evidence."""

from __future__ import annotations

from tui.core.bench import recommend as rec_mod
from tui.core.bench.stats import Interval, confidence_interval
from tui.core.bench.table import Cell
from tui.core.models import Workload

WL = {"decode-heavy": Workload("decode-heavy", 512, 2048), "prefill-heavy": Workload("prefill-heavy", 7500, 200)}
# the seed experiment (2x B200, Qwen3.6-27B-NVFP4): TPS and mean TPOT per topology and workload
SEED = {("dp2", "decode-heavy"): (8245, 11.4), ("tp2", "decode-heavy"): (7655, 12.2),
        ("1p1d", "decode-heavy"): (6023, 14.8), ("dp2", "prefill-heavy"): (2230, 32.8),
        ("tp2", "prefill-heavy"): (1545, 44.1), ("1p1d", "prefill-heavy"): (1330, 9.9)}


def _cells(table: dict[tuple[str, str], tuple[float, float]]) -> list[Cell]:
    out = []
    for (topo, wl), (tps, tpot) in table.items():
        c = Cell(topo, wl, None)
        c.values = {"output_throughput": Interval(tps, 0.0, 1), "mean_tpot_ms": Interval(tpot, 0.0, 1),
                    "median_tpot_ms": Interval(tpot, 0.0, 1), "p99_tpot_ms": Interval(tpot * 1.1, 0.0, 1),
                    "mean_ttft_ms": Interval(1000.0 if topo != "1p1d" else 1400.0, 0.0, 1),
                    "completed": Interval(128, 0.0, 1)}
        out.append(c)
    return out


def test_design_note_table_gives_the_design_note_verdicts() -> None:
    rec = rec_mod.recommend(_cells(SEED), WL, gpus=2)
    tps = {v.workload: v for v in rec.objectives["max_throughput"]}
    tpot = {v.workload: v for v in rec.objectives["min_tpot"]}
    assert tps["decode-heavy"].winner == "dp2" and tps["prefill-heavy"].winner == "dp2"
    assert tps["decode-heavy"].margin == (8245 - 7655) / 7655
    assert tps["decode-heavy"].driver == "GPU count"
    assert tpot["prefill-heavy"].winner == "1p1d" and tpot["decode-heavy"].winner == "dp2"
    assert tpot["prefill-heavy"].runner_up == "dp2"
    assert tpot["prefill-heavy"].driver == "prefill:decode work ratio"
    assert rec.summary["max_throughput"].startswith("dp2:")
    assert rec.summary["min_tpot"].startswith("depends on the workload")
    f = rec.factors["prefill-heavy"]
    assert f[0].startswith("prefill:decode work ratio: 7500 prompt / 200 output") and "prefill-dominated" in f[0]
    assert f[2].startswith("GPU count: 2 GPU(s)")
    assert "3.3× lower" in f[3]  # 1P1D's TPOT 9.9 ms vs DP's 32.8 ms
    assert rec.slo_derived and rec.slo["prefill-heavy"] == {"tpot": round(1.5 * 9.9, 1)}
    text = rec_mod.render(rec)
    assert "The evidence is thin" in text and "saturation only" in text


def test_within_noise_margins_are_said() -> None:
    close = dict(SEED)
    close[("tp2", "decode-heavy")] = (8245 * 0.99, 12.2)  # 1 % behind: inside the 2 % run-to-run noise
    rec = rec_mod.recommend(_cells(close), WL, gpus=2)
    v = next(v for v in rec.objectives["max_throughput"] if v.workload == "decode-heavy")
    assert v.within_noise and "(within noise)" in rec.summary["max_throughput"]
    assert any("less than run-to-run noise" in n for n in rec.evidence)


def test_overlapping_confidence_intervals_are_noise_even_above_two_percent() -> None:
    a, b = _cells({("dp2", "decode-heavy"): (8000, 11.0), ("tp2", "decode-heavy"): (7600, 12.0)})
    a.values["output_throughput"] = confidence_interval([7000, 9000, 8000])
    b.values["output_throughput"] = confidence_interval([7500, 7700, 7600])
    rec = rec_mod.recommend([a, b], WL, gpus=2, repeats=3)
    v = rec.objectives["max_throughput"][0]
    assert v.margin is not None and v.margin > 0.02 and v.within_noise
    assert not any("no repeats" in n for n in rec.evidence)


def test_noise_floor_covers_the_real_rerun() -> None:
    """The noise floor is at least the difference between two real runs of one server (fixtures)."""
    import json

    from tests.bench.benchpaths import BENCH1, BENCH2, RERUN1, RERUN2

    for a, b in ((BENCH1, RERUN1), (BENCH2, RERUN2)):
        x = json.loads(a.read_text())["output_throughput"]
        y = json.loads(b.read_text())["output_throughput"]
        assert abs(x - y) / max(x, y) < rec_mod.NOISE_FLOOR
