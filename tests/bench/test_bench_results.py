"""Stored runs: import of real vllm bench result JSONs, the comparison table, the results command."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.bench.benchpaths import BENCH1, BENCH2, CPU_SAMPLE, RERUN1, RERUN2
from tui.core import paths
from tui.core.bench import table
from tui.core.bench.metrics import RequestRecord
from tui.core.bench.store import RunMeta, RunWriter, find_runs, load_run
from tui.core.bench.vllmresult import detailed_result, import_vllm_result
from tui.core.errors import InputError


def test_import_fixture_results_keeps_keys_and_records(tmp_path: Path) -> None:
    run = import_vllm_result(BENCH2, topology="tp1", root=tmp_path)
    data = json.loads(BENCH2.read_text())
    assert run.meta.status == "complete" and run.meta.runner == "imported"
    assert run.meta.workload == "random-7500x200"  # guessed from the per-request lengths
    for key in ("output_throughput", "mean_tpot_ms", "p90_itl_ms", "max_concurrent_requests", "request_goodput"):
        assert run.summary[key] == data[key]
    assert "ttfts" not in run.summary  # the arrays live in requests.parquet
    recs = run.records()
    assert len(recs) == 128 and sum(r.output_len for r in recs) == 25600
    assert [r.ttft for r in recs] == data["ttfts"]
    # back to vllm's detailed layout: the same arrays
    back = detailed_result(run)
    assert back["ttfts"] == data["ttfts"] and back["output_lens"] == data["output_lens"]
    assert back["itls"][5] == data["itls"][5]
    trimmed = import_vllm_result(BENCH1, topology="tp1", workload="decode-heavy", root=tmp_path)
    assert "itls-trimmed" in trimmed.meta.flags and trimmed.meta.workload == "decode-heavy"
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({k: v for k, v in data.items() if not isinstance(v, list)}))
    no_arrays = import_vllm_result(plain, root=tmp_path)
    assert no_arrays.records() == [] and no_arrays.summary["completed"] == 128


def test_import_refuses_what_is_not_a_result(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(InputError, match="not a vllm bench serve result"):
        import_vllm_result(bad, root=tmp_path)
    with pytest.raises(InputError, match="no such file"):
        import_vllm_result(tmp_path / "missing.json", root=tmp_path)


def test_comparison_table_marks_best_and_averages_repeats(tmp_path: Path) -> None:
    # the two real H200 captures of each workload are two repeats of one cell
    for f in (BENCH1, RERUN1):
        import_vllm_result(f, topology="tp1", workload="decode-heavy", campaign="c", root=tmp_path)
    for f in (BENCH2, RERUN2):
        import_vllm_result(f, topology="tp1", workload="prefill-heavy", campaign="c", root=tmp_path)
    # a second topology: bench2 relabelled, with a better TPOT and worse throughput
    other = json.loads(BENCH2.read_text())
    other.update(output_throughput=500.0, mean_tpot_ms=20.0, p99_tpot_ms=30.0, mean_ttft_ms=20000.0)
    f = tmp_path / "other.json"
    f.write_text(json.dumps(other))
    import_vllm_result(f, topology="1p1d", workload="prefill-heavy", campaign="c", root=tmp_path)
    runs = [load_run(p) for p in find_runs(["c"], root=tmp_path)]
    cells = table.build_cells(runs)
    assert [(c.topology, c.workload, len(c.runs)) for c in cells] == [
        ("tp1", "decode-heavy", 2), ("1p1d", "prefill-heavy", 1), ("tp1", "prefill-heavy", 2)]
    dh = cells[0]
    tps = dh.values["output_throughput"]
    assert tps.mean == pytest.approx((7096.934691439616 + 6964.61) / 2, rel=1e-4)
    assert tps.n == 2 and tps.half > 0
    df = table.comparison_frame(cells)
    ph = {r["topology"]: r for r in df.iter_rows(named=True) if r["workload"] == "prefill-heavy"}
    assert ph["tp1"]["output_throughput_best"] and not ph["1p1d"]["output_throughput_best"]
    assert ph["1p1d"]["mean_tpot_ms_best"] and ph["1p1d"]["p99_tpot_ms_best"]
    assert ph["tp1"]["mean_ttft_ms_best"]
    assert not any(r["output_throughput_best"] for r in df.iter_rows(named=True) if r["workload"] == "decode-heavy")
    text = table.render_text(df)
    assert "7,031 ±" in text and "*" in text
    md = table.render_markdown(df)
    assert md.startswith("| topology |") and "**20.0**" in md
    csv = table.render_csv(df)
    assert csv.splitlines()[0].startswith("topology,workload,rate,runs,output_throughput")
    rows = table.cell_rows(cells)
    assert rows[0]["repeats"] == 2 and "ci95_output_throughput" in rows[0]
    # goodput recomputed from the records under an SLO given afterwards
    cells_slo = table.build_cells(runs, {"ttft": 10000.0})
    good = {c.key: c.value("request_goodput") for c in cells_slo}
    assert good[("", "tp1", "prefill-heavy", "inf")] > 0


def test_runs_measured_differently_are_never_averaged_together(tmp_path: Path) -> None:
    """Our run and a vllm bench run of one cell, or runs of two models, stay apart, each row saying how it was
    measured; runs measured alike get no setup column."""
    import_vllm_result(BENCH2, topology="tp1", workload="prefill-heavy", campaign="a", root=tmp_path)
    import_vllm_result(RERUN2, topology="tp1", workload="prefill-heavy", campaign="b", root=tmp_path,
                       runner="vllm-bench")
    other = json.loads(BENCH2.read_text())
    other["model_id"] = "another-model"
    f = tmp_path / "other.json"
    f.write_text(json.dumps(other))
    import_vllm_result(f, topology="tp1", workload="prefill-heavy", campaign="c", root=tmp_path)
    runs = [load_run(p) for p in find_runs(["a", "b", "c"], root=tmp_path)]
    cells = table.build_cells(runs)
    assert sorted((c.setup, len(c.runs)) for c in cells) == [
        ("another-model · imported", 1), ("dummy-qwen3-8b · imported", 1), ("dummy-qwen3-8b · vllm bench", 1)]
    df = table.comparison_frame(cells)
    assert df.columns[:3] == ["topology", "setup", "workload"]
    text = table.render_text(df)
    assert text.splitlines()[0].split()[:3] == ["topology", "setup", "workload"]
    assert "dummy-qwen3-8b · vllm bench" in text and "dummy-qwen3-8b · vllm bench" in table.render_markdown(df)
    # the best marks compare topologies within one setup: here each setup has one row, so nothing is marked
    assert not any(r["output_throughput_best"] for r in df.iter_rows(named=True))
    assert {r["setup"] for r in table.cell_rows(cells)} == {c.setup for c in cells}
    # the two imported runs of one model alone: measured alike, one cell of two repeats, no setup column
    alike = [r for r in runs if r.meta.runner == "imported" and r.meta.model != "another-model"]
    alike.append(next(r for r in runs if r.meta.runner == "vllm-bench"))
    alike[-1].meta.runner = "imported"
    cells = table.build_cells(alike)
    assert [(c.setup, len(c.runs)) for c in cells] == [("", 2)]
    assert "setup" not in table.comparison_frame(cells).columns


def test_a_run_over_two_hosts_is_never_averaged_with_one_hosts(tmp_path: Path) -> None:
    """A run measured on a layout across hosts keeps each host's fingerprint; the setup column tells it from a run
    of the same cell on one host, and the two are never averaged (issue 26)."""
    import_vllm_result(BENCH2, topology="dp2", workload="prefill-heavy", campaign="a", root=tmp_path)
    import_vllm_result(RERUN2, topology="dp2", workload="prefill-heavy", campaign="b", root=tmp_path)
    runs = [load_run(p) for p in find_runs(["a", "b"], root=tmp_path)]
    runs[1].meta.fingerprint = {"hostname": "here", "simulated": True, "cluster": "x",
                                "hosts": [{"name": "gpu-a", "does": "head"}, {"name": "gpu-b", "does": "engines"}]}
    runs[0].meta.fingerprint = {"hostname": "here", "simulated": True}
    cells = table.build_cells(runs)
    assert sorted(c.setup for c in cells) == ["simulated", "simulated 2 hosts (gpu-a, gpu-b)"]
    assert all(len(c.runs) == 1 for c in cells)


def test_writer_journal_parts_and_finish(tmp_path: Path) -> None:
    meta = RunMeta(campaign="c", name="r", topology="tp1", workload="w")
    w = RunWriter(tmp_path / "c" / "r", meta, workload={"name": "w"})
    for i in range(3):
        w.add(RequestRecord(index=i, start=i * 0.1, success=True, ttft=0.01, latency=0.05, itl=[0.02, 0.02],
                            prompt_tokens=5, output_tokens=3, chunks=3))
    w.flush_part()
    assert list((tmp_path / "c" / "r" / "requests").glob("part-*.parquet"))
    w.finish("complete", {"completed": 3, "duration": 1.0})
    run = load_run(tmp_path / "c" / "r")
    assert run.meta.status == "complete" and len(run.records()) == 3
    assert not (tmp_path / "c" / "r" / "requests").exists()


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*paths.python_module_argv("tui"), *args], capture_output=True, text=True,
                          env=paths.child_env(env), timeout=120, check=False)


def test_results_command_imports_and_prints(tmp_path: Path) -> None:
    env = {"DISAGG_TUI_RUNS_DIR": str(tmp_path / "runs")}
    empty = _cli("results", env=env)
    assert empty.returncode == 2 and len(empty.stderr.strip().splitlines()) == 1
    out = _cli("results", "import", str(BENCH2), str(CPU_SAMPLE), "--topology", "tp1", env=env)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 2 and "128 request records" in out.stdout
    table_out = _cli("results", env=env)
    assert table_out.returncode == 0 and "random-7500x200" in table_out.stdout
    js = json.loads(_cli("results", "--format", "json", env=env).stdout)
    assert {r["workload"] for r in js["rows"]} == {"random-7500x200", "random-32x16"}
    assert all("output_throughput" in r and "mean_tpot_ms" in r for r in js["rows"])
    md = tmp_path / "t.md"
    assert _cli("results", "imported", "--format", "md", "-o", str(md), env=env).returncode == 0
    assert md.read_text().startswith("| topology |")
    bad = _cli("results", "import", str(tmp_path / "nope.json"), env=env)
    assert bad.returncode == 2 and "no such file" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    missing = _cli("results", "no-such-campaign", env=env)
    assert missing.returncode == 2 and "no run or campaign" in missing.stderr
