"""Matching playbook patterns in time linear in the line: a typed wrapper around RE2 (``google-re2``, module ``re2``).

Python's ``re`` backtracks: a teammate's ``\\s*\\s*\\s*x`` took 85 s on a 1,000-character line, ``a*a*a*a*b`` 26 s on
300 characters, and no shape detector lists every such pattern (``redos`` catches the exponential ones only). RE2
runs an automaton over the text once, whatever the pattern: its cost is the line's length times at most the
pattern's size (benchmarks/playbook_regex.py measured it against ``re`` and the ``regex`` module's ``timeout=``).

RE2 takes only what runs in linear time, so :func:`compile_linear` refuses, in one line that says what to write
instead, a lookaround (``(?=``, ``(?!``, ``(?<=``, ``(?<!``), a backreference (``\\1``, ``(?P=name)``), an atomic
group and a possessive repeat. A pattern must also mean the same to ``re``, whose parser finds its literals (the
matcher's prefilter, ``literals``), so these are refused too: ``{,3}`` (``{0,3}`` to ``re``, the text ``{,3}`` to
RE2), a ``[`` inside a class (``[:alpha:]`` is a POSIX class to RE2), ``\\12`` (a group to ``re``, a character to
RE2) and ``\\Z`` (RE2 spells it ``\\z``, which ``re`` rejects: write ``$``, a log line has no line end).
What stays different: RE2's ``\\d \\w \\s \\b`` are ASCII (``re``'s are Unicode), and its ``$`` matches at the
very end only (``re``'s also before a final newline, which a log line never has).
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Mapping
from typing import Any

_re2: Any = importlib.import_module("re2")  # google-re2 ships no type stubs: this module is its typed face

#: memory one compiled pattern may take: its program, then its automaton's cache (a search past the cache's budget
#: goes on without it, still in linear time). RE2's default is 8 MiB, and a file may hold 1,000 patterns: 1,000
#: patterns whose automaton outgrows its cache (``x1(?:[ab])*a(?:[ab]){20}q``...), each searched once over a 16 KiB
#: line, took 2.8 GB and 21 s at 8 MiB, 400 MB and 5.3 s at 1 MiB, 110 MB and 4.1 s at this. Every shipped pattern,
#: and ``.{1000}`` or ``(?:.*x){200}``, fits in it.
MAX_MEM = 256 << 10


class Unsupported(ValueError):
    """A pattern the linear-time engine cannot take, or would read differently from ``re``; the message is one
    line that says why and what to write instead."""


def _options() -> Any:
    opts = _re2.Options()
    opts.log_errors = False  # RE2 would print to the terminal (stderr) for every pattern it refuses
    opts.max_mem = MAX_MEM
    return opts


_OPTIONS = _options()

#: RE2's messages for what it leaves out (the start of the operator it names) -> what to write instead
_HINTS = (
    ("(?=", "lookahead: match the text itself"),
    ("(?!", "negative lookahead: match what is there instead"),
    ("(?<=", "lookbehind: match the text before it too"),
    ("(?<!", "negative lookbehind: match what is there instead"),
    ("(?P", "backreference (?P=name): match the repeated text with its own pattern"),
    ("\\", "backreference: match the repeated text with its own pattern"),  # invalid escape sequence: \1
    ("(?>", "atomic group: RE2 never backtracks, write the group plainly"),
    ("(?#", "comment: remove it"),
    ("(?x", "verbose mode: write the pattern without spaces and comments"),
    ("(?a", "ASCII flag: RE2's \\d \\w \\s \\b are ASCII already; remove it"),
    ("(?u", "Unicode flag: remove it"),
    ("(?L", "locale flag: remove it"),
    ("*+", "possessive repeat: RE2 never backtracks, write the plain repeat"),
    ("++", "possessive repeat: RE2 never backtracks, write the plain repeat"),
    ("?+", "possessive repeat: RE2 never backtracks, write the plain repeat"),
    ("}+", "possessive repeat: RE2 never backtracks, write the plain repeat"),
)


class LinearMatch:
    """What one search found (the part of ``re.Match`` the playbook uses)."""

    __slots__ = ("_m",)

    def __init__(self, match: Any) -> None:
        self._m = match

    def group(self, key: int | str = 0) -> str | None:
        value = self._m.group(key)
        return None if value is None else str(value)

    def groupdict(self) -> dict[str, str | None]:
        return {str(k): (None if v is None else str(v)) for k, v in self._m.groupdict().items()}

    def span(self) -> tuple[int, int]:
        start, end = self._m.span()
        return int(start), int(end)

    def start(self) -> int:
        return self.span()[0]

    def end(self) -> int:
        return self.span()[1]


class LinearPattern:
    """A compiled pattern whose search costs time linear in the text (the part of ``re.Pattern`` the playbook
    uses). Build it with :func:`compile_linear`."""

    __slots__ = ("_regex", "groupindex", "pattern")

    def __init__(self, pattern: str, regex: Any) -> None:
        self.pattern = pattern
        self._regex = regex
        self.groupindex: Mapping[str, int] = {str(k): int(v) for k, v in regex.groupindex.items()}

    def search(self, text: str) -> LinearMatch | None:
        try:
            m = self._regex.search(text)
        except UnicodeEncodeError:  # a lone surrogate (a JSON string from another host may hold one): RE2 reads
            m = self._regex.search(text.encode("utf-8", "replace").decode("utf-8"))  # UTF-8; '?' keeps positions
        return None if m is None else LinearMatch(m)

    def __repr__(self) -> str:
        return f"LinearPattern({self.pattern!r})"

    def __eq__(self, other: object) -> bool:  # a value, as re.Pattern is (entries compare by their patterns)
        return isinstance(other, LinearPattern) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(("LinearPattern", self.pattern))


_NONZERO_DIGITS = frozenset("123456789")
#: groups nested deeper than this are refused (re's parser recurses per level: 500 levels is a RecursionError)
MAX_DEPTH = 100


def _reads_differently(pattern: str) -> str | None:
    """What ``re`` and RE2 would read differently in ``pattern`` (None: nothing found): ``{,N}`` outside a class,
    ``[`` inside one (a nested set or a POSIX class ``[:alpha:]`` to RE2, a plain ``[`` to ``re``), ``&&``, ``||``,
    ``~~`` or ``--`` inside one (``re`` warns of a future set operation), ``\\12`` (a group to ``re``, a character
    to RE2); and groups nested past :data:`MAX_DEPTH`."""
    i, n = 0, len(pattern)
    in_class = False
    class_start = 0
    depth = 0
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            if pattern[i + 1:i + 2] in _NONZERO_DIGITS:
                return ("a backslash and a digit (a backreference to re, a character to RE2): write \\x0a for a "
                        "character; a backreference is not taken")
            i += 2
            continue
        if in_class:
            if ch == "]" and i > class_start:
                in_class = False
            elif ch == "[":
                return "a '[' inside a class (a POSIX class or nested set to RE2): escape it as \\["
            elif ch in "&|~-" and pattern.startswith(ch, i + 1):
                return (f"'{ch}{ch}' inside a class (a set operation to a later Python, which warns of it): "
                        f"escape one of them as \\{ch}")
        elif ch == "[":
            in_class = True
            class_start = i + 1
            if pattern.startswith("^", class_start):
                class_start += 1
        elif ch == "(":
            depth += 1
            if depth > MAX_DEPTH:
                return f"groups nested more than {MAX_DEPTH} deep"
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == "{" and pattern.startswith(",", i + 1):
            return "'{,N}' (re reads {0,N}, RE2 the text '{,N}'): write {0,N}"
        i += 1
    return None


def compile_linear(pattern: str) -> LinearPattern:
    """``pattern`` compiled for linear-time matching; :class:`Unsupported` (one line) when RE2 cannot take it or
    would read it differently from ``re``, and ``re.error`` when it is no regular expression at all."""
    differs = _reads_differently(pattern)
    if differs is not None:
        raise Unsupported(differs)
    with warnings.catch_warnings():  # (none is left for what passed the check above: never on the terminal)
        warnings.simplefilter("ignore")
        re.compile(pattern)  # what re cannot read is re's error, with its position
    try:
        regex = _re2.compile(pattern, _OPTIONS)
    except _re2.error as exc:
        raise Unsupported(_explain(exc)) from None
    return LinearPattern(pattern, regex)


def _explain(exc: BaseException) -> str:
    detail = exc.args[0] if exc.args else str(exc)
    text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
    operator = text.rpartition(": ")[2]
    if operator == "\\Z":
        return "the linear-time engine (RE2) takes no \\Z: write $ (a log line has no line end)"
    if "repetition size" in text or "too large" in text:
        return (f"too large for the linear-time engine (RE2): {text}; repeat a smaller part (at most 1,000 times, "
                f"nested repeats multiplied, and {MAX_MEM >> 10} KiB compiled)")
    for mark, hint in _HINTS:
        if operator.startswith(mark) and (mark != "\\" or operator[1:2].isdigit()):
            return f"the linear-time engine (RE2) takes no {hint} ({text})"
    return f"the linear-time engine (RE2) cannot take it: {text}"
