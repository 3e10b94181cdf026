"""The streaming client: byte counting equals event parsing, split reads, errors, keep-alive, slow path."""

from __future__ import annotations

import asyncio
import json

import pytest

from tui.core.bench.httpstream import StreamConnection, StreamResult
from tui.core.bench.streamclient import StreamClient, parse_endpoint
from tui.core.errors import InputError


class _FakeTransport:
    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True


def _sse(events: list[dict | str], *, spaced: bool = False) -> bytes:
    out = b""
    for e in events:
        body = e if isinstance(e, str) else json.dumps(e, separators=(", ", ": ") if spaced else (",", ":"))
        out += f"data: {body}\n\n".encode()
    return out


def _chunked(payload: bytes, size: int) -> bytes:
    out = b""
    for i in range(0, len(payload), size):
        piece = payload[i:i + size]
        out += b"%x\r\n%s\r\n" % (len(piece), piece)
    return out + b"0\r\n\r\n"


def _events(n: int) -> list[dict | str]:
    ev: list[dict | str] = [{"id": "c", "choices": [{"index": 0, "text": f" t{i}", "finish_reason": None}]}
                            for i in range(n)]
    ev.append({"id": "c", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}})
    ev.append("[DONE]")
    return ev


async def _feed(response: bytes, piece: int, *, recv_buffer: bool = False) -> tuple[StreamResult, _FakeTransport]:
    """Feed a response in reads of ``piece`` bytes: as ``data_received`` calls, or (``recv_buffer``) through the
    shared receive buffer as asyncio does for a BufferedProtocol (which takes the copy-free path)."""
    client = StreamClient("http://127.0.0.1:9")
    conn = StreamConnection(client)
    tr = _FakeTransport()
    conn.connection_made(tr)  # type: ignore[arg-type]
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    res = StreamResult(start=0.0)
    conn.begin(res, b"POST", fut)
    for i in range(0, len(response), piece):
        part = response[i:i + piece]
        if recv_buffer:
            buf = conn.get_buffer(-1)
            buf[:len(part)] = part
            conn.buffer_updated(len(part))
        else:
            conn.data_received(part)
    assert fut.done()
    return res, tr


@pytest.mark.parametrize("recv_buffer", [False, True], ids=["data_received", "recv_buffer"])
@pytest.mark.parametrize("piece", [1, 7, 64, 333, 100000])
@pytest.mark.parametrize("chunk", [5, 300])
async def test_counts_survive_any_split(piece: int, chunk: int, recv_buffer: bool) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    res, tr = await _feed(head + _chunked(_sse(_events(12)), chunk), piece, recv_buffer=recv_buffer)
    assert res.success and res.chunks == 12
    assert res.completion_tokens == 12 and res.prompt_tokens == 7
    assert len(res.itl) == 11
    assert not tr.closed  # keep-alive: the connection goes back to the pool


async def test_one_event_per_chunk_counts_per_read() -> None:
    """vLLM writes one event per HTTP chunk; chunks that arrive in one read share its timestamp (ITL 0)."""
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    body = b"".join(_chunked(_sse([e]), 10000)[:-5] for e in _events(30)) + b"0\r\n\r\n"
    for piece in (len(body) + len(head), 700):
        res, _ = await _feed(head + body, piece, recv_buffer=True)
        assert res.success and res.chunks == 30 and res.completion_tokens == 30 and len(res.itl) == 29


async def test_content_length_and_close_delimited_bodies() -> None:
    body = _sse(_events(3))
    res, _ = await _feed(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body, 50)
    assert res.success and res.chunks == 3
    client = StreamClient("http://127.0.0.1:9")
    conn = StreamConnection(client)
    conn.connection_made(_FakeTransport())  # type: ignore[arg-type]
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    res2 = StreamResult(start=0.0)
    conn.begin(res2, b"", fut)
    conn.data_received(b"HTTP/1.0 200 OK\r\n\r\n" + body)
    conn.connection_lost(None)  # the body ends with the connection
    assert res2.success and res2.chunks == 3


async def test_other_json_spacing_is_parsed_event_by_event() -> None:
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    res, _ = await _feed(head + _chunked(_sse(_events(5), spaced=True), 40), 33)
    assert res.success and res.chunks == 5 and res.completion_tokens == 5


async def test_error_status_and_stream_errors() -> None:
    body = json.dumps({"error": {"message": "This model's maximum context length is 16384 tokens.",
                                 "type": "BadRequestError", "code": 400}}).encode()
    res, _tr = await _feed(b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n" % len(body) + body, 1000)
    assert not res.success
    assert res.error == "HTTP 400 Bad Request: This model's maximum context length is 16384 tokens."
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    ev = [*_events(2)[:2], {"error": {"message": "EngineCore encountered an issue."}}, "[DONE]"]
    res2, _ = await _feed(head + _chunked(_sse(ev), 1000), 1000)
    assert res2.success and res2.chunks == 2  # vllm bench counts it by its chunks ...
    assert res2.stream_error == "EngineCore encountered an issue."  # ... we keep the error text too
    res3, _ = await _feed(head + _chunked(_sse(["[DONE]"]), 100), 100)
    assert not res3.success and "Never received a valid chunk" in res3.error


async def test_against_stub_server_with_keep_alive(stub) -> None:
    url, srv = await stub(mode="fast", chunks_per_write=8)
    client = StreamClient(url)
    body = json.dumps({"model": "m", "prompt": [1, 2, 3], "max_tokens": 100, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = client.request_bytes("/v1/completions", body)
    results = []
    for _ in range(5):
        results.append(await client.stream(req))
    assert all(r.success and r.chunks == 100 and r.completion_tokens == 100 for r in results)
    assert all(r.prompt_tokens == 3 for r in results)
    assert client.opened == 1  # one connection, reused
    many = await asyncio.gather(*(client.stream(req) for _ in range(20)))
    assert sum(r.chunks for r in many) == 2000
    # 8 events per write: ITL has zeros for the chunks that shared a read, never a negative gap
    assert all(g >= 0 for r in many for g in r.itl)
    client.close()
    assert srv.stats.completions == 25


async def test_connection_refused_is_a_failed_request() -> None:
    client = StreamClient("http://127.0.0.1:1")
    res = await client.stream(client.request_bytes("/v1/completions", b"{}"))
    assert not res.success and "cannot connect" in res.error


def test_parse_endpoint() -> None:
    assert parse_endpoint("http://127.0.0.1:8000/").url == "http://127.0.0.1:8000"
    assert parse_endpoint("localhost:9000").port == 9000
    for bad in ("ftp://x", "http://:80", "http://h:notaport"):
        with pytest.raises(InputError):
            parse_endpoint(bad)
