"""doctor reads the plan's environment and GPUs: no FlashInfer JIT warning when the plan turns the sampler off on
Hopper, a cold-start hint from the start-up history, and how KV will travel for a disaggregated plan."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from tui.core.launch.history import StartupHistory, StartupRecord, plan_key
from tui.core.models import Catalog
from tui.core.plan.hostfacts import sim_facts
from tui.core.plan.planner import PlanOptions, plan
from tui.core.playbook.doctor import check_flashinfer_cubin, check_kv_path, doctor
from tui.core.topology import parse_topology

ROOT = Path(__file__).resolve().parent.parent


def _facts() -> object:
    f = sim_facts("h200", 2)
    assert f.vllm is not None
    return dataclasses.replace(f, vllm=dataclasses.replace(f.vllm, flashinfer_cubin=None))  # JIT only


def _plan(topology: str, gpus: tuple[int, ...] | None = None, **env: str) -> object:
    return plan(Catalog.load().model("dummy-qwen3-8b"), parse_topology(topology), _facts(),  # type: ignore[arg-type]
                PlanOptions(gpus=gpus, extra_env=tuple(env.items()), allow_shared_gpus=True,
                            gpu_memory_utilization=0.4))


def test_sampler_off_in_the_plan_on_hopper_gives_no_jit_warning() -> None:
    facts = _facts()
    off = check_flashinfer_cubin(facts, _plan("tp1", VLLM_USE_FLASHINFER_SAMPLER="0"), {})  # type: ignore[arg-type]
    assert off.status == "pass" and "does not use FlashInfer" in off.reason
    on = check_flashinfer_cubin(facts, _plan("tp1"), {})  # type: ignore[arg-type]
    assert on.status == "warn" and "JIT-compiles FlashInfer kernels for server: the FlashInfer sampler" in on.reason
    # the shell's variable alone does not count when the plan says otherwise, and counts when it does not
    shell = check_flashinfer_cubin(facts, _plan("tp1"), {"VLLM_USE_FLASHINFER_SAMPLER": "0"})  # type: ignore[arg-type]
    assert shell.status == "pass"


def test_cold_start_hint_from_history(tmp_path: Path) -> None:
    p = _plan("tp1")
    hist = StartupHistory(tmp_path)
    hist.append(StartupRecord(key=plan_key(p), server="server", startup_s=201.9, cache_state="cold",  # type: ignore
                              subphases=(("flashinfer_jit", 94.0),)))
    checks = doctor(_facts(), None, plan=p, env={}, history=hist)  # type: ignore[arg-type]
    fi = next(c for c in checks if c.name == "flashinfer-cubin")
    assert "the last cold start took 202 s, 94 s of it JIT-compiling FlashInfer kernels" in fi.reason


def test_kv_path_of_a_disaggregated_plan() -> None:
    facts = _facts()
    shared = check_kv_path(facts, None, _plan("1p1d", (0, 0)), {})  # type: ignore[arg-type]
    assert shared[0].status == "warn" and "share GPU 0" in shared[0].reason
    apart = check_kv_path(facts, None, _plan("1p1d", (0, 1)), {"UCX_TLS": "tcp"})  # type: ignore[arg-type]
    assert apart[0].status == "pass" and "NVLink" in apart[0].reason
    assert any(c.name == "ucx" and "leaves out cuda_ipc" in c.reason for c in apart)
    assert any(c.name == "nixl" and "1.5.1" in c.reason for c in apart)


def test_doctor_cli_takes_the_plan_env() -> None:
    out = subprocess.run([sys.executable, "-m", "tui", "doctor", "--sim", "--sim-gpu", "h200", "--model",
                          "dummy-qwen3-8b", "--topology", "1p1d", "--gpus", "0,0", "--allow-shared-gpus",
                          "--gpu-memory-utilization", "0.4", "--env",
                          "VLLM_USE_FLASHINFER_SAMPLER=0", "--json"], capture_output=True, text=True, cwd=ROOT,
                         timeout=60, check=False)
    assert out.returncode in (0, 1), out.stderr
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["flashinfer"]["status"] == "pass"
    assert checks["kv path"]["status"] == "warn"
