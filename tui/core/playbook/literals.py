"""A cheap prefilter for a regular expression: literal text that any line it matches must contain.

Most log lines match none of the playbook's patterns, so the matcher first asks ``literal in line`` (a C-speed
substring search) and runs the regular expression only when that passes. The literals come from the parsed
pattern: runs of plain characters at the top level, inside groups, inside repeats of at least one, and, for an
alternation, one literal from every branch (any of which must then occur). Lookarounds, optional parts and
case-insensitive patterns give none, so a prefilter is never wrong: at worst there is none.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

_parser: Any
_constants: Any
try:
    _parser = importlib.import_module("re._parser")
    _constants = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - Python < 3.11 is not supported; no prefilter then
    _parser = None
    _constants = None

_MIN_LEN = 3


def required_literals(pattern: str, flags: int = 0, *, min_len: int = _MIN_LEN) -> tuple[str, ...]:
    """Literals of which at least one occurs in every string ``pattern`` matches (empty: no prefilter, or one
    shorter than ``min_len``: a per-line ``in`` of a very short literal saves little)."""
    if _parser is None:
        return ()
    try:
        parsed = _parser.parse(pattern, flags)
    except Exception:  # noqa: BLE001 - an invalid pattern is reported by re.compile, not here
        return ()
    if (parsed.state.flags | flags) & (re.IGNORECASE | re.VERBOSE):
        return ()
    best = _best(_candidates(list(parsed)))
    if best is None or min(len(s) for s in best) < min_len:
        return ()
    return tuple(sorted(best, key=len, reverse=True))


def _best(cands: list[frozenset[str]]) -> frozenset[str] | None:
    best: frozenset[str] | None = None
    for c in cands:
        if not c:
            continue
        if best is None or (min(map(len, c)), -len(c)) > (min(map(len, best)), -len(best)):
            best = c
    return best


def _candidates(items: list[tuple[Any, Any]]) -> list[frozenset[str]]:
    """Sets of strings, each set such that one of its strings must occur in any match of ``items``."""
    c = _constants
    out: list[frozenset[str]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            out.append(frozenset(["".join(run)]))
            run.clear()

    for op, av in items:
        if op is c.LITERAL:
            run.append(chr(av))
            continue
        flush()
        if op is c.SUBPATTERN:
            _group, add_flags, _del_flags, sub = av
            if not add_flags & re.IGNORECASE:
                out += _candidates(list(sub))
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)):
            lo, _hi, sub = av
            if lo >= 1:
                out += _candidates(list(sub))
        elif op is getattr(c, "ATOMIC_GROUP", None):
            out += _candidates(list(av))
        elif op is c.BRANCH:
            _none, branches = av
            union: set[str] = set()
            for branch in branches:
                b = _best(_candidates(list(branch)))
                if b is None:
                    union = set()
                    break
                union |= b
            if union:
                out.append(frozenset(union))
    flush()
    return out
