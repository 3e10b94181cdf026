"""A minimal vLLM-shaped streaming server for testing and measuring load generators (not the simulator).

It speaks just enough of vLLM 0.24's HTTP API for our client and for ``vllm bench serve``: ``GET /health``,
``/v1/models``, ``/version``, ``/metrics``; ``POST /v1/completions`` (streaming SSE with a usage chunk and
``[DONE]``, or one JSON); ``/tokenize`` answers 404, so vllm bench skips its prompt alignment. ``GET /stub/stats``
reports what the stub saw (requests, the most streams open at once).

Two ways to stream (``--mode``):

- ``fast``: as fast as the socket takes it, ``--chunks-per-write`` SSE events per write (one HTTP chunk), to
  measure how many tokens per second a client can take;
- ``paced``: every stream sends its first token ``ttft`` after the request arrived, then token k at
  ``first + k·ms_per_token`` on an absolute schedule (a late wake-up sends the tokens then due together), so
  (last − first)/(n − 1) is exactly the pace: a known TPOT for a client to measure.

Raw asyncio (no framework) so the server is never the slower side. Run: ``python -m tui.sim.stubserver --port 0``;
it prints ``listening on http://127.0.0.1:PORT`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, cast

_TEXT = " tok"


@dataclass
class StubConfig:
    mode: str = "fast"  # fast | paced
    chunks_per_write: int = 32
    ms_per_token: float = 20.0
    ttft_ms: float = 0.0
    model: str = "stub-model"
    max_model_len: int = 1 << 20
    fail_every: int = 0  # every Nth completion answers HTTP 500 (0: never)
    kv_source: str = "local_compute"  # how /metrics counts prompt tokens (external_kv_transfer: a fed decode server)


@dataclass
class StubStats:
    requests: int = 0
    completions: int = 0
    active: int = 0
    max_active: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    failed: int = 0
    # paced streams: the TPOT the stub really delivered, (last token sent − first sent)/(n − 1), summed
    delivered_tpot_sum: float = 0.0
    delivered_streams: int = 0


class StubServer:
    def __init__(self, config: StubConfig) -> None:
        self.config = config
        self.stats = StubStats()
        self.server: asyncio.base_events.Server | None = None
        self._seq = 0
        # paced streams wait in 1 ms slots of one timer wheel: one wake-up per millisecond serves every stream
        # due in it (a timer per token costs more than the write it schedules)
        self._wheel: dict[int, list[_Stream]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_slot = 0

    def schedule(self, stream: _Stream, when: float) -> None:
        slot = math.ceil(when * 1000.0)
        self._wheel.setdefault(slot, []).append(stream)
        if self._timer is None or slot < self._timer_slot:
            self._arm(slot)

    def _arm(self, slot: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_slot = slot
        self._timer = asyncio.get_running_loop().call_at(slot / 1000.0, self._turn_wheel)

    def _turn_wheel(self) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time()
        current = int(now * 1000.0)
        for slot in sorted(k for k in self._wheel if k <= current):
            for stream in self._wheel.pop(slot):
                stream.tick(now)
        if self._wheel and self._timer is None:
            self._arm(min(self._wheel))

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _Conn(self), host, port, backlog=4096, reuse_address=True)
        sock = self.server.sockets[0]
        return int(sock.getsockname()[1])

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        if self._timer is not None:
            self._timer.cancel()

    def next_id(self) -> str:
        self._seq += 1
        return f"cmpl-stub{self._seq:08x}"

    def metrics_text(self) -> str:
        s = self.stats
        m = self.config.model
        lab = f'engine="0",model_name="{m}"'
        return (
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{{{lab}}} {float(s.active)}\n"
            "# TYPE vllm:prompt_tokens_total counter\n"
            f"vllm:prompt_tokens_total{{{lab}}} {float(s.prompt_tokens)}\n"
            "# TYPE vllm:generation_tokens_total counter\n"
            f"vllm:generation_tokens_total{{{lab}}} {float(s.generation_tokens)}\n"
            "# TYPE vllm:prompt_tokens_by_source_total counter\n"
            + "".join(f'vllm:prompt_tokens_by_source_total{{{lab},source="{src}"}} '
                      f'{float(s.prompt_tokens) if src == self.config.kv_source else 0.0}\n'
                      for src in ("local_compute", "local_cache_hit", "external_kv_transfer"))
        )


def _event(cid: str, created: int, model: str, finish: str | None) -> bytes:
    fin = "null" if finish is None else f'"{finish}"'
    return (
        f'data: {{"id":"{cid}","object":"text_completion","created":{created},"model":"{model}","choices":'
        f'[{{"index":0,"text":"{_TEXT}","logprobs":null,"finish_reason":{fin},"stop_reason":null,'
        f'"prompt_token_ids":null,"token_ids":null}}]}}\n\n'
    ).encode()


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class _Conn(asyncio.Protocol):
    def __init__(self, server: StubServer) -> None:
        self.srv = server
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.busy = False
        self.paused = False
        self.resumed: asyncio.Event | None = None
        self.closed = False
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both have the same methods
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.resumed is not None:
            self.resumed.set()

    def pause_writing(self) -> None:
        self.paused = True
        if self.resumed is None:
            self.resumed = asyncio.Event()
        self.resumed.clear()

    def resume_writing(self) -> None:
        self.paused = False
        if self.resumed is not None:
            self.resumed.set()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].decode("latin-1").split("\r\n")
        method, _, rest = head[0].partition(" ")
        path = rest.split(" ", 1)[0]
        length = 0
        self.keep_alive = not head[0].endswith("HTTP/1.0")
        for line in head[1:]:
            name, _, value = line.partition(":")
            n = name.strip().lower()
            if n == "content-length":
                length = int(value.strip() or 0)
            elif n == "connection" and "close" in value.lower():
                self.keep_alive = False
        if len(self.buf) < end + 4 + length:
            return
        body = self.buf[end + 4: end + 4 + length]
        self.buf = self.buf[end + 4 + length:]
        self.busy = True
        self.srv.stats.requests += 1
        self._route(method, path.split("?", 1)[0], body)

    def _done(self) -> None:
        self.busy = False
        if not self.keep_alive and self.transport is not None:
            self.transport.close()
            return
        if self.buf:
            self._next()

    def _respond(self, status: str, body: bytes, ctype: str = "application/json") -> None:
        assert self.transport is not None
        conn = "keep-alive" if self.keep_alive else "close"
        self.transport.write(
            f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\nconnection: {conn}\r\n\r\n"
            .encode() + body)
        self._done()

    def _json(self, status: str, obj: Any) -> None:
        self._respond(status, json.dumps(obj).encode())

    def _route(self, method: str, path: str, body: bytes) -> None:
        srv = self.srv
        cfg = srv.config
        if method == "GET" and path in ("/health", "/ping"):
            self._respond("200 OK", b"")
        elif method == "GET" and path == "/v1/models":
            self._json("200 OK", {"object": "list", "data": [{
                "id": cfg.model, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                "root": cfg.model, "parent": None, "max_model_len": cfg.max_model_len}]})
        elif method == "GET" and path == "/version":
            self._json("200 OK", {"version": "0.24.0"})
        elif method == "GET" and path == "/metrics":
            self._respond("200 OK", srv.metrics_text().encode(), "text/plain; version=1.0.0; charset=utf-8")
        elif method == "GET" and path == "/stub/stats":
            st = dict(vars(srv.stats))
            n = st["delivered_streams"]
            st["delivered_tpot_ms_mean"] = st["delivered_tpot_sum"] / n * 1000 if n else None
            self._json("200 OK", st)
        elif method == "POST" and path == "/v1/completions":
            self._completion(body)
        else:
            self._json("404 Not Found", {"detail": "Not Found"})

    def _completion(self, body: bytes) -> None:
        srv = self.srv
        cfg = srv.config
        try:
            req, n_prompt = _read_request(body)
            max_tokens = int(req.get("max_tokens") or 16)
        except (ValueError, TypeError, AttributeError):
            self._json("400 Bad Request", {"error": {"message": "bad JSON body", "type": "BadRequestError",
                                                     "param": None, "code": 400}})
            return
        srv.stats.completions += 1
        if cfg.fail_every and srv.stats.completions % cfg.fail_every == 0:
            srv.stats.failed += 1
            self._json("500 Internal Server Error", {"error": {"message": "injected failure",
                                                               "type": "InternalServerError", "param": None,
                                                               "code": 500}})
            return
        if max_tokens + n_prompt > cfg.max_model_len:
            srv.stats.failed += 1
            self._json("400 Bad Request", {"error": {
                "message": f"This model's maximum context length is {cfg.max_model_len} tokens.",
                "type": "BadRequestError", "param": None, "code": 400}})
            return
        srv.stats.prompt_tokens += n_prompt
        model = str(req.get("model") or cfg.model)
        cid = srv.next_id()
        created = int(time.time())
        if not req.get("stream"):
            srv.stats.generation_tokens += max_tokens
            self._json("200 OK", {"id": cid, "object": "text_completion", "created": created, "model": model,
                                  "choices": [{"index": 0, "text": _TEXT * max_tokens, "finish_reason": "length"}],
                                  "usage": {"prompt_tokens": n_prompt, "completion_tokens": max_tokens,
                                            "total_tokens": n_prompt + max_tokens}})
            return
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        stream = _Stream(self, cid, created, model, max_tokens, n_prompt, include_usage)
        srv.stats.active += 1
        srv.stats.max_active = max(srv.stats.max_active, srv.stats.active)
        assert self.transport is not None
        conn = "keep-alive" if self.keep_alive else "close"
        self.transport.write(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n"
            f"connection: {conn}\r\n\r\n".encode())
        if cfg.mode == "paced":
            stream.start_paced(cfg.ms_per_token / 1000.0, cfg.ttft_ms / 1000.0)
        else:
            asyncio.get_running_loop().create_task(stream.run_fast(cfg.chunks_per_write))


_PROMPT_IDS = re.compile(rb'"prompt":\s*\[([0-9,\s]*)\]')


def _read_request(body: bytes) -> tuple[dict[str, Any], int]:
    """The request without its prompt, and the prompt's token count. A token-id prompt is counted, not parsed:
    1,000 requests of 8,000 ids would otherwise cost the stub a second of JSON parsing at the start of a run."""
    m = _PROMPT_IDS.search(body)
    if m is not None:
        ids = m.group(1).strip()
        n_prompt = ids.count(b",") + 1 if ids else 0
        req = json.loads(body[: m.start(1)] + body[m.end(1):])
    else:
        req = json.loads(body)
        prompt = req.get("prompt")
        n_prompt = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
    if not isinstance(req, dict):
        raise ValueError("not an object")
    return req, n_prompt


class _Stream:
    def __init__(self, conn: _Conn, cid: str, created: int, model: str, n: int, n_prompt: int, usage: bool) -> None:
        self.conn = conn
        self.cid = cid
        self.created = created
        self.model = model
        self.n = n
        self.n_prompt = n_prompt
        self.usage = usage
        self.sent = 0
        self.ev = _event(cid, created, model, None)
        self.t0 = 0.0
        self.dt = 0.0

    def _tail(self) -> bytes:
        out = b""
        if self.usage:
            u = {"id": self.cid, "object": "text_completion", "created": self.created, "model": self.model,
                 "choices": [], "usage": {"prompt_tokens": self.n_prompt, "total_tokens": self.n_prompt + self.n,
                                          "completion_tokens": self.n}}
            out += b"data: " + json.dumps(u, separators=(",", ":")).encode() + b"\n\n"
        return out + b"data: [DONE]\n\n"

    def _events(self, k: int) -> bytes:
        """The next k token events (the last token of the stream says finish_reason length)."""
        last = self.sent + k >= self.n
        body = self.ev * (k - 1) + _event(self.cid, self.created, self.model, "length") if last else self.ev * k
        self.sent += k
        return body

    def _end(self) -> None:
        srv = self.conn.srv
        srv.stats.active -= 1
        srv.stats.generation_tokens += self.sent
        tr = self.conn.transport
        if tr is not None and not self.conn.closed:
            tr.write(_chunk(self._tail()) + b"0\r\n\r\n")
        self.conn._done()

    async def run_fast(self, per_write: int, writes_per_turn: int = 8) -> None:
        """Write ``per_write`` events per write call, several writes per turn of the event loop (so the stub
        outruns a client), yielding to the other streams between turns and whenever the socket is full."""
        conn = self.conn
        tr = conn.transport
        assert tr is not None
        full = _chunk(self.ev * per_write)
        while self.sent < self.n and not conn.closed:
            for _ in range(writes_per_turn):
                k = min(per_write, self.n - self.sent)
                if k == per_write and self.sent + k < self.n:
                    self.sent += k
                    tr.write(full)
                else:
                    tr.write(_chunk(self._events(k)))
                if self.sent >= self.n or conn.paused:
                    break
            if conn.paused and conn.resumed is not None:
                await conn.resumed.wait()
            else:
                await asyncio.sleep(0)
        self._end()

    def start_paced(self, dt: float, ttft: float) -> None:
        self.one = _chunk(self.ev)
        self.dt = dt
        self.conn.srv.schedule(self, asyncio.get_running_loop().time() + ttft)

    def tick(self, now: float) -> None:
        """Send the tokens now due (one, unless the stub fell behind) and wait in the wheel for the next."""
        conn = self.conn
        srv = conn.srv
        if conn.closed:
            srv.stats.active -= 1
            return
        if self.sent == 0:
            # the pace counts from the first token actually sent: a stub busy at the start of a run (reading a
            # thousand long prompts) delays the first token, not the cadence of the rest
            self.t0 = now
        due = min(self.n, int((now - self.t0) / self.dt) + 1) if self.dt > 0 else self.n
        k = max(1, due - self.sent)
        if k == 1 and self.sent + 1 < self.n:
            payload = self.one  # the usual case: one token, not the last
            self.sent += 1
        else:
            payload = _chunk(self._events(min(k, self.n - self.sent)))
        assert conn.transport is not None
        conn.transport.write(payload)
        if self.sent >= self.n:
            if self.n > 1:
                srv.stats.delivered_tpot_sum += (now - self.t0) / (self.n - 1)
                srv.stats.delivered_streams += 1
            self._end()
            return
        srv.schedule(self, self.t0 + self.sent * self.dt)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tui.sim.stubserver", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    p.add_argument("--mode", choices=("fast", "paced"), default="fast")
    p.add_argument("--chunks-per-write", type=int, default=32)
    p.add_argument("--ms-per-token", type=float, default=20.0)
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--model", default="stub-model")
    p.add_argument("--max-model-len", type=int, default=1 << 20)
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--kv-source", choices=("local_compute", "external_kv_transfer"), default="local_compute")
    p.add_argument("--cpu", type=int, default=None, help="pin the server to this CPU core")
    a = p.parse_args(argv)
    if a.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.cpu})
    cfg = StubConfig(mode=a.mode, chunks_per_write=max(1, a.chunks_per_write), ms_per_token=a.ms_per_token,
                     ttft_ms=a.ttft_ms, model=a.model, max_model_len=a.max_model_len, fail_every=a.fail_every,
                     kv_source=a.kv_source)

    async def serve() -> None:
        srv = StubServer(cfg)
        port = await srv.start(a.host, a.port)
        print(f"listening on http://{a.host}:{port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        srv.close()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
