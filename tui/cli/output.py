"""Where every command's output goes: ``ctx.out`` and ``ctx.err`` pass every write through the core's sink
(:func:`tui.core.printable.printable`), so a value from outside (a knob's title, a teammate's playbook entry, a
remote host's facts, a name in ``clusters.json`` or the state file) never reaches the terminal as an escape sequence
(OSC 52 writes the clipboard, OSC 0 retitles the terminal, ``ESC c`` resets it), a C1 control or a bidi override,
however a command formats it (``ctx.print``, ``print(..., file=ctx.err)``, ``ctx.out.write``).

Line breaks and tabs pass: commands write tables and several lines. A value that must stay on its line is passed
through the sink by the command itself. JSON output (``--json``) is written by ``json.dumps`` with ``ensure_ascii``,
which escapes every control and non-ASCII character as ``\\uXXXX``, so this pass leaves it unchanged and valid.
Only the in-place progress line (``\\r``) writes a control character of its own, through :func:`raw`.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, TextIO, cast

from tui.core.printable import printable

#: what the commands' own formatting writes besides printable text
KEPT = "\n\t"


class PrintableStream(io.TextIOBase):
    """A text stream whose writes reach ``raw`` through the sink (line breaks and tabs kept)."""

    def __init__(self, raw: TextIO) -> None:
        super().__init__()
        self.raw = raw

    def write(self, s: str) -> int:
        self.raw.write(s if s.isprintable() else printable(s, keep=KEPT))
        return len(s)

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.raw, "encoding", None) or "utf-8")

    def close(self) -> None:  # the terminal's stream is not ours to close
        with contextlib.suppress(OSError, ValueError):
            self.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def printable_stream(raw: TextIO) -> TextIO:
    """``raw`` behind the sink (a stream already behind it is returned as it is)."""
    if isinstance(raw, PrintableStream):
        return cast(TextIO, raw)
    return cast(TextIO, PrintableStream(raw))


def raw(stream: TextIO) -> TextIO:
    """The terminal's own stream under ``stream``: for the progress line's carriage return, nothing from outside."""
    return stream.raw if isinstance(stream, PrintableStream) else stream
