"""The proxy's lean asyncio transport for httpx, against a small raw asyncio HTTP/1.1 server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from tui.core import http_transport as proxy_transport
from tui.core.http_transport import LeanTransport

pytestmark = pytest.mark.timeout(30)


class Server:
    """Answers by path; counts connections; can hold, cut or close them."""

    def __init__(self) -> None:
        self.connections = 0
        self.gate = asyncio.Event()
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        for w in self.writers:
            w.close()
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                path = lines[0].split()[1]
                length = next((int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length:")), 0)
                body = await reader.readexactly(length)
                if not await self._answer(path, body, writer):
                    writer.close()
                    return

    async def _answer(self, path: str, body: bytes, w: asyncio.StreamWriter) -> bool:
        if path == "/echo":
            w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        elif path == "/chunks":
            w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            await w.drain()
            await self.gate.wait()
            w.write(b"6\r\nsecond\r\n0\r\n\r\n")
        elif path == "/then-close":
            w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await w.drain()
            return False  # the server drops the kept-alive connection right after answering
        elif path == "/hang":
            await asyncio.Event().wait()
        elif path == "/cut":
            w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b")
            await w.drain()
            return False
        elif path == "/big":
            w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % (64 * 65536))
            for i in range(64):
                w.write(bytes([i]) * 65536)
            await w.drain()
        await w.drain()
        return True


@contextlib.asynccontextmanager
async def client() -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_keepalive_connections=10, keepalive_expiry=4.0)
    async with httpx.AsyncClient(transport=LeanTransport(limits), timeout=5, trust_env=False) as c:
        yield c


async def test_requests_reuse_one_kept_alive_connection() -> None:
    async with Server() as server, client() as c:
        for i in range(5):
            r = await c.post(server.url + "/echo", content=b"body %d" % i)
            assert (r.status_code, r.content) == (200, b"body %d" % i)
    assert server.connections == 1


async def test_a_chunked_body_arrives_chunk_by_chunk() -> None:
    async with Server() as server, client() as c, c.stream("GET", server.url + "/chunks") as r:
        parts = r.aiter_raw()
        assert await asyncio.wait_for(parts.__anext__(), 5) == b"first"
        server.gate.set()
        assert [p async for p in parts] == [b"second"]


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async with Server() as server, client() as c:
        assert (await c.get(server.url + "/then-close")).content == b"ok"
        await asyncio.sleep(0.05)  # the server's FIN reaches the idle pooled connection
        assert (await c.post(server.url + "/echo", content=b"again")).content == b"again"
    assert server.connections == 2


async def test_refused_connection_is_httpx_connect_error() -> None:
    async with Server() as server:
        url = server.url
    async with client() as c:
        with pytest.raises(httpx.ConnectError, match="Connection refused"):
            await c.get(url + "/echo")


async def test_read_timeout_is_httpx_read_timeout() -> None:
    async with Server() as server, client() as c:
        with pytest.raises(httpx.ReadTimeout):
            await c.get(server.url + "/hang", timeout=httpx.Timeout(5, read=0.2))


async def test_a_body_cut_short_is_a_remote_protocol_error() -> None:
    async with Server() as server, client() as c, c.stream("GET", server.url + "/cut") as r:
        with pytest.raises(httpx.RemoteProtocolError):
            await r.aread()


async def test_a_slow_reader_pauses_the_socket_and_gets_every_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy_transport, "HIGH_WATER", 128 * 1024)
    monkeypatch.setattr(proxy_transport, "LOW_WATER", 32 * 1024)
    paused: list[bool] = []
    original = proxy_transport._StreamProtocol.data_received

    def spy(self: proxy_transport._StreamProtocol, data: bytes) -> None:
        original(self, data)
        paused.append(self.reading_paused)
        assert len(self.buffer) <= 128 * 1024 + len(data)

    monkeypatch.setattr(proxy_transport._StreamProtocol, "data_received", spy)
    async with Server() as server, client() as c, c.stream("GET", server.url + "/big") as r:
        got = bytearray()
        async for part in r.aiter_raw():
            got += part
            await asyncio.sleep(0.001)  # a consumer slower than the loopback
    assert len(got) == 64 * 65536
    assert all(got[i * 65536] == i for i in range(64))
    assert any(paused)

