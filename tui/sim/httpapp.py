"""The simulated server's HTTP API: vLLM 0.24's routes and response shapes, as a plain ASGI app (no framework).

Shapes follow the real captures (``tests/fixtures/vllm-0.24.0-h200/endpoints`` and ``sse``): ``/health`` 200 with
an empty body (503 once the engine is dead), ``/v1/models``, ``/version``, ``/load``, ``/tokenize``,
``/detokenize``, ``/metrics``, and ``/v1/completions`` / ``/v1/chat/completions`` with streaming (SSE chunks,
usage chunk, ``data: [DONE]``), errors as vLLM's ``{"error": {...}}``. The completion handlers live in
:mod:`tui.sim.completions`.
"""

from __future__ import annotations

import json
from typing import Any

from tui.sim.asgi import (
    METRICS_TYPE,
    BadRequest,
    Receive,
    Send,
    error_body,
    read_body,
    send_empty,
    send_json,
)
from tui.sim.completions import Completions, check_model
from tui.sim.config import VLLM_VERSION
from tui.sim.metrics import Pacing, render, render_pacing
from tui.sim.serverstate import ServerState
from tui.sim.startup_ctx import ROUTES

_KNOWN_PATHS: dict[str, set[str]] = {}
for _path, _methods in ROUTES:
    _KNOWN_PATHS.setdefault(_path, set()).update(m.strip() for m in _methods.split(","))


class App:
    def __init__(self, state: ServerState) -> None:
        self._check = check_model

        self.state = state
        self.completions = Completions(state)
        cfg = state.cfg
        self.api_keys = set(cfg.api_keys)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.api_keys and path.startswith(("/v1", "/v2", "/inference")):
            token = headers.get("authorization", "")
            if token.removeprefix("Bearer ").strip() not in self.api_keys:
                await send_json(send, 401, {"error": "Unauthorized"})
                return
        try:
            await self._route(path, method, headers, receive, send)
        except BadRequest as exc:
            await send_json(send, exc.status, exc.body())

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await self.state.start()
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await self.state.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _route(self, path: str, method: str, headers: dict[str, str], receive: Receive, send: Send) -> None:
        st = self.state
        if path in ("/health", "/ping") and (method in ("GET", "HEAD") or (path == "/ping" and method == "POST")):
            await send_empty(send, 503 if st.dead else 200)
            return
        if path == "/version" and method == "GET":
            await send_json(send, 200, {"version": VLLM_VERSION})
            return
        if path == "/load" and method == "GET":
            await send_json(send, 200, {"server_load": st.in_flight if st.cfg.server_load_tracking else 0})
            return
        if path in ("/metrics", "/metrics/") and method == "GET":
            await self._metrics(send)
            return
        if path == "/v1/models" and method == "GET":
            await send_json(send, 200, self._models())
            return
        if path in ("/tokenize", "/detokenize") and method == "POST":
            body = self._json(await read_body(receive))
            await send_json(send, 200, self._tokenize(body) if path == "/tokenize" else self._detokenize(body))
            return
        if path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
            body = self._json(await read_body(receive))
            await self.completions.handle(body, headers, receive, send, chat=path.endswith("chat/completions"))
            return
        if path == "/openapi.json" and method in ("GET", "HEAD"):
            await send_json(send, 200, self._openapi())
            return
        if path in _KNOWN_PATHS:
            if method not in _KNOWN_PATHS[path]:
                await send_json(send, 405, {"detail": "Method Not Allowed"})
                return
            await send_json(send, 501, error_body(f"{path} is not implemented by the simulated vLLM server",
                                                  "NotImplementedError", 501))
            return
        await send_json(send, 404, {"detail": "Not Found"})

    @staticmethod
    def _json(raw: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            raise BadRequest(f"JSON decode error: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("Input should be a valid dictionary or object to extract fields from")
        return body

    def _models(self) -> dict[str, Any]:
        st, cfg = self.state, self.state.cfg
        perm = {"id": st.perm_id, "object": "model_permission", "created": st.created, "allow_create_engine": False,
                "allow_sampling": True, "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False}
        data = [{"id": name, "object": "model", "created": st.created, "owned_by": "vllm", "root": cfg.model,
                 "parent": None, "max_model_len": cfg.max_model_len, "permission": [perm]}
                for name in cfg.served_names]
        return {"object": "list", "data": data}

    def _tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        self._check(self.state, body)
        tok = self.state.tok
        if "messages" in body:
            ids = self.completions.chat_prompt(body)
        else:
            prompt = body.get("prompt", "")
            if not isinstance(prompt, str):
                raise BadRequest("prompt must be a string", "prompt")
            ids = tok.encode(prompt)
        strs = [tok.id_to_char(i) for i in ids] if body.get("return_token_strs") else None
        return {"count": len(ids), "max_model_len": self.state.cfg.max_model_len, "tokens": ids, "token_strs": strs}

    def _detokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        self._check(self.state, body)
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise BadRequest("tokens must be a list of integers", "tokens")
        return {"prompt": self.state.tok.decode(tokens)}

    async def _metrics(self, send: Send) -> None:
        st = self.state
        mem = st.started.memory
        info = {"_block_size_resolved": "True", "block_size": "16", "cache_dtype": st.cfg.profile.kv_cache_dtype,
                "calculate_kv_scales": "False", "enable_prefix_caching": str(st.cfg.enable_prefix_caching),
                "gpu_memory_utilization": str(st.cfg.gpu_memory_utilization), "hash_block_size": "None",
                "is_attention_free": "False", "kv_cache_dtype_skip_layers": "[]",
                "kv_cache_max_concurrency": str(st.started.kv_tokens / st.cfg.max_model_len),
                "kv_cache_memory_bytes": "None", "kv_cache_size_tokens": str(st.started.kv_tokens),
                "kv_offloading_backend": "native", "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False",
                "mamba_block_size": "None", "mamba_cache_dtype": "auto", "mamba_cache_mode": "none",
                "mamba_page_size_padded": "None", "mamba_ssm_cache_dtype": "auto", "num_cpu_blocks": "None",
                "num_gpu_blocks": str(mem.kv_tokens // 16), "num_gpu_blocks_override": "None",
                "prefix_caching_hash_algo": "sha256", "sliding_window": "None", "user_specified_block_size": "False",
                "user_specified_mamba_block_size": "False"}
        engines = [(str(e.index), e.metrics, e.gauges()) for e in st.all_engines]
        pacing = [Pacing(str(e.index), e.clock, e.busy_v, e.lag_v, e.lag_max_v) for e in st.all_engines]
        text = (render(engines, st.cfg.served_name, info, single_process=st.cfg.api_server_count == 1)
                + render_pacing(pacing)).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", METRICS_TYPE), (b"content-length", str(len(text)).encode()),
                                (b"vary", b"Origin")]})
        await send({"type": "http.response.body", "body": text})

    def _openapi(self) -> dict[str, Any]:
        paths: dict[str, Any] = {}
        for path, methods in ROUTES:
            for m in methods.split(","):
                paths.setdefault(path, {})[m.strip().lower()] = {"summary": path}
        return {"openapi": "3.1.0", "info": {"title": "FastAPI", "version": "0.1.0"}, "paths": paths}
