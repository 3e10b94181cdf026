"""The simulator as a predictor: the decision map (``predict``), the host calibration (``predict --calibrate``) and
predicted next to measured for stored runs (``results``), on the fixtures' real H200 runs.

The map evaluates the same performance model the simulated server paces with, in virtual time. On the seed's host
(2× B200, no nvcc) its winners at the seed's two workloads must be the ones the seed measured: DP=2 for throughput on
both and for TPOT on decode-heavy, 1P1D for TPOT on prefill-heavy (Qwen3.6); TP=2 and 1P1D likewise for gemma, whose
DP=2 does not start.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, H200
from tui.cli.main import main
from tui.core import paths
from tui.core.bench.store import load_run
from tui.core.models import Catalog
from tui.hosts import predictor

GRID_RUN = FIXTURES / "h200-1p1d-run"
GRID_ID = "bench/1p1d-random-2048x128-20261201-074010"  # its run.json's campaign and name


def predict_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    code = main(["predict", "--sim", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


def winners_at(data: dict, isl: int, osl: int) -> dict[str, str]:  # type: ignore[type-arg]
    cell = next(c for c in data["cells"] if c["input_len"] == isl and c["output_len"] == osl)
    return {o: w["topology"] for o, w in cell["winners"].items()}


def test_map_for_qwen_on_the_seed_host_agrees_with_the_seed(capsys: pytest.CaptureFixture[str]) -> None:
    data = predict_json(capsys, "--model", "qwen3.6-27b-nvfp4", "--gpu", "b200", "--gpus", "2", "--no-nvcc",
                        "--isl", "512,8192", "--osl", "256,2048")
    assert data["label"] == "PREDICTED" and data["topologies"] == ["dp2", "tp2", "1p1d"]
    assert data["stack"].startswith("TRITON_ATTN attention, triton sampler")
    assert data["calibration_source"] == "none" and data["slo_ms"]["tpot"] > 0
    decode, prefill = winners_at(data, 512, 2048), winners_at(data, 7500, 200)
    assert decode["max_throughput"] == "dp2" and decode["min_tpot"] == "dp2"  # seed: 8,245 tok/s, 11.4 ms
    assert prefill["max_throughput"] == "dp2" and prefill["min_tpot"] == "1p1d"  # seed: 2,230 tok/s; 9.9 ms
    # the grid has a crossover for TPOT (long prompts, short outputs go to 1P1D), and the runs to confirm it
    assert any(x["objective"] == "min_tpot" and {x["from"], x["to"]} == {"dp2", "1p1d"} for x in data["crossovers"])
    assert data["suggested_runs"]
    cat = Catalog.load()
    for s in data["suggested_runs"]:  # run takes those cells as workloads
        w = cat.workload(s["workload"])
        assert (w.input_len, w.output_len) == (s["input_len"], s["output_len"])


def test_map_for_gemma_keeps_the_seed_winners_and_its_dp_failure(capsys: pytest.CaptureFixture[str]) -> None:
    data = predict_json(capsys, "--model", "gemma-4-26b-a4b-fp8", "--gpu", "b200", "--gpus", "2", "--no-nvcc",
                        "--isl", "512", "--osl", "2048")
    assert "MoE + data parallel" in data["refused"]["dp2"]
    decode, prefill = winners_at(data, 512, 2048), winners_at(data, 7500, 200)
    assert decode["max_throughput"] == "tp2" and decode["min_tpot"] == "tp2"  # seed: 7,069 tok/s, 13.6 ms
    assert prefill["max_throughput"] == "tp2" and prefill["min_tpot"] == "1p1d"  # seed: 1,730 tok/s; 8.7 ms


def test_map_text_is_labelled_predicted(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["predict", "--sim", "--model", "qwen3.6-27b-nvfp4", "--gpu", "b200", "--no-nvcc",
                 "--isl", "512", "--osl", "2048", "--rate", "inf,4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("PREDICTED (simulator, not measured) — qwen3.6-27b-nvfp4 on 2× NVIDIA B200")
    assert "max output throughput at 4 req/s" in out and "prefill-heavy (7500 in / 200 out):" in out
    assert main(["predict", "--sim", "--model", "qwen3.6-27b-nvfp4", "--isl", "9..3"]) == 2
    assert "--isl" in capsys.readouterr().err


def test_rates_change_the_prediction() -> None:
    cat = Catalog.load()
    prof = cat.model("dummy-qwen3-8b")
    from tui.core.plan.gpuspecs import H200 as H200_SPEC

    burst = predictor.predict(prof, H200_SPEC, "tp1", input_len=512, output_len=256, num_prompts=64)
    slow = predictor.predict(prof, H200_SPEC, "tp1", input_len=512, output_len=256, num_prompts=64, rate=2.0)
    # at 2 req/s few requests share a batch: lower TPOT and TTFT, lower throughput than all at once
    assert slow.values["mean_tpot_ms"] < burst.values["mean_tpot_ms"]
    assert slow.values["mean_ttft_ms"] < burst.values["mean_ttft_ms"]
    assert slow.values["output_throughput"] < burst.values["output_throughput"]


def _import_h200_runs(capsys: pytest.CaptureFixture[str]) -> None:
    bench = H200 / "bench"
    common = ["--topology", "tp1", "--campaign", "h200", "--gpu", "h200", "--serve-env",
              "VLLM_USE_FLASHINFER_SAMPLER=0"]
    # the decode-heavy run was the server's first: its log shows the Triton sampler compiling during it
    assert main(["results", "import", str(bench / "bench1_in512_out2048_n128_trimmed.json"), *common,
                 "--server-log", str(H200 / "startup" / "main.log")]) == 0
    assert main(["results", "import", str(bench / "bench2_in7500_out200_n128.json"), *common]) == 0
    runs = paths.runs_dir()
    shutil.copytree(GRID_RUN, runs / GRID_ID)
    capsys.readouterr()


def test_real_h200_runs_show_predicted_next_to_measured(capsys: pytest.CaptureFixture[str]) -> None:
    _import_h200_runs(capsys)
    assert main(["results", "--sim", "h200", "bench", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_run = {r["run"]: r for r in data["runs"]}
    decode = by_run["h200/tp1-random-512x2048"]
    p = decode["prediction"]
    assert p["label"] == "PREDICTED" and p["gpu"] == "NVIDIA H200" and p["topology"] == "tp1"
    assert p["simulated_run"] is False and decode["simulated"] is False
    run = load_run(Path(decode["path"]))
    for key in ("output_throughput", "mean_tpot_ms", "mean_ttft_ms"):
        assert p["ratio"][key] == pytest.approx(run.summary[key] / p["values"][key])
        assert 0.85 < p["ratio"][key] < 1.15  # the model is calibrated on these captures
    assert any("first-run Triton sampler compile" in n for n in p["notes"])  # from the server log
    assert (run.path / "prediction.json").exists()  # stored with the run
    grid = by_run[GRID_ID]["prediction"]
    assert grid["topology"] == "1p1d" and grid["input_len"] == 2048 and grid["num_prompts"] == 32
    assert any("shared GPUs" in n for n in grid["notes"])
    # the text table has the side-by-side section
    assert main(["results", "--sim", "h200"]) == 0
    out = capsys.readouterr().out
    assert "PREDICTED (the simulator's performance model) next to measured" in out
    assert "h200/tp1-random-7500x200  no" in out


def test_calibrate_on_the_fixtures_real_runs(capsys: pytest.CaptureFixture[str]) -> None:
    _import_h200_runs(capsys)
    data = predict_json(capsys, "--calibrate")
    lo, hi = data["bounds"]
    assert set(data["factors"]) == {"decode", "prefill", "kv_transfer"}
    assert all(lo <= v <= hi for v in data["factors"].values())
    assert data["factors"]["kv_transfer"] == 1.0  # no disaggregated run it could use
    assert data["rms_log_residual_after"] <= data["rms_log_residual_before"]
    assert {r["run"] for r in data["residuals"]} == {"h200/tp1-random-512x2048", "h200/tp1-random-7500x200"}
    assert all(0.8 < r[k]["ratio"] < 1.25 for r in data["residuals"] for k in ("mean_tpot_ms", "output_throughput"))
    assert [s["run"] for s in data["skipped"]] == [GRID_ID]
    assert "shared a GPU" in data["skipped"][0]["why"]
    stored = json.loads(Path(data["file"]).read_text())
    assert stored["factors"] == data["factors"] and stored["host"] == data["host"]
    # later predictions use it, and say so
    m = predict_json(capsys, "--model", "dummy-qwen3-8b", "--gpu", "h200", "--gpus", "1", "--isl", "512",
                     "--osl", "256")
    assert m["calibration_source"] == data["file"] and m["calibration"] == data["factors"]
    # ... for the GPU model it was fitted on only
    assert data["gpu"] == "NVIDIA H200"
    other = predict_json(capsys, "--model", "qwen3.6-27b-nvfp4", "--gpu", "b200", "--isl", "512", "--osl", "256")
    assert other["calibration_source"] == "none (this host's calibration was fitted on NVIDIA H200)"
    assert other["calibration"] == {"decode": 1.0, "prefill": 1.0, "kv_transfer": 1.0}
    text = main(["predict", "--sim", "--calibrate"])
    out = capsys.readouterr().out
    assert text == 0 and "residuals per run (measured / predicted, corrected):" in out and "decode:" in out


def test_calibrate_without_runs_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--sim", "--calibrate"]) == 2
    err = capsys.readouterr().err
    assert "no measured run to calibrate against" in err and "Traceback" not in err
