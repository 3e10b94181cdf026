"""Child processes for the proxy's process-level tests: started on port 0, their URL read from their first line,
their output drained by a thread, and always stopped (SIGINT, then SIGKILL) by the test that started them."""

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

from tests.helpers import free_port
from tui.core.paths import child_env

ROOT = Path(__file__).resolve().parent.parent
URL = re.compile(r"listening on (http://\S+)")


class Child:
    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=child_env(env), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, pattern: re.Pattern[str], timeout: float = 30.0) -> re.Match[str]:
        """The first line of output matching ``pattern``; fails with the output so far if none comes."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line matching {pattern.pattern!r} from {self.argv}:\n" + self.output())
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"{self.argv} exited ({self.proc.wait()}) before printing "
                                     f"{pattern.pattern!r}:\n" + self.output())
            m = pattern.search(line)
            if m:
                return m

    def url(self) -> str:
        return self.wait_for(URL).group(1)

    def output(self) -> str:
        return "\n".join(self.lines)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGINT (what the supervisor sends first); SIGKILL if it is still there after ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._reader.join(5)
        return self.proc.returncode


def fake_server(role: str, *extra: str) -> Child:
    return Child([sys.executable, "-m", "tui.sim.fakepd", "--role", role, "--port", "0", *extra])


def proxy_process(*args: str, via_cli: bool = False) -> Child:
    head = [sys.executable, "-m", "tui", "proxy"] if via_cli else [sys.executable, "-m", "tui.core.proxy"]
    return Child([*head, "--port", "0", *args])


def refused_url() -> str:
    """A loopback URL nobody listens on: a port the kernel just handed out, closed again."""
    return f"http://127.0.0.1:{free_port()}"
