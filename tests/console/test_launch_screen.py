"""The launch screen (issue 22): its form is one launch request, every field's mistake shows at once under its
field, an absurd max length is one line per topology, the preview is the plan ``disagg-tui up`` makes of
``request.to_argv()``, a port held by the operator's own degraded layout offers to replace it, a JSON value keeps
its quotes, the simulated faults reach preflight, and at 80×24 the env field and the Launch button are reachable."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Input, OptionList, Static

from tests.console import scripted
from tests.console.conftest import console_ports, wait_for
from tui.console.app import ConsoleApp, make_console
from tui.console.screens.launch import LaunchScreen
from tui.core.events import Event
from tui.core.host.base import HostOptions
from tui.core.launch.events import LayoutChanged, ServerLaunched
from tui.core.plan.request import LaunchRequest
from tui.sim.host import SimHost

ROOT = Path(__file__).resolve().parents[2]
MODEL = "qwen3.6-27b-nvfp4"
SPEC = '{"method": "ngram", "num_speculative_tokens": 3}'


def _console(options: HostOptions | None = None, events: list[Event] | None = None,
             ports: tuple[int, int, int] | None = None) -> tuple[ConsoleApp, list[list[str]]]:
    """A console on the simulated host that plans but starts nothing: the ``up`` command lines it would run."""
    opts = options or HostOptions(sim=True)
    app = make_console(opts, live=False, clock=scripted.clock, host=SimHost(opts), ports=ports or console_ports(),
                       events=events or scripted.history((0.0, 0.0), n=2, loaded=False))
    started: list[list[str]] = []

    def run_job(name: str, argv: list[str], done_message: str = "") -> None:
        started.append(argv)

    app.run_job = run_job  # type: ignore[method-assign]
    return app, started


async def _planned(pilot: Any, app: ConsoleApp, **fields: str) -> LaunchScreen:
    """The launch screen with ``MODEL`` chosen and the form's ``fields`` (gmu, mml, args, env) typed in."""
    await pilot.press("l")
    screen = app.screen
    assert isinstance(screen, LaunchScreen)
    models = screen.query_one("#models", OptionList)
    await wait_for(pilot, lambda: models.option_count > 0, 20, "the model list")
    models.highlighted = next(i for i in range(models.option_count) if models.get_option_at_index(i).id == MODEL)
    await wait_for(pilot, lambda: screen.model_id == MODEL and screen.planned is not None, 30, "the plans")
    for wid, value in fields.items():
        screen.query_one(f"#{wid}", Input).value = value
    await pilot.pause(0.2)
    return screen


def _text(screen: LaunchScreen, selector: str) -> str:
    widget = screen.query_one(selector, Static)
    return str(widget.render()) if widget.display else ""


async def test_every_field_error_shows_at_once_under_its_field() -> None:
    app, started = _console()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _planned(pilot, app, gmu="1.5", mml="lots", args="--speculative-config {method:ngram}",
                                env="A=1 NOEQUALS")
        await wait_for(pilot, lambda: _text(screen, "#env-error"), 10, "the errors")
        assert "0.05 to 0.99" in _text(screen, "#gmu-error")
        assert "expected a whole number, got 'lots'" in _text(screen, "#mml-error")
        assert "--speculative-config takes JSON" in _text(screen, "#args-error")
        assert "expected K=V, got 'NOEQUALS'" in _text(screen, "#env-error")
        assert all(screen.query_one(f"#{w}", Input).has_class("-invalid") for w in ("gmu", "mml", "args", "env"))
        assert screen.request is None and screen.current is None
        assert "Nothing is planned while a field is wrong" in str(screen.query_one("#plan-text", Static).render())
        await pilot.press("ctrl+l")
        await pilot.pause(0.2)
        assert started == []
        # fixed one by one, each error goes as its field is right
        screen.query_one("#gmu", Input).value = "0.8"
        await wait_for(pilot, lambda: not _text(screen, "#gmu-error"), 10, "the gmu error cleared")
        assert _text(screen, "#mml-error") and _text(screen, "#args-error") and _text(screen, "#env-error")


async def test_an_absurd_max_length_is_one_line_per_topology_and_one_reason_above() -> None:
    app, _ = _console()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _planned(pilot, app, mml="99999999")
        await wait_for(pilot, lambda: _text(screen, "#topology-note"), 30, "the note")
        topologies = screen.query_one("#topologies", OptionList)
        assert topologies.option_count >= 4 and all(c.plan is None for c in screen.choices)
        assert topologies.virtual_size.height == topologies.option_count  # one line each, nothing wrapped
        note = _text(screen, "#topology-note")
        assert note.startswith("No topology fits: ") and "max_model_len 99999999" in note
        assert "max_model_len 99999999" in str(screen.query_one("#plan-text", Static).render())


async def test_the_preview_is_the_plan_up_makes_of_the_request() -> None:
    app, started = _console()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _planned(pilot, app, gmu="0.8", mml="8192", args=f"--speculative-config {SPEC} --enforce-eager",
                                env="VLLM_LOGGING_LEVEL=DEBUG NOTE='a b'")
        await wait_for(pilot, lambda: screen.request is not None and screen.request.max_model_len == 8192
                       and screen.current is not None, 30, "the plan of the form")
        request, preview = screen.request, screen.current
        assert request is not None and preview is not None
        assert request.extra_args == ("--speculative-config", SPEC, "--enforce-eager")
        assert request.extra_env == (("VLLM_LOGGING_LEVEL", "DEBUG"), ("NOTE", "a b"))
        for s in preview.servers:  # the JSON reaches vllm serve whole
            assert s.argv[s.argv.index("--speculative-config") + 1] == SPEC
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: started, 10, "the up command line")
    (argv,) = started
    assert argv[0] == "up" and LaunchRequest.from_argv(argv[1:argv.index("--sim")]) == request
    # the flags after the host's are up's own (who starts the layout: the console), not the plan's
    assert argv[argv.index("--started-by"):][:4] == ["--started-by", "console", "--owner-pid", str(os.getpid())]
    planned = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "tui", "plan", "--json",
                                                       "--no-preflight", *argv[1:argv.index("--started-by")]],
                                      capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["plan"] == json.loads(json.dumps(preview.redacted_dict()))


def _degraded(port: int) -> list[Event]:
    """This console's own 1P1D on ``port`` (its endpoint), its decode server gone."""
    lay = "20261201-120000-qwen3.6-27b-nvfp4-1p1d-abcd"
    return [*scripted.history((0.0, 0.0), n=2, loaded=False),
            LayoutChanged(ts=scripted.T0 - 5, layout_id=lay, status="degraded", topology="1p1d", profile_id=MODEL,
                          endpoint=f"http://127.0.0.1:{port}", simulated=True),
            ServerLaunched(ts=scripted.T0 - 5, layout_id=lay, server="proxy", role="proxy", pid=4010,
                           url=f"http://127.0.0.1:{port}", command="disagg-tui proxy", log="/tmp/proxy.log")]


async def test_a_port_held_by_the_operators_own_degraded_layout_offers_to_replace_it() -> None:
    ports = console_ports()
    with socket.socket() as held:  # the degraded layout's proxy, still listening
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", ports[0]))
        held.listen()
        app, started = _console(events=_degraded(ports[0]), ports=ports)
        async with app.run_test(size=(160, 48)) as pilot:
            screen = await _planned(pilot, app)
            topologies = screen.query_one("#topologies", OptionList)
            topologies.highlighted = next(i for i in range(topologies.option_count)
                                          if topologies.get_option_at_index(i).id == "1p1d")
            await wait_for(pilot, lambda: screen.held == [ports[0]], 20, "the held port")
            shown = str(screen.query_one("#plan-text", Static).render())
            assert "FAIL ports: in use" in shown
            assert f"{ports[0]} held by your layout 1p1d of {MODEL} (degraded): ctrl+l replaces it" in shown
            await pilot.press("ctrl+l")
            await wait_for(pilot, lambda: started, 10, "the up command line")
    (argv,) = started
    assert "--replace" in argv and LaunchRequest.from_argv(argv[1:argv.index("--sim")]).replace


async def test_simulated_faults_reach_the_preflight_shown() -> None:
    app, _ = _console(HostOptions(sim=True, sim_faults=("flashinfer-no-nvcc", "gpu-memory-taken")))
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _planned(pilot, app)
        await wait_for(pilot, lambda: screen.current is not None, 30, "a plan")
        shown = str(screen.query_one("#plan-text", Static).render())
    assert "ok   nvcc" not in shown and "warn nvcc: no nvcc" in shown
    assert "GPU 0,1 free" not in shown and "FAIL gpu memory: GPU 0 has" in shown
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in screen.current.shell()  # the plan works around the host it sees


@pytest.mark.parametrize("target", ["#env", "#launch"])
async def test_at_80x24_the_env_field_and_the_launch_button_are_reachable(target: str) -> None:
    app, _ = _console()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _planned(pilot, app)
        widget = screen.query_one(target)
        assert isinstance(widget, Input | Button)
        widget.focus()  # the form scrolls to it (an animation: under load it takes longer than a fixed pause)

        def shown() -> bool:
            x, y = widget.region.center
            return 0 <= y < 24 and screen.get_widget_at(x, y)[0] is widget

        await wait_for(pilot, shown, 10, f"{target} scrolled into view")


async def test_a_filter_that_leaves_no_launchable_model_plans_nothing() -> None:
    """Typed in one burst with Enter, a filter that matches no launchable model shows no plan of the model that was
    highlighted before (it showed gemma's plan under an empty list), and ctrl+l launches nothing."""
    app, started = _console()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("l")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen) and app.screen.model_id is not None, 10,
                       "the launch screen")
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        await pilot.press(*"zzznope", "enter")
        await wait_for(pilot, lambda: screen.model_id is None, 10, "no model")
        assert "No launchable model matches 'zzznope'" in str(screen.query_one("#plan-text", Static).render())
        await pilot.press("ctrl+l")
        await pilot.pause(0.3)
        assert started == []
