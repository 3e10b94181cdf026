"""The server poller: ``/health``, ``/metrics``, ``/v1/models`` and ``/version`` of every server and the proxy.

One task per server and endpoint kind, so a server that hangs never delays another; every request has a timeout
shorter than its polling period (a hung server is ``unresponsive`` within two periods). ``/health`` at 2 Hz and
``/metrics`` at 1 Hz by default; ``/v1/models`` and ``/version`` once each time a server comes up. States:

- ``up`` (200), ``dead`` (503: vLLM's engine died, its API process still answers), ``error`` (any other answer);
- ``down`` (connection refused), or ``starting`` when refused while the supervisor says the server is starting
  (vLLM binds its port early but listens only once the engine is ready);
- ``unresponsive``: no answer within the timeout.

Servers are told apart by endpoint: two vLLM servers export identical label sets. Results go out as
:class:`ServerHealth` and :class:`ServerMetrics` events, and :meth:`ServerPoller.statuses` gives the latest.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import httpx

from tui.core.events import EventBus
from tui.core.http_transport import LeanTransport
from tui.core.telemetry import prom
from tui.core.telemetry.derive import KEEP_PREFIXES, MetricsWindow
from tui.core.telemetry.events import (
    DEAD,
    DOWN,
    ERROR,
    STARTING,
    UNRESPONSIVE,
    UP,
    ServerHealth,
    ServerMetrics,
)

DEFAULT_HEALTH_HZ = 2.0
DEFAULT_METRICS_HZ = 1.0
TIMEOUT_SHARE = 0.8  # a request may take this share of its period
METRICS_BACKOFF_S = 30.0  # a server without /metrics (404) is asked again this rarely
MAX_METRICS_BYTES = 8 * 2**20


_HEADERS = {"user-agent": "disagg-tui-telemetry", "accept": "*/*"}
#: where the poller finds vLLM's API key when it is not handed one: the variable vLLM itself reads
API_KEY_ENV = "VLLM_API_KEY"


def api_key_from_env() -> str | None:
    return os.environ.get(API_KEY_ENV, "").strip() or None


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    url: str  # base URL, e.g. http://127.0.0.1:8100
    role: str = "single"  # single | prefill | decode | proxy
    api_key: bool = False  # it answers /v1 only with vLLM's API key: /v1/models is asked with one when known


@dataclass(frozen=True, slots=True)
class PollerConfig:
    health_hz: float = DEFAULT_HEALTH_HZ
    metrics_hz: float = DEFAULT_METRICS_HZ
    window_s: float = 10.0  # latency quantiles over this window
    rate_window_s: float = 5.0  # token rates over this window
    health_timeout_s: float | None = None  # default: 0.8 × the health period
    metrics_timeout_s: float | None = None  # default: 0.8 × the metrics period
    keep: tuple[str, ...] | None = KEEP_PREFIXES  # metric families parsed (None: all)
    #: the key sent (``Authorization: Bearer``) to an endpoint started with one; None: ``$VLLM_API_KEY`` of this
    #: process (what ``--api-key`` defaults to), read when the poller is made. Never logged, shown or stored.
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("health_hz", "metrics_hz"):
            value = getattr(self, name)
            if not 0 < value <= 20:
                raise ValueError(f"{name} must be within (0, 20], got {value}")

    @property
    def health_timeout(self) -> float:
        return self.health_timeout_s or TIMEOUT_SHARE / self.health_hz

    @property
    def metrics_timeout(self) -> float:
        return self.metrics_timeout_s or TIMEOUT_SHARE / self.metrics_hz


@dataclass
class ServerStatus:
    """The latest of one server: health, derived metrics, and what ``/version`` and ``/v1/models`` said."""

    endpoint: Endpoint
    health: ServerHealth | None = None
    metrics: ServerMetrics | None = None
    version: str | None = None
    model: str | None = None
    max_model_len: int | None = None
    window: MetricsWindow = field(default_factory=MetricsWindow)
    labels: prom.LabelCache = field(default_factory=prom.LabelCache)
    metrics_missing_until: float = 0.0
    up: asyncio.Event = field(default_factory=asyncio.Event)  # set while /health answers 200
    polls: int = 0
    scrapes: int = 0


def _refused(exc: BaseException) -> bool:
    """Whether a connect error was a refusal (anyio hides it under "All connection attempts failed")."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 10:
        if isinstance(cur, ConnectionRefusedError) or "refused" in str(cur).lower():
            return True
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return False


class ServerPoller:
    def __init__(self, endpoints: Sequence[Endpoint], bus: EventBus | None = None, *,
                 config: PollerConfig | None = None, starting: Callable[[str], bool] | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, wall: Callable[[], float] = time.time) -> None:
        self.config = config or PollerConfig()
        self.bus = bus
        self._starting = starting or (lambda _name: False)
        self._transport = transport
        self._wall = wall
        self._status: dict[str, ServerStatus] = {}
        for ep in endpoints:
            key = ep.url.rstrip("/")
            if key in self._status:
                continue  # one server, one poll: identical endpoints are one server
            self._status[key] = ServerStatus(
                endpoint=ep, window=MetricsWindow(window_s=self.config.window_s,
                                                  rate_window_s=self.config.rate_window_s))
        secret = self.config.api_key if self.config.api_key is not None else api_key_from_env()
        self._auth_headers = {**_HEADERS, "authorization": f"Bearer {secret}"} if secret else _HEADERS
        self._client: httpx.AsyncBaseTransport | None = None
        self._urls: dict[str, httpx.URL] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._info_tasks: set[asyncio.Task[None]] = set()
        self._first_round = asyncio.Event()  # set once every server has had one /health poll

    # --- lifecycle --------------------------------------------------------------------------------------------
    def statuses(self) -> list[ServerStatus]:
        return list(self._status.values())

    def _make_client(self) -> httpx.AsyncBaseTransport:
        # an httpx transport, without the client layer: a poll needs no cookies, auth, redirects or proxies, and
        # skipping them halves the CPU of a /health poll; the lean asyncio transport (the proxy's) takes off about
        # a third more (benchmarks/telemetry_cost.py)
        if self._transport is not None:
            return self._transport
        n = max(len(self._status), 1)
        limits = httpx.Limits(max_connections=4 * n, max_keepalive_connections=2 * n)
        if all(key.startswith("http://") for key in self._status):
            return LeanTransport(limits)
        return httpx.AsyncHTTPTransport(limits=limits, retries=0)  # https endpoints: httpx's own

    async def start(self) -> None:
        """Start the per-server polling tasks (returns at once)."""
        if self._client is None:
            self._client = self._make_client()
        if self._tasks:
            return
        for st in self._status.values():
            self._tasks.append(asyncio.create_task(self._health_loop(st), name=f"health {st.endpoint.name}"))
            self._tasks.append(asyncio.create_task(self._metrics_loop(st), name=f"metrics {st.endpoint.name}"))

    def mark_run(self, start: float) -> None:
        """A benchmark run began at ``start`` (its warm-up excluded): every server's latency figures cover what it
        observed since, not the rolling window (``MetricsWindow.mark_run``)."""
        for st in self._status.values():
            st.window.mark_run(start)

    def end_run(self, end: float) -> None:
        for st in self._status.values():
            st.window.end_run(end)

    async def first_health(self, limit_s: float | None = None) -> None:
        """Wait until every server has answered (or failed) its first /health poll, at most ``limit_s``."""
        if all(st.health is not None for st in self._status.values()):
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_round.wait(),
                                   limit_s if limit_s is not None else self.config.health_timeout + 0.1)

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks + list(self._info_tasks), []
        self._info_tasks.clear()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self._client is not None:
            if self._client is not self._transport:  # an injected transport belongs to the caller
                await self._client.aclose()
            self._client = None

    async def poll_once(self, *, metrics: bool = True) -> list[ServerStatus]:
        """One health poll (and one scrape of the servers that are up) of every server, concurrently."""
        if self._client is None:
            self._client = self._make_client()
        await asyncio.gather(*(self._poll_health(st, fetch_info=False) for st in self._status.values()))
        if metrics:
            await asyncio.gather(*(self._poll_metrics(st) for st in self._status.values()
                                   if st.health is not None and st.health.state == UP))
        infos = [self._fetch_info(st) for st in self._status.values()
                 if st.health is not None and st.health.state == UP and st.version is None]
        if infos:
            await asyncio.gather(*infos)
            for st in self._status.values():
                if st.health is not None and st.version is not None:
                    st.health = replace(st.health, version=st.version, model=st.model,
                                        max_model_len=st.max_model_len)
        return self.statuses()

    # --- loops ------------------------------------------------------------------------------------------------
    async def _every(self, period: float, fn: Callable[[], object]) -> None:
        loop = asyncio.get_running_loop()
        next_t = loop.time()
        while True:
            result = fn()
            if asyncio.iscoroutine(result):
                await result
            next_t += period
            delay = next_t - loop.time()
            if delay < 0:
                next_t = loop.time()
                delay = 0.0
            await asyncio.sleep(delay)

    async def _health_loop(self, st: ServerStatus) -> None:
        await self._every(1.0 / self.config.health_hz, lambda: self._poll_health(st))

    async def _metrics_loop(self, st: ServerStatus) -> None:
        # scrape only while the server is up, the first time right after /health first answers 200
        loop = asyncio.get_running_loop()
        period = 1.0 / self.config.metrics_hz
        while True:
            await st.up.wait()
            started = loop.time()
            if self._wall() >= st.metrics_missing_until:
                await self._poll_metrics(st)
            await asyncio.sleep(max(period - (loop.time() - started), 0.0))

    # --- one poll ---------------------------------------------------------------------------------------------
    def _publish(self, event: ServerHealth | ServerMetrics) -> None:
        if self.bus is not None:
            self.bus.publish(event)

    async def _get(self, url: str, limit_s: float, *, auth: bool = False) -> httpx.Response:
        """GET ``url`` with the whole exchange bounded by ``limit_s``; the body is read before returning.
        ``auth``: with the API key, when there is one."""
        assert self._client is not None
        target = self._urls.get(url)
        if target is None:
            target = self._urls[url] = httpx.URL(url)
        request = httpx.Request("GET", target, headers=self._auth_headers if auth else _HEADERS,
                                extensions={"timeout": httpx.Timeout(limit_s).as_dict()})
        async with asyncio.timeout(limit_s):  # the whole exchange, not only each read
            response = await self._client.handle_async_request(request)
            try:
                await response.aread()
            finally:
                await response.aclose()
        return response

    async def _poll_health(self, st: ServerStatus, *, fetch_info: bool = True) -> None:
        ep = st.endpoint
        base = ep.url.rstrip("/")
        t0 = time.perf_counter()
        status_code: int | None = None
        error: str | None = None
        latency: float | None = None
        try:
            resp = await self._get(base + "/health", self.config.health_timeout)
            latency = (time.perf_counter() - t0) * 1000.0
            status_code = resp.status_code
            if status_code == 200:
                state = UP
            elif status_code == 503:
                state = DEAD
                error = "503: the engine is dead (EngineDeadError)"
            else:
                state = ERROR
                error = f"HTTP {status_code}"
        except (TimeoutError, httpx.TimeoutException):
            state = UNRESPONSIVE
            error = f"no answer within {self.config.health_timeout * 1000:.0f} ms"
        except httpx.ConnectError as exc:
            refused = _refused(exc)
            state = STARTING if (refused and self._starting(ep.name)) else DOWN
            error = "connection refused" if refused else f"cannot connect: {exc}"
        except httpx.HTTPError as exc:
            state = ERROR
            error = f"{type(exc).__name__}: {exc}"
        now = self._wall()
        prev = st.health
        since = prev.since if (prev is not None and prev.state == state) else now
        if state == UP and (prev is None or prev.state != UP):
            st.version = st.model = None
            st.max_model_len = None
            if fetch_info:
                task = asyncio.get_running_loop().create_task(self._fetch_info(st))
                self._info_tasks.add(task)
                task.add_done_callback(self._info_tasks.discard)
        if state == UP:
            st.up.set()
        else:
            st.up.clear()
        st.polls += 1
        st.health = ServerHealth(ts=now, server=ep.name, endpoint=base, role=ep.role, state=state,
                                 latency_ms=latency, status_code=status_code, error=error, since=since,
                                 version=st.version, model=st.model, max_model_len=st.max_model_len)
        self._publish(st.health)
        if not self._first_round.is_set() and all(s.health is not None for s in self._status.values()):
            self._first_round.set()

    async def _fetch_info(self, st: ServerStatus) -> None:
        base = st.endpoint.url.rstrip("/")
        timeout = self.config.health_timeout
        with contextlib.suppress(httpx.HTTPError, TimeoutError, ValueError):
            resp = await self._get(base + "/version", timeout)
            if resp.status_code == 200:
                version = resp.json().get("version")
                st.version = str(version) if version is not None else None
        with contextlib.suppress(httpx.HTTPError, TimeoutError, ValueError, AttributeError, IndexError):
            resp = await self._get(base + "/v1/models", timeout, auth=st.endpoint.api_key)
            if resp.status_code == 200:
                data = resp.json().get("data") or []
                if data:
                    st.model = str(data[0].get("id"))
                    mml = data[0].get("max_model_len")
                    st.max_model_len = int(mml) if mml is not None else None

    async def _poll_metrics(self, st: ServerStatus) -> None:
        ep = st.endpoint
        base = ep.url.rstrip("/")
        timeout = self.config.metrics_timeout
        t0 = time.perf_counter()
        error: str | None = None
        text: str | None = None
        try:
            resp = await self._get(base + "/metrics", timeout)
            if resp.status_code == 200:
                if len(resp.content) > MAX_METRICS_BYTES:
                    error = f"/metrics is {len(resp.content)} bytes: larger than {MAX_METRICS_BYTES}"
                else:
                    text = resp.text
            else:
                error = f"/metrics answered HTTP {resp.status_code}"
                if resp.status_code == 404:
                    st.metrics_missing_until = self._wall() + METRICS_BACKOFF_S
        except (TimeoutError, httpx.TimeoutException):
            error = f"/metrics: no answer within {timeout * 1000:.0f} ms"
        except httpx.HTTPError as exc:
            error = f"/metrics: {type(exc).__name__}: {exc}"
        scrape_ms = (time.perf_counter() - t0) * 1000.0
        now = self._wall()
        if text is None:
            st.metrics = ServerMetrics(ts=now, server=ep.name, endpoint=base, role=ep.role,
                                       figures=st.metrics.figures if st.metrics else None, error=error,
                                       scrape_ms=scrape_ms)
            self._publish(st.metrics)
            return
        exp = prom.parse(text, keep=self.config.keep, label_cache=st.labels.get())
        st.window.add(now, exp)
        st.scrapes += 1
        figures = st.window.figures(ep.role)
        st.metrics = ServerMetrics(ts=now, server=ep.name, endpoint=base, role=ep.role, figures=figures,
                                   scrape_ms=scrape_ms, parse_errors=len(exp.errors))
        self._publish(st.metrics)
