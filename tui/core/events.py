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
import types
import typing
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

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


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from ``to_dict`` output. Raises ``ValueError`` for an unknown kind or bad fields."""
    kind = data.get("kind")
    cls = _REGISTRY.get(str(kind))
    if cls is None:
        raise ValueError(f"unknown event kind {kind!r}")
    names, special = _class_plan(cls)
    kwargs = dict(data)
    del kwargs["kind"]
    for key in kwargs:
        if key not in names:
            raise ValueError(f"event {kind!r} has no field {key!r}")
    for key, conv in special:
        if key in kwargs:
            kwargs[key] = conv(kwargs[key])
    return cls(**kwargs)


# Converters from plain JSON back to field types, built once per type (a replay decodes thousands of events a
# second: resolving type hints costs ~2 ms a class, walking them per value ~100 µs an event). Fields whose JSON is
# already their value (str, int, float, bool, Any, a plain dict) get no converter at all.
Converter = typing.Callable[[Any], Any]
_PLANS: dict[type, tuple[frozenset[str], tuple[tuple[str, Converter], ...]]] = {}
_CONVERTERS: dict[Any, Converter | None] = {}


def _class_plan(cls: type) -> tuple[frozenset[str], tuple[tuple[str, Converter], ...]]:
    """A dataclass's field names and the (field, converter) pairs of the fields that need converting."""
    found = _PLANS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        names = frozenset(f.name for f in dataclasses.fields(cls))
        special = []
        for name in sorted(names):
            conv = _converter(hints.get(name, Any))
            if conv is not None:
                special.append((name, conv))
        found = _PLANS[cls] = (names, tuple(special))
    return found


def _converter(tp: Any) -> Converter | None:
    try:
        return _CONVERTERS[tp]
    except KeyError:
        pass
    except TypeError:  # an unhashable annotation: build it every time
        return _build_converter(tp)
    conv = _CONVERTERS[tp] = _build_converter(tp)
    return conv


def _build_converter(tp: Any) -> Converter | None:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) != 1:
            return None
        inner = _converter(non_none[0])
        if inner is None:
            return None
        return lambda v: None if v is None else inner(v)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _converter(args[0])
            if item is None:
                return lambda v: None if v is None else tuple(v)
            return lambda v: None if v is None else tuple(item(x) for x in v)
        convs = [_converter(a) or _identity for a in args]
        return lambda v: None if v is None else tuple(c(x) for c, x in zip(convs, v, strict=False))
    if origin is dict:
        val = _converter(args[1]) if len(args) == 2 else None
        if val is None:
            return None
        return lambda v: None if v is None else {k: val(x) for k, x in v.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        cls = tp

        def build(v: Any) -> Any:
            if not isinstance(v, dict):
                return v
            _names, special = _class_plan(cls)
            kw = dict(v)
            for key, conv in special:
                if key in kw:
                    kw[key] = conv(kw[key])
            return cls(**kw)

        return build
    return None


def _identity(v: Any) -> Any:
    return v


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
