"""``disagg-tui follow``: the layout this host runs, as the console follows it: its lifecycle events (the plan, each
server's launch, every log line from its first, phases, ready, exits, the playbook's diagnoses) as they happen,
whoever started it. ``--json``: one event a line (``Event.to_dict``) and a heartbeat each second, what another
host's console reads over SSH (``tui.core.remote.stream.RemoteFollow``) to show this host's servers' logs."""

from __future__ import annotations

import argparse
import json
import queue
import time
from typing import Any

from tui.cli.argtypes import positive_float
from tui.cli.context import CliContext, add_global_options
from tui.core import safeio
from tui.core.errors import EXIT_OK
from tui.core.events import Event, EventBus

#: seconds between heartbeats of --json (a quiet layout is not a lost host: a reader's stall timer needs lines)
HEARTBEAT_S = 1.0
#: events waiting to be printed at most (a start's whole log at once is thousands of lines)
MAX_QUEUED = 50_000


def register(sub: Any) -> None:
    p = sub.add_parser("follow", help="the layout this host runs, as events: launches, log lines, phases, "
                                      "diagnoses (what another host's console reads over SSH)",
                       description="Follow the layout this host runs, whoever started it: every log line of its "
                                   "servers from the first, their start-up phases, ready and exit, and the "
                                   "playbook's diagnoses. --json prints one event a line and a heartbeat each "
                                   "second.")
    p.add_argument("--json", action="store_true", help="JSON Lines: each event, and a heartbeat each second")
    p.add_argument("--seconds", type=positive_float, metavar="S", help="stop after S seconds (default: until "
                                                                        "Ctrl-C)")
    add_global_options(p)
    p.set_defaults(handler=run)


def _line(ev: Event) -> str:
    d = ev.to_dict()
    server = d.get("server") or d.get("name") or ""
    text = d.get("text") or d.get("label") or d.get("title") or d.get("message") or d.get("status") or ""
    return safeio.shown(f"{d['kind']:<16} {server:<12} {text}".rstrip(), 2000)


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    from tui.core.follow import LayoutFollower
    from tui.core.launch.history import StartupHistory
    from tui.core.launch.state import StateStore
    from tui.core.playbook import load_playbook

    store = StateStore()
    bus = EventBus()
    events: queue.Queue[Event] = queue.Queue(MAX_QUEUED)

    def put(ev: Event) -> None:
        try:
            events.put_nowait(ev)
        except queue.Full:  # a reader that stopped reading: drop, never stall the follower
            pass

    bus.subscribe(put)
    follower = LayoutFollower(bus, store, load_playbook(), history=StartupHistory(store.root),
                              sim_startup_s=ctx.host.sim_startup_s())
    follower.start()
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    next_beat = time.monotonic()
    out = ctx.out
    try:
        while deadline is None or time.monotonic() < deadline:
            try:
                ev = events.get(timeout=0.2)
            except queue.Empty:
                ev = None
            if ev is not None:
                out.write((json.dumps(ev.to_dict(), separators=(",", ":")) if args.json else _line(ev)) + "\n")
            now = time.monotonic()
            if args.json and now >= next_beat:
                out.write(json.dumps({"kind": "heartbeat", "ts": time.time()}) + "\n")
                next_beat = now + HEARTBEAT_S
            if ev is None or events.empty():
                out.flush()
    except (KeyboardInterrupt, BrokenPipeError):
        pass
    finally:
        follower.stop()
    return EXIT_OK
