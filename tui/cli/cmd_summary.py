"""Bare ``disagg-tui`` without a terminal (a pipe, CI): help and a one-screen host summary."""

from __future__ import annotations

import argparse

from tui.cli.context import CliContext
from tui.core.errors import EXIT_OK


def run(args: argparse.Namespace, ctx: CliContext, parser: argparse.ArgumentParser) -> int:
    parser.print_help(ctx.out)
    host = ctx.host
    facts = host.facts
    ctx.print("")
    ctx.print(facts.label)
    for g in facts.gpus:
        ctx.print(f"  GPU {g.index}: {g.name}, {g.memory_total_mib / 1024:.0f} GiB, compute capability "
                  f"{g.compute_capability:.1f}")
    if facts.driver:
        ctx.print(f"  driver {facts.driver}, CUDA {facts.cuda_driver or '?'}")
    v = facts.vllm
    ctx.print(f"  vllm: {v.version + ' at ' + (v.resolved or '?') if v and v.found and v.version else 'not found'}")
    t = facts.toolchain
    ctx.print(f"  nvcc: {t.nvcc or 'none usable'}")
    ctx.print("  models: " + ", ".join(sorted(ctx.catalog.models)))
    ctx.print("  workloads: " + ", ".join(sorted(ctx.catalog.workloads)))
    return EXIT_OK
