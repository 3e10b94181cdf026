"""A finished simulated knob campaign on disk, written as the store keeps one: per layout (topology × knob values)
its run.json, the plan the planner makes of its knobs (what the table reads the served flags from), the workload
and a summary with the given figures. Nothing is started."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from tui.core.host.base import HostOptions
from tui.core.models import Catalog
from tui.core.plan.request import LaunchRequest, plan_request
from tui.sim.host import SimHost

#: (topology, knob values) → (output tok/s, mean TPOT ms, mean TTFT ms)
Figures = Mapping[tuple[str, tuple[tuple[str, str], ...]], tuple[float, float, float]]


def write_campaign(root: Path, name: str, model: str, axes: list[str], figures: Figures, *, t0: float,
                   workload: str = "decode-heavy") -> None:
    facts, catalog = SimHost(HostOptions(sim=True)).facts, Catalog.load()
    camp = root / name
    camp.mkdir(parents=True, exist_ok=True)
    host = "sim:NVIDIA B200x2 clock 3"
    (camp / "campaign.json").write_text(json.dumps({
        "name": name, "model": model, "topologies": sorted({t for t, _ in figures}), "workloads": [workload],
        "rates": None, "repeat": 1, "seed": 0, "num_prompts": 16, "goodput": {}, "warmup": -1, "simulated": True,
        "host": host, "client": "ours", "knobs": axes, "created": t0 - 3600}))
    for (topology, knobs), (tps, tpot, ttft) in figures.items():
        run = f"{topology}-{workload}" + "".join(f"_{k.replace('.', '-')}-{v}" for k, v in knobs)
        d = camp / run
        d.mkdir(exist_ok=True)
        (d / "run.json").write_text(json.dumps({
            "campaign": name, "name": run, "topology": topology, "workload": workload,
            "request_rate": "inf", "repeat": 1, "status": "complete", "runner": "disagg-tui",
            "started": t0 - 3000, "ended": t0 - 2900, "pid": 0, "model": model, "knobs": dict(knobs),
            "fingerprint": {"simulated": True, "host": host, "model": model, "client": "disagg-tui"}}))
        _, plan = plan_request(LaunchRequest(model=model, topology=topology, knobs=knobs), catalog, facts)
        (d / "plan.json").write_text(json.dumps(plan.to_dict()))
        (d / "workload.json").write_text(json.dumps({"name": workload, "input_len": 512, "output_len": 2048,
                                                     "num_prompts": 16, "request_rate": "inf"}))
        (d / "summary.json").write_text(json.dumps({
            "completed": 16, "failed": 0, "total_input_tokens": 16 * 512, "total_output_tokens": 16 * 2048,
            "output_throughput": float(tps), "mean_tpot_ms": tpot, "p99_tpot_ms": tpot * 1.1,
            "mean_ttft_ms": float(ttft), "request_throughput": tps / 2048, "request_goodput": tps / 2048 * 0.9,
            "duration": 16 * 2048 / tps, "max_concurrency": None, "request_rate": "inf", "burstiness": 1.0,
            "simulated": True}))
