"""Recording a CLI session: the ``--record``/``--no-record`` options, the recorder on the command's bus, the host's
telemetry fed into it, and the results text the command prints (recorded exactly as printed)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import shlex
import sys
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TextIO, TypeVar

from tui.cli.context import CliContext
from tui.core.bench.events import ResultsReported
from tui.core.events import Event, EventBus, OperatorAction
from tui.core.launch.state import StateStore
from tui.core.record import Recorder, new_header, recording_path
from tui.core.record.fingerprint import host_fingerprint

T = TypeVar("T")


def add_record_options(p: argparse.ArgumentParser, *, default_on: bool) -> None:
    g = p.add_argument_group("recording")
    if default_on:
        g.add_argument("--record", action="store_true", default=True,
                       help="record the session (the default) under the data directory's recordings/ ('disagg-tui "
                            "replay')")
        g.add_argument("--no-record", dest="record", action="store_false",
                       help="do not record the session")
    else:
        g.add_argument("--record", action="store_true", default=False,
                       help="record the session under the data directory's recordings/ ('disagg-tui replay')")
    g.add_argument("--record-to", metavar="FILE.dtrec", help="record to this file (implies recording)")


class _Tee(io.TextIOBase):
    def __init__(self, a: TextIO, b: io.StringIO) -> None:
        self.a, self.b = a, b

    def write(self, s: str) -> int:
        self.b.write(s)
        return self.a.write(s)

    def flush(self) -> None:
        self.a.flush()

    def fileno(self) -> int:
        return self.a.fileno()


class SessionRecording:
    """The recorder of one command (or nothing, when recording is off)."""

    def __init__(self, ctx: CliContext, args: argparse.Namespace, command: str, bus: EventBus, *,
                 telemetry: bool = True) -> None:
        self.ctx = ctx
        self.bus = bus
        self.command = command
        self.telemetry = telemetry
        to = getattr(args, "record_to", None)
        self.enabled = bool(getattr(args, "record", False) or to)
        self.recorder: Recorder | None = None
        if not self.enabled:
            return
        host = ctx.host
        argv = " ".join(shlex.quote(a) for a in sys.argv[1:]) or command
        header = new_header(argv, recorded=("everything",), host=host_fingerprint(host.facts),
                            simulated=host.simulated)
        path = Path(to) if to else recording_path(f"{command}-{'sim' if host.simulated else 'host'}")
        self.recorder = Recorder(path, header).start()
        self.recorder.attach(bus)
        bus.publish(OperatorAction(action=command, source="cli", detail={"argv": sys.argv[1:]}))

    @property
    def path(self) -> Path | None:
        return self.recorder.path if self.recorder is not None else None

    async def around(self, coro: Awaitable[T]) -> T:
        """Await ``coro`` with the host's telemetry (GPU samples, server health and metrics) feeding the recording."""
        if self.recorder is None or not self.telemetry:
            return await coro
        task = asyncio.create_task(self._telemetry())
        try:
            return await coro
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _telemetry(self) -> None:
        try:
            from tui.core.telemetry.live import LiveTelemetry

            async with LiveTelemetry(self.ctx.host, StateStore(), bus=self.bus) as live:
                # a layout that changes (launched, ready, stopped) is followed at once, not at the next periodic
                # look at the state file: a start and a short run can both end before that look
                loop = asyncio.get_running_loop()
                changed = asyncio.Event()

                def on_event(ev: Event) -> None:
                    if ev.kind in ("layout_changed", "server_launched", "server_ready"):
                        loop.call_soon_threadsafe(changed.set)

                async def follow() -> None:
                    while True:
                        await changed.wait()
                        changed.clear()
                        await live.follow_layout()

                unsubscribe = self.bus.subscribe(on_event)
                follower = asyncio.create_task(follow())
                try:
                    async for _ in live.ticks():
                        pass
                finally:
                    unsubscribe()
                    follower.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await follower
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - telemetry is extra: the session goes on without it
            self.ctx.warn(f"recording without telemetry: {exc}")

    @contextlib.contextmanager
    def results(self, command: str, campaign: str = "") -> Iterator[dict[str, Any]]:
        """Around the code that prints the results: what it writes to stdout is recorded as printed.
        Put ``rows`` and ``recommendation`` into the yielded dict to record them too."""
        extra: dict[str, Any] = {}
        if self.recorder is None:
            yield extra
            return
        buf = io.StringIO()
        original = self.ctx.out
        self.ctx.out = _Tee(original, buf)  # type: ignore[assignment]
        try:
            yield extra
        finally:
            self.ctx.out = original
            self.bus.publish(ResultsReported(command=command, text=buf.getvalue(), campaign=campaign,
                                             rows=tuple(extra.get("rows") or ()),
                                             recommendation=dict(extra.get("recommendation") or {})))

    def close(self) -> None:
        if self.recorder is None:
            return
        path = self.recorder.path
        stats = self.recorder.close()
        self.recorder = None
        extra = f", {stats.dropped} dropped" if stats.dropped else ""
        print(f"recording: {path} ({stats.events:,} events, {stats.bytes / 1e6:.2f} MB{extra}); replay with "
              f"'disagg-tui replay {shlex.quote(str(path))}'", file=self.ctx.err, flush=True)
        if stats.error:
            self.ctx.warn(stats.error)

    def __enter__(self) -> SessionRecording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
