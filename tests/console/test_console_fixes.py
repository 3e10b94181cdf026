"""A diagnosis's fix as the console shows it, and the fix in effect once applied (issue 22, findings 21 and 23):
the text, the changes listed and what ``a`` applies agree (for the GPUs shown: flashinfer-no-nvcc on a B200 adds
the Triton attention backend too), no "not applied automatically" above "a apply the fix", the ready band names
the fix its layout runs with, and a fresh layout does not show the previous layout's benchmark."""

from __future__ import annotations

import dataclasses

import pytest

from tests.console import scripted
from tests.console.conftest import console_ports, wait_for
from tui.console.app import make_console
from tui.console.widgets.band import Band
from tui.core.bench.events import BenchDone
from tui.core.events import Event
from tui.core.host.base import HostOptions
from tui.core.launch.events import LayoutChanged, PlanLaunched
from tui.core.playbook import Diagnosis, load_playbook

KV_LINE = ("(EngineCore pid=4001) ERROR 12-01 11:59:58 [core.py:1231] ValueError: To serve at least one request with "
           "the model's max seq len (32768), (4.00 GiB KV cache is needed, which is larger than the available KV "
           "cache memory (2.00 GiB). Based on the available memory, the estimated maximum model length is 16384.")


def _band(app) -> str:  # type: ignore[no-untyped-def]
    return app.screen.query_one(Band).text.plain


def _failed_with(diagnosis: Diagnosis) -> list[Event]:
    return [*(e for e in scripted.failed() if not isinstance(e, Diagnosis)), diagnosis]


def _matched(line: str) -> Diagnosis:
    """The diagnosis the layout follower makes of ``line`` (its context knows no GPU architecture)."""
    (d,) = load_playbook(operator=False).matcher("decode-0").feed(line, 5)
    return dataclasses.replace(d, ts=scripted.T0)


async def test_flashinfer_no_nvcc_on_a_b200_shows_what_a_applies_there() -> None:
    d = _matched(scripted.NVCC_LINE)
    assert d.entry_id == "flashinfer-no-nvcc" and "TRITON_ATTN" not in " ".join(d.changes)  # the follower's view
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=_failed_with(d),
                       book=load_playbook(operator=False))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        fix_line = next(ln for ln in _band(app).splitlines() if ln.startswith("Fix: "))
        assert "set VLLM_USE_FLASHINFER_SAMPLER=0; add --attention-backend TRITON_ATTN" in fix_line
        assert "blackwell only" not in fix_line
        await pilot.press("d")
        await pilot.pause(0.2)
        body = str(app.screen.query_one("#text-body").render())
        assert "a applies:" in body and "· set VLLM_USE_FLASHINFER_SAMPLER=0" in body
        assert "· add --attention-backend TRITON_ATTN" in body


async def test_a_fix_applied_only_when_asked_for_does_not_say_it_is_not_applied() -> None:
    d = _matched(KV_LINE)
    assert d.entry_id == "kv-cache-too-small-for-max-len" and d.fixable and not d.auto
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=_failed_with(d),
                       book=load_playbook(operator=False))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        band = _band(app)
        assert "Fix: add --max-model-len 16384 (applied only when asked for)" in band
        assert "not applied automatically" not in band and "a apply the fix and relaunch" in band


def _fixed_plan() -> PlanLaunched:
    return PlanLaunched(ts=scripted.T0 - 41, layout_id=scripted.LAYOUT, plan={
        "topology": "1p1d", "profile_id": "qwen3.6-27b-nvfp4", "fixes_applied": ["flashinfer-no-nvcc"],
        "workarounds": [
            {"change": "set VLLM_USE_FLASHINFER_SAMPLER=0", "reason": "playbook entry flashinfer-no-nvcc",
             "source": "fix:flashinfer-no-nvcc"},
            {"change": "add --attention-backend TRITON_ATTN", "reason": "playbook entry flashinfer-no-nvcc",
             "source": "fix:flashinfer-no-nvcc"},
            {"change": "VLLM_SSM_CONV_STATE_LAYOUT=DS", "reason": "hybrid model behind NIXL", "source": "planner"}]})


@pytest.mark.parametrize("plan_first", [True, False], ids=["plan-first", "layout-first"])
async def test_the_ready_band_names_the_fix_in_effect(plan_first: bool) -> None:
    ready = [e for e in scripted.ready_under_load() if not type(e).__name__.startswith("Bench")]
    ev = [_fixed_plan(), *ready] if plan_first else [*ready, _fixed_plan()]
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=ev)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        band = _band(app)
        assert "is ready" in band
        assert ("Fix in effect: flashinfer-no-nvcc (set VLLM_USE_FLASHINFER_SAMPLER=0; add --attention-backend "
                "TRITON_ATTN)") in band
        assert "VLLM_SSM_CONV_STATE_LAYOUT" not in band  # the planner's own workaround is no fix


async def test_a_fresh_layout_does_not_show_the_previous_layouts_benchmark() -> None:
    ev = scripted.ready_under_load()
    ev.append(BenchDone(ts=scripted.T0, run_id="console/1p1d-prefill-heavy-20251201-115920", status="complete",
                        summary={"output_throughput": 1403.0, "mean_tpot_ms": 7.0, "mean_ttft_ms": 3200.0,
                                 "failed": 0}))
    app = make_console(HostOptions(sim=True), live=False, clock=scripted.clock, events=ev)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        assert "Benchmark prefill-heavy" in _band(app) and "complete" in _band(app)
        for status in ("stopping", "stopped"):
            app.ctx.bus.publish(LayoutChanged(ts=scripted.T0, layout_id=scripted.LAYOUT, status=status,
                                              topology="1p1d", profile_id="qwen3.6-27b-nvfp4"))
        app.ctx.bus.publish(LayoutChanged(ts=scripted.T0 + 5, layout_id="20251201-120005-dp2-cd34", status="ready",
                                          topology="dp2", profile_id="qwen3.6-27b-nvfp4",
                                          endpoint="http://127.0.0.1:8000", simulated=True))
        await pilot.pause(0.1)
        app.flush()
        await pilot.pause(0.1)
        band = _band(app)
        assert "dp2 of qwen3.6-27b-nvfp4 is ready" in band and "Benchmark" not in band


@pytest.mark.usefixtures("clean_layouts")
async def test_a_applies_every_change_it_shows_and_the_relaunch_says_so() -> None:
    """Live on the simulated B200s: the failed start's banner, `a`, and the relaunched layout's band, which reads
    the plan the state file holds (the follower's PlanLaunched)."""
    from textual.widgets import Input, OptionList

    from tui.console.screens.launch import LaunchScreen

    app = make_console(HostOptions(sim=True, sim_startup_s=1.0, sim_faults=("flashinfer-no-nvcc",)),
                       ports=console_ports(), record=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: len(app.state.gpus) == 2, 20, "two GPUs")
        await pilot.press("l")
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        models = screen.query_one("#models", OptionList)
        await wait_for(pilot, lambda: models.option_count > 0, 20, "the model list")
        models.highlighted = next(i for i in range(models.option_count)
                                  if models.get_option_at_index(i).id == "qwen3.6-27b-nvfp4")
        await wait_for(pilot, lambda: screen.current is not None, 30, "the plan")
        # the simulated host has no nvcc, so the plan turns FlashInfer's JIT off; the operator's own setting turns
        # its sampler back on, and the start fails as vLLM does
        screen.query_one("#env", Input).value = "VLLM_USE_FLASHINFER_SAMPLER=1"
        await wait_for(pilot, lambda: screen.request is not None
                       and ("VLLM_USE_FLASHINFER_SAMPLER", "1") in screen.request.extra_env, 30, "the plan with it")
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: app.state.active_diagnosis() is not None and app.state.layout is not None
                       and app.state.layout.status == "failed", 90, "the failure")
        await pilot.pause(0.3)
        assert "add --attention-backend TRITON_ATTN" in _band(app)
        await pilot.press("a")
        await wait_for(pilot, lambda: app.state.layout is not None and app.state.layout.status == "ready", 90,
                       "the relaunch")
        await wait_for(pilot, lambda: "Fix in effect" in _band(app), 10, "the fix in the band")
        assert ("Fix in effect: flashinfer-no-nvcc (set VLLM_USE_FLASHINFER_SAMPLER=0; add --attention-backend "
                "TRITON_ATTN)") in _band(app)
