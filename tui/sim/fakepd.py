"""A fast, deterministic stand-in for a vLLM 0.24 prefill or decode server, to measure the proxy against.

    python -m tui.sim.fakepd --role prefill --port 0
    python -m tui.sim.fakepd --role decode --port 0 [--token-delay 0.001]

It does no model work: the prefill role answers at once with one token and ``kv_transfer_params`` shaped like
NixlConnector's (``shared/VLLM-0.24.md`` §7); the decode role streams ``max_tokens`` SSE chunks shaped like
vLLM's, ``--token-delay`` seconds apart (0: back to back). Whatever time a request takes through the proxy beyond
what it takes here directly is the proxy's. Prints ``fake vLLM <role> listening on <url>`` once it accepts
connections. Also serves ``/health``, ``/v1/models``, ``/version``, ``/tokenize``, ``/detokenize`` and a
``/metrics`` with ``vllm:prompt_tokens_by_source_total`` so a proxy's pass-through can be checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

MODEL = "fake/model"
CREATED = 1_700_000_000


class FakeVllm:
    """The ASGI app of one fake server."""

    def __init__(self, role: str, port: int, token_delay: float = 0.0) -> None:
        if role not in ("prefill", "decode"):
            raise ValueError(f"role must be prefill or decode, got {role!r}")
        self.role = role
        self.port = port
        self.token_delay = token_delay
        self.prompt_tokens: Counter[str] = Counter()  # by source, as vLLM's metric
        self.finished: Counter[str] = Counter()  # by reason, as vllm:request_success_total
        self.requests = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = dict(scope["headers"])
        if path == "/health":
            await _respond(send, 200, b"", b"application/json")
        elif path == "/version":
            await _respond(send, 200, b'{"version":"0.24.0"}')
        elif path == "/v1/models":
            await _respond(send, 200, json.dumps({"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": CREATED, "owned_by": "vllm", "root": MODEL,
                 "parent": None, "max_model_len": 4096}]}).encode())
        elif path == "/tokenize" and method == "POST":
            tokens = list(range(len(_prompt_tokens(json.loads(body)))))
            await _respond(send, 200, json.dumps({"count": len(tokens), "max_model_len": 4096, "tokens": tokens,
                                                  "token_strs": None}).encode())
        elif path == "/detokenize" and method == "POST":
            tokens = json.loads(body).get("tokens", [])
            await _respond(send, 200, json.dumps({"prompt": " ".join(f"t{t}" for t in tokens)}).encode())
        elif path == "/metrics":
            lines = [f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="{MODEL}",source="{s}"}} '
                     f"{float(self.prompt_tokens[s])}" for s in ("local_compute", "external_kv_transfer")]
            lines += [f'vllm:request_success_total{{engine="0",finished_reason="{r}",model_name="{MODEL}"}} '
                      f"{float(self.finished[r])}" for r in ("length", "abort")]
            await _respond(send, 200, ("\n".join(lines) + "\n").encode(), b"text/plain; version=1.0.0; charset=utf-8")
        elif path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
            self.requests += 1
            rid = headers.get(b"x-request-id", b"0").decode()
            await self._complete(receive, send, json.loads(body), rid, chat=path.endswith("chat/completions"))
        else:
            await _respond(send, 404, b'{"detail":"Not Found"}')

    async def _complete(self, receive: Receive, send: Send, req: dict[str, Any], rid: str, *, chat: bool) -> None:
        n_prompt = len(_prompt_tokens(req))
        kv_in = req.get("kv_transfer_params") or {}
        if self.role == "prefill":
            self.prompt_tokens["local_compute"] += n_prompt
            kv_out = None
            if kv_in.get("do_remote_decode"):
                kv_out = {"do_remote_prefill": True, "do_remote_decode": False,
                          "remote_block_ids": [list(range((n_prompt + 15) // 16))],
                          "remote_engine_id": f"fake-prefill-{self.port}", "remote_request_id": f"cmpl-{rid}-0-0",
                          "remote_host": "127.0.0.1", "remote_port": 5600, "tp_size": 1,
                          "remote_num_tokens": n_prompt}
            doc = _final(rid, chat, 1, n_prompt)
            doc["kv_transfer_params"] = kv_out
            self.finished["length"] += 1
            await _respond(send, 200, json.dumps(doc).encode())
            return
        if kv_in.get("do_remote_prefill"):
            self.prompt_tokens["external_kv_transfer"] += n_prompt
        else:
            self.prompt_tokens["local_compute"] += n_prompt
        n_out = int(req.get("max_tokens") or 16)
        if not req.get("stream"):
            self.finished["length"] += 1
            await _respond(send, 200, json.dumps(_final(rid, chat, n_out, n_prompt)).encode())
            return
        # like vLLM, a client that goes away aborts its request (counted as finished_reason="abort")
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            await self._stream(send, req, rid, chat, n_prompt, n_out, gone)
        finally:
            watcher.cancel()
        self.finished["abort" if gone.is_set() else "length"] += 1

    async def _stream(self, send: Send, req: dict[str, Any], rid: str, chat: bool, n_prompt: int, n_out: int,
                      gone: asyncio.Event) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
        obj = "chat.completion.chunk" if chat else "text_completion"
        for i in range(n_out):
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
            if gone.is_set():
                return
            choice: dict[str, Any] = {"index": 0, "logprobs": None,
                                      "finish_reason": "length" if i == n_out - 1 else None}
            if chat:
                choice["delta"] = {"role": "assistant", "content": " tok"} if i == 0 else {"content": " tok"}
            else:
                choice["text"] = " tok"
            chunk = {"id": f"cmpl-{rid}", "object": obj, "created": CREATED, "model": MODEL, "choices": [choice]}
            await send({"type": "http.response.body", "body": b"data: " + json.dumps(chunk).encode() + b"\n\n",
                        "more_body": True})
        if (req.get("stream_options") or {}).get("include_usage"):
            usage = {"id": f"cmpl-{rid}", "object": obj, "created": CREATED, "model": MODEL, "choices": [],
                     "usage": {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n_out,
                               "completion_tokens": n_out}}
            await send({"type": "http.response.body", "body": b"data: " + json.dumps(usage).encode() + b"\n\n",
                        "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


def _prompt_tokens(req: dict[str, Any]) -> list[Any]:
    prompt = req.get("prompt")
    if prompt is None and "messages" in req:
        prompt = " ".join(str(m.get("content", "")) for m in req["messages"])
    if isinstance(prompt, list):
        return prompt
    return str(prompt or "").split()


def _final(rid: str, chat: bool, n_out: int, n_prompt: int) -> dict[str, Any]:
    text = " tok" * n_out
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length", "stop_reason": None}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return {"id": f"cmpl-{rid}", "object": "chat.completion" if chat else "text_completion", "created": CREATED,
            "model": MODEL, "choices": [choice],
            "usage": {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n_out, "completion_tokens": n_out}}


async def _respond(send: Send, status: int, body: bytes, content_type: bytes = b"application/json") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("prefill", "decode"), required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token-delay", type=float, default=0.0, metavar="S")
    args = parser.parse_args(argv)
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY on accepted connections only when the listening socket's
    # proto says TCP; with proto 0 a response written in two parts waits ~40 ms for the client's delayed ACK
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(2048)
    port = sock.getsockname()[1]
    app = FakeVllm(args.role, port, args.token_delay)
    config = uvicorn.Config(app, http="httptools", ws="none", lifespan="on", access_log=False, log_level="warning",
                            proxy_headers=False, server_header=False)
    print(f"fake vLLM {args.role} listening on http://{args.host}:{port}", flush=True)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
