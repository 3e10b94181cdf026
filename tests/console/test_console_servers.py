"""The servers table and the startup band in the operator's words (issue 22, findings 3, 16 and 23): a failing or
stale ``/metrics`` scrape shown with its reason and age, how a server ended without internal phase names or a
"?" for an exit status nobody knows, no figures for a server that has ended, a decode server's prompt tokens split
into those it computed and those that arrived by KV transfer, and a phase label cut at a word."""

from __future__ import annotations

import dataclasses

from tests.console import scripted
from tui.console import fmt
from tui.console.app import make_console
from tui.console.widgets.band import Band
from tui.console.widgets.servers import ServerTable
from tui.core.events import Event
from tui.core.host.base import HostOptions
from tui.core.launch.events import ServerExited, ServerPhase
from tui.core.telemetry.events import ServerHealth, ServerMetrics


class Clock:
    def __init__(self) -> None:
        self.now = scripted.T0

    def __call__(self) -> float:
        return self.now


def _health_now(app, now: float) -> None:  # type: ignore[no-untyped-def]
    """Every server answers /health at ``now`` (its health is not old)."""
    for e in scripted.ready_under_load():
        if isinstance(e, ServerHealth):
            app.ctx.bus.publish(dataclasses.replace(e, ts=now))


def _rows(app) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    table = app.screen.query_one(ServerTable)
    return {table.get_row_at(i)[0].plain: [str(c) for c in table.get_row_at(i)] for i in range(table.row_count)}


async def _drawn(app, pilot) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    app.flush()
    await pilot.pause(0.1)
    return _rows(app)


async def test_a_failing_scrape_shows_its_reason_and_age_and_its_figures_as_old() -> None:
    clock = Clock()
    app = make_console(HostOptions(sim=True), live=False, clock=clock, events=scripted.ready_under_load())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        assert (await _drawn(app, pilot))["decode-0"][4] == "up"
        clock.now += 12
        _health_now(app, clock.now)
        app.ctx.bus.publish(ServerMetrics(ts=clock.now, server="decode-0", endpoint="http://127.0.0.1:8200",
                                          role="decode", figures=None, error="/metrics answered HTTP 500"))
        await pilot.pause(0.1)
        row = (await _drawn(app, pilot))["decode-0"]
        assert row[4] == "up · /metrics HTTP 500 · 12 s"  # the figures shown are 12 s old
        assert row[8] == "11,870"  # the last figures, drawn dim
        table = app.screen.query_one(ServerTable)
        assert str(table.get_row_at(1)[8].style) == "dim"  # type: ignore[attr-defined]
        # a scrape that works again clears it
        good = next(e for e in scripted.ready_under_load() if isinstance(e, ServerMetrics) and e.server == "decode-0")
        assert good.figures is not None
        app.ctx.bus.publish(dataclasses.replace(good, ts=clock.now,
                                                figures=dataclasses.replace(good.figures, ts=clock.now)))
        await pilot.pause(0.1)
        assert (await _drawn(app, pilot))["decode-0"][4] == "up"
    async with make_console(HostOptions(sim=True), live=False, clock=clock,
                            events=scripted.ready_under_load()).run_test(size=(80, 24)) as pilot:
        app2 = pilot.app
        await pilot.pause(0.3)
        _health_now(app2, clock.now)
        app2.ctx.bus.publish(ServerMetrics(ts=clock.now, server="decode-0", endpoint="http://127.0.0.1:8200",  # type: ignore[attr-defined]
                                           role="decode", figures=None, error="/metrics: no answer within 800 ms"))
        await pilot.pause(0.1)
        assert (await _drawn(app2, pilot))["decode-0"][2] == "up · no metrics 12 s"  # 80 columns: the short form


async def test_figures_that_stop_coming_are_shown_old() -> None:
    clock = Clock()
    app = make_console(HostOptions(sim=True), live=False, clock=clock, events=scripted.ready_under_load())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        clock.now += 9  # /health keeps answering, /metrics has said nothing for 9 s
        _health_now(app, clock.now)
        await pilot.pause(0.1)
        assert (await _drawn(app, pilot))["prefill-0"][4] == "up · figures 9 s old"


def test_how_a_server_ended_in_words() -> None:
    assert fmt.exit_words(1, "warmup") == "exited 1 during kernel warm-up"
    assert fmt.exit_words(None, "compiled") == "exited during memory profiling"  # no "?"
    assert fmt.exit_words(None, "api_up") == "exited during HTTP server start"
    assert fmt.exit_words(-9, "serving") == "killed (SIGKILL) while serving"
    assert fmt.exit_words(3, "engine_init") == "exited 3 during engine start"
    assert fmt.exit_words(1, "warmup", short=True) == "exited 1 · warm-up"  # 80 columns
    assert fmt.exit_words(-9, "serving", short=True) == "killed SIGKILL · serving"
    assert fmt.cut_words("CUDA graphs captured; warming up", 28) == "CUDA graphs captured…"
    assert fmt.cut_words("torch.compile", 28) == "torch.compile"


async def test_an_ended_server_shows_how_in_words_and_no_figures() -> None:
    ev: list[Event] = [*scripted.ready_under_load(),
                       ServerExited(ts=scripted.T0, server="decode-0", returncode=None, during="serving"),
                       ServerExited(ts=scripted.T0, server="prefill-0", returncode=None, during="api_up")]
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=ev)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        rows = await _drawn(app, pilot)
        assert rows["decode-0"][4] == "exited while serving"
        assert rows["prefill-0"][4] == "exited during HTTP server start"
        for name in ("decode-0", "prefill-0"):
            assert rows[name][5:9] == ["—", "—", "—", "—"] and rows[name][9] == "", rows[name]
        assert not any("?" in c or "(api_up)" in c or "engine_init" in c for r in rows.values() for c in r)


async def test_a_decode_server_shows_the_prompt_tokens_it_computed_and_those_it_received() -> None:
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=scripted.ready_under_load())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        rows = await _drawn(app, pilot)
        # 121 prompt tok/s of which 32 of 239,968 tokens were computed here (the window's counts by source, as an
        # older recording has them): the rest arrived by transfer
        assert rows["decode-0"][7] == "0 computed" and rows["decode-0"][9].startswith("121 tok/s · ")
        assert rows["prefill-0"][7] == "38,210"
        # the core's figures by source, and its KV rate: both figures labelled where there is room
        ev = next(e for e in scripted.ready_under_load() if isinstance(e, ServerMetrics) and e.server == "decode-0")
        assert ev.figures is not None and ev.figures.kv_transfer is not None
        kv = dataclasses.replace(ev.figures.kv_transfer, bytes=4.7e9, xfer_time_s=200.0, window_s=10.0)
        figures = dataclasses.replace(ev.figures, prompt_tps=3273.0, prompt_computed_tps=0.0,
                                      prompt_transferred_tps=3273.0, kv_transfer=kv)
        app.ctx.bus.publish(dataclasses.replace(ev, figures=figures))
        await pilot.pause(0.1)
        row = (await _drawn(app, pilot))["decode-0"]
        assert row[7] == "0 computed"  # not "3,273" as if it had computed them
        assert row[9] == "3,273 tok/s · 448 MiB/s moved · 22/xfer", row[9]
        table = app.screen.query_one(ServerTable)
        assert "KV in" in "".join(seg.text for seg in table.render_line(0))
    async with make_console(HostOptions(sim=True), live=False, clock=scripted.clock,
                            events=scripted.ready_under_load()).run_test(size=(120, 36)) as pilot:
        await pilot.pause(0.3)
        table = pilot.app.screen.query_one(ServerTable)
        assert "KV in (moved)" in "".join(seg.text for seg in table.render_line(0))  # one figure: labelled
        assert (await _drawn(pilot.app, pilot))["decode-0"][9] == "448 MiB/s"  # the room of 120 columns


async def test_a_long_phase_label_is_cut_at_a_word() -> None:
    ev = [*scripted.starting(), ServerPhase(ts=scripted.T0, server="decode-0", phase="graphs_done",
                                            label="CUDA graphs captured; warming up", progress=0.85)]
    for size, want in (((160, 48), "CUDA graphs captured; warming up"), ((120, 36), "CUDA graphs captured… "),
                       ((80, 24), "CUDA graphs…")):
        app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=ev)
        async with app.run_test(size=size) as pilot:
            await pilot.pause(0.3)
            band = app.screen.query_one(Band).text.plain
            line = next(ln for ln in band.splitlines() if ln.startswith("decode-0"))
            assert want in line and "warmin " not in line and "warmi…" not in line, (size, line)


async def test_ready_since_is_when_the_layout_became_ready_not_when_the_console_opened() -> None:
    """A console opened later (the follower's order: the layout, its servers' launches with their real start, then
    ready with the startup time the state file holds, every event stamped with the time the console read it)."""
    from tui.console.widgets.header import HeaderBar
    from tui.core.launch.events import LayoutChanged, ServerReady

    opened = scripted.T0  # 12:00:00: the console opens; the servers started at 11:59:20, ready 31 s later
    ev: list[Event] = [*scripted.history((0.0, 0.0)),
                       LayoutChanged(ts=opened, layout_id=scripted.LAYOUT, status="ready", topology="1p1d",
                                     profile_id="qwen3.6-27b-nvfp4", endpoint="http://127.0.0.1:8000",
                                     simulated=True)]
    ev += [dataclasses.replace(e, ts=opened) for e in scripted.launched("ready")[1:]]
    for name, startup in (("prefill-0", 29.0), ("decode-0", 31.0), ("proxy", 32.0)):
        ev.append(ServerReady(ts=opened, server=name, url="", startup_s=startup))
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=ev)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        header = app.screen.query_one(HeaderBar).text.plain
        assert "ready since 11:59:52" in header, header  # 11:59:20 + 32 s: the last of them (the proxy)
