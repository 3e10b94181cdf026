"""The simulated vLLM server's HTTP API against the real vLLM 0.24 captures (one server, shared by the module)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import H200
from tests.simserver import SimServer, SimServers

ENDPOINTS = H200 / "endpoints"
SSE = H200 / "sse"


def fixture_http(path: Path) -> tuple[int, dict[str, str], str]:
    text = path.read_text(encoding="utf-8")
    head, _, body = text.partition("\n\n")
    lines = head.splitlines()
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
    return status, headers, body


def sse_events(body: str) -> list[str]:
    return [ev[len("data: "):] for ev in body.split("\n\n") if ev.startswith("data: ")]


def shape(obj: object) -> object:
    """The structure of a JSON value: keys in order, value types (null stays null), lists by their first item."""
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shape(obj[0])] if obj else []
    if obj is None:
        return None
    return type(obj).__name__


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    tmp = tmp_path_factory.mktemp("simapi")
    servers = SimServers(tmp)
    s = servers.start(startup_s=0.4, clock=20.0, env={"DISAGG_TUI_STATE_DIR": str(tmp / "state")})
    try:
        s.wait_ready()
        yield s
    finally:
        servers.close()


def test_health_version_load_ping_match_the_captures(server: SimServer) -> None:
    for name, path, method in (("GET_health.txt", "/health", "GET"), ("GET_ping.txt", "/ping", "GET"),
                               ("POST_ping.txt", "/ping", "POST"), ("GET_version.txt", "/version", "GET"),
                               ("GET_load.txt", "/load", "GET")):
        status, headers, body = fixture_http(ENDPOINTS / name)
        r = httpx.request(method, server.url + path)
        assert r.status_code == status, name
        assert r.text == body, name
        assert r.headers.get("content-type") == headers.get("content-type"), name


def test_models_has_the_real_shape(server: SimServer) -> None:
    _, _, body = fixture_http(ENDPOINTS / "GET_v1_models.txt")
    real = json.loads(body)
    got = httpx.get(server.url + "/v1/models").json()
    assert shape(got) == shape(real)
    entry = got["data"][0]
    assert (entry["id"], entry["root"], entry["max_model_len"]) == ("dummy-qwen3-8b", "/tmp/model", 16384)
    assert re.fullmatch(r"modelperm-[0-9a-f]{16}", entry["permission"][0]["id"])


def test_unknown_path_and_method(server: SimServer) -> None:
    _, _, body = fixture_http(ENDPOINTS / "GET_does-not-exist.txt")
    r = httpx.get(server.url + "/does-not-exist")
    assert (r.status_code, r.text) == (404, body)
    assert httpx.get(server.url + "/v1/completions").status_code == 405


def test_tokenize_detokenize_shapes_and_round_trip(server: SimServer) -> None:
    _, _, body = fixture_http(ENDPOINTS / "POST_tokenize.txt")
    r = httpx.post(server.url + "/tokenize", json={"model": "dummy-qwen3-8b", "prompt": "def fibonacci(n):"})
    assert shape(r.json()) == shape(json.loads(body))
    assert r.json()["count"] == len(r.json()["tokens"]) and r.json()["max_model_len"] == 16384
    ids = [317, 751, 68, 265, 595, 1342, 10, 80, 323, 70000, 151000, 55000]
    text = httpx.post(server.url + "/detokenize", json={"model": "dummy-qwen3-8b", "tokens": ids}).json()
    assert set(text) == {"prompt"}
    again = httpx.post(server.url + "/tokenize", json={"model": "dummy-qwen3-8b", "prompt": text["prompt"],
                                                       "add_special_tokens": False}).json()
    assert again["tokens"] == ids


def _stream(server: SimServer, prompt: object, **extra: object) -> tuple[httpx.Response, list[str]]:
    body = {"model": "dummy-qwen3-8b", "prompt": prompt, "max_tokens": 16, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True, **extra}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=30)
    return r, sse_events(r.text)


def test_streaming_completion_matches_the_capture(server: SimServer) -> None:
    _, headers, real_body = fixture_http(SSE / "completions_stream_text_prompt.txt")
    real = sse_events(real_body)
    r, events = _stream(server, "def fibonacci(n):")
    assert r.headers["content-type"] == headers["content-type"]
    assert events[-1] == real[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    real_chunks = [json.loads(e) for e in real[:-1]]
    assert shape(chunks[0]) == shape(real_chunks[0])
    assert shape(chunks[-1]) == shape(real_chunks[-1])  # the usage chunk
    assert shape(chunks[-2]) == shape(real_chunks[-2])  # the last content chunk
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == 16 == sum(len(c["choices"][0]["text"]) for c in chunks[:-1])
    assert usage["total_tokens"] == usage["prompt_tokens"] + 16
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("cmpl-")


def test_token_id_prompt_and_request_id_header(server: SimServer) -> None:
    ids = [317, 6176, 340, 65, 695, 1923, 929, 269, 100, 200, 300, 400]
    body = {"model": "dummy-qwen3-8b", "prompt": ids, "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}
    r = httpx.post(server.url + "/v1/completions", json=body, headers={"X-Request-Id": "abc-123"}, timeout=30)
    chunks = [json.loads(e) for e in sse_events(r.text)[:-1]]
    assert chunks[-1]["usage"] == {"prompt_tokens": 12, "total_tokens": 16, "completion_tokens": 4}
    assert chunks[0]["id"] == "cmpl-abc-123"


def test_text_prompt_counts_like_its_token_ids(server: SimServer) -> None:
    ids = list(range(1000, 1512))
    text = httpx.post(server.url + "/detokenize", json={"tokens": ids}).json()["prompt"]
    usage = httpx.post(server.url + "/v1/completions", json={"prompt": text, "max_tokens": 2}, timeout=30).json()
    assert usage["usage"]["prompt_tokens"] == 512


def test_non_streaming_completion_shape(server: SimServer) -> None:
    _, _, body = fixture_http(SSE / "completions_nonstream.txt")
    real = json.loads(body)
    got = httpx.post(server.url + "/v1/completions",
                     json={"model": "dummy-qwen3-8b", "prompt": "def fibonacci(n):", "max_tokens": 16},
                     timeout=30).json()
    assert shape(got) == shape(real)
    assert got["kv_transfer_params"] is None and got["usage"]["completion_tokens"] == 16
    assert len(got["choices"][0]["text"]) == 16
    assert re.fullmatch(r"vllm-0\.24\.0-[0-9a-f]{8}", got["system_fingerprint"])


def test_chat_stream_matches_the_capture(server: SimServer) -> None:
    _, _, body = fixture_http(SSE / "chat_completions_stream.txt")
    real = [json.loads(e) for e in sse_events(body)[:-1]]
    r = httpx.post(server.url + "/v1/chat/completions",
                   json={"model": "dummy-qwen3-8b", "messages": [{"role": "user", "content": "hello"}],
                         "max_tokens": 16, "stream": True, "stream_options": {"include_usage": True}}, timeout=30)
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    got = [json.loads(e) for e in events[:-1]]
    for k in (0, 1, -2, -1):
        assert shape(got[k]) == shape(real[k]), k
    assert got[-1]["usage"]["completion_tokens"] == 16


def test_errors_match_the_captures(server: SimServer) -> None:
    status, _, body = fixture_http(SSE / "error_unknown_model.txt")
    r = httpx.post(server.url + "/v1/completions", json={"model": "no-such-model", "prompt": "x"})
    assert (r.status_code, r.text) == (status, body)
    status, _, body = fixture_http(SSE / "error_max_tokens_too_large.txt")
    r = httpx.post(server.url + "/v1/completions",
                   json={"model": "dummy-qwen3-8b", "prompt": "def fibonacci(n):", "max_tokens": 100000})
    assert (r.status_code, r.text) == (status, body)
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "x" * 16380, "max_tokens": 10})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("This model's maximum context length is 16384 tokens.")


def _families(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"^# TYPE (vllm:\S+) (\S+)$", text, re.M)}


def _buckets(text: str, family: str) -> list[str]:
    pat = re.compile(rf'^{re.escape(family)}_bucket\{{engine="0",le="([^"]+)"', re.M)
    return pat.findall(text)


def test_metrics_families_and_buckets_match_the_capture(server: SimServer) -> None:
    _, headers, real = fixture_http(ENDPOINTS / "GET_metrics.txt")
    r = httpx.get(server.url + "/metrics")
    assert r.headers["content-type"] == headers["content-type"]
    assert _families(r.text) == _families(real)
    for fam in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                "vllm:e2e_request_latency_seconds", "vllm:iteration_tokens_total", "vllm:request_prompt_tokens",
                "vllm:request_params_n", "vllm:request_time_per_output_token_seconds"):
        assert _buckets(r.text, fam) == _buckets(real, fam), fam
    assert 'vllm:prompt_tokens_by_source_total{engine="0",model_name="dummy-qwen3-8b",source="external_kv_transfer"}' \
        in r.text
    info = re.search(r"^vllm:cache_config_info\{(.*)\} 1\.0$", r.text, re.M)
    real_info = re.search(r"^vllm:cache_config_info\{(.*)\} 1\.0$", real, re.M)
    assert info and real_info
    assert re.findall(r'(\w+)="', info.group(1)) == re.findall(r'(\w+)="', real_info.group(1))
    assert 'kv_cache_size_tokens="743' in info.group(1)


def test_metrics_count_what_was_served(server: SimServer) -> None:
    before = httpx.get(server.url + "/metrics").text
    httpx.post(server.url + "/v1/completions", json={"prompt": [1, 2, 3, 4, 5], "max_tokens": 7}, timeout=30)
    after = httpx.get(server.url + "/metrics").text

    def value(text: str, name: str) -> float:
        m = re.search(rf'^{re.escape(name)}\{{engine="0",model_name="dummy-qwen3-8b"\}} (\S+)$', text, re.M)
        assert m, name
        return float(m.group(1))

    assert value(after, "vllm:generation_tokens_total") - value(before, "vllm:generation_tokens_total") == 7
    assert value(after, "vllm:prompt_tokens_total") - value(before, "vllm:prompt_tokens_total") == 5
    assert value(after, "vllm:request_prompt_tokens_count") - value(before, "vllm:request_prompt_tokens_count") == 1


def test_periodic_stats_line(server: SimServer) -> None:
    httpx.post(server.url + "/v1/completions", json={"prompt": [3] * 300, "max_tokens": 50}, timeout=30)
    pattern = re.compile(r"^\(APIServer pid=\d+\) INFO [\d\- :]+ \[loggers\.py:273\] Engine 000: "
                         r"Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: [\d.]+ tokens/s, "
                         r"Running: \d+ reqs, Waiting: \d+ reqs, GPU KV cache usage: [\d.]+%, "
                         r"Prefix cache hit rate: [\d.]+%$", re.M)
    deadline = time.monotonic() + 5  # every 10 s of simulated time: 0.5 s at clock 20
    while not pattern.search(server.stdout()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pattern.search(server.stdout())


def test_client_disconnect_aborts_the_request(server: SimServer) -> None:
    def success(reason: str) -> float:
        text = httpx.get(server.url + "/metrics").text
        m = re.search(rf'^vllm:request_success_total\{{engine="0",finished_reason="{reason}",'
                      rf'model_name="dummy-qwen3-8b"\}} (\S+)$', text, re.M)
        assert m
        return float(m.group(1))

    before = success("abort")
    body = {"prompt": [9] * 100, "max_tokens": 10000, "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=30) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i > 6:
                break
    deadline = time.monotonic() + 5
    while success("abort") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert success("abort") == before + 1
    running = re.search(r'^vllm:num_requests_running\{engine="0",model_name="dummy-qwen3-8b"\} (\S+)$',
                        httpx.get(server.url + "/metrics").text, re.M)
    assert running and float(running.group(1)) == 0


def test_repeated_prompt_hits_the_prefix_cache(server: SimServer) -> None:
    def counter(name: str, **labels: str) -> float:
        want = {"engine": "0", "model_name": "dummy-qwen3-8b", **labels}
        inner = ",".join(f'{k}="{want[k]}"' for k in sorted(want))
        m = re.search(rf"^{re.escape(name)}\{{{re.escape(inner)}\}} (\S+)$", httpx.get(server.url + "/metrics").text,
                      re.M)
        assert m
        return float(m.group(1))

    prompt = list(range(40000, 40100))  # 6 full blocks and 4 tokens
    httpx.post(server.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2}, timeout=30)
    hits = counter("vllm:prefix_cache_hits_total")
    cached = counter("vllm:prompt_tokens_by_source_total", source="local_cache_hit")
    httpx.post(server.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2}, timeout=30)
    assert counter("vllm:prefix_cache_hits_total") - hits == 96
    assert counter("vllm:prompt_tokens_by_source_total", source="local_cache_hit") - cached == 96


def test_api_key_guards_v1_and_load_tracking(tmp_path: Path) -> None:
    servers = SimServers(tmp_path)
    try:
        s = servers.start("--api-key", "sekrit", "--enable-server-load-tracking", clock=0.5)
        s.wait_ready()
        assert httpx.get(s.url + "/v1/models").status_code == 401
        assert httpx.get(s.url + "/v1/models").json() == {"error": "Unauthorized"}
        auth = {"Authorization": "Bearer sekrit"}
        assert httpx.get(s.url + "/v1/models", headers=auth).status_code == 200
        assert httpx.get(s.url + "/health").status_code == 200 and httpx.get(s.url + "/metrics").status_code == 200
        with httpx.stream("POST", s.url + "/v1/completions", headers=auth, timeout=30,
                          json={"prompt": [1] * 10, "max_tokens": 500, "stream": True}) as r:
            lines = r.iter_lines()  # keep the iterator: dropping it closes the stream
            next(lines)
            assert httpx.get(s.url + "/load").json() == {"server_load": 1}
    finally:
        servers.close()
