"""Serve knobs in the console (issue 24): the launch screen's knobs come from the catalogue (values that do not fit
greyed with the reason, the value chosen in the plan and in the detached ``up``), the campaign screen's knob axes
(what fits the model and topologies, the layouts and cells they make, a refused layout in one line, ``run --knob``),
the campaign grid's row per layout, and the results' knob columns, knob effects and the chart of one knob's effect.
Nothing is started: the console's jobs are caught as command lines, the runs are written as files."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input, OptionList, SelectionList, Static

from tests.console import scripted
from tests.console.conftest import console_ports, wait_for
from tests.console.test_console_snapshots import settle
from tests.knobruns import write_campaign
from tui.console.app import ConsoleApp, make_console
from tui.console.campaigns import campaigns
from tui.console.knobs import knob_groups, set_axis_value, set_pair
from tui.console.screens.campaign import CampaignScreen, grid
from tui.console.screens.launch import LaunchScreen
from tui.console.screens.results import ResultsScreen
from tui.console.widgets.charts import BarChart, bar_text
from tui.console.widgets.knoblist import KnobList
from tui.core import paths
from tui.core.host.base import HostOptions
from tui.core.plan.request import LaunchRequest
from tui.sim.host import SimHost

DENSE = "qwen3.6-27b-nvfp4"  # a dense model with an MTP head (config.json's mtp_* keys)
MOE = "gemma-4-26b-a4b-fp8"


def _console() -> tuple[ConsoleApp, list[list[str]]]:
    """A console on the simulated host that plans but starts nothing: the command lines it would run."""
    opts = HostOptions(sim=True)
    app = make_console(opts, live=False, clock=scripted.clock, host=SimHost(opts), ports=console_ports(),
                       events=scripted.history((0.0, 0.0), n=2, loaded=False))
    started: list[list[str]] = []

    def run_job(name: str, argv: list[str], done_message: str = "") -> None:
        started.append(argv)

    app.run_job = run_job  # type: ignore[method-assign]
    return app, started


def _text(widget: Static) -> str:
    return str(widget.render()) if widget.display else ""


async def _launch(pilot: Any, app: ConsoleApp, model: str, topology: str) -> LaunchScreen:
    await pilot.press("l")
    screen = app.screen
    assert isinstance(screen, LaunchScreen)
    models = screen.query_one("#models", OptionList)
    await wait_for(pilot, lambda: models.option_count > 0, 20, "the model list")
    models.highlighted = next(i for i in range(models.option_count) if models.get_option_at_index(i).id == model)
    await wait_for(pilot, lambda: screen.model_id == model and screen.knob_rows, 30, "the plans")
    topologies = screen.query_one("#topologies", OptionList)
    topologies.highlighted = next(i for i in range(topologies.option_count)
                                  if topologies.get_option_at_index(i).id == topology)
    await wait_for(pilot, lambda: screen.topology == topology and screen.current is not None, 20, "the plan")
    return screen


async def test_launch_knobs_come_from_the_catalogue_greyed_where_they_do_not_fit_and_reach_the_up() -> None:
    app, started = _console()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _launch(pilot, app, MOE, "tp1")
        lst = screen.query_one("#serve-knobs", KnobList)
        keys = [r.key for r in lst.rows]
        assert keys[:4] == ["spec", "ep", "attn", "mnbt"] and "decode.mnbt" not in keys  # no role rows on tp1
        rows = {r.key: r for r in lst.rows}
        ep, spec = rows["ep"], rows["spec"]
        assert [(v.value, bool(v.refused)) for v in ep.values] == [("off", False), ("on", True)]
        assert "needs ≥ 2 per server" in ep.values[1].refused  # one GPU a server on tp1
        assert "gemma-4-26b-a4b-fp8 has none" in spec.values[2].refused  # no MTP layers in this checkpoint
        # ep: its one other value does not fit: → stays at off, and the reason is under the list
        lst.focus()
        lst.highlighted = keys.index("ep")
        await pilot.press("right")
        assert lst.value_of(ep) == "off"
        detail = _text(screen.query_one("#knob-detail", Static))
        assert "✖on" in detail and "expert parallel splits a server's experts over its GPUs" in detail
        # attn: → steps to the next value that fits; the text, the plan and the launch carry it
        lst.highlighted = keys.index("attn")
        await pilot.press("right", "right")
        assert screen.query_one("#knob", Input).value == "attn=triton"
        await wait_for(pilot, lambda: screen.request is not None and screen.request.knobs == (("attn", "triton"),),
                       20, "the request with the knob")
        shown = str(screen.query_one("#plan-text", Static).render())
        assert "attn=triton (attention backend, on the server): --attention-backend TRITON_ATTN" in shown
        assert screen.current is not None and "--attention-backend" in screen.current.servers[0].argv
        # stepping back to vLLM's default takes the knob out of the request, and forward again
        await pilot.press("left", "left")
        assert screen.query_one("#knob", Input).value == ""
        await pilot.press("right", "right")
        await wait_for(pilot, lambda: screen.request is not None and screen.request.knobs == (("attn", "triton"),),
                       20, "the request with the knob again")
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: started, 10, "the up command line")
    (argv,) = started
    assert "--knob=attn=triton" in argv
    assert LaunchRequest.from_argv(argv[1:argv.index("--sim")]).knobs == (("attn", "triton"),)


async def test_launch_knob_text_is_read_by_the_catalogue_and_a_p_d_topology_has_role_rows() -> None:
    app, _ = _console()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _launch(pilot, app, DENSE, "1p1d")
        lst = screen.query_one("#serve-knobs", KnobList)
        assert {"prefill.mnbt", "decode.mnbt"} <= {r.key for r in lst.rows}
        box = screen.query_one("#knob", Input)
        box.value = "attn=warp"
        await wait_for(pilot, lambda: _text(screen.query_one("#knob-error", Static)), 10, "the field's error")
        assert "unknown value 'warp'" in _text(screen.query_one("#knob-error", Static))
        assert screen.request is None and box.has_class("-invalid")
        box.value = "decode.mnbt=3072 spec=mtp:2"  # a number and a role typed: rows show them as chosen
        await wait_for(pilot, lambda: screen.request is not None and len(screen.request.knobs) == 2, 20, "planned")
        rows = {r.key: r for r in lst.rows}
        assert lst.value_of(rows["decode.mnbt"]) == "3072" and lst.value_of(rows["spec"]) == "mtp:2"
        assert screen.current is not None
        decode = next(s for s in screen.current.servers if s.role == "decode")
        prefill = next(s for s in screen.current.servers if s.role == "prefill")
        assert "3072" in decode.argv and "--max-num-batched-tokens" not in prefill.argv
        assert "--speculative-config" in decode.argv and "--speculative-config" not in prefill.argv


def test_the_forms_text_keeps_what_the_lists_do_not_touch() -> None:
    assert set_pair("attn=triton decode.mnbt=2048", "attn", "auto", "auto") == "decode.mnbt=2048"
    assert set_pair("bad word", "spec", "ngram:4", "off") == "bad word spec=ngram:4"
    text = set_axis_value("attn=auto mnbt=4096", "attn", "triton", True)
    assert text == "attn=auto,triton mnbt=4096"
    assert set_axis_value(text, "mnbt", "4096", False) == "attn=auto,triton"


async def _campaign(pilot: Any, app: ConsoleApp, model: str) -> CampaignScreen:
    await pilot.press("c")
    screen = app.screen
    assert isinstance(screen, CampaignScreen)
    models = screen.query_one("#c-model", OptionList)
    models.highlighted = next(i for i in range(models.option_count) if models.get_option_at_index(i).id == model)
    topos = screen.query_one("#c-topologies", SelectionList)
    topos.deselect_all()
    topos.select("tp1")
    screen.query_one("#c-workloads", SelectionList).deselect_all()
    screen.query_one("#c-workloads", SelectionList).select("decode-heavy")
    await wait_for(pilot, lambda: screen.judged.topologies == ("tp1",) and screen.judged.values, 30, "judged")
    return screen


async def test_campaign_knob_axes_count_the_layouts_refuse_in_one_line_and_start_run_with_knob() -> None:
    app, started = _console()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _campaign(pilot, app, DENSE)
        lst = screen.query_one("#c-knobs", SelectionList)
        ids = [lst.get_option_at_index(i).value for i in range(lst.option_count)]
        # EP on a dense model fits no topology: greyed (not tickable); MTP fits (the checkpoint has the layers)
        assert lst.get_option_at_index(ids.index("ep=on")).disabled
        assert not lst.get_option_at_index(ids.index("spec=mtp:1")).disabled
        for value in ("attn=auto", "attn=triton", "mnbt=auto", "mnbt=2048"):
            lst.select(value)
        box = screen.query_one("#c-knob-text", Input)
        await wait_for(pilot, lambda: box.value == "attn=auto,triton mnbt=auto,2048", 10, "the axes text")
        await wait_for(pilot, lambda: screen.judged.shape.total == 4, 20, "the layouts")
        shape = _text(screen.query_one("#c-shape", Static))
        assert "1 topology × 4 configurations = 4 layouts · 4 cells" in shape
        box.value = "attn=auto,triton ep=off,on"  # typed: what the list would not tick
        await wait_for(pilot, lambda: len(screen.judged.shape.refused) == 2, 20, "the refused layouts")
        shape = _text(screen.query_one("#c-shape", Static))
        assert "✖ 2 of 4 refused here" in shape
        assert "ep=on: expert parallel needs a mixture-of-experts model; qwen3.6-27b-nvfp4 is dense (tp1 ×2)" \
            in shape
        box.value = "attn=auto,triton mnbt=auto,2048"
        await wait_for(pilot, lambda: not screen.judged.shape.refused and screen.judged.shape.total == 4, 20, "ok")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: started, 10, "the run command line")
    (argv,) = started
    assert argv[:3] == ["run", "--model", DENSE]
    assert argv[argv.index("--knob"):][:4] == ["--knob", "attn=auto,triton", "--knob", "mnbt=auto,2048"]


def write_knob_runs(root: Path) -> None:
    """A finished simulated knob sweep on disk: tp1 × decode-heavy × attn {auto, triton} × mnbt {auto, 2048}."""
    figures = {("auto", "auto"): (13391, 1.21, 51), ("auto", "2048"): (12443, 1.25, 65),
               ("triton", "auto"): (10003, 1.62, 41), ("triton", "2048"): (10016, 1.61, 25)}
    write_campaign(root, "knob-sweep", DENSE, ["attn=auto,triton", "mnbt=auto,2048"],
                   {("tp1", (("attn", a), ("mnbt", m))): f for (a, m), f in figures.items()}, t0=scripted.T0)


def test_the_campaign_grid_has_a_row_per_layout_with_its_knobs() -> None:
    write_knob_runs(paths.runs_dir())
    (state,) = campaigns(gpus=2)
    assert state.total == 4 and state.done == 4
    assert state.layouts() == [("tp1", "attn=auto mnbt=auto"), ("tp1", "attn=auto mnbt=2048"),
                               ("tp1", "attn=triton mnbt=auto"), ("tp1", "attn=triton mnbt=2048")]
    from rich.console import Console

    out = Console(width=100, record=True, color_system=None)
    out.print(grid(state))
    text = out.export_text()
    assert "layout" in text and text.count("tp1") == 4 and "attn=triton mnbt=2048" in text
    assert "13,391 tok/s ★" in text  # the best of the column, among the layouts


async def test_results_show_the_knob_columns_the_knob_effects_and_a_chart_of_one_knob() -> None:
    write_knob_runs(paths.runs_dir())
    app, _ = _console()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("r")
        screen = app.screen
        assert isinstance(screen, ResultsScreen)
        await wait_for(pilot, lambda: screen.data.cells, 30, "the runs")
        t = screen.query_one("#results-table", DataTable)
        headers = [str(c.label) for c in t.columns.values()]
        assert headers[:5] == ["topology", "attn", "mnbt", "workload", "rate"]
        rec = str(screen.query_one("#rec-text", Static).render())
        assert "knobs of the winner: attn=auto: +33.9% output tok/s vs attn=triton" in rec
        chart = screen.query_one("#knob-chart", BarChart)
        assert chart.display and screen.chart_knob == "attn"
        lines = chart.lines(80).plain.split("\n")
        assert lines[0] == "tp1 · decode-heavy · mnbt=auto" and lines[1].lstrip().startswith("auto")
        assert "13,391 ★" in lines[1] and "10,003" in lines[2] and "★" not in lines[2]
        await pilot.press("k")  # the next knob: mnbt's values side by side, per attn
        assert screen.chart_knob == "mnbt"
        assert chart.lines(80).plain.split("\n")[0] == "tp1 · decode-heavy · attn=auto"
        await pilot.press("f", "f")  # mean TTFT: lower is better
        assert "TTFT" in chart._head.plain and "25.0 ★" in chart.lines(80).plain
        assert not screen.query_one("#sweep").display  # no rate sweep: the knob chart has the room


def test_knob_groups_put_the_default_first_and_leave_a_lone_value_out() -> None:
    from tui.core.bench import table
    from tui.core.bench.store import find_runs, load_run

    write_knob_runs(paths.runs_dir())
    runs = [load_run(p) for p in find_runs([])]
    cells = table.build_cells(runs)
    groups = knob_groups(cells, "attn", "output_throughput", True)
    assert sorted(g.label for g in groups) == ["tp1 · decode-heavy · mnbt=2048", "tp1 · decode-heavy · mnbt=auto"]
    assert all([b.value for b in g.bars] == ["auto", "triton"] for g in groups)  # vLLM's default first
    assert [[b.best for b in g.bars] for g in groups] == [[True, False], [True, False]]
    assert knob_groups(cells[:1], "attn", "output_throughput", True) == []


@pytest.mark.parametrize(("value", "top", "width", "bar"), [(50, 100, 10, "█████"), (0, 100, 10, ""),
                                                            (1, 100, 10, "▏"), (100, 100, 4, "████"),
                                                            (13, 100, 10, "█▎")])
def test_bar_text(value: float, top: float, width: int, bar: str) -> None:
    assert bar_text(value, top, width) == bar


def _results_loaded(app: ConsoleApp) -> bool:
    data = getattr(app.screen, "data", None)
    return bool(data and data.cells and data.gpus == (len(app.state.gpus) or None))


@pytest.fixture
def in_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The header's clock in UTC (the reference was drawn so)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_results_with_knobs_at_80x24(snap_compare, in_utc) -> None:  # type: ignore[no-untyped-def]
    """The knob columns, the knob effects under the recommendation and the chart of attn's effect, at 80×24."""
    write_knob_runs(paths.runs_dir())
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock,
                       events=scripted.history((0.0, 0.0), n=4, loaded=False))
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle("r", until=_results_loaded))
