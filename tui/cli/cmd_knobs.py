"""``disagg-tui knobs``: the serve-knob catalogue (``profiles/knobs.yaml`` and the operator's own), each knob's
values and what each adds to ``vllm serve``; with ``--model`` and ``--topology``, which values do not fit this host
and why (the planner's refusals, before anything starts)."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from tui.cli.context import CliContext, add_global_options
from tui.core.errors import EXIT_OK, AppError, InputError
from tui.core.plan.knobs import KnobCatalog, knob_lines
from tui.core.plan.request import LaunchRequest, plan_request


def register(sub: Any) -> None:
    p = sub.add_parser("knobs", help="the serve knobs run --knob, up --knob and predict --knob take",
                       description="List the serve-knob catalogue: each knob's vLLM flag or variable, its values, "
                                   "the servers it may be set on (a role prefix, decode.NAME, sets one role of a "
                                   "disaggregated layout) and the vLLM versions it exists in. With --model and "
                                   "--topology, each value that cannot work here says why.")
    p.add_argument("--model", "-m", metavar="M", help="judge the values for this model")
    p.add_argument("--topology", "-t", metavar="T", help="... as this topology (default tp1)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_global_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    catalog = KnobCatalog.load()
    profile = plan = None
    if args.model:
        try:
            profile, plan = plan_request(LaunchRequest(model=args.model, topology=args.topology or "tp1"),
                                         ctx.catalog, ctx.host.facts)
        except AppError as exc:
            raise InputError(f"cannot judge the knobs: {exc.one_line()}", field="--model") from None
    elif args.topology:
        raise InputError("--topology judges the knobs for a model: give --model too", field="--topology")
    rows = knob_lines(catalog, profile, ctx.host.facts if profile is not None else None, plan)
    if args.json:
        ctx.print_json({"knobs": rows, **({"model": profile.id, "topology": plan.topology}
                                          if profile is not None and plan is not None else {})})
        return EXIT_OK
    if profile is not None and plan is not None:
        ctx.print(f"knobs for {profile.id} as {plan.topology} on {ctx.host.facts.label}:")
    width = max((len(v["value"]) for r in rows for v in r["values"]), default=10) + 2
    for r in rows:
        roles = "" if len(r["roles"]) == 3 else f"  [{', '.join(r['roles'])} servers only]"
        until = f", until {r['vllm']['until']}" if r["vllm"]["until"] else ""
        ctx.print(f"{r['name']}: {r['title']}{roles}  (vLLM {r['vllm']['since']}+{until})")
        for line in textwrap.wrap(r["description"], 100):
            ctx.print(f"    {line}")
        for v in r["values"]:
            mark = "default" if v["default"] else ("REFUSED" if v["refused"] else "")
            text = f"  {v['value']:<{width}} {mark:<8} {v['adds']}"
            if v["note"]:
                text += f"  — {v['note']}"
            ctx.print(text.rstrip())
            if v["refused"]:
                ctx.print(f"  {'':<{width}} {'':<8} {v['refused']}")
    ctx.print("sweep with: disagg-tui run ... --knob NAME=V1,V2 (a role's: --knob decode.NAME=...); one value: "
              "disagg-tui up ... --knob NAME=V")
    return EXIT_OK
