"""``disagg-tui run --knob`` on the simulated host: two knob axes crossed with a topology, killed half-way and
resumed; the table gets the knob columns, the recommendation the winner's knob effects; a refused combination is one
line naming the knob."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import layout_port_args
from tui.cli.main import main
from tui.core import paths
from tui.core.bench.store import RUN_FILE, find_runs, load_run


def _argv(tmp_path: Path, ports: list[str]) -> list[str]:
    (tmp_path / "wl.yaml").write_text("name: small\ninput_len: 64\noutput_len: 96\nnum_prompts: 8\n")
    return ["run", "--sim", "--sim-gpus", "1", "--sim-startup", "0.2", "--sim-clock", "5", "--model",
            "dummy-qwen3-8b", "--topology", "tp1", "--workload", str(tmp_path / "wl.yaml"), "--knob",
            "attn=auto,triton", "--knob", "mnbt=auto,2048", "--knob", "ep=off,on", *ports, "--campaign", "knobs",
            "--quiet"]


def _complete(root: Path) -> list[Path]:
    out = []
    for f in root.glob(f"knobs/*/{RUN_FILE}"):
        try:
            if json.loads(f.read_text()).get("status") == "complete":
                out.append(f.parent)
        except ValueError:
            continue
    return out


def test_two_knob_axes_finish_resume_after_a_kill_and_show_their_columns(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = _argv(tmp_path, layout_port_args(1))
    env = paths.child_env({})
    proc = subprocess.Popen([*paths.python_module_argv("tui"), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not _complete(paths.runs_dir()) and proc.poll() is None:
            time.sleep(0.1)
        assert _complete(paths.runs_dir()), proc.stderr.read() if proc.poll() is not None else "no run finished"
        os.killpg(proc.pid, signal.SIGKILL)  # the campaign dies mid-way: its layout stays up, orphaned
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    done_before = {p.name for p in _complete(paths.runs_dir())}
    _, err_first = proc.communicate(timeout=5)
    assert "refused: tp1 [attn=auto mnbt=auto ep=on]: ep=on: expert parallel needs a mixture-of-experts model; " \
           "dummy-qwen3-8b is dense" in err_first

    code = main([*argv, "--json"])  # the same command resumes
    out, err = capsys.readouterr()
    assert code == 1, err  # the refused EP layouts are failed cells; the rest measured
    # their reason once, naming the four layouts, not a line per cell
    assert err.count("refused before start, 4 layout(s) (tp1 [attn=auto mnbt=auto ep=on], ") == 1
    assert "cell failed" not in err
    data = json.loads(out)
    rows = [r for r in data["rows"] if r.get("status") == "complete"]
    assert sorted((r["knobs"]["attn"], r["knobs"]["mnbt"]) for r in rows) == [
        ("auto", "2048"), ("auto", "auto"), ("triton", "2048"), ("triton", "auto")]
    assert all(r["completed"] == 8 for r in rows)
    refused = [r for r in data["rows"] if r.get("status") == "failed"]
    assert len(refused) == 4 and all("ep=on: expert parallel needs a mixture-of-experts" in r["error"]
                                     for r in refused)
    runs = [load_run(p) for p in find_runs(["knobs"])]
    kept = {r.path.name: r.meta.started for r in runs if r.path.name in done_before}
    assert kept and all(r.meta.knobs["ep"] in ("off", "on") for r in runs)
    ran = [r for r in runs if r.meta.status == "complete"]
    # the runs finished before the kill were kept, not measured again
    assert all(r.meta.started == kept[r.path.name] for r in ran if r.path.name in kept)
    plans = [json.loads((r.path / "plan.json").read_text()) for r in ran]
    assert all(p["knobs"]["attn"] in ("auto", "triton") for p in plans)
    wins = data["recommendation"]["objectives"]["max_throughput"][0]
    assert wins["winner"].startswith("tp1 [attn=") and wins["knob_effects"]

    assert main(["results", "knobs"]) == 0
    table = capsys.readouterr().out
    head = table.splitlines()[0].split()
    assert head[:5] == ["topology", "attn", "mnbt", "ep", "workload"]
    lines = [line.split() for line in table.splitlines()[2:]]
    assert sum(1 for w in lines if w[:1] == ["tp1"] and w[3] == "on" and w[-1] == "failed") == 4


def test_a_role_knob_beside_a_topology_without_that_role_is_only_its_column() -> None:
    """tp2 beside 1p1d swept over decode.mnbt: tp2's decode.mnbt is '—' in its column, its setup does not say 'no
    --max-num-batched-tokens' (the knob's column says it), and the verdict names 'tp2 [attn=auto]'."""
    from tests.knobruns import write_campaign
    from tui.core.bench import table
    from tui.core.bench.recommend import recommend, render
    from tui.core.models import Catalog

    figures = {("tp2", (("attn", "auto"),)): (6476, 6.1, 141), ("tp2", (("attn", "triton"),)): (5473, 7.2, 129),
               ("1p1d", (("attn", "auto"), ("decode.mnbt", "auto"))): (4620, 8.4, 290),
               ("1p1d", (("attn", "auto"), ("decode.mnbt", "2048"))): (4610, 8.4, 295)}
    write_campaign(paths.runs_dir(), "roles", "gemma-4-26b-a4b-fp8", ["attn=auto,triton", "decode.mnbt=auto,2048"],
                   figures, t0=time.time())
    runs = [load_run(p) for p in find_runs(["roles"])]
    cells = table.build_cells(runs)
    tp2 = {c.knobs["attn"]: c for c in cells if c.topology == "tp2"}
    assert tp2["auto"].knobs["decode.mnbt"] == "—" and tp2["auto"].shown_setup == ""
    assert tp2["auto"].layout == "tp2 [attn=auto]"
    assert {c.layout for c in cells if c.topology == "1p1d"} == {"1p1d [attn=auto decode.mnbt=auto]",
                                                                 "1p1d [attn=auto decode.mnbt=2048]"}
    text = render(recommend(cells, Catalog.load().workloads, gpus=2))
    assert "max throughput: tp2 [attn=auto]: tp2 [attn=auto] on decode-heavy by 18.3%" in text
    assert "attn=auto: +18.3% output tok/s vs attn=triton (same tp2)" in text
    assert "=—" not in text


def test_a_knob_only_refused_layouts_took_names_no_measured_layout() -> None:
    """ep=off,on on a dense model: the ep=on layouts are refused; the measured ones are 'tp1 [spec=mtp:2]', not
    'tp1 [spec=mtp:2 ep=off]', while a refused row keeps its ep=on."""
    from tests.knobruns import write_campaign
    from tui.core.bench import table

    figures = {("tp1", (("spec", "off"), ("ep", "off"))): (14186, 1.7, 32),
               ("tp1", (("spec", "mtp:2"), ("ep", "off"))): (29906, 0.8, 32)}
    write_campaign(paths.runs_dir(), "dense", "qwen3.6-27b-nvfp4", ["spec=off,mtp:2", "ep=off,on"], figures,
                   t0=time.time())
    refused = paths.runs_dir() / "dense" / "tp1-decode-heavy_spec-off_ep-on"
    refused.mkdir()
    (refused / "run.json").write_text(json.dumps({
        "campaign": "dense", "name": refused.name, "topology": "tp1", "workload": "decode-heavy",
        "request_rate": "inf", "repeat": 1, "status": "failed", "runner": "disagg-tui", "started": time.time(),
        "ended": time.time(), "pid": 0, "knobs": {"spec": "off", "ep": "on"},
        "error": "plan refused: ep=on: expert parallel needs a mixture-of-experts model"}))
    cells = table.build_cells([load_run(p) for p in find_runs(["dense"])])
    assert sorted(c.layout for c in cells) == ["tp1 [spec=mtp:2]", "tp1 [spec=off ep=on]", "tp1 [spec=off]"]
    assert {c.knobs["ep"] for c in cells} == {"off", "on"}  # the column still shows both
    # beside another model's runs the setup column tells models apart; the refused row has none to tell
    write_campaign(paths.runs_dir(), "other", "dummy-qwen3-8b", ["spec=off"], {("tp1", (("spec", "off"),)):
                                                                             (9000, 2.0, 30)}, t0=time.time())
    mixed = table.build_cells([load_run(p) for p in find_runs([])])
    (refused_row,) = [c for c in mixed if c.left_out]
    assert "?" not in refused_row.shown_setup and refused_row.shown_setup.startswith("—"), refused_row.shown_setup
