"""The simulated server's life: start-up log and phases, readiness, engine processes, claims, death and shutdown."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from pathlib import Path

import httpx

from tests.simserver import SimServers, group_alive
from tui.core.launch.phases import PHASE_INDEX, PhaseTracker
from tui.sim.gpustate import SimGpuState


def _refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
        return False


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def test_start_log_phases_refusal_then_ready(sims: SimServers) -> None:
    # one log file for stdout and stderr, as the supervisor keeps it
    s = sims.start(startup_s=1.5, merge=True, env={"VLLM_USE_FLASHINFER_SAMPLER": "0"})
    time.sleep(0.3)
    assert _refused(s.port)  # vLLM listens only once the engine is ready
    s.wait_ready()
    tracker = PhaseTracker()
    seen = []
    for line in s.stdout().splitlines():
        upd = tracker.feed(line)
        if upd is not None and (not seen or seen[-1] != upd.phase.key):
            seen.append(upd.phase.key)
    assert seen == ["args", "config", "engine_init", "loading", "loaded", "compiling", "compiled", "kv_cache",
                    "cuda_graphs", "graphs_done", "engine_ready", "api_starting", "api_up"]
    assert [PHASE_INDEX[k] for k in seen] == sorted(PHASE_INDEX[k] for k in seen)


def test_start_log_engine_processes_claims_and_clean_shutdown(sims: SimServers) -> None:
    s = sims.start()
    s.wait_ready()
    out = s.stdout()
    assert re.search(r"^\(APIServer pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[api_utils\.py:273\] non-default args: "
                     r"\{'model_tag': '/tmp/model', 'host': '127\.0\.0\.1', 'port': \d+, ", out, re.M)
    assert "GPU KV cache size: 743," in out and "Maximum concurrency for 16,384 tokens per request: 45.3" in out
    assert "Model loading took 15.27 GiB and" in out
    assert f"Starting vLLM server on http://127.0.0.1:{s.port}" in out
    assert "Using FlashInfer for top-p & top-k sampling." in out  # VLLM_USE_FLASHINFER_SAMPLER defaults to on
    # vLLM logs on stdout; uvicorn and tqdm on stderr
    assert "Capturing CUDA graphs" in s.stderr() and "Application startup complete." in s.stderr()
    assert "Capturing CUDA graphs" not in out and "Application startup complete." not in out
    banner = s.out.read_bytes().split(b"\n")[:6]  # a multi-line record: \r\n between its lines, as vLLM writes it
    assert all(ln.endswith(b"\r") for ln in banner[:5]) and not banner[5].endswith(b"\r")
    assert "version 0.24.0" in banner[2].decode()
    engine = int(re.search(r"\(EngineCore pid=(\d+)\)", s.stdout()).group(1))  # type: ignore[union-attr]
    assert engine in _children(s.proc.pid)
    assert Path(f"/proc/{engine}/comm").read_text().strip() == "VLLM::EngineCor"
    assert Path(f"/proc/{engine}/cmdline").read_bytes().split(b"\0")[0] == b"VLLM::EngineCore"
    claims = {c.pid: c for c in SimGpuState(s.state_dir).claims()}
    claim = claims[engine]
    assert claim.name == "VLLM::EngineCore" and claim.gpus == [0] and claim.port == s.port
    gib = claim.memory_bytes[0] / 2**30
    assert 120 < gib < 122  # 0.85 × 139.8 GiB + CUDA context (real: 124038 MiB = 121.1 GiB)
    # while it serves, the engine's claim shows utilisation (what the simulated NVML reports)
    with httpx.stream("POST", s.url + "/v1/completions", timeout=30,
                      json={"prompt": [1] * 2000, "max_tokens": 400, "stream": True}) as r:
        lines = r.iter_lines()
        next(lines)
        deadline = time.monotonic() + 3
        util = 0.0
        while util == 0 and time.monotonic() < deadline:
            util = next(c for c in SimGpuState(s.state_dir).claims() if c.pid == engine).util.get(0, 0.0)
            time.sleep(0.05)
        assert 0 < util <= 1
    s.proc.send_signal(signal.SIGTERM)
    assert s.wait_exit() in (0, -signal.SIGTERM)
    assert "Application shutdown complete." in s.stderr()
    assert "died unexpectedly" not in s.log()
    assert not group_alive(s.proc.pid)
    assert engine not in {c.pid for c in SimGpuState(s.state_dir).claims()}


def test_killed_engine_gives_503_then_the_server_exits(sims: SimServers) -> None:
    s = sims.start(clock=10.0)
    s.wait_ready()
    engine = int(re.search(r"\(EngineCore pid=(\d+)\)", s.stdout()).group(1))  # type: ignore[union-attr]
    os.kill(engine, signal.SIGKILL)
    deadline = time.monotonic() + 1.0
    code = None
    while time.monotonic() < deadline:
        code = s.health()
        if code == 503:
            break
        time.sleep(0.02)
    assert code == 503
    r = httpx.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2})
    assert r.status_code == 500 and r.json()["error"]["type"] == "InternalServerError"
    assert s.wait_exit() != 0
    assert "Engine core proc EngineCore died unexpectedly, shutting down client." in s.stdout()
    assert not group_alive(s.proc.pid)


def test_sigkill_of_the_api_server_leaves_no_orphans(sims: SimServers) -> None:
    s = sims.start("--tensor-parallel-size", "2")
    s.wait_ready()
    kids = _children(s.proc.pid)
    assert len(kids) == 3  # EngineCore, Worker_TP0, Worker_TP1
    names = sorted(Path(f"/proc/{k}/cmdline").read_bytes().split(b"\0")[0].decode() for k in kids)
    assert names == ["VLLM::EngineCore", "VLLM::Worker_TP0", "VLLM::Worker_TP1"]
    claims = SimGpuState(s.state_dir).claims()
    assert sorted((c.name, tuple(c.gpus)) for c in claims) == [("VLLM::Worker_TP0", (0,)), ("VLLM::Worker_TP1", (1,))]
    os.kill(s.proc.pid, signal.SIGKILL)  # only the API server: its children must not outlive it
    s.proc.wait(timeout=10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(Path(f"/proc/{k}").exists() and
                                              "Z" not in Path(f"/proc/{k}/stat").read_text().split(")")[1][:3]
                                              for k in kids if Path(f"/proc/{k}").exists()):
        time.sleep(0.05)
    assert not group_alive(s.proc.pid)
    assert SimGpuState(s.state_dir).claims() == []


def test_unknown_flag_fails_like_vllm(sims: SimServers) -> None:
    s = sims.start("--no-such-flag", "1", startup_s=0.3)
    assert s.wait_exit() == 2
    err = s.stderr()
    assert err.startswith("usage: vllm [-h] [-v]\n")
    assert err.rstrip().endswith("vllm: error: unrecognized arguments: --no-such-flag 1")
    assert s.stdout() == ""


def test_underscores_prefixes_and_env_warnings(sims: SimServers) -> None:
    s = sims.start("--max_num_seqs", "64", "--enforce-eager", "--trust-remote",
                   env={"VLLM_ATTENTION_BACKEND": "TRITON_ATTN", "VLLM_USE_FLASHINFER_SAMPLER": "0"})
    s.wait_ready()
    out = s.stdout()
    assert "'max_num_seqs': 64" in out and "'trust_remote_code': True" in out and "'enforce_eager': True" in out
    assert "WARNING" in out and "Unknown vLLM environment variable detected: VLLM_ATTENTION_BACKEND" in out
    assert "FlashInfer top-p/top-k sampling disabled via VLLM_USE_FLASHINFER_SAMPLER=0." in out
    assert "Enforce eager set, disabling torch.compile and CUDAGraphs." in out
    assert "torch.compile took" not in out and "Capturing CUDA graphs" not in s.stderr()
    assert re.search(r"init engine \(profile, create kv cache, warmup model\) took [\d.]+ s$", out, re.M)


def test_data_parallel_two_engines_behind_one_endpoint(sims: SimServers) -> None:
    s = sims.start("--data-parallel-size", "2", clock=20.0)
    s.wait_ready()
    out = s.stdout()
    assert re.search(r"^INFO .*\[api_utils\.py:273\] non-default args", out, re.M)  # the DP parent: no prefix
    assert "Defaulting api_server_count to data_parallel_size (2)." in out
    assert "Started 2 API server processes" in out
    assert "(EngineCore_DP0 pid=" in out and "(EngineCore_DP1 pid=" in out and "(ApiServer_1 pid=" in out
    with httpx.Client(timeout=30) as c:
        for _ in range(4):
            c.post(s.url + "/v1/completions", json={"prompt": [5] * 100, "max_tokens": 3})
    text = httpx.get(s.url + "/metrics").text
    counts = dict(re.findall(r'^vllm:request_success_total\{engine="(\d)",finished_reason="length",'
                             r'model_name="dummy-qwen3-8b"\} (\S+)$', text, re.M))
    assert set(counts) == {"0", "1"} and sum(float(v) for v in counts.values()) == 4
    assert "_created" not in text  # multiprocess exposition, as with vLLM's api_server_count > 1
    claims = SimGpuState(s.state_dir).claims()
    assert sorted((c.name, tuple(c.gpus)) for c in claims) == [("VLLM::EngineCore_DP0", (0,)),
                                                                ("VLLM::EngineCore_DP1", (1,))]
    assert json.loads(httpx.get(s.url + "/version").text) == {"version": "0.24.0"}


def test_sigterm_while_starting_stops_everything(sims: SimServers) -> None:
    s = sims.start(startup_s=4.0)
    deadline = time.monotonic() + 10
    while "Initializing a V1 LLM engine" not in s.stdout() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _children(s.proc.pid)  # the engine process exists by now
    s.proc.send_signal(signal.SIGTERM)
    assert s.wait_exit(timeout=5) == 128 + signal.SIGTERM
    assert not group_alive(s.proc.pid)
    assert SimGpuState(s.state_dir).claims() == []
