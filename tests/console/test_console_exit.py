"""The console exits at once while a command it started detached runs on (an overnight campaign): no thread of it
waits on the command, and the command is reaped when it ends (no zombie per benchmark)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from tests.console.conftest import ROOT

SCRIPT = textwrap.dedent("""
    import sys
    from tui.console.app import make_console
    from tui.core.host.base import HostOptions

    app = make_console(HostOptions(sim=True), live=False)

    async def drive(pilot):
        pilot.app.run_job("watch", ["watch", "--sim", "--seconds", "60"])
        for _ in range(100):
            await pilot.pause(0.1)
            if pilot.app.jobs:
                break
        print(pilot.app.jobs[0].pid, flush=True)
        pilot.app.exit(0)

    app.run(headless=True, auto_pilot=drive)
    print("exited", flush=True)
""")


def test_quitting_does_not_wait_for_a_detached_command() -> None:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=False)
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-2000:]
    pid_line, said = out.stdout.split()[-2:]
    pid = int(pid_line)
    try:
        assert said == "exited"
        assert psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE, \
            "the detached command goes on after the console"
        assert took < 30, f"the console took {took:.1f} s to exit while its command ran (it waits 60 s)"
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


async def test_an_ended_command_is_reaped() -> None:
    from tui.console.app import REAP_S, make_console
    from tui.core.host.base import HostOptions

    app = make_console(HostOptions(sim=True), live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.run_job("version", ["--version"])
        for _ in range(100):
            await pilot.pause(0.1)
            if app.jobs:
                break
        job = app.jobs[0]
        for _ in range(int((REAP_S + 20) / 0.1)):
            await pilot.pause(0.1)
            if not app.jobs:
                break
        assert not app.jobs, "an ended command is forgotten"
        assert job.popen is not None and job.popen.returncode == 0
        assert not psutil.pid_exists(job.pid) or psutil.Process(job.pid).status() != psutil.STATUS_ZOMBIE
