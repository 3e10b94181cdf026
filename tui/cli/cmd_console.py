"""``disagg-tui console`` (and bare ``disagg-tui`` on a terminal): the operator console on this host.

The global flags choose the host as for every command (``--sim``, or the simulated host where no NVIDIA driver
answers). Without a terminal (a pipe, CI) the bare command prints help and the host summary instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from tui.cli.context import CliContext, add_global_options
from tui.core.errors import EXIT_BAD_INPUT, EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser("console", help="the operator console (the default on a terminal)",
                       description="Open the console: GPUs, servers, launches, benchmarks, campaigns, results and "
                                   "the playbook in one screen. Servers and campaigns it starts keep running when "
                                   "it quits; a console opened later reattaches.")
    add_global_options(p)
    p.set_defaults(handler=run)


def on_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty() and os.environ.get("TERM", "") not in ("", "dumb")


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    if not on_terminal():
        ctx.error("the console needs a terminal (stdin and stdout a TTY); the headless commands work anywhere")
        return EXIT_BAD_INPUT
    from tui.console.main import run_console

    code = run_console(ctx.host_options(), host=ctx.host)
    return EXIT_OK if code is None else int(code)
