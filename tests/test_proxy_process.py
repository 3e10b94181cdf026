"""The proxy as the supervisor runs it: a child process on a real socket, in front of real HTTP servers."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.proxy_procs import Child, fake_server, proxy_process, refused_url
from tui.cli.main import build_parser
from tui.core.proxy.main import main as proxy_main
from tui.core.proxy.upstream import decode_body, prefill_body

pytestmark = pytest.mark.timeout(60)

BODY = {"model": "fake/model", "prompt": "one two three four five", "max_tokens": 4, "stream": True,
        "stream_options": {"include_usage": True}}


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in reversed(started):
        child.stop()


def test_end_to_end_through_a_proxy_process(children: list[Child]) -> None:
    p = fake_server("prefill")
    d = fake_server("decode")
    children += [p, d]
    p_url, d_url = p.url(), d.url()
    proxy = proxy_process("--prefill", p_url, "--decode", d_url)
    children.append(proxy)
    url = proxy.url()
    headers = {"X-Request-Id": "e2e-1", "Authorization": "Bearer sk-never-logged"}
    with httpx.Client(timeout=10, trust_env=False) as client:
        assert client.get(url + "/health").status_code == 200
        via = client.post(url + "/v1/completions", json=BODY, headers=headers)
        kv_after = client.get(d_url + "/metrics").text
        # the same request done by hand, P then D, straight to the servers
        answer = client.post(p_url + "/v1/completions", json=prefill_body(BODY), headers=headers).json()
        direct = client.post(d_url + "/v1/completions", json=decode_body(BODY, answer["kv_transfer_params"]),
                             headers=headers)
        models = client.get(url + "/v1/models").json()
    assert via.status_code == 200
    assert via.headers["content-type"].startswith("text/event-stream")
    assert via.content == direct.content
    usage = json.loads(via.content.split(b"\n\n")[-3].removeprefix(b"data: "))["usage"]
    assert usage == {"prompt_tokens": 5, "total_tokens": 9, "completion_tokens": 4}
    assert 'source="external_kv_transfer"} 5.0' in kv_after
    assert models["data"][0]["id"] == "fake/model"
    assert proxy.stop() == 130
    access = [line for line in proxy.lines if '"POST /v1/completions HTTP/1.1"' in line]
    assert len(access) == 1
    assert re.search(rf'200 rid=e2e-1 P={re.escape(p_url)} 200 \S+ms D={re.escape(d_url)} 200 first-byte=\S+ms',
                     access[0]), access[0]
    assert "sk-never" not in proxy.output()


def test_cli_proxy_with_its_prefill_server_down(children: list[Child]) -> None:
    d = fake_server("decode")
    children.append(d)
    down = refused_url()
    proxy = proxy_process("--prefill", down, "--decode", d.url(), "--health-ttl", "0", via_cli=True)
    children.append(proxy)
    url = proxy.url()
    with httpx.Client(timeout=10, trust_env=False) as client:
        health = client.get(url + "/health")
        r = client.post(url + "/v1/completions", json=BODY)
    assert health.status_code == 503
    assert health.json()["message"] == f"prefill server {down} is down: connection refused"
    assert r.status_code == 502
    assert r.json()["error"]["message"] == f"prefill server {down} is unreachable: connection refused"


def test_a_taken_port_fails_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code = proxy_main(["--port", str(port), "--prefill", "http://127.0.0.1:1", "--decode", "http://127.0.0.1:2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1 and f"cannot listen on 127.0.0.1:{port}" in err[0]


def test_a_server_url_with_a_path_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code = proxy_main(["--prefill", "http://127.0.0.1:8100/v1", "--decode", "http://127.0.0.1:8200"])
    assert code == 2
    assert "--prefill" in capsys.readouterr().err


def test_disagg_tui_proxy_is_registered_with_the_global_options() -> None:
    from tui.cli import cmd_proxy

    args = build_parser().parse_args(["proxy", "--sim", "--prefill", "127.0.0.1:8100", "--decode",
                                      "127.0.0.1:8200", "--decode", "127.0.0.1:8201",
                                      "--balance", "least-outstanding"])
    assert args.handler is cmd_proxy.run
    assert args.sim is True
    assert (args.host, args.port, args.prefill, args.decode) == (
        "127.0.0.1", 8000, ["127.0.0.1:8100"], ["127.0.0.1:8200", "127.0.0.1:8201"])


def test_a_client_that_goes_away_aborts_the_decode_request(children: list[Child]) -> None:
    p = fake_server("prefill")
    d = fake_server("decode", "--token-delay", "0.05")
    children += [p, d]
    d_url = d.url()
    proxy = proxy_process("--prefill", p.url(), "--decode", d_url)
    children.append(proxy)
    url = proxy.url()
    body = {**BODY, "max_tokens": 400}  # 20 s of tokens: it can only end early by being aborted
    with httpx.Client(timeout=10, trust_env=False) as client:
        with client.stream("POST", url + "/v1/completions", json=body) as r:
            assert next(r.iter_raw()).startswith(b"data: ")
        # the response is closed mid-stream: the proxy must drop its decode request, and D sees the abort
        deadline = time.monotonic() + 10
        while 'finished_reason="abort",model_name="fake/model"} 1.0' not in client.get(d_url + "/metrics").text:
            assert time.monotonic() < deadline, client.get(d_url + "/metrics").text
            time.sleep(0.05)
        assert client.get(url + "/metrics").text.count("disagg_proxy_client_disconnects_total 1") == 1
