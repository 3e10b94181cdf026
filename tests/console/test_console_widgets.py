"""The dashboard's servers table and log pane (both drawn with the Line API): the cursor picks the server whose log
is shown, by key and by mouse; a long line is cut to the pane with an ellipsis and a matched line keeps its mark in
view; a row is drawn again only when one of its cells changed."""

from __future__ import annotations

from rich.style import Style

from tests.console import scripted
from tui.console.app import make_console
from tui.console.widgets.logpane import LogPane, line_strip
from tui.console.widgets.servers import ServerTable
from tui.core.host.base import HostOptions


async def test_the_cursor_picks_the_server_whose_log_is_shown() -> None:
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=scripted.ready_under_load())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        table = app.screen.query_one(ServerTable)
        log = app.screen.query_one(LogPane)
        assert table.row_count == 3 and [table.get_row_at(i)[0].plain for i in range(3)] == [  # type: ignore[attr-defined]
            "prefill-0", "decode-0", "proxy"]
        assert table.selected == "prefill-0" and log.server == "prefill-0"
        table.focus()
        await pilot.press("down")
        await pilot.pause(0.1)
        assert table.cursor_row == 1 and log.server == "decode-0" and log.border_title == "Log decode-0"
        await pilot.press("end")
        await pilot.pause(0.1)
        assert table.selected == "proxy" and log.server == "proxy"
        await pilot.press("down")  # past the last row: stays
        assert table.cursor_row == 2
        await pilot.press("home")
        await pilot.pause(0.1)
        assert table.selected == "prefill-0" and log.server == "prefill-0"
        # a click on a row (the header is line 0 of the table's content, under its border)
        await pilot.click(ServerTable, offset=(5, 1 + 2))
        await pilot.pause(0.1)
        assert table.selected == "decode-0" and log.server == "decode-0"


async def test_a_row_is_drawn_again_only_when_a_cell_of_it_changed() -> None:
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=scripted.ready_under_load())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        table = app.screen.query_one(ServerTable)
        made: list[int] = []
        original = table._strips.__class__.__setitem__

        class Counting(dict):  # type: ignore[type-arg]
            def __setitem__(self, key: object, value: object) -> None:
                made.append(1)
                original(self, key, value)

        table._strips = Counting(table._strips)
        table.draw(app.state)  # nothing changed: no row is made again
        table.refresh()
        await pilot.pause(0.1)
        assert made == []
        table.focus()
        await pilot.press("down")  # the cursor leaves one row and lands on another: those two are made again
        await pilot.pause(0.1)
        assert 1 <= len(made) <= 3


def test_a_long_line_is_cut_to_the_pane_and_a_marked_line_keeps_its_mark() -> None:
    base = Style()
    line = "(APIServer pid=4000) INFO 12-01 11:59:21 [api_utils.py:273] non-default args: " + "x" * 3000
    strip = line_strip(line, None, 80, base)
    text = "".join(seg.text for seg in strip)
    assert strip.cell_length == 80 and text.endswith("…") and text.startswith("(APIServer pid=4000)")
    short = line_strip("short", None, 80, base)
    assert short.cell_length == 80 and "".join(s.text for s in short).rstrip() == "short"
    marked = line_strip("ERROR something broke " + "y" * 500, "flashinfer-no-nvcc", 60, base)
    mtext = "".join(seg.text for seg in marked)
    assert marked.cell_length == 60 and mtext.startswith("✖ flashinfer-no-nvcc ") and mtext.endswith("…")
    err = line_strip("(EngineCore pid=1) ERROR 12-01 [core.py:1] boom", None, 40, base)
    assert any(seg.style is not None and seg.style.color is not None and seg.style.color.name == "red"
               for seg in err)


def test_launch_form_keeps_quoted_extra_args_whole() -> None:
    """The launch form's extra args field is read by the launch request (tui/core/plan/request.py), quotes kept."""
    from tui.core.plan.request import LaunchRequest

    r = LaunchRequest.from_text({"model": "m", "topology": "tp1",
                                 "arg": "--served-model-name '{% a b %}' --enforce-eager"})
    assert r.extra_args == ("--served-model-name", "{% a b %}", "--enforce-eager")
    assert LaunchRequest.from_argv(r.to_argv()) == r


async def test_an_entry_added_in_the_console_is_in_its_playbook_at_once() -> None:
    from textual.widgets import Input

    from tests.console.conftest import wait_for
    from tui.console.screens.playbook import AddEntryModal
    from tui.core.playbook import load_playbook

    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, book=load_playbook())
    async with app.run_test(size=(160, 48)) as pilot:
        before = {e.id for e in app.ctx.book.entries}  # type: ignore[union-attr]
        app.push_screen(AddEntryModal("(EngineCore pid=9) ERROR 12-01 10:00:00 [core.py:1] RuntimeError: the "
                                      "frobnicator 42 overheated"))
        await pilot.pause(0.2)
        app.screen.query_one("#add-title", Input).value = "frobnicator overheated"
        await pilot.click("#add-ok")
        await wait_for(pilot, lambda: {e.id for e in app.ctx.book.entries} - before, 10,  # type: ignore[union-attr]
                       "the new entry in the console's playbook")


def test_the_idle_band_of_a_replay_offers_no_launch() -> None:
    """Live, the idle band says l launches; in a replay, which launches nothing, it points at the markers."""
    from tui.console.state import ConsoleState
    from tui.console.widgets.band import render_band

    state = ConsoleState(scripted.clock)
    live, kind = render_band(state, 120)
    assert kind == "idle" and "Press l to pick a model" in live.plain
    state.replay_label = "REPLAY 1×"
    replayed, _ = render_band(state, 120)
    assert "at this point of the recording" in replayed.plain and "Press l" not in replayed.plain
