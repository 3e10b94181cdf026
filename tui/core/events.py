"""One stream of typed, immutable, timestamped events.

Sources (NVML sampler, server poller, supervisor, load generator, replay reader) publish events; consumers (the
console, the headless CLI, the recorder, the playbook matcher, the results store) subscribe. Every event class is
a frozen dataclass with a wall-clock ``ts`` and a class-level ``kind`` string, and round-trips through plain JSON
(``to_dict``/``event_from_dict``) so a recording replays into the same consumers.

Event classes of a subsystem live next to it (``tui.core.telemetry.events``, ...) and register themselves here by
subclassing :class:`Event`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tui.core import typedread

_REGISTRY: dict[str, type[Event]] = {}


def now() -> float:
    return time.time()


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every event. ``kind`` names the class in recordings; ``ts`` is epoch seconds."""

    kind: ClassVar[str] = "event"
    ts: float = field(default_factory=now)

    def __init_subclass__(cls) -> None:
        # no zero-argument super() here: dataclass(slots=True) rebuilds the class, which breaks its __class__ cell
        kind = cls.__dict__.get("kind")
        if isinstance(kind, str) and kind != "event":
            if kind in _REGISTRY and _REGISTRY[kind].__qualname__ != cls.__qualname__:
                raise TypeError(f"event kind {kind!r} registered twice")
            _REGISTRY[kind] = cls

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            out[f.name] = _to_jsonable(getattr(self, f.name))
        return out


def _to_jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    return value


def registered_kinds() -> dict[str, type[Event]]:
    return dict(_REGISTRY)


def event_from_dict(data: Any) -> Event:
    """Rebuild an event from ``to_dict`` output (a recording's line, an events file's). Raises ``ValueError`` for
    an unknown kind, an unknown field, a missing one or one of the wrong type or range
    (:class:`tui.core.typedread.FieldError` names it): what a file holds is checked before it becomes an event."""
    if not isinstance(data, dict):
        raise ValueError("an event must be a JSON object")
    kind = data.get("kind")
    cls = _REGISTRY.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown event kind: {typedread.described(kind)}")
    return typedread.read(cls, data, unknown="error", skip=_KIND)


_KIND = frozenset({"kind"})


# --- generic events shared by several subsystems -------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice(Event):
    """Something the operator should read: ``level`` is info, warning or error."""

    kind: ClassVar[str] = "notice"
    level: str
    message: str
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorAction(Event):
    """Something the operator did (the console publishes these; the CLI for the commands it runs): ``action`` is
    a short verb (``up``, ``down``, ``apply_fix``, ``bench``, ``run``, ``export``, ``import``, ``key``...), ``target``
    what it acted on (a layout, a run, a campaign), ``detail`` the rest as plain data (secrets are redacted when
    recorded)."""

    kind: ClassVar[str] = "operator_action"
    action: str
    target: str = ""
    source: str = ""  # console | cli
    detail: dict[str, Any] = field(default_factory=dict)


# --- the bus ---------------------------------------------------------------------------------------------------

Subscriber = Callable[[Event], None]


class EventBus:
    """Synchronous fan-out on one thread, with a thread-safe door for sources that run in worker threads.

    ``publish`` calls every subscriber in order on the caller's thread. ``publish_threadsafe`` hands the event
    to the loop attached with ``attach_loop`` (or publishes directly when none is attached). ``stream`` gives an
    async iterator with a bounded queue; when the consumer falls behind, the oldest events are dropped and
    counted in ``dropped`` (back-pressure never stalls a source).
    """

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)

        return unsubscribe

    def publish(self, event: Event) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for fn in subscribers:
            fn(event)

    def publish_threadsafe(self, event: Event) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            self.publish(event)
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.publish(event)
        else:
            loop.call_soon_threadsafe(self.publish, event)

    def stream(self, maxsize: int = 10_000) -> EventStream:
        return EventStream(self, maxsize)


class EventStream:
    """An async iterator over a bus with a bounded queue (oldest dropped when full)."""

    def __init__(self, bus: EventBus, maxsize: int) -> None:
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize)
        self.dropped = 0
        self._unsubscribe = bus.subscribe(self._put)

    def _put(self, event: Event) -> None:
        if self._queue.full():
            try:
                self._queue.get_nowait()
                self.dropped += 1
            except asyncio.QueueEmpty:
                pass
        self._queue.put_nowait(event)

    def close(self) -> None:
        self._unsubscribe()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        return await self._queue.get()

    async def get(self, wait_s: float | None = None) -> Event | None:
        """The next event, or None after ``wait_s`` seconds without one."""
        try:
            return await asyncio.wait_for(self._queue.get(), wait_s)
        except TimeoutError:
            return None
