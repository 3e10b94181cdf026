"""Immutable GPU snapshots: what one sample of one GPU says, and the host facts read once.

A value the driver does not give (unsupported on this GPU, no permission, a failed call) is ``None`` and its
reason is listed in ``unavailable`` as ``(field, reason)``; nothing here is ever an exception. Units are in the
field names: bytes, watts, °C, MHz, bytes per second, joules.
"""

from __future__ import annotations

from dataclasses import dataclass

EXACT, GUESSED, UNKNOWN = "exact", "guessed", "unknown"

# NVML clocks event (throttle) reasons, bit → name (nvml.h ``nvmlClocksEventReason*``; 0x200/0x400 are the
# older ``nvmlClocksThrottleReasonBoardLimit``/``Reliability`` bits some drivers still set)
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x0000000000000001, "gpu_idle"),
    (0x0000000000000002, "applications_clocks_setting"),
    (0x0000000000000004, "sw_power_cap"),
    (0x0000000000000008, "hw_slowdown"),
    (0x0000000000000010, "sync_boost"),
    (0x0000000000000020, "sw_thermal_slowdown"),
    (0x0000000000000040, "hw_thermal_slowdown"),
    (0x0000000000000080, "hw_power_brake_slowdown"),
    (0x0000000000000100, "display_clock_setting"),
    (0x0000000000000200, "board_limit"),
    (0x0000000000000400, "reliability"),
)


def decode_throttle(mask: int) -> tuple[str, ...]:
    """Names of the bits set in an NVML clocks-event-reasons mask (unknown bits as ``0x…``)."""
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_REASONS:
        known |= bit
    rest = mask & ~known
    if rest:
        names.append(f"0x{rest:x}")
    return tuple(names)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process holding memory on a GPU, and who owns it."""

    pid: int
    memory: int | None  # bytes; None where the driver does not say (WDDM, some containers)
    kind: str  # compute | graphics | compute+graphics
    name: str = ""  # the process title (``VLLM::EngineCore``), or its name where the title is not readable
    owner: str | None = None  # server name (prefill-0, decode-0, server, proxy) or None
    role: str | None = None  # single | prefill | decode | proxy
    tp_rank: int | None = None  # set for servers with TP > 1
    dp_rank: int | None = None  # set for servers with DP > 1
    mapping: str = UNKNOWN  # exact (pid found in the server's process tree) | guessed (heuristics) | unknown
    layout: str | None = None

    @property
    def rank(self) -> str | None:
        """A compact rank label: ``TP1``, ``DP0``, ``DP1·TP0``; None for a one-GPU server."""
        parts = []
        if self.dp_rank is not None:
            parts.append(f"DP{self.dp_rank}")
        if self.tp_rank is not None:
            parts.append(f"TP{self.tp_rank}")
        return "·".join(parts) or None


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One reading of one GPU."""

    index: int
    uuid: str
    name: str
    ts: float  # epoch seconds of the reading
    util_gpu: float | None = None  # percent
    util_mem: float | None = None  # percent (memory controller busy)
    mem_used: int | None = None  # bytes
    mem_total: int | None = None  # bytes
    power_w: float | None = None
    power_limit_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    pstate: int | None = None
    throttle: tuple[str, ...] | None = None
    pcie_tx_bps: float | None = None  # bytes/s
    pcie_rx_bps: float | None = None
    nvlink_tx_bps: float | None = None  # bytes/s, data, all links
    nvlink_rx_bps: float | None = None
    energy_j: float | None = None  # total energy since the driver loaded
    processes: tuple[GpuProcess, ...] = ()
    unavailable: tuple[tuple[str, str], ...] = ()

    def reason(self, field: str) -> str | None:
        """Why ``field`` is None (or None when it has a value)."""
        for name, why in self.unavailable:
            if name == field:
                return why
        return None


@dataclass(frozen=True, slots=True)
class GpuAffinity:
    index: int
    cpus: str | None  # "0-15,32-47", as nvidia-smi topo -m prints it
    numa_node: int | None


@dataclass(frozen=True, slots=True)
class GpuHostFacts:
    """Read once per sampler: driver and CUDA versions, the link matrix, CPU/NUMA affinity per GPU."""

    driver: str | None
    cuda_driver: str | None
    nvml_version: str | None
    count: int
    names: tuple[str, ...]
    uuids: tuple[str, ...]
    links: tuple[tuple[str, ...], ...]  # nvidia-smi topo -m: "X", "NV18", "SYS", "NODE", "PHB", "PXB", "PIX"
    affinity: tuple[GpuAffinity, ...]
    unavailable: tuple[tuple[str, str], ...] = ()

    def topo_text(self) -> str:
        """The ``nvidia-smi topo -m`` table (GPU part, CPU and NUMA affinity)."""
        n = self.count
        head = "\t" + "\t".join(f"GPU{j}" for j in range(n)) + "\tCPU Affinity\tNUMA Affinity"
        rows = [head]
        for i in range(n):
            cells = [self.links[i][j] if i < len(self.links) and j < len(self.links[i]) else "N/A"
                     for j in range(n)]
            aff = self.affinity[i] if i < len(self.affinity) else None
            cpus = aff.cpus if aff and aff.cpus else "N/A"
            numa = str(aff.numa_node) if aff and aff.numa_node is not None else "N/A"
            rows.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{cpus}\t{numa}")
        return "\n".join(rows)


def cpu_list(cpus: list[int] | tuple[int, ...]) -> str:
    """``[0,1,2,3,8]`` → ``"0-3,8"``."""
    out: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)
