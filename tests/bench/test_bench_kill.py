"""A run killed half-way keeps every finished request's record on disk and is marked incomplete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from tui.core import paths
from tui.core.bench.store import JOURNAL_FILE, find_runs, load_run


def _start_bench(url: str, runs_dir: Path) -> subprocess.Popen[str]:
    # 40 requests paced at 5 ms/token: outputs from 1 to 400 tokens finish one after another over ~2 s
    env = paths.child_env({"DISAGG_TUI_RUNS_DIR": str(runs_dir)})
    return subprocess.Popen(
        [*paths.python_module_argv("tui"), "bench", "--endpoint", url, "--input-len", "100", "--output-len", "200",
         "--range-ratio", "0.99", "--num-prompts", "40", "--warmup", "0", "--campaign", "kill"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _journal_lines(runs_dir: Path, minimum: int, timeout: float = 30.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for j in runs_dir.glob(f"kill/*/{JOURNAL_FILE}"):
            if len(j.read_text().splitlines()) >= minimum:
                return j.parent
        time.sleep(0.05)
    raise AssertionError("no records appeared")


def _wait_gone(pids: list[int], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
            return
        time.sleep(0.05)
    raise AssertionError(f"processes left behind: {pids}")


def test_sigkill_keeps_finished_records(stub_process, tmp_path: Path) -> None:
    url = stub_process("--mode", "paced", "--ms-per-token", "5")
    runs = tmp_path / "runs"
    proc = _start_bench(url, runs)
    try:
        run_dir = _journal_lines(runs, 3)
        workers = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        before = len((run_dir / JOURNAL_FILE).read_text().splitlines())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        _wait_gone(workers)  # the worker notices its parent is gone (stdin closes) and exits
    finally:
        if proc.poll() is None:
            proc.kill()
    run = load_run(run_dir)
    assert run.meta.status == "incomplete" and "incomplete" in run.meta.flags
    recs = run.records()
    assert len(recs) >= before and len(recs) < 40
    assert all(r.success for r in recs)
    assert run.summary["completed"] == len(recs)  # computed from the records on disk
    assert find_runs(["kill"], root=runs) == [run_dir]


def test_sigterm_stops_cleanly_and_marks_incomplete(stub_process, tmp_path: Path) -> None:
    url = stub_process("--mode", "paced", "--ms-per-token", "5")
    runs = tmp_path / "runs"
    proc = _start_bench(url, runs)
    try:
        run_dir = _journal_lines(runs, 3)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert "incomplete" in err and len(err.strip().splitlines()) <= 3
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "incomplete"
    assert (run_dir / "requests.parquet").exists() and not (run_dir / JOURNAL_FILE).exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    run = load_run(run_dir)
    assert 3 <= summary["completed"] == len(run.records()) < 40
