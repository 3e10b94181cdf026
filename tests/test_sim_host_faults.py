"""The simulated host reports its facts as a real host with the injected failures would (issue 22, finding 22):
preflight, the planner and the GPU panel (NVML) see what its servers run into."""

from __future__ import annotations

from tui.core.host.base import HostOptions
from tui.core.models import Catalog
from tui.core.plan.preflight import FAIL, PASS, WARN, check_gpus_free, check_toolchain, check_vllm
from tui.core.plan.request import LaunchRequest, plan_request
from tui.sim.faults import HOG_SHARE
from tui.sim.gpustate import FOREIGN_PID
from tui.sim.host import SimHost


def _host(*faults: str) -> SimHost:
    return SimHost(HostOptions(sim=True, sim_gpu="h200", sim_faults=faults))


def _plan(host: SimHost, topology: str = "tp1"):  # type: ignore[no-untyped-def]
    return plan_request(LaunchRequest(model="dummy-qwen3-8b", topology=topology), Catalog.load(), host.facts)[1]


def test_no_nvcc_is_a_preflight_warning_and_the_plan_works_around_it() -> None:
    host = _host("flashinfer-no-nvcc")
    assert check_toolchain(host.facts).status == WARN
    assert ("VLLM_USE_FLASHINFER_SAMPLER", "0") in _plan(host).servers[0].env
    assert check_toolchain(_host().facts).status == PASS


def test_a_silent_jit_is_warned_of_and_the_plan_keeps_flashinfer() -> None:
    host = _host("flashinfer-jit-stall")
    check = check_toolchain(host.facts)
    assert check.status == WARN and "not on PATH" in check.reason
    plan = _plan(host)
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in dict(plan.servers[0].env)
    assert any("JIT-compiling FlashInfer kernels with no output" in w for w in plan.warnings)


def test_no_nixl_fails_preflight_of_a_disaggregated_layout() -> None:
    host = _host("nixl-missing")
    checks = {c.name: c for c in check_vllm(host.facts, _plan(host, "1p1d"))}
    assert checks["nixl"].status == FAIL


def test_memory_another_process_holds_is_seen_by_nvml_and_preflight_until_the_fault_is_gone() -> None:
    host = _host("gpu-memory-taken")
    nvml = host.nvml()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    assert mem.used / mem.total >= HOG_SHARE
    assert FOREIGN_PID in {p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    (check,) = check_gpus_free(_plan(host), nvml)
    assert check.status == FAIL and "GPU 0 has" in check.reason
    later = _host()  # no layout is up: the host as the options say, nobody else's memory
    (check,) = check_gpus_free(_plan(later), later.nvml())
    assert check.status == PASS
