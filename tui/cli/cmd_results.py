"""``disagg-tui results``: the comparison table of stored runs; ``results import FILE``: a vllm bench result."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tui.cli.context import CliContext, add_global_options
from tui.core.bench import table
from tui.core.bench.metrics import parse_goodput
from tui.core.bench.store import find_runs, import_vllm_result, load_run
from tui.core.errors import EXIT_OK, InputError

FORMATS = ("table", "csv", "md", "json")


def register(sub: Any) -> None:
    p = sub.add_parser("results", help="compare stored runs; 'results import FILE' reads a vllm bench result",
                       description="Without RUN: every stored run. RUN is a run directory, a campaign name (or "
                                   "directory) or CAMPAIGN/RUN under the runs directory. 'results import FILE...' "
                                   "stores vllm bench serve --save-result JSON files as runs.")
    p.add_argument("runs", nargs="*", metavar="RUN", help="runs or campaigns (or: import FILE...)")
    p.add_argument("--format", "-f", choices=FORMATS, default="table", help="output format (default table)")
    p.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--goodput", nargs="+", metavar="KEY:MS",
                   help="recompute goodput under these SLOs (ttft:MS tpot:MS e2el:MS) from the records")
    p.add_argument("--topology", metavar="T", help="import: the topology the result was measured on")
    p.add_argument("--workload", metavar="W", help="import: the workload name to file it under")
    p.add_argument("--campaign", metavar="NAME", default="imported", help="import: campaign (default imported)")
    add_global_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    if args.runs and args.runs[0] == "import":
        return run_import(args, ctx, args.runs[1:])
    slo = parse_goodput(args.goodput or [])
    runs = [load_run(p) for p in find_runs(args.runs)]
    if not runs:
        raise InputError("no runs stored yet", field="RUN", hint="run 'disagg-tui bench' or 'disagg-tui run'")
    cells = table.build_cells(runs, slo or None)
    if args.format == "json":
        import json

        text = json.dumps({"rows": table.cell_rows(cells),
                           "runs": [{"run": r.id, "status": r.meta.status, "path": str(r.path),
                                     "flags": r.meta.flags, "simulated": r.simulated,
                                     "kv_xfer": r.meta.kv_xfer, "ttft_breakdown": r.meta.ttft_breakdown}
                                    for r in runs]},
                          indent=2, default=str)
    else:
        df = table.comparison_frame(cells)
        text = {"table": table.render_text, "csv": table.render_csv, "md": table.render_markdown}[args.format](df)
        note = table.simulated_note(runs)
        if note and args.format != "csv":  # a CSV stays one table; its rows' runs say it (results --format json)
            text += "\n" + (f"_{note}_" if args.format == "md" else note)
    if args.output:
        try:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write: {exc.strerror or exc}", file=args.output, field="--output") from None
        print(f"wrote {args.output}", file=ctx.err)
    else:
        ctx.print(text)
    for r in runs:
        if r.meta.status != "complete":
            ctx.warn(f"{r.id}: {r.meta.status}" + (f" ({r.meta.message})" if r.meta.message else ""))
    return EXIT_OK


def run_import(args: argparse.Namespace, ctx: CliContext, files: list[str]) -> int:
    if not files:
        raise InputError("give the result file(s) to import", field="import")
    for f in files:
        run = import_vllm_result(Path(f), campaign=args.campaign, topology=args.topology, workload=args.workload)
        n = len(run.records())
        ctx.print(f"imported {f} as {run.id} ({run.path}; {n} request records)")
    return EXIT_OK
