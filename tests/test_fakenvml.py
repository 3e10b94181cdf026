"""The simulated host's NVML: pynvml's names and error semantics, values from the live claims and the clock."""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from tui.core.host import nvml as core_nvml
from tui.core.plan.gpuspecs import PRESETS
from tui.sim import fakenvml as fn
from tui.sim import gpuphysics as gp
from tui.sim.gpustate import Claim, SimGpuState

GIB = 2**30


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[tuple[SimGpuState, Clock]]:
    state = SimGpuState(tmp_path)
    state.init_host("h200", 2)
    clock = Clock()
    fn.configure(tmp_path, clock=clock)
    fn.nvmlInit()
    yield state, clock
    fn.nvmlShutdown()
    fn.configure(None)


def _claim(state: SimGpuState, pid: int, gpu: int, gib: float, util: float, gpus: list[int] | None = None) -> None:
    state.write_claim(Claim(pid=pid, gpus=gpus or [gpu], memory_bytes={gpu: int(gib * GIB)}, util={gpu: util},
                            mem_util={gpu: util / 3}, server="server", port=8000))


def test_errors_have_pynvml_semantics(tmp_path: Path) -> None:
    fn.configure(tmp_path)
    with pytest.raises(pynvml.NVMLError_Uninitialized) as exc:
        fn.nvmlDeviceGetCount()
    assert exc.value.value == pynvml.NVML_ERROR_UNINITIALIZED
    # no simulated host in this state dir: like a host whose driver is not loaded
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        fn.nvmlInit()
    SimGpuState(tmp_path).init_host("b200", 2)
    fn.nvmlInit()
    try:
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            fn.nvmlDeviceGetHandleByIndex(2)
        h = fn.nvmlDeviceGetHandleByIndex(1)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            fn.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_VIDEO)
        assert fn.NVMLError is pynvml.NVMLError
    finally:
        fn.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fn.nvmlShutdown()


def test_static_facts_match_the_preset(sim: tuple[SimGpuState, Clock]) -> None:
    spec = PRESETS["h200"]
    assert fn.nvmlDeviceGetCount() == 2
    h = fn.nvmlDeviceGetHandleByIndex(1)
    assert fn.nvmlDeviceGetName(h) == spec.name
    assert fn.nvmlDeviceGetUUID(h) == "GPU-5153494d-h200-0001-0000-000000000001"
    assert fn.nvmlDeviceGetCudaComputeCapability(h) == (9, 0)
    assert fn.nvmlDeviceGetMemoryInfo(h).total == spec.memory_total_mib * 2**20
    assert fn.nvmlDeviceGetEnforcedPowerLimit(h) == spec.power_limit_w * 1000
    assert fn.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM) == spec.mem_clock_mhz
    gpus = core_nvml.list_gpus(fn)
    assert [g.index for g in gpus] == [0, 1] and gpus[0].compute_capability == 9.0
    assert core_nvml.driver_versions(fn) == (fn.SIM_DRIVER, "13.0")


def test_memory_and_processes_follow_claims(sim: tuple[SimGpuState, Clock]) -> None:
    state, _ = sim
    h0, h1 = fn.nvmlDeviceGetHandleByIndex(0), fn.nvmlDeviceGetHandleByIndex(1)
    assert fn.nvmlDeviceGetMemoryInfo(h0, pynvml.nvmlMemory_v2).used == 0
    assert fn.nvmlDeviceGetMemoryInfo(h0).used == gp.RESERVED_BYTES  # v1 counts the driver's reserve as used
    assert fn.nvmlDeviceGetComputeRunningProcesses(h0) == []
    child = subprocess.Popen(["sleep", "60"])
    try:
        _claim(state, os.getpid(), 0, 100, 0.5)
        _claim(state, child.pid, 0, 20, 0.75)
        mem = fn.nvmlDeviceGetMemoryInfo(h0, pynvml.nvmlMemory_v2)
        assert mem.used == 120 * GIB + gp.CONTEXT_OVERHEAD_BYTES
        assert mem.free == mem.total - mem.used - mem.reserved
        v1 = fn.nvmlDeviceGetMemoryInfo(h0)
        assert (v1.used, v1.free) == (mem.used + mem.reserved, mem.free)
        procs = {p.pid: p.usedGpuMemory for p in fn.nvmlDeviceGetComputeRunningProcesses(h0)}
        assert procs == {os.getpid(): 100 * GIB, child.pid: 20 * GIB}
        assert fn.nvmlDeviceGetUtilizationRates(h0).gpu == 100  # 0.5 + 0.75, capped
        assert fn.nvmlDeviceGetUtilizationRates(h1).gpu == 0
        assert fn.nvmlDeviceGetMemoryInfo(h1, pynvml.nvmlMemory_v2).used == 0
        assert fn.nvmlDeviceGetGraphicsRunningProcesses(h0) == []
    finally:
        child.kill()
        child.wait()
    # a dead engine frees its memory, like a real one (once the claims are read again)
    time.sleep(fn._CLAIMS_TTL_S)
    procs = {p.pid for p in fn.nvmlDeviceGetComputeRunningProcesses(h0)}
    assert procs == {os.getpid()}
    assert fn.nvmlDeviceGetMemoryInfo(h0, pynvml.nvmlMemory_v2).used == 100 * GIB + gp.CONTEXT_OVERHEAD_BYTES


def test_power_temperature_clock_follow_load_with_lag(sim: tuple[SimGpuState, Clock]) -> None:
    state, clock = sim
    spec = PRESETS["h200"]
    h = fn.nvmlDeviceGetHandleByIndex(0)
    assert fn.nvmlDeviceGetPowerUsage(h) == spec.idle_power_w * 1000  # bare GPU
    assert fn.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == round(spec.sm_clock_max_mhz * gp.IDLE_CLOCK_SHARE)
    assert fn.nvmlDeviceGetCurrentClocksEventReasons(h) == pynvml.nvmlClocksEventReasonGpuIdle
    _claim(state, os.getpid(), 0, 100, 0.0)
    clock.t += 60  # a loaded, idle engine settles
    idle_loaded = spec.idle_power_w * gp.LOADED_IDLE_FACTOR
    assert fn.nvmlDeviceGetPowerUsage(h) / 1000 == pytest.approx(idle_loaded, abs=0.01)
    assert fn.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == spec.sm_clock_max_mhz
    temp_before = fn.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    energy_before = fn.nvmlDeviceGetTotalEnergyConsumption(h)
    _claim(state, os.getpid(), 0, 100, 1.0)  # full load from now on
    full = idle_loaded + (spec.power_limit_w - idle_loaded) * gp.POWER_FULL_SHARE
    clock.t += gp.TAU_POWER_S
    p1 = fn.nvmlDeviceGetPowerUsage(h) / 1000
    assert p1 == pytest.approx(full + (idle_loaded - full) * math.exp(-1), abs=0.01)  # one time constant
    t1 = fn.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    assert temp_before <= t1 < temp_before + 5  # the temperature lags far more
    clock.t += 120
    assert fn.nvmlDeviceGetPowerUsage(h) / 1000 == pytest.approx(full, abs=0.01)
    assert fn.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) == round(
        gp.AMBIENT_C + (gp.FULL_LOAD_C - gp.AMBIENT_C) * (full - spec.idle_power_w)
        / (spec.power_limit_w - spec.idle_power_w))
    assert fn.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == round(spec.sm_clock_max_mhz * gp.LOADED_CLOCK_FLOOR)
    assert fn.nvmlDeviceGetCurrentClocksEventReasons(h) == pynvml.nvmlClocksEventReasonSwPowerCap
    # energy integrates power: between the idle and the full power over the 120.5 s
    gained_j = (fn.nvmlDeviceGetTotalEnergyConsumption(h) - energy_before) / 1000
    assert idle_loaded * 120.5 < gained_j < full * 120.5
    assert gained_j == pytest.approx(full * 120.5 - (full - idle_loaded) * gp.TAU_POWER_S, rel=1e-4)


def test_values_are_deterministic_given_claims_and_clock(tmp_path: Path) -> None:
    state = SimGpuState(tmp_path)
    state.init_host("b200", 2)
    _claim(state, os.getpid(), 1, 50, 0.6)

    def run() -> list[int]:
        clock = Clock(5000.0)
        fn.configure(tmp_path, clock=clock)
        fn.nvmlInit()
        try:
            h = fn.nvmlDeviceGetHandleByIndex(1)
            out = []
            for _ in range(5):
                clock.t += 0.7
                out += [fn.nvmlDeviceGetPowerUsage(h), fn.nvmlDeviceGetTemperature(h, 0),
                        fn.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM), fn.nvmlDeviceGetTotalEnergyConsumption(h)]
            return out
        finally:
            fn.nvmlShutdown()

    assert run() == run()


def test_unsupported_functions_raise_not_supported(tmp_path: Path) -> None:
    SimGpuState(tmp_path).init_host("h200", 1)
    fn.configure(tmp_path, unsupported={"nvmlDeviceGetPowerUsage"})
    fn.nvmlInit()
    try:
        h = fn.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            fn.nvmlDeviceGetPowerUsage(h)
        assert fn.nvmlDeviceGetTemperature(h, 0) > 0
        with pytest.raises(pynvml.NVMLError_NotSupported):  # one GPU: no NVLink
            fn.nvmlDeviceGetNvLinkState(h, 0)
        assert core_nvml.link_matrix(fn, 1) == (("X",),)
    finally:
        fn.nvmlShutdown()
        fn.configure(None)


@pytest.mark.parametrize(("count", "gpu"), [(2, "b200"), (4, "h200"), (8, "b200")])
def test_link_matrix_is_nv18_everywhere(tmp_path: Path, count: int, gpu: str) -> None:
    SimGpuState(tmp_path).init_host(gpu, count)
    fn.configure(tmp_path)
    fn.nvmlInit()
    try:
        matrix = core_nvml.link_matrix(fn, count)
        expected = tuple(tuple("X" if i == j else "NV18" for j in range(count)) for i in range(count))
        assert matrix == expected
        h = fn.nvmlDeviceGetHandleByIndex(0)
        assert core_nvml.numa_node(fn, h) == 0
        assert core_nvml.cpu_affinity(fn, h) == list(range(os.cpu_count() or 1))
    finally:
        fn.nvmlShutdown()
        fn.configure(None)


def test_nvlink_counters_grow_with_tp_load(sim: tuple[SimGpuState, Clock]) -> None:
    state, clock = sim
    h = fn.nvmlDeviceGetHandleByIndex(0)
    ids = [(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0xFFFFFFFF), (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
                                                                         0xFFFFFFFF), (9999, 0)]
    first = fn.nvmlDeviceGetFieldValues(h, ids)
    assert first[2].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    state.write_claim(Claim(pid=os.getpid(), gpus=[0, 1], memory_bytes={0: GIB, 1: GIB}, util={0: 1.0, 1: 1.0}))
    clock.t += 1.0
    fn.nvmlDeviceGetFieldValues(h, ids)
    clock.t += 2.0
    later = fn.nvmlDeviceGetFieldValues(h, ids)
    assert later[0].nvmlReturn == pynvml.NVML_SUCCESS
    rate = (later[0].value.ullVal - first[0].value.ullVal) * 1024 / 3.0
    expected = PRESETS["h200"].nvlink_bandwidth * gp.NVLINK_BUSY_SHARE
    assert rate == pytest.approx(expected, rel=0.01)  # load is accounted as of each reading
    assert later[0].timestamp == int(clock.t * 1e6)


def test_configure_again_keeps_the_history_another_dir_starts_afresh(tmp_path: Path) -> None:
    SimGpuState(tmp_path).init_host("h200", 1)
    fn.configure(tmp_path)
    fn.nvmlInit()
    h = fn.nvmlDeviceGetHandleByIndex(0)
    energy = fn.nvmlDeviceGetTotalEnergyConsumption(h)
    fn.configure(tmp_path)  # e.g. SimHost.nvml() asked again: the same driver
    assert fn.nvmlDeviceGetCount() == 1
    assert fn.nvmlDeviceGetTotalEnergyConsumption(h) >= energy
    other = tmp_path / "other"
    SimGpuState(other).init_host("b200", 2)
    fn.configure(other)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fn.nvmlDeviceGetCount()
    fn.nvmlInit()
    assert fn.nvmlDeviceGetCount() == 2
    fn.nvmlShutdown()
    fn.configure(None)
