"""One HTTP/1.1 connection streaming SSE completions (an asyncio protocol); the pool is :mod:`.streamclient`.

Why not httpx or aiohttp: the load generator must never be the bottleneck, and every socket read must carry one
timestamp. Here ``data_received`` is one socket read: it takes ``perf_counter()`` once, undoes the chunked
framing, and counts the complete SSE events in it by bytes (``"choices":[{`` occurs once per choice chunk and
only as a JSON key), so the chunks that arrive in one read share its timestamp: the first is TTFT, the others
ITL gaps of 0. Only the first event of a response (to check the byte pattern holds for this server), the usage
chunk and an error event are JSON-parsed. A server whose chunks do not match the pattern is parsed event by event.

Definitions follow ``vllm bench serve``: an event is complete at its ``\\n\\n``; TTFT is from just before the
connection is taken from the pool (or opened) to the first choice chunk; latency ends at the last choice chunk;
a non-200 answer fails with its reason (and the server's error message).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

_perf = time.perf_counter
CHOICE_PATTERN = b'"choices":[{'
_USAGE = b'"usage":'
_ERROR = b'"error":'
_MAX_HEAD = 64 * 1024


@dataclass(slots=True)
class StreamResult:
    start: float  # perf_counter() at send
    status: int = 0
    success: bool = False
    ttft: float = 0.0
    last: float = 0.0  # perf_counter() of the last choice chunk
    itl: list[float] = field(default_factory=list)
    chunks: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str = ""  # why it failed
    stream_error: str = ""  # an error event inside a 200 stream (vllm bench counts such a request by its chunks)
    seen_itl: int = 0  # ITL entries already shown in a live tick (the load generator's bookkeeping)
    seen_ttft: bool = False
    tag: int = -1  # the load generator's request index (its live figures follow a request by it)

    @property
    def latency(self) -> float:
        return self.last - self.start if self.chunks else 0.0


# One receive buffer for every connection: the event loop calls get_buffer, recv_into and buffer_updated in a row
# for one socket at a time, and the bytes are copied out before the next. (A plain Protocol makes asyncio
# allocate a 256 KiB bytes object per recv, which costs more than parsing what it holds.)
class Pool(Protocol):
    """Where a connection goes back when its response ends, or leaves when it closes (the stream client)."""

    def _give_back(self, conn: StreamConnection) -> None: ...

    def _forget(self, conn: StreamConnection) -> None: ...


_RECV = bytearray(256 * 1024)
_RECV_VIEW = memoryview(_RECV)


class StreamConnection(asyncio.BufferedProtocol):
    """One keep-alive connection; holds the state of the request on it (hot fields live here for speed)."""

    def __init__(self, client: Pool) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.alive = True
        self.idle_since = 0.0
        self.res: StreamResult | None = None
        self.fut: asyncio.Future[None] | None = None
        self._clear()

    def _clear(self) -> None:
        self.head = b""
        self.in_body = False
        self.status = 0
        self.reason = ""
        self.keep_alive = True
        self.chunked = False
        self.length: int | None = None
        self.chunk_left = 0
        self.crlf = 0
        self.size_buf = b""
        self.trailer: bytes | None = None
        self.done = False
        self.carry = b""
        self.err_body = b""
        self.checked = False
        self.slow = False
        self.chunks = 0
        self.ttft = 0.0
        self.last = 0.0
        self.st = 0.0
        self.itl: list[float] = []
        self.seen_itl = 0  # read by the live ticks of the load generator
        self.seen_ttft = False
        self.fast = False  # the next read may take the copy-free path (see _fast)

    # --- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        self.client._forget(self)
        if self.res is not None and not self.done:
            if self.in_body and self.status == 200 and not self.chunked and self.length is None:
                self._finish()  # a close-delimited body ends here
            else:
                self._fail(f"connection lost: {exc}" if exc else "connection closed by the server")

    def get_buffer(self, sizehint: int) -> memoryview:
        return _RECV_VIEW

    def buffer_updated(self, nbytes: int) -> None:
        ts = _perf()
        pos = self._fast(nbytes, ts) if self.fast else 0
        if pos < nbytes:
            self._feed(bytes(_RECV_VIEW[pos:nbytes]), ts)

    def _fast(self, nbytes: int, ts: float) -> int:
        """The common read of a streaming response: whole HTTP chunks, each ending with a whole SSE event. Counted
        in the receive buffer without copying; returns where it stopped (the rest takes the general path)."""
        buf = _RECV
        pos = 0
        count = 0
        while pos < nbytes:
            eol = buf.find(b"\r\n", pos, nbytes)
            if eol < 0:
                break
            try:
                size = int(buf[pos:eol], 16)
            except ValueError:
                break
            start = eol + 2
            end = start + size
            if size == 0 or end + 2 > nbytes or buf[end - 2:end + 2] != b"\n\n\r\n":
                break
            count += buf.count(CHOICE_PATTERN, start, end)
            if buf.find(_USAGE, start, end) >= 0 or buf.find(_ERROR, start, end) >= 0:
                self._parse_special(bytes(buf[start:end]))
            pos = end + 2
        if count:
            self._tokens(count, ts)
        return pos

    def data_received(self, data: bytes) -> None:
        """One socket read (the entry point for tests that feed bytes)."""
        self._feed(data, _perf())

    def _feed(self, data: bytes, ts: float) -> None:
        self._feed_inner(data, ts)
        self.fast = (self.in_body and self.chunked and self.status == 200 and self.checked and not self.slow
                     and not self.done and not self.carry and not self.chunk_left and not self.crlf
                     and not self.size_buf and self.trailer is None and self.res is not None)

    def _feed_inner(self, data: bytes, ts: float) -> None:
        if self.res is None or self.done:
            return  # bytes after a finished response (or between requests): ignore
        if not self.in_body:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                if len(self.head) > _MAX_HEAD:
                    self._fail("response head too large")
                return
            self._parse_head(self.head[:end])
            data = self.head[end + 4:]
            self.head = b""
            self.in_body = True
            if self.length == 0:
                self._finish()
                return
            if not data:
                return
        if self.chunked:
            payload = self._dechunk(data)
        elif self.length is not None:
            payload = data[: self.length]
            self.length -= len(payload)
            if self.length <= 0:
                self.done = True
        else:
            payload = data
        if payload:
            if self.status == 200:
                self._events(payload, ts)
            elif len(self.err_body) < _MAX_HEAD:
                self.err_body += payload
        if self.done:
            self._finish()

    # --- response parsing ---------------------------------------------------------------------------------

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            self.status = int(parts[1])
        except (IndexError, ValueError):
            self.status = 0
        self.reason = parts[2] if len(parts) > 2 else ""
        version = parts[0]
        self.keep_alive = version != "HTTP/1.0"
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            value = value.strip()
            if name == "content-length":
                try:
                    self.length = int(value)
                except ValueError:
                    self.length = None
            elif name == "transfer-encoding" and "chunked" in value.lower():
                self.chunked = True
            elif name == "connection":
                v = value.lower()
                if "close" in v:
                    self.keep_alive = False
                elif "keep-alive" in v:
                    self.keep_alive = True
        if self.chunked:
            self.length = None
        elif self.length is None:
            self.keep_alive = False  # close-delimited

    def _dechunk(self, data: bytes) -> bytes:
        if self.size_buf:  # a size line cut by the previous read (it is only kept while reading one)
            data = self.size_buf + data
            self.size_buf = b""
        pieces: list[bytes] = []
        pos = 0
        n = len(data)
        while pos < n:
            left = self.chunk_left
            if left:
                end = pos + left
                if end <= n:
                    pieces.append(data[pos:end])
                    pos = end
                    self.chunk_left = 0
                    self.crlf = 2
                else:
                    pieces.append(data[pos:])
                    self.chunk_left = left - (n - pos)
                    pos = n
                continue
            if self.crlf:
                k = min(self.crlf, n - pos)
                pos += k
                self.crlf -= k
                continue
            if self.trailer is not None:
                self.trailer += data[pos:]
                pos = n
                if self.trailer.startswith(b"\r\n") or b"\r\n\r\n" in self.trailer:
                    self.done = True
                break
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                self.size_buf += data[pos:]
                break
            line = data[pos:eol]
            pos = eol + 2
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self._fail(f"bad chunk size line {line[:40]!r}")
                return b""
            if size == 0:
                self.trailer = b""
                if pos < n:
                    self.trailer = data[pos:]
                    pos = n
                    if self.trailer.startswith(b"\r\n") or b"\r\n\r\n" in self.trailer:
                        self.done = True
            else:
                self.chunk_left = size
        if len(pieces) == 1:
            return pieces[0]
        return b"".join(pieces)

    def _events(self, payload: bytes, ts: float) -> None:
        buf = self.carry + payload if self.carry else payload
        end = buf.rfind(b"\n\n")
        if end < 0:
            self.carry = buf
            return
        end += 2
        if end == len(buf):
            complete = buf
            self.carry = b""
        else:
            complete = buf[:end]
            self.carry = buf[end:]
        if not self.checked:
            self._check_format(complete)
        if self.slow:
            n = self._parse_all(complete)
        else:
            n = complete.count(CHOICE_PATTERN)
            if _USAGE in complete or _ERROR in complete:
                self._parse_special(complete)
        if n:
            self._tokens(n, ts)

    def _tokens(self, n: int, ts: float) -> None:
        """``n`` choice chunks in one read: the first is TTFT or a gap from the last read; the rest gaps of 0."""
        if self.chunks == 0:
            self.ttft = ts - self.st
        else:
            self.itl.append(ts - self.last)
        if n > 1:
            self.itl.extend([0.0] * (n - 1))
        self.last = ts
        self.chunks += n

    def _check_format(self, complete: bytes) -> None:
        """Parse the first data event: if it has choices but not our byte pattern, parse every event instead."""
        for ev, body in _data_events(complete):
            self.checked = True
            try:
                obj = json.loads(body)
            except ValueError:
                self.slow = True
                return
            choices = obj.get("choices") if isinstance(obj, dict) else None
            if choices and CHOICE_PATTERN not in ev:
                self.slow = True
            return

    def _parse_all(self, complete: bytes) -> int:
        n = 0
        for _ev, body in _data_events(complete):
            try:
                obj = json.loads(body)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            if obj.get("choices"):
                n += 1
            self._take_usage_error(obj)
        return n

    def _parse_special(self, complete: bytes) -> None:
        for raw in complete.split(b"\n\n"):
            if _USAGE not in raw and _ERROR not in raw:
                continue
            ev = raw.strip()
            body = ev[5:].strip() if ev.startswith(b"data:") else ev
            try:
                obj = json.loads(body)
            except ValueError:
                continue
            if isinstance(obj, dict):
                self._take_usage_error(obj)

    def _take_usage_error(self, obj: dict[str, Any]) -> None:
        res = self.res
        if res is None:
            return
        usage = obj.get("usage")
        if isinstance(usage, dict):
            ct = usage.get("completion_tokens")
            if isinstance(ct, int):
                res.completion_tokens = ct
            pt = usage.get("prompt_tokens")
            if isinstance(pt, int):
                res.prompt_tokens = pt
        err = obj.get("error")
        if err:
            msg = err.get("message") if isinstance(err, dict) else err
            res.stream_error = str(msg)[:500]

    # --- request lifecycle --------------------------------------------------------------------------------

    def begin(self, res: StreamResult, request: bytes, fut: asyncio.Future[None]) -> None:
        self._clear()
        self.res = res
        self.fut = fut
        self.st = res.start
        assert self.transport is not None
        self.transport.write(request)

    def _finish(self) -> None:
        res = self.res
        if res is None:
            return
        self.done = True
        self._copy(res)
        if self.status == 200:
            if self.chunks:
                res.success = True
            else:
                res.error = ("Never received a valid chunk to calculate TTFT."
                             "This response will be marked as failed!")
        else:
            res.error = _error_text(self.status, self.reason, self.err_body)
        self._release(reuse=self.keep_alive and self.status != 0)

    def _fail(self, why: str) -> None:
        res = self.res
        if res is None:
            return
        self.done = True
        self._copy(res)
        res.error = why
        self._release(reuse=False)

    def _copy(self, res: StreamResult) -> None:
        res.status = self.status
        res.chunks = self.chunks
        res.ttft = self.ttft
        res.last = self.last
        res.itl = self.itl
        res.seen_itl = self.seen_itl
        res.seen_ttft = self.seen_ttft

    @property
    def streaming(self) -> bool:
        return self.res is not None and not self.done

    def abort(self, why: str) -> None:
        if self.res is not None and not self.done:
            self._fail(why)

    def _release(self, *, reuse: bool) -> None:
        fut = self.fut
        self.res = None
        self.fut = None
        if reuse and self.alive:
            self.client._give_back(self)
        else:
            self.alive = False
            if self.transport is not None:
                self.transport.close()
        if fut is not None and not fut.done():
            fut.set_result(None)


def _data_events(complete: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(event, payload) of each SSE data event in complete events, comments and ``[DONE]`` left out."""
    for raw in complete.split(b"\n\n"):
        ev = raw.strip()
        if not ev or ev.startswith(b":"):
            continue
        body = ev[5:].strip() if ev.startswith(b"data:") else ev
        if body != b"[DONE]":
            yield ev, body


def _error_text(status: int, reason: str, body: bytes) -> str:
    """``HTTP 400 Bad Request: <the server's message>`` (vllm bench keeps only the reason phrase)."""
    message = None
    try:
        obj = json.loads(body) if body else None
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict):
            message = err.get("message")
        elif isinstance(err, str):
            message = err
        elif isinstance(obj.get("detail"), str):
            message = obj["detail"]
    text = f"HTTP {status} {reason}".rstrip()
    return (f"{text}: {message}" if message else text)[:500]
