"""``disagg-tui predict``: the simulator as a predictor — a decision map (which topology wins where, per
objective), labelled PREDICTED; ``predict --calibrate`` fits this host's correction factors to its measured runs.

The predictions come from the simulator's performance model (the one the simulated server paces its tokens with),
evaluated in virtual time: a map of dozens of cells takes seconds, not the hours real runs would.
"""

from __future__ import annotations

import argparse
import itertools
import math
from typing import Any

from tui.cli.argtypes import positive_int
from tui.cli.context import CliContext, add_global_options
from tui.core.bench.metrics import parse_goodput
from tui.core.bench.store import find_runs, load_runs
from tui.core.errors import EXIT_OK, AppError, InputError
from tui.core.plan import knobs as knobs_mod
from tui.core.plan.gpuspecs import PRESETS, GpuSpec, spec_for_name
from tui.core.plan.hostfacts import sim_facts
from tui.core.plan.knobs import KnobCatalog
from tui.core.plan.request import LaunchRequest, plan_request
from tui.core.topology import parse_topologies, parse_topology
from tui.hosts import predictor, runpredict

ABBREV = {"max_throughput": "throughput", "min_tpot": "TPOT", "max_goodput": "goodput"}


def register(sub: Any) -> None:
    p = sub.add_parser("predict", help="PREDICTED decision map: which topology wins where (simulator, seconds)",
                       description="Sweep input/output lengths (and rates) through the simulator's performance "
                                   "model in virtual time and print, per objective (max output throughput, min "
                                   "TPOT, max goodput under an SLO), which topology wins in each region, the "
                                   "crossovers and by what margin, and the real runs that would confirm the nearest "
                                   "crossover. --calibrate fits this host's correction factors to its measured "
                                   "runs first.")
    p.add_argument("--model", "-m", help="model profile id (required for the map)")
    p.add_argument("--gpus", type=positive_int, default=None, metavar="N", help="GPUs per layout (default: this "
                   "host's count, else 2)")
    p.add_argument("--gpu", choices=sorted(PRESETS), help="GPU model (default: this host's)")
    p.add_argument("--isl", default="128..32768", metavar="A..B|A,B,...",
                   help="input lengths: a range (×4 steps) or a list (default 128..32768)")
    p.add_argument("--osl", default="64..4096", metavar="A..B|A,B,...",
                   help="output lengths: a range (×4 steps) or a list (default 64..4096)")
    p.add_argument("--rate", default="inf", metavar="R1,R2",
                   help="request rates (req/s; inf = all at once, the default)")
    p.add_argument("--num-prompts", type=positive_int, default=128, metavar="N", help="requests per cell (128)")
    p.add_argument("--knob", action="append", default=[], metavar="[ROLE.]NAME=V1,V2",
                   help="a serve knob axis crossed with the topologies, as run --knob takes it (profiles/knobs.yaml): "
                        "the map names the winning topology and knobs per cell; repeatable")
    p.add_argument("--topology", "-t", metavar="T1,T2", help="the topologies to compare (default: those that use "
                   "every GPU: dp<N>, tp<N>, <N/2>p<N/2>d)")
    p.add_argument("--goodput", action="append", metavar="KEY:MS",
                   help="SLO for goodput (ttft:MS, tpot:MS, e2el:MS; default TPOT ≤ 1.5× the best decode TPOT)")
    p.add_argument("--nvcc", dest="nvcc", action="store_true", default=None,
                   help="assume nvcc is usable (FlashInfer kernels); default: this host's facts")
    p.add_argument("--no-nvcc", dest="nvcc", action="store_false",
                   help="assume no nvcc (the seed's host: Triton attention on Blackwell, no FlashInfer sampler)")
    p.add_argument("--calibrate", action="store_true",
                   help="fit this host's correction factors to measured runs (RUN... or every stored real run), "
                        "store them with the host fingerprint, print factors and residuals")
    p.add_argument("--no-calibration", action="store_true", help="ignore this host's stored calibration")
    p.add_argument("runs", nargs="*", metavar="RUN", help="--calibrate: runs or campaigns to fit to")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_global_options(p)
    p.set_defaults(handler=run)


def _lengths(text: str, flag: str) -> list[int]:
    t = text.strip()
    try:
        if ".." in t:
            a_s, b_s = t.split("..", 1)
            a, b = int(a_s), int(b_s)
            if a <= 0 or b < a:
                raise ValueError
            out = []
            v = a
            while v < b:
                out.append(v)
                v *= 4
            out.append(b)
            return out
        vals = sorted({int(x) for x in t.split(",") if x.strip()})
    except ValueError:
        raise InputError(f"expected A..B or a comma-separated list of positive integers, got {text!r}",
                         field=flag) from None
    if not vals or vals[0] <= 0:
        raise InputError(f"expected positive token counts, got {text!r}", field=flag)
    return vals


def _rates(text: str) -> list[float | None]:
    out: list[float | None] = []
    for part in text.split(","):
        p = part.strip().lower()
        if not p:
            continue
        if p == "inf":
            out.append(None)
            continue
        try:
            v = float(p)
        except ValueError:
            raise InputError(f"not a rate: {part!r}", field="--rate") from None
        if not math.isfinite(v) or v <= 0:
            raise InputError(f"not a positive rate: {part!r}", field="--rate")
        out.append(v)
    return out or [None]


def _spec(args: argparse.Namespace, ctx: CliContext) -> tuple[GpuSpec, int, bool]:
    facts = ctx.host.facts
    spec = PRESETS[args.gpu] if args.gpu else None
    if spec is None and facts.gpus:
        spec = spec_for_name(facts.gpus[0].name)
    gpus = args.gpus or (len(facts.gpus) if facts.gpus else 2)
    nvcc = facts.toolchain.nvcc_usable if args.nvcc is None else bool(args.nvcc)
    return spec or PRESETS["b200"], gpus, nvcc


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    if args.calibrate:
        return calibrate(args, ctx)
    if not args.model:
        raise InputError("give --model (a profile id) for the map, or --calibrate", field="--model")
    profile = ctx.catalog.model(args.model)
    spec, gpus, nvcc = _spec(args, ctx)
    corr, source = (None, "none") if args.no_calibration else runpredict.load_calibration(ctx.host.facts, spec.name)
    stack = predictor.stack_for(spec, nvcc=nvcc)
    slo = parse_goodput(args.goodput or [])
    seed_points = [(i, o) for i, o, _ in predictor.SEED_POINTS]
    topologies = [t.name for t in parse_topologies(args.topology)] if args.topology else \
        predictor.topologies_for(gpus)
    configs, refused = knob_configs(args.knob, profile, topologies, ctx, gpus, spec.name, nvcc)
    m = predictor.decision_map(profile, spec, gpus, isls=_lengths(args.isl, "--isl"), osls=_lengths(args.osl, "--osl"),
                               rates=_rates(args.rate), stack=stack, correction=corr, calibration_source=source,
                               slo_ms=slo or None, num_prompts=args.num_prompts, points=seed_points,
                               topologies=topologies, configs=configs or None)
    if refused:
        drop_refused(m, refused)
    if args.json:
        ctx.print_json(m.to_dict())
        return EXIT_OK
    ctx.print(render_map(m, profile.max_model_len, knobs=[a for a in args.knob]))
    return EXIT_OK


def knob_configs(texts: list[str], profile: Any, topologies: list[str], ctx: CliContext, gpus: int, gpu: str,
                 nvcc: bool) -> tuple[dict[str, dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]],
                                      dict[str, str]]:
    """The map's configurations from ``--knob`` axes (label → role → (vllm words, variables); the label names the
    values other than vLLM's default), and each (topology, configuration) the planner refuses here, with why."""
    if not texts:
        return {}, {}
    axes = KnobCatalog.load().axes(texts)
    facts = ctx.host.facts
    if not facts.gpus or len(facts.gpus) < gpus or facts.gpus[0].name != gpu or facts.toolchain.nvcc_usable != nvcc:
        preset = next((k for k, v in PRESETS.items() if v.name == gpu), "b200")
        facts = sim_facts(preset, gpus, nvcc=nvcc, vllm_version=(facts.vllm.version if facts.vllm else None)
                          or "0.24.0")
    configs: dict[str, dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]] = {}
    refused: dict[str, str] = {}
    for combo in itertools.product(*(a.settings() for a in axes)):
        label = " ".join(s.text for s in combo if not s.choice.is_default)
        roles: dict[str, tuple[list[str], list[tuple[str, str]]]] = {}
        for s in combo:
            keys = [s.role] if s.role else (["*"] if len(s.choice.knob.roles) == 3 else list(s.choice.knob.roles))
            for k in keys:
                words, env = roles.setdefault(k, ([], []))
                words.extend(s.choice.words())
                env.extend(s.choice.env())
        configs[label] = {k: (tuple(w), tuple(e)) for k, (w, e) in roles.items()}
        for topo in topologies:
            applies = [s for s in combo if s.applies(parse_topology(topo))]
            try:
                _, base = plan_request(LaunchRequest(model=profile.id if profile.id in ctx.catalog.models else
                                                     profile.source or profile.id, topology=topo), ctx.catalog, facts)
            except AppError as exc:
                refused[predictor.candidate_name(topo, label)] = exc.one_line()
                continue
            why = knobs_mod.refusals(applies, profile, base, facts)
            if why:
                refused[predictor.candidate_name(topo, label)] = why[0]
    return configs, refused


def drop_refused(m: Any, refused: dict[str, str]) -> None:
    """Leave the candidates the planner refuses out of every cell's winners (they are listed with why)."""
    for c in m.cells:
        c.predictions = {k: p for k, p in c.predictions.items() if k not in refused}
        c.winners = predictor.winners(c.predictions)
    m.refused.update(refused)


def _margin(m: float | None) -> str:
    if m is None:
        return ""
    return f"+{m:.0%}" if m < 1 else f"{1 + m:.1f}×"


def render_map(m: Any, max_model_len: int, knobs: list[str] | None = None) -> str:
    calib = m.calibration_source if m.calibration_source.startswith("none") else (
        ", ".join(f"{k} {v:.2f}" for k, v in m.calibration.items()) + f" ({m.calibration_source})")
    slo = ", ".join(f"{k} ≤ {v:g} ms" for k, v in m.slo_ms.items()) or "none"
    lines = [f"PREDICTED (simulator, not measured) — {m.model} on {m.gpus}× {m.gpu}; {m.stack}; "
             f"{m.num_prompts} prompts per cell; calibration: {calib}; goodput SLO: {slo}",
             f"topologies: {', '.join(m.topologies)}"]
    labels = [k for k in getattr(m, "configurations", {}) if k]
    if labels:
        lines.append(f"knob configurations ({len(labels) + 1}): (none: vLLM's defaults), " + ", ".join(labels)
                     + "; a winner named without knobs (tp2) runs vLLM's defaults")
    for t, why in sorted(m.refused.items()):
        lines.append(f"  {t}: {why}")
    isls, osls = m.isls, m.osls
    rates = sorted({c.rate for c in m.cells}, key=lambda r: math.inf if r is None else r)
    for obj in predictor.OBJECTIVES:
        for rate in rates:
            head = predictor.OBJECTIVE_TITLES[obj] + (f" at {rate:g} req/s" if rate is not None else
                                                      " (all requests at once)")
            lines += ["", f"{head}: winner and margin over the runner-up, input (rows) × output tokens (columns)"]
            width = max(14, 2 + max((len(w[0]) + 5 for c in m.cells for w in c.winners.values()), default=0))
            lines.append("  in\\out".ljust(9) + "".join(str(o).rjust(width) for o in osls))
            for i in isls:
                row = f"  {i}".ljust(9)
                for o in osls:
                    c = m.cell(i, o, rate)
                    w = c.winners.get(obj) if c is not None else None
                    text = "-" if c is None else (f"{w[0]} {_margin(w[1]) or 'alone'}" if w else "none")
                    row += text.rjust(width)
                lines.append(row)
    lines += ["", "seed workloads (the seed's 2× B200 table):"]
    for isl, osl, name in predictor.SEED_POINTS:
        for rate in rates:
            c = m.cell(isl, osl, rate)
            if c is None:
                continue
            parts = [f"{ABBREV[o]} {w[0]} {_margin(w[1])}".strip() for o, w in c.winners.items()]
            lines.append(f"  {name} ({isl} in / {osl} out): " + "; ".join(parts))
    cross = m.crossovers()
    lines += ["", f"crossovers ({len(cross)}):"]
    for x in cross[:12]:
        (a_i, a_o), (b_i, b_o) = x["between"]
        lines.append(f"  {ABBREV[x['objective']]}: {x['from']} → {x['to']} between {a_i}/{a_o} and {b_i}/{b_o} "
                     f"(in/out tokens)" + ("" if x["rate"] is None else f" at {x['rate']:g} req/s"))
    if len(cross) > 12:
        lines.append(f"  … {len(cross) - 12} more (--json)")
    if m.skipped:
        lines.append(f"skipped {len(m.skipped)} grid cell(s) beyond max_model_len {max_model_len} ('-')")
    sugg = m.suggestions()
    if sugg:
        topo = sorted({t for s in sugg for t in s["topologies"]})
        wls = ",".join(dict.fromkeys(s["workload"] for s in sugg))
        lines += ["", "to confirm the nearest crossover by measurement:",
                  f"  disagg-tui run --model {m.model} --topology {','.join(topo)} --workload {wls}"
                  + "".join(f" --knob {k}" for k in (knobs or []))]
    return "\n".join(lines)


def calibrate(args: argparse.Namespace, ctx: CliContext) -> int:
    facts = ctx.host.facts
    runs, damaged = load_runs(find_runs(args.runs))
    for err in damaged:
        ctx.warn(f"damaged run left out: {err.one_line()}")
    gpu = PRESETS[args.gpu] if args.gpu else None
    used, skipped = runpredict.fit_runs(runs, ctx.catalog, gpu)
    if not used:
        why = "; ".join(f"{r}: {w}" for r, w in skipped[:5]) or "no runs stored"
        raise InputError(f"no measured run to calibrate against ({why})", field="--calibrate",
                         hint="run 'disagg-tui bench' or 'run' on the real host, or 'results import FILE'")
    gpus = sorted({r.spec.name for r in used})
    if len(gpus) > 1:
        raise InputError(f"the runs were measured on several GPU models ({', '.join(gpus)}): calibrate one at a time "
                         "(name its runs or campaigns)", field="--calibrate")
    fit = predictor.fit_correction(used)
    path = runpredict.save_calibration(facts, fit, [r.label for r in used], gpus[0])
    if args.json:
        ctx.print_json({"host": runpredict.host_key(facts), "gpu": gpus[0], "file": str(path),
                        "factors": fit.correction.to_dict(),
                        "bounds": list(predictor.CORRECTION_BOUNDS), "rms_log_residual_before": fit.before,
                        "rms_log_residual_after": fit.after, "residuals": fit.residuals,
                        "skipped": [{"run": r, "why": w} for r, w in skipped]})
        return EXIT_OK
    lo, hi = predictor.CORRECTION_BOUNDS
    ctx.print(f"calibration for host {runpredict.host_key(facts)} ({gpus[0]}) from {len(used)} measured run(s) "
              f"(factors bounded to {lo:g}..{hi:g}):")
    for k, v in fit.correction.to_dict().items():
        ctx.print(f"  {k}: {v:.3f}")
    ctx.print(f"RMS log residual: {fit.before:.3f} uncorrected → {fit.after:.3f} corrected")
    ctx.print("residuals per run (measured / predicted, corrected):")
    for row in fit.residuals:
        cells = [f"{predictor.METRIC_TITLES[k]} {row[k]['measured']:,.1f} / {row[k]['predicted']:,.1f} = "
                 f"{row[k]['ratio']:.2f}" for k in predictor.METRICS if k in row]
        ctx.print(f"  {row['run']}: " + "; ".join(cells))
    for r, w in skipped:
        ctx.print(f"  skipped {r}: {w}")
    ctx.print(f"stored: {path}")
    return EXIT_OK
