"""Data parallel across hosts in the simulated vLLM: a head (API server + rank 0) and a ``--headless`` host (rank 1),
two real processes with their own simulated GPUs (state dirs), joined over real TCP on loopback."""

from __future__ import annotations

import concurrent.futures
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import free_port
from tests.simserver import ROOT, SimServer, SimServers
from tui.sim.gpustate import SimGpuState

#: the head's ready timeout (VLLM_ENGINE_READY_TIMEOUT_S) runs on the compressed start-up clock: keep it long
ENV = {"VLLM_ENGINE_READY_TIMEOUT_S": "100000"}


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[SimServers]:
    s = SimServers(tmp_path)
    yield s
    s.close()


def _dp(rpc: int, *extra: str) -> tuple[str, ...]:
    return ("--data-parallel-size", "2", "--data-parallel-size-local", "1", "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(rpc), *extra)


def _pair_head(sims: SimServers, tmp_path: Path, rpc: int) -> SimServer:
    return sims.start(*_dp(rpc), gpus=1, clock=10.0, env={**ENV, "DISAGG_SIM_STATE_DIR": str(tmp_path / "host-a")})


def _headless(sims: SimServers, tmp_path: Path, rpc: int) -> SimServer:
    return sims.start("--headless", *_dp(rpc, "--data-parallel-start-rank", "1"), gpus=1, clock=10.0,
                      env={**ENV, "DISAGG_SIM_STATE_DIR": str(tmp_path / "host-b")})


def _wait_for(server: SimServer, text: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in server.log():
        assert server.proc.poll() is None, server.log()[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} in:\n{server.log()[-3000:]}"
        time.sleep(0.05)


def _successes(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=5).text
    return {m[1]: float(m[2]) for m in re.finditer(
        r'^vllm:request_success_total\{engine="(\d+)",finished_reason="length"[^}]*\} (\S+)$', text, re.M)}


def test_head_waits_for_the_headless_host_serves_both_ranks_and_dies_with_its_link(
        sims: SimServers, tmp_path: Path) -> None:
    rpc = free_port()
    head = _pair_head(sims, tmp_path, rpc)
    _wait_for(head, "Waiting for 0 local, 1 remote core engine proc(s) to connect.")
    _wait_for(head, "init engine (profile, create kv cache, warmup model) took")  # its own rank has started
    assert head.health() is None  # not listening until every rank has joined
    engines = _headless(sims, tmp_path, rpc)
    head.wait_ready()
    out = head.stdout()
    assert "HELLO from remote core engine process 1." in out and "READY from remote core engine process 1." in out
    assert "Launching 1 data parallel engine(s) in headless mode, with head node address " \
           f"tcp://127.0.0.1:{rpc}." in engines.stdout()
    assert "(EngineCore_DP1 pid=" in engines.stdout() and "(EngineCore_DP0 pid=" not in engines.stdout()

    body = {"model": "dummy-qwen3-8b", "prompt": "hello across hosts", "max_tokens": 24}
    with httpx.stream("POST", head.url + "/v1/completions", json={**body, "stream": True},
                      headers={"X-data-parallel-rank": "1"}, timeout=20) as r:  # rank 1: the headless host's
        chunks = [ln for ln in r.iter_lines() if ln.startswith("data: {")]
    assert chunks and '"finish_reason":"length"' in chunks[-1]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # the balancer: the first goes to rank 0
        answers = list(pool.map(lambda _: httpx.post(head.url + "/v1/completions", json=body, timeout=20),
                                range(2)))
    assert all(a.status_code == 200 and a.json()["usage"]["completion_tokens"] == 24 for a in answers)
    deadline = time.monotonic() + 5
    while (counts := _successes(head.url)).get("1", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)  # the headless host sends its rank's metrics a few times a second
    assert counts["0"] >= 1 and counts["1"] >= 1 and counts["0"] + counts["1"] == 3
    # each host's simulated GPU holds its own rank's engine, as its fake NVML reports
    a = {c.name: c for c in SimGpuState(tmp_path / "host-a").claims()}
    b = {c.name: c for c in SimGpuState(tmp_path / "host-b").claims()}
    assert set(a) == {"VLLM::EngineCore_DP0"} and set(b) == {"VLLM::EngineCore_DP1"}
    assert b["VLLM::EngineCore_DP1"].gpus == [0] and b["VLLM::EngineCore_DP1"].memory_bytes[0] > 50 * 2**30

    engines.kill()
    t0 = time.monotonic()
    assert head.wait_exit(timeout=10) == 1
    assert time.monotonic() - t0 < 6
    assert "Engine core proc EngineCore_DP1 died unexpectedly, shutting down client." in head.stdout()


def test_headless_host_waits_for_its_head_and_exits_when_it_goes(sims: SimServers, tmp_path: Path) -> None:
    rpc = free_port()
    engines = _headless(sims, tmp_path, rpc)
    _wait_for(engines, f"Waiting for the front-end process at tcp://127.0.0.1:{rpc} to accept the handshake")
    head = _pair_head(sims, tmp_path, rpc)
    head.wait_ready()
    head.kill()
    assert engines.wait_exit(timeout=10) == 1
    out = engines.stdout()
    assert "EngineCore encountered a fatal error." in out
    assert f"RuntimeError: EngineCore_DP1: lost the connection to the front-end process at tcp://127.0.0.1:{rpc}." \
        in out
    assert SimGpuState(tmp_path / "host-b").claims() == []  # its engines are gone with it


@pytest.mark.parametrize(("args", "error"), [
    (("--headless", "--api-server-count", "1"),
     "ValueError: --api-server-count=1 cannot be used with --headless (no API servers are started in headless "
     "mode)."),
    (("--headless", "--data-parallel-size", "2", "--data-parallel-size-local", "0"),
     "ValueError: data_parallel_size_local must be > 0 in headless mode"),
    (("--data-parallel-size", "2", "--data-parallel-size-local", "3"),
     "ValueError: data_parallel_size_local (3) must be <= data_parallel_size (2)"),
    (("--headless", "--data-parallel-size", "2", "--data-parallel-size-local", "1", "--data-parallel-start-rank", "2"),
     "ValueError: data_parallel_rank (2) must be in the range [0, 2)"),
])
def test_refused_like_vllm(tmp_path: Path, args: tuple[str, ...], error: str) -> None:
    env = {"PYTHONPATH": str(ROOT), "DISAGG_SIM_STARTUP_S": "0.2", "DISAGG_SIM_STATE_DIR": str(tmp_path),
           "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "tui.sim.vllm", "serve", "/tmp/model", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == error
