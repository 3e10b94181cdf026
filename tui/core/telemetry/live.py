"""Live telemetry of a host: the GPU sampler thread and the server poller, run together.

:func:`collect_snapshot` is one reading (what ``disagg-tui status`` shows); :class:`LiveTelemetry` keeps reading
and yields one tick per GPU sample (what ``disagg-tui watch`` streams). Both give the same plain-data shape
(:func:`tui.core.telemetry.view.tick_dict`).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx

from tui.core.events import Event, EventBus
from tui.core.host.base import Host
from tui.core.launch.adopt import follow_orphans
from tui.core.launch.lifecycle import assess_layout
from tui.core.launch.state import LayoutRecord, StateStore
from tui.core.telemetry.events import GpuSampled
from tui.core.telemetry.gpu import GpuHostFacts
from tui.core.telemetry.layout import ActiveLayout
from tui.core.telemetry.poller import Endpoint, PollerConfig, ServerPoller, ServerStatus
from tui.core.telemetry.procmap import ProcessOwners
from tui.core.telemetry.sampler import DEFAULT_RATE_HZ, GpuSampler, SamplerThread
from tui.core.telemetry.view import HostInfo, tick_dict

LAYOUT_RECHECK_S = 2.0


def host_info(host: Host, facts: GpuHostFacts | None) -> HostInfo:
    """Label parts without ``host.facts`` (which, on a real host, runs ``vllm --version``)."""
    name = socket.gethostname()
    if host.simulated:
        name = f"sim-{name}"
    return HostInfo(hostname=name, simulated=host.simulated, driver=facts.driver if facts else None,
                    cuda=facts.cuda_driver if facts else None)


def layout_dict(layout: LayoutRecord | None) -> dict[str, Any] | None:
    """The layout part of a tick: its status is what it is now (``degraded``/``failed`` once a server or the proxy
    has exited, named under ``exited``), not only what the state file recorded."""
    if layout is None:
        return None
    health = assess_layout(layout)
    return {"id": layout.id, "topology": layout.topology, "profile": layout.profile_id, "status": health.status,
            "recorded_status": health.recorded, "exited": list(health.exited),
            "simulated": layout.simulated, "endpoint": layout.endpoint or None}


def _sample_with_facts(sampler: GpuSampler) -> tuple[GpuSampled | None, GpuHostFacts | None, str | None]:
    thread = SamplerThread(sampler, None)
    try:
        facts = sampler.host_facts()
    except Exception as exc:  # noqa: BLE001 - shown as an error of the snapshot, never raised
        return None, None, f"GPU facts unavailable: {exc}"
    return thread.sample_once(), facts, None


async def collect_snapshot(host: Host, store: StateStore | None = None, *,
                           endpoints: Sequence[Endpoint] | None = None, health_timeout_s: float = 1.0,
                           metrics_timeout_s: float = 2.0,
                           transport: httpx.AsyncBaseTransport | None = None,
                           api_key: str | None = None) -> dict[str, Any]:
    """One reading of every GPU and of every server (and the proxy) of the active layout, as plain data.

    GPUs are read in a thread while the servers are polled (``/health``, then ``/metrics`` of those that are up,
    and ``/version`` and ``/v1/models``). Rates and latency quantiles need two scrapes, so a snapshot has the
    gauges and totals only (the reason is under ``metrics.unavailable``). Never raises for a GPU or a server
    that cannot be read: the tick says so under ``errors`` or the server's ``health``. ``api_key``: what
    ``/v1/models`` of a server started with one is asked with (default ``$VLLM_API_KEY``).
    """
    active = ActiveLayout(store, min_interval_s=0.0)
    layout = active.get()
    eps = list(endpoints) if endpoints is not None else active.endpoints()
    errors: list[str] = []
    sampled: GpuSampled | None = None
    facts: GpuHostFacts | None = None
    try:
        nvml = await asyncio.to_thread(host.nvml)
    except Exception as exc:  # noqa: BLE001 - a host without readable GPUs still has servers to show
        nvml = None
        errors.append(f"NVML unavailable: {exc}")
    poller = ServerPoller(eps, config=PollerConfig(health_timeout_s=health_timeout_s,
                                                   metrics_timeout_s=metrics_timeout_s, api_key=api_key),
                          starting=active.starting, transport=transport)
    try:
        if nvml is not None:
            sampler = GpuSampler(nvml, owners=ProcessOwners(active.refs))
            gpu_part = asyncio.to_thread(_sample_with_facts, sampler)
            (sampled, facts, err), statuses = await asyncio.gather(gpu_part, poller.poll_once())
            if err:
                errors.append(err)
        else:
            statuses = await poller.poll_once()
    finally:
        await poller.stop()
    info = host_info(host, facts)
    if sampled is not None:
        sampled = GpuSampled(ts=sampled.ts, host=info.label([g.name for g in sampled.gpus]), simulated=host.simulated,
                             gpus=sampled.gpus, error=sampled.error)
    lay = await asyncio.to_thread(layout_dict, layout)  # psutil looks at each of its processes
    tick = tick_dict(info, sampled, statuses, facts=facts, layout=lay)
    tick["errors"] = errors + tick["errors"]
    return tick


def collect_snapshot_sync(host: Host, store: StateStore | None = None, **kwargs: Any) -> dict[str, Any]:
    """:func:`collect_snapshot` for callers without an event loop (a CLI command)."""
    return asyncio.run(collect_snapshot(host, store, **kwargs))


class LiveTelemetry:
    """Sampler thread + poller on one bus; ``ticks()`` yields a tick dict per GPU sample."""

    def __init__(self, host: Host, store: StateStore | None = None, *, rate_hz: float = DEFAULT_RATE_HZ,
                 poller_config: PollerConfig | None = None, endpoints: Sequence[Endpoint] | None = None,
                 bus: EventBus | None = None, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.host = host
        self.bus = bus or EventBus()
        self.rate_hz = rate_hz
        self.poller_config = poller_config or PollerConfig()
        self.active = ActiveLayout(store)
        self._fixed_endpoints = list(endpoints) if endpoints is not None else None
        self._transport = transport
        self.thread: SamplerThread | None = None
        self.poller: ServerPoller | None = None
        self._endpoints: list[Endpoint] = []
        self._follow_lock = asyncio.Lock()
        #: the benchmark run the servers' latency figures cover: (run id, start, end or None), from the bus
        self._run: tuple[str, float, float | None] | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.facts: GpuHostFacts | None = None
        self.errors: list[str] = []
        self._info = host_info(host, None)

    async def __aenter__(self) -> LiveTelemetry:
        loop = asyncio.get_running_loop()
        self.bus.attach_loop(loop)
        self._unsubscribe = self.bus.subscribe(self._on_bench)
        try:
            nvml = await asyncio.to_thread(self.host.nvml)
            sampler = GpuSampler(nvml, owners=ProcessOwners(self.active.refs))
            self.facts = await asyncio.to_thread(sampler.host_facts)
        except Exception as exc:  # noqa: BLE001 - servers can still be watched
            self.errors.append(f"GPUs cannot be read: {exc}")
            sampler = None
        self._info = host_info(self.host, self.facts)
        if sampler is not None:
            label = self._info.label(self.facts.names if self.facts else ())
            self.thread = SamplerThread(sampler, self.bus, rate_hz=self.rate_hz, host_label=label,
                                        simulated=self.host.simulated)
        await self.follow_layout()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.thread is not None:
            await asyncio.to_thread(self.thread.stop)
            self.thread = None
        if self.poller is not None:
            await self.poller.stop()
            self.poller = None

    def _on_bench(self, ev: Event) -> None:
        """A benchmark's run began or ended (its events, by kind: the bench part is above this one): the servers'
        latency figures cover that run, its warm-up left out (issue 22, finding 14: the servers' view said TTFT
        p50 7.5 s, warm-up requests that waited on a JIT included, next to the run's 726 ms)."""
        if ev.kind == "bench_tick" and getattr(ev, "phase", "") == "run":
            run_id = str(getattr(ev, "run_id", ""))
            if self._run is None or self._run[0] != run_id:
                start = ev.ts - max(float(getattr(ev, "elapsed_s", 0.0) or 0.0), 0.0)
                self._run = (run_id, start, None)
                if self.poller is not None:
                    self.poller.mark_run(start)
        elif ev.kind == "bench_done" and self._run is not None and self._run[0] == str(getattr(ev, "run_id", "")):
            self._run = (self._run[0], self._run[1], ev.ts)
            if self.poller is not None:
                self.poller.end_run(ev.ts)

    async def follow_layout(self) -> None:
        """Poll the servers of the layout the state file shows now (a front end calls it every few seconds, and
        when it hears the layout changed). One follow at a time: two callers never start two pollers."""
        async with self._follow_lock:
            await self._follow_layout()

    async def _follow_layout(self) -> None:
        if self._fixed_endpoints is not None:
            wanted = self._fixed_endpoints
        else:
            if self.active.store is not None:  # a start whose launcher is gone is followed by its servers' health
                await asyncio.to_thread(follow_orphans, self.active.store)
            # read now, not the view of up to a second ago: a caller that heard the layout change (a server
            # launched, ready) would otherwise poll the layout as it was before (a short run ended unpolled)
            wanted = await asyncio.to_thread(self.active.endpoints, fresh=True)
        if self.poller is not None and wanted == self._endpoints:
            return
        if self.poller is not None:
            await self.poller.stop()
        self._endpoints = list(wanted)
        self.poller = ServerPoller(self._endpoints, self.bus, config=self.poller_config,
                                   starting=self.active.starting, transport=self._transport)
        if self._run is not None:  # a run going on (or just ended): the new poller's figures cover it too
            self.poller.mark_run(self._run[1])
            if self._run[2] is not None:
                self.poller.end_run(self._run[2])
        await self.poller.start()
        await self.poller.first_health()  # so the first tick already says whether each server is up

    def start_sampling(self) -> None:
        """Start the GPU sampler thread (its ``GpuSampled`` events go to the bus) without ``ticks()``: for a
        front end that subscribes to the bus itself."""
        if self.thread is not None:
            self.thread.start()  # idempotent

    def statuses(self) -> list[ServerStatus]:
        return self.poller.statuses() if self.poller is not None else []

    def tick(self, sample: GpuSampled | None) -> dict[str, Any]:
        layout = self.active.get() if self._fixed_endpoints is None else None
        tick = tick_dict(self._info, sample, self.statuses(), facts=self.facts, layout=layout_dict(layout))
        tick["errors"] = self.errors + tick["errors"]
        return tick

    async def ticks(self, seconds: float | None = None) -> AsyncIterator[dict[str, Any]]:
        """One tick per GPU sample (per sampling period when no GPU can be read), for ``seconds`` or forever."""
        loop = asyncio.get_running_loop()
        end = None if seconds is None else loop.time() + seconds
        next_layout_check = loop.time() + LAYOUT_RECHECK_S

        async def layout_check() -> None:
            nonlocal next_layout_check
            if loop.time() >= next_layout_check:
                next_layout_check = loop.time() + LAYOUT_RECHECK_S
                await self.follow_layout()

        if self.thread is None:
            period = 1.0 / self.rate_hz
            while end is None or loop.time() < end:
                yield self.tick(None)
                await layout_check()
                await asyncio.sleep(period if end is None else max(min(period, end - loop.time()), 0.0))
            return
        stream = self.bus.stream(maxsize=256)
        self.thread.start()
        try:
            while True:
                remaining = None if end is None else end - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                event = await stream.get(remaining)
                if event is None:
                    break
                if isinstance(event, GpuSampled):
                    yield self.tick(event)
                    await layout_check()
        finally:
            stream.close()
