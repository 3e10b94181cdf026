"""Owners, restarts and failures in the console, live on the simulated host (issue 23): the exact sequence of its
finding 1 (a campaign benchmarks dp2, a second console's bench screen offers a second load) ends in a question,
not a second load; ``R`` after a fix and from a reopened console relaunches exactly the stored request (the argv
compared) and never without a confirmation; ``x`` dismisses a failed layout once, and ``status`` agrees; a stopped
layout never gives the dashboard back to an older failure."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, OptionList, SelectionList

from tests.console.conftest import console_ports, wait_for
from tests.helpers import cli
from tui.console.app import ConsoleApp, make_console
from tui.console.screens.bench import BenchScreen
from tui.console.screens.launch import LaunchScreen
from tui.console.screens.modals import ConfirmModal
from tui.console.widgets.band import Band
from tui.core import paths
from tui.core.bench.store import load_run
from tui.core.host.base import HostOptions
from tui.core.launch import failures
from tui.core.launch.state import LayoutRecord, StateStore
from tui.core.plan.request import LaunchRequest

pytestmark = pytest.mark.usefixtures("clean_layouts")
MODEL = "qwen3.6-27b-nvfp4"


def _band(app: ConsoleApp) -> str:
    """The band's text, its lines joined (the band wraps a long line to its width)."""
    return " ".join(app.screen.query_one(Band).text.plain.split())


def _record() -> LayoutRecord | None:
    return StateStore().active()


def _spy(app: ConsoleApp) -> ConsoleApp:
    """The app, its detached commands' argv kept as they start (``app.started``; the jobs list forgets the ended
    ones)."""
    run_job = app.run_job
    app.started = []  # type: ignore[attr-defined]

    def spy(name: str, argv: list[str], done_message: str = "") -> Any:
        app.started.append((name, list(argv)))  # type: ignore[attr-defined]
        return run_job(name, argv, done_message)

    app.run_job = spy  # type: ignore[method-assign]
    return app


def _ups(app: ConsoleApp) -> list[list[str]]:
    return [argv for name, argv in app.started if name == "up"]  # type: ignore[attr-defined]


def _port_flags(ports: tuple[int, int, int]) -> list[str]:
    return ["--port", str(ports[0]), "--server-port", str(ports[1]), "--side-channel-port", str(ports[2])]


async def test_a_second_consoles_benchmark_of_a_campaigns_layout_asks_first_and_is_kept_apart() -> None:
    """Finding 1's sequence: console 1 starts a campaign on dp2; while it benchmarks dp2, console 2's bench screen
    does not say "Ready to benchmark", and ctrl+s asks (naming the campaign) instead of starting a second load;
    n leaves the campaign alone (its cell completes as it measured it); y runs it apart, under runs/console/."""
    ports = console_ports()
    app = make_console(HostOptions(sim=True, sim_startup_s=0.5), ports=ports, record=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: len(app.state.gpus) == 2, 20, "two GPUs")
        await pilot.press("c")
        screen = app.screen
        topos = screen.query_one("#c-topologies", SelectionList)
        topos.deselect_all()
        topos.select("dp2")
        wls = screen.query_one("#c-workloads", SelectionList)
        wls.deselect_all()
        wls.select("decode-heavy")
        screen.query_one("#c-prompts", Input).value = "160"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.layout.status == "ready"
                       and "campaign" in app.state.layout.held_by, 90, "the campaign's dp2 up and held")
        assert app.state.layout is not None and app.state.layout.started_by.startswith("started by campaign ")
    app2 = make_console(HostOptions(sim=True, sim_startup_s=0.5), ports=ports, record=False)
    async with app2.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app2.state.layout is not None and "campaign" in app2.state.layout.held_by,
                       30, "the second console sees who holds dp2")
        lay = app2.state.layout
        assert lay is not None and lay.topology == "dp2"
        campaign = lay.started_by.split()[3]  # "started by campaign NAME (pid N) at HH:MM"
        await wait_for(pilot, lambda: "In use by campaign" in _band(app2) and "b, s and R ask first" in _band(app2), 30,
                       "the band naming the campaign")
        await pilot.press("b")
        bench = app2.screen
        assert isinstance(bench, BenchScreen)
        await pilot.pause(0.3)
        status = str(bench.query_one("#bench-status").render())
        assert "Ready to benchmark" not in status and f"in use by campaign {campaign}" in status
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app2.screen, ConfirmModal), 20, "the question")
        body = str(app2.screen.query_one("#confirm-body").render())
        assert f"campaign {campaign}" in body and "skews both runs" in body
        await pilot.press("n")
        await pilot.pause(0.5)
        assert app2.bench_job is None and not [j for j in app2.jobs if j.name == "bench"]
        # the operator says so: the run goes, with --force, under runs/console/, apart from the campaign's cells
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app2.screen, ConfirmModal), 20, "the question again")
        await pilot.press("y")
        await wait_for(pilot, lambda: app2.bench_job is not None, 20, "the forced benchmark")
        job = app2.bench_job.job  # type: ignore[union-attr]
        assert job is not None
        assert "--force" in job.argv and job.argv[job.argv.index("--campaign") + 1] == "console"
        await wait_for(pilot, lambda: app2.state.bench.started is not None, 30, "its start")
        assert app2.state.bench.started is not None
        forced_dir = Path(app2.state.bench.started.run_dir)
        assert forced_dir.parent.name == "console"
        app2.stop_bench()
        await wait_for(pilot, lambda: app2.bench_job is None, 40, "it stopped")
    assert load_run(forced_dir).meta.campaign == "console"  # stored, and labelled, apart from the campaign
    # the campaign's own cell: in its own folder, complete, none of the console's run in it
    folder = paths.runs_dir() / campaign

    def campaign_done() -> bool:
        runs = list(folder.glob("*/run.json"))
        return bool(runs) and json.loads(runs[0].read_text())["status"] not in ("running",)

    await wait_for_thread(campaign_done, 240, "the campaign's cell")
    (run_file,) = folder.glob("*/run.json")
    run = load_run(run_file.parent)
    assert run.meta.campaign == campaign and run.meta.topology == "dp2"
    assert run.meta.status == "complete", run.meta.message  # nobody stopped dp2 under it


async def wait_for_thread(predicate: Any, timeout: float, what: str) -> None:  # noqa: ASYNC109
    end = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(predicate):
        if asyncio.get_running_loop().time() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.5)


async def _launch_failing(pilot: Any, app: ConsoleApp) -> None:
    """The launch screen, MODEL's 1p1d with the operator's VLLM_USE_FLASHINFER_SAMPLER=1 on a host without nvcc:
    the start fails as vLLM's does (flashinfer-no-nvcc)."""
    await pilot.press("l")
    screen = app.screen
    assert isinstance(screen, LaunchScreen)
    models = screen.query_one("#models", OptionList)
    await wait_for(pilot, lambda: models.option_count > 0, 20, "the model list")
    models.highlighted = next(i for i in range(models.option_count) if models.get_option_at_index(i).id == MODEL)
    await wait_for(pilot, lambda: screen.current is not None and screen.model_id == MODEL, 30, "the plan")
    screen.query_one("#env", Input).value = "VLLM_USE_FLASHINFER_SAMPLER=1"
    await wait_for(pilot, lambda: screen.request is not None
                   and ("VLLM_USE_FLASHINFER_SAMPLER", "1") in screen.request.extra_env, 30, "the plan with it")
    await pilot.press("ctrl+l")
    await wait_for(pilot, lambda: app.state.active_diagnosis() is not None and app.state.layout is not None
                   and app.state.layout.status == "failed", 90, "the failure")


async def test_restart_after_a_fix_relaunches_exactly_the_stored_request_and_only_when_confirmed() -> None:
    app = _spy(make_console(HostOptions(sim=True, sim_startup_s=0.5, sim_faults=("flashinfer-no-nvcc",)),
                            ports=console_ports(), record=False))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: len(app.state.gpus) == 2, 20, "two GPUs")
        await _launch_failing(pilot, app)
        await pilot.press("a")  # on a failed layout: at once, building on its stored request
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.layout.status == "ready"
                       and app.state.layout.fixes != (), 90, "the fixed relaunch")
        fixed = await asyncio.to_thread(_record)
        assert fixed is not None and fixed.plan["fixes_applied"] == ["flashinfer-no-nvcc"]
        stored = fixed.launch_request()
        assert stored is not None and stored.apply_fix == "flashinfer-no-nvcc"
        assert ("VLLM_USE_FLASHINFER_SAMPLER", "1") in stored.extra_env
        assert fixed.started_by is not None and fixed.started_by.kind == "console"
        ups = len(_ups(app))
        await pilot.press("R")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), 20, "the restart's question")
        body = str(app.screen.query_one("#confirm-body").render())
        assert "--apply-fix flashinfer-no-nvcc" in body and "Fix it carries: flashinfer-no-nvcc" in body
        assert "VLLM_USE_FLASHINFER_SAMPLER=0" in body  # what the fix changes
        await pilot.press("R")  # a second R, or Enter on the focused Cancel, never answers it
        await pilot.press("enter")
        await pilot.pause(0.5)
        assert len(_ups(app)) == ups and not isinstance(app.screen, ConfirmModal)
        await pilot.press("R")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), 20, "the question again")
        await pilot.press("y")
        await wait_for(pilot, lambda: len(_ups(app)) == ups + 1, 20, "the restart's up")
        argv = _ups(app)[-1]
        expected = ["up", *dataclasses.replace(stored, replace=True).to_argv()]
        assert argv[:len(expected)] == expected, argv
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.layout.id != fixed.id
                       and app.state.layout.status == "ready", 90, "the restarted layout")
        again = await asyncio.to_thread(_record)
        assert again is not None and again.request == fixed.request
        assert again.plan["fixes_applied"] == ["flashinfer-no-nvcc"]
        assert [s["env"] for s in again.plan["servers"]] == [s["env"] for s in fixed.plan["servers"]]


async def test_a_reopened_console_restarts_a_cli_layout_with_the_clis_request() -> None:
    ports = console_ports()
    knobs = ["--gpu-memory-utilization", "0.95", "--max-model-len", "65536", "--arg", '--served-model-name "my model"',
             "--env", "MY_VAR=hello world"]
    up = await asyncio.to_thread(cli, "up", "--sim", "--sim-startup", "0.5", "--model", "dummy-qwen3-8b",
                                 "--topology", "tp1", *_port_flags(ports), *knobs, timeout=120)
    assert up.returncode == 0, up.stderr[-2000:]
    first = await asyncio.to_thread(_record)
    assert first is not None and first.request is not None
    app = _spy(make_console(HostOptions(sim=True, sim_startup_s=0.5), ports=console_ports(), record=False))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.layout.status == "ready", 30,
                       "the CLI's layout")
        await wait_for(pilot, lambda: "tarted by `disagg-tui up` from the CLI (pid " in _band(app), 30,
                       "who started it")
        await pilot.press("R")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), 20, "the restart's question")
        body = str(app.screen.query_one("#confirm-body").render())
        assert "--gpu-memory-utilization 0.95" in body and "--max-model-len 65536" in body
        assert "It carries no playbook fix." in body
        await pilot.press("y")
        await wait_for(pilot, lambda: _ups(app), 20, "the restart's up")
        stored = LaunchRequest.from_argv(first.request)
        expected = ["up", *dataclasses.replace(stored, replace=True).to_argv()]
        assert _ups(app)[0][:len(expected)] == expected  # the CLI's ports, not this console's
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.layout.id != first.id
                       and app.state.layout.status == "ready", 90, "the restarted layout")
    again = await asyncio.to_thread(_record)
    assert again is not None and again.request == first.request
    assert again.started_by is not None and again.started_by.kind == "console"
    (server,) = again.plan["servers"]
    argv = server["argv"]
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.95"
    assert argv[argv.index("--max-model-len") + 1] == "65536"
    assert argv[len(argv) - argv[::-1].index("--served-model-name")] == "my model"
    assert server["env"]["MY_VAR"] == "hello world"


async def test_one_x_dismisses_a_failed_layout_and_a_stop_never_brings_an_old_failure_back() -> None:
    ports = console_ports()
    fail = await asyncio.to_thread(cli, "up", "--sim", "--sim-startup", "0.3", "--sim-fault", "flashinfer-no-nvcc",
                                   "--model", "dummy-qwen3-8b", "--topology", "tp1", *_port_flags(ports),
                                   "--env", "VLLM_USE_FLASHINFER_SAMPLER=1", timeout=120)
    assert fail.returncode == 1
    app = make_console(HostOptions(sim=True, sim_startup_s=0.3), ports=ports, record=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.layout.status == "failed"
                       and app.state.active_diagnosis() is not None, 30, "the failed layout and its banner")
        failed_id = app.state.layout.id  # type: ignore[union-attr]
        await pilot.press("x")
        await wait_for(pilot, lambda: app.state.layout is None, 30, "the failure dismissed with one key")
        assert app.state.active_diagnosis() is None
        await wait_for(pilot, lambda: _band(app).startswith("No layout is up"), 30, "the band")
        await wait_for_thread(lambda: StateStore().read() == {}, 30, "status to agree")
        st = await asyncio.to_thread(cli, "status", "--json")
        assert json.loads(st.stdout)["layouts"] == []
        past = await asyncio.to_thread(failures.past_failures)
        assert [f.layout_id for f in past] == [failed_id]
        # the failures on this host, in the playbook screen, open in full
        await pilot.press("p")
        await wait_for(pilot, lambda: app.screen.query_one("#pb-failures", OptionList).option_count == 1
                       and app.screen.query_one("#pb-failures", OptionList).get_option_at_index(0).id == "f0",
                       20, "the failure listed")
        await pilot.press("ctrl+f", "down", "enter")
        await wait_for(pilot, lambda: app.screen.query("#text-body"), 30, "the failure opened")
        text = str(app.screen.query_one("#text-body").render())
        assert "flashinfer-no-nvcc" in text and "disagg-tui up --model dummy-qwen3-8b" in text
        await pilot.press("escape", "escape")
        # a healthy layout, then stopped: the dashboard shows nothing, not the older failure
        up = await asyncio.to_thread(cli, "up", "--sim", "--sim-startup", "0.3", "--model", "dummy-qwen3-8b",
                                     "--topology", "tp1", *_port_flags(ports), timeout=120)
        assert up.returncode == 0, up.stderr[-2000:]
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.layout.status == "ready", 30,
                       "the healthy layout")
        await pilot.press("s")
        await wait_for(pilot, lambda: app.state.layout is None, 60, "the stop")
        await pilot.pause(1.5)  # a few follower rounds
        assert app.state.layout is None and app.state.active_diagnosis() is None
        assert _band(app).startswith("No layout is up")
