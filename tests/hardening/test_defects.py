"""The four defects of issue 13, each with the test that failed before its fix."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.hardening.cli import no_traceback, run_cli
from tests.helpers import layout_port_args

MODEL = "qwen3.6-27b-nvfp4"


def _time_wait_on(port: int) -> bool:
    """A connection in TIME-WAIT whose local port is ``port`` (what a listener that closed first leaves)."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if int(cols[1].rsplit(":", 1)[1], 16) == port and cols[3] == "06":
                return True
    return False


def _leave_time_wait(port: int) -> None:
    """A connection whose listening side (local port ``port``) closes first: that side stays in TIME-WAIT."""
    import socket

    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    cli = socket.create_connection(("127.0.0.1", port), timeout=5)
    conn, _ = srv.accept()
    conn.close()  # the listener's side first
    cli.recv(1)  # its FIN arrives
    cli.close()
    srv.close()
    deadline = time.monotonic() + 2
    while not _time_wait_on(port) and time.monotonic() < deadline:
        time.sleep(0.05)


def _stream_one(endpoint: str) -> None:
    body = {"model": "nvidia/Qwen3.6-27B-NVFP4", "prompt": list(range(100, 164)), "max_tokens": 4,
            "stream": True, "ignore_eos": True}
    with httpx.stream("POST", endpoint + "/v1/completions", json=body, timeout=30, trust_env=False) as r:
        assert r.status_code == 200
        for _ in r.iter_bytes():
            pass


def test_side_channel_time_wait_neither_refuses_preflight_nor_stalls_the_next_start() -> None:
    """Defect 1: a 1P1D layout's KV reads leave side-channel connections in TIME-WAIT (the prefill side answers and
    closes first). Before the fix the simulated side channel bound without SO_REUSEADDR (ZMQ sets it): the next
    layout's preflight refused the port for ~60 s, and a simulated start on it stalled."""
    ports = layout_port_args()
    side = int(ports[5])
    up = ["up", "--sim", "--sim-startup", "0.3", "--model", MODEL, "--topology", "1p1d", *ports]
    first = run_cli(up)
    assert first.code == 0, first.err[-2000:]
    try:
        for _ in range(3):
            _stream_one(f"http://127.0.0.1:{ports[1]}")
    finally:
        assert run_cli(["down"]).code == 0
    deadline = time.monotonic() + 3
    while not _time_wait_on(side) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not _time_wait_on(side):
        # which side closes a KV read's connection first depends on timing (on a loaded machine the stop can come
        # while one is open): leave one in TIME-WAIT on the port as the prefill side does when it closes first
        _leave_time_wait(side)
    assert _time_wait_on(side), "the test needs a TIME-WAIT connection on the side-channel port"
    plan = run_cli(["plan", "--sim", "--model", MODEL, "--topology", "1p1d", *ports])
    assert plan.code == 0, plan.err
    assert "in use" not in plan.out + plan.err
    second = run_cli([*up, "--stall-timeout", "20", "--ready-timeout", "40"])
    try:
        assert second.code == 0, second.err[-2000:]
        assert "nixl-side-channel-port-clash" not in second.err
    finally:
        run_cli(["down"])


def test_preflight_names_a_port_held_only_by_time_wait() -> None:
    """A port whose only sockets are TIME-WAIT connections of a listener without SO_REUSEADDR really cannot be bound
    by vLLM for ~60 s: preflight keeps refusing it, and says why (no listener, wait a minute)."""
    from tests.helpers import free_port
    from tui.core.plan.preflight import check_ports, only_time_wait

    port = free_port()
    srv = socket.socket()
    srv.bind(("127.0.0.1", port))
    srv.listen()
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    conn.close()  # the server side closes first: its end goes to TIME-WAIT
    time.sleep(0.05)
    client.close()
    srv.close()
    time.sleep(0.05)
    assert only_time_wait(port)

    from tui.core.models import Catalog
    from tui.core.plan.hostfacts import sim_facts
    from tui.core.plan.planner import PlanOptions, plan

    layout = plan(Catalog.load().model(MODEL), "tp1", sim_facts("b200", 2),
                  PlanOptions(port=port, server_base_port=free_port(), side_channel_base=free_port()))
    check = next(c for c in check_ports(layout) if c.name == "ports")
    assert check.status == "fail" and "TIME-WAIT" in check.reason and str(port) in check.reason


def test_sim_gpus_has_an_upper_bound() -> None:
    """Defect 2: ``--sim-gpus 100000`` ran for over 30 s without an answer; now one line, exit 2, at once."""
    start = time.monotonic()
    res = run_cli(["--sim-gpus", "100000", "plan", "--model", MODEL, "--topology", "tp1"])
    assert res.code == 2
    assert "--sim-gpus" in res.err and "72" in res.err and len(res.err_lines) == 1
    assert time.monotonic() - start < 5
    assert run_cli(["plan", "--sim-gpus", "0", "--model", MODEL, "--topology", "tp1"]).code == 2


def test_sim_gpus_bound_holds_in_the_core_too() -> None:
    """The console reaches the simulated host without argparse: SimHost refuses the same count."""
    from tui.core.errors import InputError
    from tui.core.host.base import HostOptions
    from tui.hosts import select_host

    with pytest.raises(InputError, match="--sim-gpus"):
        select_host(HostOptions(sim=True, sim_gpus=100000))


@pytest.mark.parametrize("url", ["http://[::1", "http://[::1]:notaport", "http://host:99999", "ftp://x:1", "http://"])
def test_bench_endpoint_bad_url_is_one_line(url: str) -> None:
    """Defect 3: ``bench --endpoint 'http://[::1'`` printed a traceback (ValueError: Invalid IPv6 URL)."""
    res = run_cli(["bench", "--endpoint", url, "--num-prompts", "1"])
    assert res.code == 2, res.err
    assert no_traceback(res) and len(res.err_lines) == 1 and "--endpoint" in res.err


def test_ipv6_endpoint_url_keeps_its_brackets() -> None:
    from tui.core.bench.streamclient import StreamClient, parse_endpoint

    ep = parse_endpoint("http://[::1]:8000/v1/")
    assert ep.url == "http://[::1]:8000/v1"
    assert b"Host: [::1]:8000\r\n" in StreamClient(ep.url).request_bytes("/completions", b"{}")


@pytest.mark.timeout(60)
def test_bench_against_a_server_that_never_answers_ends_in_bounded_time(tmp_path: Path) -> None:
    """Defect 4: a server that accepts and never answers kept ``bench`` at 'warm-up: 0/5 done' forever. Now the
    run-level stall timeout (--no-token-timeout) ends it with a verdict, exit 1."""
    from tests.hardening.badserver import MODEL as BAD_MODEL
    from tests.hardening.badserver import BadServer

    with BadServer("no-stream") as srv:
        start = time.monotonic()
        res = run_cli(["bench", "--endpoint", srv.url, "--served-model", BAD_MODEL, "--prompt-format", "ids",
                       "--num-prompts", "4", "--input-len", "16", "--output-len", "4", "--no-token-timeout", "1",
                       "-q"])
        took = time.monotonic() - start
    assert res.code == 1, res.err
    assert "stalled: no token for 1 s" in res.err and no_traceback(res)
    assert took < 30


@pytest.mark.timeout(60)
def test_bench_request_timeout_fails_each_request_with_its_reason() -> None:
    from tests.hardening.badserver import MODEL as BAD_MODEL
    from tests.hardening.badserver import BadServer

    with BadServer("headers-only") as srv:
        res = run_cli(["bench", "--endpoint", srv.url, "--served-model", BAD_MODEL, "--prompt-format", "ids",
                       "--num-prompts", "2", "--input-len", "16", "--output-len", "4", "--request-timeout", "1",
                       "--no-token-timeout", "0", "-q"])
    assert res.code == 1, res.err
    assert "timed out after 1 s" in res.err and no_traceback(res)
