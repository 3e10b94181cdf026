"""The proxy served by a real uvicorn (httptools), with fake P and D servers behind httpx.MockTransport."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from typing import Any

import httpx
import pytest

from tests.proxy_fakes import D1, D2, KV_FROM_P, P1, P2, SSE_CHUNKS, FakeUpstreams, proxy_for, serving, settled
from tui.core.proxy.app import ACCESS_LOGGER, ProxyApp
from tui.core.proxy.upstream import PREFILL_KV_REQUEST

pytestmark = pytest.mark.timeout(30)

STREAM_BODY: dict[str, Any] = {
    "model": "m", "prompt": "The capital of France is", "max_tokens": 5, "min_tokens": 2, "temperature": 0.0,
    "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True,
}


async def test_streaming_completion_rewrites_p_and_d_and_relays_bytes_exactly() -> None:
    fakes = FakeUpstreams()
    async with proxy_for(fakes) as (_app, client):
        r = await client.post("/v1/completions", json=STREAM_BODY, headers={"Authorization": "Bearer sk-test"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.content == b"".join(SSE_CHUNKS)
    p, d = fakes.completions("prefill"), fakes.completions("decode")
    assert len(p) == 1 and len(d) == 1
    assert p[0].body == {
        "model": "m", "prompt": "The capital of France is", "max_tokens": 1, "temperature": 0.0, "stream": False,
        "ignore_eos": True, "kv_transfer_params": PREFILL_KV_REQUEST,
    }
    assert d[0].body == {**STREAM_BODY, "kv_transfer_params": {**KV_FROM_P, "remote_host": P1}}
    assert p[0].path == d[0].path == "/v1/completions"
    rid = p[0].headers["x-request-id"]
    assert len(rid) == 36 and rid.count("-") == 4  # a uuid4
    assert d[0].headers["x-request-id"] == rid == r.headers["x-request-id"]
    assert p[0].headers["authorization"] == d[0].headers["authorization"] == "Bearer sk-test"


async def test_chat_completion_caps_max_completion_tokens_for_prefill() -> None:
    fakes = FakeUpstreams()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 64,
            "min_completion_tokens": 8, "stream": False}
    async with proxy_for(fakes) as (_app, client):
        r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"id": "cmpl-d", "object": "text_completion", "from": D1}
    (p,), (d,) = fakes.completions("prefill"), fakes.completions("decode")
    assert p.path == d.path == "/v1/chat/completions"
    assert p.body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 1,
                      "max_tokens": 1, "stream": False, "kv_transfer_params": PREFILL_KV_REQUEST}
    assert d.body == {**body, "kv_transfer_params": {**KV_FROM_P, "remote_host": P1}}
    assert "authorization" not in p.headers and "authorization" not in d.headers


async def test_client_request_id_goes_to_both_servers_and_back() -> None:
    fakes = FakeUpstreams()
    async with proxy_for(fakes) as (_app, client):
        r = await client.post("/v1/completions", json=STREAM_BODY, headers={"X-Request-Id": "bench-42"})
    assert r.headers["x-request-id"] == "bench-42"
    assert [s.headers["x-request-id"] for s in fakes.completions()] == ["bench-42", "bench-42"]


async def test_kv_transfer_params_reach_decode_verbatim() -> None:
    odd = {"remote_block_ids": [[2**40, 0], []], "remote_engine_id": "é\u2603", "ratio": 0.1 + 0.2,
           "remote_port": 5601, "do_remote_prefill": True, "list": [None, False, {"k": "v"}]}

    async def prefill(_req: httpx.Request, _body: Any) -> httpx.Response:
        return httpx.Response(200, json={"choices": [], "kv_transfer_params": odd})

    fakes = FakeUpstreams(answers={P1: prefill})
    async with proxy_for(fakes) as (_app, client):
        await client.post("/v1/completions", json=STREAM_BODY)
    (d,) = fakes.completions("decode")
    assert d.body["kv_transfer_params"] == odd
    assert json.dumps(d.body["kv_transfer_params"]) == json.dumps(odd)


async def test_prefill_without_kv_params_sends_decode_the_client_body(caplog: pytest.LogCaptureFixture) -> None:
    async def prefill(_req: httpx.Request, _body: Any) -> httpx.Response:
        return httpx.Response(200, json={"choices": [], "kv_transfer_params": None})

    fakes = FakeUpstreams(answers={P1: prefill})
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    async with proxy_for(fakes) as (app, client):
        r = await client.post("/v1/completions", json=STREAM_BODY)
    assert r.status_code == 200
    (d,) = fakes.completions("decode")
    assert d.body == STREAM_BODY
    assert app.metrics.kv_params_missing == 1
    assert "kv=none" in caplog.text


async def test_stream_is_relayed_before_decode_finishes() -> None:
    fakes = FakeUpstreams()
    gate = asyncio.Event()

    async def decode(_req: httpx.Request, _body: Any) -> httpx.Response:
        return fakes.stream_response([b"data: first\n\n", gate, b"data: second\n\n", b"data: [DONE]\n\n"])

    fakes.answers[D1] = decode
    async with proxy_for(fakes) as (_app, client), client.stream("POST", "/v1/completions", json=STREAM_BODY) as r:
        chunks = r.aiter_raw()
        first = await asyncio.wait_for(chunks.__anext__(), 5)  # would time out if the proxy buffered
        assert first == b"data: first\n\n"
        assert not fakes.streams[0].finished
        gate.set()
        rest = b"".join([c async for c in chunks])
    assert rest == b"data: second\n\ndata: [DONE]\n\n"
    assert fakes.streams[0].finished


async def test_prefill_error_is_returned_as_is_and_decode_is_not_called() -> None:
    error = {"error": {"message": "This model's maximum context length is 4096 tokens.", "type": "BadRequestError",
                       "param": None, "code": 400}}

    async def prefill(_req: httpx.Request, _body: Any) -> httpx.Response:
        return httpx.Response(400, json=error)

    fakes = FakeUpstreams(answers={P1: prefill})
    async with proxy_for(fakes) as (app, client):
        r = await client.post("/v1/completions", json=STREAM_BODY)
    assert r.status_code == 400
    assert r.json() == error
    assert fakes.completions("decode") == []
    assert app.metrics.upstream_errors[("prefill", P1, "status")] == 1


async def test_decode_error_is_returned_as_is() -> None:
    body = b'{"error":{"message":"The model `x` does not exist.","type":"NotFoundError","param":"model","code":404}}'

    async def decode(_req: httpx.Request, _body: Any) -> httpx.Response:
        return httpx.Response(404, content=body, headers={"content-type": "application/json"})

    fakes = FakeUpstreams(answers={D1: decode})
    async with proxy_for(fakes) as (_app, client):
        r = await client.post("/v1/completions", json=STREAM_BODY)
    assert r.status_code == 404
    assert r.content == body
    assert r.headers["content-type"] == "application/json"


@pytest.mark.parametrize(("down", "role"), [(P1, "prefill"), (D1, "decode")])
async def test_unreachable_server_gives_502_naming_it(down: str, role: str) -> None:
    fakes = FakeUpstreams(down={down})
    async with proxy_for(fakes) as (app, client):
        r = await client.post("/v1/completions", json=STREAM_BODY)
    assert r.status_code == 502
    err = r.json()["error"]
    assert err["code"] == 502 and err["type"] == "BadGatewayError" and err["param"] is None
    assert err["message"] == f"{role} server {down} is unreachable: connection refused"
    if role == "prefill":
        assert fakes.completions("decode") == []
    assert app.metrics.upstream_errors[(role, down, "unreachable")] == 1
    assert all(s.outstanding == 0 for s in app.prefill.servers + app.decode.servers)


async def test_prefill_answer_that_is_not_json_gives_502() -> None:
    async def prefill(_req: httpx.Request, _body: Any) -> httpx.Response:
        return httpx.Response(200, content=b"<html>oops</html>")

    fakes = FakeUpstreams(answers={P1: prefill})
    async with proxy_for(fakes) as (_app, client):
        r = await client.post("/v1/completions", json=STREAM_BODY)
    assert r.status_code == 502
    assert P1 in r.json()["error"]["message"]
    assert fakes.completions("decode") == []


async def test_decode_stream_breaking_midway_ends_with_an_error_event() -> None:
    fakes = FakeUpstreams()

    async def decode(req: httpx.Request, _body: Any) -> httpx.Response:
        return fakes.stream_response([b"data: one\n\n", httpx.ReadError("connection reset", request=req)])

    fakes.answers[D1] = decode
    async with proxy_for(fakes) as (app, client):
        r = await client.post("/v1/completions", json=STREAM_BODY)
    assert r.status_code == 200
    head, error_event, done = r.content.split(b"\n\n")[:3]
    assert head == b"data: one"
    assert json.loads(error_event.removeprefix(b"data: "))["error"]["code"] == 502
    assert done == b"data: [DONE]"
    assert app.metrics.upstream_errors[("decode", D1, "broken_stream")] == 1


async def test_health_is_ok_only_when_every_server_is() -> None:
    fakes = FakeUpstreams(prefill=(P1, P2), decode=(D1,))
    async with proxy_for(fakes, health_ttl_s=0.0) as (_app, client):
        ok = await client.get("/health")
        fakes.down.add(D1)
        one_down = await client.get("/health")
        fakes.down.clear()
        fakes.health[P2] = 503
        unhealthy = await client.get("/health")
    assert ok.status_code == 200 and ok.json()["status"] == "ok"
    assert [s["url"] for s in ok.json()["servers"]] == [P1, P2, D1]
    assert one_down.status_code == 503
    assert one_down.json()["message"] == f"decode server {D1} is down: connection refused"
    assert unhealthy.status_code == 503
    assert unhealthy.json()["message"] == f"prefill server {P2} is down: /health answered 503"
    assert [s["ok"] for s in unhealthy.json()["servers"]] == [True, False, True]


async def test_health_result_is_reused_for_its_ttl() -> None:
    fakes = FakeUpstreams()
    async with proxy_for(fakes, health_ttl_s=60.0) as (_app, client):
        answers = await asyncio.gather(*(client.get("/health") for _ in range(5)))
        fakes.down.add(D1)
        cached = await client.get("/health")
    assert [a.status_code for a in answers] == [200] * 5
    assert cached.status_code == 200  # within the TTL: the earlier result
    assert len([s for s in fakes.seen if s.path == "/health"]) == 2  # one check of two servers


@pytest.mark.parametrize("balance", ["round-robin", "least-outstanding"])
async def test_two_prefill_and_two_decode_servers_take_turns(balance: str) -> None:
    fakes = FakeUpstreams(prefill=(P1, P2), decode=(D1, D2))
    async with proxy_for(fakes, balance=balance) as (app, client):
        for _ in range(4):
            assert (await client.post("/v1/completions", json=STREAM_BODY)).status_code == 200
    assert [s.server for s in fakes.completions("prefill")] == [P1, P2, P1, P2]
    assert [s.server for s in fakes.completions("decode")] == [D1, D2, D1, D2]
    # each decode request carried the KV parameters of the prefill just before it
    assert [s.body["kv_transfer_params"]["remote_host"] for s in fakes.completions("decode")] == [P1, P2, P1, P2]
    assert [s.picked for s in app.decode.servers] == [2, 2]


@pytest.mark.parametrize(("balance", "third_goes_to"), [("least-outstanding", D2), ("round-robin", D1)])
async def test_least_outstanding_avoids_a_busy_decode_server(balance: str, third_goes_to: str) -> None:
    fakes = FakeUpstreams(prefill=(P1,), decode=(D1, D2))
    gate = asyncio.Event()
    calls = 0

    async def d1(_req: httpx.Request, _body: Any) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:  # the first request stays busy on D1 until the gate opens
            return fakes.stream_response([b"data: a\n\n", gate, b"data: [DONE]\n\n"])
        return httpx.Response(200, json={"from": D1})

    fakes.answers[D1] = d1
    async with proxy_for(fakes, balance=balance) as (app, client), \
            client.stream("POST", "/v1/completions", json=STREAM_BODY) as held:
        chunks = held.aiter_raw()
        await chunks.__anext__()
        assert [s.outstanding for s in app.decode.servers] == [1, 0]
        for _ in range(2):
            assert (await client.post("/v1/completions", json={**STREAM_BODY, "stream": False})).is_success
        gate.set()
        assert b"".join([c async for c in chunks]) == b"data: [DONE]\n\n"
    assert [s.server for s in fakes.completions("decode")] == [D1, D2, third_goes_to]


async def test_client_disconnect_cancels_the_decode_stream() -> None:
    fakes = FakeUpstreams()
    never = asyncio.Event()

    async def decode(_req: httpx.Request, _body: Any) -> httpx.Response:
        return fakes.stream_response([b"data: first\n\n", never, b"data: [DONE]\n\n"])

    fakes.answers[D1] = decode
    async with proxy_for(fakes) as (app, client):
        async with client.stream("POST", "/v1/completions", json=STREAM_BODY) as r:
            assert await r.aiter_raw().__anext__() == b"data: first\n\n"
        # leaving the block closes the client's connection in the middle of the stream
        stream = fakes.streams[0]
        await asyncio.wait_for(stream.closed.wait(), 5)
        assert stream.cancelled and not stream.finished
        await settled(app)
        assert app.metrics.client_disconnects == 1
        assert app.decode.servers[0].outstanding == 0
        assert app.metrics.requests[("/v1/completions", 499)] == 1


async def test_client_disconnect_during_prefill_cancels_it() -> None:
    fakes = FakeUpstreams()
    cancelled = asyncio.Event()

    async def stuck_prefill(_req: httpx.Request, _body: Any) -> httpx.Response:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    fakes.answers[P1] = stuck_prefill
    async with proxy_for(fakes) as (app, client):
        host, port = str(client.base_url.host), client.base_url.port
        assert port is not None
        reader, writer = await asyncio.open_connection(host, port)
        body = json.dumps(STREAM_BODY).encode()
        writer.write(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        await asyncio.wait_for(fakes.received.setdefault(P1, asyncio.Event()).wait(), 5)
        writer.close()
        await writer.wait_closed()
        await asyncio.wait_for(cancelled.wait(), 5)
        assert fakes.completions("decode") == []
        await settled(app)
        assert app.prefill.servers[0].outstanding == 0
        assert app.metrics.client_disconnects == 1
        del reader


async def test_models_and_version_go_to_the_first_decode_server_tokenize_to_the_first_prefill() -> None:
    fakes = FakeUpstreams(prefill=(P1, P2), decode=(D1, D2))
    async with proxy_for(fakes) as (_app, client):
        models = await client.get("/v1/models", headers={"Authorization": "Bearer k"})
        version = await client.get("/version")
        tok = await client.post("/tokenize", json={"model": "m", "prompt": "hi", "add_special_tokens": False})
        detok = await client.post("/detokenize", json={"model": "m", "tokens": [1, 2]})
    assert models.json() == {"server": D1, "path": "/v1/models", "body": None}
    assert version.json()["server"] == D1
    assert tok.json() == {"server": P1, "path": "/tokenize",
                          "body": {"model": "m", "prompt": "hi", "add_special_tokens": False}}
    assert detok.json()["server"] == P1
    assert fakes.requests()[0].headers["authorization"] == "Bearer k"


async def test_metrics_are_the_proxys_own_and_count_requests_and_errors() -> None:
    fakes = FakeUpstreams()
    async with proxy_for(fakes) as (_app, client):
        await client.post("/v1/completions", json=STREAM_BODY)
        fakes.down.add(P1)
        await client.post("/v1/completions", json=STREAM_BODY)
        r = await client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    lines = r.text.splitlines()
    assert 'disagg_proxy_requests_total{route="/v1/completions",code="200"} 1' in lines
    assert 'disagg_proxy_requests_total{route="/v1/completions",code="502"} 1' in lines
    assert f'disagg_proxy_upstream_errors_total{{role="prefill",server="{P1}",reason="unreachable"}} 1' in lines
    assert f'disagg_proxy_prefill_seconds_count{{server="{P1}"}} 1' in lines
    assert f'disagg_proxy_decode_first_byte_seconds_count{{server="{D1}"}} 1' in lines
    assert "disagg_proxy_internal_seconds_count 1" in lines
    helps = [line for line in lines if line.startswith("# HELP")]
    assert helps and all("disagg-tui proxy (not vLLM)" in h for h in helps)
    assert not any(line.startswith("vllm:") for line in lines)


async def test_access_line_has_both_legs_and_never_the_authorization(caplog: pytest.LogCaptureFixture) -> None:
    fakes = FakeUpstreams()
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    async with proxy_for(fakes) as (_app, client):
        await client.post("/v1/completions", json=STREAM_BODY,
                          headers={"Authorization": "Bearer sk-secret-123", "X-Request-Id": "r1"})
    (line,) = [r.getMessage() for r in caplog.records if r.name == ACCESS_LOGGER]
    assert '"POST /v1/completions HTTP/1.1" 200 rid=r1' in line
    assert f" P={P1} 200 " in line and f" D={D1} 200 first-byte=" in line and " total=" in line
    assert "sk-secret" not in caplog.text


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/completions", 405), ("POST", "/health", 405), ("GET", "/nope", 404), ("DELETE", "/version", 405),
])
async def test_unknown_routes_and_methods(method: str, path: str, status: int) -> None:
    fakes = FakeUpstreams()
    async with proxy_for(fakes) as (_app, client):
        r = await client.request(method, path)
    assert r.status_code == status
    assert "detail" in r.json()
    assert fakes.requests() == []


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]"])
async def test_a_body_that_is_not_a_json_object_is_refused(raw: bytes) -> None:
    fakes = FakeUpstreams()
    async with proxy_for(fakes) as (_app, client):
        r = await client.post("/v1/completions", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "BadRequestError"
    assert fakes.requests() == []


async def test_accepted_connections_have_tcp_nodelay() -> None:
    # Without it, an answer written in two parts (headers, then body) waits for the client's delayed ACK: ~40 ms
    # on every request of a kept-alive connection (asyncio sets it only when the listener's proto is TCP)
    fakes = FakeUpstreams()
    app = ProxyApp(fakes.settings(), transport=fakes.transport())
    async with serving(app) as (url, server), httpx.AsyncClient(base_url=url, trust_env=False) as client:
        assert (await client.get("/metrics")).status_code == 200
        connections = list(server.server_state.connections)
        assert connections
        for protocol in connections:
            sock = protocol.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


async def test_startup_opens_a_connection_to_every_server_in_the_background() -> None:
    fakes = FakeUpstreams(prefill=(P1, P2), decode=(D1,))
    async with proxy_for(fakes):
        for url in (P1, P2, D1):
            await asyncio.wait_for(fakes.received.setdefault(url, asyncio.Event()).wait(), 5)
    assert sorted(s.server for s in fakes.seen if s.path == "/health") == [P1, P2, D1]


async def test_other_requests_get_a_line_but_probes_that_succeed_do_not(caplog: pytest.LogCaptureFixture) -> None:
    fakes = FakeUpstreams()
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    async with proxy_for(fakes, health_ttl_s=0.0) as (_app, client):
        await client.get("/health")
        await client.get("/metrics")
        await client.get("/v1/models")
        fakes.down.add(D1)
        await client.get("/health")
    lines = [r.getMessage() for r in caplog.records if r.name == ACCESS_LOGGER]
    assert len(lines) == 2
    assert f'"GET /v1/models HTTP/1.1" 200 D={D1} 200 total=' in lines[0]
    assert f'"GET /health HTTP/1.1" 503 (decode server {D1} is down: connection refused) total=' in lines[1]
