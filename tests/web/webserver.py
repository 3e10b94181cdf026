"""``disagg-tui web`` as a real subprocess for the tests: started on a free loopback port, its URL read from what it
prints, its tabs' app processes found, stopped at the end (SIGINT, as Ctrl-C)."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType

import psutil

ROOT = Path(__file__).resolve().parents[2]
URL = re.compile(r"^open: (http://\S+)$")


class WebServerProcess:
    """``disagg-tui web ARGS --port 0``: its printed lines kept (a reader thread), its URL and token."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.argv = [sys.executable, "-m", "tui", "web", "--port", "0", *args]
        self.env = {**os.environ, **(env or {})}
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self, timeout: float = 30.0) -> WebServerProcess:
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        threading.Thread(target=self._read, daemon=True).start()
        end = time.monotonic() + timeout
        while not self.url:
            if time.monotonic() > end or self.proc.poll() is not None:
                raise AssertionError(f"disagg-tui web printed no URL: {self.lines}")
            try:
                line = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if line is not None and (m := URL.match(line)):
                self.url = m.group(1)
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._queue.put(self.lines[-1])
        self._queue.put(None)

    @property
    def base(self) -> str:
        return self.url.split("?", 1)[0]

    @property
    def token(self) -> str:
        return self.url.split("token=", 1)[1]

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def apps(self) -> list[psutil.Process]:
        """The tabs' app processes running now (the server's children)."""
        assert self.proc is not None
        try:
            kids = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return []
        out = []
        for k in kids:
            try:
                if k.status() != psutil.STATUS_ZOMBIE:
                    out.append(k)
            except psutil.NoSuchProcess:
                continue
        return out

    def wait_for_line(self, text: str, timeout: float = 30.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in self.lines:
                if text in line:
                    return line
            time.sleep(0.05)
        raise AssertionError(f"disagg-tui web never printed {text!r}: {self.lines[-20:]}")

    def stop(self, timeout: float = 30.0) -> int:
        """Ctrl-C; its exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> WebServerProcess:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
