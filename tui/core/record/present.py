"""What a session shows now, kept for a recording that starts after it: the layout, its servers, their phases.

A recorder attached to a bus hears only what is published after it subscribed. A console that reattaches to a
running layout hears the layout, its servers, every phase, ready and the diagnoses in the first half second (the
follower's first look), before its recorder, started in a worker, has subscribed; a recording switched on later
(``ctrl+t``) misses them as well. Its replay then has no layout at all.

:class:`SessionPresent` subscribes to the bus when the session starts and keeps the events that say what is shown
(the latest layout and plan, each server's launch, phases, sub-phases, deferral, ready, exit and stall, the
diagnoses and applied fixes, the last benchmark's start, last tick and end, the last ``log_lines`` lines of each
server, and each remote host's last tick and, while it is down, why, and the events of its layout's stream since that
layout began: ``remote_event``, at most ``REMOTE_EVENTS`` of a host, the oldest log lines dropped first).
:meth:`attach` hands them to a new consumer (a recorder) and then every later event, under one lock: none is lost
between the two and none comes twice.
Periodic figures (GPU samples, health, metrics) are not kept: the next sample comes within a second.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable

from tui.core.events import Event, EventBus, Subscriber

#: lines of each server's log kept (the console's log pane keeps as many)
LOG_LINES = 1000
#: phase events of one server kept (a start has about fifteen)
PHASES = 64
#: diagnoses and applied fixes kept
DIAGNOSES = 100
#: servers of one layout followed (a layout has a handful; a hostile state file may name more)
SERVERS = 64
#: other hosts followed (the inventory's limit)
HOSTS = 64
#: events of one remote host's layout stream kept (its lifecycle events and its servers' last log lines)
REMOTE_EVENTS = 4000

#: what is kept of each server: the latest of each kind
SERVER_KINDS = frozenset({"server_launched", "server_ready", "server_exited", "server_stalled", "server_deferred",
                          "startup_expected"})

_Seq = tuple[int, Event]


class SessionPresent:
    """A bus consumer keeping what a recording started late needs to show the session's present."""

    def __init__(self, bus: EventBus, *, log_lines: int = LOG_LINES) -> None:
        self.log_lines = log_lines
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._sinks: list[Subscriber] = []
        self._reset()
        self._bench: dict[str, _Seq] = {}
        #: each remote host's last tick, and its unreachable event while it is down (not a layout's: kept across)
        self._hosts: dict[str, dict[str, _Seq]] = {}
        #: each remote host's layout stream since its layout began (``remote_event``): (layout id, lifecycle
        #: events, log lines)
        self._remote: dict[str, tuple[str, deque[_Seq], deque[_Seq]]] = {}
        self._unsubscribe = bus.subscribe(self._on_event)

    def _reset(self) -> None:
        self._layout_id = ""
        self._layout: dict[str, _Seq] = {}  # the latest layout_changed and plan_launched
        self._servers: dict[str, dict[str, _Seq]] = {}  # server → launched, ready, exited, stalled, deferred...
        self._phases: dict[str, deque[_Seq]] = {}
        self._subphases: dict[tuple[str, str], _Seq] = {}
        self._logs: dict[str, deque[_Seq]] = {}
        self._diagnoses: deque[_Seq] = deque(maxlen=DIAGNOSES)

    def close(self) -> None:
        self._unsubscribe()

    # --- consumers ---------------------------------------------------------------------------------------------
    def attach(self, sink: Subscriber) -> Callable[[], None]:
        """Give ``sink`` what is kept (in the order it was published), then every event from now on; returns the
        function that detaches it."""
        with self._lock:
            for ev in self.events():
                sink(ev)
            self._sinks.append(sink)

        def detach() -> None:
            with self._lock:
                if sink in self._sinks:
                    self._sinks.remove(sink)

        return detach

    def events(self) -> list[Event]:
        """What is kept, in the order it was published."""
        kept: list[_Seq] = [*self._layout.values(), *self._subphases.values(), *self._diagnoses,
                            *self._bench.values()]
        for per_host in self._hosts.values():
            kept.extend(per_host.values())
        for _, lifecycle, logs in self._remote.values():
            kept.extend(lifecycle)
            kept.extend(logs)
        for per in self._servers.values():
            kept.extend(per.values())
        for phases in self._phases.values():
            kept.extend(phases)
        for lines in self._logs.values():
            kept.extend(lines)
        return [ev for _, ev in sorted(kept, key=lambda s: s[0])]

    # --- the bus's side ----------------------------------------------------------------------------------------
    def _keep_remote(self, item: _Seq) -> None:
        ev = item[1]
        host = str(getattr(ev, "host", ""))
        inner = getattr(ev, "event", None)
        if not isinstance(inner, dict) or (host not in self._remote and len(self._remote) >= HOSTS):
            return
        layout, lifecycle, logs = self._remote.get(host) or ("", deque(maxlen=REMOTE_EVENTS // 4),
                                                             deque(maxlen=REMOTE_EVENTS))
        if inner.get("kind") == "layout_changed" and str(inner.get("layout_id", "")) != layout:
            layout, lifecycle, logs = str(inner.get("layout_id", "")), deque(maxlen=lifecycle.maxlen), \
                deque(maxlen=logs.maxlen)
        (logs if inner.get("kind") == "log_line" else lifecycle).append(item)
        self._remote[host] = (layout, lifecycle, logs)

    def _on_event(self, ev: Event) -> None:
        with self._lock:
            self._keep(ev)
            for sink in self._sinks:
                sink(ev)

    def _keep(self, ev: Event) -> None:
        # by kind, not by class: the recorder's import stays light (the classes live in the parts above it)
        item = (next(self._seq), ev)
        kind = ev.kind
        server = str(getattr(ev, "server", ""))
        if kind in ("layout_changed", "plan_launched"):
            layout_id = str(getattr(ev, "layout_id", ""))
            if layout_id != self._layout_id:
                self._reset()
                self._layout_id = layout_id
            self._layout[kind] = item
        elif kind == "server_phase":
            self._phases.setdefault(server, deque(maxlen=PHASES)).append(item)
        elif kind == "server_subphase":
            self._subphases[(server, str(getattr(ev, "key", "")))] = item
        elif kind == "log_line":
            if server in self._logs or len(self._logs) < SERVERS:
                self._logs.setdefault(server, deque(maxlen=self.log_lines)).append(item)
        elif kind in ("diagnosis", "fix_applied"):
            self._diagnoses.append(item)
        elif kind in SERVER_KINDS:
            if server in self._servers or len(self._servers) < SERVERS:
                self._servers.setdefault(server, {})[kind] = item
        elif kind == "bench_started":
            self._bench = {kind: item}
        elif kind in ("bench_tick", "bench_done"):
            self._bench[kind] = item
        elif kind == "remote_event":
            self._keep_remote(item)
        elif kind in ("remote_tick", "host_unreachable", "host_reconnected"):
            host = str(getattr(ev, "host", ""))
            if host in self._hosts or len(self._hosts) < HOSTS:
                per = self._hosts.setdefault(host, {})
                if kind == "host_reconnected":
                    per.pop("host_unreachable", None)
                else:
                    per[kind] = item
