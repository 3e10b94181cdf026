"""A misbehaving server for the load generator, the poller and the proxy: raw HTTP over loopback from a thread,
so each misbehaviour is exact (a cut chunk, a close in the middle of a stream, an accept that never answers).

Modes (what ``POST /v1/completions`` gets; the GETs answer like vLLM unless the mode is ``silent``):
``ok`` a good stream; ``silent`` accepts every connection and never answers anything; ``no-stream`` answers
``/health``, ``/v1/models`` and ``/metrics`` but never a completion; ``headers-only`` 200 and SSE headers, then
nothing; ``garbage`` a 200 stream of events that are not JSON and bytes that are not SSE; ``bad-chunk`` a chunk
size line that is not hex; ``truncated`` a chunk cut in the middle, then the connection closed; ``close-mid`` two
good tokens, then the connection closed; ``stall-mid`` two good tokens, then nothing (the connection kept open);
``http500`` an HTTP 500 with vLLM's JSON error; ``metrics-garbage`` GETs fine, ``/metrics`` answers bytes that are
not Prometheus text. A good answer (``ok``, and the first ``good`` of any mode) to a ``"stream": false`` request is
one JSON completion with ``kv_transfer_params``, as a prefill server gives the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import Any

from tests.helpers import free_port

MODEL = "bad/model"
MODES = ("ok", "silent", "no-stream", "headers-only", "garbage", "bad-chunk", "truncated", "close-mid", "stall-mid",
         "http500", "metrics-garbage")


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _token(i: int) -> bytes:
    obj = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": MODEL,
           "choices": [{"index": 0, "text": f"t{i}", "logprobs": None, "finish_reason": None}], "usage": None}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\n\r\n")


class BadServer:
    """``with BadServer("close-mid") as s: s.url``; ``s.requests`` counts completions asked for."""

    def __init__(self, mode: str, *, tokens: int = 4, good: int = 0) -> None:
        assert mode in MODES, mode
        self.mode = mode
        self.good = good  # the first ``good`` completions are answered well, whatever the mode
        self.tokens = tokens
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> BadServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop)
            self._thread.join(10)

    def _stop(self) -> None:
        for w in list(self._writers):
            w.transport.abort()
        if self._server is not None:
            self._server.close()
        for task in asyncio.all_tasks(self._loop):
            task.cancel()
        self._loop.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()
        pending = asyncio.all_tasks(self._loop)
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                body = await reader.readexactly(length) if length else b""
                if self.mode == "silent":
                    await asyncio.sleep(3600)
                if method == "POST" and path.endswith("/v1/completions"):
                    self.requests += 1
                    if not await self._completion(writer, b'"stream": false' in body or b'"stream":false' in body):
                        return
                else:
                    self._get(writer, path)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, asyncio.CancelledError):
            pass  # the client went away, or the server is closing
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    def _get(self, writer: asyncio.StreamWriter, path: str) -> None:
        if path == "/health":
            body, status = b"", "200 OK"
        elif path == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "root": MODEL,
                                                           "max_model_len": 4096}]}).encode()
            status = "200 OK"
        elif path == "/version":
            body, status = b'{"version":"0.24.0"}', "200 OK"
        elif path == "/metrics":
            body = (b"\x00\xff{{not prometheus\nvllm:num_requests_running{engine=\"0\" 1\n"
                    if self.mode == "metrics-garbage" else
                    b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 0\n")
            status = "200 OK"
        else:
            body, status = b'{"detail":"Not Found"}', "404 Not Found"
        writer.write(f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
                     .encode() + body)

    async def _completion(self, writer: asyncio.StreamWriter, plain: bool = False) -> bool:
        """Answer one completion the mode's way; False when the connection is done with."""
        mode = self.mode if self.requests > self.good else "ok"
        if mode == "ok" and plain:
            body = json.dumps({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": MODEL,
                               "choices": [{"index": 0, "text": "t", "finish_reason": "length"}],
                               "kv_transfer_params": {"remote_engine_id": "bad-prefill", "remote_block_ids": [1]},
                               "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9}}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         + f"content-length: {len(body)}\r\n\r\n".encode() + body)
            return True
        if mode in ("no-stream",):
            await asyncio.sleep(3600)
        if mode == "http500":
            body = json.dumps({"error": {"message": "EngineCore encountered an issue", "type": "InternalServerError",
                                         "param": None, "code": 500}}).encode()
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                         + f"content-length: {len(body)}\r\n\r\n".encode() + body)
            return True
        writer.write(SSE_HEAD)
        await writer.drain()
        if mode == "headers-only":
            await asyncio.sleep(3600)
        if mode == "garbage":
            writer.write(_chunk(b"data: {not json at all\n\n") + _chunk(b"\x00\x01\xfe binary\n\n")
                         + _chunk(b"event: ping\ndata: [1,2,\n\n") + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            return True
        if mode == "bad-chunk":
            writer.write(b"zz-not-hex\r\n" + _token(0) + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.2)
            return False
        if mode == "truncated":
            tok = _chunk(_token(0))
            writer.write(tok + _chunk(_token(1))[:20])
            await writer.drain()
            await asyncio.sleep(0.05)
            return False
        if mode == "stall-mid":
            writer.write(_chunk(_token(0)) + _chunk(_token(1)))
            await writer.drain()
            await asyncio.sleep(3600)
        if mode == "close-mid":
            writer.write(_chunk(_token(0)) + _chunk(_token(1)))
            await writer.drain()
            await asyncio.sleep(0.05)
            return False
        for i in range(self.tokens):
            writer.write(_chunk(_token(i)))
            await writer.drain()
            await asyncio.sleep(0.002)
        usage = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": MODEL, "choices": [],
                 "usage": {"prompt_tokens": 8, "completion_tokens": self.tokens, "total_tokens": 8 + self.tokens}}
        writer.write(_chunk(b"data: " + json.dumps(usage).encode() + b"\n\n") + _chunk(b"data: [DONE]\n\n")
                     + b"0\r\n\r\n")
        return True
