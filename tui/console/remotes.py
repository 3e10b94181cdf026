"""The other hosts the console follows (``--hosts``): what each one's stream said, folded for drawing.

Each remote host is one :class:`RemoteView`: its last tick, checked (:mod:`tui.console.remotetick`) and turned
into the console's own GPU and server views (the same widgets draw them), whether it is unreachable now (the
reason, the detail, when the next try comes) and what was left out of it (ticks of the wrong shape). The views are
folded from the same events a live stream publishes and a recording keeps (``RemoteTick``, ``HostUnreachable``,
``HostReconnected``), so a replay draws the hosts as the live console did.

A source of those events is anything with ``events()`` (:class:`RemoteSource`): ``RemoteHost.watch()`` (one SSH
session streaming the remote ``watch --json``), or a fake in the tests. No Textual here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from tui.console import fmt
from tui.console.remotetick import HostTick, TickError, read_tick
from tui.console.views import GPUS, HEADER, SERVERS, GpuView, ServerView
from tui.core.events import Event
from tui.core.remote.events import HostReconnected, HostUnreachable, RemoteTick

Notes = deque[tuple[str, str, str]]

#: the remote hosts one console follows (the inventory's own limit)
MAX_HOSTS = 64
#: the distinct reasons of bad ticks each host is told about (the rest are counted in its header line)
BAD_REASONS_TOLD = 8


class RemoteSource(Protocol):
    """What the console follows a remote host through: ``RemoteWatch`` (``RemoteHost.watch()``) or a test's fake."""

    def events(self, seconds: float | None = None) -> AsyncIterator[Event]: ...


class ConsoleState(Protocol):
    """What of the console's state the hosts are folded into (``state.ConsoleState``)."""

    clock: Callable[[], float]
    remotes: dict[str, RemoteView]
    host_notes: Notes
    dirty: set[str]


@dataclass
class RemoteView:
    name: str
    tick: HostTick | None = None
    #: when the last good tick arrived (the console's clock)
    received: float = 0.0
    gpus: dict[int, GpuView] = field(default_factory=dict)
    servers: dict[str, ServerView] = field(default_factory=dict)
    #: unreachable now (None: reachable, or not heard from yet)
    down: HostUnreachable | None = None
    #: since when it is unreachable (the first HostUnreachable of this outage)
    down_since: float = 0.0
    #: ticks of the wrong shape skipped, and the reasons already told
    bad: int = 0
    told: set[str] = field(default_factory=set)

    @property
    def simulated(self) -> bool:
        return self.tick is not None and self.tick.simulated


def view_of(state: ConsoleState, host: str) -> RemoteView | None:
    view = state.remotes.get(host)
    if view is None:
        if len(state.remotes) >= MAX_HOSTS:
            return None
        view = state.remotes[host] = RemoteView(name=host)
    return view


def apply_tick(state: ConsoleState, ev: RemoteTick) -> None:
    view = view_of(state, ev.host)
    if view is None:
        return
    try:
        tick = read_tick(ev.tick)
    except TickError as err:
        view.bad += 1
        reason = str(err)
        if reason not in view.told and len(view.told) < BAD_REASONS_TOLD:
            view.told.add(reason)
            state.host_notes.append((f"{ev.host}: a tick skipped", reason, "warning"))
        state.dirty.add(GPUS)
        return
    now = state.clock()
    view.tick, view.received = tick, now
    if view.down is not None:  # a tick: reached again (the stream says so first; a recording begun late may not)
        view.down, view.down_since = None, 0.0
    for g in tick.gpus:
        gv = view.gpus.get(g.index)
        if gv is None:
            gv = view.gpus[g.index] = GpuView(sample=g, received=now)
        gv.sample, gv.received = g, now
        gv.util.append(g.util_gpu or 0.0)
    for gone in set(view.gpus) - {g.index for g in tick.gpus}:
        del view.gpus[gone]
    names = [s.name for s in tick.servers]
    if list(view.servers) != names:
        view.servers = {n: view.servers.get(n) or ServerView(name=n, host=ev.host) for n in names}
    for s in tick.servers:
        sv = view.servers[s.name]
        sv.role, sv.url = s.role, s.url
        sv.health, sv.health_at = s.health, now
        sv.figures, sv.metrics_error, sv.metrics_at = s.figures, s.metrics_error, now
        sv.gpus = tuple(sorted({g.index for g in tick.gpus for p in g.processes if p.owner == s.name}))
    state.dirty.update((GPUS, SERVERS, HEADER))


def apply_unreachable(state: ConsoleState, ev: HostUnreachable) -> None:
    view = view_of(state, ev.host)
    if view is None:
        return
    if view.down is None:
        view.down_since = ev.ts
    view.down = ev
    state.dirty.update((GPUS, SERVERS))


def apply_reconnected(state: ConsoleState, ev: HostReconnected) -> None:
    view = view_of(state, ev.host)
    if view is None:
        return
    view.down, view.down_since = None, 0.0
    state.host_notes.append((f"{ev.host} reconnected", f"{ev.host} is reachable again after "
                             f"{fmt.duration(ev.down_s)} down", "information"))
    state.dirty.update((GPUS, SERVERS))


def declare(state: ConsoleState, names: tuple[str, ...] | list[str]) -> None:
    """The hosts this console follows, in the order given (drawn before their first event: "connecting")."""
    for n in names:
        view_of(state, n)


def notes() -> Notes:
    """What the app tells the operator once: (title, message, severity)."""
    return deque(maxlen=32)
