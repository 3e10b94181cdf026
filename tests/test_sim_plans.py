"""The planner's own commands, handed to the simulated host exactly as the app launches them (SimHost.server_command):
they start, with the GPUs, ports and environment of the plan, and 1P1D works by hand across its two servers."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.simserver import SimServer, free_port
from tui.core import paths
from tui.core.host.base import HostOptions
from tui.core.models import Catalog
from tui.core.plan.planner import LaunchPlan, PlanOptions, plan
from tui.sim.gpustate import SimGpuState
from tui.sim.host import SimHost


def _free_pair(step: int) -> int:
    """A base port with ``base`` and ``base + step`` both free right now (the planner's port layout)."""
    for _ in range(100):
        base = free_port()
        if base + step > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", base + step))
            except OSError:
                continue
        return base
    raise AssertionError("no free port pair")


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[list[SimServer]]:
    servers: list[SimServer] = []
    try:
        yield servers
    finally:
        for s in servers:
            s.kill()


def launch(tmp_path: Path, servers: list[SimServer], model: str, topology: str) -> LaunchPlan:
    profile = Catalog.load().model(model)
    host = SimHost(HostOptions(sim=True, sim_gpu="b200", sim_gpus=2, sim_startup_s=0.3, sim_clock=20.0))
    opts = PlanOptions(port=free_port(), server_base_port=_free_pair(100), side_channel_base=_free_pair(1))
    p = plan(profile, topology, host.facts, opts)
    for spec in p.servers:
        cmd = host.server_command(spec, p, profile.to_dict())
        out, err = tmp_path / f"{spec.name}.out", tmp_path / f"{spec.name}.err"
        with out.open("wb") as fo, err.open("wb") as fe:
            proc = subprocess.Popen(cmd.argv, env=cmd.env, stdout=fo, stderr=fe, start_new_session=True)
        servers.append(SimServer(proc=proc, port=spec.port, out=out, err=err, state_dir=paths.state_dir()))
    for s in servers:
        s.wait_ready()
    return p


def test_planned_1p1d_runs_and_transfers_kv(tmp_path: Path, launched: list[SimServer]) -> None:
    p = launch(tmp_path, launched, "qwen3.6-27b-nvfp4", "1p1d")
    prefill, decode = launched
    assert "VLLM_SSM_CONV_STATE_LAYOUT env detected" in prefill.stdout()  # the planner's fix is in the env
    claims = {c.server: c for c in SimGpuState(paths.state_dir()).claims()}
    assert claims["prefill-0"].gpus == [0] and claims["decode-0"].gpus == [1]
    served = p.served_name
    ids = list(range(3000, 6000))
    body = {"model": served, "prompt": ids, "max_tokens": 1, "stream": False,
            "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                                   "remote_block_ids": None, "remote_host": None, "remote_port": None}}
    kv = httpx.post(prefill.url + "/v1/completions", json=body, headers={"X-Request-Id": "plan-1"},
                    timeout=30).json()["kv_transfer_params"]
    assert kv["remote_port"] == p.servers[0].side_channel_port
    assert len(kv["remote_block_ids"]) == 2  # hybrid: full-attention blocks and the linear-attention state
    r = httpx.post(decode.url + "/v1/completions", timeout=30, headers={"X-Request-Id": "plan-1"},
                   json={"model": served, "prompt": ids, "max_tokens": 8, "kv_transfer_params": kv})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 3000
    text = httpx.get(decode.url + "/metrics").text
    m = re.search(r'vllm:prompt_tokens_by_source_total\{engine="0",model_name="[^"]+",source="external_kv_transfer"\} '
                  r"(\S+)", text)
    assert m and float(m.group(1)) == 2992


def test_planned_dp2_and_tp2_start(tmp_path: Path, launched: list[SimServer]) -> None:
    launch(tmp_path, launched, "qwen3.6-27b-nvfp4", "dp2")
    dp = launched[0]
    assert "(EngineCore_DP1 pid=" in dp.stdout()
    assert json.loads(httpx.get(dp.url + "/v1/models").text)["data"][0]["id"] == "nvidia/Qwen3.6-27B-NVFP4"
    dp.kill()
    launched.clear()
    launch(tmp_path, launched, "gemma-4-26b-a4b-fp8", "tp2")
    out = launched[0].stdout()
    assert "(Worker_TP1 pid=" in out and "Model loading took 12.60 GiB" in out  # 25.2 GiB split over two GPUs
