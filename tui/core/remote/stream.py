"""A remote ``disagg-tui watch --json`` followed as one long SSH session: one line a tick, no round trip per
sample. When the session ends (the link drops, sshd goes, the remote command fails) or goes quiet for
``stall_s``, the host is reported unreachable with the reason and tried again with backoff; the first tick after
that reports it reconnected, and ticks flow again.

The stream has its own connection (not the shared one short commands use): a link that dies under it is noticed
by its keep-alives and by the stall timer, and cannot hold other commands up.

What it holds is bounded whatever the remote side sends: a line is at most :attr:`RemoteWatch.max_line` bytes (one
past it, or an endless one without a newline, ends the session with one line naming the host and the command:
reason ``too-large``; nothing beyond the cap is kept), the pipe's backlog at most twice that (the reader stops
reading from ssh beyond it), and its stderr is drained as it comes with its last :data:`MAX_STDERR` bytes kept (a
remote that writes warnings forever neither blocks the stream nor fills memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

from tui.core import safeio, typedread
from tui.core.errors import InputError, printable
from tui.core.events import Event, event_from_dict
from tui.core.launch.events import LayoutChanged, LogLine
from tui.core.remote.events import HostReconnected, HostUnreachable, RemoteEvent, RemoteTick
from tui.core.remote.ssh import MAX_STDERR, SshTransport, classify, last_line, size_text

#: the longest line of a remote watch read (a tick of 8 GPUs is ~5 kB, of 72 GPUs and their processes ~100 kB)
MAX_LINE = 1024 * 1024
#: the longest line of a remote follow read (a log line of vLLM's, a layout's plan)
MAX_FOLLOW_LINE = 4 * 1024 * 1024
#: (layout, server) logs a follow stream remembers the last line of
MAX_FOLLOWED = 1024
#: first and longest wait between tries
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0


def kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL a session's ssh and its process group (``start_new_session``: a ProxyJump's ssh with it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


async def end_session(proc: asyncio.subprocess.Process, wait_s: float = 2.0) -> int | None:
    """Stop a session (its process group killed), close its pipes and reap it: its exit status (None when it
    could not be reaped in ``wait_s``). The pipes are closed first because ``Process.wait()`` (Python 3.11) also
    waits for every pipe to close, and a reader that stopped reading (a line past its cap, an output past its
    budget) would keep one open forever."""
    if proc.returncode is None:
        kill_group(proc)
    transport = getattr(proc, "_transport", None)  # asyncio's SubprocessTransport: no public way to close it
    if transport is not None:
        transport.close()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(proc.wait(), wait_s)
    return proc.returncode


class RemoteWatch:
    """Follow one host's ``watch --json``. ``events()`` yields :class:`RemoteTick` for each line, and
    :class:`HostUnreachable` / :class:`HostReconnected` as the connection goes and comes back."""

    #: the longest line read (bytes, its newline included)
    max_line = MAX_LINE

    def __init__(self, transport: SshTransport, *, rate_hz: float = 2.0, stall_s: float | None = None,
                 backoff_first_s: float = BACKOFF_FIRST_S, backoff_max_s: float = BACKOFF_MAX_S,
                 start_s: float = 20.0, extra_args: tuple[str, ...] = ()) -> None:
        self.transport = transport
        self.rate_hz = rate_hz
        # the first tick can take a remote start-up (imports, NVML): give it a few seconds beyond the sample period
        self.stall_s = stall_s if stall_s is not None else max(4.0, 4.0 / rate_hz)
        # a session's first tick waits for the handshake and the remote start (imports, the first sample)
        self.start_s = max(start_s, self.stall_s)
        self.backoff_first_s = backoff_first_s
        self.backoff_max_s = backoff_max_s
        self.extra_args = extra_args
        self._proc: asyncio.subprocess.Process | None = None
        self._err = bytearray()  # the last MAX_STDERR bytes of the session's stderr
        self._drain: asyncio.Task[None] | None = None
        self.connects = 0  # sessions started (1 + reconnect attempts)

    def remote_argv(self) -> list[str]:
        return self.transport.entry.remote_cli("watch", "--json", "--rate", f"{self.rate_hz:g}", *self.extra_args)

    def event_of(self, host: str, data: dict[str, Any]) -> Event | None:
        """The event one line of the remote stream is (None: nothing to publish)."""
        return RemoteTick(host=host, tick=data)

    async def _start(self) -> asyncio.subprocess.Process:
        argv = self.transport.argv(self.remote_argv(), shared=False)
        self.connects += 1
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE, limit=self.max_line,
                                                    start_new_session=True)
        self._err = bytearray()
        if proc.stderr is not None:
            self._drain = asyncio.create_task(self._drain_stderr(proc.stderr, self._err))
        return proc

    @staticmethod
    async def _drain_stderr(reader: asyncio.StreamReader, kept: bytearray) -> None:
        """Read a session's stderr as it comes, keeping its last :data:`MAX_STDERR` bytes."""
        with contextlib.suppress(OSError, ValueError):
            while chunk := await reader.read(64 * 1024):
                kept += chunk
                if len(kept) > 2 * MAX_STDERR:
                    del kept[:-MAX_STDERR]

    async def _stop(self, proc: asyncio.subprocess.Process) -> tuple[int | None, str]:
        if proc.returncode is None:
            kill_group(proc)
        drain, self._drain = self._drain, None
        try:
            if drain is not None and not drain.done():
                await asyncio.wait_for(drain, 2.0)  # cancelled past it: a child of ssh holding its stderr open
        except TimeoutError:
            pass
        except asyncio.CancelledError:  # the drain cancelled by a loop shutting down: go on closing; ours: stop
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
        finally:
            rc = await end_session(proc)
        return rc, bytes(self._err[-MAX_STDERR:]).decode("utf-8", "replace")

    def _why(self, rc: int | None, stderr: str, stalled: bool, killed: bool, too_large: bool = False
             ) -> tuple[str, str]:
        if too_large:
            return "too-large", (f"a line of `{self.transport.what(self.remote_argv())}` from {self.transport.name} "
                                 f"exceeded {size_text(self.max_line)}")
        found = classify(stderr)
        if found is not None:
            return found
        if stalled:
            return "stalled", f"no tick for {self.stall_s:g} s (the first: {self.start_s:g} s)"
        if rc not in (255, None) and not killed:
            return "remote-failed", f"remote watch exited {rc}" + (f": {last_line(stderr)}" if stderr.strip()
                                                                   else "")
        return "closed", last_line(stderr) or "the SSH session ended"

    async def events(self, seconds: float | None = None) -> AsyncIterator[Event]:
        """Ticks and connection events until ``seconds`` pass (or forever; cancel the iteration to stop)."""
        deadline = None if seconds is None else time.monotonic() + seconds
        backoff = self.backoff_first_s
        down_since: float | None = None
        name = self.transport.name
        while deadline is None or time.monotonic() < deadline:
            proc = await self._start()
            self._proc = proc
            stalled = False
            too_large = False
            first = True
            try:
                assert proc.stdout is not None
                while True:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return
                    quiet = self.start_s if first else self.stall_s
                    wait = quiet if left is None else min(quiet, left)
                    try:
                        line = await asyncio.wait_for(proc.stdout.readline(), wait)
                    except TimeoutError:
                        if left is not None and left <= quiet:
                            return
                        stalled = True
                        break
                    except ValueError:  # a line past max_line (or endless): nothing a watch of ours prints
                        too_large = True
                        break
                    if not line:
                        break
                    first = False
                    try:
                        data = safeio.parse_json(line, f"{name}: watch --json")
                    except InputError:
                        continue  # a line that is no tick (a remote warning on stdout): skip it
                    if not isinstance(data, dict):
                        continue
                    if down_since is not None:
                        yield HostReconnected(host=name, down_s=round(time.monotonic() - down_since, 3))
                        down_since = None
                    backoff = self.backoff_first_s
                    ev = self.event_of(name, data)
                    if ev is not None:
                        yield ev
            finally:
                rc, err = await self._stop(proc)
                self._proc = None
            reason, detail = self._why(rc, err, stalled, killed=stalled or too_large, too_large=too_large)
            if down_since is None:
                down_since = time.monotonic()
            wait_s = min(backoff, self.backoff_max_s) * (0.8 + 0.4 * random.random())
            yield HostUnreachable(host=name, reason=reason, detail=detail, retry_in_s=round(wait_s, 3))
            backoff = min(backoff * 2, self.backoff_max_s)
            if deadline is not None:
                wait_s = min(wait_s, max(0.0, deadline - time.monotonic()))
            await asyncio.sleep(wait_s)

    async def aclose(self) -> None:
        if self._proc is not None:
            await self._stop(self._proc)


class RemoteFollow(RemoteWatch):
    """Follow one host's layout: its ``follow --json`` (launches, every log line, phases, ready, exits, diagnoses)
    over one SSH session, reconnected like the telemetry stream. Yields :class:`RemoteEvent` (each line checked
    as a recording's event is, :func:`event_from_dict`; one that is not, or of a kind this process has not loaded
    — the playbook's ``diagnosis`` is known once ``tui.core.playbook`` is imported, as every front end does — is
    skipped and counted in ``skipped``).
    After a reconnect the remote side sends its logs again from the first line: lines already yielded are not
    yielded twice."""

    max_line = MAX_FOLLOW_LINE

    def __init__(self, transport: SshTransport, **kwargs: Any) -> None:
        kwargs.setdefault("stall_s", 4.0)  # heartbeats each second
        super().__init__(transport, **kwargs)
        self.skipped = 0
        self.last_skipped = ""  # the kind and why of the last line skipped
        self._layout = ""
        self._seen: dict[tuple[str, str], int] = {}  # (layout id, server) → the last line number yielded

    def remote_argv(self) -> list[str]:
        return self.transport.entry.remote_cli("follow", "--json", *self.extra_args)

    def event_of(self, host: str, data: dict[str, Any]) -> Event | None:
        if data.get("kind") == "heartbeat":
            return None
        try:
            ev = event_from_dict(data)
        except ValueError as exc:
            self.skipped += 1
            self.last_skipped = printable(f"{typedread.described(data.get('kind'))}: {str(exc)[:200]}", 300)
            return None
        if isinstance(ev, LayoutChanged):
            self._layout = ev.layout_id
        elif isinstance(ev, LogLine):
            key = (self._layout, ev.server)
            if ev.lineno <= self._seen.get(key, 0):
                return None
            if key not in self._seen and len(self._seen) >= MAX_FOLLOWED:
                self._seen.pop(next(iter(self._seen)))
            self._seen[key] = ev.lineno
        return RemoteEvent(host=host, event=data)
