"""A lean httpx transport (the proxy's client, the telemetry poller): httpcore's connection pool over asyncio.

httpx's default transport reaches the network through anyio, which on every read of a response enters a cancel
scope and pauses then resumes the socket's reader (two ``epoll_ctl`` calls). For a proxy relaying one small
SSE chunk per token that overhead is most of the per-chunk cost. Here httpcore's own ``AsyncConnectionPool``
(keep-alive, HTTP/1.1 parsing, timeouts from the request, unchanged) talks to an asyncio ``Protocol`` whose
``data_received`` appends to a buffer a read takes from. Measured with ``benchmarks/proxy_overhead.py``'s
per-chunk figure, the proxy spends about a third less CPU per relayed chunk.

Only plain ``http://`` goes through it; the proxy's client mounts httpx's default transport for ``https://``
upstreams. Back-pressure is kept: past ``HIGH_WATER`` buffered bytes the socket stops being read until the
consumer catches up.
"""

# ruff: noqa: ASYNC109 - the ``timeout`` parameters are httpcore's AsyncNetworkStream/Backend interface

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Iterable
from typing import Any, cast

import httpcore
import httpx

#: stop reading the socket past this many buffered bytes; resume once the buffer is under LOW_WATER
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024

#: httpcore's exceptions and httpx's, most specific first (what httpx's own transport does)
_EXCEPTIONS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


def _to_httpx(exc: Exception) -> Exception:
    for core, mapped in _EXCEPTIONS:
        if isinstance(exc, core):
            return mapped(str(exc))
    return exc


class _StreamProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: Exception | None = None
        self.reading_paused = False
        self.writing_paused = False
        self._data_waiter: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both have the same methods
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.transport.pause_reading()
            self.reading_paused = True
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake_reader()
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_reader(self) -> None:
        waiter = self._data_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait_for_data(self) -> None:
        self._data_waiter = asyncio.get_running_loop().create_future()
        try:
            await self._data_waiter
        finally:
            self._data_waiter = None

    async def wait_for_drain(self) -> None:
        self._drain_waiter = asyncio.get_running_loop().create_future()
        try:
            await self._drain_waiter
        finally:
            self._drain_waiter = None


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One TCP connection, as httpcore's HTTP/1.1 connection uses it."""

    def __init__(self, transport: asyncio.Transport, protocol: _StreamProtocol) -> None:
        self._transport = transport
        self._protocol = protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        if not p.buffer and not p.eof:
            try:
                async with asyncio.timeout(timeout):
                    await p.wait_for_data()
            except TimeoutError:
                raise httpcore.ReadTimeout(f"no data within {timeout} s") from None
        if p.buffer:
            data = bytes(p.buffer[:max_bytes])
            del p.buffer[:max_bytes]
            if p.reading_paused and len(p.buffer) < LOW_WATER:
                p.reading_paused = False
                self._transport.resume_reading()
            return data
        if p.error is not None:
            raise httpcore.ReadError(str(p.error) or type(p.error).__name__)
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        p = self._protocol
        if self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(buffer)
        if p.writing_paused:
            try:
                async with asyncio.timeout(timeout):
                    await p.wait_for_drain()
            except TimeoutError:
                raise httpcore.WriteTimeout(f"could not write within {timeout} s") from None
            if p.error is not None or self._transport.is_closing():
                raise httpcore.WriteError(str(p.error) if p.error else "the connection is closed")

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.UnsupportedProtocol("TLS goes through httpx's default transport, not this one")

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # asked of an idle kept-alive connection before reuse: data or EOF there means the server closed it
            return bool(self._protocol.buffer) or self._protocol.eof
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _StreamProtocol, host, port, local_addr=(local_address, 0) if local_address else None)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"could not connect to {host}:{port} within {timeout} s") from None
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise httpcore.ConnectError(f"{reason} ({host}:{port})") from exc
        # no isinstance(transport, asyncio.Transport): uvloop's transports are not its subclasses
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option in socket_options or ():
                sock.setsockopt(*option)
        return AsyncioStream(transport, protocol)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.UnsupportedProtocol("unix sockets are not used by the proxy")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterator[bytes] | Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._stream:
                yield part
        except (httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError) as exc:
            raise _to_httpx(exc) from exc

    async def aclose(self) -> None:
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()


class LeanTransport(httpx.AsyncBaseTransport):
    """httpx transport: httpcore's pool (HTTP/1.1, keep-alive) on :class:`AsyncioBackend`."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True, http2=False,
            network_backend=AsyncioBackend(),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        req = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port,
                             target=request.url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            resp = await self._pool.handle_async_request(req)
        except Exception as exc:
            mapped = _to_httpx(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        return httpx.Response(status_code=resp.status, headers=resp.headers, stream=_ResponseStream(resp.stream),
                              extensions=resp.extensions)

    async def aclose(self) -> None:
        await self._pool.aclose()
