"""The GPU sampler: NVML (real, or the simulated host's fake) read off the event loop, nvitop-style.

Handles, names, UUIDs, total memory and the link matrix are read once; the rest every sample except three costly
readings, measured on an H200 (driver 580): PCIe throughput, which NVML measures over a 20 ms window inside the
call (~1 ms of CPU each), and the power limit, every 2 s; the energy counter (~4 ms of CPU a call), every 5 s. Those
are refreshed one GPU per sample in turn, so a host with 8 GPUs never stalls a tick, and carried in between.
Each query is wrapped: an unsupported or failed metric becomes ``None`` with a reason in the sample's
``unavailable`` list, and a metric the driver does not support on a GPU is not asked again. Every call here
blocks: run it in a thread (:class:`SamplerThread` does, publishing :class:`GpuSampled` on the bus).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tui.core.errors import AppError
from tui.core.events import EventBus
from tui.core.host.nvml import _text, cpu_affinity, driver_versions, link_matrix, numa_node
from tui.core.telemetry.events import GpuSampled
from tui.core.telemetry.gpu import GpuAffinity, GpuHostFacts, GpuProcess, GpuSample, cpu_list, decode_throttle
from tui.core.telemetry.procmap import ProcessOwners

DEFAULT_RATE_HZ = 4.0
MAX_RATE_HZ = 10.0
SLOW_PERIOD_S = 2.0  # PCIe throughput and power limit
ENERGY_PERIOD_S = 5.0  # the total energy counter

# NVML return codes (nvml.h): these mean "this GPU or driver will never answer this query"
_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND = 3, 4, 13
_PERMANENT = {_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND}
# nvml.h field ids and constants (the values pynvml exports; read from the module where it has them)
_FI_NVLINK_DATA_TX, _FI_NVLINK_DATA_RX = 138, 139
_ALL_LINKS = 0xFFFFFFFF
_TEMPERATURE_GPU, _CLOCK_SM, _CLOCK_MEM = 0, 1, 2
_PCIE_TX, _PCIE_RX = 0, 1


class TelemetryUnavailable(AppError):
    """NVML cannot be read at all (no driver, no library): one clear message instead of a traceback."""


@dataclass
class _Gpu:
    index: int
    handle: Any
    name: str
    uuid: str
    mem_total: int | None
    has_nvlink: bool = False
    power_limit_w: float | None = None
    pcie: tuple[float | None, float | None] = (None, None)
    slow_na: list[tuple[str, str]] = field(default_factory=list)
    last_slow: float = -math.inf
    energy_j: float | None = None
    energy_na: list[tuple[str, str]] = field(default_factory=list)
    last_energy: float = -math.inf
    nvlink_prev: tuple[float, float, float] | None = None  # (t seconds, tx KiB, rx KiB)


class GpuSampler:
    """Reads every GPU of one NVML module. Not thread-safe: one thread samples."""

    def __init__(self, nvml: Any, *, owners: ProcessOwners | None = None, wall: Callable[[], float] = time.time,
                 clock: Callable[[], float] = time.monotonic, slow_period_s: float = SLOW_PERIOD_S,
                 energy_period_s: float = ENERGY_PERIOD_S) -> None:
        self.nvml = nvml
        self.owners = owners or ProcessOwners()
        self._wall = wall
        self._clock = clock
        self._slow_period = slow_period_s
        self._energy_period = energy_period_s
        self._turn = 0
        self._gpus: list[_Gpu] | None = None
        self._facts: GpuHostFacts | None = None
        self._permanent: dict[tuple[int, str], str] = {}
        err = getattr(nvml, "NVMLError", None)
        self._nvml_error: type[BaseException] = err if isinstance(err, type) else Exception

    # --- static ---------------------------------------------------------------------------------------------
    def _const(self, name: str, default: int) -> int:
        value = getattr(self.nvml, name, default)
        return value if isinstance(value, int) else default

    def _devices(self) -> list[_Gpu]:
        if self._gpus is not None:
            return self._gpus
        nvml = self.nvml
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001 - any failure here means no GPU can be read
            raise TelemetryUnavailable(f"NVML cannot list the GPUs: {exc}",
                                       hint="is the NVIDIA driver loaded? (nvidia-smi should answer)") from None
        gpus = []
        for i in range(count):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            name = self._static(i, "name", nvml.nvmlDeviceGetName, h)
            uuid = self._static(i, "uuid", nvml.nvmlDeviceGetUUID, h)
            mem = self._static(i, "mem_total", nvml.nvmlDeviceGetMemoryInfo, h)
            gpus.append(_Gpu(index=i, handle=h, name=_text(name) if name is not None else f"GPU {i}",
                             uuid=_text(uuid) if uuid is not None else "",
                             mem_total=int(mem.total) if mem is not None else None))
        self._gpus = gpus
        facts = self.host_facts()
        for g in gpus:
            row = facts.links[g.index] if g.index < len(facts.links) else ()
            g.has_nvlink = any(cell.startswith("NV") for cell in row)
        return gpus

    def _static(self, index: int, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - a static fact that fails is shown as unknown
            self._permanent[(index, what)] = _reason(exc)
            return None

    def host_facts(self) -> GpuHostFacts:
        """Driver, CUDA version, link matrix and CPU/NUMA affinity: read once."""
        if self._facts is not None:
            return self._facts
        nvml = self.nvml
        gpus = self._gpus if self._gpus is not None else self._devices()
        na: list[tuple[str, str]] = []
        driver, cuda = driver_versions(nvml)
        try:
            nvml_version: str | None = _text(nvml.nvmlSystemGetNVMLVersion())
        except Exception as exc:  # noqa: BLE001
            nvml_version = None
            na.append(("nvml_version", _reason(exc)))
        try:
            links = link_matrix(nvml, len(gpus))
        except Exception as exc:  # noqa: BLE001 - topology is a nicety
            links = ()
            na.append(("links", _reason(exc)))
        affinity = []
        for g in gpus:
            cpus = cpu_affinity(nvml, g.handle)
            affinity.append(GpuAffinity(index=g.index, cpus=cpu_list(cpus) if cpus else None,
                                        numa_node=numa_node(nvml, g.handle)))
        self._facts = GpuHostFacts(driver=driver, cuda_driver=cuda, nvml_version=nvml_version, count=len(gpus),
                                   names=tuple(g.name for g in gpus), uuids=tuple(g.uuid for g in gpus),
                                   links=links, affinity=tuple(affinity), unavailable=tuple(na))
        return self._facts

    # --- sampling ---------------------------------------------------------------------------------------------
    def _q(self, g: _Gpu, na: list[tuple[str, str]], fieldname: str, fn_name: str, *args: Any) -> Any:
        key = (g.index, fieldname)
        known = self._permanent.get(key)
        if known is not None:
            na.append((fieldname, known))
            return None
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            why = f"{fn_name} is not in this NVML binding"
            self._permanent[key] = why
            na.append((fieldname, why))
            return None
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - a metric must never raise
            why = _reason(exc)
            if getattr(exc, "value", None) in _PERMANENT:
                self._permanent[key] = why
            na.append((fieldname, why))
            return None

    def sample(self) -> tuple[GpuSample, ...]:
        gpus = self._devices()
        now = self._clock()
        # the costly readings: every GPU at its first sample, then at most one GPU per sample, in turn
        slow_gpu = energy_gpu = None
        for k in range(len(gpus)):
            g = gpus[(self._turn + k) % len(gpus)]
            if slow_gpu is None and now - g.last_slow >= self._slow_period:
                slow_gpu = g
            if energy_gpu is None and now - g.last_energy >= self._energy_period:
                energy_gpu = g
        self._turn += 1
        out = tuple(self._sample_one(g, now, slow=g is slow_gpu or g.last_slow == -math.inf,
                                     energy=g is energy_gpu or g.last_energy == -math.inf) for g in gpus)
        if out and all(s.mem_used is None and s.util_gpu is None for s in out):
            # not one GPU answers its two basic readings: the driver is failing, not a metric unsupported; the
            # event carries the error and no GPUs, so a panel keeps its last reading and shows it stale
            why = out[0].reason("mem_used") or out[0].reason("util_gpu") or "no reading"
            raise TelemetryUnavailable(f"NVML answers no GPU reading: {why}",
                                       hint="the driver may be failing (see dmesg / nvidia-smi)")
        return out

    def _sample_one(self, g: _Gpu, now: float, *, slow: bool, energy: bool) -> GpuSample:
        q = self._q
        na: list[tuple[str, str]] = []
        h = g.handle
        ts = self._wall()
        scratch: list[tuple[str, str]] = []
        util = q(g, scratch, "util", "nvmlDeviceGetUtilizationRates", h)
        na.extend((f, why) for _, why in scratch for f in ("util_gpu", "util_mem"))
        mem = self._memory(g, na)
        power = q(g, na, "power_w", "nvmlDeviceGetPowerUsage", h)
        temp = q(g, na, "temp_c", "nvmlDeviceGetTemperature", h,
                 self._const("NVML_TEMPERATURE_GPU", _TEMPERATURE_GPU))
        sm = q(g, na, "sm_clock_mhz", "nvmlDeviceGetClockInfo", h, self._const("NVML_CLOCK_SM", _CLOCK_SM))
        memclk = q(g, na, "mem_clock_mhz", "nvmlDeviceGetClockInfo", h, self._const("NVML_CLOCK_MEM", _CLOCK_MEM))
        pstate = q(g, na, "pstate", "nvmlDeviceGetPerformanceState", h)
        if energy:
            g.last_energy = now
            g.energy_na = []
            mj = q(g, g.energy_na, "energy_j", "nvmlDeviceGetTotalEnergyConsumption", h)
            g.energy_j = mj / 1000.0 if mj is not None else None
        na.extend(g.energy_na)
        throttle_mask = self._throttle(g, na)
        if slow:
            g.last_slow = now
            g.slow_na = []
            limit = q(g, g.slow_na, "power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", h)
            g.power_limit_w = limit / 1000.0 if limit is not None else None
            tx = q(g, g.slow_na, "pcie_tx_bps", "nvmlDeviceGetPcieThroughput", h,
                   self._const("NVML_PCIE_UTIL_TX_BYTES", _PCIE_TX))
            rx = q(g, g.slow_na, "pcie_rx_bps", "nvmlDeviceGetPcieThroughput", h,
                   self._const("NVML_PCIE_UTIL_RX_BYTES", _PCIE_RX))
            g.pcie = (tx * 1024.0 if tx is not None else None, rx * 1024.0 if rx is not None else None)
        na.extend(g.slow_na)
        nv_tx, nv_rx = self._nvlink(g, na)
        procs = self._processes(g, na)
        mem_used = int(mem.used) if mem is not None else None
        mem_total = int(mem.total) if mem is not None else g.mem_total
        return GpuSample(
            index=g.index, uuid=g.uuid, name=g.name, ts=ts,
            util_gpu=float(util.gpu) if util is not None else None,
            util_mem=float(util.memory) if util is not None else None,
            mem_used=mem_used, mem_total=mem_total,
            power_w=power / 1000.0 if power is not None else None, power_limit_w=g.power_limit_w,
            temp_c=float(temp) if temp is not None else None,
            sm_clock_mhz=int(sm) if sm is not None else None, mem_clock_mhz=int(memclk) if memclk is not None else None,
            pstate=int(pstate) if pstate is not None else None,
            throttle=decode_throttle(int(throttle_mask)) if throttle_mask is not None else None,
            pcie_tx_bps=g.pcie[0], pcie_rx_bps=g.pcie[1], nvlink_tx_bps=nv_tx, nvlink_rx_bps=nv_rx,
            energy_j=g.energy_j,
            processes=procs, unavailable=tuple(na),
        )

    def _memory(self, g: _Gpu, na: list[tuple[str, str]]) -> Any:
        """Memory as nvidia-smi shows it (``nvmlMemory_v2``: the driver's reserve apart), v1 where v2 is missing."""
        version = getattr(self.nvml, "nvmlMemory_v2", None)
        if isinstance(version, int) and (g.index, "mem_v2") not in self._permanent:
            scratch: list[tuple[str, str]] = []
            mem = self._q(g, scratch, "mem_v2", "nvmlDeviceGetMemoryInfo", g.handle, version)
            if mem is not None or (g.index, "mem_v2") not in self._permanent:
                if mem is None:
                    na.append(("mem_used", scratch[-1][1]))
                return mem
        return self._q(g, na, "mem_used", "nvmlDeviceGetMemoryInfo", g.handle)

    def _throttle(self, g: _Gpu, na: list[tuple[str, str]]) -> int | None:
        scratch: list[tuple[str, str]] = []
        mask = self._q(g, scratch, "throttle", "nvmlDeviceGetCurrentClocksEventReasons", g.handle)
        if mask is None and (g.index, "throttle") in self._permanent:
            # drivers before 535 know only the older name
            mask = self._q(g, scratch, "throttle_legacy", "nvmlDeviceGetCurrentClocksThrottleReasons", g.handle)
        if mask is None:
            na.append(("throttle", scratch[-1][1] if scratch else "not available"))
        return int(mask) if mask is not None else None

    def _nvlink(self, g: _Gpu, na: list[tuple[str, str]]) -> tuple[float | None, float | None]:
        if not g.has_nvlink:
            na.append(("nvlink_tx_bps", "no active NVLink on this GPU"))
            na.append(("nvlink_rx_bps", "no active NVLink on this GPU"))
            return None, None
        tx_id = self._const("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", _FI_NVLINK_DATA_TX)
        rx_id = self._const("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", _FI_NVLINK_DATA_RX)
        scratch: list[tuple[str, str]] = []
        values = self._q(g, scratch, "nvlink", "nvmlDeviceGetFieldValues", g.handle,
                         [(tx_id, _ALL_LINKS), (rx_id, _ALL_LINKS)])
        if values is None:
            why = scratch[-1][1] if scratch else "not available"
            na.extend([("nvlink_tx_bps", why), ("nvlink_rx_bps", why)])
            return None, None
        try:
            tx_v, rx_v = values[0], values[1]
            if int(tx_v.nvmlReturn) != 0 or int(rx_v.nvmlReturn) != 0:
                raise _FieldError(int(tx_v.nvmlReturn) or int(rx_v.nvmlReturn))
            tx_kib = float(tx_v.value.ullVal)
            rx_kib = float(rx_v.value.ullVal)
            stamp = float(tx_v.timestamp) / 1e6 if int(getattr(tx_v, "timestamp", 0) or 0) > 0 else self._clock()
        except _FieldError as exc:
            why = f"NVLink throughput field: NVML error {exc.code}"
            if exc.code in _PERMANENT:
                self._permanent[(g.index, "nvlink")] = why
            na.extend([("nvlink_tx_bps", why), ("nvlink_rx_bps", why)])
            return None, None
        prev = g.nvlink_prev
        g.nvlink_prev = (stamp, tx_kib, rx_kib)
        if prev is None or stamp <= prev[0]:
            na.extend([("nvlink_tx_bps", "first reading: a rate needs two"),
                       ("nvlink_rx_bps", "first reading: a rate needs two")])
            return None, None
        dt = stamp - prev[0]
        return (max(tx_kib - prev[1], 0.0) * 1024.0 / dt, max(rx_kib - prev[2], 0.0) * 1024.0 / dt)

    def _processes(self, g: _Gpu, na: list[tuple[str, str]]) -> tuple[GpuProcess, ...]:
        found: dict[int, tuple[int | None, str]] = {}
        failures = []
        for kind, fn in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                         ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            scratch: list[tuple[str, str]] = []
            procs = self._q(g, scratch, f"processes_{kind}", fn, g.handle)
            if procs is None:
                failures.append(scratch[-1][1] if scratch else "not available")
                continue
            for p in procs:
                pid = int(p.pid)
                used = getattr(p, "usedGpuMemory", None)
                mem = int(used) if used is not None else None
                if pid in found:
                    old_mem, old_kind = found[pid]
                    mem = max(m for m in (mem, old_mem) if m is not None) if (mem or old_mem) else None
                    kind_all = old_kind if old_kind == kind else "compute+graphics"
                    found[pid] = (mem, kind_all)
                else:
                    found[pid] = (mem, kind)
        if len(failures) == 2:
            na.append(("processes", failures[0]))
            return ()
        return self.owners.assign(g.index, g.mem_total, [(pid, m, k) for pid, (m, k) in found.items()])


class _FieldError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _reason(exc: BaseException) -> str:
    """A short reason: NVML's own error text (``Not Supported``, ``Insufficient Permissions`` …)."""
    text = str(exc).strip() or type(exc).__name__
    code = getattr(exc, "value", None)
    return f"{text} (NVML {code})" if isinstance(code, int) else text


class SamplerThread:
    """Samples at a fixed rate in a daemon thread and publishes :class:`GpuSampled` (thread-safely) on a bus."""

    def __init__(self, sampler: GpuSampler, bus: EventBus | None, *, rate_hz: float = DEFAULT_RATE_HZ,
                 host_label: str = "", simulated: bool = False) -> None:
        if not 0 < rate_hz <= MAX_RATE_HZ:
            raise ValueError(f"sampling rate must be within (0, {MAX_RATE_HZ:g}] Hz, got {rate_hz:g}")
        self.sampler = sampler
        self.bus = bus
        self.period = 1.0 / rate_hz
        self.host_label = host_label
        self.simulated = simulated
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def sample_once(self) -> GpuSampled:
        try:
            gpus = self.sampler.sample()
            event = GpuSampled(host=self.host_label, simulated=self.simulated, gpus=gpus)
        except AppError as exc:
            event = GpuSampled(host=self.host_label, simulated=self.simulated, gpus=(), error=exc.one_line())
        except Exception as exc:  # noqa: BLE001 - the thread must live on; the error is shown, not raised
            event = GpuSampled(host=self.host_label, simulated=self.simulated, gpus=(),
                               error=f"GPU sampling failed: {type(exc).__name__}: {exc}")
        self.samples += 1
        if self.bus is not None:
            self.bus.publish_threadsafe(event)
        return event

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_t += self.period
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (a slow driver call): skip ticks rather than burst
                next_t = time.monotonic()
                delay = 0.0
            if self._stop.wait(delay):
                break
