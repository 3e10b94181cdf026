"""End to end on the simulated host through the CLI: up, a streaming completion through the proxy, status, down;
down after the launcher was SIGKILLed; an injected failure reported with the server's own lines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import cli, layout_port_args
from tui.core.launch.history import StartupHistory
from tui.core.launch.state import StateStore
from tui.core.launch.supervisor import LAYOUT_ENV

ROOT = Path(__file__).resolve().parent.parent






def _ours(state_dir: str) -> list[int]:
    """Every live process that belongs to a layout of this test's state directory."""
    import psutil

    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            env = p.environ()
            if env.get(LAYOUT_ENV) and env.get("DISAGG_TUI_STATE_DIR") == state_dir and \
                    p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def test_up_stream_status_down_1p1d() -> None:
    ports = layout_port_args()
    up = cli("up", "--sim", "--sim-startup", "1", "--model", "qwen3.6-27b-nvfp4", "--topology", "1p1d", *ports)
    assert up.returncode == 0, up.stderr[-3000:]
    assert "is up (SIMULATED host)" in up.stdout
    assert "ready on" in up.stderr and "capturing CUDA graphs" in up.stderr
    endpoint = f"http://127.0.0.1:{ports[1]}"
    try:
        body = {"model": "nvidia/Qwen3.6-27B-NVFP4", "prompt": list(range(100, 164)), "max_tokens": 8,
                "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
        with httpx.stream("POST", endpoint + "/v1/completions", json=body, timeout=30, trust_env=False) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        usage = json.loads(events[-2])["usage"]
        assert usage["completion_tokens"] == 8 and usage["prompt_tokens"] == 64
        assert sum(1 for e in events[:-2] if json.loads(e)["choices"]) == 8
        st = cli("status", "--json")
        assert st.returncode == 0
        report = json.loads(st.stdout)
        (layout,) = report["layouts"]
        assert layout["status"] == "ready" and layout["simulated"]
        assert all(p["alive"] for p in layout["processes"])
        snap = report["snapshot"]
        assert {s["name"]: s["health"] for s in snap["servers"]} == {"prefill-0": "up", "decode-0": "up", "proxy": "up"}
        assert "SIMULATED" in snap["host"]["label"]
        owners = {p["owner"] for g in snap["gpus"] for p in g["processes"]}
        assert owners == {"prefill-0", "decode-0"}
        # the start is remembered for the next one's ETA: each server with the phases it went through
        hist = StartupHistory(Path(os.environ["DISAGG_TUI_STATE_DIR"]))
        starts = {r.server: r for r in hist.records()}
        assert set(starts) == {"prefill-0", "decode-0"}
        assert all(r.startup_s > 0 and r.key.startswith("1p1d/qwen3.6-27b-nvfp4/") for r in starts.values())
        assert {"loading", "kv_cache"} <= set(dict(starts["decode-0"].phases))
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    assert "nothing left running" in down.stdout
    assert _ours(os.environ["DISAGG_TUI_STATE_DIR"]) == []
    assert StateStore().active() is None


def test_down_after_launcher_was_killed() -> None:
    ports = layout_port_args()
    launcher = subprocess.Popen([sys.executable, "-m", "tui", "up", "--sim", "--sim-startup", "3", "--model",
                                 "dummy-qwen3-8b", "--topology", "1p1d", *ports], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until every process is launched and recorded
            rec = StateStore().active() if (Path(os.environ["DISAGG_TUI_STATE_DIR"]) / "layouts.json").exists() \
                else None
            if rec is not None and len(rec.processes) == 3:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the layout was not recorded")
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
    time.sleep(0.5)
    assert len(_ours(os.environ["DISAGG_TUI_STATE_DIR"])) >= 3  # servers outlive their launcher
    down = cli("down")
    assert down.returncode == 0, down.stderr
    assert _ours(os.environ["DISAGG_TUI_STATE_DIR"]) == []


def test_second_up_is_refused_while_one_is_active() -> None:
    ports = layout_port_args()
    first = cli("up", "--sim", "--sim-startup", "0.5", "--model", "dummy-qwen3-8b", "--topology", "tp1", *ports)
    assert first.returncode == 0, first.stderr[-2000:]
    try:
        second = cli("up", "--sim", "--sim-startup", "0.5", "--model", "dummy-qwen3-8b", "--topology", "tp1",
                      *layout_port_args())
        assert second.returncode == 2
        assert "one layout per host" in second.stderr
    finally:
        assert cli("down").returncode == 0
