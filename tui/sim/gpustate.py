"""The simulated GPUs' shared state, kept in the state directory so every process of the app sees the same GPUs.

Layout under ``<state_dir>/simgpu/``:

- ``host.json``: ``{"gpu": "b200", "count": 2, "taken_share": 0.0}`` (written by the simulated host when it starts;
  ``taken_share``: the share of each GPU's memory another process holds, the ``gpu-memory-taken`` fault, there
  before any launch as on a real host: every reader sees it as one more claim, of a process not visible here);
- ``claims/<pid>.json``: what one simulated engine process holds and does, written by that process (atomically,
  by rename) as it loads and serves: ``{"pid", "name", "gpus": [..], "memory_bytes": {gpu: bytes}, "util": {gpu:
  0..1}, "mem_util": {gpu: 0..1}, "server": "prefill-0", "port": 8100, "updated": epoch}``.

A claim whose pid is no longer alive is ignored (and removed by the next writer), so a killed engine frees its
simulated memory exactly like a real one. The fake NVML (``tui.sim.fakenvml``) reads this; nothing else does.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.core import paths
from tui.core.plan.gpuspecs import PRESETS, GpuSpec
from tui.core.procs import pid_alive

#: the pid the process that holds ``taken_share`` has: above Linux's largest pid_max, so never one of ours (a process
#: of another PID namespace, as a container's job is to the host's NVML readers)
FOREIGN_PID = 4_194_305


def simgpu_dir(state_dir: Path) -> Path:
    return state_dir / "simgpu"


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    paths.make_dirs(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


@dataclass
class Claim:
    pid: int
    name: str = "VLLM::EngineCore"
    gpus: list[int] = field(default_factory=list)
    memory_bytes: dict[int, int] = field(default_factory=dict)
    util: dict[int, float] = field(default_factory=dict)
    mem_util: dict[int, float] = field(default_factory=dict)
    server: str = ""
    port: int = 0
    cmdline: str = ""
    updated: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid, "name": self.name, "gpus": self.gpus,
            "memory_bytes": {str(k): v for k, v in self.memory_bytes.items()},
            "util": {str(k): v for k, v in self.util.items()},
            "mem_util": {str(k): v for k, v in self.mem_util.items()},
            "server": self.server, "port": self.port, "cmdline": self.cmdline, "updated": self.updated,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Claim:
        return cls(
            pid=int(d["pid"]), name=str(d.get("name", "VLLM::EngineCore")), gpus=[int(g) for g in d.get("gpus", [])],
            memory_bytes={int(k): int(v) for k, v in d.get("memory_bytes", {}).items()},
            util={int(k): float(v) for k, v in d.get("util", {}).items()},
            mem_util={int(k): float(v) for k, v in d.get("mem_util", {}).items()},
            server=str(d.get("server", "")), port=int(d.get("port", 0)), cmdline=str(d.get("cmdline", "")),
            updated=float(d.get("updated", 0.0)),
        )


class SimGpuState:
    """Read and write the simulated GPUs of one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.root = simgpu_dir(state_dir)

    # host ---------------------------------------------------------------------------------------------------
    def init_host(self, gpu: str, count: int, *, taken_share: float = 0.0) -> None:
        if gpu not in PRESETS:
            raise ValueError(f"unknown simulated GPU {gpu!r} (known: {', '.join(PRESETS)})")
        _write_atomic(self.root / "host.json", {"gpu": gpu, "count": int(count), "taken_share": float(taken_share)})

    def taken_share(self) -> float:
        """The share of each GPU's memory another process holds (the ``gpu-memory-taken`` fault), 0 if none."""
        try:
            d = json.loads((self.root / "host.json").read_text(encoding="utf-8"))
            share = float(d.get("taken_share", 0.0))
        except (OSError, ValueError, TypeError, AttributeError):
            return 0.0
        return share if 0.0 < share < 1.0 else 0.0

    def foreign(self) -> Claim | None:
        """The claim of the process that holds ``taken_share`` of every GPU, or None."""
        share = self.taken_share()
        host = self.host() if share else None
        if host is None:
            return None
        spec, count = host
        held = int(spec.memory_total_mib * 2**20 * share)
        return Claim(pid=FOREIGN_PID, name="python3", gpus=list(range(count)),
                     memory_bytes=dict.fromkeys(range(count), held), cmdline="python3 (another user's job)")

    def host(self) -> tuple[GpuSpec, int] | None:
        try:
            d = json.loads((self.root / "host.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        spec = PRESETS.get(str(d.get("gpu")))
        if spec is None:
            return None
        return spec, int(d.get("count", 0))

    # claims -------------------------------------------------------------------------------------------------
    def write_claim(self, claim: Claim) -> None:
        claim.updated = time.time()
        _write_atomic(self.root / "claims" / f"{claim.pid}.json", claim.to_json())

    def drop_claim(self, pid: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.root / "claims" / f"{pid}.json").unlink()

    def claims(self, *, foreign: bool = True) -> list[Claim]:
        """The live processes' claims, and (``foreign``) the one of the process that holds ``taken_share``."""
        out: list[Claim] = []
        other = self.foreign() if foreign else None
        if other is not None:
            out.append(other)
        folder = self.root / "claims"
        if not folder.is_dir():
            return out
        for path in folder.glob("*.json"):
            try:
                claim = Claim.from_json(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if not pid_alive(claim.pid):
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            out.append(claim)
        return sorted(out, key=lambda c: c.pid)
