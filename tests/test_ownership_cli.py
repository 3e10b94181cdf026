"""Owners, requests, held layouts, failures and orphaned starts through the CLI (issue 23), as real subprocesses on
the simulated host: ``up`` records who started the layout and its exact request; ``status`` (text and JSON) shows
them; ``down``, ``bench`` and ``up --replace`` refuse a layout a running campaign or benchmark holds (exit 2, the
holder named) unless ``--force``; a failed layout is history once dismissed or replaced; a start whose ``up`` was
SIGKILLed is followed to ready by ``status`` and ``watch``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT, cli, eventually, layout_port_args
from tui.core.launch.state import LayoutOwner, LayoutUser, StateStore
from tui.core.launch.supervisor import create_time
from tui.core.plan.request import LaunchRequest

MODEL = "dummy-qwen3-8b"
KNOBS = ["--gpu-memory-utilization", "0.95", "--max-model-len", "65536", "--arg", '--served-model-name "my model"',
         "--env", "MY_VAR=hello world"]


@pytest.fixture(autouse=True)
def _down_at_the_end() -> Iterator[None]:
    yield
    cli("down", "--all", "--force")


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def _up(*extra: str, ports: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return cli("up", "--sim", "--sim-startup", "0.3", "--model", MODEL, "--topology", "tp1",
               *(ports or layout_port_args()), *extra, timeout=120)


def _status() -> dict[str, object]:
    st = cli("status", "--json")
    assert st.returncode == 0, st.stderr
    return json.loads(st.stdout)  # type: ignore[no-any-return]


def _server_argv(rec_plan: dict[str, object]) -> list[str]:
    (server,) = rec_plan["servers"]  # type: ignore[misc]
    return list(server["argv"])  # type: ignore[index]


def test_up_records_its_exact_request_and_a_replay_of_it_comes_back_the_same() -> None:
    ports = layout_port_args()
    up = _up(*KNOBS, ports=ports)
    assert up.returncode == 0, up.stderr[-3000:]
    (lay,) = _status()["layouts"]  # type: ignore[misc]
    assert lay["started_by"]["kind"] == "cli" and lay["started_by"]["text"].startswith(
        "started by `disagg-tui up` from the CLI (pid ")
    assert lay["held_by"] == []
    request = LaunchRequest.from_argv(lay["request"])
    assert request == LaunchRequest(model=MODEL, topology="tp1", port=int(ports[1]), server_port=int(ports[3]),
                                    side_channel_port=int(ports[5]), gpu_memory_utilization=0.95,
                                    max_model_len=65536, extra_args=("--served-model-name", "my model"),
                                    extra_env=(("MY_VAR", "hello world"),))
    text = cli("status").stdout
    assert "started by `disagg-tui up` from the CLI" in text and "request: disagg-tui up --model dummy-qwen3-8b" in text
    first = StateStore().active()
    assert first is not None
    # what a restart does: up --replace with the stored request
    again = cli("up", "--sim", "--sim-startup", "0.3", *lay["request"], "--replace", timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    second = StateStore().active()
    assert second is not None and second.id != first.id
    assert second.request == first.request
    argv = _server_argv(second.plan)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.95"
    assert argv[argv.index("--max-model-len") + 1] == "65536"
    last = len(argv) - 1 - argv[::-1].index("--served-model-name")  # the extra argument comes last: it is the one
    assert argv[last + 1] == "my model"
    (server,) = second.plan["servers"]
    assert server["env"]["MY_VAR"] == "hello world"


def test_a_layout_a_running_campaign_or_benchmark_holds_is_refused_with_its_holder_named(
        sleeper: subprocess.Popen[bytes]) -> None:
    up = _up()
    assert up.returncode == 0, up.stderr[-3000:]
    rec = StateStore().active()
    assert rec is not None
    campaign = LayoutOwner(kind="campaign", pid=sleeper.pid, create_time=create_time(sleeper.pid), since=time.time(),
                           name="sweep")
    StateStore().update(rec.id, started_by=campaign)
    (lay,) = _status()["layouts"]  # type: ignore[misc]
    assert lay["held_by"][0]["kind"] == "campaign" and lay["started_by"]["alive"]
    assert "still running: it holds the layout" in cli("status").stdout
    for argv in (["down"], ["bench", "--sim", "-w", "decode-heavy", "--num-prompts", "2"],
                 ["up", "--sim", *(rec.request or []), "--replace"]):
        refused = cli(*argv, timeout=120)
        assert refused.returncode == 2, (argv, refused.stdout, refused.stderr)
        line = refused.stderr.strip().splitlines()[-1]
        assert f"is in use by campaign sweep (pid {sleeper.pid})" in line and "--force" in line, line
        assert "Traceback" not in refused.stderr
    assert StateStore().active() is not None and StateStore().active().id == rec.id  # type: ignore[union-attr]
    # a benchmark against it holds it too
    StateStore().update(rec.id, started_by=None, users=[LayoutUser(kind="bench", pid=sleeper.pid,
                                                                   create_time=create_time(sleeper.pid),
                                                                   since=time.time(), what="decode-heavy")])
    bench = cli("bench", "--sim", "-w", "decode-heavy", "--num-prompts", "2")
    assert bench.returncode == 2 and f"a benchmark (pid {sleeper.pid}, decode-heavy)" in bench.stderr
    forced = cli("bench", "--sim", "-w", "decode-heavy", "--num-prompts", "2", "--output-len", "8", "--force")
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert "benchmarking all the same (--force)" in forced.stderr
    assert [u.pid for u in StateStore().read()[rec.id].users] == [sleeper.pid]  # the forced one is gone again
    down = cli("down", "--force")
    assert down.returncode == 0, down.stderr
    assert StateStore().active() is None


def test_failed_layouts_are_history_not_state() -> None:
    fail = ["--sim-fault", "flashinfer-no-nvcc", "--env", "VLLM_USE_FLASHINFER_SAMPLER=1"]
    for _ in range(2):
        assert _up(*fail).returncode == 1
    layouts = _status()["layouts"]
    assert [lay["status"] for lay in layouts] == ["failed"]  # type: ignore[index]  # the last failure only
    text = cli("status").stdout
    assert "the last failure: x in the console or 'disagg-tui down --all' dismisses it" in text
    history = cli("status", "--failed", "--json")
    assert history.returncode == 0
    past = json.loads(history.stdout)["failures"]
    assert len(past) == 2 and past[0]["current"] and not past[1]["current"]
    assert past[1]["layout"]["diagnoses"][0]["entry_id"] == "flashinfer-no-nvcc"
    # a healthy start moves the last failure into the history too
    assert _up().returncode == 0
    assert [lay["status"] for lay in _status()["layouts"]] == ["ready"]  # type: ignore[index]
    assert cli("down").returncode == 0
    assert _status()["layouts"] == []
    assert len(json.loads(cli("status", "--failed", "--json").stdout)["failures"]) == 2
    assert "tp1 of dummy-qwen3-8b" in cli("status", "--failed").stdout


def test_status_and_watch_follow_a_start_whose_up_was_killed() -> None:
    ports = layout_port_args()
    launcher = subprocess.Popen([sys.executable, "-m", "tui", "up", "--sim", "--sim-startup", "4", "--model", MODEL,
                                 "--topology", "tp1", *ports], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    state = Path(os.environ["DISAGG_TUI_STATE_DIR"]) / "layouts.json"
    try:
        eventually(lambda: state.exists() and (rec := StateStore().active()) is not None and rec.processes, 30,
                   "the server recorded")
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
    rec = StateStore().active()
    assert rec is not None and rec.status == "starting"
    # watch alone brings it to ready: nothing else runs that would
    watch = cli("watch", "--sim", "--json", "--seconds", "12", timeout=60)
    assert watch.returncode == 0, watch.stderr
    ticks = [json.loads(line) for line in watch.stdout.splitlines() if line.strip()]
    assert ticks and ticks[-1]["layout"]["status"] == "ready", [t["layout"]["status"] for t in ticks]
    (lay,) = _status()["layouts"]  # type: ignore[misc]
    assert lay["status"] == "ready" and f"its launcher (pid {launcher.pid}) is gone" in lay["note"]
    assert "ready" in cli("status").stdout.splitlines()[0]


def test_status_alone_follows_a_start_whose_up_was_killed_and_a_server_that_exits() -> None:
    launcher = subprocess.Popen([sys.executable, "-m", "tui", "up", "--sim", "--sim-startup", "2", "--model", MODEL,
                                 "--topology", "tp1", *layout_port_args()], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    state = Path(os.environ["DISAGG_TUI_STATE_DIR"]) / "layouts.json"
    try:
        eventually(lambda: state.exists() and (rec := StateStore().active()) is not None and rec.processes, 30,
                   "the server recorded")
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()

    def status() -> str:
        (lay,) = _status()["layouts"]  # type: ignore[misc]
        return str(lay["status"])

    eventually(lambda: status() == "ready", 60, "status to say ready", step=0.5)
    rec = StateStore().active()
    assert rec is not None
    os.killpg(rec.processes[0].pgid, signal.SIGKILL)
    eventually(lambda: status() == "failed", 30, "status to say failed once its server is gone", step=0.5)
