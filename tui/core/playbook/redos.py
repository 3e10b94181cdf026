"""Refusing regular expressions that backtrack exponentially: ``(a+)+$`` takes minutes on a 65-character line.

Python's ``re`` backtracks, and cannot be interrupted from a library: a playbook pattern that can split one stretch
of text between the iterations of a repeat in exponentially many ways makes the matcher hang on the first line that
almost matches. The shape behind every such pattern is a repeat of a repeat (``(a+)+``, ``(\\w+\\s?)*``,
``(.*a){20,}``) whose iterations can meet anywhere: what one iteration may end with, the next may begin with. That
is what :func:`explosive` looks for, from the parsed pattern: a large repeat whose body holds a large repeat, and
whose body can match nothing, or can begin with a character it can also end with. A repeat of a repeat whose
iterations are delimited (``(?:/-{1,2}[\\w.+-]+)*``: each begins with '/', which no iteration ends with) passes.

Characters are compared over a sample alphabet (ASCII, a tab, a newline and a few others) plus every literal of the
pattern, which is enough to tell the classes of log patterns apart. An alternation inside a repeat whose branches
overlap (``(a|a)+``) is not detected.
"""

from __future__ import annotations

import importlib
from typing import Any

_parser: Any
_constants: Any
try:
    _parser = importlib.import_module("re._parser")
    _constants = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - Python < 3.11 is not supported
    _parser = None
    _constants = None

#: a repeat of more than this many iterations counts as large (``(a+){50}`` is as bad as ``(a+)+``)
LARGE = 8
_ALPHABET = frozenset([*(chr(c) for c in range(32, 127)), "\t", "\n", "é", "€", "█", "\u00a0"])


def explosive(pattern: str) -> bool:
    """Whether ``pattern`` has a repeat of a repeat whose iterations can meet anywhere (see the module)."""
    if _parser is None:
        return False
    try:
        parsed = list(_parser.parse(pattern))
    except Exception:  # noqa: BLE001 - an invalid pattern is reported by re.compile, not here
        return False
    alphabet = set(_ALPHABET) | _literals(parsed)
    return _Walker(alphabet).search(parsed)


def _literals(items: list[tuple[Any, Any]]) -> set[str]:
    out: set[str] = set()
    c = _constants
    for op, av in items:
        if op in (c.LITERAL, c.NOT_LITERAL):
            out.add(chr(av))
        elif op is c.IN:
            out |= {chr(v) for o, v in av if o is c.LITERAL}
            out |= {chr(v[0]) for o, v in av if o is c.RANGE}
        for sub in _children(op, av):
            out |= _literals(sub)
    return out


def _children(op: Any, av: Any) -> list[list[tuple[Any, Any]]]:
    c = _constants
    if op is c.SUBPATTERN:
        return [list(av[3])]
    if op in _repeats():
        return [list(av[2])]
    if op is c.BRANCH:
        return [list(b) for b in av[1]]
    if op is getattr(c, "ATOMIC_GROUP", None):
        return [list(av)]
    return []


def _repeats() -> tuple[Any, ...]:
    c = _constants
    return tuple(x for x in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)) if x is not None)


def _large(hi: Any) -> bool:
    return bool(hi is _constants.MAXREPEAT or hi > LARGE)


class _Walker:
    def __init__(self, alphabet: set[str]) -> None:
        self.all = frozenset(alphabet)

    def search(self, items: list[tuple[Any, Any]]) -> bool:
        c = _constants
        for op, av in items:
            if op in _repeats() and op is not getattr(c, "POSSESSIVE_REPEAT", None):
                _lo, hi, sub = av
                body = list(sub)
                if _large(hi) and self._holds_large_repeat(body):
                    first, empty = self.ends(body, first=True)
                    last, _ = self.ends(body, first=False)
                    if empty or first & last:
                        return True
            if op in (c.ASSERT, c.ASSERT_NOT):
                if self.search(list(av[1])):
                    return True
                continue
            if op is getattr(c, "ATOMIC_GROUP", None):
                continue  # an atomic group never backtracks into itself
            for sub in _children(op, av):
                if self.search(sub):
                    return True
        return False

    def _holds_large_repeat(self, items: list[tuple[Any, Any]]) -> bool:
        c = _constants
        for op, av in items:
            if op is getattr(c, "ATOMIC_GROUP", None) or op is getattr(c, "POSSESSIVE_REPEAT", None):
                continue  # what they matched is never given back
            if op in _repeats() and _large(av[1]):
                return True
            if any(self._holds_large_repeat(sub) for sub in _children(op, av)):
                return True
        return False

    def ends(self, items: list[tuple[Any, Any]], *, first: bool) -> tuple[frozenset[str], bool]:
        """(the characters a match of ``items`` may begin with, or end with; whether it may be empty)."""
        out: set[str] = set()
        for op, av in (items if first else list(reversed(items))):
            chars, empty = self.item_ends(op, av, first=first)
            out |= chars
            if not empty:
                return frozenset(out), False
        return frozenset(out), True

    def item_ends(self, op: Any, av: Any, *, first: bool) -> tuple[frozenset[str], bool]:
        c = _constants
        if op is c.LITERAL:
            return frozenset([chr(av)]), False
        if op is c.NOT_LITERAL:
            return self.all - {chr(av)}, False
        if op is c.ANY:
            return self.all, False
        if op is c.IN:
            return frozenset(ch for ch in self.all if _in_set(ch, av)), False
        if op in (c.AT, c.ASSERT, c.ASSERT_NOT):
            return frozenset(), True
        if op is c.SUBPATTERN:
            return self.ends(list(av[3]), first=first)
        if op is getattr(c, "ATOMIC_GROUP", None):
            return self.ends(list(av), first=first)
        if op in _repeats():
            lo, _hi, sub = av
            chars, empty = self.ends(list(sub), first=first)
            return chars, empty or lo == 0
        if op is c.BRANCH:
            out: set[str] = set()
            any_empty = False
            for branch in av[1]:
                chars, empty = self.ends(list(branch), first=first)
                out |= chars
                any_empty = any_empty or empty
            return frozenset(out), any_empty
        return self.all, True  # a back reference, a conditional: anything


def _in_set(ch: str, items: list[tuple[Any, Any]]) -> bool:
    c = _constants
    negate = False
    hit = False
    for op, av in items:
        if op is c.NEGATE:
            negate = True
        elif op is c.LITERAL:
            hit = hit or ch == chr(av)
        elif op is c.RANGE:
            hit = hit or av[0] <= ord(ch) <= av[1]
        elif op is c.CATEGORY:
            hit = hit or _category(ch, av)
        else:  # an unknown member: assume it matches
            hit = True
    return hit != negate


def _category(ch: str, cat: Any) -> bool:
    c = _constants
    word = ch.isalnum() or ch == "_"
    table = {
        c.CATEGORY_DIGIT: ch.isdecimal(), c.CATEGORY_NOT_DIGIT: not ch.isdecimal(),
        c.CATEGORY_SPACE: ch.isspace(), c.CATEGORY_NOT_SPACE: not ch.isspace(),
        c.CATEGORY_WORD: word, c.CATEGORY_NOT_WORD: not word,
    }
    return table.get(cat, True)
