"""The simulated GPU memory and utilisation a server's processes hold, written to the shared simulated-GPU state.

Each claim is keyed by the pid of the child process that holds the memory (the engine, or each TP worker), so a
killed engine frees its memory at once: the state ignores claims of dead pids. Without ``DISAGG_SIM_STATE_DIR``
nothing is written (a bare ``python -m tui.sim.vllm serve`` still runs).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from tui.sim.gpustate import Claim, SimGpuState
from tui.sim.perfmodel import GIB

REFRESH_S = 5.0  # an unchanged claim is still rewritten this often (its "updated" time stays fresh)


class ClaimWriter:
    def __init__(self, state_dir: Path | None, server: str, port: int) -> None:
        self.state = SimGpuState(state_dir) if state_dir is not None else None
        self.server = server
        self.port = port
        self._claims: dict[int, Claim] = {}

    def set_memory(self, pid: int, title: str, gpus: tuple[int, ...], gib_per_gpu: float) -> None:
        claim = self._claims.get(pid) or Claim(pid=pid, name=title, gpus=list(gpus), server=self.server,
                                               port=self.port, cmdline=title)
        claim.memory_bytes = {g: int(gib_per_gpu * GIB) for g in gpus}
        self._claims[pid] = claim
        self._write(claim)

    def set_util(self, pid: int, util: float, mem_util: float) -> None:
        claim = self._claims.get(pid)
        if claim is None:
            return
        new_util = {g: round(min(1.0, max(0.0, util)), 3) for g in claim.gpus}
        new_mem = {g: round(min(1.0, max(0.0, mem_util)), 3) for g in claim.gpus}
        if new_util == claim.util and new_mem == claim.mem_util and time.time() - claim.updated < REFRESH_S:
            return  # an idle engine does not rewrite its claim twice a second
        claim.util, claim.mem_util = new_util, new_mem
        self._write(claim)

    def drop(self, pid: int) -> None:
        self._claims.pop(pid, None)
        if self.state is not None:
            self.state.drop_claim(pid)

    def others_on(self, gpu: int, mine: set[int]) -> float:
        """GiB that processes other than ours hold on ``gpu``."""
        if self.state is None:
            return 0.0
        total = 0
        for c in self.state.claims():
            if c.pid not in mine:
                total += c.memory_bytes.get(gpu, 0)
        return total / GIB

    def _write(self, claim: Claim) -> None:
        if self.state is not None:
            with contextlib.suppress(OSError):
                self.state.write_claim(claim)
