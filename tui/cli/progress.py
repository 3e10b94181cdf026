"""A progress line for the headless CLI: rewritten in place on a terminal, a line every few seconds otherwise."""

from __future__ import annotations

import shutil
import time
from typing import TextIO

from tui.cli.output import raw
from tui.core.bench.events import BenchTick


class ProgressLine:
    def __init__(self, stream: TextIO, *, every_s: float = 5.0, enabled: bool = True) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.every_s = every_s
        self.enabled = enabled
        self._last = 0.0
        self._width = 0

    def tick(self, tick: BenchTick) -> None:
        if not self.enabled:
            return
        line = tick.line()
        if self.tty:
            cols = shutil.get_terminal_size((120, 20)).columns
            line = line[: cols - 1]
            pad = max(0, self._width - len(line))
            raw(self.stream).write("\r")  # the line's own return; the line itself goes through the sink
            self.stream.write(line + " " * pad)
            self.stream.flush()
            self._width = len(line)
            return
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self.stream.write(line + "\n")
            self.stream.flush()

    def text(self, message: str) -> None:
        """A line of its own (ends the in-place line first)."""
        if not self.enabled:
            return
        self.end()
        self.stream.write(message + "\n")
        self.stream.flush()

    def end(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
