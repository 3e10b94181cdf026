"""Console test helpers: waiting on the live app, the layouts it starts cleaned up, ports of their own."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot

from tests.helpers import layout_port_args

ROOT = Path(__file__).resolve().parents[2]


def console_ports() -> tuple[int, int, int]:
    a = layout_port_args()
    return int(a[1]), int(a[3]), int(a[5])


async def wait_for(pilot: Pilot[object], predicate: Callable[[], object], timeout: float = 60.0,  # noqa: ASYNC109
                   what: str = "") -> None:
    """Let the app run until ``predicate()`` holds (the console is live: sources, timers, workers)."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or predicate}")
        await pilot.pause(0.1)


def _our_jobs(state_dir: str) -> list[int]:
    """The detached disagg-tui commands (up, run) of this test's state directory still running."""
    import psutil

    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = p.info["cmdline"] or []
            if "-m" in cmd and "tui" in cmd and p.environ().get("DISAGG_TUI_STATE_DIR") == state_dir:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


@pytest.fixture
def utc() -> Iterator[None]:
    """Times shown in UTC (a snapshot's clock reads the same on every machine)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.fixture
def clean_layouts() -> Iterator[None]:
    """Whatever a test's console started (layouts, campaigns) is stopped at its end."""
    import os
    import signal

    yield
    for pid in _our_jobs(os.environ["DISAGG_TUI_STATE_DIR"]):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    subprocess.run([sys.executable, "-m", "tui", "down", "--all"], cwd=ROOT, capture_output=True, timeout=120,
                   check=False)
