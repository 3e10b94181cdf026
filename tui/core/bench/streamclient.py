"""The load generator's HTTP client: a keep-alive pool of :class:`.httpstream.StreamConnection` connections.

Why not httpx or aiohttp: the load generator must never be the bottleneck, and every socket read must carry one
timestamp (see :mod:`.httpstream` for how a read is parsed and timed).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from tui.core.bench.httpstream import StreamConnection, StreamResult, _perf
from tui.core.errors import InputError


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    base_path: str

    @property
    def netloc(self) -> str:
        """``host:port`` with an IPv6 address in brackets."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.base_path}"


def parse_endpoint(url: str) -> Endpoint:
    """``http://host:port[/prefix]`` → parts; bad URLs are one-line input errors."""
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
    except ValueError as exc:  # e.g. 'http://[::1' (an unclosed IPv6 bracket)
        raise InputError(f"expected http://HOST:PORT, got {url!r} ({exc})", field="--endpoint") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"expected http://HOST:PORT, got {url!r}", field="--endpoint")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InputError(f"bad port in {url!r}", field="--endpoint") from None
    return Endpoint(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))


class StreamClient:
    """Streams completions over a pool of keep-alive connections (no limit: concurrency is the caller's)."""

    def __init__(self, base_url: str, *, headers: Mapping[str, str] | None = None, keepalive_s: float = 2.0
                 ) -> None:
        self.endpoint = parse_endpoint(base_url)
        self.headers = dict(headers or {})
        self.keepalive_s = keepalive_s  # below uvicorn's 5 s so a reused connection is never one it just closed
        self._idle: list[StreamConnection] = []
        self._all: set[StreamConnection] = set()
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if self.endpoint.scheme == "https" else None
        self.opened = 0

    def request_bytes(self, path: str, body: bytes, headers: Mapping[str, str] | None = None) -> bytes:
        ep = self.endpoint
        host = ep.netloc.rsplit(":", 1)[0] if ep.port in (80, 443) else ep.netloc
        lines = [f"POST {ep.base_path}{path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
                 "Accept: */*", f"Content-Length: {len(body)}"]
        for k, v in {**self.headers, **(headers or {})}.items():
            lines.append(f"{k}: {v}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def _acquire(self) -> StreamConnection:
        now = _perf()
        while self._idle:
            conn = self._idle.pop()
            if conn.alive and now - conn.idle_since < self.keepalive_s:
                return conn
            conn.alive = False
            if conn.transport is not None:
                conn.transport.close()
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        _, proto = await loop.create_connection(lambda: StreamConnection(self), ep.host, ep.port, ssl=self._ssl)
        self.opened += 1
        self._all.add(proto)
        return proto

    def _give_back(self, conn: StreamConnection) -> None:
        conn.idle_since = _perf()
        self._idle.append(conn)

    def _forget(self, conn: StreamConnection) -> None:
        self._all.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)

    async def stream(self, request: bytes, *, timeout_s: float | None = None, tag: int = -1) -> StreamResult:
        """Send one prepared request (``request_bytes``) and read its stream to the end (``tag``: the caller's
        name for it, on the result while it streams)."""
        res = StreamResult(start=_perf(), tag=tag)
        try:
            conn = await self._acquire()
        except (OSError, ssl.SSLError) as exc:
            res.error = f"cannot connect to {self.endpoint.url}: {exc}"
            return res
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        conn.begin(res, request, fut)
        timer = loop.call_later(timeout_s, conn.abort, f"timed out after {timeout_s:g} s") if timeout_s else None
        try:
            await fut
        except asyncio.CancelledError:
            conn.abort("cancelled")
            raise
        finally:
            if timer is not None:
                timer.cancel()
        return res

    def streaming(self) -> list[StreamConnection]:
        """Connections with a response in progress (for live figures: ``chunks``, ``ttft``, ``itl``, ``seen_*``,
        ``res.tag``)."""
        return [c for c in self._all if c.streaming]

    def close(self) -> None:
        for conn in list(self._all):
            conn.alive = False
            if conn.transport is not None:
                conn.transport.close()
        self._all.clear()
        self._idle.clear()
