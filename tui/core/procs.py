"""Process facts every part needs, below the supervisor: is a PID alive, and undoing an inherited 'ignore SIGINT'.

Shared by the supervisor, the proxy, the results store and the simulated servers, so none of them imports another.
"""

from __future__ import annotations

import signal
import threading

import psutil


def reset_ignored_sigint() -> None:
    """Undo an inherited 'ignore SIGINT' (a shell starts background jobs so), in the main thread.

    An ignored signal stays ignored across exec, so servers started from such a process would ignore the SIGINT a
    stop sends first (and a uvicorn server would re-raise it into nothing on shutdown). Our servers run in their
    own session, so a terminal's Ctrl-C never reaches them either way.
    """
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pid_alive(pid: int) -> bool:
    """True when ``pid`` runs (a zombie counts as gone)."""
    if pid <= 0:
        return False
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
