"""``disagg-tui plan``: the exact commands and environment of a layout, with the preflight report apart."""

from __future__ import annotations

import argparse
from typing import Any

from tui.cli.common import launch_request, make_plan
from tui.cli.context import CliContext, add_global_options
from tui.core.errors import EXIT_OK
from tui.core.plan.launchargs import add_hosts_arguments
from tui.core.plan.planner import LaunchPlan
from tui.core.plan.preflight import preflight
from tui.core.plan.request import add_plan_arguments


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="show the exact commands and environment of a layout (nothing runs)",
                       description="Print the launch plan as copy-paste shell (or JSON); the preflight report "
                                   "goes to stderr, apart from the commands.")
    add_plan_arguments(p)
    p.add_argument("--json", action="store_true", help="print the plan and preflight as JSON")
    p.add_argument("--no-preflight", action="store_true", help="skip the preflight checks")
    add_hosts_arguments(p)
    add_global_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    if args.hosts:
        from tui.cli.cmd_across import run_plan

        return run_plan(args, ctx)
    _profile, launch = make_plan(launch_request(args, ctx), ctx)
    checks = [] if args.no_preflight else preflight(launch, ctx.host.facts, ctx.nvml_or_none())
    if args.json:
        ctx.print_json({"plan": launch.redacted_dict(), "preflight": [c.to_dict() for c in checks]})
    else:
        ctx.print(launch.shell())
    for w in launch.warnings:
        ctx.warn(w)
    if checks and not args.json:
        print("preflight:", file=ctx.err)
        for c in checks:
            print("  " + c.line(), file=ctx.err)
    if not args.no_preflight and not args.json:
        for line in cold_start_notes(ctx, launch):
            print(line, file=ctx.err)
    return EXIT_OK


def cold_start_notes(ctx: CliContext, launch: LaunchPlan) -> list[str]:
    """Before a cold start: that it will JIT-compile FlashInfer kernels (the plan uses FlashInfer, nothing prebuilt,
    nvcc can run) and how long the last cold start of this plan took here."""
    import os

    from tui.core.launch.history import StartupHistory, plan_key
    from tui.core.launch.subphases import cache_state
    from tui.core.playbook.doctor import check_flashinfer_cubin

    facts = ctx.host.facts
    fi = check_flashinfer_cubin(facts, launch, dict(os.environ),
                                StartupHistory().cold_hint(plan_key(launch), launch.servers[0].name)
                                if launch.servers else "")
    if launch.servers and cache_state({**os.environ, **launch.servers[0].env_dict()},
                                      list(launch.servers[0].argv)) == "cold" and fi.status != "pass":
        return [f"note: cold start: {fi.reason}"]
    return []
