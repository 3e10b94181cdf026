"""The campaign screen's lists (issue 22, findings 6 and 22): a box says whether it is ticked in characters, not
only in colour; the first option is highlighted when the screen opens, so the README's `Down Space` unticks tp2;
the form's words wrap instead of being cut."""

from __future__ import annotations

from textual.widgets import SelectionList

from tests.console import scripted
from tui.console.app import make_console
from tui.console.widgets.checklist import TICKED, UNTICKED, CheckList
from tui.core.host.base import HostOptions
from tui.sim.host import SimHost


def _console():  # type: ignore[no-untyped-def]
    options = HostOptions(sim=True)
    return make_console(options, live=False, clock=scripted.clock, host=SimHost(options),
                        events=scripted.history((0.0, 0.0), n=4, loaded=False))


def _rows(widget: CheckList) -> list[str]:
    return ["".join(seg.text for seg in widget.render_line(y)).strip() for y in range(widget.option_count)]


async def test_the_readme_campaign_step_unticks_tp2() -> None:
    app = _console()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("c")
        await pilot.pause(0.3)
        topos = app.screen.query_one("#c-topologies", CheckList)
        assert app.focused is topos and topos.highlighted == 0  # the first option, at once
        assert _rows(topos) == [f"{UNTICKED} tp1", f"{TICKED} tp2", f"{TICKED} dp2", f"{TICKED} 1p1d"]
        await pilot.press("down", "space")  # the README: "untick tp2"
        await pilot.pause(0.1)
        assert topos.selected == ["dp2", "1p1d"]
        assert _rows(topos)[1] == f"{UNTICKED} tp2"
        wls = app.screen.query_one("#c-workloads", SelectionList)
        assert isinstance(wls, CheckList) and wls.selected == ["decode-heavy", "prefill-heavy"]


async def test_the_form_words_wrap_at_80_columns() -> None:
    app = _console()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("c")
        await pilot.pause(0.3)
        form = app.screen.query_one("#campaign-form")
        labels = [w for w in form.query(".form-label")]
        assert labels and all(w.size.height >= 1 for w in labels)
        words = " ".join(str(w.render()) for w in labels)
        assert "(1,2,4)" in words and "prompts per run" in words  # whole, wrapped in 30 columns
        rates = labels[0]
        assert rates.size.height > 1 and rates.size.width <= form.size.width


async def test_the_campaign_offers_the_model_of_the_layout_stopped_last() -> None:
    """The README stops dp2 of qwen3.6 before its campaign: the campaign's model is that one, not the first."""
    from textual.widgets import OptionList

    from tui.core.launch.events import LayoutChanged

    options = HostOptions(sim=True)
    ev = [*scripted.history((0.0, 0.0), n=4, loaded=False), *scripted.launched("ready"),
          LayoutChanged(ts=scripted.T0, layout_id=scripted.LAYOUT, status="stopped", topology="1p1d",
                        profile_id="qwen3.6-27b-nvfp4")]
    app = make_console(options, live=False, clock=scripted.clock, host=SimHost(options), events=ev)
    async with app.run_test(size=(160, 48)) as pilot:
        assert app.state.layout is None
        await pilot.press("c")
        await pilot.pause(0.3)
        models = app.screen.query_one("#c-model", OptionList)
        assert models.highlighted is not None
        assert models.get_option_at_index(models.highlighted).id == "qwen3.6-27b-nvfp4"


async def test_the_readme_campaign_step_in_one_burst_starts_dp2_and_1p1d() -> None:
    """``tmux send-keys Down Space C-s``: one line, all at once; ctrl+s starts what the boxes say once Down and
    Space have reached the list (as a priority key it was taken first: tp2 still ticked)."""
    from textual import events

    from tui.console.messages import CampaignRequested

    asked: list[CampaignRequested] = []
    options = HostOptions(sim=True)
    app = make_console(options, live=False, clock=scripted.clock, host=SimHost(options),
                       events=scripted.history((0.0, 0.0), n=4, loaded=False))
    async with app.run_test(size=(160, 48), message_hook=lambda m: asked.append(m) if isinstance(
            m, CampaignRequested) else None) as pilot:
        await pilot.press("c")
        await pilot.pause(0.3)
        for k in ("down", "space", "ctrl+s"):
            app.post_message(events.Key(k, " " if k == "space" else None))
        for _ in range(50):
            if asked:
                break
            await pilot.pause(0.1)
        assert asked and asked[0].choice.topologies == ("dp2", "1p1d")
        assert asked[0].choice.workloads == ("decode-heavy", "prefill-heavy")
