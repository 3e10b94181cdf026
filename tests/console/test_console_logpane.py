"""The dashboard's log pane as an operator reads it (issue 22, findings 2 and 23): the console's own polls hidden
and counted (``o`` shows them; the same in a replay), a ``/`` filter, a wrap toggle, the log file's path, and a
traceback never cut at the pane's edge."""

from __future__ import annotations

from pathlib import Path

from tests.console import scripted
from tests.console.conftest import wait_for
from tui.console import loglines
from tui.console.app import make_console
from tui.console.replay import make_replay
from tui.console.widgets.logpane import LogPane
from tui.core.events import Event
from tui.core.host.base import HostOptions
from tui.core.launch.events import LogLine
from tui.core.record import Recorder, new_header

POLL = '(APIServer pid=4000) INFO:     127.0.0.1:{port} - "GET /{path} HTTP/1.1" 200 OK'
REQUEST = '(APIServer pid=4000) INFO:     127.0.0.1:50460 - "POST /v1/completions HTTP/1.1" 200 OK'
TRACEBACK = (
    "(APIServer pid=23990) Traceback (most recent call last):",
    '(APIServer pid=23990)   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py", line 1272, in '
    "wait_for_engine_startup",
    "(APIServer pid=23990)     raise RuntimeError(",
    "(APIServer pid=23990) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
    "proc(s): {'EngineCore_DP0': 1} -- and the cause is at the end of this long line: NVCC_NOT_FOUND",
)


def _with_polls(n: int = 120) -> list[Event]:
    """1P1D under load, then ``n`` of the console's polls on prefill-0 with one real request among them."""
    ev = scripted.ready_under_load()
    for i in range(n):
        ev.append(LogLine(ts=scripted.T0, server="prefill-0", lineno=100 + i,
                          text=POLL.format(port=50400 + i % 7, path="metrics" if i % 3 == 0 else "health")))
        if i == n // 2:
            ev.append(LogLine(ts=scripted.T0, server="prefill-0", lineno=100 + n + 1, text=REQUEST))
    return ev


def _shown(pane: LogPane) -> list[str]:
    return ["".join(seg.text for seg in pane.render_line(y)).rstrip() for y in range(pane.size.height)]


def test_what_counts_as_our_own_poll() -> None:
    assert loglines.is_own_poll(POLL.format(port=1, path="health"))
    assert loglines.is_own_poll(POLL.format(port=1, path="metrics"))
    assert loglines.is_own_poll('INFO:     127.0.0.1:5 - "GET /v1/models HTTP/1.1" 200 OK')
    assert not loglines.is_own_poll(REQUEST)
    # a poll that failed is news: it stays in view
    assert not loglines.is_own_poll('(APIServer pid=4000) INFO:     127.0.0.1:5 - "GET /health HTTP/1.1" 503 '
                                    "Service Unavailable")
    assert not loglines.is_own_poll("(EngineCore pid=4001) INFO 12-01 [core.py:1] GET /health is slow")
    assert all(loglines.in_traceback(t) for t in TRACEBACK)
    assert not loglines.in_traceback(scripted.LOG[1]) and not loglines.in_traceback(REQUEST)


async def test_our_polls_are_hidden_and_counted_and_o_shows_them() -> None:
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=_with_polls())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        pane = app.screen.query_one(LogPane)
        assert pane.server == "prefill-0"
        shown = _shown(pane)
        assert not any("GET /health" in s or "GET /metrics" in s for s in shown)
        assert any("POST /v1/completions" in s for s in shown) and any("Starting to load model" in s for s in shown)
        assert "120 polls hidden (o shows)" in str(pane.border_title)
        await pilot.press("o")
        await pilot.pause(0.1)
        shown = _shown(pane)
        assert sum("GET /health" in s for s in shown) > 10 and "polls shown (o hides)" in str(pane.border_title)
        await pilot.press("o")
        await pilot.pause(0.1)
        assert not any("GET /health" in s for s in _shown(pane))


async def test_the_polls_are_hidden_in_a_replay_too(tmp_path: Path) -> None:
    path = tmp_path / "polls.dtrec"
    rec = Recorder(path, new_header("test", simulated=True)).start()
    for ev in _with_polls():
        rec.record(ev)
    rec.close()
    app = make_replay(path, speed=100.0)
    async with app.run_test(size=(160, 48)) as pilot:
        assert app.source is not None
        await wait_for(pilot, lambda: app.source.at_end, 30, "the replay's end")  # type: ignore[union-attr]
        await pilot.pause(0.4)
        app.flush()
        await pilot.pause(0.1)
        pane = app.screen.query_one(LogPane)
        assert pane.server == "prefill-0" and "120 polls hidden" in str(pane.border_title)
        shown = _shown(pane)
        assert any("POST /v1/completions" in s for s in shown)
        assert not any("GET /health" in s for s in shown)


async def test_slash_filters_the_log_enter_keeps_it_escape_clears_it() -> None:
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=_with_polls())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        pane = app.screen.query_one(LogPane)
        await pilot.press("slash")
        for ch in "LOADING":  # any case; typed letters go into the filter, not to the dashboard's keys
            await pilot.press(ch.lower())
        await pilot.pause(0.1)
        shown = [s for s in _shown(pane) if s]
        assert shown == [scripted.LOG[2]] and "/loading: 1 lines" in str(pane.border_title)
        assert app.screen.query_one("#log-filter").display
        await pilot.press("enter")  # kept, back to the log
        await pilot.pause(0.1)
        assert app.focused is pane and [s for s in _shown(pane) if s] == [scripted.LOG[2]]
        await pilot.press("slash")
        await pilot.press("escape")  # cleared and closed
        await pilot.pause(0.1)
        assert not app.screen.query_one("#log-filter").display and pane.query_text == ""
        assert any("Starting to load model" in s for s in _shown(pane))
        await pilot.press("slash", "z", "z", "z", "enter")
        await pilot.pause(0.1)
        assert "no line contains 'zzz'" in _shown(pane)[0]


async def test_w_wraps_long_lines_and_a_traceback_is_never_cut() -> None:
    ev = scripted.ready_under_load()
    for i, text in enumerate(TRACEBACK):
        ev.append(LogLine(ts=scripted.T0, server="prefill-0", lineno=200 + i, text=text))
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=ev)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        pane = app.screen.query_one(LogPane)
        joined = "".join(_shown(pane))
        assert "NVCC_NOT_FOUND" in joined and "wait_for_engine_startup" in joined  # wrapped, not cut
        assert pane.border_subtitle.endswith("/prefill-0.log")  # the log file's path
        # an ordinary long line is cut to one row with an ellipsis ...
        await pilot.press("slash", *"torch.compile", "enter")
        await pilot.pause(0.1)
        rows = [s for s in _shown(pane) if s]
        assert len(rows) == 1 and rows[0].endswith("…")
        # ... and wrapped whole with w
        await pilot.press("w")
        await pilot.pause(0.1)
        rows = [s for s in _shown(pane) if s]
        assert len(rows) > 1 and "".join(rows) == scripted.LOG[3] and "wrapped (w)" in str(pane.border_title)
