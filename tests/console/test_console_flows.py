"""The console driven as an operator drives it, on the simulated host (live: real servers over loopback).

The README's walkthrough is typed key by key as written in tests/console/test_readme_walkthrough.py. Here: a failed
start shown right (the diagnosis banner names it, one key applies the fix, the relaunch becomes ready), a campaign
and a benchmark that outlive the console and are found by the next one.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from textual.widgets import Input, OptionList

from tests.console.conftest import console_ports, wait_for
from tui.console.app import make_console
from tui.console.screens.bench import BenchScreen
from tui.console.screens.launch import LaunchScreen
from tui.core.bench.events import BenchDone
from tui.core.events import Event
from tui.core.host.base import HostOptions

pytestmark = pytest.mark.usefixtures("clean_layouts")
MODEL = "qwen3.6-27b-nvfp4"


async def _start_bench(pilot, app, workload: str, prompts: int, output_len: int) -> None:  # type: ignore[no-untyped-def]
    """On the bench screen: pick ``workload``, set its prompts and output length, ctrl+s."""
    await pilot.press("b")
    screen = app.screen
    assert isinstance(screen, BenchScreen)
    wl = screen.query_one("#workloads", OptionList)
    await wait_for(pilot, lambda: wl.option_count > 0, 10, "workloads")
    wl.highlighted = next(i for i in range(wl.option_count) if wl.get_option_at_index(i).id == workload)
    screen.query_one("#f-num_prompts", Input).value = str(prompts)
    screen.query_one("#f-output_len", Input).value = str(output_len)
    await pilot.pause(0.1)
    await pilot.press("ctrl+s")


async def test_a_failed_start_is_diagnosed_and_fixed_with_one_key() -> None:
    app = make_console(HostOptions(sim=True, sim_startup_s=1.0, sim_faults=("flashinfer-no-nvcc",)),
                       ports=console_ports())
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: len(app.state.gpus) == 2, 20, "two GPUs")
        await pilot.press("l")
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        models = screen.query_one("#models", OptionList)
        await wait_for(pilot, lambda: models.option_count > 0, 20, "the model list")
        models.highlighted = next(i for i in range(models.option_count) if models.get_option_at_index(i).id == MODEL)
        await wait_for(pilot, lambda: screen.current is not None and screen.model_id == MODEL, 30, "the plan")
        # the simulated host has no nvcc, so the plan turns FlashInfer's JIT off; the operator's own setting turns
        # its sampler back on, and the start fails as vLLM does
        screen.query_one("#env", Input).value = "VLLM_USE_FLASHINFER_SAMPLER=1"
        await wait_for(pilot, lambda: screen.request is not None
                       and ("VLLM_USE_FLASHINFER_SAMPLER", "1") in screen.request.extra_env, 30, "the plan with it")
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: app.state.active_diagnosis() is not None
                       and app.state.layout is not None and app.state.layout.status == "failed", 90, "the failure")
        d = app.state.active_diagnosis()
        assert d is not None and d.entry_id == "flashinfer-no-nvcc" and d.fixable
        band = app.screen.query_one("#band")
        assert "flashinfer-no-nvcc" in str(band.render()) and band.has_class("-diagnosis")
        await pilot.press("a")
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.layout.status == "ready", 90,
                       "the relaunch")
        assert app.state.active_diagnosis() is None


async def test_a_campaign_outlives_the_console_and_a_new_console_finds_it() -> None:
    from textual.widgets import SelectionList

    from tui.console.screens.campaign import CampaignScreen, grid

    ports = console_ports()
    app = make_console(HostOptions(sim=True, sim_startup_s=0.5), ports=ports)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: len(app.state.gpus) == 2, 20, "two GPUs")
        await pilot.press("c")
        screen = app.screen
        assert isinstance(screen, CampaignScreen)
        topos = screen.query_one("#c-topologies", SelectionList)
        topos.deselect_all()
        topos.select("dp2")
        topos.select("1p1d")
        wls = screen.query_one("#c-workloads", SelectionList)
        wls.deselect_all()
        wls.select("prefill-heavy")
        screen.query_one("#c-prompts", Input).value = "4"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: any(s.running for s in screen.states), 90, "the campaign's first cell")
        name = next(s.name for s in screen.states if s.running)
    # the console is gone; the campaign is not
    app2 = make_console(HostOptions(sim=True, sim_startup_s=0.5), ports=ports)
    async with app2.run_test(size=(160, 48)) as pilot:
        await pilot.press("c")
        screen2 = app2.screen
        assert isinstance(screen2, CampaignScreen)
        await wait_for(pilot, lambda: any(s.name == name for s in screen2.states), 20, "the campaign listed")
        await wait_for(pilot, lambda: next(s for s in screen2.states if s.name == name).done == 2, 180,
                       "both cells done")
        state = next(s for s in screen2.states if s.name == name)
        assert {c.topology for c in state.cells} == {"dp2", "1p1d"}
        assert all(c.status == "complete" for c in state.cells), state.cells
        out = Console(width=160, record=True, file=io.StringIO())
        out.print(grid(state))
        assert out.export_text().count("tok/s") == 2  # the grid: both cells with their output throughput


async def test_a_benchmark_outlives_the_console_and_a_new_console_follows_and_stops_it() -> None:
    import asyncio
    import subprocess
    import sys

    from tests.console.conftest import ROOT
    from tui.console.benchjob import running_benches
    from tui.core.bench.store import load_run

    ports = console_ports()
    argv = [sys.executable, "-m", "tui", "up", "--sim", "--sim-startup", "0.5", "--model", "dummy-qwen3-8b",
            "--topology", "tp1", "--port", str(ports[0]), "--server-port", str(ports[1]), "--side-channel-port",
            str(ports[2])]
    up = await asyncio.to_thread(subprocess.run, argv, cwd=ROOT, capture_output=True, text=True, timeout=120,
                                 check=False)
    assert up.returncode == 0, up.stderr[-2000:]
    app = make_console(HostOptions(sim=True), ports=ports, record=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.layout.status == "ready", 30,
                       "the layout")
        await _start_bench(pilot, app, "decode-heavy", 64, 12000)  # minutes of decoding: it is stopped first
        await wait_for(pilot, lambda: app.state.bench.tick is not None and app.state.bench.tick.phase == "run"
                       and app.state.bench.tick.done == 0 and app.state.bench.tick.sent > 0, 60, "the run going")
        bench = app.bench_job
        assert bench is not None and bench.job is not None
        pid = bench.job.pid
        assert pid != __import__("os").getpid()  # the run is a process of its own
    # the console is gone; the run is not
    assert bench.job.poll() is None
    (events,) = running_benches()
    assert events == bench.events
    app2 = make_console(HostOptions(sim=True), ports=ports, record=False)
    seen: list[Event] = []
    app2.ctx.bus.subscribe(seen.append)
    async with app2.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app2.bench_job is not None and app2.state.bench.running, 20, "reattached")
        ticks = len(app2.state.bench.series.get("output_tps", ()))
        await wait_for(pilot, lambda: len(app2.state.bench.series.get("output_tps", ())) > ticks + 2, 20,
                       "live ticks from the run the first console started")
        await pilot.press("b")
        await pilot.press("ctrl+x")
        # the run's end is published before the follower's thread lets go of it: both are waited for
        await wait_for(pilot, lambda: any(isinstance(e, BenchDone) for e in seen) and app2.bench_job is None, 40,
                       "the stop")
        done = next(e for e in seen if isinstance(e, BenchDone))
        assert done.status == "incomplete"
    assert bench.job.popen is not None and bench.job.popen.wait(30) == 130
    run = load_run(__import__("pathlib").Path(done.run_dir))
    assert run.meta.status == "incomplete" and run.meta.campaign == "console"
