"""The simulator knows when it falls behind: a simulated server measures how late its steps end against the
clock it was asked to keep, exports it in ``/metrics``, and a run during which it fell behind is flagged
``sim-overloaded``, kept out of the recommendation, with the clock that would have held."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.simserver import SimServers
from tui.core.bench import recommend as rec_mod
from tui.core.bench.runner import BenchOptions, BenchTarget, run_bench
from tui.core.bench.serverside import SIM_OVERLOAD_SHARE, PacingCheck, pacing_check, sim_pacing
from tui.core.bench.table import build_cells
from tui.core.models import Workload

METRICS = """# TYPE disagg_sim:paced_seconds_total counter
disagg_sim:paced_seconds_total{engine="0"} 100.0
disagg_sim:paced_seconds_total{engine="1"} 50.0
# TYPE disagg_sim:pacing_lag_seconds_total counter
disagg_sim:pacing_lag_seconds_total{engine="0"} 1.0
disagg_sim:pacing_lag_seconds_total{engine="1"} 0.0
# TYPE disagg_sim:clock gauge
disagg_sim:clock{engine="0"} 20.0
disagg_sim:clock{engine="1"} 20.0
"""


def test_pacing_counters_and_check() -> None:
    before = sim_pacing(METRICS)
    assert before == {"0": (100.0, 1.0, 20.0), "1": (50.0, 0.0, 20.0)}
    assert sim_pacing("vllm:num_requests_running 0\n") is None  # a real server: no such series
    # over the run engine 1 paced 10 s and ran 10 s late: half behind, the worst engine
    after = {"0": (110.0, 1.05, 20.0), "1": (60.0, 10.0, 20.0)}
    chk = pacing_check({"u": before}, {"u": after, "real": None})
    assert chk is not None and chk.worst == "u engine 1" and chk.share == pytest.approx(0.5)
    assert chk.overloaded and chk.held_clock == 7.0  # 20 × 0.5 reached, with 30 % headroom
    assert "--sim-clock 7 would have held" in chk.line()
    ok = pacing_check({"u": before}, {"u": {"0": (110.0, 1.05, 20.0)}})
    assert ok is not None and not ok.overloaded and ok.held_clock == 20.0
    assert pacing_check({}, {"real": None}) is None
    slow = PacingCheck(share=0.6, lag_s=6.0, clock=2.0, worst="u engine 0")  # reached 0.8×: not even real time
    assert slow.overloaded and "even in real time" in slow.line()


def _pacing_metrics(url: str) -> tuple[float, float]:
    text = httpx.get(url + "/metrics").text
    paced = sum(float(v) for v in re.findall(r"^disagg_sim:paced_seconds_total\{[^}]*\} (\S+)$", text, re.M))
    lag = sum(float(v) for v in re.findall(r"^disagg_sim:pacing_lag_seconds_total\{[^}]*\} (\S+)$", text, re.M))
    return paced, lag


async def test_a_server_driven_past_its_pace_is_flagged(sims: SimServers) -> None:
    # 2,000× real time: a decode step of ~5 ms is 2.5 µs of wall time, which no Python event loop keeps
    server = sims.start(startup_s=0.2, clock=2000.0)
    server.wait_ready()
    # enough decode steps that the lateness passes the server's 20 ms threshold even on an idle, fast machine
    # (64 steps were ~20 ms late in all: flagged under load, not on a quiet host)
    wl = Workload(name="w", input_len=64, output_len=1024, num_prompts=8, seed=3)
    run = await run_bench(BenchOptions(workload=wl, model="dummy-qwen3-8b", warmup=0),
                          BenchTarget(endpoint=server.url, campaign="pace"))
    assert run.meta.status == "complete"
    paced, lag = _pacing_metrics(server.url)
    assert paced > 0 and lag > SIM_OVERLOAD_SHARE * paced  # the server measured its own lag and exports it
    assert "sim-overloaded" in run.meta.flags
    pacing = run.meta.sim_pacing
    assert pacing is not None and pacing["overloaded"] and pacing["clock"] == 2000.0
    assert pacing["held_clock"] < 2000.0
    # kept out of the recommendation, and said so
    cells = build_cells([run])
    rec = rec_mod.recommend(cells, {"w": wl})
    assert all(v.winner is None for vs in rec.objectives.values() for v in vs)
    assert "kept out of the recommendation (sim-overloaded): endpoint/w" in rec.evidence
    # a simulated run whose figures departed from the simulator's own prediction is kept out the same way
    run.meta.flags[:] = ["sim-diverged"]
    rec = rec_mod.recommend(build_cells([run]), {"w": wl})
    assert "kept out of the recommendation (sim-diverged): endpoint/w" in rec.evidence


def test_divergence_from_the_prediction_of_a_simulated_run() -> None:
    from tui.hosts import runpredict

    sim = {"simulated_run": True, "ratio": {"output_throughput": 0.48, "mean_tpot_ms": 1.02, "mean_ttft_ms": 30.0}}
    assert runpredict.divergence(sim) == "output_throughput 0.48×"  # TTFT is not judged (small, client-bound)
    assert runpredict.divergence({**sim, "ratio": {"output_throughput": 0.9, "mean_tpot_ms": 1.1}}) == ""
    assert runpredict.divergence({**sim, "simulated_run": False}) == ""  # a real run departs for real reasons


def test_the_runtime_counts_only_lag_it_cannot_catch_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step a little late (event-loop jitter, a busy host's scheduling latency) is caught up by the next steps;
    one later than LAG_TOLERANCE_WALL_S is counted, in virtual seconds, and the virtual clock moves on from there
    instead of jumping ahead (so the clients see what was really paced)."""
    import tui.sim.runtime as rt_mod
    from tui.core.models import Catalog
    from tui.core.plan.gpuspecs import H200
    from tui.sim.metrics import EngineMetrics
    from tui.sim.perfmodel import Hardware, ModelCost
    from tui.sim.scheduler import EngineScheduler

    cost = ModelCost(Catalog.load().model("dummy-qwen3-8b"), Hardware.for_gpu(H200))
    sched = EngineScheduler(cost, kv_tokens=10_000, max_num_seqs=8, max_num_batched_tokens=512)
    now = [1000.0]
    monkeypatch.setattr(rt_mod.time, "monotonic", lambda: now[0])
    rt = rt_mod.EngineRuntime(0, sched, EngineMetrics(4096), clock=10.0)
    assert rt.v_of_wall(1000.0) == 0.0
    now[0] = 1000.0 + 0.1 + rt_mod.LAG_TOLERANCE_WALL_S / 2  # the step ending at virtual 1 s ends a bit late
    rt._measure_lag(1.0)
    assert rt.lag_v == 0.0 and rt.late_steps == 0
    now[0] = 1000.0 + 0.2 + 0.05  # the step ending at virtual 2 s ends 50 ms of wall time late: 0.5 virtual s
    rt._measure_lag(2.0)
    assert rt.lag_v == pytest.approx(0.5) and rt.lag_max_v == pytest.approx(0.5) and rt.late_steps == 1
    assert rt.v_of_wall(now[0]) == pytest.approx(2.0)  # paced on from here, not caught up


def test_a_kv_lease_outlasts_a_slow_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """At --sim-clock 20 a 30 s lease is 1.5 s of wall time; it also holds 30 s of wall time, so a decode server or
    proxy the host starves for a few seconds still finds the blocks."""
    import tui.sim.runtime as rt_mod
    from tui.core.models import Catalog
    from tui.core.plan.gpuspecs import H200
    from tui.sim.metrics import EngineMetrics
    from tui.sim.perfmodel import Hardware, ModelCost
    from tui.sim.scheduler import EngineScheduler, SimRequest

    cost = ModelCost(Catalog.load().model("dummy-qwen3-8b"), Hardware.for_gpu(H200))
    sched = EngineScheduler(cost, kv_tokens=10_000, max_num_seqs=8, max_num_batched_tokens=512, lease_s=30.0)
    now = [500.0]
    monkeypatch.setattr(rt_mod.time, "monotonic", lambda: now[0])
    rt = rt_mod.EngineRuntime(0, sched, EngineMetrics(4096), clock=20.0)
    req = SimRequest(rid="p", prompt_len=100, max_tokens=1, arrival=0.0, hold_after_finish=True)
    sched.add(req)
    res = sched.step(0.0)
    assert res is not None and "p" in sched.held and req.lease_until == pytest.approx(res.end + 30.0)
    rt.floor_lease(req)
    assert req.lease_until == pytest.approx(rt.v_of_wall(500.0 + 30.0))  # 600 virtual seconds at clock 20
    assert sched.expire_leases(res.end + 31.0) == []  # the virtual lease alone would have run out here
    assert [r.rid for r in sched.expire_leases(rt.v_of_wall(531.0))] == ["p"]
