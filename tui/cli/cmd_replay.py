"""``disagg-tui replay FILE``: a recorded session, in the console (when installed) or as a headless summary."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

from tui.cli.cmd_console import on_terminal
from tui.cli.context import CliContext, add_global_options
from tui.core import paths
from tui.core.errors import EXIT_OK, InputError
from tui.core.record import Recording
from tui.core.record.format import SUFFIX
from tui.core.record.summary import render, summarize, summary_dict

CONSOLE_REPLAY = "tui.console.replay"


def register(sub: Any) -> None:
    p = sub.add_parser("replay", help="replay a recorded session (the console, or --headless: its summary)",
                       description="Open a recording made by 'run' (recorded by default), 'up/bench/watch "
                                   "--record' or the console. Without --headless the console replays it on the "
                                   "same screens (pause, speed, seek, jumps to markers); --headless prints the "
                                   "session's summary: layouts and their startup timings, diagnoses, failures, "
                                   "and the results table exactly as it was printed. A name without a folder is "
                                   "also looked for among your recordings and the shipped samples.")
    p.add_argument("file", metavar="FILE", help="a .dtrec recording")
    p.add_argument("--headless", action="store_true", help="print the summary instead of opening the console")
    p.add_argument("--json", action="store_true", help="the summary as JSON (implies --headless)")
    p.add_argument("--markers", action="store_true", help="also list the markers (phase changes, diagnoses, "
                                                          "finished runs, failures) with their times")
    p.add_argument("--speed", type=float, default=1.0, metavar="X", help="console replay speed 0.5-100 (default 1)")
    add_global_options(p)
    p.set_defaults(handler=run)


def resolve(name: str) -> Path:
    """The recording a name means: the path itself, else the same name under your recordings or the shipped ones
    (``recordings/<name>`` works from anywhere after install)."""
    p = Path(name)
    if p.exists():
        return p
    candidates = []
    for base in (paths.recordings_dir(), paths.shipped_recordings_dir()):
        for n in (p.name, p.name + SUFFIX):
            candidates.append(base / n)
    for c in candidates:
        if c.exists():
            return c
    raise InputError("no such recording", file=name,
                     hint=f"recordings are in {paths.recordings_dir()}; samples in {paths.shipped_recordings_dir()}")


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    path = resolve(args.file)
    if not 0.5 <= args.speed <= 100:
        raise InputError(f"must be within 0.5-100, got {args.speed:g}", field="--speed")
    headless = args.headless or args.json or not on_terminal()  # no terminal (a pipe, CI): the summary
    if not headless:
        console = importlib.import_module(CONSOLE_REPLAY)
        code: int = console.replay(path, speed=args.speed)
        return code
    with Recording.open(path) as recording:
        summary = summarize(recording)
        if args.json:
            data = summary_dict(summary)
            if args.markers:
                data["markers"] = [m.to_list() for m in recording.markers]
            ctx.print_json(data)
        else:
            ctx.out.write(render(summary))
            if args.markers:
                ctx.out.write("\nmarkers:\n")
                for m in recording.markers:
                    ctx.out.write(f"  {m.ts - recording.start:9.1f} s  {m.kind:<9} {m.label}\n")
            ctx.out.flush()
        if recording.damage is not None:
            ctx.warn(f"{path}: {recording.damage}; replayed up to there")
        elif recording.bad_events:
            ctx.warn(f"{path}: {recording.bad_events} damaged events left out (the first {recording.first_bad})")
    return EXIT_OK
