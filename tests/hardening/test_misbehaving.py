"""A misbehaving server (tests/hardening/badserver.py) against the load generator, the poller and the proxy: each
misbehaviour gives a clear per-request error or a run-level verdict in bounded time, and what finished is kept."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tests.hardening.badserver import MODEL, BadServer
from tests.hardening.cli import no_traceback, run_cli
from tests.proxy_procs import proxy_process
from tui.core import paths

BENCH = ("--served-model", MODEL, "--prompt-format", "ids", "--input-len", "8", "--output-len", "4", "--warmup",
         "0", "-q")


def _only_run() -> Path:
    [run] = [p for p in (paths.runs_dir() / "bench").iterdir() if p.is_dir()]
    return run


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("mode", "reason"), [
    ("garbage", "Never received a valid chunk"),
    ("bad-chunk", "bad chunk size line"),
    ("truncated", "connection closed by the server"),
    ("close-mid", "connection closed by the server"),
    ("http500", "HTTP 500 Internal Server Error: EngineCore encountered an issue"),
])
def test_load_generator_names_each_failed_request(mode: str, reason: str) -> None:
    """The first request is answered well, the others misbehave: the run ends, the good record and each failure
    with its reason are on disk, and the operator is told how many failed."""
    from tui.core.bench.store import load_run

    with BadServer(mode, good=1) as srv:
        start = time.monotonic()
        res = run_cli(["bench", "--endpoint", srv.url, "--num-prompts", "3", "--max-concurrency", "1",
                       "--no-token-timeout", "5", "--request-timeout", "10", *BENCH])
        took = time.monotonic() - start
    assert no_traceback(res) and took < 30
    assert res.code == 0, res.err  # the run itself completed; its failed requests are flagged
    assert "2 request(s) failed" in res.err
    run = load_run(_only_run())
    records = run.records()
    assert len(records) == 3
    assert sum(r.success for r in records) == 1
    assert all(reason in r.error for r in records if not r.success), [r.error for r in records]
    assert run.summary["completed"] == 1 and run.summary["failed"] == 2


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["no-stream", "headers-only"])
def test_a_server_that_goes_silent_gets_a_stall_verdict_and_keeps_what_finished(mode: str) -> None:
    from tui.core.bench.store import load_run

    with BadServer(mode, good=2) as srv:
        start = time.monotonic()
        res = run_cli(["bench", "--endpoint", srv.url, "--num-prompts", "4", "--max-concurrency", "1",
                       "--no-token-timeout", "1.5", *BENCH])
        took = time.monotonic() - start
    assert res.code == 1 and no_traceback(res), res.err
    assert "stalled: no token for 1.5 s with 1 request(s) in flight" in res.err
    assert took < 30
    run = load_run(_only_run())
    assert run.meta.status == "failed" and "stalled" in run.meta.flags
    assert sum(r.success for r in run.records()) == 2  # the two finished requests are on disk
    assert run.summary["completed"] == 2


@pytest.mark.timeout(30)
async def test_the_model_question_to_a_server_that_never_answers_is_bounded() -> None:
    """``/version`` and ``/v1/models`` are asked at once: a silent server costs one timeout (the CLI turns it into
    'cannot ask ... for its model', exit 2: the corpus's endpoint cases)."""
    from tui.core.bench.serverside import server_info

    with BadServer("silent") as srv:
        start = time.monotonic()
        with pytest.raises(httpx.TimeoutException):
            await server_info(srv.url, timeout_s=0.5)
        assert time.monotonic() - start < 0.5 * 1.9


# --- the poller ------------------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", ["silent", "metrics-garbage", "http500"])
async def test_poller_reports_a_misbehaving_server_in_bounded_time(mode: str) -> None:
    from tui.core.telemetry.poller import Endpoint, PollerConfig, ServerPoller

    with BadServer(mode) as srv:
        poller = ServerPoller([Endpoint("s", srv.url)], config=PollerConfig(health_hz=4, metrics_hz=4))
        start = time.monotonic()
        try:
            [status] = await asyncio.wait_for(poller.poll_once(), 10)
        finally:
            await poller.stop()
        assert time.monotonic() - start < 5
    assert status.health is not None
    if mode == "silent":
        assert status.health.state != "up" and status.health.error
    else:
        assert status.health.state == "up"  # /health answers; a page that is not Prometheus text is no crash


# --- the proxy -------------------------------------------------------------------------------------------------


def _completion(url: str) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 3, "stream": True},
                      timeout=10, trust_env=False)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("mode", "status", "text"), [
    ("http500", 500, "EngineCore encountered an issue"),
    ("garbage", 502, "not JSON"),
    ("close-mid", 502, "incomplete chunked read"),
])
def test_proxy_answers_a_misbehaving_prefill_with_a_clear_error(mode: str, status: int, text: str) -> None:
    with BadServer(mode) as prefill, BadServer("ok") as decode:
        px = proxy_process("--prefill", prefill.url, "--decode", decode.url, "--no-access-log")
        try:
            url = px.url()
            r = _completion(url)
            assert r.status_code == status and text in r.text, r.text
            assert httpx.get(url + "/health", timeout=5, trust_env=False).status_code == 200  # it serves on
            assert decode.requests == 0  # nothing reached decode without a good prefill
        finally:
            px.stop()


@pytest.mark.timeout(60)
def test_proxy_health_names_a_silent_server() -> None:
    with BadServer("silent") as prefill, BadServer("ok") as decode:
        px = proxy_process("--prefill", prefill.url, "--decode", decode.url, "--no-access-log", "--health-timeout",
                           "0.5")
        try:
            url = px.url()
            start = time.monotonic()
            h = httpx.get(url + "/health", timeout=5, trust_env=False)
            assert time.monotonic() - start < 3
            assert h.status_code == 503 and prefill.url in h.text and "no answer" in h.text
        finally:
            px.stop()
