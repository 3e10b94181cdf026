"""Process supervision: start servers in their own session with logs to files, follow the logs, stop cleanly.

- ``spawn`` starts a command in a new session (its own process group), stdout and stderr appended to a log file,
  stdin closed: an SSH drop or a crashed console leaves it running, and nothing ties it to a pipe we might stop
  reading. Every child carries ``DISAGG_TUI_LAYOUT=<id>`` in its environment, so ``down`` also finds a process
  that escaped its group or was started a moment before the launcher was killed.
- ``LogFollower`` tails log files in a thread and hands complete lines to a callback (vLLM writes tqdm bars as
  ``\\r`` segments; the last segment is kept).
- ``stop_processes`` escalates SIGINT → SIGTERM → SIGKILL over each process group and waits until every process is
  gone. Blocking: call it from a thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from tui.core import paths, safewrite
from tui.core.host.base import Command

LAYOUT_ENV = "DISAGG_TUI_LAYOUT"


def spawn(cmd: Command, log_path: Path, layout_id: str, *, root: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own session; output appended to ``log_path`` inside ``root`` (the state folder by
    default: checked, and never through a link: :func:`tui.core.safewrite.open_append`)."""
    root = root or paths.root_for(log_path)
    safewrite.ensure_dir(log_path.parent, root=root)
    env = dict(cmd.env)
    env[LAYOUT_ENV] = layout_id
    with safewrite.open_append(log_path, root=root) as log:
        return subprocess.Popen(
            cmd.argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )


def create_time(pid: int) -> float:
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0


def process_alive(pid: int, started: float) -> bool:
    """True when ``pid`` runs and is the process we started (same start time), not a zombie."""
    try:
        p = psutil.Process(pid)
        if started and abs(p.create_time() - started) > 1.0:
            return False
        return bool(p.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def group_members(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def layout_members(layout_id: str) -> list[psutil.Process]:
    """Every process of ours whose environment names this layout (catches ones that escaped their group)."""
    out = []
    me = os.getpid()
    for p in psutil.process_iter(["pid"]):
        if p.pid == me:
            continue
        try:
            if p.environ().get(LAYOUT_ENV) == layout_id:
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


@dataclass(frozen=True, slots=True)
class StopTarget:
    name: str
    pid: int
    pgid: int
    started: float


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_processes(targets: Iterable[StopTarget], *, layout_id: str | None = None, int_wait: float = 15.0,
                   term_wait: float = 10.0, popens: dict[int, subprocess.Popen[bytes]] | None = None,
                   on_step: Callable[[str], None] | None = None) -> list[str]:
    """Stop process groups with SIGINT, then SIGTERM, then SIGKILL; wait until none is left. Returns what it did."""
    done: list[str] = []
    targets = list(targets)
    procs: dict[int, psutil.Process] = {}
    live = [t for t in targets if process_alive(t.pid, t.started)]
    # a group is signalled only when it is really the group its process leads: a state file from outside could name
    # pgid 0 or 1, or this process's own group
    groups = {t.pgid for t in live if _own_group(t.pid, t.pgid)}
    for t in live:
        for p in [psutil.Process(t.pid), *_safe_children(t.pid), *(group_members(t.pgid) if t.pgid in groups
                                                                    else [])]:
            procs[p.pid] = p
    if layout_id:
        for p in layout_members(layout_id):
            procs[p.pid] = p

    def alive() -> list[psutil.Process]:
        left = []
        for p in procs.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(p)
            except psutil.Error:
                continue
        for pid, popen in (popens or {}).items():
            if pid in procs:
                popen.poll()  # reap our own children
        return left

    for sig, wait, label in ((signal.SIGINT, int_wait, "SIGINT"), (signal.SIGTERM, term_wait, "SIGTERM"),
                             (signal.SIGKILL, 5.0, "SIGKILL")):
        left = alive()
        if not left:
            break
        if on_step:
            on_step(f"{label} to {len(left)} process(es)")
        done.append(f"{label}: {len(left)}")
        for g in groups:
            _signal_group(g, sig)
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and alive():
            time.sleep(0.05)
    for popen in (popens or {}).values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=1.0)
    left = alive()
    if left:
        done.append(f"still running after SIGKILL: {', '.join(str(p.pid) for p in left)}")
    return done


def _own_group(pid: int, pgid: int) -> bool:
    """``pgid`` is the process group ``pid`` is in, is not init's or the kernel's, and is not this process's."""
    if pgid <= 1 or pgid == os.getpgrp():
        return False
    try:
        return os.getpgid(pid) == pgid
    except OSError:
        return False


def _safe_children(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


class LogFollower(threading.Thread):
    """Tails several log files; calls ``on_line(name, lineno, text)`` for each complete line (in this thread)."""

    def __init__(self, on_line: Callable[[str, int, str], None], *, interval: float = 0.1,
                 keep_last: int = 60) -> None:
        super().__init__(name="log-follower", daemon=True)
        self._on_line = on_line
        self._interval = interval
        self._files: dict[str, tuple[Path, int, int, bytes]] = {}  # name -> (path, offset, lineno, partial)
        self._lock = threading.Lock()
        self._poll_lock = threading.Lock()  # one reader at a time: the thread, or a caller catching up
        self._stop = threading.Event()
        self.last_lines: dict[str, deque[str]] = {}
        self.last_output: dict[str, float] = {}
        self._keep = keep_last

    def follow(self, name: str, path: Path) -> None:
        with self._lock:
            self._files[name] = (path, 0, 0, b"")
            self.last_lines.setdefault(name, deque(maxlen=self._keep))
            self.last_output[name] = time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._interval)
        self.poll_once()

    def poll_once(self) -> None:
        with self._poll_lock:
            self._poll()

    def _poll(self) -> None:
        with self._lock:
            items = list(self._files.items())
        for name, (path, offset, lineno, partial) in items:
            try:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    data = fh.read(1 << 20)
            except OSError:
                continue
            if not data:
                continue
            offset += len(data)
            buf = partial + data
            *complete, rest = buf.split(b"\n")
            for raw in complete:
                lineno += 1
                text = raw.decode("utf-8", errors="replace")
                if "\r" in text:
                    segments = [s for s in text.split("\r") if s.strip()]
                    text = segments[-1] if segments else ""
                self.last_lines[name].append(text)
                self._on_line(name, lineno, text)
            self.last_output[name] = time.monotonic()
            with self._lock:
                if name in self._files:
                    self._files[name] = (path, offset, lineno, rest)

    def silent_for(self, name: str) -> float:
        return time.monotonic() - self.last_output.get(name, time.monotonic())
