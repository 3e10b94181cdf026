"""The headless CLI: ``disagg-tui <command>``. Every command drives the same core as the console.

Each command lives in its own module ``tui.cli.cmd_<name>`` with ``register(subparsers)`` adding its
parser (``set_defaults(handler=run)``) and ``run(args, ctx) -> int``. Errors are values: an ``AppError`` becomes
one line on stderr and its exit code (2 for bad input or a refused plan, 1 for a failure); argparse mistakes are
one line and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from tui import __version__
from tui.cli.context import CliContext, add_global_options
from tui.core.errors import EXIT_BAD_INPUT, AppError
from tui.core.procs import reset_ignored_sigint

# (module, command) in help order; a module may register several commands
COMMAND_MODULES: tuple[str, ...] = (
    "tui.cli.cmd_plan",
    "tui.cli.cmd_lifecycle",
    "tui.cli.cmd_proxy",
    "tui.cli.cmd_watch",
    "tui.cli.cmd_bench",
    "tui.cli.cmd_run",
    "tui.cli.cmd_results",
    "tui.cli.cmd_predict",
    "tui.cli.cmd_playbook",
    "tui.cli.cmd_profile",
    "tui.cli.cmd_console",
    "tui.cli.cmd_replay",
    "tui.cli.cmd_bundle",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a mistake in one line (and exit 2) instead of usage plus message."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="disagg-tui",
        description="Decide by measurement how to serve a model on this GPU host: tensor parallel, data parallel "
                    "or disaggregated prefill/decode (vLLM). Without a command: help and a host summary.",
    )
    parser.add_argument("--version", action="version", version=f"disagg-tui {__version__}")
    add_global_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    reset_ignored_sigint()
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    ctx = CliContext.from_args(args)
    try:
        handler = getattr(args, "handler", None)
        if handler is None:
            from tui.cli.cmd_console import on_terminal

            if on_terminal():
                from tui.cli.cmd_console import run as console

                return console(args, ctx)
            from tui.cli.cmd_summary import run as summary

            return summary(args, ctx, parser)
        code: int = handler(args, ctx)
        return code
    except AppError as err:
        ctx.error(err.one_line())
        return err.exit_code
    except KeyboardInterrupt:
        ctx.error("interrupted")
        return 130
    except BrokenPipeError:
        # the reader went away (| head): stop quietly, and keep Python from complaining at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    finally:
        ctx.close()


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
