"""Typed reading of plain data from outside: a dataclass built from a JSON object, each field checked against its
annotation (recordings' events, a benchmark's events file, stored runs, the state file, the start-up history).

A JSON object that parsed (:func:`tui.core.safeio.parse_json`: no NaN, no huge integer, no deep nesting) can still
hold a string where a number belongs, a list where a mapping does, a time of 1e300. :func:`read` builds the
dataclass only when every field it sets has its annotated type:

- ``str`` a string of at most :data:`MAX_TEXT` characters; ``bool`` true or false; ``int`` an integer (not a
  boolean) of at most :data:`MAX_NUMBER` in magnitude; ``float`` an integer or a finite number within the same
  bound (an epoch time, a field named in :data:`TIME_FIELDS`, within ``0..``:data:`TIME_MAX`);
- ``X | None``, ``tuple[X, ...]``, ``tuple[X, Y]``, ``list[X]``, ``dict[str, X]`` (at most :data:`MAX_ITEMS` items)
  and nested dataclasses, checked all the way down; ``Any`` as it is (the parser bounded it).

A field of the wrong type is a :class:`FieldError` (a ``ValueError``) naming it (``processes[2].pid``); a missing
field without a default is one too. The checks are compiled once per type (a replay reads thousands of events a
second).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

#: characters of one string field (a log line is the longest there is)
MAX_TEXT = 1 << 22
#: items of one list, tuple or mapping field
MAX_ITEMS = 1 << 20
#: magnitude of any number field (no count, size or figure of ours comes near; 1e300 is no measurement)
MAX_NUMBER = 1e18
#: epoch seconds at most (the year 2286): a time beyond is no time a session was recorded at
TIME_MAX = 1e10
#: a process id at most (``pid_t`` is a 32-bit integer; a negative or zero one would signal a group)
PID_MAX = 2**31 - 1
#: the fields that hold epoch seconds, by name, in every record read here
TIME_FIELDS = frozenset({"ts", "started", "ended", "created", "create_time", "ready_at", "since"})


class FieldError(ValueError):
    """A field of the wrong type or range: ``field`` is its path (``processes[2].pid``), ``reason`` what is wrong."""

    def __init__(self, reason: str, path: tuple[str | int, ...] = ()) -> None:
        self.reason = reason
        self.path = path
        super().__init__(self.text())

    @property
    def field(self) -> str:
        out = ""
        for part in self.path:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
        return out

    def text(self) -> str:
        return f"field '{self.field}': {self.reason}" if self.path else self.reason

    def inside(self, part: str | int) -> FieldError:
        return FieldError(self.reason, (part, *self.path))


Check = Callable[[Any], Any]


def described(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        text = value if len(value) <= 40 else value[:40] + "…"
        return "the text " + repr(text).encode("ascii", "backslashreplace").decode("ascii")
    return repr(value)[:40]


def _bound(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _str(v: Any) -> Any:
    if not isinstance(v, str):
        raise FieldError(f"expected a text, got {described(v)}")
    if len(v) > MAX_TEXT:
        raise FieldError(f"a text of {len(v):,} characters (at most {MAX_TEXT:,})")
    return v


def _bool(v: Any) -> Any:
    if not isinstance(v, bool):
        raise FieldError(f"expected true or false, got {described(v)}")
    return v


def _int(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int):
        raise FieldError(f"expected a whole number, got {described(v)}")
    if not -MAX_NUMBER <= v <= MAX_NUMBER:
        raise FieldError(f"out of range: {described(v)} (at most {MAX_NUMBER:g} in magnitude)")
    return v


def _number(lo: float, hi: float, what: str) -> Check:
    def check(v: Any) -> Any:
        t = type(v)
        if t is not float and t is not int and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise FieldError(f"expected a number, got {described(v)}")
        if not lo <= v <= hi:  # NaN fails this too
            if isinstance(v, float) and not math.isfinite(v):
                raise FieldError(f"expected a finite number, got {v!r}")
            raise FieldError(f"out of range for {what}: {described(v)} (within {_bound(lo)}..{_bound(hi)})")
        return v

    return check


_float = _number(-MAX_NUMBER, MAX_NUMBER, "a number")
_time = _number(0.0, TIME_MAX, "a time (epoch seconds)")


def _none(v: Any) -> Any:
    if v is not None:
        raise FieldError(f"expected null, got {described(v)}")
    return v


def _identity(v: Any) -> Any:
    return v


def _optional(inner: Check) -> Check:
    def check(v: Any) -> Any:
        return None if v is None else inner(v)

    return check


def _union(options: list[Check], names: str) -> Check:
    def check(v: Any) -> Any:
        for opt in options:
            try:
                return opt(v)
            except FieldError:
                continue
        raise FieldError(f"expected {names}, got {described(v)}")

    return check


def _sequence(item: Check, make: type) -> Check:
    def check(v: Any) -> Any:
        if not isinstance(v, list | tuple):
            raise FieldError(f"expected a list, got {described(v)}")
        if len(v) > MAX_ITEMS:
            raise FieldError(f"a list of {len(v):,} items (at most {MAX_ITEMS:,})")
        if item is _identity:
            return make(v)
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except FieldError as exc:
                raise exc.inside(i) from None
        return make(out)

    return check


def _fixed(items: list[Check]) -> Check:
    def check(v: Any) -> Any:
        if not isinstance(v, list | tuple) or len(v) != len(items):
            raise FieldError(f"expected a list of {len(items)} items, got {described(v)}"
                             + (f" of {len(v)}" if isinstance(v, list | tuple) else ""))
        out = []
        for i, (c, x) in enumerate(zip(items, v, strict=True)):
            try:
                out.append(c(x))
            except FieldError as exc:
                raise exc.inside(i) from None
        return tuple(out)

    return check


def _mapping(value: Check) -> Check:
    def check(v: Any) -> Any:
        if not isinstance(v, dict):
            raise FieldError(f"expected a mapping, got {described(v)}")
        if len(v) > MAX_ITEMS:
            raise FieldError(f"a mapping of {len(v):,} keys (at most {MAX_ITEMS:,})")
        if value is _identity:
            return v
        out = {}
        for k, x in v.items():
            try:
                out[k] = value(x)
            except FieldError as exc:
                raise exc.inside(str(k)) from None
        return out

    return check


_CHECKS: dict[Any, Check] = {}


def checker(tp: Any, name: str = "") -> Check:
    """The check of one annotation (``name``: the field's, for the time fields' range)."""
    if name in TIME_FIELDS and tp in (float, float | None):
        return _time if tp is float else _optional(_time)
    try:
        found = _CHECKS.get(tp)
    except TypeError:  # an unhashable annotation
        return _build(tp)
    if found is None:
        found = _CHECKS[tp] = _build(tp)
    return found


def _name_of(tp: Any) -> str:
    return {str: "a text", int: "a whole number", float: "a number", bool: "true or false"}.get(
        tp, getattr(tp, "__name__", str(tp)))


def _build(tp: Any) -> Check:
    simple = {str: _str, bool: _bool, int: _int, float: _float, type(None): _none}
    if tp in simple:
        return simple[tp]
    if tp is Any or tp is object:
        return _identity
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        inner = checker(rest[0]) if len(rest) == 1 else _union([checker(a) for a in rest],
                                                               " or ".join(_name_of(a) for a in rest))
        return _optional(inner) if len(rest) < len(args) else inner
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _sequence(checker(args[0]), tuple)
        if not args:
            return _sequence(_identity, tuple)
        return _fixed([checker(a) for a in args])
    if origin is list or tp is list:
        return _sequence(checker(args[0]) if args else _identity, list)
    if origin is dict or tp is dict:
        return _mapping(checker(args[1]) if len(args) == 2 else _identity)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        cls = tp

        def nested(v: Any) -> Any:
            return v if isinstance(v, cls) else read(cls, v)  # one its own reader already made passes

        return nested
    return _identity


class _Plan(typing.NamedTuple):
    fields: dict[str, Check]
    required: frozenset[str]


_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    found = _PLANS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        checks: dict[str, Check] = {}
        required = set()
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            checks[f.name] = checker(hints.get(f.name, Any), f.name)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.add(f.name)
        found = _PLANS[cls] = _Plan(checks, frozenset(required))
    return found


def read(cls: type[T], data: Any, *, unknown: str = "ignore", skip: frozenset[str] = frozenset(),
         ranges: Mapping[str, tuple[float, float]] | None = None) -> T:
    """``cls(**data)`` once every field is checked; :class:`FieldError` naming the first that is wrong.

    ``unknown``: ``"ignore"`` keys the class has no field for (a newer version's), or ``"error"``. ``skip``: keys left
    out before anything is checked (``kind`` of an event). ``ranges``: numeric fields (by name) that must lie within
    ``(lo, hi)`` besides their type."""
    if not isinstance(data, dict):
        raise FieldError(f"expected a mapping, got {described(data)}")
    plan = _plan(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key in skip:
            continue
        check = plan.fields.get(key)
        if check is None:
            if unknown == "error":
                raise FieldError("unknown field", (str(key),))
            continue
        try:
            kwargs[key] = check(value)
        except FieldError as exc:
            raise exc.inside(key) from None
        if ranges is not None and key in ranges and value is not None:
            lo, hi = ranges[key]
            if not lo <= value <= hi:
                raise FieldError(f"out of range: {described(value)} (within {_bound(lo)}..{_bound(hi)})", (key,))
    missing = plan.required - kwargs.keys()
    if missing:
        raise FieldError("required field is missing", (min(missing),))
    return cls(**kwargs)


def field_types(cls: type) -> dict[str, Any]:
    """A dataclass's field annotations by name (what :func:`check_keys` takes for a dict its ``asdict`` wrote)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def check_keys(data: Any, types: Mapping[str, Any]) -> None:
    """Each key of the mapping ``data`` that ``types`` names holds a value of that annotation (a figure stays a
    number, a flag true or false; null only where the annotation allows it); keys it does not name are left as
    they are (a newer version's). For the
    free-form parts of a record (a dataclass's ``to_dict`` with its derived keys): a :class:`FieldError` naming
    the key otherwise."""
    if not isinstance(data, dict):
        raise FieldError(f"expected a mapping, got {described(data)}")
    for key, value in data.items():
        tp = types.get(key)
        if tp is None:
            continue
        try:
            checker(tp, key)(value)
        except FieldError as exc:
            raise exc.inside(key) from None


def check_text(value: Any, path: tuple[str | int, ...], *, limit: int = 4096, lines: bool = False) -> None:
    """A text a reader prints as it is (an id, a name, a URL): printable, without control characters or terminal
    escapes (``lines``: a newline or a tab allowed), of at most ``limit`` characters; a :class:`FieldError` naming
    ``path`` otherwise. None passes (an optional field)."""
    if value is None:
        return
    if not isinstance(value, str):
        raise FieldError(f"expected a text, got {described(value)}", path)
    if len(value) > limit:
        raise FieldError(f"a text of {len(value):,} characters (at most {limit:,})", path)
    if not (value.isprintable() or (lines and value.replace("\n", "").replace("\t", "").isprintable())):
        bad = next(ch for ch in value if not ch.isprintable() and not (lines and ch in "\n\t"))
        raise FieldError(f"a control character ({bad!r}) in a text that is printed", path)
