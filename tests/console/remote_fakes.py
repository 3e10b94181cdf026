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


def follow(host: str, *events: Event) -> list[Event]:
    """What ``host``'s follow stream yields: each event of its layout as a ``RemoteEvent`` (its line's dict)."""
    from tui.core.remote.events import RemoteEvent

    return [RemoteEvent(ts=ev.ts, host=host, event=ev.to_dict()) for ev in events]


def starting_on(host: str, lines: int = 3, ts: float = T0) -> list[Event]:
    """``host``'s 1P1D starting: its layout, its decode-0 launched 40 s ago (expected in 120 s), ``lines`` lines
    of its log (an own poll among them), loading its weights."""
    from tui.core.launch.events import LayoutChanged, LogLine, ServerLaunched, ServerPhase

    evs: list[Event] = [
        LayoutChanged(ts=ts - 40, layout_id=f"{host}-layout", status="starting", topology="1p1d",
                      profile_id="qwen3.6-27b-nvfp4", endpoint="http://10.64.2.2:8000", simulated=True),
        ServerLaunched(ts=ts - 40, layout_id=f"{host}-layout", server="decode-0", role="decode", pid=4242,
                       url="http://10.64.2.2:8200", command="vllm serve ...", log="/srv/state/logs/decode-0.log",
                       started=ts - 40, expected_s=120.0, expected_source="warm"),
    ]
    for i in range(1, lines + 1):
        text = 'INFO:     10.64.2.1:50458 - "GET /health HTTP/1.1" 200 OK' if i == 2 else \
            f"INFO 12-01 11:59:{i:02d} [loader.py:42] {host} decode-0 line {i}"
        evs.append(LogLine(ts=ts - 40 + i, server="decode-0", lineno=i, text=text))
    evs.append(ServerPhase(ts=ts - 5, server="decode-0", phase="weights", label="loading weights", progress=0.4))
    return follow(host, *evs)
