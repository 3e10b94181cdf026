"""vLLM 0.24's log lines: ``(Proc pid=N) LEVEL MM-DD HH:MM:SS [file.py:N] message`` on stdout, uvicorn's lines and
tqdm bars on stderr, tracebacks as the process prints them.

Every simulated process's lines carry that process's real pid, whichever of our processes writes them (they all
share the server's stdout and stderr, as vLLM's processes do). Multi-line messages repeat the full prefix and end
their lines with ``\\r\\n`` except the last, as vLLM's ``_add_prefix`` does.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True, slots=True)
class Proc:
    name: str | None  # None: the DP parent, which has no prefix
    pid: int

    @property
    def prefix(self) -> str:
        return f"({self.name} pid={self.pid}) " if self.name else ""


class VllmLog:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self._lock = threading.Lock()

    @staticmethod
    def stamp() -> str:
        return time.strftime("%m-%d %H:%M:%S", time.localtime())

    def _write(self, stream: TextIO, text: str) -> None:
        with self._lock:
            try:
                stream.write(text)
                stream.flush()
            except (OSError, ValueError):
                pass  # stdout closed (the supervisor went away): logging must never kill the server

    def log(self, proc: Proc, level: str, where: str, message: str, *, err: bool = False) -> None:
        head = f"{proc.prefix}{level} {self.stamp()} [{where}] "
        lines = message.split("\n")
        text = ("\r\n".join(head + ln for ln in lines)) + "\n"
        self._write(self.err if err else self.out, text)

    def info(self, proc: Proc, where: str, message: str) -> None:
        self.log(proc, "INFO", where, message)

    def warning(self, proc: Proc, where: str, message: str) -> None:
        self.log(proc, "WARNING", where, message)

    def error(self, proc: Proc, where: str, message: str) -> None:
        self.log(proc, "ERROR", where, message)

    def raw(self, proc: Proc, text: str, *, err: bool = True) -> None:
        """Lines a process prints itself (a traceback on stderr): the prefix on each line, plain ``\\n``."""
        lines = text.rstrip("\n").split("\n")
        self._write(self.err if err else self.out, "".join(proc.prefix + ln + "\n" for ln in lines))

    def uvicorn(self, proc: Proc, message: str, level: str = "INFO") -> None:
        self._write(self.err, f"{proc.prefix}{(level + ':').ljust(9)} {message}\n")

    def bar_segment(self, proc: Proc | None, text: str) -> None:
        """A tqdm bar as it is drawn: the first segment after the prefix, later ones after ``\\r``, ``\\n`` last."""
        self._write(self.err, (proc.prefix if proc is not None else "") + text)


_BLOCKS = " ▏▎▍▌▋▊▉█"


def tqdm_segment(desc: str, n: int, total: int, elapsed: float) -> str:
    frac = n / total if total else 1.0
    width = 10
    full = int(frac * width)
    part = int((frac * width - full) * 8)
    bar = "█" * full + (_BLOCKS[part] if full < width else "")
    bar = bar.ljust(width)
    rate = n / elapsed if elapsed > 0 else 0.0
    remain = (total - n) / rate if rate > 0 else 0.0
    rate_s = f"{rate:.2f}it/s" if n else "?it/s"
    left = "?" if not n else _mmss(remain)
    return f"{desc}: {int(frac * 100):3d}%|{bar}| {n}/{total} [{_mmss(elapsed)}<{left}, {rate_s}]"


def _mmss(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60:02d}:{s % 60:02d}"


BANNER = (
    "",
    "       █     █     █▄   ▄█",
    " ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}",
    "  █▄█▀ █     █     █     █  model   {model}",
    "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
    "",
)


def banner(version: str, model: str) -> str:
    return "\n".join(line.format(version=version, model=model) for line in BANNER)
