"""Results you can trust, in the console (issue 23): the results screen shows a run that measured nothing as a row
apart and in no figure, scopes the table (and its exports) to a campaign; the campaign screen marks the best of
each objective, gives the recommendation once a campaign has ended and an ETA while it runs."""

from __future__ import annotations

import io
import os

from rich.console import Console
from textual.widgets import DataTable, Static

from tests.bench.trustruns import T0, campaign, issue_scenario, layout_plan, records, write_run
from tests.console import scripted
from tests.console.conftest import wait_for
from tui.console.app import ConsoleApp, make_console
from tui.console.commands import available
from tui.console.screens.campaign import CampaignScreen, verdict
from tui.console.screens.results import ResultsScreen
from tui.core import paths
from tui.core.bench.store import write_json
from tui.core.host.base import HostOptions
from tui.sim.host import SimHost


def _console(*, host: bool = False) -> ConsoleApp:
    opts = HostOptions(sim=True)
    return make_console(opts, live=False, clock=scripted.clock, events=scripted.history((0.0, 0.0), n=4, loaded=False),
                        host=SimHost(opts) if host else None)


async def test_the_results_keep_a_campaigns_cell_as_measured_and_scope_to_it() -> None:
    runs = issue_scenario(paths.runs_dir())
    good, stray = runs["dp2"], runs["stray"]
    app = _console()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("r")
        screen = app.screen
        assert isinstance(screen, ResultsScreen)
        await wait_for(pilot, lambda: len(screen.data.cells) == 3, 30, "the three rows")
        dp2 = next(c for c in screen.data.cells if c.topology == "dp2" and c.ranked)
        assert dp2.values["output_throughput"].mean == good.summary["output_throughput"] and len(dp2.runs) == 1
        apart = next(c for c in screen.data.cells if not c.ranked)
        assert [r.id for r in apart.runs] == [stray.id] and "not part of campaign bake" in apart.setup
        table = screen.query_one("#results-table", DataTable)
        assert "status" in [str(c.label) for c in table.columns.values()]
        row = table.get_row_at(screen.data.cells.index(apart))
        assert str(row[-1]) == "incomplete (0/32 done, 32 failed)" and str(row[4]) == "—"
        rec = screen.data.recommendation
        assert rec is not None and rec.objectives["max_throughput"][0].winner == "dp2"
        assert "all runs (s: scope, 1 of 2)" in str(table.border_title)
        assert "Scope of the results" in {c.title for c in available(app, screen)}  # the palette offers it too
        # s: the campaign's runs only; the stray run named as left out
        await pilot.press("s")
        await wait_for(pilot, lambda: screen.data.scoped.campaign == "bake", 30, "the campaign's scope")
        assert {r.id for r in screen.data.runs} == {good.id, runs["1p1d"].id}
        assert all(c.ranked for c in screen.data.cells)
        assert "NOT PART OF CAMPAIGN bake (left out)" in screen.data.note
        assert "campaign bake (s: scope, 2 of 2)" in str(table.border_title)
        text = str(screen.query_one("#rec-text", Static).content)
        assert "NOT PART OF CAMPAIGN bake" in text and "max throughput: dp2" in text
        # the export is of the scope shown
        await pilot.press("ctrl+k")
        exports = paths.data_dir() / "exports"
        await wait_for(pilot, lambda: list(exports.glob("results-bake-*.md")), 20, "the Markdown export")
        md = next(exports.glob("results-bake-*.md")).read_text()
        assert md.startswith("_Scope: campaign bake_") and f"**{good.summary['output_throughput']:,.0f}**" in md
        assert stray.id in md and "| not part of" not in md  # named in the note, not a row
        await pilot.press("ctrl+e")
        await wait_for(pilot, lambda: list(exports.glob("results-bake-*.csv")), 20, "the CSV export")
        csv = next(exports.glob("results-bake-*.csv")).read_text().splitlines()
        assert [line.split(",")[0] for line in csv[1:]] == ["1p1d", "dp2"]
        await pilot.press("s")  # round again: every run
        await wait_for(pilot, lambda: not screen.data.scoped.campaign, 30, "every run again")
        assert len(screen.data.cells) == 3


async def test_a_finished_campaigns_grid_marks_the_best_and_recommends() -> None:
    issue_scenario(paths.runs_dir())
    app = _console(host=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("c")
        screen = app.screen
        assert isinstance(screen, CampaignScreen)
        await wait_for(pilot, lambda: screen.states and screen.states[0].recommendation, 30, "the campaign")
        state = screen.states[0]
        assert state.name == "bake" and state.finished and state.eta is None
        dp2, pd = state.figures[("dp2", "decode-heavy", "inf")], state.figures[("1p1d", "decode-heavy", "inf")]
        assert {"output_throughput", "mean_tpot_ms"} <= dp2.best and not pd.best & {"output_throughput"}
        assert state.recommendation[0].startswith("max throughput: dp2: dp2 on decode-heavy by ")
        console = Console(width=120, record=True, file=io.StringIO())
        console.print(screen.query_one("#c-grid", Static).content)
        grid = console.export_text()
        assert "★" in grid and "Recommendation" in grid and "max throughput: dp2" in grid


async def test_a_running_campaign_says_when_it_should_end_and_one_topology_is_not_a_winner() -> None:
    root = paths.runs_dir()
    campaign(root, "going", ["1p1d", "dp2"])
    done = write_run(root, "going", "1p1d-decode-heavy", "1p1d", records(8), plan_dict=layout_plan("1p1d"),
                     started=T0)
    done.meta.ended = T0 + 30
    write_json(done.path / "run.json", done.meta.to_dict())
    now = write_run(root, "going", "dp2-decode-heavy", "dp2", records(8), plan_dict=layout_plan("dp2"),
                    started=T0 + 40)
    now.meta.status, now.meta.ended, now.meta.pid = "running", None, os.getpid()
    write_json(now.path / "run.json", now.meta.to_dict())
    app = _console(host=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("c")
        screen = app.screen
        assert isinstance(screen, CampaignScreen)
        await wait_for(pilot, lambda: screen.states and screen.states[0].eta is not None, 30, "the ETA")
        state = screen.states[0]
        assert state.running and not state.recommendation
        told = verdict(state).plain
        assert told.startswith("ETA ~") and "(mean of 1 measured)" in told
        # it ends with dp2 failed: 1p1d alone measured, no winner named, what is missing said
        now.meta.status, now.meta.ended = "failed", T0 + 41
        write_json(now.path / "run.json", now.meta.to_dict())
        screen.refresh_list()
        await wait_for(pilot, lambda: screen.states and screen.states[0].recommendation, 30, "the recommendation")
        lines = screen.states[0].recommendation
        assert lines[0] == "max throughput: not compared: only 1p1d measured on decode-heavy"
        assert lines[-1].startswith("to compare on decode-heavy: disagg-tui run --sim --model qwen3.6-27b-nvfp4 "
                                    "--topology dp2,tp2 --workload decode-heavy")
