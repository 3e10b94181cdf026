"""A 1P1D run on the simulated host stores its KV-transfer figures and TTFT breakdown; a run whose KV crawls
(simulated TCP fallback) is flagged kv-slow-path and left out of the recommendation."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

from tests.helpers import cli, layout_port_args
from tui.core.bench import stats
from tui.core.bench.recommend import recommend
from tui.core.bench.table import Cell
from tui.core.models import Workload

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return cli(*args, timeout=timeout)


def test_1p1d_run_keeps_transfer_figures_and_breakdown_and_flags_a_slow_path() -> None:
    up = _cli("up", "--sim", "--sim-gpu", "h200", "--sim-gpus", "2", "--sim-startup", "1", "--sim-fault",
              "kv-slow-path", "--model", "dummy-qwen3-8b", "--topology", "1p1d", *layout_port_args())
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        bench = _cli("bench", "--input-len", "2048", "--output-len", "16", "--num-prompts", "8", "--warmup", "0")
        assert bench.returncode == 0, bench.stderr[-3000:]
        assert "TTFT breakdown (mean" in bench.stderr and "KV transfer:" in bench.stderr
        assert "kv-slow-path" in bench.stderr or "far below the nvlink link" in bench.stderr
        res = _cli("results", "--format", "json")
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout)
        (run,) = data["runs"]
        assert "kv-slow-path" in run["flags"]
        kv = run["kv_xfer"]
        assert kv["transfers"] >= 8 and kv["bytes"] > 0 and kv["slow_path"] is True
        assert kv["link"]["kind"] == "nvlink" and kv["gb_per_s"] < 1.0
        b = run["ttft_breakdown"]
        assert b["transfer_share"] > 0.5  # TCP-speed transfers are most of the TTFT
        assert b["prefill"]["mean_ms"] is not None and b["decode_first_token"]["mean_ms"] is not None
        (row,) = data["rows"]
        assert row["kv_ttft_share_pct"] > 50
        table = _cli("results")
        assert "KV xfer % TTFT" in table.stdout
    finally:
        _cli("down")


def _cell(topology: str, tps: float, flags: list[str]) -> Cell:
    c = Cell(topology, "w", None, flags=flags)
    for key, v in (("output_throughput", tps), ("mean_tpot_ms", 10.0), ("median_tpot_ms", 10.0)):
        c.values[key] = stats.confidence_interval([v])
    return c


def test_slow_path_runs_are_left_out_of_the_recommendation_unless_asked() -> None:
    cells = [_cell("tp2", 1000.0, []), _cell("dp2", 900.0, []), _cell("1p1d", 5000.0, ["kv-slow-path"])]
    w = {"w": Workload("w", 512, 512)}
    rec = recommend(cells, w, gpus=2)
    assert rec.objectives["max_throughput"][0].winner == "tp2"
    # with the slow 1P1D left out, tp2 alone is judged: no winner, and what is missing is said (issue 23)
    alone = recommend([cells[0], cells[2]], w, gpus=2).objectives["max_throughput"][0]
    assert alone.winner is None and alone.missing == "only tp2 usable on w (1p1d left out: see the evidence)"
    assert rec.excluded and "1p1d" in rec.excluded[0]
    assert any("left out: 1p1d" in e for e in rec.evidence)
    asked = recommend(cells, w, gpus=2, include_flagged=("kv-slow-path",))
    assert asked.objectives["max_throughput"][0].winner == "1p1d" and not asked.excluded
    assert math.isinf(Workload("w", 1, 1).request_rate)


def _transfer_line(transfers: list[tuple[float, float, float, int]]) -> str:
    """The simulated decode server's "KV Transfer metrics" log line for ``transfers`` (xfer s, post s, bytes,
    descriptors), as its periodic stats logger writes it."""
    from types import SimpleNamespace

    from tui.sim.serverstate import ServerState

    said: list[str] = []
    state = SimpleNamespace(xfer_log=list(transfers), api="APIServer",
                            log=SimpleNamespace(info=lambda _proc, _where, text: said.append(text)))
    ServerState._log_transfers(state)  # type: ignore[arg-type]
    (line,) = said
    return line


def test_the_simulated_transfer_throughput_is_vllms_mb_over_transfer_time() -> None:
    """vLLM 0.24's figure is MB moved over the time spent moving them (the H200 fixture: 72 MB per transfer,
    191.222 ms each, 376.526 MB/s): a healthy simulated NVLink transfer is not read as the slow path because the
    10 s logging interval was mostly idle."""
    from tui.core.playbook.book import load_playbook

    fast = _transfer_line([(0.002127, 0.0008, 308.675e6, 14976)] * 18)
    assert "Throughput (MB/s)=145122.238," in fast
    fixture_like = _transfer_line([(0.191222, 0.008, 72.0e6, 2304), (0.191222, 0.008, 72.0e6, 2304)])
    assert "Avg MB per transfer=72.000, Throughput (MB/s)=376.526," in fixture_like
    book = load_playbook(operator=False)
    assert book.matcher("decode-0").feed(f"(APIServer pid=1) INFO 12-02 01:13:30 [metrics.py:103] {fast}") == []
    slow = book.matcher("decode-0").feed(f"(APIServer pid=1) INFO 12-02 01:13:30 [metrics.py:103] {fixture_like}")
    assert [d.entry_id for d in slow] == ["nixl-slow-transfer"]
