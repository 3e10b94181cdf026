"""The host's fingerprint, as a recording's header and a bundle carry it, and what differs between two.

What is in it: whether the host is simulated, the GPUs (model, memory), the driver and its CUDA version, the
NVLink topology, vLLM (version, NIXL, FlashInfer) and torch where known, the OS, Python and disagg-tui.
"""

from __future__ import annotations

import platform
import socket
import sys
from typing import Any

from tui import __version__
from tui.core.plan.hostfacts import HostFacts

#: fields compared for like-for-like (the hostname and the OS patch level are not: a teammate's identical box is)
COMPARED = ("simulated", "gpus", "gpu_count", "driver", "cuda", "nvlink", "vllm", "torch", "nixl", "flashinfer")


def host_fingerprint(facts: HostFacts | None, *, simulated: bool | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "hostname": facts.hostname if facts and facts.hostname else socket.gethostname(),
        "simulated": bool(facts.simulated) if facts is not None else bool(simulated),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "disagg_tui": __version__,
    }
    if facts is None:
        return out
    out["gpus"] = [g.name for g in facts.gpus]
    out["gpu_count"] = len(facts.gpus)
    out["gpu_memory_mib"] = [g.memory_total_mib for g in facts.gpus]
    out["driver"] = facts.driver
    out["cuda"] = facts.cuda_driver
    out["nvlink"] = [list(row) for row in facts.nvlink]
    v = facts.vllm
    out["vllm"] = v.version if v is not None else None
    out["nixl"] = v.nixl if v is not None else None
    out["flashinfer"] = v.flashinfer if v is not None else None
    out["torch"] = None  # vLLM's torch lives in vLLM's environment; a real-host fingerprint leaves it unknown
    return out


def _show(v: Any) -> str:
    if isinstance(v, list):
        if v and all(isinstance(x, list) for x in v):
            return "/".join(",".join(map(str, row)) for row in v) or "none"
        return ", ".join(map(str, v)) or "none"
    return "unknown" if v is None else str(v)


def fingerprint_diff(theirs: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """One line per compared field that differs: ``"driver: 570.1 (bundle) vs 580.2 (this host)"``."""
    out = []
    for key in COMPARED:
        a, b = theirs.get(key), ours.get(key)
        if a is None and b is None:
            continue
        if a != b:
            out.append(f"{key}: {_show(a)} (bundle) vs {_show(b)} (this host)")
    return out
