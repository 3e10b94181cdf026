"""``disagg-tui run --sim``: the whole path — supervisor, simulated vLLM servers, proxy, load generator, table,
recommendation — with the simulator's clock sped up, a compressed start and small workloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import layout_port_args
from tui.cli.main import main
from tui.core.bench.store import find_runs, load_run


def test_sim_campaign_end_to_end(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "wl.yaml").write_text(
        "workloads:\n"
        "  small-decode: {input_len: 64, output_len: 256, num_prompts: 8}\n"
        "  small-prefill: {input_len: 2000, output_len: 16, num_prompts: 8}\n")
    (tmp_path / "dh.yaml").write_text("name: small-decode\ninput_len: 64\noutput_len: 256\nnum_prompts: 8\n")
    (tmp_path / "ph.yaml").write_text("name: small-prefill\ninput_len: 2000\noutput_len: 16\nnum_prompts: 8\n")
    argv = ["run", "--sim", "--sim-gpus", "2", "--sim-startup", "0.3", "--sim-clock", "20",
            "--model", "qwen3.6-27b-nvfp4", "--topology", "dp2,1p1d",
            "--workload", f"{tmp_path / 'dh.yaml'},{tmp_path / 'ph.yaml'}", *layout_port_args(), "--json", "--quiet"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    rows = data["rows"]
    assert {(r["topology"], r["workload"]) for r in rows} == {
        ("dp2", "small-decode"), ("dp2", "small-prefill"), ("1p1d", "small-decode"), ("1p1d", "small-prefill")}
    assert all(r["completed"] == 8 and r["failed"] == 0 for r in rows)
    for r in rows:
        assert {"output_throughput", "mean_tpot_ms", "p99_tpot_ms", "mean_ttft_ms"} <= set(r)
    # simulated figures say so: in the JSON, in every row, in each run's summary, in the printed tables
    assert data["simulated"] is True and data["host"].startswith("sim:") and all(r["simulated"] for r in rows)
    rec = data["recommendation"]
    assert set(rec["objectives"]) == {"max_throughput", "min_tpot", "max_goodput"}
    assert rec["thin"] and rec["factors"]["small-prefill"][0].startswith("prefill:decode work ratio")
    runs = [load_run(p) for p in find_runs([Path(data["campaign"]).name])]
    assert len(runs) == 4
    disagg = [r for r in runs if r.meta.topology == "1p1d"]
    # the decode server's counters say the prompt tokens came over the KV connector (not recomputed)
    assert disagg and all(r.meta.kv_transfer and r.meta.kv_transfer["transferred"] for r in disagg)
    assert all((r.path / "logs").is_dir() and (r.path / "plan.json").exists() for r in runs)
    assert all(r.simulated and r.summary["simulated"] is True for r in runs)
    # every run stored the simulator's prediction for its cell, in the run's (sped-up) wall time
    for r in runs:
        pred = json.loads((r.path / "prediction.json").read_text())
        assert pred["label"] == "PREDICTED" and pred["simulated_run"] is True and pred["topology"] == r.meta.topology
        assert set(pred["ratio"]) == {"output_throughput", "mean_tpot_ms", "mean_ttft_ms"}
        assert r.meta.sim_pacing is not None and r.meta.sim_pacing["clock"] == 20.0
    assert main(["results", Path(data["campaign"]).name]) == 0
    printed = capsys.readouterr().out
    assert "SIMULATED: every run measured on the simulated host" in printed
    started = {r.id: r.meta.started for r in runs}

    # the same command again resumes: every cell is done, nothing is brought up or re-run
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert len(again["rows"]) == 4
    assert {r.id: r.meta.started for r in (load_run(p) for p in find_runs([Path(data["campaign"]).name]))} == started
