"""The simulated server's child processes: engines, TP workers, DP API servers, a memory hog.

Each is a real process, forked from the server (single-threaded at that moment) into the same process group, named
like vLLM's (``/proc/self/comm`` via prctl(PR_SET_NAME), truncated by Linux to 15 characters: ``VLLM::EngineCor``;
the command line rewritten to ``VLLM::EngineCore`` as setproctitle does), and bound to its parent's life with
prctl(PR_SET_PDEATHSIG): if the server dies, they die. A child holds the write end of a "life" pipe, so the server
sees EOF on the read end the moment the child dies, however it dies. The GPU memory a simulated engine holds is a
:class:`tui.sim.gpustate.Claim` keyed by that child's pid: gone with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15

_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        if name is None:
            return None
        try:
            _libc = ctypes.CDLL(name, use_errno=True)
        except OSError:
            return None
    return _libc


def set_pdeathsig(sig: int = signal.SIGTERM) -> None:
    lib = _lib()
    if lib is not None:
        lib.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


def set_title(title: str) -> None:
    """``/proc/self/comm`` (15 characters) and ``/proc/self/cmdline``."""
    lib = _lib()
    if lib is not None:
        lib.prctl(PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)
    # rewrite the original argv area, which is what /proc/self/cmdline shows (setproctitle's method): its bounds
    # are fields 48-49 of /proc/self/stat
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        arg_start, arg_end = int(fields[45]), int(fields[46])
    except (OSError, IndexError, ValueError):
        return
    size = arg_end - arg_start
    raw = title.encode()[: size - 1]
    if size <= 1 or not _writable(arg_start, size):
        return
    ctypes.memset(arg_start, 0, size)
    ctypes.memmove(arg_start, raw, len(raw))


def _writable(addr: int, size: int) -> bool:
    try:
        with open("/proc/self/maps", encoding="ascii") as fh:
            for line in fh:
                span, perms = line.split()[:2]
                lo, hi = (int(x, 16) for x in span.split("-"))
                if lo <= addr and addr + size <= hi:
                    return "w" in perms
    except OSError:
        return False
    return False


@dataclass
class Child:
    role: str  # engine | worker | api | hog
    name: str  # the log-prefix name: EngineCore, Worker_TP0, EngineCore_DP1, ApiServer_0 ...
    title: str  # VLLM::EngineCore ...
    pid: int
    life_fd: int  # read end: EOF when the child is gone
    ctl_fd: int  # write end: the server asks the child to exit with a code
    gpus: tuple[int, ...] = ()
    dp_rank: int = 0
    exit_code: int | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def alive(self) -> bool:
        if self.exit_code is not None:
            return False
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self.exit_code = self.exit_code if self.exit_code is not None else -1
            return False
        if pid == 0:
            return True
        self.exit_code = os.waitstatus_to_exitcode(status)
        return False

    def exit_with(self, code: int) -> None:
        """Ask the child to exit with ``code`` (as a vLLM process that raised does)."""
        with contextlib.suppress(OSError):
            os.write(self.ctl_fd, bytes([code & 0xFF]))

    def stop(self, timeout: float = 2.0) -> None:
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self.exit_code = -9

    def close(self) -> None:
        for fd in (self.life_fd, self.ctl_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def spawn(role: str, name: str, title: str, *, gpus: tuple[int, ...] = (), dp_rank: int = 0,
          on_exit: Callable[[int], None] | None = None, keep_fds: tuple[int, ...] = ()) -> Child:
    """Fork a child that names itself ``title`` and waits: for its parent to die, a signal, or an exit request."""
    sys.stdout.flush()
    sys.stderr.flush()
    life_r, life_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            os.close(life_r)
            os.close(ctl_w)
            set_pdeathsig(signal.SIGTERM)
            if os.getppid() != parent:
                os._exit(0)
            _close_others({0, 1, 2, life_w, ctl_r, *keep_fds})
            set_title(title)

            def _term(signum: int, _frame: object) -> None:
                raise SystemExit(128 + signum)

            signal.signal(signal.SIGTERM, _term)
            signal.signal(signal.SIGINT, _term)
            data = b""
            with contextlib.suppress(OSError):
                data = os.read(ctl_r, 1)  # blocks until the server asks, or dies (EOF)
            code = data[0] if data else 0
        except SystemExit as exc:
            code = int(exc.code) if isinstance(exc.code, int) else 1
        finally:
            if on_exit is not None:
                with contextlib.suppress(Exception):
                    on_exit(os.getpid())
            os._exit(code)
    os.close(life_w)
    os.close(ctl_r)
    return Child(role=role, name=name, title=title, pid=pid, life_fd=life_r, ctl_fd=ctl_w, gpus=gpus,
                 dp_rank=dp_rank)


def _close_others(keep: set[int]) -> None:
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
