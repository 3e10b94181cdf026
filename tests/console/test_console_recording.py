"""The recording of a console that reattached to a layout holds that layout (issue 22, finding 9): the follower
says what is up in its first look, before a recording begins; the recording starts with what the session shows.
Quitting with the servers left running is in it too (finding 16)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from tests.console.conftest import ROOT, console_ports, wait_for
from tui.console.app import make_console
from tui.core import paths
from tui.core.events import OperatorAction
from tui.core.host.base import HostOptions
from tui.core.record import Recording
from tui.core.record.summary import render, summarize

pytestmark = pytest.mark.usefixtures("clean_layouts")


async def test_a_recording_begun_after_the_console_reattached_holds_the_layout() -> None:
    ports = console_ports()
    argv = [sys.executable, "-m", "tui", "up", "--sim", "--sim-startup", "0.5", "--model", "dummy-qwen3-8b",
            "--topology", "tp1", "--port", str(ports[0]), "--server-port", str(ports[1]), "--side-channel-port",
            str(ports[2])]
    up = await asyncio.to_thread(subprocess.run, argv, cwd=ROOT, capture_output=True, text=True, timeout=120,
                                 check=False)
    assert up.returncode == 0, up.stderr[-2000:]
    app = make_console(HostOptions(sim=True), ports=ports, record=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.layout.status == "ready"
                       and app.state.servers, 30, "the layout")
        await pilot.press("ctrl+t")  # recording on, well after the follower said what is up
        await wait_for(pilot, lambda: app.recorder is not None, 10, "the recorder")
        await wait_for(pilot, lambda: app.state.gpus, 10, "a GPU sample")
        layout = app.state.layout.id
        await pilot.press("q")  # quit, and leave the servers running (the default)
        await pilot.pause(0.2)
        await pilot.press("l")
    (path,) = sorted(paths.recordings_dir().glob("*console*"))
    with Recording.open(path) as recording:
        events = list(recording.events())
        marks = [m.label for m in recording.markers_of(None)]
        text = render(summarize(recording))
    kinds = {e.kind for e in events}
    assert {"layout_changed", "server_launched", "server_phase", "server_ready", "log_line"} <= kinds, kinds
    assert "tp1 of dummy-qwen3-8b: ready" in text, text
    # finding 16: leaving the servers running is an operator action of the recording, with its marker
    quits = [e for e in events if isinstance(e, OperatorAction) and e.action == "quit"]
    assert [(q.target, q.detail, q.source) for q in quits] == [(layout, {"servers": "left running"}, "console")]
    assert f"quit {layout} (servers left running)" in marks
