"""NVML access, nvitop-style: lazy init, shutdown at exit, one clear message when the driver is missing.

``open_nvml()`` returns the real ``pynvml`` module, initialised, or raises :class:`NvmlUnavailable`. The simulated
host hands out ``tui.sim.fakenvml`` instead, which has the same functions, so the sampler and these helpers run
one code path for both. Every call here is blocking: run it off the event loop.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from tui.core.plan.hostfacts import GpuInfo

_lock = threading.Lock()
_module: Any = None
_error: str | None = None


class NvmlUnavailable(Exception):
    """No NVIDIA driver answered (or nvidia-ml-py is missing)."""


def open_nvml() -> Any:
    """The initialised ``pynvml`` module (initialised once per process, shut down at exit)."""
    global _module, _error
    with _lock:
        if _module is not None:
            return _module
        if _error is not None:
            raise NvmlUnavailable(_error)
        try:
            import pynvml
        except ImportError:
            _error = "nvidia-ml-py is not installed (hint: pip install nvidia-ml-py)"
            raise NvmlUnavailable(_error) from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            _error = f"NVML did not initialise: {exc} (hint: is the NVIDIA driver installed and loaded?)"
            raise NvmlUnavailable(_error) from None
        except OSError as exc:  # libnvidia-ml.so missing
            _error = f"NVML library not found: {exc} (hint: install the NVIDIA driver)"
            raise NvmlUnavailable(_error) from None
        _module = pynvml
        atexit.register(_shutdown)
        return _module


def _shutdown() -> None:
    global _module
    with _lock:
        if _module is not None:
            try:
                _module.nvmlShutdown()
            except Exception:  # noqa: BLE001, S110 - best effort at exit
                pass
            _module = None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def list_gpus(nvml: Any) -> tuple[GpuInfo, ...]:
    out = []
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        try:
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
            cc = float(f"{major}.{minor}")
        except Exception:  # noqa: BLE001 - older drivers
            cc = 0.0
        mem = nvml.nvmlDeviceGetMemoryInfo(h)
        out.append(GpuInfo(index=i, name=_text(nvml.nvmlDeviceGetName(h)), uuid=_text(nvml.nvmlDeviceGetUUID(h)),
                           memory_total_mib=int(mem.total // 2**20), compute_capability=cc))
    return tuple(out)


def driver_versions(nvml: Any) -> tuple[str | None, str | None]:
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
    except Exception:  # noqa: BLE001
        driver = None
    try:
        v = int(nvml.nvmlSystemGetCudaDriverVersion())
        cuda = f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:  # noqa: BLE001
        cuda = None
    return driver, cuda


_LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_MAX_LINKS = 18  # NVLink 4 and 5 (H100/H200/B200); NVML_NVLINK_MAX_LINKS is larger, queries stop at the first error
_P2P_CAPS_INDEX_NVLINK = 2
_P2P_STATUS_OK = 0


def bus_key(bus_id: Any) -> str:
    """A PCI bus id normalised for comparison: ``00000000:18:00.0`` and ``0000:18:00.0`` → ``0:18:00.0``."""
    text = _text(bus_id).strip().lower()
    parts = text.split(":")
    if len(parts) < 2:
        return text
    try:
        domain = int(parts[0], 16) if len(parts) >= 3 else 0
    except ValueError:
        domain = 0
    return f"{domain:x}:{parts[-2]}:{parts[-1]}"


def _remote_pci(nvml: Any, handle: Any, link: int) -> Any:
    # nvidia-ml-py names the Python wrapper nvmlDeviceGetNvLinkRemotePciInfo (it calls the C _v2 entry point)
    fn = getattr(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", None) or nvml.nvmlDeviceGetNvLinkRemotePciInfo_v2
    return fn(handle, link)


def nvlink_peers(nvml: Any, handle: Any) -> dict[str, int]:
    """Remote PCI bus (normalised) → number of active NVLinks to it (a peer GPU, or an NVSwitch)."""
    peers: dict[str, int] = {}
    for link in range(_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != 1:
                continue
            bus = bus_key(_remote_pci(nvml, handle, link).busId)
        except Exception:  # noqa: BLE001 - link absent, NVLink not supported, or no such link index
            break
        peers[bus] = peers.get(bus, 0) + 1
    return peers


def link_matrix(nvml: Any, count: int) -> tuple[tuple[str, ...], ...]:
    """``nvidia-smi topo -m``'s GPU part: ``NV<n>`` for n NVLinks between two GPUs, else the PCIe level.

    GPUs wired to each other directly count the links to the peer's bus; GPUs wired through NVSwitches (HGX
    boards) count their links to switches when NVML says peer-to-peer over NVLink works between the two.
    """
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    buses = []
    for h in handles:
        try:
            buses.append(bus_key(nvml.nvmlDeviceGetPciInfo(h).busId))
        except Exception:  # noqa: BLE001
            buses.append("")
    gpu_buses = {b for b in buses if b}
    peers = [nvlink_peers(nvml, h) for h in handles]
    switch_links = [sum(n for bus, n in p.items() if bus not in gpu_buses) for p in peers]
    rows = []
    for i in range(count):
        row = []
        for j in range(count):
            if i == j:
                row.append("X")
                continue
            direct = peers[i].get(buses[j], 0) if buses[j] else 0
            if direct:
                row.append(f"NV{direct}")
                continue
            if switch_links[i] and switch_links[j] and _p2p_nvlink(nvml, handles[i], handles[j]):
                row.append(f"NV{min(switch_links[i], switch_links[j])}")
                continue
            try:
                level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                row.append(_LEVELS.get(int(level), "SYS"))
            except Exception:  # noqa: BLE001
                row.append("N/A")
        rows.append(tuple(row))
    return tuple(rows)


def _p2p_nvlink(nvml: Any, a: Any, b: Any) -> bool:
    try:
        index = getattr(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", _P2P_CAPS_INDEX_NVLINK)
        return int(nvml.nvmlDeviceGetP2PStatus(a, b, index)) == getattr(nvml, "NVML_P2P_STATUS_OK", _P2P_STATUS_OK)
    except Exception:  # noqa: BLE001 - not supported: no claim of NVLink
        return False


def _mask_bits(words: Any) -> list[int]:
    out = []
    for w, word in enumerate(words):
        value = int(word)
        b = 0
        while value:
            if value & 1:
                out.append(w * 64 + b)
            value >>= 1
            b += 1
    return out


def cpu_affinity(nvml: Any, handle: Any, cpu_count: int | None = None) -> list[int] | None:
    """The CPUs nearest the GPU (``nvidia-smi topo -m``'s CPU Affinity), or None where NVML does not say."""
    n = cpu_count or os.cpu_count() or 64
    try:
        return _mask_bits(nvml.nvmlDeviceGetCpuAffinity(handle, (n + 63) // 64)) or None
    except Exception:  # noqa: BLE001
        return None


def numa_node(nvml: Any, handle: Any) -> int | None:
    """The NUMA node nearest the GPU (NVML's memory affinity, else the PCI device's ``numa_node`` in sysfs)."""
    try:
        scope = getattr(nvml, "NVML_AFFINITY_SCOPE_NODE", 0)
        nodes = _mask_bits(nvml.nvmlDeviceGetMemoryAffinity(handle, 1, scope))
        if nodes:
            return nodes[0]
    except Exception:  # noqa: BLE001, S110 - older drivers: ask sysfs
        pass
    try:
        key = bus_key(nvml.nvmlDeviceGetPciInfo(handle).busId)
        domain, bus, devfn = key.split(":")
        path = f"/sys/bus/pci/devices/{int(domain, 16):04x}:{bus}:{devfn}/numa_node"
        with open(path, encoding="ascii") as fh:
            node = int(fh.read().strip())
        return node if node >= 0 else None
    except Exception:  # noqa: BLE001 - no sysfs entry (containers, VMs)
        return None
