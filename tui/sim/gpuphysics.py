"""How a simulated GPU answers its load: memory, utilisation, power, temperature, clocks, energy, NVLink traffic.

Pure functions of the engines' claims and the GPU's datasheet preset, calibrated on the H200 of
``fixtures/vllm-0.24.0-h200`` (the constants say where each figure comes from); :mod:`tui.sim.fakenvml` answers
NVML's calls with them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from tui.core.plan.gpuspecs import GpuSpec
from tui.sim.gpustate import Claim
from tui.sim.perfmodel import TORCH_RESERVED_MIB

MIB = 2**20
RESERVED_BYTES = TORCH_RESERVED_MIB * MIB  # H200: "Reserved 616 MiB" (nvidia-smi -q), with or without processes
CONTEXT_OVERHEAD_BYTES = 9 * MIB  # H200 under vLLM: used 124047 MiB (v2) for one 124038 MiB process
LOADED_IDLE_FACTOR = 121.0 / 76.0  # H200: 121 W idle with vLLM loaded (smi/nvidia-smi_server_idle.txt) vs 76 W bare
POWER_FULL_SHARE = 0.99  # 695 W of 700 at 100 % (rerun/nvml)
AMBIENT_C = 35.0  # H200 bare, rerun/smi/nvidia-smi_idle_before.txt
FULL_LOAD_C = 60.0
IDLE_CLOCK_SHARE = 345.0 / 1980.0  # H200 bare: 345 MHz of 1980 (nvidia-smi-q_idle_before.txt)
LOADED_CLOCK_FLOOR = 0.75  # SM clock at full load, as a share of the maximum
TAU_POWER_S, TAU_TEMP_S, TAU_CLOCK_S = 0.5, 15.0, 6.0
POWER_CAP_SHARE = 0.97
PCIE_FULL_LOAD_KBPS = 50_000  # KB/s at 100 % (tokens in and out; weights stay on the GPU)
NVLINK_BUSY_SHARE = 0.05  # share of NVLink bandwidth a TP engine at 100 % keeps busy with all-reduce


@dataclass
class Dynamics:
    """A GPU's state that lags its load: power, temperature, SM clock; and the counters that integrate it."""

    t: float
    power_w: float
    temp_c: float
    sm_mhz: float
    energy_j: float
    nvlink_kib: float


@dataclass(frozen=True)
class Load:
    memory: int
    util: float  # 0..1
    mem_util: float
    context: bool
    procs: tuple[tuple[int, int], ...]
    multi_gpu: bool


def load_on(i: int, claims: Iterable[Claim], spec: GpuSpec) -> Load:
    """What the claims put on GPU ``i``: memory (context overhead included, the driver's reserve apart), util."""
    mem = 0
    util = 0.0
    mem_util = 0.0
    context = False
    multi = False
    procs = []
    for c in claims:
        if i not in c.gpus and i not in c.memory_bytes:
            continue
        context = True
        used = int(c.memory_bytes.get(i, 0))
        mem += used
        util += float(c.util.get(i, 0.0))
        mem_util += float(c.mem_util.get(i, 0.0))
        multi = multi or len(c.gpus) > 1
        procs.append((c.pid, used))
    total = spec.memory_total_mib * MIB
    used_all = min(mem + (CONTEXT_OVERHEAD_BYTES if context else 0), total - RESERVED_BYTES)
    return Load(used_all, min(max(util, 0.0), 1.0), min(max(mem_util, 0.0), 1.0), context, tuple(procs), multi)


def targets(load: Load, spec: GpuSpec, gpu_count: int) -> tuple[float, float, float, float]:
    """(power W, temperature °C, SM MHz, NVLink bytes/s) the GPU settles at under this load."""
    bare = spec.idle_power_w
    idle = bare * LOADED_IDLE_FACTOR if load.context else bare
    power = idle + (spec.power_limit_w - idle) * POWER_FULL_SHARE * load.util
    heat = (power - bare) / (spec.power_limit_w - bare) if spec.power_limit_w > bare else 0.0
    temp = AMBIENT_C + (FULL_LOAD_C - AMBIENT_C) * heat
    if load.context:
        sm = spec.sm_clock_max_mhz * (1.0 - (1.0 - LOADED_CLOCK_FLOOR) * load.util)
    else:
        sm = spec.sm_clock_max_mhz * IDLE_CLOCK_SHARE
    nvlink = spec.nvlink_bandwidth * NVLINK_BUSY_SHARE * load.util if (load.multi_gpu and gpu_count > 1) else 0.0
    return power, temp, sm, nvlink


def advance(d: Dynamics | None, now: float, load: Load, spec: GpuSpec, gpu_count: int, host_since: float
            ) -> Dynamics:
    """The GPU's lagging state at ``now`` under ``load`` (a first sample starts settled, with the idle energy of
    ``host_since`` seconds); the energy is the exact integral of the lag, however often anyone asks."""
    power_t, temp_t, sm_t, nvlink_bps = targets(load, spec, gpu_count)
    if d is None:
        return Dynamics(t=now, power_w=power_t, temp_c=temp_t, sm_mhz=sm_t,
                        energy_j=spec.idle_power_w * max(host_since, 0.0), nvlink_kib=0.0)
    dt = now - d.t
    if dt <= 0:
        return d
    decay = math.exp(-dt / TAU_POWER_S)
    d.energy_j += power_t * dt + (d.power_w - power_t) * TAU_POWER_S * (1.0 - decay)
    d.power_w = power_t + (d.power_w - power_t) * decay
    d.temp_c = temp_t + (d.temp_c - temp_t) * math.exp(-dt / TAU_TEMP_S)
    d.sm_mhz = sm_t + (d.sm_mhz - sm_t) * math.exp(-dt / TAU_CLOCK_S)
    d.nvlink_kib += nvlink_bps * dt / 1024.0
    d.t = now
    return d
