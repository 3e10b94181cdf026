"""The other hosts the console follows (``--hosts``): what each one's stream said, folded for drawing.

Each remote host is one :class:`RemoteView`: its last tick, checked (:mod:`tui.console.remotetick`) and turned
into the console's own GPU and server views (the same widgets draw them), whether it is unreachable now (the
reason, the detail, when the next try comes) and what was left out of it (ticks of the wrong shape). The views are
folded from the same events a live stream publishes and a recording keeps (``RemoteTick``, ``HostUnreachable``,
``HostReconnected``), so a replay draws the hosts as the live console did.

The host's layout is folded from a second stream, its ``follow --json`` (``RemoteHost.follow()``: ``RemoteEvent``s
of its launches, every log line, phases, ready, exits and its own playbook's diagnoses): each inner event goes to
that host's own server views (``RemoteView.servers``, keyed by the server's name on that host, so ``decode-0`` on
two hosts are two views), by the same folding as this host's (``views.fold_server``), bounded the same way (the
log pane's 1,000 lines a server); the layout's status and its diagnoses are kept per host.

A source of those events is anything with ``events()`` (:class:`RemoteSource`): ``RemoteHost.watch()`` (one SSH
session streaming the remote ``watch --json``) or ``RemoteHost.follow()``, or a fake in the tests. No Textual here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from tui.console import fmt
from tui.console.remotetick import HostTick, TickError, read_tick
from tui.console.views import (
    BAND,
    GPUS,
    HEADER,
    LIFECYCLE,
    LOG,
    SERVERS,
    GpuView,
    ServerView,
    fold_gpu,
    fold_server,
    printable_diagnosis,
)
from tui.core.errors import printable
from tui.core.events import Event
from tui.core.launch.events import LayoutChanged
from tui.core.playbook import Diagnosis
from tui.core.remote.events import HostReconnected, HostUnreachable, RemoteEvent, RemoteTick

Notes = deque[tuple[str, str, str]]

#: the remote hosts one console follows (the inventory's own limit)
MAX_HOSTS = 64
#: the distinct reasons of bad ticks each host is told about (the rest are counted in its header line)
BAD_REASONS_TOLD = 8
#: servers of one remote layout followed from its events (as a tick's), diagnoses kept of it
MAX_FOLLOWED = 64
DIAGNOSES = 32


@dataclass
class FollowedLayout:
    """A remote host's layout as its ``follow --json`` says (``LayoutChanged``): its status as it changes."""

    id: str
    status: str
    topology: str
    profile_id: str
    endpoint: str
    note: str = ""
    since: float = 0.0


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
    #: its layout as its follow stream says (None: none up, or not heard of)
    layout: FollowedLayout | None = None
    #: the servers its follow stream launched in that layout (kept between ticks that do not list them yet)
    followed: set[str] = field(default_factory=set)
    #: its own playbook's diagnoses of that layout
    diagnoses: list[Diagnosis] = field(default_factory=list)
    #: lifecycle events that were not events of this version (skipped)
    bad_events: int = 0

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
        fold_gpu(view.gpus, g, now)
    for gone in set(view.gpus) - {g.index for g in tick.gpus}:
        del view.gpus[gone]
    names = [s.name for s in tick.servers]
    names += [n for n in view.servers if n in view.followed and n not in names]  # launched, not yet in a tick
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


def _server(view: RemoteView, name: str) -> ServerView | None:
    sv = view.servers.get(name)
    if sv is None:
        if len(view.servers) >= MAX_FOLLOWED:
            return None
        sv = view.servers[name] = ServerView(name=name, host=view.name)
    return sv


def _forget_layout(view: RemoteView) -> None:
    """The layout its follow stream told of has gone (stopped, or another one started): its servers' logs go."""
    for name in view.followed:
        view.servers.pop(name, None)
    view.followed = set()
    view.diagnoses = []


def apply_event(state: ConsoleState, ev: RemoteEvent) -> None:
    """One event of a host's follow stream (or a recording of one): folded into that host's views."""
    view = view_of(state, ev.host)
    if view is None:
        return
    try:
        inner = ev.inner()
    except (ValueError, TypeError):  # not an event of this version (a recording's, another host's newer kind)
        view.bad_events += 1
        return
    if isinstance(inner, LayoutChanged):
        _layout(state, view, inner)
    elif isinstance(inner, LIFECYCLE):
        name = printable(str(getattr(inner, "server", ""))[:64])
        sv = _server(view, name) if name else None
        if sv is None:
            view.bad_events += 1
            return
        view.followed.add(name)
        changed = fold_server(sv, inner)
        state.dirty.update((SERVERS, BAND) if changed else (LOG,))
    elif isinstance(inner, Diagnosis):
        _diagnosis(state, view, inner)


def _layout(state: ConsoleState, view: RemoteView, ev: LayoutChanged) -> None:
    old = view.layout
    if old is not None and old.id != ev.layout_id:
        _forget_layout(view)
    since = old.since if old is not None and old.id == ev.layout_id and old.status == ev.status else ev.ts
    if ev.status == "stopped":
        _forget_layout(view)
        view.layout = None
    else:
        view.layout = FollowedLayout(id=printable(ev.layout_id[:120]), status=printable(ev.status[:16]),
                                     topology=printable(ev.topology[:40]), profile_id=printable(ev.profile_id[:80]),
                                     endpoint=printable(ev.endpoint[:120]), note=printable(ev.note[:300]),
                                     since=since)
        if ev.status == "failed" and (old is None or old.status != "failed"):
            state.host_notes.append((f"{view.name}: {ev.topology} failed to start",
                                     f"{ev.note or 'see its servers logs'} (on {view.name})"[:300], "error"))
    state.dirty.update((GPUS, SERVERS, BAND, LOG))


def _diagnosis(state: ConsoleState, view: RemoteView, ev: Diagnosis) -> None:
    if any(d.server == ev.server and d.entry_id == ev.entry_id and d.line_no == ev.line_no for d in view.diagnoses):
        return
    if len(view.diagnoses) >= DIAGNOSES:
        return
    ev = printable_diagnosis(ev)
    view.diagnoses.append(ev)
    sv = view.servers.get(ev.server)
    if sv is not None and ev.line_no is not None:
        sv.mark_line(ev.line_no, ev.entry_id)
    if ev.is_failure:
        state.host_notes.append((f"{view.name}: {ev.server} failed: {ev.entry_id}"[:120], ev.title[:300], "error"))
    state.dirty.update((BAND, LOG))


def diagnosis_of(view: RemoteView, server: str) -> Diagnosis | None:
    """The most severe diagnosis of one of the host's servers."""
    mine = [d for d in view.diagnoses if d.server == server]
    return sorted(mine, key=lambda d: d.sort_key())[0] if mine else None


def declare(state: ConsoleState, names: tuple[str, ...] | list[str]) -> None:
    """The hosts this console follows, in the order given (drawn before their first event: "connecting")."""
    for n in names:
        view_of(state, n)


def notes() -> Notes:
    """What the app tells the operator once: (title, message, severity)."""
    return deque(maxlen=32)
