"""A fake NVML over the simulated host's GPUs: the subset of pynvml the app uses, same names and semantics.

Functions take and return what nvidia-ml-py's do (handles, struct-like objects with the same attribute names,
milliwatts, millijoules, KB/s, MHz, bytes), and fail the same way: ``NVMLError`` *is* pynvml's, so
``NVMLError(NVML_ERROR_NOT_SUPPORTED)`` is an ``NVMLError_NotSupported`` with ``.value == 3``, calls before
``nvmlInit`` raise ``NVMLError_Uninitialized``, a bad index ``NVMLError_InvalidArgument``. A state directory
without ``simgpu/host.json`` behaves like a host whose driver is not loaded.

The GPUs are ``<state_dir>/simgpu/`` (see :mod:`tui.sim.gpustate`): ``host.json`` (model and count) and the live
claims the simulated engines write. Per GPU:

- memory used = Σ claims' memory on it, plus a small context overhead once any process holds memory; the
  driver's reserve is apart (``nvmlMemory_v2``: ``reserved``) or counted as used (v1), as NVML does (measured on
  the H200 of ``fixtures/vllm-0.24.0-h200``: reserved 616 MiB, overhead 9 MiB); processes = the claims' pids;
- utilisation = Σ claims' util (capped at 100 %), memory-controller utilisation likewise;
- power = idle + (limit − idle) × 0.99 × util, where idle is the preset's idle power without a context and
  ``LOADED_IDLE_FACTOR`` × that with one (H200: 76 W bare, 121 W with vLLM loaded, ≈ 695 W flat out);
- temperature and SM clock follow load with a first-order lag (τ 15 s and 6 s): 35 °C bare, about 60 °C at the
  limit; SM clock at the idle clock without a context, at the maximum with one, down to 75 % of it under full
  load (the captured H200 fell from 1980 to 1455–1890 MHz as a run went on); the memory clock is constant;
- throttle reasons: ``GpuIdle`` while nothing runs, ``SwPowerCap`` within 3 % of the power limit;
- the energy counter integrates power (exactly, whatever the sampling rate), starting from idle power × the
  time since ``host.json`` was written;
- PCIe and NVLink throughput are small figures proportional to load (NVLink only for claims spanning several
  GPUs: TP all-reduce). NVLink is ``NV<links>`` between every pair of simulated GPUs (directly with two GPUs,
  through simulated NVSwitches with more), as on HGX boards.

Values are deterministic given the claims and the clock (``configure(..., clock=...)`` injects one for tests);
``unsupported`` makes chosen functions raise ``NVMLError_NotSupported``, as some drivers and VMs do.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pynvml import (
    NVML_AFFINITY_SCOPE_NODE,
    NVML_CLOCK_GRAPHICS,
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_CLOCK_VIDEO,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_FI_DEV_NVLINK_LINK_COUNT,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX,
    NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX,
    NVML_NVLINK_DEVICE_TYPE_GPU,
    NVML_NVLINK_DEVICE_TYPE_SWITCH,
    NVML_NVLINK_MAX_LINKS,
    NVML_P2P_CAPS_INDEX_NVLINK,
    NVML_P2P_STATUS_NOT_SUPPORTED,
    NVML_P2P_STATUS_OK,
    NVML_PCIE_UTIL_RX_BYTES,
    NVML_PCIE_UTIL_TX_BYTES,
    NVML_SUCCESS,
    NVML_TEMPERATURE_GPU,
    NVML_TOPOLOGY_NODE,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    NVMLError,
    nvmlClocksEventReasonGpuIdle,
    nvmlClocksEventReasonSwPowerCap,
    nvmlMemory_v2,
)

from tui.core.plan.gpuspecs import GpuSpec
from tui.sim.gpuphysics import (
    MIB,
    PCIE_FULL_LOAD_KBPS,
    POWER_CAP_SHARE,
    RESERVED_BYTES,
    Dynamics,
    Load,
    advance,
    load_on,
)
from tui.sim.gpustate import Claim, SimGpuState, simgpu_dir

__all__ = [
    "NVML_AFFINITY_SCOPE_NODE", "NVML_CLOCK_GRAPHICS", "NVML_CLOCK_MEM", "NVML_CLOCK_SM", "NVML_CLOCK_VIDEO",
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "NVML_P2P_CAPS_INDEX_NVLINK",
    "NVML_P2P_STATUS_OK", "NVML_PCIE_UTIL_RX_BYTES", "NVML_PCIE_UTIL_TX_BYTES", "NVML_TEMPERATURE_GPU", "NVMLError",
    "configure", "nvmlMemory_v2",
]

SIM_DRIVER = "580.95.05"
SIM_CUDA = 13000
_NVSWITCHES = 4
_CLAIMS_TTL_S = 0.5

_lock = threading.RLock()


@dataclass
class _World:
    state_dir: Path | None = None
    clock: Callable[[], float] = time.time
    unsupported: frozenset[str] = frozenset()
    init_count: int = 0
    spec: GpuSpec | None = None
    count: int = 0
    host_mtime: float = 0.0
    claims: tuple[Claim, ...] = ()
    claims_read_at: float = -math.inf
    claims_dir_mtime: int = -1


_world = _World()
_dyn: dict[int, Dynamics] = {}


class _Handle:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<fakenvml device {self.index}>"


def configure(state_dir: Path | str | None, *, clock: Callable[[], float] | None = None,
              unsupported: Iterable[str] = ()) -> None:
    """Choose the state directory (and, for tests, the clock and the functions that answer Not Supported).

    A different directory (or clock, or set of unsupported functions) is a fresh simulated driver: NVML must be
    initialised again, and temperatures, clocks and energy start afresh. The same settings again change nothing,
    so a host asked for its NVML twice keeps one continuous history.
    """
    with _lock:
        new_dir = Path(state_dir) if state_dir is not None else None
        new_clock = clock or time.time
        new_unsupported = frozenset(unsupported)
        if (new_dir, new_clock, new_unsupported) == (_world.state_dir, _world.clock, _world.unsupported):
            return
        _world.state_dir = new_dir
        _world.clock = new_clock
        _world.unsupported = new_unsupported
        _world.init_count = 0
        _world.claims = ()
        _world.claims_read_at = -math.inf
        _world.claims_dir_mtime = -1
        _dyn.clear()


def _state_dir() -> Path:
    if _world.state_dir is None:
        from tui.core import paths

        _world.state_dir = paths.state_dir()
    return _world.state_dir


def _check(name: str) -> None:
    if _world.init_count <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if name in _world.unsupported:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def _gpu(handle: Any) -> int:
    index = getattr(handle, "index", None)
    if not isinstance(index, int) or not 0 <= index < _world.count:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return index


def _spec() -> GpuSpec:
    assert _world.spec is not None
    return _world.spec


# --- init ----------------------------------------------------------------------------------------------------


def nvmlInit() -> None:
    with _lock:
        host = SimGpuState(_state_dir()).host()
        if host is None:
            raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
        _world.spec, _world.count = host
        try:
            _world.host_mtime = (simgpu_dir(_state_dir()) / "host.json").stat().st_mtime
        except OSError:
            _world.host_mtime = _world.clock()
        _world.init_count += 1


def nvmlInitWithFlags(flags: int) -> None:
    nvmlInit()


def nvmlShutdown() -> None:
    with _lock:
        if _world.init_count <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        _world.init_count -= 1


# --- the model -----------------------------------------------------------------------------------------------


def _claims() -> tuple[Claim, ...]:
    """The claims, read again when the claims folder or ``host.json`` (what another process holds) changed."""
    root = simgpu_dir(_state_dir())
    stamps = []
    for path in (root / "claims", root / "host.json"):
        try:
            stamps.append(path.stat().st_mtime_ns)
        except OSError:
            stamps.append(-2)
    mtime = hash(tuple(stamps))
    now = time.monotonic()
    if mtime != _world.claims_dir_mtime or now - _world.claims_read_at >= _CLAIMS_TTL_S:
        _world.claims = tuple(SimGpuState(_state_dir()).claims())
        _world.claims_dir_mtime = mtime
        _world.claims_read_at = now
    return _world.claims


def _load(i: int) -> Load:
    return load_on(i, _claims(), _spec())


def _advance(i: int) -> tuple[Dynamics, Load]:
    now, load = _world.clock(), _load(i)
    d = advance(_dyn.get(i), now, load, _spec(), _world.count, now - _world.host_mtime)
    _dyn[i] = d
    return d, load


# --- system --------------------------------------------------------------------------------------------------


def nvmlSystemGetDriverVersion() -> str:
    _check("nvmlSystemGetDriverVersion")
    return SIM_DRIVER


def nvmlSystemGetCudaDriverVersion() -> int:
    _check("nvmlSystemGetCudaDriverVersion")
    return SIM_CUDA


def nvmlSystemGetCudaDriverVersion_v2() -> int:
    return nvmlSystemGetCudaDriverVersion()


def nvmlSystemGetNVMLVersion() -> str:
    _check("nvmlSystemGetNVMLVersion")
    return f"{SIM_CUDA // 1000}.{SIM_DRIVER}"


def nvmlDeviceGetCount() -> int:
    _check("nvmlDeviceGetCount")
    return _world.count


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    _check("nvmlDeviceGetHandleByIndex")
    if not isinstance(index, int) or not 0 <= index < _world.count:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _Handle(index)


# --- static device facts ---------------------------------------------------------------------------------------


def nvmlDeviceGetIndex(handle: Any) -> int:
    _check("nvmlDeviceGetIndex")
    return _gpu(handle)


def nvmlDeviceGetName(handle: Any) -> str:
    _check("nvmlDeviceGetName")
    _gpu(handle)
    return _spec().name


def nvmlDeviceGetUUID(handle: Any) -> str:
    _check("nvmlDeviceGetUUID")
    i = _gpu(handle)
    # the same UUIDs as tui.core.plan.hostfacts.sim_facts, so the planner's facts and NVML agree
    return f"GPU-5153494d-{_spec().key}-{i:04d}-0000-{i:012d}"


def nvmlDeviceGetCudaComputeCapability(handle: Any) -> tuple[int, int]:
    _check("nvmlDeviceGetCudaComputeCapability")
    _gpu(handle)
    cc = _spec().compute_capability
    major = int(cc)
    return major, round((cc - major) * 10)


def _bus(i: int) -> str:
    return f"00000000:{0x18 + 0x10 * i:02X}:00.0"


def nvmlDeviceGetPciInfo(handle: Any) -> SimpleNamespace:
    _check("nvmlDeviceGetPciInfo")
    i = _gpu(handle)
    bus = _bus(i)
    return SimpleNamespace(busId=bus, busIdLegacy=bus[4:], domain=0, bus=0x18 + 0x10 * i, device=0,
                           pciDeviceId=0x233510DE, pciSubSystemId=0)


def nvmlDeviceGetPciInfo_v3(handle: Any) -> SimpleNamespace:
    return nvmlDeviceGetPciInfo(handle)


def nvmlDeviceGetEnforcedPowerLimit(handle: Any) -> int:
    _check("nvmlDeviceGetEnforcedPowerLimit")
    _gpu(handle)
    return int(_spec().power_limit_w * 1000)


def nvmlDeviceGetPowerManagementLimit(handle: Any) -> int:
    _check("nvmlDeviceGetPowerManagementLimit")
    return nvmlDeviceGetEnforcedPowerLimit(handle)


def nvmlDeviceGetMaxClockInfo(handle: Any, clock_type: int) -> int:
    _check("nvmlDeviceGetMaxClockInfo")
    _gpu(handle)
    if clock_type == NVML_CLOCK_MEM:
        return _spec().mem_clock_mhz
    if clock_type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
        return _spec().sm_clock_max_mhz
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetCpuAffinity(handle: Any, cpu_set_size: int) -> list[int]:
    _check("nvmlDeviceGetCpuAffinity")
    _gpu(handle)
    words = [0] * max(int(cpu_set_size), 1)
    for cpu in range(os.cpu_count() or 1):
        if cpu // 64 < len(words):
            words[cpu // 64] |= 1 << (cpu % 64)
    return words


def nvmlDeviceGetMemoryAffinity(handle: Any, node_set_size: int, scope: int) -> list[int]:
    _check("nvmlDeviceGetMemoryAffinity")
    _gpu(handle)
    return [1] + [0] * (max(int(node_set_size), 1) - 1)


# --- NVLink and topology --------------------------------------------------------------------------------------


def _link_checked(handle: Any, link: int) -> int:
    i = _gpu(handle)
    if _world.count < 2:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if not 0 <= link < min(_spec().nvlink_links, NVML_NVLINK_MAX_LINKS):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return i


def nvmlDeviceGetNvLinkState(handle: Any, link: int) -> int:
    _check("nvmlDeviceGetNvLinkState")
    _link_checked(handle, link)
    return 1


def nvmlDeviceGetNvLinkRemotePciInfo(handle: Any, link: int) -> SimpleNamespace:
    _check("nvmlDeviceGetNvLinkRemotePciInfo")
    i = _link_checked(handle, link)
    # two GPUs: wired to each other; more: HGX-style, every GPU's links go to the NVSwitches
    bus = _bus(1 - i) if _world.count == 2 else f"00000000:{0xE0 + link % _NVSWITCHES:02X}:00.0"
    return SimpleNamespace(busId=bus, busIdLegacy=bus[4:])


def nvmlDeviceGetNvLinkRemotePciInfo_v2(handle: Any, link: int) -> SimpleNamespace:
    return nvmlDeviceGetNvLinkRemotePciInfo(handle, link)


def nvmlDeviceGetNvLinkRemoteDeviceType(handle: Any, link: int) -> int:
    _check("nvmlDeviceGetNvLinkRemoteDeviceType")
    _link_checked(handle, link)
    return NVML_NVLINK_DEVICE_TYPE_GPU if _world.count == 2 else NVML_NVLINK_DEVICE_TYPE_SWITCH


def nvmlDeviceGetP2PStatus(handle1: Any, handle2: Any, index: int) -> int:
    _check("nvmlDeviceGetP2PStatus")
    a, b = _gpu(handle1), _gpu(handle2)
    if a == b or _world.count < 2:
        return NVML_P2P_STATUS_NOT_SUPPORTED
    return NVML_P2P_STATUS_OK


def nvmlDeviceGetTopologyCommonAncestor(handle1: Any, handle2: Any) -> int:
    _check("nvmlDeviceGetTopologyCommonAncestor")
    _gpu(handle1)
    _gpu(handle2)
    return NVML_TOPOLOGY_NODE


# --- dynamic readings ----------------------------------------------------------------------------------------


def nvmlDeviceGetMemoryInfo(handle: Any, version: int | None = None) -> SimpleNamespace:
    """v1 (no version): the driver's reserve counts as used; ``nvmlMemory_v2``: apart, as nvidia-smi shows it."""
    _check("nvmlDeviceGetMemoryInfo")
    i = _gpu(handle)
    with _lock:
        load = _load(i)
    total = _spec().memory_total_mib * MIB
    free = total - RESERVED_BYTES - load.memory
    if version:
        return SimpleNamespace(version=version, total=total, reserved=RESERVED_BYTES, free=free, used=load.memory)
    return SimpleNamespace(total=total, free=free, used=load.memory + RESERVED_BYTES)


def nvmlDeviceGetUtilizationRates(handle: Any) -> SimpleNamespace:
    _check("nvmlDeviceGetUtilizationRates")
    i = _gpu(handle)
    with _lock:
        load = _load(i)
    return SimpleNamespace(gpu=round(load.util * 100), memory=round(load.mem_util * 100))


def nvmlDeviceGetPowerUsage(handle: Any) -> int:
    _check("nvmlDeviceGetPowerUsage")
    i = _gpu(handle)
    with _lock:
        d, _ = _advance(i)
        return round(d.power_w * 1000)


def nvmlDeviceGetTotalEnergyConsumption(handle: Any) -> int:
    _check("nvmlDeviceGetTotalEnergyConsumption")
    i = _gpu(handle)
    with _lock:
        d, _ = _advance(i)
        return int(d.energy_j * 1000)


def nvmlDeviceGetTemperature(handle: Any, sensor: int) -> int:
    _check("nvmlDeviceGetTemperature")
    i = _gpu(handle)
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    with _lock:
        d, _ = _advance(i)
        return round(d.temp_c)


def nvmlDeviceGetClockInfo(handle: Any, clock_type: int) -> int:
    _check("nvmlDeviceGetClockInfo")
    i = _gpu(handle)
    if clock_type == NVML_CLOCK_MEM:
        return _spec().mem_clock_mhz
    if clock_type not in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    with _lock:
        d, _ = _advance(i)
        return round(d.sm_mhz)


def nvmlDeviceGetPerformanceState(handle: Any) -> int:
    _check("nvmlDeviceGetPerformanceState")
    _gpu(handle)
    return 0


def nvmlDeviceGetCurrentClocksEventReasons(handle: Any) -> int:
    _check("nvmlDeviceGetCurrentClocksEventReasons")
    i = _gpu(handle)
    with _lock:
        d, load = _advance(i)
    mask = 0
    if load.util <= 0.0:
        mask |= nvmlClocksEventReasonGpuIdle
    if d.power_w >= POWER_CAP_SHARE * _spec().power_limit_w:
        mask |= nvmlClocksEventReasonSwPowerCap
    return mask


def nvmlDeviceGetCurrentClocksThrottleReasons(handle: Any) -> int:
    _check("nvmlDeviceGetCurrentClocksThrottleReasons")
    return nvmlDeviceGetCurrentClocksEventReasons(handle)


def nvmlDeviceGetPcieThroughput(handle: Any, counter: int) -> int:
    _check("nvmlDeviceGetPcieThroughput")
    i = _gpu(handle)
    if counter not in (NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    with _lock:
        load = _load(i)
    return int(PCIE_FULL_LOAD_KBPS * load.util)


def nvmlDeviceGetFieldValues(handle: Any, field_ids: list[Any]) -> list[SimpleNamespace]:
    _check("nvmlDeviceGetFieldValues")
    i = _gpu(handle)
    with _lock:
        d, _ = _advance(i)
    out = []
    for item in field_ids:
        fid, scope = item if isinstance(item, tuple) else (item, 0)
        ret = NVML_SUCCESS
        value = 0
        if fid in (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
                   NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX):
            if _world.count < 2:
                ret = NVML_ERROR_NOT_SUPPORTED
            else:
                # KiB since the driver loaded; one link's share when a link is named, all links for 0xFFFFFFFF
                links = min(_spec().nvlink_links, NVML_NVLINK_MAX_LINKS)
                share = 1.0 if scope == 0xFFFFFFFF else (1.0 / links if 0 <= scope < links else 0.0)
                raw = 1.06 if fid in (NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX) \
                    else 1.0
                value = int(d.nvlink_kib * share * raw)
        elif fid == NVML_FI_DEV_NVLINK_LINK_COUNT:
            value = _spec().nvlink_links if _world.count > 1 else 0
        else:
            ret = NVML_ERROR_NOT_SUPPORTED
        out.append(SimpleNamespace(fieldId=fid, scopeId=scope, timestamp=int(d.t * 1e6), latencyUsec=0,
                                   valueType=NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, nvmlReturn=ret,
                                   value=SimpleNamespace(ullVal=value, uiVal=value & 0xFFFFFFFF, ulVal=value,
                                                         dVal=float(value), sllVal=value, siVal=value)))
    return out


def _processes(handle: Any) -> list[SimpleNamespace]:
    i = _gpu(handle)
    with _lock:
        load = _load(i)
    return [SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
            for pid, used in load.procs]


def nvmlDeviceGetComputeRunningProcesses(handle: Any) -> list[SimpleNamespace]:
    _check("nvmlDeviceGetComputeRunningProcesses")
    return _processes(handle)


def nvmlDeviceGetComputeRunningProcesses_v3(handle: Any) -> list[SimpleNamespace]:
    return nvmlDeviceGetComputeRunningProcesses(handle)


def nvmlDeviceGetGraphicsRunningProcesses(handle: Any) -> list[SimpleNamespace]:
    _check("nvmlDeviceGetGraphicsRunningProcesses")
    _gpu(handle)
    return []
