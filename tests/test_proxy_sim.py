"""End to end: the proxy process in front of two simulated vLLM servers, a NixlConnector producer and consumer."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.proxy_procs import Child, proxy_process
from tests.simserver import SimServer, SimServers
from tui.sim.pd import external_tokens

pytestmark = pytest.mark.timeout(90)

PROMPT = list(range(1000, 1100))  # 100 token ids
MAX_TOKENS = 12


def distinct_ports(n: int) -> list[int]:
    """``n`` free ports, all different: held open together while the kernel hands them out."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def _nixl(role: str) -> str:
    return json.dumps({"kv_connector": "NixlConnector", "kv_role": role})


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[tuple[SimServer, SimServer, str]]:
    servers = SimServers(tmp_path)
    proxy: Child | None = None
    try:
        state = str(tmp_path / "state")
        p_port, d_port, p_side, d_side = distinct_ports(4)
        p = servers.start("--kv-transfer-config", _nixl("kv_producer"), startup_s=0.4, clock=20.0, port=p_port,
                          env={"CUDA_VISIBLE_DEVICES": "0", "VLLM_NIXL_SIDE_CHANNEL_PORT": str(p_side),
                               "DISAGG_TUI_STATE_DIR": state})
        d = servers.start("--kv-transfer-config", _nixl("kv_consumer"), startup_s=0.4, clock=20.0, port=d_port,
                          env={"CUDA_VISIBLE_DEVICES": "1", "VLLM_NIXL_SIDE_CHANNEL_PORT": str(d_side),
                               "DISAGG_TUI_STATE_DIR": state})
        p.wait_ready(30)
        d.wait_ready(30)
        proxy = proxy_process("--prefill", p.url, "--decode", d.url)
        yield p, d, proxy.url()
    finally:
        if proxy is not None:
            proxy.stop()
        servers.close()


def _metric(text: str, source: str) -> float:
    m = re.search(rf'^vllm:prompt_tokens_by_source_total\{{[^}}]*source="{source}"[^}}]*\}} (\S+)$', text, re.M)
    assert m, source
    return float(m.group(1))


def test_streaming_completion_through_the_proxy_uses_the_prefill_servers_kv(
        layout: tuple[SimServer, SimServer, str]) -> None:
    p, d, url = layout
    with httpx.Client(timeout=60, trust_env=False) as client:
        assert client.get(url + "/health").status_code == 200
        model = client.get(url + "/v1/models").json()["data"][0]["id"]
        before_d = client.get(d.url + "/metrics").text
        r = client.post(url + "/v1/completions", headers={"X-Request-Id": "sim-e2e-1"},
                        json={"model": model, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "ignore_eos": True,
                              "stream": True, "stream_options": {"include_usage": True}})
        after_p = client.get(p.url + "/metrics").text
        after_d = client.get(d.url + "/metrics").text
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [e.removeprefix("data: ") for e in r.text.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage = chunks[-1]["usage"]
    assert usage["prompt_tokens"] == len(PROMPT) and usage["completion_tokens"] == MAX_TOKENS
    assert sum(1 for c in chunks if c["choices"]) >= 1
    assert all(c["id"] == chunks[0]["id"] for c in chunks)
    # the decode server loaded the prompt's KV from the prefill server instead of computing it
    loaded = _metric(after_d, "external_kv_transfer") - _metric(before_d, "external_kv_transfer")
    assert loaded == external_tokens(len(PROMPT), len(PROMPT)) > 0
    assert _metric(after_p, "local_compute") >= len(PROMPT)


def test_tokenize_goes_through_to_the_prefill_server(layout: tuple[SimServer, SimServer, str]) -> None:
    _p, _d, url = layout
    with httpx.Client(timeout=30, trust_env=False) as client:
        model = client.get(url + "/v1/models").json()["data"][0]["id"]
        tok = client.post(url + "/tokenize",
                          json={"model": model, "prompt": "hello world", "add_special_tokens": False})
        assert tok.status_code == 200
        detok = client.post(url + "/detokenize", json={"model": model, "tokens": tok.json()["tokens"]})
    assert detok.status_code == 200
    assert detok.json()["prompt"] == "hello world"
