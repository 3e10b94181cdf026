"""The defects issue 13's hardening pass found and left open, each with the test that failed before its fix."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.hardening.badserver import MODEL as BAD_MODEL
from tests.hardening.badserver import BadServer
from tests.hardening.cli import no_traceback, run_cli
from tests.helpers import layout_port_args
from tests.proxy_procs import proxy_process
from tui.core.events import EventBus
from tui.core.launch.events import LayoutChanged
from tui.core.launch.state import LayoutRecord, ProcessRecord, StateStore

MODEL = "dummy-qwen3-8b"


def _record(status: str, names: tuple[str, ...]) -> LayoutRecord:
    procs = [ProcessRecord(name=n, role="proxy" if n == "proxy" else "prefill", pid=1, pgid=1, create_time=0.0,
                           log="", url="") for n in names]
    return LayoutRecord(id="L", created=0.0, simulated=True, plan={}, processes=procs, status=status)


def test_layout_health_names_what_exited() -> None:
    from tui.core.launch.state import layout_health

    rec = _record("ready", ("prefill-0", "decode-0", "proxy"))
    assert layout_health(rec, {"prefill-0": True, "decode-0": True, "proxy": True}).status == "ready"
    h = layout_health(rec, {"prefill-0": True, "decode-0": False, "proxy": True})
    assert (h.status, h.recorded, h.exited) == ("degraded", "ready", ("decode-0",))
    assert h.line == "degraded (exited: decode-0)"
    assert layout_health(rec, {"prefill-0": True, "decode-0": True}).exited == ("proxy",)
    assert layout_health(rec, {}).status == "failed"
    # a layout being stopped, or stopped, or failed already: its processes are meant to be gone
    for status in ("stopping", "stopped", "failed"):
        assert layout_health(_record(status, ("proxy",)), {}).status == status


@pytest.mark.timeout(90)
def test_status_watch_and_follower_say_degraded_when_a_server_died() -> None:
    """Before the fix ``status`` showed the process EXITED but the layout ``ready``; ``watch`` and the console's
    follower said ``ready`` too."""
    up = run_cli(["up", "--sim", "--sim-startup", "0.3", "--model", MODEL, "--topology", "1p1d",
                  *layout_port_args()])
    assert up.code == 0, up.err[-2000:]
    try:
        rec = StateStore().active()
        assert rec is not None
        decode = next(p for p in rec.processes if p.role == "decode")
        os.kill(decode.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            st = run_cli(["status", "--json"])
            lay = json.loads(st.out)["layouts"][0]
            if lay["exited"]:
                break
            time.sleep(0.1)
        assert lay["status"] == "degraded" and lay["recorded_status"] == "ready", lay
        assert lay["exited"] == [decode.name]
        assert json.loads(st.out)["snapshot"]["layout"]["status"] == "degraded"
        text = run_cli(["status"])
        assert no_traceback(text) and text.code == 0
        head = text.out.splitlines()[0]
        assert f"degraded (exited: {decode.name})" in head and "ready" not in head, text.out

        watch = run_cli(["watch", "--json", "--seconds", "0.6", "--rate", "5"])
        assert watch.code == 0, watch.err
        ticks = [json.loads(line) for line in watch.out.splitlines() if line.strip()]
        assert ticks and all(t["layout"]["status"] == "degraded" for t in ticks)
        assert ticks[0]["layout"]["exited"] == [decode.name]
        watch_text = run_cli(["watch", "--seconds", "0.3", "--rate", "5"])
        assert f"degraded (exited: {decode.name})" in watch_text.out, watch_text.out

        from tui.core.follow import LayoutFollower

        bus = EventBus()
        seen: list[LayoutChanged] = []
        bus.subscribe(lambda ev: seen.append(ev) if isinstance(ev, LayoutChanged) else None)
        follower = LayoutFollower(bus, StateStore())
        follower.poll_once()
        assert seen and seen[-1].status == "degraded" and decode.name in seen[-1].note, seen
    finally:
        down = run_cli(["down"])
    assert down.code == 0, down.err


# --- the proxy's read timeouts ------------------------------------------------------------------------------------

PROXY_TIMEOUTS = ("--no-access-log", "--read-timeout", "1", "--stream-idle-timeout", "0.5")


def _stream(url: str) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json={"model": BAD_MODEL, "prompt": "hi", "max_tokens": 3,
                                                     "stream": True}, timeout=30, trust_env=False)


def _timeouts_counted(url: str) -> dict[str, float]:
    from tui.core.telemetry.prom import parse

    out: dict[str, float] = {}
    page = parse(httpx.get(url + "/metrics", timeout=5, trust_env=False).text)
    for s in page.samples("disagg_proxy_upstream_errors_total", reason="timeout"):
        role = s.label("role") or ""
        out[role] = out.get(role, 0.0) + s.value
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("prefill_mode", "decode_mode", "role"), [
    ("no-stream", "ok", "prefill"),  # P accepts and never answers
    ("ok", "no-stream", "decode"),  # D accepts and never sends its headers
    ("ok", "headers-only", "decode"),  # D sends 200 and SSE headers, then nothing
])
def test_proxy_answers_504_when_a_server_never_answers(prefill_mode: str, decode_mode: str, role: str) -> None:
    """Before the fix the proxy had no read timeout: the client hung forever."""
    with BadServer(prefill_mode) as prefill, BadServer(decode_mode) as decode:
        px = proxy_process("--prefill", prefill.url, "--decode", decode.url, *PROXY_TIMEOUTS)
        try:
            url = px.url()
            start = time.monotonic()
            r = _stream(url)
            took = time.monotonic() - start
            assert r.status_code == 504, r.text
            err = r.json()["error"]
            server = prefill.url if role == "prefill" else decode.url
            assert err["code"] == 504 and err["type"] == "GatewayTimeoutError"
            assert f"{role} server {server} timed out" in err["message"] and "1 s" in err["message"], err
            assert 0.9 < took < 5, took
            assert _timeouts_counted(url) == {role: 1.0}
        finally:
            px.stop()


@pytest.mark.timeout(60)
def test_proxy_ends_a_stream_that_stalls_with_an_error_event() -> None:
    """Two tokens, then silence: the client gets them, then an error event and [DONE] after the idle timeout."""
    with BadServer("ok") as prefill, BadServer("stall-mid") as decode:
        px = proxy_process("--prefill", prefill.url, "--decode", decode.url, *PROXY_TIMEOUTS)
        try:
            url = px.url()
            start = time.monotonic()
            r = _stream(url)
            assert time.monotonic() - start < 5
            assert r.status_code == 200
            events = [e for e in r.text.split("\n\n") if e.strip()]
            assert events[-1] == "data: [DONE]" and '"t0"' in events[0] and '"t1"' in events[1], events
            err = json.loads(events[-2].removeprefix("data: "))["error"]
            assert err["code"] == 504 and "stalled mid-stream: no data for 0.5 s" in err["message"], err
            assert _timeouts_counted(url) == {"decode": 1.0}
        finally:
            px.stop()


@pytest.mark.timeout(60)
def test_proxy_forwarded_get_to_a_silent_server_is_504() -> None:
    with BadServer("ok") as prefill, BadServer("silent") as decode:
        px = proxy_process("--prefill", prefill.url, "--decode", decode.url, *PROXY_TIMEOUTS)
        try:
            url = px.url()
            r = httpx.get(url + "/v1/models", timeout=30, trust_env=False)
            assert r.status_code == 504 and decode.url in r.json()["error"]["message"], r.text
        finally:
            px.stop()


def test_proxy_good_answers_are_unchanged_by_the_timeouts() -> None:
    with BadServer("ok") as prefill, BadServer("ok") as decode:
        px = proxy_process("--prefill", prefill.url, "--decode", decode.url, *PROXY_TIMEOUTS)
        try:
            r = _stream(px.url())
            assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]"), r.text
            assert r.headers["content-type"].startswith("text/event-stream")
        finally:
            px.stop()


# --- the telemetry and vLLM's API key -----------------------------------------------------------------------------

SECRET = "sk-h21-Never-On-Disk-7c3e1b"


@pytest.mark.timeout(90)
def test_telemetry_asks_v1_models_with_the_api_key(monkeypatch: pytest.MonkeyPatch, isolated_dirs: Path) -> None:
    """Before the fix ``status`` and ``watch`` asked ``/v1/models`` of a layout started with ``--api-key`` without
    it: 401, and no model name. The key comes from ``--api-key`` or ``$VLLM_API_KEY`` of the process that polls;
    the state file records only that the servers want one."""
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    up = run_cli(["up", "--sim", "--sim-startup", "0.3", "--model", MODEL, "--topology", "1p1d",
                  *layout_port_args(), "--api-key", SECRET])
    assert up.code == 0, up.err[-2000:]
    try:
        rec = StateStore().active()
        assert rec is not None and all(p.api_key for p in rec.processes)

        def models(argv: list[str]) -> dict[str, str | None]:
            res = run_cli(argv)
            assert res.code == 0, res.err
            tick = json.loads(res.out)["snapshot"] if argv[0] == "status" else json.loads(res.out.splitlines()[-1])
            return {s["name"]: s["model"] for s in tick["servers"]}

        without = models(["status", "--json"])
        assert set(without) == {"prefill-0", "decode-0", "proxy"} and set(without.values()) == {None}, without
        served = next(iter(set(models(["status", "--json", "--api-key", SECRET]).values())))
        assert served, "the simulated server names its model"
        assert set(models(["status", "--json", "--api-key", SECRET]).values()) == {served}
        monkeypatch.setenv("VLLM_API_KEY", SECRET)
        assert set(models(["status", "--json"]).values()) == {served}
        assert set(models(["watch", "--json", "--seconds", "1.5", "--rate", "2"]).values()) == {served}
        status = run_cli(["status"])
        assert SECRET not in status.out + status.err
    finally:
        assert run_cli(["down"]).code == 0
    leaks = [p for p in isolated_dirs.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaks == []


# --- YAML syntax errors name the field ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "where"), [
    ("name: w\ninput_len: [5\noutput_len: 4\n", "w.yaml:3: field 'input_len': YAML syntax"),
    ("name: w\ninput_len: 5\n  output_len: 4\n", "w.yaml:3: field 'input_len': YAML syntax"),
    ("workloads:\n  chat:\n    input_len: 5\n  decode-heavy: {input_len: 5,\n"
     + "\n" * 7 + "    output_len: 4: 5\n", "w.yaml:12: field 'workloads.decode-heavy"),
    ("entries:\n  - id: a\n  - id: b\n    match: {lines: ['x'\n    fix: y\n",
     "w.yaml:5: field 'entries[2].match.lines'"),
    ("a: 1\nb: 'open\n", "w.yaml:3: field 'b': YAML syntax"),
    ("a: 1\na: 2\n", "w.yaml:2: field 'a': YAML syntax: duplicate key 'a'"),
    ("? [x, y]\n: 1\nb: [\n", "w.yaml:4: field 'b'"),
    ("\tbad: tab\n", "w.yaml:1: YAML syntax"),  # nothing open yet: no field to name
])
def test_a_yaml_syntax_error_names_the_field_it_broke_in(text: str, where: str) -> None:
    """Before the fix a syntax error named the file and line only."""
    from tui.core.errors import InputError
    from tui.core.yamlio import load_text

    with pytest.raises(InputError) as info:
        load_text(text, "w.yaml")
    line = info.value.one_line()
    assert line.startswith(where), line
    assert "\n" not in line
