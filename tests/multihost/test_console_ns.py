"""The console over several hosts for real: ``--hosts a,b`` resolved from the inventory, each host's ``watch --json``
streamed over SSH from a network namespace with its own sshd and simulated host (conftest.py), the console headless.

``DISAGG_TUI_WRITE_RECORDING=PATH pytest tests/multihost/test_console_ns.py`` also records such a session with an
outage of host b (its sshd gone, then back) and writes it to PATH: how tests/fixtures/recordings/console-2-hosts.dtrec
was made.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.console.conftest import wait_for
from tests.multihost.conftest import Lab, inventory_text
from tui.cli.cmd_console import remote_hosts
from tui.console.app import ConsoleApp, make_console
from tui.console.widgets.gpus import GpuPanel
from tui.core.host.base import HostOptions
from tui.core.remote.host import RemoteHost


def _console(lab: Lab, monkeypatch: pytest.MonkeyPatch, *, record: bool = False,
             **watch: float) -> tuple[ConsoleApp, list[RemoteHost]]:
    lab.inventory(inventory_text(lab, rate_names=("a", "b")))
    for k, v in lab.local_env.items():
        if k.startswith("DISAGG_TUI_"):
            monkeypatch.setenv(k, v)
    hosts = remote_hosts("a,b")  # what `disagg-tui console --hosts a,b` follows
    app = make_console(HostOptions(sim=True), record=record, remotes={h.name: h.watch(**watch) for h in hosts})
    return app, hosts


def _both_ticked(app: ConsoleApp) -> bool:
    r = app.state.remotes
    return all(r[n].tick is not None and len(r[n].gpus) == 2 for n in ("a", "b")) and len(app.state.gpus) == 2


async def test_the_console_shows_both_hosts_gpus(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    app, hosts = _console(lab, monkeypatch)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: _both_ticked(app), 30, "both hosts' first ticks")
            await pilot.pause(0.6)  # the GPU panel draws at 2 Hz
            text = app.screen.query_one(GpuPanel).text.plain
            heads = [ln for ln in text.splitlines() if ln.startswith("▌")]
            assert [h.split()[0] for h in heads] == ["▌this", "▌a", "▌b"], text
            assert all(" SIMULATED · 2 GPUs" in h for h in heads), heads
            assert sum(ln.startswith("GPU1 ") for ln in text.splitlines()) == 3, text
    finally:
        for h in hosts:
            h.close()


@pytest.mark.skipif(not os.environ.get("DISAGG_TUI_WRITE_RECORDING"), reason="writes the 2-host fixture recording")
async def test_write_the_two_host_recording(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    app, hosts = _console(lab, monkeypatch, record=True, stall_s=2.5, backoff_first_s=0.3, backoff_max_s=1.0)
    b = lab.hosts["b"]
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: _both_ticked(app) and app.recorder is not None, 30, "both hosts")
            await pilot.pause(3.0)
            b.kill_all()  # b's sshd and its sessions: the stream ends, new tries are refused
            await wait_for(pilot, lambda: (d := app.state.remotes["b"].down) is not None and d.reason == "refused",
                           20, "b refused")
            await pilot.pause(2.0)
            b.start_sshd(lab.host_key, lab.authorized)
            await wait_for(pilot, lambda: app.state.remotes["b"].down is None
                           and app.state.remotes["b"].tick is not None, 30, "b back")
            await pilot.pause(3.0)
            path = Path(app.recording_path)
            app.stop_recording()
            await wait_for(pilot, lambda: app.recorder is None, 10, "the recording closed")
            await pilot.pause(0.5)
    finally:
        for h in hosts:
            h.close()
    shutil.copyfile(path, os.environ["DISAGG_TUI_WRITE_RECORDING"])
