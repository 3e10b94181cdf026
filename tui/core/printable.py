"""The one sink for text from outside: what a file, a teammate or another host wrote is made printable here before
it reaches a terminal, a widget, a log line, a notification or an export.

"Printable" is Python's ``str.isprintable``: every character of the Unicode categories Cc (C0 controls, DEL, the
C1 controls U+0080-U+009F such as CSI U+009B and OSC U+009D), Cf (bidi overrides and isolates U+202A-U+202E,
U+2066-U+2069, zero-width characters U+200B-U+200D, U+FEFF, soft hyphen), Cs (lone surrogates), Co (private use),
Cn (unassigned) and the separators other than the ASCII space (U+00A0, U+2028, U+2029) is escaped as Python writes
it in a string: ``\\n``, ``\\x1b``, ``\\u202e``, ``\\U000e0001``. An escape sequence (OSC 52 writes the clipboard,
OSC 0 retitles the terminal, ``ESC [ 2 J`` and ``ESC c`` clear it) is therefore shown, never obeyed, and a line
from outside never becomes two lines or reads backwards.

Markup (Rich's ``[link=...]`` or ``[@click=...]``) is the console's concern: ``tui.console.fmt.plain`` escapes it
after this sink.
"""

from __future__ import annotations

from typing import Any

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_char(ch: str) -> str:
    """One unprintable character as Python writes it in a string literal (``\\x1b``, ``\\u202e``)."""
    if ch in _SHORT:
        return _SHORT[ch]
    n = ord(ch)
    if n < 0x100:
        return f"\\x{n:02x}"
    if n < 0x10000:
        return f"\\u{n:04x}"
    return f"\\U{n:08x}"


def printable(text: Any, limit: int | None = None, *, keep: str = "") -> str:
    """``text`` (``str()`` of anything else) with every unprintable character escaped (see the module), except
    those in ``keep`` (``"\\n"`` for a text of several lines whose line breaks are its own), and cut to ``limit``
    characters with how many were left out (``…(+12 characters)``).

    The one sink: an error's title, a refusal quoting a value, every line the CLI writes, what the console and the
    web server show or log go through it."""
    s = text if isinstance(text, str) else str(text)
    full = len(s)
    if limit is not None and full > limit * 4:
        s = s[: limit * 4]  # never escape megabytes only to cut them
    if not s.isprintable():
        if keep:
            s = "".join(ch if ch.isprintable() or ch in keep else escape_char(ch) for ch in s)
        else:
            s = "".join(ch if ch.isprintable() else escape_char(ch) for ch in s)
    if limit is not None and len(s) > limit:
        return s[:limit] + f"…(+{max(full - limit, 1):,} characters)"
    return s


def is_printable(text: str, keep: str = "") -> bool:
    """Whether ``text`` would pass :func:`printable` unchanged (``keep``: the characters it may hold besides)."""
    if keep:
        return all(ch.isprintable() or ch in keep for ch in text)
    return text.isprintable()
