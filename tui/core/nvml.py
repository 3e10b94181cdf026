"""NVML access, nvitop-style: lazy init, shutdown at exit, one clear message when the driver is missing.

``open_nvml()`` returns the real ``pynvml`` module, initialised, or raises :class:`NvmlUnavailable`. The simulated
host hands out ``tui.sim.fakenvml`` instead, which has the same functions, so the sampler and these helpers run
one code path for both. Every call here is blocking: run it off the event loop.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from tui.core.hostfacts import GpuInfo

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


def link_matrix(nvml: Any, count: int) -> tuple[tuple[str, ...], ...]:
    """``nvidia-smi topo -m``'s GPU part: ``NV<n>`` for n active NVLinks between two GPUs, else the PCIe level."""
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    nvlinks: list[dict[str, int]] = []
    for h in handles:
        peers: dict[str, int] = {}
        for link in range(18):
            try:
                if nvml.nvmlDeviceGetNvLinkState(h, link) != 1:
                    continue
                pci = nvml.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, link)
                bus = _text(pci.busId).lower()
                peers[bus] = peers.get(bus, 0) + 1
            except Exception:  # noqa: BLE001 - link absent or not supported
                break
        nvlinks.append(peers)
    buses = []
    for h in handles:
        try:
            buses.append(_text(nvml.nvmlDeviceGetPciInfo(h).busId).lower())
        except Exception:  # noqa: BLE001
            buses.append("")
    rows = []
    for i in range(count):
        row = []
        for j in range(count):
            if i == j:
                row.append("X")
                continue
            n = next((c for bus, c in nvlinks[i].items() if buses[j] and (bus.endswith(buses[j][-12:]))), 0)
            if n:
                row.append(f"NV{n}")
                continue
            try:
                level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                row.append(_LEVELS.get(int(level), "SYS"))
            except Exception:  # noqa: BLE001
                row.append("N/A")
        rows.append(tuple(row))
    return tuple(rows)
