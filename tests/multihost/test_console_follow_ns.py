"""The console follows a namespace host's layout for real: ``disagg-tui up`` run on host a over SSH (its own
supervisor, state file and logs there), the console opened with ``--hosts a,b`` here; host a's server log lines,
streamed by its ``follow --json`` over a second SSH session, are in the log pane when its server is selected."""

from __future__ import annotations

import subprocess

import pytest

from tests.console.conftest import wait_for
from tests.multihost.conftest import DISAGG_TUI, Lab, inventory_text
from tui.cli.cmd_console import remote_hosts
from tui.console.app import make_console
from tui.console.widgets.logpane import LogPane
from tui.console.widgets.servers import ServerTable
from tui.core.host.base import HostOptions

MODEL = "dummy-qwen3-8b"


def _on(lab: Lab, host: str, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-F", str(lab.ssh_config), f"ns-{host}", f"{DISAGG_TUI} {command}"],
                          capture_output=True, text=True, timeout=timeout)


async def test_the_console_shows_a_remote_hosts_server_log(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    lab.inventory(inventory_text(lab, rate_names=("a", "b")))
    for k, v in lab.local_env.items():
        if k.startswith("DISAGG_TUI_"):
            monkeypatch.setenv(k, v)
    up = _on(lab, "a", f"up -m {MODEL} -t tp1 --sim --sim-startup 1")
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    hosts = remote_hosts("a,b")
    app = make_console(HostOptions(sim=True), record=False, remotes={h.name: h.watch() for h in hosts})
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            def a_lines() -> int:
                return sum(len(v.logs) for v in app.state.remotes["a"].servers.values() if v.role != "proxy")

            await wait_for(pilot, lambda: a_lines() > 3, 40, "host a's log lines over its follow stream")
            key, view = next((k, v) for k, v in app.state.server_rows() if v.host == "a" and v.logs)
            table = app.screen.query_one(ServerTable)
            await wait_for(pilot, lambda: key in table._names, 10, key)
            table.move_cursor(row=table._names.index(key))
            await pilot.pause(0.5)
            log = app.screen.query_one(LogPane)
            assert log.view is view and log.border_title.startswith(f"Log {view.name} on a")
            shown = [t for y in range(log.size.height) if (t := log.render_line(y).text.rstrip())]
            assert len(shown) >= 3, shown
            assert view.quiet[-1][1].startswith(shown[-1].rstrip("…")[:60]), (shown[-1], view.quiet[-1])  # a's own
            assert view.phase == "ready" and app.state.remotes["a"].layout is not None
            assert app.state.remotes["a"].layout.status == "ready"
    finally:
        for h in hosts:
            h.close()
        _on(lab, "a", "down --sim", timeout=60)
