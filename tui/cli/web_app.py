"""One browser tab's console: what ``disagg-tui web`` starts for each WebSocket (``python -m tui.cli.web_app``).

Not a command of its own: the server builds this command line (the CLI's global host flags, so the tab sees the
host the server was started for; ``--watch-only`` unless it was started with ``--operator``; a replay's file) and
textual-serve's relay selects textual's web driver in its environment. The console is the terminal's, attached to
the host's state like any console opened later; a watch-only one records nothing (the operator's own console
records the session) and refuses, saying why, whatever would launch, stop, measure, apply or edit. If the server
goes away without stopping it (killed), the tab's app notices that it was orphaned and quits.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from tui.cli.context import CliContext, add_global_options
from tui.core.errors import EXIT_OK, AppError

#: what a watch-only console says when asked to act
WATCH_ONLY_WHY = "the server was started without --operator"
#: how often the app checks that the server that started it still runs, and how long a quit may take after
ORPHAN_CHECK_S = 2.0
ORPHAN_QUIT_S = 10.0


def parser() -> argparse.ArgumentParser:
    from tui.cli.main import OneLineParser

    p = OneLineParser(prog="disagg-tui web (a tab's console)", description=__doc__)
    add_global_options(p, top_level=True)
    p.add_argument("--watch-only", action="store_true", help="show; launch, stop, measure and edit nothing")
    p.add_argument("--replay", metavar="FILE", help="replay this recording instead of the host")
    p.add_argument("--speed", type=float, default=1.0, help="the replay's speed")
    p.add_argument("--layout-ports", metavar="E,S,C", help="the ports of the layouts this console launches")
    return p


def _ports(text: str | None) -> tuple[int, int, int] | None:
    if not text:
        return None
    e, s, c = (int(x) for x in text.split(","))
    return e, s, c


def _quit_when_orphaned(parent: int) -> None:
    """The server that started this app is gone (killed before it could stop its tabs): quit as a closed tab's app
    does (textual's web driver takes SIGTERM as quit), and exit for good if that does not end it."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK_S)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(ORPHAN_QUIT_S)
    os._exit(1)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(list(argv) if argv is not None else sys.argv[1:])
    threading.Thread(target=_quit_when_orphaned, args=(os.getppid(),), daemon=True, name="orphan-check").start()
    if args.replay:
        from tui.console.replay import make_replay

        app = make_replay(Path(args.replay), speed=args.speed)
        try:
            code = app.run()
        finally:
            app.recording.close()
        return EXIT_OK if code is None else int(code)
    from tui.console.app import make_console

    ctx = CliContext.from_args(args)
    console = make_console(ctx.host_options(), host=ctx.host, ports=_ports(args.layout_ports),
                           record=not args.watch_only)
    if args.watch_only:
        console.ctx.watch_only = WATCH_ONLY_WHY
    code = console.run()
    return EXIT_OK if code is None else int(code)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AppError as err:
        print(f"disagg-tui: error: {err.one_line()}", file=sys.stderr)
        sys.exit(err.exit_code)
