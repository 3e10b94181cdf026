"""Sampler and poller together on a simulated 1P1D layout: ``collect_snapshot`` and ``disagg-tui watch``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.telemetry_helpers import LocalServer, Tree, during_series, exposition_text, spawn_tree
from tui.cli.main import main
from tui.core import paths
from tui.core.events import EventBus
from tui.core.host.base import HostOptions
from tui.core.launch.state import LayoutRecord, ProcessRecord, StateStore
from tui.core.telemetry.live import LiveTelemetry, collect_snapshot
from tui.core.telemetry.poller import PollerConfig
from tui.core.telemetry.view import json_line, tick_lines
from tui.sim.gpustate import Claim, SimGpuState
from tui.sim.host import SimHost

GIB = 2**30
ROOT = Path(__file__).resolve().parent.parent
SERIES = [exposition_text(p).encode() for p in during_series("bench1_in512_out2048_n128")]


def _vllm(counter: list[int]) -> object:
    def handler(method: str, path: str) -> tuple[int, str, bytes] | None:
        if path == "/health":
            return 200, "application/json", b""
        if path == "/version":
            return 200, "application/json", b'{"version":"0.24.0"}'
        if path == "/v1/models":
            return 200, "application/json", b'{"object":"list","data":[{"id":"m","max_model_len":4096}]}'
        if path == "/metrics":
            counter[0] += 1  # each scrape serves the next real capture (2 s apart on the H200)
            return 200, "text/plain", SERIES[min(counter[0] - 1, len(SERIES) - 1)]
        return 404, "application/json", b"{}"
    return handler


@dataclass
class Layout1P1D:
    prefill: LocalServer
    decode: LocalServer
    proxy: LocalServer
    trees: list[Tree]


@pytest.fixture
async def layout_1p1d(isolated_dirs: Path) -> AsyncIterator[Layout1P1D]:
    """A 1P1D layout in the state file: two server process trees whose engines hold the two simulated GPUs, and
    three local HTTP endpoints (prefill, decode, proxy) speaking vLLM's /health and /metrics."""
    state_dir = paths.state_dir()
    SimGpuState(state_dir).init_host("b200", 2)
    prefill = await LocalServer(_vllm([0])).start()
    decode = await LocalServer(_vllm([0])).start()
    proxy = await LocalServer(lambda m, p: (200, "application/json", b"") if p == "/health" else
                              (404, "application/json", b"{}")).start()
    trees = [spawn_tree([]), spawn_tree([])]
    sim = SimGpuState(state_dir)
    for gpu, tree in enumerate(trees):
        sim.write_claim(Claim(pid=tree.engine_pid, gpus=[gpu], memory_bytes={gpu: (150 + gpu) * GIB},
                              util={gpu: 0.8}, mem_util={gpu: 0.3}))
    now = time.time()
    procs = [
        ProcessRecord("prefill-0", "prefill", trees[0].api_pid, trees[0].api_pid, trees[0].create_time,
                      str(state_dir / "p.log"), prefill.url, [0], started=now, ready_at=now),
        ProcessRecord("decode-0", "decode", trees[1].api_pid, trees[1].api_pid, trees[1].create_time,
                      str(state_dir / "d.log"), decode.url, [1], started=now, ready_at=now),
        ProcessRecord("proxy", "proxy", os.getpid(), os.getpgid(0), 0.0, "", proxy.url, []),
    ]
    plan = {"topology": "1p1d", "profile_id": "qwen3-8b", "gpus": [0, 1],
            "servers": [{"name": "prefill-0", "role": "prefill", "tp": 1, "dp": 1, "gpus": [0]},
                        {"name": "decode-0", "role": "decode", "tp": 1, "dp": 1, "gpus": [1]}]}
    with StateStore().locked() as layouts:
        layouts["L1"] = LayoutRecord(id="L1", created=now, simulated=True, plan=plan, processes=procs,
                                     status="ready", endpoint=proxy.url)
    yield Layout1P1D(prefill, decode, proxy, trees)
    for t in trees:
        t.kill()
    for s in (prefill, decode, proxy):
        await s.close()


def _check_gpus(tick: dict[str, object]) -> None:
    gpus = tick["gpus"]
    assert isinstance(gpus, list) and [g["index"] for g in gpus] == [0, 1]
    owners = [(g["processes"][0]["owner"], g["processes"][0]["role"], g["processes"][0]["mapping"]) for g in gpus]
    assert owners == [("prefill-0", "prefill", "exact"), ("decode-0", "decode", "exact")]
    assert gpus[0]["memory_used"] > 150 * GIB and gpus[0]["utilization_gpu"] == 80.0
    assert gpus[0]["processes"][0]["name"] == "VLLM::EngineCore"


async def test_collect_snapshot_of_a_simulated_1p1d(layout_1p1d: Layout1P1D) -> None:
    host = SimHost(HostOptions(sim=True))
    snap = await collect_snapshot(host, StateStore())
    assert snap["host"]["simulated"] is True and snap["host"]["label"].startswith("SIMULATED host")
    assert snap["layout"]["id"] == "L1" and snap["layout"]["topology"] == "1p1d"
    _check_gpus(snap)
    assert snap["host"]["topology"]["links"] == [["X", "NV18"], ["NV18", "X"]]
    servers = {s["name"]: s for s in snap["servers"]}
    assert set(servers) == {"prefill-0", "decode-0", "proxy"}
    assert all(s["health"] == "up" and s["latency_ms"] is not None for s in servers.values())
    assert servers["decode-0"]["version"] == "0.24.0" and servers["decode-0"]["model"] == "m"
    m = servers["decode-0"]["metrics"]
    assert m["requests_running"] == 31.0 and m["generation_tokens_per_s"] is None  # one scrape: no rate
    assert "rates" in m["unavailable"]
    assert servers["proxy"]["metrics"] is None and servers["proxy"]["metrics_error"] == "/metrics answered HTTP 404"
    assert snap["errors"] == []
    json.loads(json_line(snap))
    text = "\n".join(tick_lines(snap))
    assert "SIMULATED" in text and "prefill-0 (prefill)" in text and "[exact]" in text


async def test_live_ticks_follow_the_sampling_rate(layout_1p1d: Layout1P1D) -> None:
    host = SimHost(HostOptions(sim=True))
    ticks = []
    config = PollerConfig(health_hz=5.0, metrics_hz=5.0)

    def decode_of(tick: dict[str, Any]) -> dict[str, Any]:
        return next(s for s in tick["servers"] if s["name"] == "decode-0")

    t0 = time.monotonic()
    async with LiveTelemetry(host, StateStore(), rate_hz=10.0, poller_config=config) as live:
        async for tick in live.ticks(30.0):  # until what is asserted is there, not for a fixed 1.2 s (issue 22, 7)
            ticks.append(tick)
            rates = (decode_of(tick)["metrics"] or {}).get("generation_tokens_per_s")
            if len(ticks) >= 8 and rates:
                break
    elapsed = time.monotonic() - t0
    assert 8 <= len(ticks) <= elapsed * 10.0 + 3  # one per sample, at the sampling rate at most
    _check_gpus(ticks[-1])
    decode = decode_of(ticks[-1])
    assert decode["health"] == "up" and decode["metrics"]["generation_tokens_per_s"] > 0
    assert decode["metrics"]["disaggregation"]["verdict"] == "decode_recomputed_prefill"  # the captures: no NIXL


async def test_watch_json_lines_in_a_subprocess(layout_1p1d: Layout1P1D) -> None:
    env = paths.child_env({"PYTHONUNBUFFERED": "1"})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tui", "watch", "--sim", "--json", "--seconds", "2.5", "--rate", "4",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert 7 <= len(lines) <= 12  # 2.5 s at 4 Hz
    ticks = [json.loads(line) for line in lines]
    assert all(set(t) >= {"time", "host", "gpus", "servers"} for t in ticks)
    assert all(s["health"] == "up" for s in ticks[0]["servers"])  # the first tick already knows
    assert [t["time"] for t in ticks] == sorted(t["time"] for t in ticks)
    assert all(t["host"]["simulated"] and "SIMULATED" in t["host"]["label"] for t in ticks)
    _check_gpus(ticks[-1])
    servers = {s["name"]: s for s in ticks[-1]["servers"]}
    assert servers["prefill-0"]["role"] == "prefill" and servers["prefill-0"]["health"] == "up"
    assert servers["decode-0"]["metrics"]["generation_tokens_per_s"] > 0


def test_watch_rejects_bad_rates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--sim", "--rate", "20"]) == 2
    assert "--rate" in capsys.readouterr().err
    assert main(["watch", "--sim", "--seconds", "0"]) == 2


def test_watch_text_without_a_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--sim", "--seconds", "0.6", "--rate", "5"]) == 0
    captured = capsys.readouterr()
    assert "no active layout" in captured.err
    blocks = [b for b in captured.out.split("\n\n") if b.strip()]
    assert 2 <= len(blocks) <= 4
    assert "SIMULATED host" in blocks[0] and "GPU0 NVIDIA B200" in blocks[0] and "GPU1" in blocks[0]


async def test_a_layout_change_is_followed_at_once_not_at_the_next_look(isolated_dirs: Path) -> None:
    """Issue 22, finding 7: a recorded run follows the layout when the bus says a server was launched; the look at
    the state file then gave the view of up to a second before (no servers yet), and a short run ended unpolled."""
    server = await LocalServer(_vllm([0])).start()
    now = time.time()
    with StateStore().locked() as layouts:
        layouts["L1"] = LayoutRecord(id="L1", created=now, simulated=True, plan={"topology": "tp1"},
                                     processes=[], status="starting", endpoint=server.url)
    try:
        async with LiveTelemetry(SimHost(HostOptions(sim=True)), StateStore()) as live:
            live.active._clock = lambda: 0.0  # the throttle's clock stands still: only a fresh read sees the change
            assert live.poller is not None and live.statuses() == []
            with StateStore().locked() as layouts:
                layouts["L1"].processes.append(ProcessRecord("server", "single", os.getpid(), os.getpgid(0), 0.0,
                                                             "", server.url, [0], started=now))
            await live.follow_layout()  # what the recording does when it hears server_launched
            assert [st.endpoint.name for st in live.statuses()] == ["server"]
            assert all(st.health is not None for st in live.statuses())  # polled before it returned
    finally:
        await server.close()


async def test_a_benchmark_run_on_the_bus_marks_the_servers_latency_window(layout_1p1d: Layout1P1D) -> None:
    """Issue 22, finding 14: the servers' latency figures cover the run the bench says began (its warm-up left
    out), for every server, and a poller made later for the same layout covers it too."""
    from tests.helpers import eventually_async
    from tui.core.bench.events import BenchDone, BenchTick

    bus = EventBus()
    config = PollerConfig(health_hz=10.0, metrics_hz=10.0)
    async with LiveTelemetry(SimHost(HostOptions(sim=True)), StateStore(), bus=bus, poller_config=config) as live:
        def covered() -> list[object]:
            return [st.metrics.figures.latency_since for st in live.statuses()
                    if st.endpoint.role != "proxy" and st.metrics and st.metrics.figures]

        tick = dict(run_id="c/r", total=4, sent=4, done=0, failed=0, inflight=4)
        bus.publish(BenchTick(phase="warmup", elapsed_s=2.0, **tick))  # type: ignore[arg-type]
        await eventually_async(lambda: len(covered()) == 2, 30, "figures")
        assert covered() == [None, None]  # a warm-up marks nothing: the rolling window
        run = BenchTick(phase="run", elapsed_s=1.5, **tick)  # type: ignore[arg-type]
        bus.publish(run)
        await eventually_async(lambda: all(c is not None for c in covered()), 30, "the run's window")
        assert all(c <= run.ts for c in covered())  # type: ignore[operator]
        bus.publish(BenchDone(run_id="c/r", status="complete"))
        assert live._run is not None and live._run[2] is not None
