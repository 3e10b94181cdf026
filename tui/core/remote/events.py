"""What the remote hosts' streams publish: a tick of a remote ``watch --json``, a host that cannot be reached (and
why), a host reached again. Frozen, JSON round-tripping events like every other source's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tui.core.events import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteTick(Event):
    """One line of a remote ``disagg-tui watch --json``: that host's GPUs and servers at one sample."""

    kind: ClassVar[str] = "remote_tick"
    host: str
    tick: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostUnreachable(Event):
    """A host that cannot be reached now: ``reason`` is one word (refused, timeout, auth, host-key, dns,
    network, closed, stalled, remote-failed, ssh-missing, ssh-failed, too-large), ``detail`` one line; another
    try in ``retry_in_s``."""

    kind: ClassVar[str] = "host_unreachable"
    host: str
    reason: str
    detail: str = ""
    retry_in_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HostReconnected(Event):
    """A host reached again after ``down_s`` seconds unreachable."""

    kind: ClassVar[str] = "host_reconnected"
    host: str
    down_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteEvent(Event):
    """A lifecycle event of another host's layout (a line of its ``follow --json``: a log line, a phase, ready, a
    diagnosis), checked as a recording's event is; :meth:`inner` is the event itself."""

    kind: ClassVar[str] = "remote_event"
    host: str
    event: dict[str, Any] = field(default_factory=dict)

    def inner(self) -> Event:
        from tui.core.events import event_from_dict

        return event_from_dict(self.event)
