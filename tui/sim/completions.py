"""``/v1/completions`` and ``/v1/chat/completions``: validation, submission to an engine, SSE or JSON answers, and
the P/D ``kv_transfer_params`` flow (vLLM 0.24's shapes: VLLM-0.24.md §3 and §7, fixtures ``sse/``).

Generation always runs to ``max_tokens`` (finish reason ``length``): a simulated model emits no EOS, as a
random-weights model practically never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import zlib
from typing import TYPE_CHECKING, Any

from tui.sim import faults
from tui.sim.asgi import BadRequest, Receive, Send, dumps, error_body, send_json
from tui.sim.pd import Held, block_ids, external_tokens, producer_params, read_remote, remote_request_id
from tui.sim.prefixcache import block_hashes
from tui.sim.runtime import EngineRuntime, LiveRequest
from tui.sim.scheduler import SimRequest

if TYPE_CHECKING:
    from tui.sim.dphead import AnyEngine
    from tui.sim.serverstate import ServerState

SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"vary", b"Origin")]
NIXL_POST_S = 0.0008  # time to post a NIXL read: descriptor set-up before the transfer starts


class Completions:
    def __init__(self, state: ServerState) -> None:
        self.state = state

    # --- prompts --------------------------------------------------------------------------------------------
    def chat_prompt(self, body: dict[str, Any]) -> list[int]:
        """Qwen-style chat template: ``<|im_start|>role\\ncontent<|im_end|>\\n`` per message, then the assistant
        turn; the markers count one token each."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list", "messages")
        tok = self.state.tok
        ids: list[int] = []
        for m in messages:
            if not isinstance(m, dict):
                raise BadRequest("each message must be an object", "messages")
            content = m.get("content") or ""
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            ids += [151644, *tok.encode(str(m.get("role", "user"))), 198, *tok.encode(str(content)), 151645, 198]
        return [*ids, 151644, *tok.encode("assistant"), 198]

    def prompts(self, body: dict[str, Any]) -> list[list[int]]:
        p = body.get("prompt")
        tok = self.state.tok
        if isinstance(p, str):
            return [tok.encode(p)]
        if isinstance(p, list) and p and all(isinstance(x, int) and not isinstance(x, bool) for x in p):
            return [list(p)]
        if isinstance(p, list) and p and all(isinstance(x, str) for x in p):
            return [tok.encode(x) for x in p]
        if isinstance(p, list) and p and all(isinstance(x, list) for x in p):
            return [list(x) for x in p]
        raise BadRequest("prompt must be a string, a list of strings, a list of token ids or a list of such lists",
                         "prompt")

    def _max_tokens(self, body: dict[str, Any], prompt_len: int, chat: bool) -> int:
        m = self.state.cfg.max_model_len
        raw = body.get("max_completion_tokens") if chat else None
        if raw is None:
            raw = body.get("max_tokens", None if chat else 16)
        value = m - prompt_len if raw is None else raw
        if not isinstance(value, int) or isinstance(value, bool):
            raise BadRequest("max_tokens must be an integer", "max_tokens")
        if value > m:
            raise BadRequest(f"max_tokens={value} cannot be greater than max_model_len=max_total_tokens={m}. Please "
                             f"request fewer output tokens. (parameter=max_tokens, value={value})", "max_tokens")
        if value < 1:
            raise BadRequest(f"max_tokens must be at least 1, got {value}.", "max_tokens")
        if prompt_len + value > m:
            raise BadRequest(f"This model's maximum context length is {m} tokens. However, you requested {value} "
                             f"output tokens and your prompt contains {prompt_len} input tokens, for a total of "
                             f"{prompt_len + value} tokens. Please reduce the length of the input prompt or the "
                             f"number of requested output tokens. (parameter=input_tokens, value={prompt_len})")
        return value

    # --- the request ----------------------------------------------------------------------------------------
    async def handle(self, body: dict[str, Any], headers: dict[str, str], receive: Receive, send: Send, *,
                     chat: bool) -> None:
        st = self.state
        model = check_model(st, body)
        if st.dead:
            await send_json(send, 500, error_body("EngineCore encountered an issue. See stack trace (above) for the "
                                                  "root cause.", "InternalServerError", 500))
            return
        prompts = [self.chat_prompt(body)] if chat else self.prompts(body)
        if any(len(p) == 0 for p in prompts):
            raise BadRequest("The prompt cannot be empty", "prompt")
        n = body.get("n", 1)
        if not isinstance(n, int) or n < 1:
            raise BadRequest("n must be at least 1", "n")
        max_tokens = [self._max_tokens(body, len(p), chat) for p in prompts]
        xrid = headers.get("x-request-id")
        base = ("chatcmpl-" if chat else "cmpl-") + (xrid or secrets.token_hex(8))
        pinned = headers.get("x-data-parallel-rank")
        kvp = body.get("kv_transfer_params")
        nixl = st.cfg.kv_transfer is not None and st.cfg.kv_transfer.is_nixl and isinstance(kvp, dict)
        engine = st.pick_engine(int(pinned) if pinned and pinned.isdigit() else None, local_only=nixl)
        producer = nixl and isinstance(kvp, dict) and bool(kvp.get("do_remote_decode"))
        consumer = (nixl and isinstance(kvp, dict) and bool(kvp.get("do_remote_prefill"))
                    and kvp.get("remote_host") is not None and kvp.get("remote_port") is not None)
        shared = asyncio.Event()
        lives: list[LiveRequest] = []
        for i, (ids, mt) in enumerate(zip(prompts, max_tokens, strict=True)):
            for j in range(n):
                rid = f"{base}-{i * n + j}-{secrets.token_hex(4)}"
                sim = SimRequest(rid=rid, prompt_len=len(ids), max_tokens=mt, arrival=0.0,
                                 hold_after_finish=producer)
                if consumer and isinstance(kvp, dict) and isinstance(engine, EngineRuntime):
                    await self._pull(sim, kvp, engine)
                lives.append(LiveRequest(sim=sim, seed=zlib.crc32(rid.encode()), params_n=n, event=shared,
                                         hashes=block_hashes(ids) if st.cfg.enable_prefix_caching else []))
        st.in_flight += 1
        try:
            for live in lives:
                engine.submit(live)
            created = int(time.time())
            if body.get("stream"):
                await self._stream(lives, body, model, base, created, chat, receive, send, engine)
            else:
                await self._whole(lives, body, model, base, created, chat, send, engine, producer)
        finally:
            st.in_flight -= 1

    async def _pull(self, sim: SimRequest, kvp: dict[str, Any], engine: EngineRuntime) -> None:
        """The decode side of P/D: read the prefill side's blocks over the side channel, then time the transfer."""
        st = self.state
        m = engine.metrics
        host, port = str(kvp.get("remote_host")), int(kvp["remote_port"])
        remote_id = str(kvp.get("remote_request_id", ""))
        try:
            reply = await read_remote(host, port, remote_id)
        except (OSError, TimeoutError, ValueError):
            reply = {"ok": False, "error": "handshake_failed"}
        if not reply.get("ok"):
            if m.nixl:
                m.nixl_counters["nixl_num_failed_transfers"] += 1
            reason = "handshake_failed" if reply.get("error") == "handshake_failed" else "transfer_failed"
            st.log.error(st.engine_proc(engine.index), "base_worker.py:744", f"NIXL transfer failure: {reason}. "
                         f"msg={reply.get('error')} | Context: {{'remote_engine_id': {kvp.get('remote_engine_id')!r}, "
                         f"'remote_request_id': {remote_id!r}, 'remote_host': {host!r}, 'remote_port': {port}}}")
            policy = (st.cfg.kv_transfer.raw.get("kv_load_failure_policy", "fail") if st.cfg.kv_transfer else "fail")
            if policy == "fail":
                raise BadRequest(f"KV transfer from remote engine {kvp.get('remote_engine_id')} failed: {reason}",
                                 None, 500, "InternalServerError")
            return
        nbytes = int(reply.get("bytes", 0))
        same_gpu = bool(set(reply.get("gpus", [])) & set(st.started.engine(engine.index).gpus))
        sim.external_tokens = external_tokens(sim.prompt_len, int(kvp.get("remote_num_tokens", sim.prompt_len)))
        xfer = st.cost.kv_transfer_time(nbytes, same_gpu=same_gpu)
        if st.fp.kv_slow_path:  # UCX found no GPU-to-GPU path: the blocks go over TCP loopback
            xfer = max(xfer, nbytes / faults.SLOW_KV_BANDWIDTH)
        sim.transfer_time = xfer
        blocks = -(-sim.external_tokens // 16)
        descriptors = blocks * st.cfg.profile.shape.full_attention_layers * 2
        if m.nixl:
            m.nixl_hist["nixl_xfer_time_seconds"].observe(xfer)
            m.nixl_hist["nixl_post_time_seconds"].observe(NIXL_POST_S)
            m.nixl_hist["nixl_bytes_transferred"].observe(nbytes)
            m.nixl_hist["nixl_num_descriptors"].observe(descriptors)
        st.xfer_log.append((xfer, NIXL_POST_S, nbytes, descriptors))

    def _register_held(self, live: LiveRequest, engine: EngineRuntime) -> dict[str, Any] | None:
        st = self.state
        sim = live.sim
        if sim.rid not in engine.sched.held:
            return None
        engine.floor_lease(sim)  # the decode side can read from now on: its lease counts from here too
        remote_id = remote_request_id(sim.rid.rsplit("-", 2)[0])
        hybrid = st.cfg.profile.is_hybrid
        full_blocks = -(-sim.prompt_len // 16)
        start = st.next_blocks(full_blocks)
        st.held[remote_id] = Held(engine=engine.index, rid=sim.rid, prompt_len=sim.prompt_len,
                                  nbytes=st.cost.kv_transfer_bytes(sim.prompt_len),
                                  gpus=st.started.engine(engine.index).gpus)
        return producer_params(engine_id=st.started.engine_ids[engine.index], request_id=remote_id,
                               block_ids=block_ids(start, full_blocks, engine.sched.total_blocks, hybrid),
                               host=st.cfg.env.side_channel_host, port=st.cfg.env.side_channel_port + engine.index,
                               tp=st.cfg.tp, num_tokens=sim.prompt_len)

    # --- answers --------------------------------------------------------------------------------------------
    async def _whole(self, lives: list[LiveRequest], body: dict[str, Any], model: str, base: str, created: int,
                     chat: bool, send: Send, engine: AnyEngine, producer: bool) -> None:
        while not all(lv.done for lv in lives):
            await lives[0].event.wait()
            lives[0].event.clear()
        err = next((lv.error for lv in lives if lv.error), None)
        if err:
            await send_json(send, 500, error_body(err, "InternalServerError", 500))
            return
        tok = self.state.tok
        choices = []
        for k, lv in enumerate(lives):
            text = tok.output_text(lv.seed, 0, lv.sim.generated)
            if chat:
                choices.append({"index": k, "message": {"role": "assistant", "content": text, "refusal": None,
                                                        "annotations": None, "audio": None, "function_call": None,
                                                        "tool_calls": [], "reasoning": None},
                                "logprobs": None, "finish_reason": lv.sim.finish_reason or "length",
                                "stop_reason": None, "token_ids": None})
            else:
                choices.append({"index": k, "text": text, "logprobs": None,
                                "finish_reason": lv.sim.finish_reason or "length", "stop_reason": None,
                                "token_ids": None, "prompt_logprobs": None, "prompt_token_ids": None,
                                "routed_experts": None})
        kv_params = self._register_held(lives[0], engine) if producer and isinstance(engine, EngineRuntime) else None
        usage = _usage(lives, details=True)
        obj: dict[str, Any] = {"id": base, "object": "chat.completion" if chat else "text_completion",
                               "created": created, "model": model, "choices": choices, "service_tier": None,
                               "system_fingerprint": self.state.fingerprint, "usage": usage}
        if chat:
            obj.update({"prompt_logprobs": None, "prompt_token_ids": None})
        obj["kv_transfer_params"] = kv_params
        await send_json(send, 200, obj)

    async def _stream(self, lives: list[LiveRequest], body: dict[str, Any], model: str, base: str, created: int,
                      chat: bool, receive: Receive, send: Send, engine: AnyEngine) -> None:
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage")) if isinstance(opts, dict) else False
        continuous = bool(opts.get("continuous_usage_stats")) if isinstance(opts, dict) else False
        obj_name = "chat.completion.chunk" if chat else "text_completion"
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        event = lives[0].event
        disconnected = asyncio.Event()

        async def watch() -> None:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    disconnected.set()
                    event.set()  # wake the stream so it notices
                    return

        watcher = asyncio.create_task(watch())
        tok = self.state.tok
        finished: set[int] = set()
        # every chunk of this stream starts the same: serialise that once (vLLM's chunks, exclude_unset)
        head = (b'data: {"id":' + dumps(base) + b',"object":"' + obj_name.encode() + b'","created":'
                + str(created).encode() + b',"model":' + dumps(model) + b',"choices":[{"index":')
        tail = b',"token_ids":null}]}\n\n' if chat else b',"prompt_token_ids":null,"token_ids":null}]}\n\n'
        try:
            if chat:
                for k in range(len(lives)):
                    await _sse(send, {"id": base, "object": obj_name, "created": created, "model": model,
                                      "choices": [{"index": k, "delta": {"role": "assistant", "content": ""},
                                                   "logprobs": None, "finish_reason": None}],
                                      "prompt_token_ids": None, "prompt_text": None})
            while len(finished) < len(lives) and not disconnected.is_set():
                await event.wait()
                event.clear()
                if disconnected.is_set():
                    break
                err = next((lv.error for lv in lives if lv.error), None)
                if err:
                    await _sse(send, error_body(err, "InternalServerError", 500))
                    break
                for k, lv in enumerate(lives):
                    if k in finished:
                        continue
                    start, count = lv.take()
                    last = lv.done and lv.sim.state == "finished"
                    if not count and not last:
                        continue
                    text = tok.output_text(lv.seed, start, count)
                    if not last and not continuous:  # the common case, without building dicts
                        middle = (b',"delta":{"content":' + dumps(text) + b'},"logprobs":null,"finish_reason":null'
                                  if chat else b',"text":' + dumps(text)
                                  + b',"logprobs":null,"finish_reason":null,"stop_reason":null')
                        await send({"type": "http.response.body", "body": head + str(k).encode() + middle + tail,
                                    "more_body": True})
                        continue
                    choice: dict[str, Any]
                    if chat:
                        choice = {"index": k, "delta": {"content": text}, "logprobs": None,
                                  "finish_reason": None, "token_ids": None}
                    else:
                        choice = {"index": k, "text": text, "logprobs": None, "finish_reason": None,
                                  "stop_reason": None, "prompt_token_ids": None, "token_ids": None}
                    chunk: dict[str, Any] = {"id": base, "object": obj_name, "created": created, "model": model,
                                             "choices": [choice]}
                    if last:
                        finished.add(k)
                        choice["finish_reason"] = lv.sim.finish_reason or "length"
                        if chat:
                            choice["stop_reason"] = None
                            choice["token_ids"] = choice.pop("token_ids")
                        if not include_usage and len(finished) == len(lives):
                            chunk["system_fingerprint"] = self.state.fingerprint
                    if continuous:
                        chunk["usage"] = _usage([lv], details=False)
                    await _sse(send, chunk)
            if disconnected.is_set():
                for lv in lives:
                    engine.abort(lv.sim.rid)
                return
            if include_usage and len(finished) == len(lives):
                await _sse(send, {"id": base, "object": obj_name, "created": created, "model": model, "choices": [],
                                  "usage": _usage(lives, details=False),
                                  "system_fingerprint": self.state.fingerprint})
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except OSError:
            for lv in lives:
                engine.abort(lv.sim.rid)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


async def _sse(send: Send, obj: dict[str, Any]) -> None:
    await send({"type": "http.response.body", "body": b"data: " + dumps(obj) + b"\n\n", "more_body": True})


def _usage(lives: list[LiveRequest], *, details: bool) -> dict[str, Any]:
    prompt = sum(lv.sim.prompt_len for lv in lives)
    out = sum(lv.sim.generated for lv in lives)
    usage: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + out, "completion_tokens": out}
    if details:
        usage["prompt_tokens_details"] = None
    return usage


def check_model(st: ServerState, body: dict[str, Any]) -> str:
    name = body.get("model")
    if name is None:
        return st.cfg.served_name
    if name not in st.cfg.served_names:
        raise BadRequest(f"The model `{name}` does not exist.", "model", 404, "NotFoundError")
    return str(name)
