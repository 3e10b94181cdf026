"""``disagg-tui run``: a campaign — every topology up in turn, every workload run, the table, a recommendation.

Running the same command again resumes the campaign (its default name is derived from the cells), skipping every
finished run; ``--campaign NAME`` names it, ``--fresh`` starts a new one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from tui.cli import predictions
from tui.cli.cmd_bench import (
    add_traffic_options,
    flag_text,
    options_from_args,
    run_async,
    vllm_bench_fn,
)
from tui.cli.common import launch_request, make_plan
from tui.cli.context import CliContext, add_global_options, split_list
from tui.cli.progress import ProgressLine
from tui.cli.recording import SessionRecording, add_record_options
from tui.core.bench import recommend as rec_mod
from tui.core.bench import table
from tui.core.bench.campaign import BenchFn, CampaignResult, CampaignRunner, CampaignSpec, CellOutcome, Lifecycle
from tui.core.bench.serverside import EnergyReader, nvml_energy_reader
from tui.core.errors import EXIT_FAILED, EXIT_OK, AppError, InputError
from tui.core.events import EventBus
from tui.core.launch import lifecycle as core_lifecycle
from tui.core.launch import ownership
from tui.core.models import Workload, parse_rate
from tui.core.plan import knobs as knobs_mod
from tui.core.plan.knobs import KnobCatalog
from tui.core.plan.launchargs import add_hosts_arguments
from tui.core.plan.request import LaunchRequest, add_plan_arguments
from tui.core.topology import parse_topologies


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="campaign: bring each topology up, run each workload, compare, recommend",
                       description="Bring each topology up in turn (checking the GPUs are free between layouts), "
                                   "run each workload (and rate), tear down; then print the comparison table and a "
                                   "recommendation per objective. The same command resumes an interrupted "
                                   "campaign. Exit 1 when some cells failed (the rest of the table is printed).")
    add_plan_arguments(p, topology_metavar="T1,T2", topology_help="the topologies to compare, comma-separated "
                       "(tp<N>, dp<N>, <X>p<Y>d, <X>p<Y>d-tp<K>)", knob_metavar="[ROLE.]NAME=V1,V2",
                       knob_help="a serve knob axis crossed with the topologies (profiles/knobs.yaml; "
                                 "'disagg-tui knobs' lists them), e.g. spec=off,ngram:4 attn=auto,triton "
                                 "decode.mnbt=2048,8192; repeatable (each a layout per value)")
    p.add_argument("--workload", "-w", required=True, metavar="W1,W2", help="workload names or files, comma-separated")
    p.add_argument("--rates", metavar="R1,R2|auto",
                   help="request rates to sweep (req/s or inf), or auto: saturation, then fractions of it")
    p.add_argument("--include-kv-slow-path", action="store_true",
                   help="judge runs flagged kv-slow-path (KV over TCP or host memory) in the recommendation too")
    p.add_argument("--fresh", action="store_true", help="start a new campaign even if this one exists")
    add_traffic_options(p, single=False)
    add_record_options(p, default_on=True)
    add_hosts_arguments(p)
    add_global_options(p)
    p.set_defaults(handler=run)


def parse_rates(text: str | None) -> list[float] | str | None:
    if text is None:
        return None
    if text.strip().lower() == "auto":
        return "auto"
    return [parse_rate(part, field="--rates") for part in split_list(text, "--rates")]


def default_name(spec: CampaignSpec) -> str:
    digest = hashlib.sha1(json.dumps(spec.cells_key(), sort_keys=True).encode()).hexdigest()[:8]  # noqa: S324
    return f"{spec.model}-{digest}"


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    topologies = [t.name for t in parse_topologies(args.topology)]
    axes = KnobCatalog.load().axes(list(args.knob or []))
    request = launch_request(argparse.Namespace(**{**vars(args), "knob": []}), ctx, topology=topologies[0])
    wl_refs = split_list(args.workload, "--workload")
    workloads: dict[str, Workload] = {}
    for ref in wl_refs:
        w = ctx.catalog.workload(ref)
        workloads[w.name] = w.with_overrides(
            burstiness=args.burstiness, max_concurrency=args.max_concurrency, range_ratio=args.range_ratio,
            prefix_len=args.prefix_len)
    profile = ctx.catalog.model(args.model)
    spec = CampaignSpec(name="", model=profile.id, topologies=topologies, workloads=list(workloads),
                        rates=parse_rates(args.rates), repeat=args.repeat, seed=args.seed or 0,
                        num_prompts=args.num_prompts, goodput={}, warmup=-1 if args.warmup is None else args.warmup,
                        simulated=bool(getattr(args, "sim", False)), client=args.runner,
                        knobs=[a.text for a in axes])
    host = ctx.host
    across = None
    if args.hosts:  # a campaign across hosts: each layout planned, started and stopped by every host's disagg-tui
        from tui.cli.cmd_across import AcrossCampaign

        across = AcrossCampaign(args, ctx, request, args.campaign or "")
        spec.host = across.label
        spec.simulated = all(e.sim for e in across.hosts.inventory.hosts if e.name in across.hosts.names)
    elif host.simulated:
        o = ctx.host_options()
        spec.host = (f"sim:{host.facts.gpus[0].name if host.facts.gpus else '?'}x{len(host.facts.gpus)} "
                     f"clock {o.sim_clock or 1.0:g}")
        spec.simulated = True
    else:
        spec.host = host.facts.hostname
        spec.simulated = False
    spec.name = args.campaign or default_name(spec)
    if across is not None:
        across.owner = f"campaign {spec.name}"
    if args.fresh and not args.campaign:
        spec.name = f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    vocab = profile.shape.vocab_size
    # each layout records the campaign as its owner (a second console's benchmark, stop or restart of it asks
    # first) and the request of its topology (what a restart replays once the campaign is done)
    lifecycle: Lifecycle = core_lifecycle.OwnedLifecycle(
        owner=ownership.owner("campaign", name=spec.name),
        requests=lambda topo: dataclasses.replace(request, topology=topo))
    progress = ProgressLine(ctx.err, enabled=not args.quiet)

    def options(wl: Workload) -> Any:
        return options_from_args(args, wl, vocab, ctx.api_key)

    spec.goodput = options(next(iter(workloads.values()))).goodput
    gpus = _gpu_count(request, ctx, topologies) if across is None else \
        next((n for n in map(across.gpu_count, topologies) if n), None)

    def configs(topo: str) -> list[knobs_mod.Configuration]:
        return knobs_mod.configurations(axes, topo)

    def knob_planner(topo: str, config: knobs_mod.Configuration) -> Any:
        settings = tuple((s.key, s.choice.value) for s in config.settings)
        if across is not None:
            return across.plan(topo, settings)
        return make_plan(dataclasses.replace(request, knobs=settings), ctx, topo)

    if axes:
        refused = _refused_layouts(topologies, configs, knob_planner)
        for line in refused:
            ctx.error(f"refused: {line}")
        total = sum(len(configs(t)) for t in topologies)
        if len(refused) == total:
            raise InputError(f"every combination of {', '.join(topologies)} × "
                             f"{' × '.join(a.text for a in axes)} is refused here (above)", field="--knob")

    def energy_for(gpu_ids: Sequence[int]) -> EnergyReader | None:
        if across is not None:  # another host's GPUs: no NVML counter here
            return None
        try:
            return nvml_energy_reader(host.nvml(), list(gpu_ids))
        except Exception:  # noqa: BLE001 - energy is optional: no NVML (or no counter), no energy figure
            return None

    # every layout of a campaign serves this profile
    bench: BenchFn | None = vllm_bench_fn(args, ctx, args.model) if args.runner == "vllm" else None

    bus = EventBus()
    with SessionRecording(ctx, args, "run", bus) as session:
        runner = CampaignRunner(spec=spec, lifecycle=lifecycle if across is None else across, host=host,
                                planner=(lambda topo: make_plan(request, ctx, topo)) if across is None else
                                across.plan, workloads=workloads,
                                options=options, bus=bus, notify=lambda s: progress.text(s), on_tick=progress.tick,
                                energy_for=energy_for, bench=bench, configs=configs if axes else None,
                                knob_planner=knob_planner if axes else None,
                                fingerprint_for=across.fingerprint if across is not None else None)
        try:
            result: CampaignResult = run_async(session.around(runner.run()))
        except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, or SIGTERM (run_async cancels the campaign)
            progress.end()
            ctx.error(f"interrupted: run the same command again to resume campaign {spec.name}")
            return 130
        finally:
            if across is not None:
                across.close()
        progress.end()
        return report(args, ctx, result, workloads, gpus, session)


def _refused_layouts(topologies: Sequence[str], configs: Any, planner: Any) -> list[str]:
    """Every (topology, knob configuration) the planner refuses, one line each, before anything starts."""
    out = []
    for topo in topologies:
        for config in configs(topo):
            try:
                planner(topo, config)
            except AppError as exc:
                out.append(f"{topo} [{config.label}]: {exc.title}")
    return out


def _gpu_count(request: LaunchRequest, ctx: CliContext, topologies: list[str]) -> int | None:
    """GPUs per layout: the most any topology the planner accepts takes (tp1 beside 1p1d: 2, what the
    disaggregated one splits between its roles); a refused one fails its cells later."""
    counts = []
    for topo in topologies:
        try:
            counts.append(len(make_plan(request, ctx, topo)[1].gpus))
        except AppError:
            continue
    return max(counts, default=None)


REFUSED = "plan refused: "


def failed_lines(outcomes: Sequence[CellOutcome]) -> list[str]:
    """A line per failed cell, except that the cells a plan refused with the same reason are one line naming
    their layouts (EP on a dense model refuses every layout with ep=on, with each workload and rate)."""
    out: list[str] = []
    refused: dict[str, list[str]] = {}
    for o in outcomes:
        if o.message.startswith(REFUSED):
            names = refused.setdefault(o.message, [])
            if o.cell.layout not in names:
                names.append(o.cell.layout)
            continue
        out.append(f"{o.cell.layout}/{o.cell.workload}@{o.cell.rate if o.cell.rate is not None else 'default'}"
                   f": {o.message}")
    for message, layouts in refused.items():
        out.append(f"refused before start, {len(layouts)} layout(s) ({', '.join(layouts)}): "
                   f"{message.removeprefix(REFUSED)}")
    return out


def report(args: argparse.Namespace, ctx: CliContext, result: CampaignResult, workloads: dict[str, Workload],
           gpus: int | None, session: SessionRecording | None = None) -> int:
    runs = result.runs()
    predictions.attach_all(ctx, runs)
    cells = table.build_cells(runs, result.spec.goodput or None)
    failed = failed_lines(result.failed)
    rec = rec_mod.recommend(cells, workloads, gpus=gpus, slo=result.spec.goodput or None,
                            repeats=result.spec.repeat, failed=failed,
                            include_flagged=("kv-slow-path",) if getattr(args, "include_kv_slow_path", False)
                            else ())
    if rec.slo_derived:  # the goodput column under the SLO the recommendation used
        cells = table.build_cells(runs, slo_by_workload=rec.slo)
    with session.results("run", result.spec.name) if session is not None else _nothing() as recorded:
        _print_report(args, ctx, result, cells, rec)
        recorded["rows"] = table.cell_rows(cells)
        recorded["recommendation"] = rec.to_dict()
    if not args.json:
        print(f"results: {result.directory}", file=ctx.err)
    _pacing_warnings(ctx, runs)
    for line in failed:
        ctx.error(line if line.startswith("refused before start") else f"cell failed: {line}")
    return EXIT_FAILED if result.failed else EXIT_OK


@contextlib.contextmanager
def _nothing() -> Iterator[dict[str, Any]]:
    yield {}


def _print_report(args: argparse.Namespace, ctx: CliContext, result: CampaignResult, cells: list[table.Cell],
                  rec: rec_mod.Recommendation) -> None:
    if args.json:
        rows = table.cell_rows(cells)
        for o in result.failed:
            row: dict[str, Any] = {"topology": o.cell.topology, "workload": o.cell.workload, "status": o.status,
                                   "error": o.message}
            if o.cell.rate is not None:
                row["rate"] = o.cell.rate
            rows.append(row)
        ctx.print_json({"rows": rows, "recommendation": rec.to_dict(), "campaign": str(result.directory),
                        "host": result.spec.host, "simulated": result.spec.simulated})
    else:
        note = table.simulated_note(result.runs())
        if note:
            ctx.print(f"{note}; host {result.spec.host}")
        if cells:
            ctx.print(table.render_text(table.comparison_frame(cells)))
            unlike = table.like_for_like_note(result.runs())
            if unlike:
                ctx.print(unlike)
            for line in table.spec_decode_lines(cells):
                ctx.print(line)
            if rec.slo_derived:
                ctx.print("goodput under the derived SLO: " + "; ".join(
                    f"{w}: " + ", ".join(f"{k} ≤ {v:g} ms" for k, v in slo.items()) for w, slo in rec.slo.items()))
            ctx.print()
        ctx.print(rec_mod.render(rec))


def _pacing_warnings(ctx: CliContext, runs: Sequence[Any]) -> None:
    """Say which runs the simulated servers could not pace, and the clock that would have held for all of them."""
    for r in runs:
        if "sim-diverged" in r.meta.flags:
            ctx.warn(f"{r.id}: {flag_text('sim-diverged', r)}")
    over = [r for r in runs if "sim-overloaded" in r.meta.flags]
    if not over:
        return
    for r in over:
        ctx.warn(f"{r.id}: {flag_text('sim-overloaded', r)}")
    pacing = [r.meta.sim_pacing or {} for r in over]
    held = min(float(p.get("held_clock", 1.0)) for p in pacing)
    reached = min(float(p.get("clock", 1.0)) * (1.0 - float(p.get("share", 0.0))) for p in pacing)
    head = f"{len(over)} of {len(runs)} run(s) flagged sim-overloaded and kept out of the recommendation"
    ctx.warn(f"{head}: run the campaign again with --sim-clock {held:g} or lower" if reached >= 1 else
             f"{head}: the slowest reached {reached:.2f}× real time on this machine; at --sim-clock 1 it would "
             "still lag: send fewer requests at once, or use a less loaded machine")
