"""Helpers shared by tests: free ports, process checks, a host whose servers are test processes."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from tui.core.host.base import Command, Host
from tui.core.launch.supervisor import LAYOUT_ENV
from tui.core.plan.hostfacts import HostFacts, sim_facts
from tui.core.plan.planner import LaunchPlan, ServerSpec

PROC = Path(__file__).parent / "procs" / "proc.py"


def eventually(predicate: Callable[[], object], timeout: float = 30.0, what: str = "", step: float = 0.02) -> None:
    """Wait until ``predicate()`` holds, at most ``timeout`` seconds: a test says what must happen, never that it
    happens within a poll or two (a busy 2-core CI machine delays any of them)."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or predicate}")
        time.sleep(step)


async def eventually_async(predicate: Callable[[], object], timeout: float = 30.0, what: str = "",  # noqa: ASYNC109
                           step: float = 0.02) -> None:
    """:func:`eventually` for a test on the event loop (the loop runs while it waits)."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or predicate}")
        await asyncio.sleep(step)


def expectation(path: Path) -> tuple[int, str, str]:
    """A broken-file corpus item's first line, ``# expect: LINE|FIELD|TEXT``: where the error must point."""
    first = path.read_text(encoding="utf-8").splitlines()[0]
    line, field, text = first.removeprefix("# expect: ").split("|")
    return int(line), field, text


def decode_layout(url: str, log: Path) -> Any:
    """A ready simulated 1P1D layout record whose only process is a decode server at ``url`` logging to ``log``
    (what the bench's server-side checks read)."""
    import time

    from tui.core.launch.state import LayoutRecord, ProcessRecord

    return LayoutRecord(id="l", created=time.time(), simulated=True, plan={}, status="ready", endpoint=url,
                        processes=[ProcessRecord(name="decode-0", role="decode", pid=0, pgid=0, create_time=0.0,
                                                 log=str(log), url=url)])


ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """``disagg-tui ARGS`` in a subprocess of its own (``python -m tui``), from the repository root."""
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, check=False)


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range: a port the kernel hands out for ``bind(0)`` can be taken
    as the source port of any outgoing connection (another test worker's HTTP client) before the server that was
    given it binds it (issue 22, finding 7: a 1P1D test's server or side-channel port, once under ``-n 2``)."""
    import random

    lo, _ = _ephemeral_range()
    top = min(lo, 32768) - 1
    rng = random.Random()
    while True:
        port = rng.randrange(12000, top)
        if _is_free(port):
            return port


def layout_processes(layout_id: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != os.getpid() and p.environ().get(LAYOUT_ENV) == layout_id and \
                    p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


class ScriptHost(Host):
    """A host whose 'vllm serve' is tests/procs/proc.py with per-server extra flags."""

    simulated = False

    def __init__(self, flags: dict[str, list[str]] | None = None, gpus: int = 2) -> None:
        self.flags = flags or {}
        self.notes: list[str] = []
        self._facts = sim_facts("h200", gpus)

    @property
    def facts(self) -> HostFacts:
        return self._facts

    def server_command(self, spec: ServerSpec, plan: LaunchPlan, profile_json: dict[str, Any] | None = None
                       ) -> Command:
        argv = [sys.executable, str(PROC), "--port", str(spec.port), *self.flags.get(spec.name, [])]
        return Command(argv=argv, env=dict(os.environ))

    def nvml(self) -> Any:
        raise RuntimeError("no NVML in supervisor tests")


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def layout_port_args(servers: int = 4) -> list[str]:
    """CLI port flags for a layout on ports that are free now: the endpoint, ``servers`` server ports 100 apart,
    and as many consecutive NIXL side-channel ports (tests never use the fixed defaults 8000/8100/5600).

    The ports are drawn below the kernel's ephemeral range: a layout's ports are chosen long before its servers bind
    them (a campaign brings layouts up one after another), and a port of that range can meanwhile be taken by any
    outgoing connection on the machine (seen: a NIXL side-channel port taken during a campaign's first layout)."""
    import random

    lo, _ = _ephemeral_range()
    top = min(lo, 32768) - 1
    rng = random.Random()

    def pick(count: int, step: int) -> int:
        while True:
            base = rng.randrange(12000, top - step * count)
            if all(_is_free(base + step * i) for i in range(count)):
                return base

    endpoint = pick(1, 1)
    base = pick(servers, 100)
    side = pick(servers, 1)
    return ["--port", str(endpoint), "--server-port", str(base), "--side-channel-port", str(side)]
