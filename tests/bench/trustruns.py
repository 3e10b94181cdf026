"""Stored runs for the "results you can trust" tests (issue 23), written with the project's own functions: the
campaign's folder by ``CampaignStore.open``, each run by ``RunWriter`` (its request records, its summary from
``metrics.summarize`` under ``runner.summary_header``, its plan from the planner), read back by ``load_run``.

The scenario of the issue: a campaign measured dp2 and 1p1d; while it ran dp2, a second console benchmarked the same
layout (a run stored under ``bench/``, not the campaign's) and the campaign stopped dp2 under it: that run ended
with every request failed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tui.core.bench.campaign import CampaignSpec, CampaignStore
from tui.core.bench.metrics import RequestRecord, summarize
from tui.core.bench.runner import BenchOptions, BenchTarget, summary_header
from tui.core.bench.store import Run, RunMeta, RunWriter, load_run, rate_label
from tui.core.models import Catalog, Workload
from tui.core.plan.hostfacts import sim_facts
from tui.core.plan.planner import PlanOptions, plan

MODEL = "qwen3.6-27b-nvfp4"
SERVED = "nvidia/Qwen3.6-27B-NVFP4"
FACTS = sim_facts("b200", 2)
WORKLOAD = Workload("decode-heavy", 512, 2048, num_prompts=32)
T0 = 1_790_000_000.0


def layout_plan(topology: str, *, args: Sequence[str] = (), env: Sequence[tuple[str, str]] = (),
                port: int = 8000) -> dict[str, Any]:
    """The plan the planner makes of ``topology`` on two simulated B200s, as a run folder keeps it."""
    profile = Catalog.load().model(MODEL)
    options = PlanOptions(port=port, server_base_port=port + 100, side_channel_base=port + 1600,
                          extra_args=tuple(args), extra_env=tuple(env))
    return plan(profile, topology, FACTS, options).redacted_dict()


def records(n: int, *, ttft: float = 0.1, gap: float = 0.01, out: int = 64, failed: bool = False
            ) -> list[RequestRecord]:
    """``n`` requests sent 10 ms apart that streamed ``out`` tokens ``gap`` seconds apart; ``failed``: each broke off
    after a few chunks (its server stopped under it)."""
    recs = []
    for i in range(n):
        if failed:
            recs.append(RequestRecord(index=i, start=0.01 * i, success=False, ttft=ttft, latency=ttft + 3 * gap,
                                      itl=[gap] * 3, prompt_tokens=WORKLOAD.input_len, chunks=4,
                                      error="Server disconnected", expected_input=WORKLOAD.input_len,
                                      expected_output=out))
        else:
            recs.append(RequestRecord(index=i, start=0.01 * i, success=True, ttft=ttft, latency=ttft + (out - 1) * gap,
                                      itl=[gap] * (out - 1), prompt_tokens=WORKLOAD.input_len, output_tokens=out,
                                      chunks=out, expected_input=WORKLOAD.input_len, expected_output=out))
    return recs


def write_run(root: Path, folder: str, name: str, topology: str, recs: Sequence[RequestRecord], *,
              plan_dict: dict[str, Any] | None, layout_id: str = "", status: str = "complete", started: float = T0,
              message: str = "", workload: Workload = WORKLOAD, flags: Sequence[str] = ()) -> Run:
    """A finished run stored under ``root/folder/name`` as the runner stores one (of ``recs``: as many prompts)."""
    workload = workload.with_overrides(num_prompts=len(recs))
    meta = RunMeta(campaign=folder, name=name, topology=topology, workload=workload.name, model=SERVED,
                   layout_id=layout_id, started=started, endpoint="http://127.0.0.1:8000", flags=list(flags),
                   fingerprint={"simulated": True, "server": {"server_version": "0.24.0"}})
    writer = RunWriter(root / folder / name, meta, workload={"name": workload.name, "input_len": workload.input_len,
                                                             "output_len": workload.output_len,
                                                             "num_prompts": workload.num_prompts,
                                                             "request_rate": rate_label(workload.request_rate)},
                       plan=plan_dict)
    for r in recs:
        writer.add(r)
    ends = [r.end for r in recs if r.success] or [r.start + r.latency for r in recs]
    duration = max(max(ends) - min(r.start for r in recs), 1e-9)
    header = summary_header(BenchOptions(workload=workload), BenchTarget(endpoint=meta.endpoint, topology=topology),
                            SERVED)
    writer.finish(status, summarize(recs, duration, header=header), message=message)
    meta.ended = started + duration
    writer.save_meta()
    return load_run(root / folder / name)


def campaign(root: Path, name: str, topologies: Sequence[str]) -> Path:
    """A campaign's folder with its spec, as ``disagg-tui run`` opens it."""
    store = CampaignStore(CampaignSpec(name=name, model=MODEL, topologies=list(topologies),
                                       workloads=[WORKLOAD.name], num_prompts=WORKLOAD.num_prompts, simulated=True,
                                       host="sim:NVIDIA B200x2 clock 1"), root)
    store.open()
    return store.dir


def issue_scenario(root: Path) -> dict[str, Run]:
    """The issue's sequence: campaign ``bake`` measured dp2 (layout L-dp2) and 1p1d (L-1p1d); a benchmark of a
    second console on L-dp2, stored under ``bench/``, ended with 0 of 32 requests done, 32 failed."""
    campaign(root, "bake", ["dp2", "1p1d"])
    dp2 = write_run(root, "bake", "dp2-decode-heavy", "dp2", records(32, gap=0.008), plan_dict=layout_plan("dp2"),
                    layout_id="L-dp2", started=T0)
    stray = write_run(root, "bench", f"dp2-decode-heavy-{time.strftime('%Y%m%d-%H%M%S')}", "dp2",
                      records(32, failed=True), plan_dict=layout_plan("dp2"), layout_id="L-dp2", started=T0 + 5,
                      status="incomplete", message="server died during the run (see 'disagg-tui status')",
                      flags=("failed-requests", "incomplete", "server-died", "sim-diverged"))
    pd = write_run(root, "bake", "1p1d-decode-heavy", "1p1d", records(32, gap=0.011), plan_dict=layout_plan("1p1d"),
                   layout_id="L-1p1d", started=T0 + 60)
    return {"dp2": dp2, "stray": stray, "1p1d": pd}
