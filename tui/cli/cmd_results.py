"""``disagg-tui results``: the comparison table of stored runs; ``results import FILE``: a vllm bench result."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tui.cli import predictions
from tui.cli.context import CliContext, add_global_options
from tui.core import paths, safeio, safewrite
from tui.core.bench import scope, serverside, table
from tui.core.bench.metrics import parse_goodput
from tui.core.bench.store import find_runs, load_runs, write_json
from tui.core.bench.vllmresult import import_vllm_result, record_count
from tui.core.errors import EXIT_OK, InputError
from tui.core.plan.argtext import parse_pairs
from tui.core.plan.gpuspecs import PRESETS

FORMATS = ("table", "csv", "md", "json")


def register(sub: Any) -> None:
    p = sub.add_parser("results", help="compare stored runs; 'results import FILE' reads a vllm bench result",
                       description="Without RUN: every stored run. RUN is a run directory, a campaign name (or "
                                   "directory) or CAMPAIGN/RUN under the runs directory. --campaign NAME: the runs "
                                   "of that campaign only, a run measured on its layouts outside it named and left "
                                   "out. A run that failed, was stopped or completed no request is a row of its "
                                   "own, in no figure. 'results import FILE...' stores vllm bench serve "
                                   "--save-result JSON files as runs.")
    p.add_argument("runs", nargs="*", metavar="RUN", help="runs or campaigns (or: import FILE...)")
    p.add_argument("--format", "-f", choices=FORMATS, default="table", help="output format (default table)")
    p.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--goodput", nargs="+", metavar="KEY:MS",
                   help="recompute goodput under these SLOs (ttft:MS tpot:MS e2el:MS) from the records")
    p.add_argument("--topology", metavar="T", help="import: the topology the result was measured on")
    p.add_argument("--workload", metavar="W", help="import: the workload name to file it under")
    p.add_argument("--campaign", metavar="NAME",
                   help="the runs of this campaign only (import: the campaign to store under, default imported)")
    p.add_argument("--gpu", choices=sorted(PRESETS), help="import: the GPU model it ran on (for its prediction)")
    p.add_argument("--serve-env", action="append", default=[], metavar="K=V",
                   help="import: an environment variable the servers ran with (e.g. VLLM_USE_FLASHINFER_SAMPLER=0)")
    p.add_argument("--server-log", metavar="FILE",
                   help="import: the server's log during the run (a Triton JIT compile it logged flags the run)")
    add_global_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    if args.runs and args.runs[0] == "import":
        return run_import(args, ctx, args.runs[1:])
    slo = parse_goodput(args.goodput or [])
    if args.campaign is not None and args.runs:
        raise InputError("give RUN or --campaign, not both", field="--campaign")
    if args.campaign is not None and not args.campaign.strip():
        raise InputError("empty; name a campaign (see 'disagg-tui results')", field="--campaign")
    runs, damaged = load_runs(find_runs(args.runs))
    for err in damaged:  # a copied folder with a broken file: listed, never the end of the others
        ctx.warn(f"damaged run left out: {err.one_line()}")
    if not runs:
        if damaged:
            raise InputError(f"no run could be read ({len(damaged)} damaged: see the warnings)", field="RUN")
        raise InputError("no runs stored yet", field="RUN", hint="run 'disagg-tui bench' or 'disagg-tui run'")
    scoped = scope.scope_runs(runs, args.campaign or scope.ALL_RUNS)
    runs = scoped.runs
    cells = table.build_cells(runs, slo or None)
    if args.format == "json":
        text = safeio.dumps_strict({"rows": table.cell_rows(cells),
                                    "runs": [{"run": r.id, "status": r.meta.status, "path": str(r.path),
                                              "flags": r.meta.flags, "simulated": r.simulated,
                                              "prediction": predictions.prediction_for(ctx, r) if r.summary
                                              else None,
                                              "kv_xfer": r.meta.kv_xfer, "ttft_breakdown": r.meta.ttft_breakdown,
                                              **({"left_out": r.unusable} if r.unusable else {})}
                                             for r in runs],
                                    **({"campaign": scoped.campaign,
                                        "not_part_of_campaign": [r.id for r in scoped.apart]}
                                       if scoped.campaign else {}),
                                    "damaged": [{"path": err.file, "error": err.one_line()} for err in damaged]},
                                   indent=2, default=str)
    else:
        df = table.comparison_frame(cells)
        text = {"table": table.render_text, "csv": table.render_csv, "md": table.render_markdown}[args.format](df)
        for note in (table.simulated_note(runs), table.like_for_like_note(runs), table.unknown_flags_note(runs),
                     scope.apart_note(scoped)):
            if note and args.format != "csv":  # a CSV stays one table; its rows' runs say it (--format json)
                text += "\n" + (f"_{note}_" if args.format == "md" else note)
        if args.format != "csv":
            spec = table.spec_decode_lines(cells)
            if spec:
                text += "\n" + "\n".join(spec)
            side = predictions.render(ctx, runs, markdown=args.format == "md")
            if side:
                text += "\n\n" + side
    if args.output:
        try:
            target = Path(args.output)  # all or nothing, never through a link (a /tmp name a teammate planted)
            safewrite.write_atomic(target, text + "\n", mode=0o644, root=paths.root_for(target))
        except OSError as exc:
            raise InputError(f"cannot write: {exc.strerror or exc}", file=args.output, field="--output") from None
        print(f"wrote {args.output}", file=ctx.err)
    else:
        ctx.print(text)
    for r in runs:
        if r.meta.status != "complete":
            ctx.warn(f"{safeio.shown(r.id)}: {r.meta.status}"
                     + (f" ({safeio.shown(r.meta.message)})" if r.meta.message else ""))
        elif r.unusable:
            ctx.warn(f"{safeio.shown(r.id)}: {r.unusable}: in no figure")
    return EXIT_OK


def run_import(args: argparse.Namespace, ctx: CliContext, files: list[str]) -> int:
    if not files:
        raise InputError("give the result file(s) to import", field="import")
    extra: dict[str, Any] = {}
    if args.gpu:
        extra["fingerprint"] = {"gpus": [{"index": 0, "name": PRESETS[args.gpu].name}], "imported": True}
    if args.server_log:
        log = Path(args.server_log)
        if not log.is_file():
            raise InputError("no such file", file=log, field="--server-log")
        jit = serverside.jit_lines({str(log): 0})
        if jit:
            extra.update(triton_jit=jit, flags=["triton-jit"])
    env = dict(parse_pairs(args.serve_env, "--serve-env"))
    for flag, value in (("--topology", args.topology), ("--workload", args.workload)):
        if value is not None and not value.strip():  # would fall back to the file's silently
            raise InputError("empty; give a name or leave the flag out (the result file's is used)", field=flag)
    for f in files:
        run = import_vllm_result(Path(f), campaign=args.campaign or "imported", topology=args.topology,
                                 workload=args.workload,
                                 meta_extra=dict(extra) if extra else None)
        if env:  # what the servers ran with, where a prediction reads it (a plan's first server)
            write_json(run.path / "plan.json", {"imported": True, "topology": run.meta.topology,
                                                "servers": [{"argv": [], "env": env}]})
        n = record_count(run)
        ctx.print(f"imported {f} as {run.id} ({run.path}; {n} request records)")
    return EXIT_OK
