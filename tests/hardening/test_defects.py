"""The four defects of issue 13, each with the test that failed before its fix."""

from __future__ import annotations

import asyncio
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
    deadline = time.monotonic() + 5
    while not _time_wait_on(side) and time.monotonic() < deadline:
        time.sleep(0.1)
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

    from tui.core.plan.hostfacts import sim_facts
    from tui.core.plan.planner import PlanOptions, plan
    from tui.core.profiles import Catalog

    layout = plan(Catalog.load().model(MODEL), "tp1", sim_facts("b200", 2),
                  PlanOptions(port=port, server_base_port=free_port(), side_channel_base=free_port()))
    check = next(c for c in check_ports(layout) if c.name == "ports")
    assert check.status == "fail" and "TIME-WAIT" in check.reason and str(port) in check.reason
