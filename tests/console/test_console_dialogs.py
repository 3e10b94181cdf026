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


def test_a_failed_commands_notice_is_short() -> None:
    from tui.console import fmt

    line = ("disagg-tui: error: prefill-0 exited with code 1 during startup (kv_cache): known failure "
            "[kv-cache-too-small-for-max-len] KV cache too small for one request of the max model length (hint: "
            "fix: add --max-model-len 16384 (applied only when asked for) — Or raise --gpu-memory-utilization, or "
            "add tensor parallelism (the KV cache is split over the TP group). (relaunch with --apply-fix "
            "kv-cache-too-small-for-max-len))")
    short = fmt.short_notice(line)
    assert short.startswith("prefill-0 exited with code 1 during startup") and short.endswith("…")
    assert len(short) <= 110 and "hint" not in short and "disagg-tui: error" not in short
    assert fmt.short_notice("disagg-tui: error: no such model") == "no such model"


@pytest.mark.usefixtures("clean_layouts")
async def test_an_up_that_fails_leaves_the_banner_in_view_at_80x24() -> None:
    """Live: a start that fails (the KV cache too small) at 80x24: its notice is a few lines, not twelve over the
    banner that explains it."""
    from textual.widgets import OptionList
    from textual.widgets._toast import Toast

    from tests.console.conftest import console_ports, wait_for
    from tui.console.screens.launch import LaunchScreen

    app = make_console(HostOptions(sim=True, sim_startup_s=1.0, sim_faults=("kv-too-small",)),
                       ports=console_ports(), record=False)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(pilot, lambda: len(app.state.gpus) == 2, 20, "two GPUs")
        await pilot.press("l")
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        models = screen.query_one("#models", OptionList)
        await wait_for(pilot, lambda: models.option_count > 0, 20, "the model list")
        models.highlighted = next(i for i in range(models.option_count)
                                  if models.get_option_at_index(i).id == "qwen3.6-27b-nvfp4")
        await wait_for(pilot, lambda: screen.current is not None, 30, "the plan")
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: any(n.title.startswith("up failed") for n in app._notifications), 90,
                       "up's failure")
        notice = next(n for n in app._notifications if n.title.startswith("up failed"))
        assert len(notice.message) <= 110, notice.message
        await pilot.pause(0.3)
        toasts = [t for t in app.screen.query(Toast) if "up failed" in str(t.render())]
        assert toasts and toasts[0].region.height <= 6, toasts[0].region
