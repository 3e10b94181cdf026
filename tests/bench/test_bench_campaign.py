"""Campaigns with a fake lifecycle (stub servers as layouts): table, recommendation, resume, failures, sweeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tui.core.bench import recommend as rec_mod
from tui.core.bench import table
from tui.core.bench.campaign import (
    CampaignRunner,
    CampaignSpec,
    Lifecycle,
    auto_rates,
    campaign_runs,
    wait_gpus_free,
)
from tui.core.bench.events import BenchTick
from tui.core.bench.runner import BenchOptions
from tui.core.errors import InputError, RunFailed
from tui.core.events import EventBus
from tui.core.launch.state import LayoutRecord, ProcessRecord
from tui.core.models import Catalog, ModelProfile, Workload
from tui.core.plan.hostfacts import sim_facts
from tui.core.plan.planner import LaunchPlan, plan
from tui.sim.stubserver import StubConfig, StubServer

CAT = Catalog.load()
PROFILE = CAT.model("qwen3.6-27b-nvfp4")
FACTS = sim_facts("b200", 2)
# per topology: stub ms per token (the fake "performance" of the layout)
PACE = {"dp2": 3.0, "tp2": 4.0, "1p1d": 2.0}
WORKLOADS = {
    "decode-heavy": Workload(name="decode-heavy", input_len=32, output_len=24, num_prompts=6),
    "prefill-heavy": Workload(name="prefill-heavy", input_len=300, output_len=8, num_prompts=6),
}


class FakeLifecycle:
    """Brings a 'layout' up as a stub server. For 1p1d the stub also plays the decode server: its /metrics count
    the prompt tokens as arrived over KV transfer (or, with ``kv_source="local_compute"``, recomputed)."""

    def __init__(self, fail: Sequence[str] = (), kv_source: str = "external_kv_transfer") -> None:
        self.fail = set(fail)
        self.kv_source = kv_source
        self.up: list[str] = []
        self.down: list[str] = []
        self._servers: dict[str, list[StubServer]] = {}

    async def bring_up(self, profile: ModelProfile, plan: LaunchPlan, host: Any, bus: EventBus) -> LayoutRecord:
        if plan.topology in self.fail:
            raise RunFailed(f"{plan.topology}: engine core initialization failed")
        self.up.append(plan.topology)
        disagg = plan.topology == "1p1d"
        front = StubServer(StubConfig(mode="paced", ms_per_token=PACE[plan.topology], model=plan.served_name,
                                      kv_source=self.kv_source if disagg else "local_compute"))
        port = await front.start()
        url = f"http://127.0.0.1:{port}"
        self._servers[plan.topology] = [front]
        procs = [ProcessRecord(name="decode-0", role="decode", pid=0, pgid=0, create_time=0.0, log="", url=url)
                 ] if disagg else []
        return LayoutRecord(id=f"fake-{plan.topology}", created=time.time(), simulated=True, plan=plan.to_dict(),
                            processes=procs, status="ready", endpoint=url)

    async def tear_down(self, record: LayoutRecord, bus: EventBus) -> None:
        self.down.append(record.topology)
        for s in self._servers.pop(record.topology, []):
            s.close()


def _planner(topo: str) -> tuple[ModelProfile, LaunchPlan]:
    return PROFILE, plan(PROFILE, topo, FACTS)


async def _no_wait(host: Any, gpus: Sequence[int], limit_s: float) -> None:
    _no_wait.calls.append(list(gpus))  # type: ignore[attr-defined]


_no_wait.calls = []  # type: ignore[attr-defined]


def _runner(tmp: Path, spec: CampaignSpec, lc: Lifecycle, **kw: Any) -> CampaignRunner:
    return CampaignRunner(spec=spec, lifecycle=lc, host=None, planner=_planner,  # type: ignore[arg-type]
                          workloads=WORKLOADS, options=lambda wl: BenchOptions(workload=wl, warmup=0),
                          notify=lambda s: None, root=tmp, wait_free=_no_wait, **kw)


def _spec(**kw: Any) -> CampaignSpec:
    base: dict[str, Any] = {"name": "camp", "model": PROFILE.id, "topologies": ["dp2", "1p1d"],
                            "workloads": ["decode-heavy", "prefill-heavy"]}
    base.update(kw)
    return CampaignSpec(**base)


async def test_campaign_table_recommendation_and_resume(tmp_path: Path) -> None:
    lc = FakeLifecycle()
    _no_wait.calls.clear()  # type: ignore[attr-defined]
    result = await _runner(tmp_path, _spec(), lc).run()
    assert [o.status for o in result.outcomes] == ["complete"] * 4
    assert lc.up == ["dp2", "1p1d"] and lc.down == ["dp2", "1p1d"]
    assert _no_wait.calls == [[0, 1], [0, 1]]  # GPUs checked free before each layout  # type: ignore[attr-defined]
    runs = result.runs()
    assert {(r.meta.topology, r.meta.workload) for r in runs} == {
        ("dp2", "decode-heavy"), ("dp2", "prefill-heavy"), ("1p1d", "decode-heavy"), ("1p1d", "prefill-heavy")}
    assert all((r.path / "plan.json").exists() for r in runs)
    kv = [r.meta.kv_transfer for r in runs if r.meta.topology == "1p1d"]
    assert len(kv) == 2 and all(k is not None and k["transferred"] and not k["recomputed"] for k in kv)
    assert not any(f.startswith("kv-") for r in runs for f in r.meta.flags)
    cells = table.build_cells(runs)
    rec = rec_mod.recommend(cells, WORKLOADS, gpus=2)
    tpot = {v.workload: v.winner for v in rec.objectives["min_tpot"]}
    assert tpot == {"decode-heavy": "1p1d", "prefill-heavy": "1p1d"}  # 2 ms/token beats 3
    assert rec.thin and any("saturation only" in n for n in rec.evidence)
    assert any("no repeats" in n for n in rec.evidence)
    assert set(rec.factors) == {"decode-heavy", "prefill-heavy"}
    assert all(len(f) == 4 for f in rec.factors.values())
    text = rec_mod.render(rec)
    assert "min TPOT: 1p1d" in text and "prefill:decode work ratio" in text
    rows = table.cell_rows(cells)
    assert all({"topology", "workload", "output_throughput", "mean_tpot_ms"} <= set(r) for r in rows)

    # the same campaign again: nothing is re-run, no layout is brought up
    lc2 = FakeLifecycle()
    again = await _runner(tmp_path, _spec(), lc2).run()
    assert lc2.up == [] and [o.status for o in again.outcomes] == ["skipped"] * 4
    # a cell that completed no request measured nothing (issue 23): the same campaign again measures it again
    from tui.core.bench.store import SUMMARY_FILE, write_json

    zero = next(r for r in runs if (r.meta.topology, r.meta.workload) == ("dp2", "decode-heavy"))
    write_json(zero.path / SUMMARY_FILE, {**zero.summary, "completed": 0, "failed": zero.summary["completed"]})
    lc3 = FakeLifecycle()
    redo = await _runner(tmp_path, _spec(), lc3).run()
    assert lc3.up == ["dp2"] and sorted(o.status for o in redo.outcomes) == ["complete"] + ["skipped"] * 3
    # a different campaign under the same name is refused
    with pytest.raises(InputError, match="exists with other cells"):
        await _runner(tmp_path, _spec(topologies=["tp2"]), FakeLifecycle()).run()


async def test_interrupted_campaign_resumes_without_redoing(tmp_path: Path) -> None:
    started: list[str] = []
    mid_second = asyncio.Event()

    def notify(line: str) -> None:
        if " @ " in line:
            started.append(line)

    def on_tick(tick: BenchTick) -> None:
        if len(started) == 2 and tick.phase == "run" and tick.done == 0 and tick.elapsed_s > 0:
            mid_second.set()  # the second cell is streaming: interrupt it

    slow = {k: w.with_overrides(output_len=400) for k, w in WORKLOADS.items()}  # ~1.2 s per cell
    lc = FakeLifecycle()
    spec = _spec(topologies=["dp2"], name="interrupted")
    runner = _runner(tmp_path, spec, lc, on_tick=on_tick)
    runner.workloads = slow
    runner.notify = notify
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(mid_second.wait(), 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lc.down == ["dp2"]  # torn down on the way out
    stored = {r.meta.status: r for r in campaign_runs(tmp_path / "interrupted")}
    assert set(stored) == {"complete", "incomplete"}
    first_started = stored["complete"].meta.started
    lc2 = FakeLifecycle()
    runner2 = _runner(tmp_path, spec, lc2)
    runner2.workloads = slow
    result = await runner2.run()
    by_status = {o.status: o for o in result.outcomes}
    assert sorted(o.status for o in result.outcomes) == ["complete", "skipped"]
    assert by_status["skipped"].run is not None and by_status["skipped"].run.meta.started == first_started
    assert lc2.up == ["dp2"]


async def test_failed_bring_up_and_busy_gpus_fail_their_cells_only(tmp_path: Path) -> None:
    lc = FakeLifecycle(fail=["tp2"])
    result = await _runner(tmp_path, _spec(topologies=["tp2", "dp2"], name="partial"), lc).run()
    failed = [o for o in result.failed]
    assert {o.cell.topology for o in failed} == {"tp2"} and len(failed) == 2
    assert all("engine core initialization failed" in o.message for o in failed)
    assert len(result.runs()) == 2
    stored = {r.meta.status for r in campaign_runs(tmp_path / "partial")}
    assert stored == {"failed", "complete"}

    async def busy(host: Any, gpus: Sequence[int], limit_s: float) -> None:
        raise RunFailed("GPU memory still in use 120 s after the previous layout stopped (GPU 0: 80,000 MiB)")

    r2 = _runner(tmp_path, _spec(topologies=["dp2"], workloads=["decode-heavy"], name="busy"), FakeLifecycle())
    r2.wait_free = busy
    res2 = await r2.run()
    assert [o.status for o in res2.outcomes] == ["failed"] and "still in use" in res2.outcomes[0].message


async def test_auto_rate_sweep(tmp_path: Path) -> None:
    lc = FakeLifecycle()
    spec = _spec(topologies=["dp2"], workloads=["decode-heavy"], rates="auto", name="sweep")
    result = await _runner(tmp_path, spec, lc).run()
    runs = result.runs()
    rates = sorted(r.meta.request_rate for r in runs if r.meta.request_rate is not None)
    assert len(runs) == 5 and len(rates) == 4
    sat = next(r for r in runs if r.meta.request_rate is None)
    assert rates == auto_rates(sat.summary["request_throughput"])
    cells = table.build_cells(runs)
    rec = rec_mod.recommend(cells, WORKLOADS, gpus=2, slo={"tpot": 1000.0})
    assert rec.highest_rate_meeting_slo["dp2"]["decode-heavy"] == max(rates)
    assert not any("saturation only" in n for n in rec.evidence)
    # resume: the derived rates are found again from the stored saturation run
    again = await _runner(tmp_path, spec, FakeLifecycle()).run()
    assert [o.status for o in again.outcomes] == ["skipped"] * 5


def test_auto_rates_are_fractions_with_three_digits() -> None:
    assert auto_rates(10.0) == [2.5, 5.0, 7.5, 9.0]
    assert auto_rates(3.891) == [0.973, 1.95, 2.92, 3.5]
    assert all(r > 0 for r in auto_rates(1234.5))


class _FakeNvml:
    def __init__(self, used: list[list[int]]) -> None:
        self.used = used  # per poll, MiB per GPU

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        values = self.used[0] if len(self.used) == 1 else self.used.pop(0)
        return type("M", (), {"used": values[h] * 2**20})()


class _Host:
    def __init__(self, nvml: _FakeNvml) -> None:
        self._n = nvml

    def nvml(self) -> _FakeNvml:
        return self._n


async def test_wait_gpus_free_polls_until_released() -> None:
    host = _Host(_FakeNvml([[70000, 70000], [70000, 70000], [300, 300]]))
    await wait_gpus_free(host, [0, 1], timeout_s=5, poll_s=0.01)  # type: ignore[arg-type]
    assert host._n.used == [[300, 300]]  # it polled through both busy readings before returning
    stuck = _Host(_FakeNvml([[300, 90000]]))
    with pytest.raises(RunFailed, match="GPU 1: 90,000 MiB"):
        await wait_gpus_free(stuck, [0, 1], timeout_s=0.05, poll_s=0.01)  # type: ignore[arg-type]


async def test_decode_redoing_the_prefill_is_flagged(tmp_path: Path) -> None:
    lc = FakeLifecycle(kv_source="local_compute")
    spec = _spec(topologies=["1p1d"], workloads=["prefill-heavy"], name="recompute")
    result = await _runner(tmp_path, spec, lc).run()
    run = result.runs()[0]
    assert "kv-recompute" in run.meta.flags
    assert run.meta.kv_transfer is not None and run.meta.kv_transfer["local_share"] == 1.0
    cells = table.build_cells(result.runs())
    rec = rec_mod.recommend(cells, WORKLOADS, gpus=2)
    assert any("kv-recompute" in n for n in rec.evidence)


async def test_a_campaign_tells_its_steps_as_typed_events(tmp_path: Path) -> None:
    """What the console and recordings follow: each layout's bring-up and tear-down, every cell's start and end
    with the count of cells done, every run's start, ticks and end, in that order; an auto sweep's rates join the
    count when they are known."""
    from tui.core.bench.events import BenchDone, BenchStarted, BenchTick, CampaignStep
    from tui.core.events import Event, EventBus

    bus = EventBus()
    seen: list[Event] = []
    bus.subscribe(seen.append)
    spec = _spec(topologies=["dp2"], workloads=["decode-heavy"], rates="auto", name="steps")
    await _runner(tmp_path, spec, FakeLifecycle(), bus=bus).run()
    steps = [e for e in seen if isinstance(e, CampaignStep)]
    assert [s.step for s in steps] == ["bring_up"] + ["cell", "cell_done"] * 5 + ["tear_down"]
    assert all(s.campaign == "steps" and s.topology == "dp2" for s in steps)
    done = [s for s in steps if s.step == "cell_done"]
    assert [s.done for s in done] == [1, 2, 3, 4, 5] and done[0].total == 1 and done[-1].total == 5
    assert all(s.status == "complete" and s.run_dir for s in done)
    assert done[0].request_rate == "inf" and done[1].request_rate != "inf"
    # every run: started, ticked, done, between its cell's two steps
    runs = [e for e in seen if isinstance(e, BenchStarted | BenchTick | BenchDone)]
    first = runs[: next(i for i, e in enumerate(runs) if isinstance(e, BenchDone)) + 1]
    assert isinstance(first[0], BenchStarted) and first[0].runner == "disagg-tui" and first[0].total > 0
    assert any(isinstance(e, BenchTick) for e in first)
    assert sum(isinstance(e, BenchStarted) for e in seen) == sum(isinstance(e, BenchDone) for e in seen) == 5
    cell0, done0 = seen.index(steps[1]), seen.index(steps[2])
    assert cell0 < seen.index(first[0]) < seen.index(first[-1]) < done0
    # and they round-trip through JSON (recordings)
    import json

    from tui.core.events import event_from_dict
    for e in (steps[0], done[0], first[0]):
        assert event_from_dict(json.loads(json.dumps(e.to_dict()))) == e
