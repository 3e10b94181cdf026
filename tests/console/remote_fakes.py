"""Remote hosts for the console's tests without SSH: a fake source at the console's seam (``make_console(remotes=...)``)
and ticks written by the same code that writes a remote ``watch --json`` line (``tui.core.telemetry.view``), with
the scripted figures and clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from tests.console import scripted
from tui.core.events import Event
from tui.core.remote.events import HostReconnected, HostUnreachable, RemoteTick
from tui.core.telemetry.events import ServerHealth, ServerMetrics
from tui.core.telemetry.poller import Endpoint, ServerStatus
from tui.core.telemetry.view import HostInfo, json_safe, tick_dict

T0 = scripted.T0


class FakeRemote:
    """A host's stream: what the test pushes, in order; it never ends by itself (a real stream reconnects)."""

    def __init__(self, *events: Event) -> None:
        self.queue: asyncio.Queue[Event] | None = None
        self._early = list(events)
        self.opened = 0

    def push(self, ev: Event) -> None:
        if self.queue is None:
            self._early.append(ev)
        else:
            self.queue.put_nowait(ev)

    async def events(self, seconds: float | None = None) -> AsyncIterator[Event]:
        self.opened += 1
        self.queue = asyncio.Queue()
        for ev in self._early:
            self.queue.put_nowait(ev)
        self._early = []
        while True:
            yield await self.queue.get()


def tick(host: str, *, util: tuple[float, float] = (40.0, 70.0), loaded: bool = True, servers: bool = True,
         ts: float = T0) -> RemoteTick:
    """One tick of ``host`` as its ``watch --json`` prints it: two simulated B200s, a 1P1D layout's servers."""
    sample = scripted.gpus(util, loaded=loaded, ts=ts)
    statuses = []
    if servers:
        for name, role, _, port in scripted.SERVERS:
            url = f"http://127.0.0.1:{port}"
            st = ServerStatus(endpoint=Endpoint(name=name, url=url, role=role))
            st.health = ServerHealth(ts=ts, server=name, endpoint=url, role=role, state="up", latency_ms=3.0,
                                     status_code=200)
            st.metrics = ServerMetrics(ts=ts, server=name, endpoint=url, role=role,
                                       figures=scripted._figures(name))
            statuses.append(st)
    layout = {"id": scripted.LAYOUT, "topology": "1p1d", "profile": "qwen3.6-27b-nvfp4", "status": "ready",
              "recorded_status": "ready", "exited": [], "simulated": True, "endpoint": "http://127.0.0.1:8000"}
    data: dict[str, Any] = tick_dict(HostInfo(hostname=f"sim-{host}", simulated=True), sample, statuses,
                                     layout=layout if servers else None, now=ts)
    return RemoteTick(ts=ts, host=host, tick=json_safe(data))


def unreachable(host: str, ts: float = T0, reason: str = "refused", retry_in_s: float = 4.0) -> HostUnreachable:
    return HostUnreachable(ts=ts, host=host, reason=reason, retry_in_s=retry_in_s,
                           detail="ssh: connect to host 10.64.2.2 port 22: Connection refused")


def reconnected(host: str, ts: float = T0, down_s: float = 12.5) -> HostReconnected:
    return HostReconnected(ts=ts, host=host, down_s=down_s)
