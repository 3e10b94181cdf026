"""CPU cost of the live telemetry at its default rates: the GPU sampler and the server poller.

Setup: a simulated host with 2 GPUs (the fake NVML over claims held by two real process trees recorded as a 1P1D
layout, so process-owner mapping runs too) and 3 servers (prefill, decode, proxy) over loopback HTTP, served by a
separate process (its CPU is not counted) that answers ``/health`` and ``/metrics`` with the real vLLM 0.24
captures (~51 kB each, rotating through the 12 taken under load).

Each phase runs for ``--seconds`` wall seconds in this process; the CPU it costs is ``time.process_time()``
(every thread of the process) over that time. References, measured in the same run:

- the sampler without its caches (a new sampler each tick: handles, static facts, process owners re-read);
- a naive poller (a new connection per request, every family parsed, no label memo).

Prints a table; the target is the sampler and the poller together under 3 % of one core.

    python benchmarks/telemetry_cost.py [--seconds 10] [--real-nvml]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psutil  # noqa: E402

from tui.core.launch.state import LayoutRecord, ProcessRecord, StateStore  # noqa: E402
from tui.core.telemetry import prom  # noqa: E402
from tui.core.telemetry.layout import ActiveLayout  # noqa: E402
from tui.core.telemetry.poller import Endpoint, PollerConfig, ServerPoller  # noqa: E402
from tui.core.telemetry.procmap import ProcessOwners  # noqa: E402
from tui.core.telemetry.sampler import DEFAULT_RATE_HZ, GpuSampler, SamplerThread  # noqa: E402
from tui.sim import fakenvml  # noqa: E402
from tui.sim.gpustate import Claim, SimGpuState  # noqa: E402

CAPTURES = sorted((ROOT / "tests/fixtures/vllm-0.24.0-h200/rerun/bench/bench1_in512_out2048_n128_metrics_during")
                  .glob("metrics_*.txt"))
BUDGET = 0.03

_SERVE = r"""
import asyncio, sys
bodies = [open(p, "rb").read() for p in sys.argv[1:]]
count = [0]

async def serve(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            path = line.split()[1]
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            if path == b"/metrics":
                body = bodies[count[0] % len(bodies)]
                count[0] += 1
            elif path == b"/version":
                body = b'{"version":"0.24.0"}'
            elif path == b"/v1/models":
                body = b'{"object":"list","data":[{"id":"m","max_model_len":4096}]}'
            else:
                body = b""
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n" % len(body)
                         + body)
            await writer.drain()
    except (ConnectionError, IndexError):
        return
    finally:
        writer.close()

async def main():
    servers = [await asyncio.start_server(serve, "127.0.0.1", 0) for _ in range(3)]
    print(" ".join(str(s.sockets[0].getsockname()[1]) for s in servers), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""

_TREE = r"""
import subprocess, sys, time
engine = subprocess.Popen(["VLLM::EngineCore", "600"], executable="/bin/sleep")
print(engine.pid, flush=True)
time.sleep(600)
"""


def _spawn_tree() -> tuple[subprocess.Popen[str], int]:
    api = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert api.stdout is not None
    return api, int(api.stdout.readline())


async def _measure(seconds: float, start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]
                   ) -> tuple[float, float]:
    await start()
    await asyncio.sleep(0.5)  # warm-up: first connections, first static reads
    c0, w0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    c1, w1 = time.process_time(), time.perf_counter()
    await stop()
    return c1 - c0, w1 - w0


class NaivePoller:
    """The reference: what a quick script does (new connection per request, parse everything)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self._tasks: list[asyncio.Task[None]] = []

    async def _loop(self, url: str, path: str, period: float, parse: bool) -> None:
        while True:
            t = time.perf_counter()
            async with httpx.AsyncClient(trust_env=False) as client:
                try:
                    resp = await client.get(url + path, timeout=period * 0.8)
                    if parse:
                        prom.parse(resp.text)
                except httpx.HTTPError:
                    pass
            await asyncio.sleep(max(period - (time.perf_counter() - t), 0))

    async def start(self) -> None:
        for u in self.urls:
            self._tasks.append(asyncio.create_task(self._loop(u, "/health", 0.5, False)))
            self._tasks.append(asyncio.create_task(self._loop(u, "/metrics", 1.0, True)))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class UncachedSampler:
    """The reference: a fresh sampler (handles, static facts, owner lookups) every tick."""

    def __init__(self, nvml: object, refs: Callable[[], object]) -> None:
        self.nvml = nvml
        self.refs = refs

    def sample(self) -> object:
        return GpuSampler(self.nvml, owners=ProcessOwners(self.refs)).sample()  # type: ignore[arg-type]


class Setup:
    """The simulated host, two server process trees recorded as a layout, and the 3 HTTP servers (a child)."""

    def __init__(self) -> None:
        self.state = Path(tempfile.mkdtemp(prefix="telemetry-cost-"))
        sim = SimGpuState(self.state)
        sim.init_host("h200", 2)
        self.server = subprocess.Popen([sys.executable, "-c", _SERVE, *map(str, CAPTURES)], stdout=subprocess.PIPE,
                                       text=True)
        self.trees = [_spawn_tree(), _spawn_tree()]
        assert self.server.stdout is not None
        ports = [int(p) for p in self.server.stdout.readline().split()]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        names = [("prefill-0", "prefill"), ("decode-0", "decode"), ("proxy", "proxy")]
        procs = []
        for gpu, (api, engine) in enumerate(self.trees):
            sim.write_claim(Claim(pid=engine, gpus=[gpu], memory_bytes={gpu: 120 * 2**30}, util={gpu: 0.9}))
            procs.append(ProcessRecord(names[gpu][0], names[gpu][1], api.pid, api.pid,
                                       psutil.Process(api.pid).create_time(), "", urls[gpu], [gpu]))
        procs.append(ProcessRecord("proxy", "proxy", os.getpid(), os.getpgid(0), 0.0, "", urls[2], []))
        self.store = StateStore(self.state)
        with self.store.locked() as layouts:
            layouts["bench"] = LayoutRecord(id="bench", created=time.time(), simulated=True, status="ready",
                                            plan={"servers": [{"name": "prefill-0", "gpus": [0]},
                                                              {"name": "decode-0", "gpus": [1]}]}, processes=procs)
        self.urls = urls
        self.endpoints = [Endpoint(n, u, r) for (n, r), u in zip(names, urls, strict=True)]
        fakenvml.configure(self.state)
        fakenvml.nvmlInit()

    def close(self) -> None:
        fakenvml.configure(None)
        self.server.kill()
        self.server.wait()
        for api, engine in self.trees:
            for pid in (engine, api.pid):
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            api.wait()


async def run(setup: Setup, seconds: float, real_nvml: bool) -> int:
    active = ActiveLayout(setup.store)
    nvml: object = fakenvml
    gpus = "2 simulated GPUs"
    if real_nvml:
        from tui.core.host.nvml import open_nvml

        nvml = open_nvml()
        gpus = f"{nvml.nvmlDeviceGetCount()} real GPU(s), NVML"  # type: ignore[attr-defined]
    rows: list[tuple[str, float, float, str]] = []

    async def nothing() -> None:
        return None

    cpu, wall = await _measure(seconds, nothing, nothing)
    rows.append(("idle event loop (baseline)", cpu, wall, ""))
    base = cpu / wall

    def sampler_phase(sampler: object) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
        thread = SamplerThread(sampler, None, rate_hz=DEFAULT_RATE_HZ)  # type: ignore[arg-type]

        async def start() -> None:
            thread.start()

        async def stop() -> None:
            thread.stop()

        return start, stop

    def ratio(c: float, w: float, rc: float, rw: float) -> str:
        return f"{(c / w - base) / max(rc / rw - base, 1e-9):.2f}"

    ref_cpu, ref_wall = await _measure(seconds, *sampler_phase(UncachedSampler(nvml, active.refs)))
    cpu, wall = await _measure(seconds, *sampler_phase(GpuSampler(nvml, owners=ProcessOwners(active.refs))))
    rows.append((f"sampler {DEFAULT_RATE_HZ:g} Hz, {gpus}", cpu, wall, ratio(cpu, wall, ref_cpu, ref_wall)))
    rows.append(("  reference: sampler without caches", ref_cpu, ref_wall, "1.00"))

    naive = NaivePoller(setup.urls)
    ref_cpu, ref_wall = await _measure(seconds, naive.start, naive.stop)
    poller = ServerPoller(setup.endpoints, config=PollerConfig())
    cpu, wall = await _measure(seconds, poller.start, poller.stop)
    scrapes = sum(s.scrapes for s in poller.statuses())
    rows.append((f"poller 3 servers (/health 2 Hz, /metrics 1 Hz; {scrapes} scrapes)", cpu, wall,
                 ratio(cpu, wall, ref_cpu, ref_wall)))
    rows.append(("  reference: naive poller", ref_cpu, ref_wall, "1.00"))

    thread = SamplerThread(GpuSampler(nvml, owners=ProcessOwners(active.refs)), None)
    both = ServerPoller(setup.endpoints, config=PollerConfig())

    async def start_both() -> None:
        thread.start()
        await both.start()

    async def stop_both() -> None:
        thread.stop()
        await both.stop()

    cpu, wall = await _measure(seconds, start_both, stop_both)
    together = cpu / wall - base
    rows.append(("sampler + poller together", cpu, wall, ""))

    print(f"telemetry cost, {seconds:g} s per phase, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print(f"{'phase':<62} {'CPU s':>7} {'wall s':>7} {'% core':>7} {'net %':>7} {'vs ref':>7}")
    for name, c, w, r in rows:
        print(f"{name:<62} {c:7.3f} {w:7.2f} {100 * c / w:7.2f} {100 * (c / w - base):7.2f} {r:>7}")
    verdict = "PASS" if together < BUDGET else "FAIL"
    print(f"together, net of the idle loop: {100 * together:.2f} % of one core "
          f"(target < {100 * BUDGET:.0f} %): {verdict}")
    return 0 if together < BUDGET else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="wall seconds per phase (default 10)")
    ap.add_argument("--real-nvml", action="store_true",
                    help="sample the host's real GPUs through NVML instead of 2 simulated ones")
    args = ap.parse_args()
    setup = Setup()
    try:
        return asyncio.run(run(setup, args.seconds, args.real_nvml))
    finally:
        setup.close()


if __name__ == "__main__":
    sys.exit(main())
