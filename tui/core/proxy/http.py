"""ASGI plumbing of the proxy: reading a body, answering, vLLM's error JSON, the client-disconnect guard, and the
access lines (uvicorn's format plus what the proxy knows about the prefill and decode legs; never a header)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from tui.core.printable import printable
from tui.core.proxy.upstream import Upstream

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = b"application/json"
EVENT_STREAM = b"text/event-stream"
#: status logged and counted for a client that went away first (nginx's convention; never sent)
CLIENT_CLOSED = 499
#: characters of a request's path in an access line (a client's: up to the HTTP parser's limit)
MAX_PATH_CHARS = 300


def error_body(message: str, status: int, err_type: str) -> bytes:
    """vLLM's error JSON (``entrypoints/serve/utils/error_response.py``)."""
    return json.dumps({"error": {"message": message, "type": err_type, "param": None, "code": status}}).encode()


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(slots=True)
class Trace:
    """What the access line and the metrics need to know about one completion request."""

    route: str
    rid: str = ""
    status: int = 0
    prefill: Upstream | None = None
    prefill_status: int | None = None
    prefill_s: float | None = None
    decode: Upstream | None = None
    decode_status: int | None = None
    decode_first_byte_s: float | None = None
    decode_s: float | None = None
    kv: bool | None = None
    note: str = ""


class DisconnectGuard:
    """Cancels the request's task when the client disconnects; swallows that cancellation on the way out.

    Entered once the request body is read, so the watcher is the only reader of ``receive`` from then on.
    Call :meth:`finishing` just before the last ``send``: a disconnect after it is no reason to cancel.
    """

    __slots__ = ("_receive", "_task", "_watcher", "disconnected", "done")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.disconnected = False
        self.done = False

    async def __aenter__(self) -> DisconnectGuard:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._watcher = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        if not self.done:
            self.disconnected = True
            self._task.cancel()

    def finishing(self) -> None:
        self.done = True

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool:
        self.done = True
        self._watcher.cancel()
        if self.disconnected and exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            self._task.uncancel()
            return True
        return False


WANTED_HEADERS = frozenset({b"authorization", b"x-request-id", b"accept-encoding", b"content-type"})


def wanted_headers(scope: Scope) -> dict[bytes, str]:
    return {k: v.decode("latin-1") for k, v in scope["headers"] if k in WANTED_HEADERS}


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None if the client disconnected first."""
    message = await receive()
    if message["type"] == "http.disconnect":
        return None
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    parts = [body]
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def respond(send: Send, status: int, content_type: bytes, body: bytes, rid: str | None = None) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if rid is not None:
        headers.append((b"x-request-id", rid.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}ms"


def request_line(scope: Scope, status: int) -> str:
    """uvicorn's access format: ``127.0.0.1:50000 - "POST /v1/completions HTTP/1.1" 200``; the path (decoded:
    anyone's on the port) through the sink, escaped and cut."""
    client = scope.get("client")
    who = f"{client[0]}:{client[1]}" if client else "-"
    path = printable(scope["path"], MAX_PATH_CHARS)
    return f'{who} - "{printable(scope["method"], 16)} {path} HTTP/{scope.get("http_version", "1.1")}" {status}'


def access_line(scope: Scope, t: Trace, total_s: float) -> str:
    """One line per completion request, uvicorn's access format plus the P and D legs (never a header)."""
    line = request_line(scope, t.status) + f" rid={printable(t.rid, 100) if t.rid else '-'}"
    if t.prefill is not None:
        line += f" P={t.prefill.url} {t.prefill_status if t.prefill_status is not None else '-'} {ms(t.prefill_s)}"
    if t.kv is False:
        line += " kv=none"
    if t.decode is not None:
        line += (f" D={t.decode.url} {t.decode_status if t.decode_status is not None else '-'}"
                 f" first-byte={ms(t.decode_first_byte_s)} {ms(t.decode_s)}")
    line += f" total={ms(total_s)}"
    if t.note:
        line += f" ({printable(t.note, 300)})"
    return line
