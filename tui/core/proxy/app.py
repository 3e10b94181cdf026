"""The disaggregated proxy as a raw ASGI application (served by uvicorn with the httptools parser).

``POST /v1/completions`` and ``/v1/chat/completions``: the prefill (P) server first, with one output token and a
request for remote decode; then the decode (D) server with the ``kv_transfer_params`` P returned; D's bytes are
relayed to the client as they arrive, unparsed and unbuffered. Both get the same ``X-Request-Id`` and the client's
``Authorization``. A non-200 answer from P or D goes back to the client as it is; a server that cannot be reached
gives 502 with a vLLM-shaped error naming it, one that accepts and does not answer in time 504 (``read_timeout_s``
to P's answer and D's first byte, ``stream_idle_timeout_s`` between D's chunks); a client that goes away cancels
the upstream request.

``GET /health`` is 200 only when every server's ``/health`` is; ``/v1/models`` and ``/version`` go to the first
decode server, ``/tokenize`` and ``/detokenize`` to the first prefill server (so ``vllm bench serve`` works
through the proxy); ``/metrics`` is the proxy's own.

Nothing here looks inside the stream: the cost per request is one JSON parse of the client's body, two small
serialisations and two upstream round trips over kept-alive connections.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from tui.core.http_transport import LeanTransport
from tui.core.printable import printable
from tui.core.proxy.http import (
    CLIENT_CLOSED,
    EVENT_STREAM,
    JSON,
    DisconnectGuard,
    Receive,
    Scope,
    Send,
    Trace,
    access_line,
    dumps,
    error_body,
    ms,
    read_body,
    request_line,
    respond,
    wanted_headers,
)
from tui.core.proxy.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from tui.core.proxy.metrics import ProxyMetrics
from tui.core.proxy.upstream import (
    Balance,
    HealthCache,
    Upstream,
    UpstreamPool,
    decode_body,
    describe_transport_error,
    kv_params_of,
    prefill_body,
)

ACCESS_LOGGER = "tui.proxy.access"
COMPLETION_ROUTES = frozenset({"/v1/completions", "/v1/chat/completions"})
TO_DECODE_ROUTES = frozenset({"/v1/models", "/version"})
TO_PREFILL_ROUTES = frozenset({"/tokenize", "/detokenize"})
#: upstream connections idle this long are dropped: vLLM's uvicorn closes them after 5 s
#: (VLLM_HTTP_TIMEOUT_KEEP_ALIVE), and reusing one it is closing would fail a request
KEEPALIVE_EXPIRY_S = 4.0

#: a server that accepted the request and then says nothing is answered 504 after this long. Generous: the first
#: requests after a start can take minutes on a real GPU (a lazily compiled kernel, a cold cache of Triton/FlashInfer
#: JIT builds, a long prompt queued behind a full batch), and a non-streamed answer arrives only once every token
#: is generated (8k tokens at 30 tok/s is ~4.5 min). Ten minutes is past any of those and still ends a hang.
DEFAULT_READ_TIMEOUT_S = 600.0
#: once a decode answer has started, this long without a byte ends it (an error event for a stream). vLLM sends
#: every token as it comes, so minutes of silence mid-stream is a stuck engine, not a slow one; five minutes
#: leaves room for a preemption storm or a long recompute of a preempted request.
DEFAULT_STREAM_IDLE_TIMEOUT_S = 300.0

_access = logging.getLogger(ACCESS_LOGGER)


def _deadline(seconds: float) -> float | None:
    """``asyncio.timeout_at``'s argument (loop time): ``seconds`` from now, or none (0 turns a timeout off)."""
    return asyncio.get_running_loop().time() + seconds if seconds > 0 else None


_NEVER = float("inf")


class _IdleWatchdog:
    """Expires ``window`` (an ``asyncio.timeout_at`` context) once ``last`` is ``idle`` seconds old. The relay
    loop only stores ``last`` per chunk (a float, not a timer re-armed per chunk: this runs for every token); the
    watchdog's one timer looks when it would expire and re-arms itself from ``last`` when data came meanwhile."""

    __slots__ = ("_handle", "_idle", "_loop", "_window", "last")

    def __init__(self, loop: asyncio.AbstractEventLoop, window: asyncio.Timeout, idle: float) -> None:
        self._loop = loop
        self._window = window
        self._idle = idle
        self.last = loop.time()
        self._handle: asyncio.TimerHandle | None = loop.call_at(self.last + idle, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        last = self.last
        if last != _NEVER and now >= last + self._idle:
            self._handle = None
            self._window.reschedule(now)  # expires now: the relay gets TimeoutError
        else:
            self._handle = self._loop.call_at((now if last == _NEVER else last) + self._idle, self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class _Started:
    """Whether ``http.response.start`` has gone to the client (it is sent with the first body bytes, so a
    server that never sends one can still be answered 504)."""

    __slots__ = ("headers", "sent", "status")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status
        self.headers = headers
        self.sent = False

    async def ensure(self, send: Send) -> None:
        if not self.sent:
            self.sent = True
            await send({"type": "http.response.start", "status": self.status, "headers": self.headers})


@dataclass(frozen=True, slots=True)
class ProxySettings:
    prefill: tuple[str, ...]
    decode: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = 8000
    balance: Balance = "round-robin"
    health_timeout_s: float = 1.0
    health_ttl_s: float = 0.5
    connect_timeout_s: float = 10.0
    #: how long a server may take to start answering (P's whole answer, D's first byte, a forwarded GET's answer)
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    #: how long a decode answer may go without a byte once it has started (a stream between two tokens)
    stream_idle_timeout_s: float = DEFAULT_STREAM_IDLE_TIMEOUT_S
    max_keepalive: int = 512
    access_log: bool = True


class ProxyApp:
    """The ASGI application. ``transport`` replaces the network in unit tests (``httpx.MockTransport``)."""

    def __init__(self, settings: ProxySettings, *, transport: httpx.AsyncBaseTransport | None = None,
                 on_ready: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.settings = settings
        self.prefill = UpstreamPool("prefill", settings.prefill, settings.balance)
        self.decode = UpstreamPool("decode", settings.decode, settings.balance)
        self.metrics = ProxyMetrics(self.prefill.servers + self.decode.servers)
        self.health = HealthCache(lambda: self.client, self.prefill.servers + self.decode.servers,
                                  timeout=settings.health_timeout_s, ttl=settings.health_ttl_s)
        self._transport = transport
        self._on_ready = on_ready
        self._clock = clock
        self._client: httpx.AsyncClient | None = None
        self._warmup: asyncio.Task[object] | None = None

    # --- lifecycle -------------------------------------------------------------------------------------------

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            raise RuntimeError("the proxy has not started (no lifespan startup)")
        return self._client

    async def startup(self) -> None:
        s = self.settings
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=s.max_keepalive,
                              keepalive_expiry=KEEPALIVE_EXPIRY_S)
        self._client = httpx.AsyncClient(
            # plain http:// through the lean asyncio transport; https:// through httpx's own
            transport=self._transport if self._transport is not None else LeanTransport(limits),
            mounts=None if self._transport is not None else {
                "https://": httpx.AsyncHTTPTransport(limits=limits, trust_env=False)},
            timeout=httpx.Timeout(None, connect=s.connect_timeout_s),
            limits=limits,
            headers={"user-agent": "disagg-tui-proxy", "accept-encoding": "identity"},
            trust_env=False,  # an HTTP_PROXY in the environment must never reroute traffic to local servers
            follow_redirects=False,
        )
        # one health round in the background: opens a kept-alive connection to every server and loads what httpx
        # imports lazily, so the first client request does not pay for either
        self._warmup = asyncio.get_running_loop().create_task(self.health.get())
        if self._on_ready is not None:
            self._on_ready()

    async def shutdown(self) -> None:
        if self._warmup is not None:
            self._warmup.cancel()
            self._warmup = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> ProxyApp:
        await self.startup()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # --- ASGI ------------------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:  # noqa: BLE001 - reported to uvicorn, which exits
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        if path in COMPLETION_ROUTES and scope["method"] == "POST":
            await self._completion(scope, receive, send)
            return
        t0 = self._clock()
        route, status, note = await self._other(scope, receive, send)
        self.metrics.requests[(route, status)] += 1
        # every request gets its line, except the probes and scrapes that answer as expected (they come every
        # second or so from the supervisor and Prometheus and would bury the rest)
        quiet = status == 200 and route in ("/health", "/metrics")
        if not quiet and self.settings.access_log and _access.isEnabledFor(logging.INFO):
            _access.info("%s", request_line(scope, status) + f"{printable(note, 300)} total={ms(self._clock() - t0)}")

    async def _other(self, scope: Scope, receive: Receive, send: Send) -> tuple[str, int, str]:
        """Every route but the completions: (route as counted, status, what the access line adds)."""
        path: str = scope["path"]
        method: str = scope["method"]
        if path == "/health":
            if method == "GET":
                return await self._health(send)
        elif path in ("/metrics", "/metrics/"):
            if method == "GET":
                await respond(send, 200, METRICS_CONTENT_TYPE.encode(), self.metrics.render().encode())
                return "/metrics", 200, ""
        elif path in TO_DECODE_ROUTES:
            if method == "GET":
                return await self._forward(scope, receive, send, self.decode.first)
        elif path in TO_PREFILL_ROUTES:
            if method == "POST":
                return await self._forward(scope, receive, send, self.prefill.first)
        elif path not in COMPLETION_ROUTES:
            await respond(send, 404, JSON, b'{"detail":"Not Found"}')
            return "other", 404, ""
        await respond(send, 405, JSON, b'{"detail":"Method Not Allowed"}')
        return path, 405, ""

    # --- completions: P, then D ------------------------------------------------------------------------------

    async def _completion(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = self._clock()
        trace = Trace(route=scope["path"])
        metrics = self.metrics
        metrics.in_flight += 1
        try:
            raw = await read_body(receive)
            if raw is None:
                trace.status = CLIENT_CLOSED
                metrics.client_disconnects += 1
                return
            t_body = self._clock()
            try:
                body = json.loads(raw)
            except ValueError as exc:
                trace.status = 400
                await respond(send, 400, JSON, error_body(f"request body is not JSON: {exc}", 400,
                                                            "BadRequestError"))
                return
            if not isinstance(body, dict):
                trace.status = 400
                await respond(send, 400, JSON, error_body("request body must be a JSON object", 400,
                                                            "BadRequestError"))
                return
            headers = wanted_headers(scope)
            trace.rid = headers.get(b"x-request-id") or str(uuid.uuid4())
            upstream_headers = {"content-type": "application/json", "x-request-id": trace.rid}
            auth = headers.get(b"authorization")
            if auth is not None:
                upstream_headers["authorization"] = auth
            guard = DisconnectGuard(receive)
            async with guard:
                await self._relay(scope, send, body, upstream_headers, headers.get(b"accept-encoding"), trace,
                                  t_body, guard)
            if guard.disconnected:
                trace.status = CLIENT_CLOSED
                metrics.client_disconnects += 1
        finally:
            metrics.in_flight -= 1
            if trace.status == 0:
                trace.status = 500  # an unexpected error: uvicorn answers 500 and logs it
            metrics.requests[(trace.route, trace.status)] += 1
            if self.settings.access_log and _access.isEnabledFor(logging.INFO):
                _access.info("%s", access_line(scope, trace, self._clock() - t0))

    async def _relay(self, scope: Scope, send: Send, body: dict[str, Any], upstream_headers: dict[str, str],
                     accept_encoding: str | None, trace: Trace, t_body: float, guard: DisconnectGuard) -> None:
        path: str = scope["path"]
        clock = self._clock
        client = self.client
        metrics = self.metrics

        p = trace.prefill = self.prefill.pick()
        p_content = dumps(prefill_body(body))
        p.outstanding += 1
        tp0 = clock()
        read_timeout = self.settings.read_timeout_s
        try:
            async with asyncio.timeout_at(_deadline(read_timeout)):
                presp = await client.post(p.url + path, content=p_content, headers=upstream_headers)
        except httpx.TransportError as exc:
            await self._unreachable(send, p, exc, trace)
            return
        except TimeoutError:
            await self._timed_out(send, p, f"no answer within {read_timeout:g} s", trace)
            return
        finally:
            p.outstanding -= 1
        tp1 = clock()
        trace.prefill_s = tp1 - tp0
        trace.prefill_status = presp.status_code
        metrics.prefill[p.url].observe(trace.prefill_s)
        if presp.status_code != 200:
            metrics.upstream_errors[("prefill", p.url, "status")] += 1
            trace.status = presp.status_code
            await respond(send, presp.status_code, presp.headers.get("content-type", "application/json").encode(),
                           presp.content, trace.rid)
            return
        try:
            answer = json.loads(presp.content)
        except ValueError:
            metrics.upstream_errors[("prefill", p.url, "invalid_json")] += 1
            trace.status = 502
            await respond(send, 502, JSON, error_body(f"prefill server {p.url} answered 200 with a body that is "
                                                        "not JSON", 502, "BadGatewayError"), trace.rid)
            return
        kv = kv_params_of(answer)
        trace.kv = kv is not None
        if kv is None:
            metrics.kv_params_missing += 1

        d = trace.decode = self.decode.pick()
        d_request = client.build_request(
            "POST", d.url + path, content=dumps(decode_body(body, kv)),
            headers={**upstream_headers, "accept-encoding": accept_encoding or "identity"})
        d.outstanding += 1
        try:
            td0 = clock()
            metrics.internal.observe((tp0 - t_body) + (td0 - tp1))
            first_byte_by = _deadline(read_timeout)  # D's first byte, headers included, by then
            try:
                async with asyncio.timeout_at(first_byte_by):
                    dresp = await client.send(d_request, stream=True)
            except httpx.TransportError as exc:
                await self._unreachable(send, d, exc, trace)
                return
            except TimeoutError:
                await self._timed_out(send, d, f"no answer within {read_timeout:g} s", trace)
                return
            try:
                await self._stream_back(send, dresp, body.get("stream") is True, trace, guard, td0, first_byte_by)
            finally:
                await dresp.aclose()
        finally:
            d.outstanding -= 1

    async def _stream_back(self, send: Send, dresp: httpx.Response, streamed: bool, trace: Trace,
                           guard: DisconnectGuard, td0: float, first_byte_by: float | None) -> None:
        d = trace.decode
        assert d is not None
        status = trace.status = trace.decode_status = dresp.status_code
        if status != 200:
            self.metrics.upstream_errors[("decode", d.url, "status")] += 1
        raw_headers = dresp.headers
        content_type = raw_headers.get("content-type", "application/json").encode()
        if streamed and status == 200 and not content_type.startswith(EVENT_STREAM):
            content_type = EVENT_STREAM
        out_headers = [(b"content-type", content_type), (b"x-request-id", trace.rid.encode())]
        for name in ("content-length", "content-encoding"):
            value = raw_headers.get(name)
            if value is not None:
                out_headers.append((name.encode(), value.encode()))
        started = _Started(status, out_headers)
        clock = self._clock
        loop = asyncio.get_running_loop()
        idle = self.settings.stream_idle_timeout_s
        first = True
        last = b""
        # the first byte by ``first_byte_by`` (the read timeout from the request), then no silence longer than
        # ``idle`` between two; the window is shut while a chunk goes to the client (a slow reader is no slow server)
        waited = f"no answer within {self.settings.read_timeout_s:g} s"
        watchdog: _IdleWatchdog | None = None
        try:
            async with asyncio.timeout_at(first_byte_by) as window:
                async for chunk in dresp.aiter_raw():
                    if first:
                        first = False
                        window.reschedule(None)
                        trace.decode_first_byte_s = clock() - td0
                        waited = f"no data for {idle:g} s"
                        await started.ensure(send)
                        if idle > 0:
                            watchdog = _IdleWatchdog(loop, window, idle)
                    if watchdog is not None:
                        watchdog.last = _NEVER  # a slow reader is not a slow server
                    last = chunk
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    if watchdog is not None:
                        watchdog.last = loop.time()
        except (httpx.TransportError, TimeoutError) as exc:
            timed_out = not isinstance(exc, httpx.TransportError)
            reason = describe_transport_error(exc) if isinstance(exc, httpx.TransportError) else waited
            self.metrics.upstream_errors[("decode", d.url, "timeout" if timed_out else "broken_stream")] += 1
            if timed_out and not started.sent:  # nothing sent yet: the client gets a clean 504
                trace.decode_status = None
                await self._timed_out(send, d, reason, trace, counted=True)
                return
            trace.note = f"decode stream {'timed out' if timed_out else 'broken'}: {reason}"
            await started.ensure(send)
            if not (streamed and status == 200):
                return  # the response cannot be completed: uvicorn closes the connection, the client sees it cut
            # vLLM's own convention for an error in the middle of a stream: an error event, then [DONE]
            code, kind = (504, "GatewayTimeoutError") if timed_out else (502, "BadGatewayError")
            event = b"data: " + error_body(f"decode server {d.url} {'stalled' if timed_out else 'failed'} "
                                           f"mid-stream: {reason}", code, kind) + b"\n\ndata: [DONE]\n\n"
            guard.finishing()
            await send({"type": "http.response.body", "more_body": False,
                        "body": (event if last.endswith(b"\n\n") or not last else b"\n\n" + event)})
            return
        finally:
            if watchdog is not None:
                watchdog.stop()
            if trace.decode_first_byte_s is not None:
                self.metrics.decode_first_byte[d.url].observe(trace.decode_first_byte_s)
        await started.ensure(send)  # an answer without a body
        guard.finishing()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        trace.decode_s = clock() - td0
        self.metrics.decode_total[d.url].observe(trace.decode_s)

    async def _unreachable(self, send: Send, server: Upstream, exc: httpx.TransportError,
                           trace: Trace | None = None) -> str:
        """A 502 naming the server that could not be reached (counted in the proxy's metrics); the reason."""
        reason = describe_transport_error(exc)
        self.metrics.upstream_errors[(server.role, server.url, "unreachable")] += 1
        if trace is not None:
            trace.status = 502
            trace.note = f"{server.role} {server.url}: {reason}"
        await respond(send, 502, JSON, error_body(f"{server.role} server {server.url} is unreachable: {reason}",
                                                    502, "BadGatewayError"), trace.rid if trace is not None else None)
        return reason

    async def _timed_out(self, send: Send, server: Upstream, reason: str, trace: Trace | None = None, *,
                         counted: bool = False) -> str:
        """A 504 naming the server that accepted the request and did not answer in time (counted in the proxy's
        metrics under reason ``timeout``); the reason."""
        if not counted:
            self.metrics.upstream_errors[(server.role, server.url, "timeout")] += 1
        if trace is not None:
            trace.status = 504
            trace.note = f"{server.role} {server.url}: {reason}"
        await respond(send, 504, JSON, error_body(f"{server.role} server {server.url} timed out: {reason}", 504,
                                                    "GatewayTimeoutError"), trace.rid if trace is not None else None)
        return reason

    # --- other routes ----------------------------------------------------------------------------------------

    async def _health(self, send: Send) -> tuple[str, int, str]:
        checks = await self.health.get()
        down = [c for c in checks if not c.ok]
        servers = [c.to_dict() for c in checks]
        if down:
            message = "; ".join(c.describe() for c in down)
            await respond(send, 503, JSON, dumps({"status": "unhealthy", "message": message, "servers": servers}))
            return "/health", 503, f" ({message})"
        await respond(send, 200, JSON, dumps({"status": "ok", "servers": servers}))
        return "/health", 200, ""

    async def _forward(self, scope: Scope, receive: Receive, send: Send, server: Upstream) -> tuple[str, int, str]:
        path: str = scope["path"]
        raw = await read_body(receive)
        if raw is None:
            return path, CLIENT_CLOSED, ""
        headers = wanted_headers(scope)
        out = {k.decode(): v for k, v in headers.items() if k in (b"authorization", b"content-type")}
        query = scope.get("query_string", b"")
        url = server.url + path + ("?" + query.decode("latin-1") if query else "")
        leg = f" {'P' if server.role == 'prefill' else 'D'}={server.url}"
        try:
            async with asyncio.timeout_at(_deadline(self.settings.read_timeout_s)):
                r = await self.client.request(scope["method"], url, content=raw or None, headers=out)
        except httpx.TransportError as exc:
            reason = await self._unreachable(send, server, exc)
            return path, 502, f"{leg} ({reason})"
        except TimeoutError:
            reason = await self._timed_out(send, server, f"no answer within {self.settings.read_timeout_s:g} s")
            return path, 504, f"{leg} ({reason})"
        await respond(send, r.status_code, r.headers.get("content-type", "application/json").encode(), r.content)
        return path, r.status_code, f"{leg} {r.status_code}"
