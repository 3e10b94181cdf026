"""A benchmark's events as JSON Lines, for another process to follow live: ``disagg-tui bench --events-to FILE``.

The console starts a benchmark as that command, detached, and follows this file: the run (its load generator, its
records, its summary) lives in a process of its own that outlives the console, and the console reads a few
hundred bytes four times a second. The first line says who writes the file (``{"t": "header", "pid", "create_time",
"argv"}``), so a console opened later knows whether the run is still going; every other line is one event's
``to_dict`` (redacted as a recording is), written whole and flushed as it happens.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from tui.core import paths
from tui.core.events import Event, EventBus, event_from_dict
from tui.core.launch.supervisor import create_time, process_alive
from tui.core.redact import Redactor

HEADER = "header"
#: a partial last line longer than this is not an event: it is dropped rather than kept growing
_MAX_LINE = 1 << 22


class EventsWriter:
    """Writes a bus's events to ``path``, one JSON line each, flushed as it happens (the file is the operator's
    state: 0600 in a 0700 folder)."""

    def __init__(self, path: Path, *, argv: list[str] | None = None, redactor: Redactor | None = None) -> None:
        self.path = path
        self.redactor = redactor or Redactor()
        paths.make_dirs(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._fh: BinaryIO | None = os.fdopen(fd, "ab", buffering=0)
        pid = os.getpid()
        self._line({"t": HEADER, "pid": pid, "create_time": create_time(pid),
                    "argv": self.redactor.value(list(argv if argv is not None else sys.argv[1:]))})
        self._unsubscribe: Any = None

    def attach(self, bus: EventBus) -> EventsWriter:
        self._unsubscribe = bus.subscribe(self.write)
        return self

    def write(self, event: Event) -> None:
        self._line(self.redactor.value(event.to_dict()))

    def _line(self, data: dict[str, Any]) -> None:
        if self._fh is None:
            return
        try:
            self._fh.write(json.dumps(data, separators=(",", ":")).encode() + b"\n")
        except (OSError, TypeError, ValueError):
            pass  # a full disk must not end the run: its records are journaled elsewhere

    def close(self) -> None:
        if callable(self._unsubscribe):
            self._unsubscribe()
        if self._fh is not None:
            self._fh.close()
            self._fh = None


@dataclass(frozen=True, slots=True)
class EventsHeader:
    pid: int
    create_time: float
    argv: tuple[str, ...]

    def alive(self) -> bool:
        """Whether the process that writes the file still runs (the pid reused by another process: no)."""
        return self.pid > 0 and process_alive(self.pid, self.create_time)


class EventsTail:
    """Reads the complete lines added to an events file since the last call (a partial last line waits for its
    end). Blocking file reads: call ``read`` from a thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header: EventsHeader | None = None
        self.bad_lines = 0
        self._offset = 0
        self._partial = b""

    def read(self, limit: int = 1 << 20) -> list[Event]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(limit)
        except OSError:
            return []
        if not data:
            return []
        self._offset += len(data)
        *complete, rest = (self._partial + data).split(b"\n")
        self._partial = rest if len(rest) <= _MAX_LINE else b""
        out: list[Event] = []
        for raw in complete:
            if not raw.strip():
                continue
            try:
                d = json.loads(raw)
                if not isinstance(d, dict):
                    raise ValueError("not an object")
                if d.get("t") == HEADER:
                    self.header = EventsHeader(pid=int(d.get("pid") or 0),
                                               create_time=float(d.get("create_time") or 0.0),
                                               argv=tuple(str(a) for a in d.get("argv") or ()))
                    continue
                out.append(event_from_dict(d))
            except (ValueError, TypeError, KeyError):
                self.bad_lines += 1  # another version's event, or a torn write: skipped, counted
        return out

    def read_all(self) -> list[Event]:
        """Everything up to the end of the file now (several reads of ``read``'s limit)."""
        out: list[Event] = []
        while True:
            got = self.read()
            out += got
            if not got and not self._more():
                return out

    def _more(self) -> bool:
        try:
            return self.path.stat().st_size > self._offset
        except OSError:
            return False
