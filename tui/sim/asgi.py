"""ASGI plumbing shared by the simulated server's routes: JSON bodies, vLLM's error shape, request bodies."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
JSON_HEADERS = [(b"content-type", b"application/json"), (b"vary", b"Origin")]
METRICS_TYPE = b"text/plain; version=1.0.0; charset=utf-8"


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def error_body(message: str, kind: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


async def send_json(send: Send, status: int, obj: Any) -> None:
    body = dumps(obj)
    await send({"type": "http.response.start", "status": status,
                "headers": [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def send_empty(send: Send, status: int) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", b"0"), (b"vary", b"Origin")]})
    await send({"type": "http.response.body", "body": b""})


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            break
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            break
    return b"".join(chunks)


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400, kind: str = "BadRequestError"):
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.kind, self.status, self.param)
