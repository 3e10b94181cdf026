"""How the simulated server keeps up with many concurrent streams: start one simulated H200 server, send N
streaming completions at once, and compare the wall time with what the performance model asked for.

    python benchmarks/sim_stream_load.py [N ...]       (default: 100 300 1000)

Prints one row per N: output tokens, wall seconds until the last stream ended, the seconds the performance model
gives the same work (virtual time), their ratio (1.0 = the server keeps the model's pace), SSE chunks per request
(tokens merge into one chunk when a stream falls behind: 128 = one chunk per token), and the server's CPU seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.core.models import parse_model_profile  # noqa: E402
from tui.core.plan.gpuspecs import H200  # noqa: E402
from tui.sim.benchsim import simulate_bench  # noqa: E402
from tui.sim.config import DEFAULT_PROFILE  # noqa: E402

OUT_TOKENS = 128
PROMPT = 256


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def one(port: int, i: int) -> int:
    """A bare HTTP/1.1 client (httpx would make this script, not the server, the bottleneck at 1,000 streams)."""
    body = json.dumps({"prompt": [i % 1000 + 1] * PROMPT, "max_tokens": OUT_TOKENS, "stream": True,
                       "ignore_eos": True}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()
    data = bytearray()
    while True:
        block = await reader.read(1 << 16)
        if not block:
            break
        data += block
    writer.close()
    return data.count(b"data: {")


async def load(port: int, n: int) -> tuple[float, list[int]]:
    start = time.monotonic()
    chunks = await asyncio.gather(*(one(port, i) for i in range(n)))
    return time.monotonic() - start, list(chunks)


def main() -> None:
    profile = parse_model_profile(DEFAULT_PROFILE, "default")
    sizes = [int(x) for x in sys.argv[1:]] or [100, 300, 1000]
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=str(ROOT), DISAGG_SIM_GPU="h200", DISAGG_SIM_STARTUP_S="0.5",
                   DISAGG_SIM_STATE_DIR=tmp, DISAGG_SIM_CLOCK="1")
        argv = [sys.executable, "-m", "tui.sim.vllm", "serve", "/tmp/model", "--host", "127.0.0.1", "--port",
                str(port), "--max-model-len", "4096", "--disable-uvicorn-access-log"]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if httpx.get(url + "/health").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            ps = psutil.Process(proc.pid)
            print("| streams | output tokens | wall s | model s | wall / model | SSE chunks per request "
                  "| server CPU s |")
            print("|---|---|---|---|---|---|---|")
            for n in sizes:
                cpu0 = sum(ps.cpu_times()[:2])
                wall, chunks = asyncio.run(load(port, n))
                cpu = sum(ps.cpu_times()[:2]) - cpu0
                model = simulate_bench(profile, H200, "tp1", input_len=PROMPT, output_len=OUT_TOKENS, num_prompts=n)
                tokens = n * OUT_TOKENS
                print(f"| {n} | {tokens:,} | {wall:.2f} | {model.duration:.2f} | {wall / model.duration:.2f} | "
                      f"{sum(chunks) / n:.1f} | {cpu:.2f} |")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


if __name__ == "__main__":
    main()
