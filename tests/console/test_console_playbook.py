"""The playbook in the console (issue 22, findings 18 and 22).

`A` learns the line the operator picks: on a failed start the marked root-cause line is picked first (not the
generic "Engine core initialization failed. See root cause above."), on a healthy log never one of the console's
own polls; the pattern is shown, may be edited, and a fix given. The playbook screen: a search with no match
shows no entry, Enter and Down go from the search box to the list, the operator's own entries are marked, an entry
is edited (a shipped one: the operator's copy), a shipped one switched off and on, the operator's deleted; ids and
titles are two rows of their own, cut, never wrapped into each other.
"""

from __future__ import annotations

from textual.widgets import Input, OptionList, Static

from tests.console import scripted
from tests.console.conftest import wait_for
from tui.console.app import make_console
from tui.console.screens.entryform import AddEntryModal, candidate_lines
from tui.console.screens.playbook import PlaybookScreen
from tui.core.events import Event
from tui.core.host.base import HostOptions
from tui.core.launch.events import LogLine
from tui.core.playbook import load_playbook
from tui.core.playbook.loader import operator_playbook_path

GENERIC = ("(APIServer pid=4000) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
           "proc(s): {}")
POLL = '(APIServer pid=4000) INFO:     127.0.0.1:50458 - "GET /metrics HTTP/1.1" 200 OK'


def _console(events: list[Event]):  # type: ignore[no-untyped-def]
    return make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=events,
                        book=load_playbook())


def _failed_then_generic() -> list[Event]:
    """The nvcc failure (marked by its diagnosis), then the generic consequence and a poll after it."""
    ev = scripted.failed()
    ev += [LogLine(ts=scripted.T0, server="decode-0", lineno=20, text=GENERIC),
           LogLine(ts=scripted.T0, server="decode-0", lineno=21, text=POLL)]
    return ev


def test_the_candidates_and_the_first_pick() -> None:
    book = load_playbook()
    logs = [(1, scripted.LOG[0], None), (2, scripted.NVCC_LINE, "flashinfer-no-nvcc"), (3, GENERIC, None),
            (4, POLL, None)]
    lines, pick = candidate_lines(logs, book)
    assert POLL not in lines and lines[pick] == scripted.NVCC_LINE.strip()
    # unmarked: the last error that is no generic consequence
    lines, pick = candidate_lines([(n, t, None) for n, t, _ in logs], book)
    assert lines[pick] == scripted.NVCC_LINE.strip()
    # a healthy log: the newest line that is not a poll
    healthy = [(1, scripted.LOG[1], None), (2, POLL, None), (3, POLL, None)]
    lines, pick = candidate_lines(healthy, book)
    assert lines == [scripted.LOG[1]] and pick == 0


async def test_a_learns_the_marked_root_cause_with_the_operators_pattern_and_fix() -> None:
    app = _console(_failed_then_generic())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("A")
        await pilot.pause(0.3)
        modal = app.screen
        assert isinstance(modal, AddEntryModal)
        assert modal.line == scripted.NVCC_LINE.strip() and POLL not in modal.lines
        box = modal.query_one("#add-pattern", Input)
        assert "Could not find nvcc" in box.value  # the pattern generalised from it, shown
        await wait_for(pilot, lambda: "finds the line" in str(modal.query_one("#add-check", Static).render()),
                       5, "the pattern checked")
        box.value = "nothing like it"  # an edit that does not find the line is said at once
        await wait_for(pilot, lambda: "does not find the line" in str(modal.query_one("#add-check", Static)
                                                                      .render()), 5, "the refusal")
        box.value = r"Could not find nvcc and default cuda_home"
        modal.query_one("#add-title", Input).value = "no nvcc on this box"
        modal.query_one("#add-env", Input).value = "VLLM_USE_FLASHINFER_SAMPLER=0"
        modal.query_one("#add-args", Input).value = "--attention-backend TRITON_ATTN"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, AddEntryModal), 10, "saved")
        entry = load_playbook().entry("no-nvcc-on-this-box")
        assert [p.text for p in entry.lines.patterns] == [r"Could not find nvcc and default cuda_home"]  # type: ignore[union-attr]
        assert entry.fix_text().startswith("set VLLM_USE_FLASHINFER_SAMPLER=0; add --attention-backend TRITON_ATTN")
        assert app.ctx.book is not None and app.ctx.book.get("no-nvcc-on-this-box") is not None  # the app has it


async def test_a_on_a_healthy_log_never_offers_a_poll() -> None:
    ev = scripted.ready_under_load()
    ev += [LogLine(ts=scripted.T0, server="prefill-0", lineno=100 + i, text=POLL) for i in range(50)]
    app = _console(ev)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("A")
        await pilot.pause(0.3)
        modal = app.screen
        assert isinstance(modal, AddEntryModal)
        assert POLL not in modal.lines and "GET /metrics" not in (modal.line or "")
        assert modal.query_one("#add-ok").region.bottom <= 24  # the buttons in view at 80x24


def _rows(ol: OptionList) -> list[str]:
    return [ol.get_option_at_index(i).prompt.plain for i in range(ol.option_count)]  # type: ignore[union-attr]


async def test_the_playbook_screen_search_keys_and_two_row_entries() -> None:
    app = _console(scripted.failed())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("p")
        screen = app.screen
        assert isinstance(screen, PlaybookScreen)
        ol = screen.query_one("#pb-entries", OptionList)
        await wait_for(pilot, lambda: ol.option_count > 10, 10, "the entries")
        assert all(prompt.count("\n") == 1 for prompt in _rows(ol))  # an id row and a title row
        assert ol.virtual_size.height == 2 * ol.option_count  # each entry two rows: nothing wrapped
        await pilot.press("slash", *"zzzz")
        await pilot.pause(0.2)
        assert ol.option_count == 0
        assert "No entry matches 'zzzz'" in str(screen.query_one("#pb-entry", Static).render())
        search = screen.query_one("#pb-search", Input)
        search.value = ""
        await pilot.press(*"nvcc")
        await pilot.pause(0.2)
        assert ol.option_count >= 1
        await pilot.press("enter")  # Enter goes to the list
        assert app.focused is ol
        await pilot.press("slash")
        await pilot.press("down")  # and so does Down
        assert app.focused is ol and "flashinfer-no-nvcc" in str(screen.query_one("#pb-entry", Static).render())


async def test_entries_are_edited_switched_off_and_on_and_the_operators_deleted() -> None:
    app = _console(scripted.failed())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("p")
        screen = app.screen
        assert isinstance(screen, PlaybookScreen)
        ol = screen.query_one("#pb-entries", OptionList)
        await wait_for(pilot, lambda: ol.option_count > 10, 10, "the entries")
        ol.focus()
        ol.highlighted = next(i for i in range(ol.option_count) if ol.get_option_at_index(i).id == "port-in-use")
        # ctrl+e on a shipped entry: the operator's copy takes its place
        await pilot.press("ctrl+e")
        await pilot.pause(0.3)
        modal = app.screen
        assert isinstance(modal, AddEntryModal) and modal.entry is not None and modal.entry.id == "port-in-use"
        modal.query_one("#add-title", Input).value = "my words for a taken port"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.screen is screen, 10, "saved")
        mine = "port-in-use\n  yours, replaces shipped · "
        await wait_for(pilot, lambda: any(r.startswith(mine) for r in _rows(ol)), 10, "marked as the operator's")
        assert load_playbook().entry("port-in-use").title == "my words for a taken port"
        assert "my words for a taken port" in operator_playbook_path().read_text()
        # ctrl+d switches a shipped entry off, and on again
        ol.highlighted = next(i for i in range(ol.option_count) if ol.get_option_at_index(i).id == "cuda-oom")
        await pilot.press("ctrl+d")
        await wait_for(pilot, lambda: any(r.startswith("cuda-oom\n  off · ") for r in _rows(ol)), 10, "switched off")
        assert load_playbook().get("cuda-oom") is None
        assert app.ctx.book is not None and app.ctx.book.get("cuda-oom") is None  # the follower's book too
        ol.highlighted = next(i for i in range(ol.option_count) if ol.get_option_at_index(i).id == "cuda-oom")
        await pilot.press("ctrl+d")
        await wait_for(pilot, lambda: load_playbook().get("cuda-oom") is not None, 10, "switched on")
        # Delete (twice) deletes the operator's own: the shipped entry is back
        await wait_for(pilot, lambda: any(r.startswith("cuda-oom") and "off" not in r for r in _rows(ol)), 10,
                       "listed again")
        ol.highlighted = next(i for i in range(ol.option_count) if ol.get_option_at_index(i).id == "port-in-use")
        await pilot.press("delete")
        await pilot.pause(0.1)
        assert load_playbook().entry("port-in-use").title == "my words for a taken port"  # not yet: it asks first
        await pilot.press("delete")
        await wait_for(pilot, lambda: load_playbook().entry("port-in-use").title != "my words for a taken port",
                       10, "deleted")
        await wait_for(pilot, lambda: not any("yours" in r for r in _rows(ol)), 10, "no entry of the operator's")
