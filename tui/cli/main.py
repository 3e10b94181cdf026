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
from typing import Any, NoReturn

from tui import __version__
from tui.cli.context import CliContext, add_global_options, add_hosts_option
from tui.core.errors import EXIT_BAD_INPUT, AppError, printable
from tui.core.procs import reset_ignored_sigint

#: each command and the module that registers it (``register(sub)``; a module may register several), in help order
COMMANDS: dict[str, str] = {
    "plan": "tui.cli.cmd_plan",
    "up": "tui.cli.cmd_lifecycle", "status": "tui.cli.cmd_lifecycle", "down": "tui.cli.cmd_lifecycle",
    "proxy": "tui.cli.cmd_proxy",
    "watch": "tui.cli.cmd_watch",
    "follow": "tui.cli.cmd_follow",
    "bench": "tui.cli.cmd_bench",
    "run": "tui.cli.cmd_run",
    "results": "tui.cli.cmd_results",
    "predict": "tui.cli.cmd_predict",
    "knobs": "tui.cli.cmd_knobs",
    "diagnose": "tui.cli.cmd_playbook", "playbook": "tui.cli.cmd_playbook", "doctor": "tui.cli.cmd_playbook",
    "profile": "tui.cli.cmd_profile",
    "console": "tui.cli.cmd_console",
    "replay": "tui.cli.cmd_replay",
    "web": "tui.cli.cmd_web",
    "export": "tui.cli.cmd_bundle", "import": "tui.cli.cmd_bundle",
    "hosts": "tui.cli.cmd_hosts",
}
COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(COMMANDS.values()))


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a mistake in one line (and exit 2) instead of usage plus message, and takes a flag
    only as written: no prefix of a longer one (``run --record`` is not ``--record-to``); the commands' parsers
    and theirs are of this class too (argparse gives a sub-parser its parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # a value argparse quotes may be pasted from anywhere: one printable line (parse errors print before ctx.err)
        self.exit(EXIT_BAD_INPUT, printable(f"{self.prog}: error: {message} (see '{self.prog} --help')") + "\n")


def _top_parser(**kwargs: Any) -> OneLineParser:
    parser = OneLineParser(
        prog="disagg-tui",
        description="Decide by measurement how to serve a model on this GPU host: tensor parallel, data parallel "
                    "or disaggregated prefill/decode (vLLM). Without a command: help and a host summary.",
        **kwargs,
    )
    parser.add_argument("--version", action="version", version=f"disagg-tui {__version__}")
    add_global_options(parser, top_level=True)
    add_hosts_option(parser, top_level=True)  # bare ``disagg-tui --hosts a,b``: the console with them
    return parser


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser: every command's (``command`` given: only the module that registers it is imported)."""
    parser = _top_parser()
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    modules = (COMMANDS[command],) if command in COMMANDS else COMMAND_MODULES
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The command an argv names (the global options, and where their values are, known): what ``main`` builds
    the parser for, so that a start imports only that command's module (``--version`` exits here)."""
    first = _top_parser(add_help=False)
    first.add_argument("command", nargs="?")
    first.add_argument("rest", nargs=argparse.REMAINDER)
    known, _ = first.parse_known_args(list(argv))
    command: str | None = known.command
    return command


def main(argv: Sequence[str] | None = None) -> int:
    reset_ignored_sigint()
    argv = list(argv) if argv is not None else sys.argv[1:]
    # httpx's own command-line client loads rich and click when httpx is imported; nothing here runs it
    sys.modules.setdefault("httpx._main", None)  # type: ignore[assignment]
    parser = build_parser(command_of(argv))
    args = parser.parse_args(argv)
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
        _state_notes(ctx)
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
        _state_notes(ctx)
        ctx.close()


def _state_notes(ctx: CliContext) -> None:
    """The state files' warnings (a layout's record that does not read back, quarantined; a layout across hosts
    left out of ``clusters.json``), one ``warning:`` line each; only where the command read them."""
    for module in ("tui.core.launch.state", "tui.core.remote.record"):
        state = sys.modules.get(module)
        if state is not None:
            for note in state.drain_notes():
                ctx.warn(note)


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
