"""Turning one captured log line into a regular expression that recognises the same failure next time.

The prefixes go (a collector's timestamp, vLLM's ``(EngineCore pid=N) ERROR MM-DD HH:MM:SS [file.py:N]``,
uvicorn's ``INFO:``, argparse's program name): patterns are searched, never anchored, so any prefix matches.
In the message, numbers (with signs, decimals, thousands commas, in identifiers such as ``Worker_TP1``), hex ids,
UUIDs, URLs and paths become character classes, runs of whitespace (not a single space) become ``\\s+``, and
everything else is escaped.
A path keeps its file name when that is a plain word (``.../bin/nvcc``), since the name often is the point.
"""

from __future__ import annotations

import re

from tui.core.errors import InputError
from tui.core.launch.phases import parse_line
from tui.core.playbook.linear import Unsupported, compile_linear
from tui.core.playbook.literals import required_literals
from tui.core.playbook.loader import MAX_PATTERN_CHARS
from tui.core.playbook.redos import explosive

_COLLECTOR_PREFIXES = (
    re.compile(r"^\[[^\]]*\d[^\]]*\]\s*"),  # [2026-11-29T07:31:22.927Z +  19.409s]
    re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+"),  # ISO timestamp
    re.compile(r"^[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \S+ [\w./-]+(?:\[\d+\])?:\s+"),  # syslog
)
_UVICORN_LEVEL = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")
_ARGPARSE_PROG = re.compile(r"^(?:\S+ )?\S+: (?=error: )")

_TOKEN = re.compile(
    r"(?P<url>\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+)"
    r"|(?P<uuid>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)"
    r"|(?P<path>(?<![\w.])(?:~|\.{1,2})?/[^\s'\",;:()\[\]{}<>=|]+)"
    r"|(?P<hex>\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}\b)"
    r"|(?P<signed>(?<![\w.)\]-])-\d+(?:[.,]\d+)*)"
    r"|(?P<num>\d+(?:[.,]\d+)*)"
    r"|(?P<space>\s+)"
)
_PATH_CHARS = r"[^\s'\",;:()\[\]{}<>=|]"
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z_.+-]{0,31}\Z")
NUMBER = r"\d+(?:[.,]\d+)*"
MIN_LITERAL = 6
#: characters of a log line's message a pattern is made from (a 4 MB line made a 4 MB pattern, and every later
#: load of the playbook took seconds); the start of a message says what happened
MAX_MESSAGE_CHARS = 400
_META = re.compile(r"([.^$*+?{}\[\]\\|()])")


def escape(text: str) -> str:
    """Escape what is special in a pattern, and only that (``re.escape`` also escapes '-', ':' and more)."""
    return _META.sub(r"\\\1", text)


def message_of(line: str) -> str:
    """The part of a log line that says what happened, without the prefixes that change from line to line."""
    text = line.rstrip("\r\n")
    if "\r" in text:  # tqdm bars: the last state
        text = text.rsplit("\r", 1)[-1]
    rec = parse_line(text)
    if rec.proc is not None or rec.level is not None:
        text = rec.message
    else:
        changed = True
        while changed:
            changed = False
            for prefix in _COLLECTOR_PREFIXES:
                m = prefix.match(text)
                if m:
                    text = text[m.end():]
                    changed = True
    text = _UVICORN_LEVEL.sub("", text, count=1)
    text = _ARGPARSE_PROG.sub("", text, count=1)
    return text.strip()


def _path(token: str) -> str:
    base = token.rstrip("/").rsplit("/", 1)[-1]
    if base and _PLAIN_NAME.match(base) and token.rstrip("/") != base:
        return rf"(?:{_PATH_CHARS}*/)?{escape(base)}"
    return rf"{_PATH_CHARS}+"


def generalize(line: str) -> str:
    """A regular expression (for ``re.search``) that matches ``line`` and the same message with other values."""
    return _generalize_message(message_of(line))


def cut_message(msg: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """The start of a message of more than ``limit`` characters (where it says what happened), cut after a word
    where one ends in its second half. A pattern made from it still matches the whole line: patterns are
    searched, never anchored at the end."""
    if len(msg) <= limit:
        return msg
    head = msg[:limit]
    space = max(head.rfind(" "), head.rfind("\t"))
    return (head[:space] if space > limit // 2 else head).rstrip()


def _generalize_message(msg: str) -> str:
    out: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(msg):
        out.append(escape(msg[pos:m.start()]))
        kind = m.lastgroup
        piece = m.group()
        if kind == "url":
            out.append(r"[a-z][a-z0-9+.-]*://[^\s'\"<>]+")
        elif kind == "uuid":
            out.append(r"[0-9a-fA-F-]{36}")
        elif kind == "path":
            out.append(_path(piece))
        elif kind == "hex":
            out.append(r"(?:0x)?[0-9a-fA-F]+")
        elif kind == "signed":
            out.append(rf"-?{NUMBER}")
        elif kind == "num":
            out.append(NUMBER)
        else:
            out.append(" " if piece == " " else r"\s+")
        pos = m.end()
    out.append(escape(msg[pos:]))
    return "".join(out)


def pattern_for(line: str) -> str:
    """``generalize`` with checks: it compiles, matches the line, and keeps enough fixed text to be specific."""
    if not line.strip():
        raise InputError("the line is empty", field="--text")
    msg = cut_message(message_of(line))
    pattern = _generalize_message(msg)
    while len(pattern) > MAX_PATTERN_CHARS and len(msg) > MIN_LITERAL:  # many paths or numbers: a shorter start
        msg = cut_message(msg, len(msg) * 2 // 3)
        pattern = _generalize_message(msg)
    try:
        regex = compile_linear(pattern)
    except (re.error, Unsupported) as exc:  # pragma: no cover - generalize only emits escaped text and classes
        raise InputError(f"could not build a pattern from the line: {exc}", field="--text") from None
    if regex.search(line.rstrip("\r\n")) is None:  # pragma: no cover - a bug in generalize if it happens
        raise InputError(f"the generalised pattern {pattern!r} does not match the line", field="--text")
    literals = required_literals(pattern)
    if not literals or min(len(s) for s in literals) < MIN_LITERAL:
        raise InputError(f"too little fixed text left to recognise this line once numbers, paths and prefixes are "
                         f"generalised ({pattern!r}); pick the line that states the error", field="--text")
    return pattern


def check_pattern(pattern: str, line: str | None) -> str:
    """An operator's own pattern for ``line`` (the generalised one, edited; None: an entry edited without its
    line): it compiles for the linear-time engine (``linear``), finds ``line`` with it, and keeps enough fixed text
    to be specific. Returns it stripped; raises InputError naming what is wrong (the loader checks it again when
    the entry is validated)."""
    text = pattern.strip()
    if not text:
        raise InputError("the pattern is empty", field="--pattern")
    if len(text) > MAX_PATTERN_CHARS:
        raise InputError(f"a pattern is at most {MAX_PATTERN_CHARS:,} characters; this one has {len(text):,}",
                         field="--pattern")
    try:
        regex = compile_linear(text)  # what the matcher runs: the line is checked with it
    except re.error as exc:
        raise InputError(f"not a regular expression: {exc}", field="--pattern") from None
    except Unsupported as exc:
        raise InputError(str(exc), field="--pattern") from None
    if explosive(text):
        raise InputError("it repeats a repeat whose rounds can meet anywhere (like (a+)+), which costs a "
                         "backtracking engine minutes on one log line", field="--pattern")
    if regex.search("") is not None:
        raise InputError("it matches an empty line, so it would match every line", field="--pattern")
    if line is not None and regex.search(line.rstrip("\r\n")) is None:
        raise InputError("the pattern does not find the line it was made from", field="--pattern")
    literals = required_literals(text)
    if not literals or min(len(s) for s in literals) < MIN_LITERAL:
        raise InputError(f"too little fixed text in the pattern (at least {MIN_LITERAL} characters every match "
                         "must contain): it would recognise unrelated lines", field="--pattern")
    return text
