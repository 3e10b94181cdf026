"""Issue 3's acceptance run on the simulated host: a 1P1D layout up (the simulated vLLM servers and our proxy),
streaming completions through the proxy, ``disagg-tui watch --sim --json`` beside them."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx

from tests.helpers import layout_port_args
from tui.core.plan.gpuspecs import PRESETS
from tui.sim import gpuphysics

ROOT = Path(__file__).resolve().parent.parent




async def _cli(*args: str, limit_s: float = 90) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "tui", *args, cwd=ROOT,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), limit_s)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, out.decode(), err.decode()


async def _load(endpoint: str, stop: asyncio.Event) -> int:
    """Streaming completions through the proxy from 8 clients until ``stop``; returns how many completed."""
    done = 0
    async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
        model = (await client.get(endpoint + "/v1/models")).json()["data"][0]["id"]

        async def worker() -> None:
            nonlocal done
            while not stop.is_set():
                body = {"model": model, "prompt": "hello " * 300, "max_tokens": 200, "stream": True,
                        "ignore_eos": True}
                async with client.stream("POST", endpoint + "/v1/completions", json=body) as r:
                    assert r.status_code == 200
                    async for _ in r.aiter_bytes():
                        pass
                done += 1

        await asyncio.gather(*(worker() for _ in range(8)))
    return done


async def test_watch_a_1p1d_layout_under_load() -> None:
    ports = layout_port_args()
    rc, out, err = await _cli("up", "--sim", "--sim-startup", "1", "--model", "qwen3.6-27b-nvfp4", "--topology",
                              "1p1d", *ports)
    assert rc == 0, err[-3000:]
    try:
        endpoint = f"http://127.0.0.1:{ports[1]}"
        stop = asyncio.Event()
        load = asyncio.create_task(_load(endpoint, stop))
        await asyncio.sleep(1.0)
        rc, out, err = await _cli("watch", "--sim", "--json", "--seconds", "4")
        stop.set()
        completed = await load
        assert rc == 0, err
        assert completed > 0
        ticks = [json.loads(line) for line in out.splitlines()]
        assert len(ticks) >= 12  # 4 s at 4 Hz
        last = ticks[-1]
        assert last["host"]["simulated"] and "SIMULATED" in last["host"]["label"]
        assert last["layout"]["topology"] == "1p1d"
        owners = [[(p["owner"], p["role"], p["name"], p["mapping"]) for p in g["processes"]] for g in last["gpus"]]
        assert owners == [[("prefill-0", "prefill", "VLLM::EngineCore", "exact")],
                          [("decode-0", "decode", "VLLM::EngineCore", "exact")]]
        busy = [t["gpus"][1] for t in ticks if t["gpus"][1]["utilization_gpu"] > 0]
        idle_with_model = PRESETS["b200"].idle_power_w * gpuphysics.LOADED_IDLE_FACTOR
        assert busy and max(g["power_w"] for g in busy) > idle_with_model + 1  # power follows the decode load
        servers = {s["name"]: s for s in last["servers"]}
        assert {n: s["health"] for n, s in servers.items()} == {"prefill-0": "up", "decode-0": "up", "proxy": "up"}
        decode = servers["decode-0"]["metrics"]
        assert decode["generation_tokens_per_s"] > 0  # moves with the load
        assert decode["disaggregation"]["verdict"] == "kv_transfer_ok"
        assert decode["kv_transfer"]["transfers"] > 0 and decode["kv_transfer"]["failed_transfers"] == 0
        prefill = servers["prefill-0"]["metrics"]
        assert prefill["prompt_tokens_per_s"] > 0  # the prefill happens on prefill-0 (decode's verdict above)
        assert prefill["disaggregation"] is None
    finally:
        rc, out, err = await _cli("down")
    assert rc == 0, err
