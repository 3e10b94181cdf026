"""Test doubles for the proxy's unit tests: fake P and D servers behind ``httpx.MockTransport``, and the proxy
served by a real uvicorn (httptools) on an ephemeral port in the test's own event loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn

from tui.core.proxy.app import ProxyApp, ProxySettings
from tui.core.proxy.main import bind_socket, listen_url, uvicorn_config

P1, P2 = "http://10.0.0.1:8100", "http://10.0.0.2:8101"
D1, D2 = "http://10.0.0.3:8200", "http://10.0.0.4:8201"

#: what NixlConnector's prefill returns (shared/VLLM-0.24.md §7), with a few values no rewrite could invent
KV_FROM_P: dict[str, Any] = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_block_ids": [[3, 1, 4, 1, 5], [9, 2, 6]],
    "remote_engine_id": "e1f0-prefill-ß",
    "remote_request_id": "cmpl-rid-0-1a2b3c4d",
    "remote_host": "10.0.0.1",
    "remote_port": 5600,
    "tp_size": 1,
    "remote_num_tokens": 7,
    "extra_unknown_key": {"nested": [1.5, None, True]},
}

SSE_CHUNKS: list[bytes] = [
    b'data: {"id":"cmpl-x","object":"text_completion","choices":[{"index":0,"text":" Hel',
    b'lo","finish_reason":null}]}\n\ndata: {"id":"cmpl-x","object":"text_completion","choices":[{"index":0,'
    b'"text":" caf\xc3',  # a UTF-8 character split across chunks
    b'\xa9","finish_reason":"length"}]}\n\n',
    b'data: {"id":"cmpl-x","object":"text_completion","choices":[],"usage":{"prompt_tokens":7,"total_tokens":9,'
    b'"completion_tokens":2}}\n\ndata: [DONE]\n\n',
]


class ScriptedStream(httpx.AsyncByteStream):
    """A response body that yields its items in order; an ``asyncio.Event`` item waits for it, an exception item
    is raised. Records whether it was cancelled, finished and closed."""

    def __init__(self, script: list[bytes | asyncio.Event | Exception]) -> None:
        self.script = script
        self.finished = False
        self.cancelled = False
        self.closed = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            for item in self.script:
                if isinstance(item, asyncio.Event):
                    await item.wait()
                elif isinstance(item, Exception):
                    raise item
                else:
                    yield item
            self.finished = True
        except asyncio.CancelledError:
            self.cancelled = True
            raise

    async def aclose(self) -> None:
        self.closed.set()


@dataclass
class Seen:
    server: str
    method: str
    path: str
    headers: httpx.Headers
    body: Any


Answer = Callable[[httpx.Request, Any], Awaitable[httpx.Response]]


@dataclass
class FakeUpstreams:
    """Every server of a layout behind one MockTransport. ``answers[url]`` overrides a server's completion answer;
    a URL in ``down`` refuses connections; ``health[url]`` is its /health status."""

    prefill: tuple[str, ...] = (P1,)
    decode: tuple[str, ...] = (D1,)
    seen: list[Seen] = field(default_factory=list)
    answers: dict[str, Answer] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    health: dict[str, int] = field(default_factory=dict)
    streams: list[ScriptedStream] = field(default_factory=list)
    received: dict[str, asyncio.Event] = field(default_factory=dict)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def settings(self, **kw: Any) -> ProxySettings:
        return ProxySettings(prefill=self.prefill, decode=self.decode, **kw)

    def requests(self) -> list[Seen]:
        """Everything but health checks (the proxy runs one round at startup to warm its connections)."""
        return [s for s in self.seen if s.path != "/health"]

    def completions(self, role: str | None = None) -> list[Seen]:
        urls = {"prefill": self.prefill, "decode": self.decode}.get(role or "", self.prefill + self.decode)
        return [s for s in self.seen if s.path.endswith("completions") and s.server in urls]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        response = await self._answer(request)
        if isinstance(response.stream, ScriptedStream):
            return response
        # a Response built from bytes arrives already read; one from the network never does
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=ScriptedStream([response.content]))

    async def _answer(self, request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        if base in self.down:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        body = json.loads(request.content) if request.content else None
        self.seen.append(Seen(base, request.method, request.url.path, request.headers, body))
        self.received.setdefault(base, asyncio.Event()).set()
        if request.url.path == "/health":
            return httpx.Response(self.health.get(base, 200))
        if base in self.answers:
            return await self.answers[base](request, body)
        if request.url.path in ("/v1/models", "/version", "/tokenize", "/detokenize"):
            return httpx.Response(200, json={"server": base, "path": request.url.path, "body": body})
        if base in self.prefill:
            return httpx.Response(200, json={"id": "cmpl-p", "object": "text_completion",
                                             "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
                                             "kv_transfer_params": {**KV_FROM_P, "remote_host": base}})
        if body.get("stream"):
            return self.stream_response(list(SSE_CHUNKS))
        return httpx.Response(200, json={"id": "cmpl-d", "object": "text_completion", "from": base})

    def stream_response(self, script: list[bytes | asyncio.Event | Exception]) -> httpx.Response:
        stream = ScriptedStream(script)
        self.streams.append(stream)
        return httpx.Response(200, headers={"content-type": "text/event-stream; charset=utf-8"}, stream=stream)


@asynccontextmanager
async def serving(app: ProxyApp) -> AsyncIterator[tuple[str, uvicorn.Server]]:
    """The proxy app on a real uvicorn (httptools) bound to an ephemeral port; yields its URL and the server."""
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn_config(app, log=None))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.005)
        yield listen_url(sock), server
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
        sock.close()


@asynccontextmanager
async def proxy_for(fakes: FakeUpstreams, **settings: Any) -> AsyncIterator[tuple[ProxyApp, httpx.AsyncClient]]:
    """A served proxy in front of ``fakes`` and a client pointed at it."""
    app = ProxyApp(fakes.settings(**settings), transport=fakes.transport())
    async with serving(app) as (url, _server), httpx.AsyncClient(base_url=url, timeout=10, trust_env=False) as client:
        yield app, client


async def settled(app: ProxyApp) -> None:
    """Wait until the proxy has finished every completion request (its in-flight gauge is back to 0)."""
    async with asyncio.timeout(5):
        while app.metrics.in_flight:  # noqa: ASYNC110 - a counter the app owns, not an event it could set
            await asyncio.sleep(0.01)
