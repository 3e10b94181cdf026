"""Safe by default, checked: loopback binds unless --host says otherwise (and a warning when it does), private
folders, a proxy that calls nothing but its own servers, and vLLM's API key passed through but never written."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.hardening.badserver import MODEL as STUB_MODEL
from tests.hardening.badserver import BadServer
from tests.hardening.cli import no_traceback, run_cli
from tests.helpers import layout_port_args
from tests.proxy_procs import proxy_process
from tui.core import paths

MODEL = "dummy-qwen3-8b"
SECRET = "sk-h13-Very-Secret-4f2a9c"


def test_every_server_and_the_proxy_bind_loopback_by_default() -> None:
    res = run_cli(["plan", "--sim", "--model", MODEL, "--topology", "2p2d", "--sim-gpus", "4", "--json",
                   "--no-preflight"])
    assert res.code == 0, res.err
    plan = json.loads(res.out)["plan"]
    assert len(plan["servers"]) == 4
    for s in plan["servers"]:
        argv = s["argv"]
        assert argv[argv.index("--host") + 1] == "127.0.0.1" and s["host"] == "127.0.0.1"
    assert plan["proxy"]["host"] == "127.0.0.1"
    assert "warning: --host" not in res.err


@pytest.mark.parametrize(("host", "warns"), [("0.0.0.0", True), ("192.0.2.7", True), ("localhost", False),
                                             ("::1", False), ("127.0.0.2", False)])
def test_a_non_loopback_host_warns(host: str, warns: bool) -> None:
    res = run_cli(["plan", "--sim", "--model", MODEL, "--topology", "1p1d", "--host", host, "--no-preflight"])
    assert res.code == 0, res.err
    assert ("other machines" in res.err) is warns, res.err


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


@pytest.mark.timeout(60)
def test_the_proxy_calls_only_its_own_servers() -> None:
    """No request can make the proxy call another host: not an absolute-form target, not a Host header, not a
    path that looks like a URL, not a body naming one."""
    body = json.dumps({"model": STUB_MODEL, "prompt": "hi", "max_tokens": 2, "stream": True,
                       "kv_transfer_params": {"remote_host": "127.0.0.1"}}).encode()
    with BadServer("ok") as prefill, BadServer("ok") as decode, BadServer("ok") as other:
        px = proxy_process("--prefill", prefill.url, "--decode", decode.url, "--no-access-log")
        try:
            port = int(px.url().rsplit(":", 1)[1])
            other_hp = f"127.0.0.1:{other.port}"
            for target, host in ((f"http://{other_hp}/v1/completions", other_hp),
                                 ("/v1/completions", other_hp),
                                 (f"//{other_hp}/v1/completions", "x"),
                                 (f"/v1/completions?url=http://{other_hp}/", "x")):
                head = (f"POST {target} HTTP/1.1\r\nHost: {host}\r\ncontent-type: application/json\r\n"
                        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
                _raw(port, head + body)
            assert other.requests == 0
            assert prefill.requests == 3  # each completion went to the proxy's own prefill ('//host/...' is a 404)
        finally:
            px.stop()


@pytest.mark.timeout(120)
def test_api_key_is_passed_through_and_never_written(isolated_dirs: Path) -> None:
    """``--api-key``: the servers refuse requests without it, ``bench`` sends it, and it appears in no plan shown,
    no state file, no server log and no result."""
    shown = run_cli(["plan", "--sim", "--model", MODEL, "--topology", "1p1d", "--api-key", SECRET, "--json"])
    assert shown.code == 0 and SECRET not in shown.out + shown.err
    up = run_cli(["up", "--sim", "--sim-startup", "0.3", "--model", MODEL, "--topology", "1p1d",
                  *layout_port_args(), "--api-key", SECRET])
    assert up.code == 0, up.err[-2000:]
    try:
        from tui.core.launch.state import StateStore

        endpoint = StateStore().active().endpoint
        server = next(p.url for p in StateStore().active().processes if p.role == "decode")
        body = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2}
        assert httpx.post(server + "/v1/completions", json=body, timeout=10, trust_env=False).status_code == 401
        assert httpx.post(endpoint + "/v1/completions", json=body, timeout=10, trust_env=False).status_code == 401
        without = run_cli(["bench", "--num-prompts", "2", "--input-len", "8", "--output-len", "4", "-q"])
        assert without.code != 0 and no_traceback(without)
        ok = run_cli(["bench", "--num-prompts", "3", "--input-len", "8", "--output-len", "4", "--warmup", "1", "-q",
                      "--api-key", SECRET, "--sim-clock", "10"])
        assert ok.code == 0, ok.err
        status = run_cli(["status", "--json"])
        assert SECRET not in status.out + status.err
    finally:
        assert run_cli(["down"]).code == 0
    time.sleep(0.2)
    leaks = [p for p in isolated_dirs.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaks == []
    for folder in (paths.state_dir() / "layouts", paths.runs_dir()):
        assert folder.stat().st_mode & 0o777 == 0o700, folder


def test_an_ipv6_host_gives_bracketed_urls() -> None:
    """Found by the corpus: ``--host ::1`` planned the endpoint ``http://::1:8000``, a URL nothing can parse."""
    res = run_cli(["plan", "--sim", "--model", MODEL, "--topology", "1p1d", "--host", "::1", "--json",
                   "--no-preflight"])
    plan = json.loads(res.out)["plan"]
    assert plan["endpoint"] == f"http://[::1]:{plan['proxy']['port']}"
    assert all(s["url"].startswith("http://[::1]:") for s in plan["servers"])
    assert httpx.URL(plan["endpoint"]).host == "::1"
