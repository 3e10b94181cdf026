"""YAML read through a SafeLoader that keeps line numbers, and a strict reader on top of it.

Mappings load as :class:`LDict` and sequences as :class:`LList`; both remember the line of the node and of every
key or item, so a validation error names ``file:line: field 'a.b': what is wrong``. :class:`Fields` reads a
mapping strictly: unknown keys are errors, types are checked, and every error is an :class:`InputError`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tui.core import safeio
from tui.core.errors import InputError

T = TypeVar("T")


class LDict(dict[str, Any]):
    """A mapping with the line of each key (1-based)."""

    line: int = 0
    key_lines: dict[str, int]

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class LList(list[Any]):
    """A sequence with the line of each item (1-based)."""

    line: int = 0
    item_lines: list[int]

    def line_of(self, index: int) -> int:
        if 0 <= index < len(self.item_lines):
            return self.item_lines[index]
        return self.line


#: how deep mappings and sequences may nest (no real profile, bundle or playbook nests past ~8)
MAX_DEPTH = 64
#: aliases (``*name``) one document may use
MAX_ALIASES = 200
#: nodes a document may hold with every alias expanded (a "billion laughs" file holds 10**9 in a few hundred bytes)
MAX_NODES = 200_000
#: characters of one string value read through :class:`Fields`
MAX_STRING = 16_384


def _limit_error(problem: str, mark: Any) -> yaml.MarkedYAMLError:
    return yaml.composer.ComposerError(None, None, problem, mark)


class _MarkedLoader(yaml.SafeLoader):
    """SafeLoader that builds LDict/LList with node marks. Nothing beyond safe_load's types is constructed.

    Bounded: nesting deeper than :data:`MAX_DEPTH`, more than :data:`MAX_ALIASES` aliases, an alias that refers to
    its own ancestor, or more than :data:`MAX_NODES` nodes once aliases are expanded is a syntax-like error at the
    node's line, found while composing (before anything is constructed)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _limit_error(f"more than {MAX_ALIASES} aliases", self.peek_event().start_mark)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _limit_error(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        if self._aliases and node is not None:
            _check_expansion(node)
        return node


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a node graph whose aliases expand past :data:`MAX_NODES` nodes, or that is cyclic (an alias to an
    ancestor). Sizes are memoised per node, so the check is linear in the nodes actually written."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            total = 1
            if isinstance(node, yaml.MappingNode):
                total += sum(size[id(k)] + size[id(v)] for k, v in node.value)
            elif isinstance(node, yaml.SequenceNode):
                total += sum(size[id(c)] for c in node.value)
            if total > MAX_NODES:
                raise _limit_error(f"more than {MAX_NODES:,} values once its aliases are expanded (an alias bomb?)",
                                   node.start_mark)
            size[key] = total
            continue
        if key in size:
            continue
        if key in on_path:
            raise _limit_error("an alias refers to a mapping or list it is inside of", node.start_mark)
        on_path.add(key)
        stack.append((node, True))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.extend(((v, False), (k, False)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((c, False) for c in node.value)


def _construct_mapping(loader: _MarkedLoader, node: yaml.MappingNode) -> LDict:
    loader.flatten_mapping(node)
    out = LDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            key = str(key)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: _MarkedLoader, node: yaml.SequenceNode) -> LList:
    out = LList()
    out.line = node.start_mark.line + 1
    out.item_lines = []
    for child in node.value:
        out.append(loader.construct_object(child, deep=True))
        out.item_lines.append(child.start_mark.line + 1)
    return out


#: characters of a number as written (``1_000_000``, ``0x1f``, ``1.5e3``): YAML 1.1's base-60 integers
#: (``59:59:...``) are summed in quadratic time, so a 0.9 MB one took 18 s before any range check
MAX_NUMBER_TEXT = 64


def _bounded(construct: Any) -> Any:
    def number(loader: _MarkedLoader, node: yaml.ScalarNode) -> Any:
        if len(node.value) > MAX_NUMBER_TEXT:
            raise yaml.constructor.ConstructorError(
                None, None, f"a number written in {len(node.value):,} characters: too many digits (at most "
                            f"{MAX_NUMBER_TEXT})", node.start_mark)
        return construct(loader, node)
    return number


_MarkedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_MarkedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
_MarkedLoader.add_constructor("tag:yaml.org,2002:int", _bounded(yaml.constructor.SafeConstructor.construct_yaml_int))
_MarkedLoader.add_constructor("tag:yaml.org,2002:float",
                              _bounded(yaml.constructor.SafeConstructor.construct_yaml_float))


class _Frame:
    """One open mapping or sequence while the events are walked: its last key, or how many items it has."""

    __slots__ = ("complex_key", "expect_key", "items", "key", "mapping")

    def __init__(self, mapping: bool) -> None:
        self.mapping = mapping
        self.key: str | None = None
        self.expect_key = True
        self.complex_key = False  # a key that is itself a mapping or a sequence (``? [a, b]``) is open
        self.items = 0


def field_at(text: str, line: int, column: int) -> str | None:
    """The field a position of a YAML text belongs to: the keys (and 1-based item numbers, ``entries[2].match``)
    of the mappings and sequences open there, down to the nearest key at or above it. The text is walked event by
    event up to that position (or up to the syntax error that stops the parser there), so a file that does not
    parse still names where it broke. ``line`` and ``column`` are 0-based, as a YAML mark's."""
    stack: list[_Frame] = []

    def node_starts() -> None:
        if stack and not stack[-1].mapping:
            stack[-1].items += 1

    def node_done() -> None:
        if stack and stack[-1].mapping:
            top = stack[-1]
            if top.complex_key:  # the key is complete: its value comes next
                top.complex_key = False
            else:
                top.expect_key = True

    try:
        for ev in yaml.parse(text, Loader=yaml.SafeLoader):
            mark = ev.start_mark
            if mark is not None and (mark.line, mark.column) > (line, column):
                break
            if isinstance(ev, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                top = stack[-1] if stack else None
                if top is not None and top.mapping and top.expect_key:  # a complex key: none we can name
                    top.key, top.expect_key, top.complex_key = None, False, True
                else:
                    node_starts()
                stack.append(_Frame(isinstance(ev, yaml.MappingStartEvent)))
            elif isinstance(ev, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                if stack:
                    stack.pop()
                node_done()
            elif isinstance(ev, yaml.ScalarEvent | yaml.AliasEvent):
                top = stack[-1] if stack else None
                if top is not None and top.mapping and top.expect_key:
                    top.key = ev.value if isinstance(ev, yaml.ScalarEvent) else None
                    top.expect_key = False
                else:
                    node_starts()
                    node_done()
    except yaml.YAMLError:
        pass  # the syntax error itself: the frames are where the parser stood
    parts: list[str] = []
    for i, frame in enumerate(stack):
        if frame.mapping:
            if frame.key is None:
                break
            parts.append(("." if parts else "") + frame.key)
        elif i < len(stack) - 1 and frame.items:  # an item number only on the way to a key inside it
            parts.append(f"[{frame.items}]")
    name = "".join(parts)
    return (name if len(name) <= 80 else name[:60] + "…" + parts[-1][-19:]) or None


def load_text(text: str, source: str | Path) -> Any:
    """Parse YAML text; syntax errors become one-line InputErrors with the line and, where the line is inside a
    mapping, the field (the nearest key at or above it)."""
    try:
        return yaml.load(text, Loader=_MarkedLoader)  # noqa: S506 - _MarkedLoader is a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.context_mark is not None and exc.problem_mark is not None \
                and exc.context_mark.line != exc.problem_mark.line:
            problem += f" ({exc.context} at line {exc.context_mark.line + 1})"
        name = field_at(text, mark.line, mark.column) if mark is not None else None
        raise InputError(f"YAML syntax: {problem}", file=source, line=line, field=name) from None
    except yaml.YAMLError as exc:
        raise InputError(f"YAML syntax: {exc}", file=source) from None
    except (ValueError, OverflowError, RecursionError) as exc:
        # a value the constructor cannot make: an integer of thousands of digits, a date like 2024-13-45
        detail = "an integer of thousands of digits" if "integer string conversion" in str(exc) else str(exc)
        raise InputError(f"YAML value: {safeio.shown(detail, 120)}", file=source) from None


def load_file(path: Path, kind: str = "profile") -> Any:
    """A YAML file from outside: a regular file within the size limit of its kind (:data:`safeio.LIMITS`), UTF-8,
    parsed with the bounds of :class:`_MarkedLoader`."""
    data = safeio.read_bytes(path, kind)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"cannot read: not UTF-8 text (byte {exc.start})", file=path, line=line) from None
    return load_text(text, path)


def dump(data: Any) -> str:
    """Plain YAML for what we write or show (playbook entries added and shown)."""
    return yaml.safe_dump(plain(data), sort_keys=False, allow_unicode=True, width=120)


def plain(data: Any) -> Any:
    """Plain dicts and lists (no LDict/LList, tuples as lists, keys as strings): what is dumped or compared."""
    if isinstance(data, dict):
        return {str(k): plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [plain(v) for v in data]
    return data


_MAX_INT_BITS = int(safeio.MAX_INT_DIGITS * 3.3219)  # digits -> bits
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
               dict: "a mapping"}


class Fields:
    """Strict reader of one mapping: ``get``/``require`` check types; ``done`` rejects keys nobody asked for."""

    def __init__(self, data: Any, source: str | Path, prefix: str = "", line: int | None = None) -> None:
        self.source = source
        self.prefix = prefix
        if not isinstance(data, dict):
            raise InputError("expected a mapping", file=source, line=getattr(data, "line", line),
                             field=prefix.rstrip(".") or None)
        self.data: dict[str, Any] = data
        self.line = getattr(data, "line", line)
        self._seen: set[str] = set()

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def line_of(self, key: str) -> int | None:
        if isinstance(self.data, LDict):
            return self.data.line_of(key)
        return self.line

    def error(self, key: str, message: str) -> InputError:
        return InputError(message, file=self.source, line=self.line_of(key), field=self.name(key))

    def has(self, key: str) -> bool:
        return key in self.data

    def _check(self, key: str, value: Any, kind: type | tuple[type, ...]) -> Any:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            if value.bit_length() > _MAX_INT_BITS:  # (float() of it would raise OverflowError)
                raise self.error(key, f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits is out "
                                      "of range")
            return float(value)
        if isinstance(value, bool) and bool not in kinds:
            raise self.error(key, f"expected {' or '.join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)}, "
                                  f"got {value!r}")
        if not isinstance(value, kinds):
            got = "nothing" if value is None else safeio.shown(repr(value), 80) if not isinstance(value, dict | list) \
                else type(value).__name__.replace("LDict", "a mapping").replace("LList", "a list")
            raise self.error(key, f"expected {' or '.join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)}, "
                                  f"got {got}")
        if isinstance(value, str) and len(value) > MAX_STRING:
            raise self.error(key, f"longer than {MAX_STRING:,} characters ({len(value):,})")
        if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
            raise self.error(key, f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits is out of "
                                  "range")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(key, f"must be a finite number; got {value!r}")
        return value

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        self._seen.add(key)
        if key not in self.data:
            return default
        value = self.data[key]
        if value is None:
            return default
        return self._check(key, value, kind)

    def require(self, key: str, kind: type | tuple[type, ...]) -> Any:
        self._seen.add(key)
        if key not in self.data or self.data[key] is None:
            raise InputError("required field is missing", file=self.source, line=self.line,
                             field=self.name(key))
        return self._check(key, self.data[key], kind)

    def choice(self, key: str, choices: Iterable[str], default: str | None = None, *, required: bool = False) -> Any:
        value = self.require(key, str) if required else self.get(key, str, default)
        allowed = list(choices)
        if value is not None and value not in allowed:
            raise self.error(key, f"must be one of {', '.join(allowed)}; got {value!r}")
        return value

    def number(self, key: str, default: float | None = None, *, lo: float | None = None, hi: float | None = None,
               required: bool = False) -> Any:
        value = self.require(key, float) if required else self.get(key, float, default)
        if value is None:
            return None
        if lo is not None and value < lo:
            raise self.error(key, f"must be ≥ {lo:g}; got {value:g}")
        if hi is not None and value > hi:
            raise self.error(key, f"must be ≤ {hi:g}; got {value:g}")
        return value

    def integer(self, key: str, default: int | None = None, *, lo: int | None = None, hi: int | None = None,
                required: bool = False) -> Any:
        value = self.require(key, int) if required else self.get(key, int, default)
        if value is None:
            return None
        if lo is not None and value < lo:
            raise self.error(key, f"must be ≥ {lo}; got {value}")
        if hi is not None and value > hi:
            raise self.error(key, f"must be ≤ {hi}; got {value}")
        return value

    def str_list(self, key: str, default: list[str] | None = None) -> list[str]:
        value = self.get(key, list, None)
        if value is None:
            return list(default or [])
        out = []
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, str | int | float):
                line = value.line_of(i) if isinstance(value, LList) else self.line_of(key)
                raise InputError(f"item {i + 1} must be a string; got {safeio.shown(repr(item), 80)}",
                                 file=self.source, line=line,
                                 field=self.name(key))
            out.append(str(item))
        return out

    def str_map(self, key: str) -> dict[str, str]:
        value = self.get(key, dict, None)
        if value is None:
            return {}
        out: dict[str, str] = {}
        for k, v in value.items():
            if isinstance(v, bool) or not isinstance(v, str | int | float):
                line = value.line_of(k) if isinstance(value, LDict) else self.line_of(key)
                raise InputError(f"value must be a string or number; got {safeio.shown(repr(v), 80)}",
                                 file=self.source, line=line,
                                 field=f"{self.name(key)}.{k}")
            out[str(k)] = str(v)
        return out

    def sub(self, key: str, *, required: bool = False) -> Fields | None:
        value = self.require(key, dict) if required else self.get(key, dict, None)
        if value is None:
            return None
        return Fields(value, self.source, f"{self.name(key)}.", line=self.line_of(key))

    def done(self) -> None:
        for key in self.data:
            if key not in self._seen:
                raise InputError(
                    "unknown field" + (f" (known: {', '.join(sorted(self._seen))})" if self._seen else ""),
                    file=self.source, line=self.line_of(key), field=self.name(key),
                )
