"""One browser tab's console: an app process of its own, relayed over the tab's WebSocket by textual-serve.

textual-serve's ``AppService`` speaks textual's web driver protocol (the app's screen as terminal output in framed
packets, the browser's keys, resizes, focus and quit as input); it starts the app with a shell command line. Here
the app is started from an argv list, without a shell, in a session of its own (a Ctrl-C typed at the server's
terminal reaches the server, which stops each tab's app itself), and its stop is bounded: ``quit`` as
textual-serve sends it, then SIGTERM, then SIGKILL, each to the app's own PID alone. What the console started
(layouts, benchmarks, campaigns) runs detached in sessions of its own and is never signalled from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from asyncio.subprocess import Process
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from textual_serve.app_service import AppService
from textual_serve.download_manager import DownloadManager

#: how long a tab's app has to quit after ``quit`` before SIGTERM, and after SIGTERM before SIGKILL (seconds)
QUIT_S = 5.0
TERM_S = 3.0

#: what textual-serve sets for the web driver (the tab's size among them): never taken from the server's environment
#: (a COLUMNS=80 there drew every tab 80 columns wide in a wider browser)
DRIVER_ENV = ("TEXTUAL_DRIVER", "TEXTUAL_FPS", "TEXTUAL_COLOR_SYSTEM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION",
              "COLUMNS", "ROWS")

_numbers = itertools.count(1)


@dataclass(frozen=True)
class AppCommand:
    """How a tab's app process is started: its argv (no shell), and what its environment adds to the server's (the
    web driver's own variables, the tab's size among them, are always textual-serve's)."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


class ConsoleSession(AppService):
    """A tab's app process: textual-serve's relay, started from an argv list and stopped within bounds."""

    def __init__(self, command: AppCommand, *, write_bytes: Callable[[bytes], Awaitable[None]],
                 write_str: Callable[[str], Awaitable[None]], close: Callable[[], Awaitable[object]],
                 download_manager: DownloadManager) -> None:
        super().__init__(" ".join(command.argv), write_bytes=write_bytes, write_str=write_str,
                         close=close,  # type: ignore[arg-type]  # textual-serve only awaits it
                         download_manager=download_manager)
        self.app_command = command
        self.number = next(_numbers)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Process:
        """The app from its argv (textual-serve's own opens a shell command line), in a session of its own; its
        environment is textual-serve's (the server's, with the web driver selected) plus the command's."""
        base = self._build_environment(width=width, height=height)
        env = {**base, **self.app_command.env, **{k: base[k] for k in DRIVER_ENV if k in base}}
        self._process = process = await asyncio.create_subprocess_exec(
            *self.app_command.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True)
        assert process.stdin is not None
        self._stdin = process.stdin
        return process

    async def run(self) -> None:
        """textual-serve's relay of the app's output; once that ends (the app quit, or died before or after its
        first screen) the tab's WebSocket is closed too, so the page says the session ended instead of going on
        blank."""
        try:
            await super().run()
        finally:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.remote_close()

    async def close_app(self, *, quit_s: float = QUIT_S, term_s: float = TERM_S) -> int | None:
        """Stop this tab's app (its PID alone) and reap it; its exit code (None: it never started)."""
        process = self._process
        if process is None:
            return None
        with contextlib.suppress(TimeoutError, ConnectionError, RuntimeError):
            await asyncio.wait_for(self.stop(), quit_s)  # textual-serve's quit; it ends when the app's output does
        for signal_it, wait_s in ((process.terminate, term_s), (process.kill, None)):
            if process.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                signal_it()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), wait_s)
        return process.returncode

