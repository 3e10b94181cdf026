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

from tui.core import paths, safeio, safewrite, typedread
from tui.core.errors import InputError
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
        root = paths.root_for(path)
        if root is not None:  # a console's benchmark: its events file in the state folder, never through a link
            self._fh: BinaryIO | None = safewrite.open_append(path, root=root)
        else:  # a file the operator named
            self._fh = os.fdopen(safeio.open_append(path, 0o600, field="--events-to"), "ab", buffering=0)
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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number an event may hold")


class EventsTail:
    """Reads the complete lines added to an events file since the last call (a partial last line waits for its
    end). Blocking file reads: call ``read`` from a thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header: EventsHeader | None = None
        self.bad_lines = 0  # lines that are no event (a torn write, another version's, the wrong types): skipped
        self.unreadable: str | None = None  # why the file cannot be read (a FIFO or a folder in its place)
        self._offset = 0
        self._partial = b""
        self._skipping = False

    def read(self, limit: int = 1 << 20) -> list[Event]:
        """The events of the complete lines added since the last call (a FIFO, a device or a folder in the file's
        place is never waited on: :attr:`unreadable` says why nothing comes)."""
        try:
            fd, _st = safeio.open_regular(self.path)
        except InputError as err:
            if err.message != "no such file":
                self.unreadable = err.one_line()
            return []
        try:
            with os.fdopen(fd, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(limit)
        except OSError:
            return []
        if not data:
            return []
        self._offset += len(data)
        if self._skipping:  # the rest of a line too long to be an event: dropped up to its end
            end = data.find(b"\n")
            if end < 0:
                return []
            data, self._skipping = data[end + 1:], False
        *complete, rest = (self._partial + data).split(b"\n")
        if len(rest) > _MAX_LINE:  # no event is that long: dropped (counted once), and the rest of it after
            self.bad_lines += 1
            rest, self._skipping = b"", True
        self._partial = rest
        out: list[Event] = []
        for raw in complete:
            if not raw.strip():
                continue
            if len(raw) > _MAX_LINE:
                self.bad_lines += 1
                continue
            try:
                d = json.loads(raw, parse_constant=_no_constant)
                if not isinstance(d, dict):
                    raise ValueError("not an object")
                if d.get("t") == HEADER:
                    self.header = typedread.read(EventsHeader, {"pid": d.get("pid") or 0,
                                                                "create_time": d.get("create_time") or 0.0,
                                                                "argv": d.get("argv") or ()},
                                                 ranges={"pid": (0, typedread.PID_MAX)})
                    continue
                out.append(event_from_dict(d))
            except (ValueError, TypeError, KeyError, RecursionError):
                self.bad_lines += 1  # another version's event, a torn write, the wrong types: skipped, counted
        return out

    def read_all(self) -> list[Event]:
        """Everything up to the end of the file now (several reads of ``read``'s limit)."""
        out: list[Event] = []
        while True:
            at = self._offset
            got = self.read()
            out += got
            if self._offset == at or (not got and not self._more()):
                return out

    def _more(self) -> bool:
        try:
            return self.path.stat().st_size > self._offset
        except OSError:
            return False
