"""Results you can trust (issue 23): a run that measured nothing is shown but in no figure; a stray run on a
campaign's layout is not part of the campaign; results scoped to a campaign; a campaign's ETA; one topology is no
recommendation."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from tests.bench.trustruns import T0, WORKLOAD, campaign, issue_scenario, layout_plan, records, write_run
from tui.core import paths
from tui.core.bench import recommend as rec_mod
from tui.core.bench import scope, table
from tui.core.bench.campaigns import eta, read_campaign
from tui.core.bench.store import find_runs, load_runs
from tui.core.errors import InputError
from tui.core.models import Workload

WL = {"decode-heavy": Workload("decode-heavy", 512, 2048)}


def _all(root: Path) -> list:  # type: ignore[type-arg]
    runs, damaged = load_runs(find_runs([], root))
    assert not damaged
    return runs


def test_a_stray_run_that_completed_nothing_leaves_the_campaigns_cell_as_measured(tmp_path: Path) -> None:
    """The issue's sequence: results of every run keep dp2's figures as the campaign's good run measured them (the
    stray run neither averaged in nor spoiling the cell's flags), the recommendation as measured, the stray run a
    row of its own: failed, not part of the campaign, in no figure."""
    runs = issue_scenario(tmp_path)
    good, stray, pd = runs["dp2"], runs["stray"], runs["1p1d"]
    assert stray.unusable == "incomplete (0/32 done, 32 failed)" and not good.unusable and not pd.unusable
    cells = table.build_cells(_all(tmp_path))
    dp2 = [c for c in cells if c.topology == "dp2"]
    measured = next(c for c in dp2 if c.ranked)
    apart = next(c for c in dp2 if not c.ranked)
    assert measured.runs == [good] or [r.id for r in measured.runs] == [good.id]
    assert measured.values["output_throughput"].mean == good.summary["output_throughput"]
    assert measured.values["output_throughput"].n == 1 and measured.values["mean_tpot_ms"].n == 1
    assert "sim-diverged" not in measured.flags  # the stray run's flags stay on its own row
    assert [r.id for r in apart.runs] == [stray.id] and apart.left_out == stray.unusable and not apart.values
    assert apart.outside == "bake" and "not part of campaign bake" in apart.setup
    # the best marks compare the good rows only: dp2 leads throughput and TPOT, as the campaign measured
    df = table.comparison_frame(cells)
    rows = list(df.iter_rows(named=True))
    by_status = {(r["topology"], r["status"]): r for r in rows}
    assert by_status[("dp2", "complete")]["output_throughput_best"]
    assert by_status[("dp2", "complete")]["mean_tpot_ms_best"]
    stray_row = by_status[("dp2", "incomplete (0/32 done, 32 failed)")]
    assert stray_row["output_throughput"] is None and not any(stray_row[f"{c.key}_best"] for c in table.COLUMNS)
    for r in rows:  # no figure is negative, and none is an interval as wide as the one a zero run made
        for c in table.COLUMNS:
            assert r[c.key] is None or r[c.key] >= 0
            assert r[f"{c.key}_ci95"] is None
    # both exports: the good run's figure for dp2, the stray run shown as what it is
    tps = f"{good.summary['output_throughput']:,.0f}"
    md = table.render_markdown(df)
    assert f"**{tps}**" in md and "not part of campaign bake" in md and "incomplete (0/32 done, 32 failed)" in md
    csv = table.render_csv(df).splitlines()
    assert csv[0].split(",")[-1] == "status"
    dp2_csv = [line for line in csv if line.startswith("dp2,")]
    assert len(dp2_csv) == 2 and any(str(good.summary["output_throughput"]) in line for line in dp2_csv)
    assert any("not part of campaign bake" in line and "incomplete (0/32 done" in line for line in dp2_csv)
    text = table.render_text(df)
    assert "(n=2)" not in text and "±" not in text.split("\n* best")[0]
    # the recommendation as measured: dp2, with the stray run named in the evidence and judged by nobody
    rec = rec_mod.recommend(cells, WL, gpus=2)
    assert rec.objectives["max_throughput"][0].winner == "dp2"
    assert rec.objectives["min_tpot"][0].winner == "dp2"
    assert not any("sim-diverged" in e for e in rec.evidence)
    assert any(stray.id in e and "not part of campaign bake" in e for e in rec.evidence)
    json_rows = {(r["topology"], r["status"]): r for r in table.cell_rows(cells)}
    assert json_rows[("dp2", "incomplete")]["left_out"] == stray.unusable
    assert "output_throughput" not in json_rows[("dp2", "incomplete")]
    assert json_rows[("dp2", "incomplete")]["outside_campaign"] == "bake"


def test_results_scoped_to_a_campaign_leave_the_stray_run_out(tmp_path: Path) -> None:
    runs = issue_scenario(tmp_path)
    every = _all(tmp_path)
    assert scope.campaign_names(every) == ["bake"]
    scoped = scope.scope_runs(every, "bake")
    assert {r.id for r in scoped.runs} == {runs["dp2"].id, runs["1p1d"].id}
    assert [r.id for r in scoped.apart] == [runs["stray"].id]
    note = scope.apart_note(scoped)
    assert note.startswith("NOT PART OF CAMPAIGN bake (left out): bench/dp2-decode-heavy-")
    assert "on its dp2 layout (incomplete (0/32 done, 32 failed))" in note
    cells = table.build_cells(scoped.runs)
    assert [(c.topology, len(c.runs), c.setup) for c in cells] == [("1p1d", 1, ""), ("dp2", 1, "")]
    assert scope.scope_runs(every).runs == every and scope.scope_runs(every).label == "all runs"
    with pytest.raises(InputError, match="no campaign 'nope' among the stored runs") as err:
        scope.scope_runs(every, "nope")
    assert "campaigns: bake" in err.value.one_line()
    with pytest.raises(InputError, match="no campaign 'bench'"):  # a folder of benchmarks is no campaign
        scope.scope_runs(every, "bench")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*paths.python_module_argv("tui"), *args], capture_output=True, text=True,
                          env=paths.child_env(), timeout=120, check=False)


def test_the_results_command_scopes_and_exports_a_campaign(tmp_path: Path) -> None:
    runs = issue_scenario(paths.runs_dir())
    good = runs["dp2"]
    tps = f"{good.summary['output_throughput']:,.0f}"
    every = _cli("results")
    assert every.returncode == 0, every.stderr
    lines = every.stdout.splitlines()
    dp2 = [line for line in lines if line.startswith("dp2")]
    assert len(dp2) == 2 and f"{tps} *" in dp2[0] and "(n=" not in every.stdout
    assert "not part of campaign bake" in dp2[1] and "incomplete (0/32 done, 32 failed)" in dp2[1]
    assert f"{runs['stray'].id}: incomplete" in every.stderr
    assert runs["stray"].id not in every.stdout.split("PREDICTED")[-1]  # no prediction beside a run of no figure
    mine = _cli("results", "--campaign", "bake")
    assert mine.returncode == 0, mine.stderr
    assert "not part of campaign bake" not in mine.stdout.split("NOT PART OF CAMPAIGN")[0]
    assert "NOT PART OF CAMPAIGN bake (left out): bench/dp2-decode-heavy-" in mine.stdout
    assert [line.split()[0] for line in mine.stdout.splitlines()[2:4]] == ["1p1d", "dp2"]
    md = tmp_path / "bake.md"
    assert _cli("results", "--campaign", "bake", "-f", "md", "-o", str(md)).returncode == 0
    assert f"**{tps}**" in md.read_text() and "_NOT PART OF CAMPAIGN bake (left out)" in md.read_text()
    csv = _cli("results", "--campaign", "bake", "-f", "csv").stdout.splitlines()
    assert [line.split(",")[0] for line in csv[1:]] == ["1p1d", "dp2"]
    js = json.loads(_cli("results", "--campaign", "bake", "-f", "json").stdout)
    assert js["campaign"] == "bake" and js["not_part_of_campaign"] == [runs["stray"].id]
    assert {r["status"] for r in js["rows"]} == {"complete"}
    full = json.loads(_cli("results", "-f", "json").stdout)
    assert next(r for r in full["runs"] if r["run"] == runs["stray"].id)["left_out"] == runs["stray"].unusable
    for bad, says in ((("results", "--campaign", "nope"), "no campaign 'nope'"),
                      (("results", "bake", "--campaign", "bake"), "give RUN or --campaign, not both")):
        out = _cli(*bad)
        assert out.returncode == 2 and says in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_run_left_out_says_why(tmp_path: Path) -> None:
    ok = write_run(tmp_path, "c", "ok", "dp2", records(4), plan_dict=None)
    none = write_run(tmp_path, "c", "none", "dp2", records(4, failed=True), plan_dict=None)
    failed = write_run(tmp_path, "c", "failed", "dp2", records(4, failed=True), plan_dict=None, status="failed",
                       message="stalled")
    assert ok.unusable == "" and none.unusable == "no request completed (0/4 done, 4 failed)"
    assert failed.unusable == "failed (0/4 done, 4 failed)"
    cells = table.build_cells([ok, none, failed])
    assert [c.status for c in cells] == ["complete", "no request completed (0/4 done, 4 failed)",
                                         "failed (0/4 done, 4 failed)"]
    assert cells[0].values["output_throughput"].mean == ok.summary["output_throughput"]
    # a cell whose every run measured nothing has no figure, no mark and no verdict
    rec = rec_mod.recommend(table.build_cells([none]), WL, gpus=2)
    assert all(v.winner is None for vs in rec.objectives.values() for v in vs)
    assert any("1 run(s) in no figure: c/none" in e for e in rec.evidence)


# --- one topology is no recommendation ------------------------------------------------------------------------


def test_one_topology_measured_says_what_is_missing_and_how_to_measure_it(tmp_path: Path) -> None:
    pd = write_run(tmp_path, "c", "1p1d-decode-heavy", "1p1d", records(8), plan_dict=layout_plan("1p1d"))
    rec = rec_mod.recommend(table.build_cells([pd]), WL, gpus=2)
    for vs in rec.objectives.values():
        assert vs[0].winner is None and vs[0].missing == "only 1p1d measured on decode-heavy"
    assert rec.summary["max_throughput"] == "not compared: only 1p1d measured on decode-heavy"
    command = rec.to_compare["decode-heavy"]
    assert command == ("disagg-tui run --sim --model qwen3.6-27b-nvfp4 --topology dp2,tp2 --workload decode-heavy "
                       "--num-prompts 8")
    text = rec_mod.render(rec)
    assert "max throughput: not compared: only 1p1d measured on decode-heavy" in text
    assert f"to compare on decode-heavy, measure the other layouts: {command}" in text
    # the command it names is one the CLI takes: its topologies and workload parse
    from tui.core.topology import parse_topologies

    assert [t.name for t in parse_topologies("dp2,tp2")] == ["dp2", "tp2"]
    # two topologies: a winner again
    dp2 = write_run(tmp_path, "c", "dp2-decode-heavy", "dp2", records(8, gap=0.005), plan_dict=layout_plan("dp2"))
    rec = rec_mod.recommend(table.build_cells([pd, dp2]), WL, gpus=2)
    assert rec.objectives["max_throughput"][0].winner == "dp2" and not rec.to_compare
    assert rec_mod.alternatives("tp1") == ["dp2", "tp2", "1p1d"]
    assert rec_mod.alternatives("1p1d-tp2") == ["dp4", "tp4", "1p3d"]


# --- a campaign's ETA ---------------------------------------------------------------------------------------------


def test_a_running_campaigns_eta_from_the_cells_measured(tmp_path: Path) -> None:
    """3 topologies × 2 workloads: dp2's two cells took 40 s and 60 s after a 30 s bring-up; tp2 came up 20 s after
    dp2's last cell and is measuring its first cell since 10 s: 3 cells left × 50 s, 40 s of the current cell, one
    layout to bring up × 25 s (the mean of 30 s and 20 s)."""
    folder = campaign(tmp_path, "eta", ["dp2", "tp2", "1p1d"])
    spec_file = folder / "campaign.json"
    spec = json.loads(spec_file.read_text())
    spec["workloads"] = ["decode-heavy", "prefill-heavy"]
    spec["created"] = T0
    spec_file.write_text(json.dumps(spec))
    prefill = Workload("prefill-heavy", 2048, 64, num_prompts=8)

    def timed(name: str, topo: str, start: float, seconds: float, wl: Workload = WORKLOAD) -> None:
        run = write_run(tmp_path, "eta", name, topo, records(4), plan_dict=None, started=start, workload=wl)
        run.meta.ended = start + seconds
        from tui.core.bench.store import write_json

        write_json(run.path / "run.json", run.meta.to_dict())

    timed("dp2-decode-heavy", "dp2", T0 + 30, 40)
    timed("dp2-prefill-heavy", "dp2", T0 + 70, 60, prefill)
    running = write_run(tmp_path, "eta", "tp2-decode-heavy", "tp2", records(4), plan_dict=None, started=T0 + 150)
    running.meta.status, running.meta.ended, running.meta.pid = "running", None, os.getpid()
    from tui.core.bench.store import write_json

    write_json(running.path / "run.json", running.meta.to_dict())
    stored = read_campaign(folder)
    assert stored.running and (stored.done, stored.total) == (2, 6)
    e = eta(stored, now=T0 + 160)
    assert e is not None
    assert (e.cells_left, e.per_cell_s, e.measured, e.current_left_s, e.layouts_left) == (3, 50.0, 2, 40.0, 1)
    assert e.per_layout_s == pytest.approx(25.0)
    assert e.seconds == pytest.approx(3 * 50 + 40 + 25)
    assert e.how() == "3 cell(s) × 50s (mean of 2 measured) + 40s left of the current cell + 1 layout(s) × 25s to " \
                      "bring up"
    assert eta(stored, now=T0 + 500).current_left_s == 0  # type: ignore[union-attr]  # over its mean: none left
    running.meta.status = "complete"
    write_json(running.path / "run.json", running.meta.to_dict())
    assert eta(read_campaign(folder), now=T0 + 160) is None  # nothing running: no ETA
    assert math.isfinite(e.seconds)
