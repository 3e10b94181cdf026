"""A watch-only console (a browser's, served without --operator) shows everything and acts on nothing: every
handler that would launch, stop, benchmark, apply a fix, start a campaign, record, dismiss from the state file or
edit the playbook refuses, saying why; nothing reaches the detached commands. The terminal console is unchanged.

Driven with Textual's Pilot on scripted events (no live host); whatever would start a detached command or a
benchmark is caught where the app starts them (``start_job``, ``start_bench``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.notifications import Notify

from tests.console import scripted
from tui.console import app as console_app
from tui.console.app import ConsoleApp, make_console
from tui.console.messages import (
    BenchRequested,
    BenchStopRequested,
    CampaignChoice,
    CampaignRequested,
    CampaignResumeRequested,
    LaunchRequested,
    RestartRequested,
    StopRequested,
)
from tui.console.screens.entryform import AddEntryModal
from tui.console.screens.modals import QuitModal
from tui.console.screens.playbook import PlaybookScreen
from tui.core.host.base import HostOptions
from tui.core.plan.request import LaunchRequest

MODEL = "qwen3.6-27b-nvfp4"
#: what disagg-tui web passes its tabs' consoles (tui/cli/web_app.py)
WATCH_ONLY_WHY = "the server was started without --operator"


class Told:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def __call__(self, message: object) -> None:
        if isinstance(message, Notify):
            self.items.append((message.notification.title, message.notification.message))

    def refusals(self) -> list[str]:
        return [m for t, m in self.items if t in ("watch-only", "dismissed here only")]


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What reached the detached commands (must stay empty)."""
    got: list[Any] = []
    monkeypatch.setattr(console_app, "start_job", lambda *a, **k: got.append(a) or pytest.fail(f"started {a}"))
    monkeypatch.setattr(console_app, "start_bench", lambda *a, **k: got.append(a) or pytest.fail(f"bench {a}"))
    return got


def _console(events: list[Any], *, watch_only: bool = True) -> ConsoleApp:
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=events)
    if watch_only:
        app.ctx.watch_only = WATCH_ONLY_WHY
    return app


async def test_every_request_to_act_is_refused_saying_why(started: list[Any]) -> None:
    app = _console(scripted.ready_under_load())
    told = Told()
    workload = app.ctx.catalog.workload("decode-heavy")
    choice = CampaignChoice(model=MODEL, topologies=("1p1d",), workloads=("decode-heavy",))
    requests = [LaunchRequested(LaunchRequest(model=MODEL, topology="1p1d")), StopRequested(), RestartRequested(),
                BenchRequested(workload, {}, "ours"), BenchStopRequested(), CampaignRequested(choice),
                CampaignResumeRequested("c1", choice)]
    async with app.run_test(size=(160, 48), message_hook=told) as pilot:
        await pilot.pause(0.3)
        for i, request in enumerate(requests, 1):
            app.post_message(request)
            await pilot.pause(0.2)
            assert len(told.refusals()) == i, (request, told.items)
        await pilot.press("ctrl+t")  # the recording: a watch-only console records nothing of its own
        await pilot.pause(0.2)
        assert len(told.refusals()) == len(requests) + 1
        await pilot.press("A")  # learn a playbook entry from the log: an edit of the playbook
        await pilot.pause(0.2)
        assert not isinstance(app.screen, AddEntryModal)
        assert len(told.refusals()) == len(requests) + 2
        await pilot.press("q")  # the quit dialog offers no stop of the operator's layout
        await pilot.pause(0.2)
        assert isinstance(app.screen, QuitModal)
        assert not app.screen.offer_stop
    assert not started and not app.jobs and app.recorder is None
    assert all(m == app.ctx.watch_only_refusal() for m in told.refusals())
    assert told.refusals()[0].startswith("the server was started without --operator: this console shows")
    assert {t for t, _ in told.items if "without --operator" in _} == {"watch-only"}


async def test_the_playbook_is_not_edited(started: list[Any], isolated_dirs: Path) -> None:
    app = _console([])
    told = Told()
    async with app.run_test(size=(160, 48), message_hook=told) as pilot:
        await pilot.press("p")
        await pilot.pause(0.5)
        assert isinstance(app.screen, PlaybookScreen)
        for key in ("ctrl+e", "ctrl+d", "delete", "delete"):
            await pilot.press(key)
            await pilot.pause(0.2)
            assert not isinstance(app.screen, AddEntryModal)
        assert len(told.refusals()) == 4, told.items
    assert not any((isolated_dirs / "config").rglob("*.yaml"))  # no playbook file of the operator's written


async def test_a_failed_layout_is_dismissed_here_only(started: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.core.launch import failures

    dismissed: list[str] = []
    monkeypatch.setattr(failures, "dismiss", lambda store, layout_id: dismissed.append(layout_id) or True)
    app = _console(scripted.failed())
    told = Told()
    async with app.run_test(size=(160, 48), message_hook=told) as pilot:
        await pilot.pause(0.3)
        await pilot.press("x")
        await pilot.pause(0.3)
    assert not dismissed  # the state file is the operator's
    assert told.refusals()


async def test_the_terminal_console_still_acts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the flag (the terminal's console, a browser's with --operator) the same request reaches ``up``."""
    got: list[Any] = []
    monkeypatch.setattr(console_app, "start_job", lambda name, argv: got.append(argv) or pytest.skip("reached"))
    app = _console([], watch_only=False)
    app.run_job = lambda name, argv, done="": got.append(argv)  # type: ignore[method-assign,assignment]
    told = Told()
    async with app.run_test(size=(160, 48), message_hook=told) as pilot:
        app.post_message(LaunchRequested(LaunchRequest(model=MODEL, topology="1p1d")))
        await pilot.pause(0.3)
    assert got and got[0][0] == "up"
    assert not told.refusals()
