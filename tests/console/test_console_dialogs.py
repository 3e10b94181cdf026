"""The failure details dialog at 80x24 (issue 22, finding 20): it fits the terminal with its keys in view, and
↑/↓, PgUp/PgDn, Home and End scroll the text (End did nothing, and the fix and the keys were cut off)."""

from __future__ import annotations

import pytest
from textual.containers import VerticalScroll

from tests.console import scripted
from tui.console.app import make_console
from tui.core.host.base import HostOptions


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (160, 48)])
async def test_the_details_dialog_fits_and_scrolls_to_its_end(size: tuple[int, int]) -> None:
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=scripted.failed())
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.3)
        await pilot.press("d")
        await pilot.pause(0.2)
        screen = app.screen
        keys = screen.query_one("#text-keys")
        dialog = screen.query_one("#text-dialog")
        assert "End" in str(keys.render()) and "esc close" in str(keys.render())
        # the keys' line is inside the dialog and the dialog inside the terminal
        assert dialog.region.y >= 0 and dialog.region.bottom <= size[1]
        assert dialog.region.y < keys.region.y < dialog.region.bottom - 1
        scroll = screen.query_one("#text-scroll", VerticalScroll)
        body = str(screen.query_one("#text-body").render())
        assert "add --attention-backend TRITON_ATTN" in body
        if size == (160, 48):
            assert scroll.max_scroll_y == 0  # room for all of it
            return
        if size == (80, 24):
            assert scroll.max_scroll_y > 0  # more than fits, and it scrolls
        elif scroll.max_scroll_y == 0:
            return
        await pilot.press("end")
        await pilot.pause(0.1)
        assert scroll.scroll_y == scroll.max_scroll_y
        await pilot.press("home")
        await pilot.pause(0.1)
        assert scroll.scroll_y == 0
        await pilot.press("pagedown")
        await pilot.pause(0.1)
        assert scroll.scroll_y > 0
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert not screen.is_current


async def test_the_dashboard_footer_keeps_q_at_80_columns() -> None:
    from textual.widgets import Footer
    from textual.widgets._footer import FooterKey

    from tui.console.screens.modals import QuitModal

    for events in (scripted.ready_under_load(), scripted.history((0.0, 0.0), n=4, loaded=False)):
        app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=events)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(0.3)
            keys = [k for k in app.screen.query_one(Footer).query(FooterKey) if k.region.width]
            shown = {k.key for k in keys if k.region.right <= 80}
            assert "q" in shown, shown
            await pilot.press("q")
            await pilot.pause(0.2)
            assert isinstance(app.screen, QuitModal)  # the app's quit: it asks first
