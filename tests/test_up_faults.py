"""Every failure the simulator injects, through `up`: reported with the server's own last lines and the playbook
entry, exit 1; and where the entry's fix is a real fix, the relaunch with it succeeds."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import layout_port_args
from tui.core.launch.state import StateStore

ROOT = Path(__file__).resolve().parent.parent


def _up(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tui", "up", "--sim", "--sim-startup", "1", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)


def _down() -> None:
    subprocess.run([sys.executable, "-m", "tui", "down", "--all"], capture_output=True, cwd=ROOT, timeout=60,
                   check=False)


def _low_port() -> str:
    """A free port below 9000, where the simulator's port-taken fault fires."""
    for port in range(8700, 9000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return str(port)
    pytest.skip("no free port below 9000")


CASES = [
    # fault, model, topology, extra args, entry, fix (auto | entry id | None: not fixable by the plan)
    # the simulated host has no nvcc, so its plan turns FlashInfer's JIT off: the operator's own setting turns the
    # sampler back on (test_a_host_without_nvcc_gets_a_plan_that_starts: the plan as made)
    ("flashinfer-no-nvcc", "dummy-qwen3-8b", "tp1", ["--sim-gpu", "h200", "--env", "VLLM_USE_FLASHINFER_SAMPLER=1"],
     "flashinfer-no-nvcc", "auto"),
    ("flashinfer-jit-stall", "dummy-qwen3-8b", "tp1", ["--sim-gpu", "h200", "--stall-timeout", "4"],
     "flashinfer-jit-stall", "auto"),
    # the failed cold start still saved its compiled graphs (torch.compile ends before the API server gives up),
    # so a second start is warm and comes up without a fix, as on a real host: the fix is asked for by name
    ("dp-ready-timeout", "qwen3.6-27b-nvfp4", "dp2", ["--env", "VLLM_ENGINE_READY_TIMEOUT_S=600"],
     "engine-ready-timeout", "engine-ready-timeout"),
    ("ssm-layout", "qwen3.6-27b-nvfp4", "1p1d", ["--env", "VLLM_SSM_CONV_STATE_LAYOUT=SD"], "ssm-conv-layout-nixl",
     "auto"),
    ("moe-dp-crash", "gemma-4-26b-a4b-fp8", "dp2", [], "moe-dp-start-failure", "moe-dp-start-failure"),
    ("kv-too-small", "dummy-qwen3-8b", "tp1", ["--sim-gpu", "h200"], "kv-cache-too-small-for-max-len",
     "kv-cache-too-small-for-max-len"),
    ("port-taken", "dummy-qwen3-8b", "tp1", ["--sim-gpu", "h200"], "port-in-use", None),
]


@pytest.mark.parametrize(("fault", "model", "topology", "extra", "entry", "fix"), CASES, ids=[c[0] for c in CASES])
def test_fault_is_diagnosed_and_fixed(fault: str, model: str, topology: str, extra: list[str], entry: str,
                                      fix: str | None) -> None:
    ports = layout_port_args()
    if fault == "port-taken":
        ports[1] = _low_port()
    base = ["--sim-fault", fault, "--model", model, "--topology", topology, *ports, *extra]
    try:
        failed = _up(*base)
        assert failed.returncode == 1, failed.stderr[-3000:]
        last = failed.stderr.strip().splitlines()[-1]
        assert last.startswith("disagg-tui: error:") and f"known failure [{entry}]" in last, last
        assert "    | " in failed.stderr  # the server's own last log lines
        assert f"ERROR [{entry}]" in failed.stderr
        (rec,) = [r for r in StateStore().read().values() if r.status == "failed"]
        assert any(d["entry_id"] == entry for d in rec.diagnoses)
        if fix is None:
            assert "--apply-fix" not in last.split("hint:")[-1]
            return
        fixed = _up(*base, "--apply-fix", fix)
        assert fixed.returncode == 0, fixed.stderr[-3000:]
        assert "is up (SIMULATED host)" in fixed.stdout
        assert f"fixes applied: {entry if fix == 'auto' else fix}" in fixed.stdout
        up = StateStore().active()
        assert up is not None and up.status == "ready"
        assert (entry if fix == "auto" else fix) in up.plan["fixes_applied"]
        status = subprocess.run([sys.executable, "-m", "tui", "status", "--json"], capture_output=True, text=True,
                                cwd=ROOT, timeout=60, check=False)
        assert json.loads(status.stdout)["layouts"]
    finally:
        _down()


# what the simulated host's facts say of these faults (another process's memory, no NIXL) is what preflight reads:
# `up` refuses before it starts anything, as on a real host (a server started without `up` still fails as vLLM does:
# tests/test_sim_faults.py)
HOST_FAULTS = [
    ("gpu-memory-taken", "tp1", "gpu memory: GPU 0 has"),
    ("nixl-missing", "1p1d", "nixl: nixl is not installed in vLLM's environment"),
]


@pytest.mark.parametrize(("fault", "topology", "said"), HOST_FAULTS, ids=[c[0] for c in HOST_FAULTS])
def test_a_fault_of_the_host_is_refused_by_preflight(fault: str, topology: str, said: str) -> None:
    try:
        refused = _up("--sim-fault", fault, "--model", "dummy-qwen3-8b", "--topology", topology, "--sim-gpu", "h200",
                      *layout_port_args())
        assert refused.returncode == 2, refused.stderr[-3000:]
        last = refused.stderr.strip().splitlines()[-1]
        assert last.startswith("disagg-tui: error: preflight failed: ") and said in last, last
        assert not StateStore().read()
    finally:
        _down()


def test_a_host_without_nvcc_gets_a_plan_that_starts() -> None:
    try:
        up = _up("--sim-fault", "flashinfer-no-nvcc", "--model", "dummy-qwen3-8b", "--topology", "tp1",
                 *layout_port_args())
        assert up.returncode == 0, up.stderr[-3000:]
        assert "VLLM_USE_FLASHINFER_SAMPLER=0" in up.stdout and "--attention-backend TRITON_ATTN" in up.stdout
        rec = StateStore().active()
        assert rec is not None and rec.status == "ready" and not rec.diagnoses
    finally:
        _down()
