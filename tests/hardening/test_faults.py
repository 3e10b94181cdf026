"""Faults survived, on the simulated host: a server or the proxy killed in the middle of a run, NVML failing while
it is sampled, a full disk while results are written, the CLI itself killed. Nothing finished is lost."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.hardening.cli import no_traceback, run_cli
from tests.helpers import eventually, layout_port_args
from tests.simserver import SimServers
from tui.core import paths
from tui.core.bench.store import JOURNAL_FILE, SUMMARY_FILE, load_run, read_records
from tui.core.launch.state import StateStore
from tui.core.launch.supervisor import LAYOUT_ENV

ROOT = Path(__file__).resolve().parent.parent.parent
MODEL = "dummy-qwen3-8b"


def _ours() -> list[psutil.Process]:
    state = os.environ["DISAGG_TUI_STATE_DIR"]
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            env = p.environ()
            if env.get(LAYOUT_ENV) and env.get("DISAGG_TUI_STATE_DIR") == state and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _bench_process(*extra: str) -> subprocess.Popen[str]:
    """``bench`` against the active layout in a process of its own (so it can be watched while a fault hits)."""
    return subprocess.Popen([*paths.python_module_argv("tui"), "bench", "--input-len", "32", "--output-len", "300",
                             "--num-prompts", "12", "--max-concurrency", "3", "--warmup", "0", "--campaign", "fault",
                             "--no-token-timeout", "20", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=paths.child_env(), cwd=ROOT)


def _wait_for_records(minimum: int, timeout: float = 60.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for journal in paths.runs_dir().glob(f"fault/*/{JOURNAL_FILE}"):
            if len(journal.read_bytes().splitlines()) >= minimum:
                return journal.parent
        time.sleep(0.05)
    raise AssertionError("the run wrote no records")


def _up(topology: str, *extra: str) -> list[str]:
    argv = ["up", "--sim", "--sim-startup", "0.3", "--model", MODEL, "--topology", topology, *layout_port_args(),
            *extra]
    res = run_cli(argv)
    assert res.code == 0, res.err[-2000:]
    return argv


@pytest.mark.timeout(120)
def test_server_killed_mid_benchmark() -> None:
    """The run ends marked incomplete with the dead server named, its finished requests on disk; ``status`` shows
    the dead server; ``down`` cleans every process up."""
    _up("tp1")
    try:
        bench = _bench_process()
        run_dir = _wait_for_records(1)
        server = next(p for p in StateStore().active().processes if p.role != "proxy")
        os.kill(server.pid, signal.SIGKILL)
        _, err = bench.communicate(timeout=60)
        assert bench.returncode == 1, err
        assert f"{server.name} died during the run" in err and "Traceback" not in err
        run = load_run(run_dir)
        assert run.meta.status == "incomplete" and "server-died" in run.meta.flags
        assert sum(r.success for r in run.records()) >= 1
        status = run_cli(["status"])
        assert no_traceback(status)
        assert server.name in status.out and "EXITED" in status.out and "DOWN" in status.out, status.out
    finally:
        down = run_cli(["down"])
    assert down.code == 0, down.err
    assert _ours() == []


@pytest.mark.timeout(120)
def test_proxy_killed_mid_benchmark() -> None:
    """The run fails, saying the proxy died; ``up --replace`` brings the layout back."""
    argv = _up("1p1d")
    try:
        bench = _bench_process()
        run_dir = _wait_for_records(1)
        proxy = next(p for p in StateStore().active().processes if p.role == "proxy")
        os.kill(proxy.pid, signal.SIGKILL)
        _, err = bench.communicate(timeout=60)
        assert bench.returncode == 1 and "proxy died during the run" in err, err
        run = load_run(run_dir)
        assert run.meta.status == "failed" and sum(r.success for r in run.records()) >= 1
        again = run_cli([*argv[:-6], *layout_port_args(), "--replace"])
        assert again.code == 0, again.err[-2000:]
        assert StateStore().active() is not None and StateStore().active().status == "ready"
    finally:
        assert run_cli(["down"]).code == 0
    assert _ours() == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", [signal.SIGHUP], ids=["SIGHUP"])
def test_cli_up_killed_leaves_servers_up_and_the_next_command_reattaches(how: int) -> None:
    """The terminal goes away (SIGHUP) while ``up`` waits: the servers run on in their own sessions; ``status``
    finds them; ``bench`` uses them; ``down`` stops them. (SIGKILL of ``up``, then ``down``, is
    tests/test_up_sim.py::test_down_after_launcher_was_killed; SIGKILL of ``run`` keeping its records is
    tests/bench/test_bench_kill.py.)"""
    ports = layout_port_args()
    launcher = subprocess.Popen([*paths.python_module_argv("tui"), "up", "--sim", "--sim-startup", "2", "--model",
                                 MODEL, "--topology", "tp1", *ports], cwd=ROOT, env=paths.child_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rec = StateStore().active() if (paths.state_dir() / "layouts.json").exists() else None
            if rec is not None and rec.processes:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the layout was not recorded")
        launcher.send_signal(how)
        launcher.wait(10)
        time.sleep(0.3)
        assert _ours(), "the servers died with their launcher"
        deadline = time.monotonic() + 30
        status = run_cli(["status", "--json"])
        while '"up"' not in status.out and time.monotonic() < deadline:  # the server finishes its start alone
            time.sleep(0.3)
            status = run_cli(["status", "--json"])
        assert status.code == 0 and no_traceback(status), status.err
        assert '"up"' in status.out, status.out
        bench = run_cli(["bench", "--input-len", "16", "--output-len", "8", "--num-prompts", "4", "--warmup", "0",
                         "-q", "--sim-clock", "10"])
        assert bench.code == 0, bench.err
    finally:
        if launcher.poll() is None:
            launcher.kill()
        down = run_cli(["down"])
    assert down.code == 0, down.err
    assert _ours() == []


# --- NVML failing while it is sampled ------------------------------------------------------------------------------


def test_nvml_raising_mid_sampling_makes_the_panel_stale_not_dead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    import pynvml

    from tui.core.events import EventBus
    from tui.core.telemetry.events import GpuSampled
    from tui.core.telemetry.sampler import GpuSampler, SamplerThread
    from tui.sim import fakenvml as fn
    from tui.sim.gpustate import SimGpuState

    SimGpuState(tmp_path).init_host("h200", 2)
    fn.configure(tmp_path)
    fn.nvmlInit()
    broken = {"on": False}
    for name in ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage"):
        real = getattr(fn, name)

        def failing(*args: Any, _real: Any = real) -> Any:
            if broken["on"]:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
            return _real(*args)

        monkeypatch.setattr(fn, name, failing)
    bus = EventBus()
    got: list[GpuSampled] = []
    bus.subscribe(got.append)
    thread = SamplerThread(GpuSampler(fn), bus, rate_hz=10.0, simulated=True)
    try:
        thread.start()
        # each step waits for the sample it needs, not a fixed time (issue 22, finding 7)
        eventually(lambda: any(not e.error for e in got), 30, "a good sample")
        broken["on"] = True
        eventually(lambda: any(e.error for e in got), 30, "a failing sample")
        n = len(got)
        broken["on"] = False
        eventually(lambda: any(not e.error for e in got[n:]), 30, "a good sample again")
        assert thread._thread is not None and thread._thread.is_alive()
    finally:
        thread.stop()
        fn.nvmlShutdown()
        fn.configure(None)
    states = ["error" if e.error else "ok" for e in got]
    first_err = states.index("error")
    assert "ok" in states[:first_err] and "ok" in states[first_err:], states
    bad = got[first_err]
    assert bad.gpus == () and "NVML answers no GPU reading" in (bad.error or "") and "Unknown" in (bad.error or "")


# --- a full disk ---------------------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize("where", ["summary", "parquet"])
def test_disk_full_while_writing_results(where: str, sims: SimServers, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC on the summary or on the request table: one clear error (exit 1), no summary that could pass for a
    good one, the run not marked complete, and the finished requests still readable."""
    import polars as pl

    from tui.core.bench import store

    server = sims.start(clock=20.0)
    server.wait_ready()
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    real = store.write_json

    def write_json(path: Path, data: Any, **kwargs: Any) -> None:
        if path.name == SUMMARY_FILE:
            raise full
        real(path, data, **kwargs)

    def write_parquet(self: Any, file: Any, *args: Any, **kwargs: Any) -> None:
        raise full

    with monkeypatch.context() as m:
        if where == "summary":
            m.setattr(store, "write_json", write_json)
        else:
            m.setattr(pl.DataFrame, "write_parquet", write_parquet)
        res = run_cli(["bench", "--endpoint", server.url, "--input-len", "16", "--output-len", "8", "--num-prompts",
                       "5", "--warmup", "0", "--campaign", "full", "-q"])
    assert res.code == 1 and no_traceback(res), res.err
    assert "cannot write the results" in res.err and "No space left on device" in res.err
    [run_dir] = list((paths.runs_dir() / "full").iterdir())
    assert not (run_dir / SUMMARY_FILE).exists()
    assert not list(run_dir.glob(".*.tmp"))
    run = load_run(run_dir)
    assert run.meta.status != "complete"
    assert len(read_records(run_dir)) == 5


@pytest.mark.timeout(150)
def test_cli_run_killed_leaves_its_layout_up_and_the_same_command_resumes() -> None:
    """``run`` SIGKILLed in the middle of its first cell: the layout stays up (``status`` shows it, servers
    running); the same command again stops that orphaned layout itself, redoes the unfinished cell and ends with
    nothing left running. Before, the resume waited for the GPUs the orphan held, then failed."""
    argv = ["run", "--sim", "--sim-startup", "0.3", "--model", MODEL, "--topology", "tp1", "--workload",
            "decode-heavy", "--num-prompts", "9", "--max-concurrency", "3", "--warmup", "0", "--campaign", "fault",
            "--sim-clock", "10", *layout_port_args()]
    runner = subprocess.Popen([*paths.python_module_argv("tui"), *argv], cwd=ROOT, env=paths.child_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_records(1)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(10)
        left = StateStore().active()
        assert left is not None and _ours(), "the layout went down with its launcher"
        status = run_cli(["status"])
        assert left.id in status.out and "running" in status.out, status.out
        again = run_cli(argv)
        assert again.code == 0, again.err[-2000:]
        assert "left up by an interrupted run" in again.err
    finally:
        if runner.poll() is None:
            runner.kill()
        run_cli(["down", "--all"])
    assert StateStore().active() is None and _ours() == []
