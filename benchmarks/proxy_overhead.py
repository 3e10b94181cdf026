"""What the disaggregated proxy adds per request: latency (TTFT and total) and CPU.

    /work/main/.venv/bin/python benchmarks/proxy_overhead.py [--requests 200] [--concurrency 16] [--tokens 32]

Starts a fake prefill and a fake decode server (``python -m tui.sim.fakepd``: no model work, answers at once and
streams ``--tokens`` SSE chunks ``--token-delay`` apart) and the proxy (``python -m tui.core.proxy``, access log on,
written to a file as under the supervisor), each in its own process. The same streaming completion is then sent
three ways, in the same run and interleaved so drift hits all three alike:

- ``decode direct``: straight to the decode server, with the KV parameters the proxy would add;
- ``P then D, client``: the client itself asks the prefill server, then the decode server (the disaggregated flow
  with no proxy: what the flow costs by itself);
- ``through proxy``: to the proxy.

Sequentially, differences are paired request by request (``through proxy`` minus the reference done just before
it); under concurrency, the percentiles of each way are compared. CPU per request is read from /proc (psutil) for
the proxy, and for the fake decode server as a reference measured in the same run. Nothing here is asserted: the
figures depend on the host, which the header names.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.core.paths import child_env  # noqa: E402
from tui.core.proxy.upstream import decode_body, prefill_body  # noqa: E402

URL_LINE = re.compile(r"listening on (http://\S+)")
MODES = ("decode direct", "P then D, client", "through proxy")


@dataclass
class Sample:
    ttft: float
    total: float


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    url: str = ""
    ps: psutil.Process = field(init=False)

    def __post_init__(self) -> None:
        self.ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return float(t.user + t.system)


def start(name: str, argv: list[str], logdir: Path) -> Child:
    log = logdir / f"{name}.log"
    out = log.open("wb")
    proc = subprocess.Popen(argv, cwd=ROOT, env=child_env(), stdout=out, stderr=subprocess.STDOUT)
    out.close()
    child = Child(name, proc, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = URL_LINE.search(log.read_text(errors="replace"))
        if m:
            child.url = m.group(1)
            return child
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited ({proc.returncode}):\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    raise SystemExit(f"{name} printed no URL within 30 s:\n{log.read_text(errors='replace')}")


def stop(children: list[Child]) -> None:
    for c in children:
        if c.proc.poll() is None:
            c.proc.terminate()
    for c in children:
        try:
            c.proc.wait(10)
        except subprocess.TimeoutExpired:
            c.proc.kill()
            c.proc.wait(5)


def cpu_of(*children: Child) -> tuple[float, ...]:
    return tuple(c.cpu() for c in children)


def per_request(before: tuple[float, ...], after: tuple[float, ...], n: int) -> tuple[float, float, float]:
    """CPU seconds per request of fake P, fake D and the proxy over a phase where each way ran ``n`` times:
    P served two of the three ways (the client's P then D, and the proxy), D all three, the proxy one."""
    p, d, x = (a - b for a, b in zip(after, before, strict=True))
    return p / (2 * n), d / (3 * n), x / n


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(values)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


async def stream_post(client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str],
                      t0: float) -> Sample:
    ttft = None
    async with client.stream("POST", url, json=body, headers=headers) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}: {(await r.aread())[:200]!r}")
        async for _chunk in r.aiter_raw():
            if ttft is None:
                ttft = time.perf_counter() - t0
    total = time.perf_counter() - t0
    return Sample(ttft if ttft is not None else total, total)


class Runner:
    def __init__(self, client: httpx.AsyncClient, p: str, d: str, proxy: str, body: dict[str, Any]) -> None:
        self.client, self.p, self.d, self.proxy, self.body = client, p, d, proxy, body
        self.p_body = prefill_body(body)
        self.n = 0
        self.kv: dict[str, Any] | None = None

    def rid(self) -> dict[str, str]:
        self.n += 1
        return {"x-request-id": f"bench-{self.n}"}

    async def prepare(self) -> None:
        r = await self.client.post(self.p + "/v1/completions", json=self.p_body, headers=self.rid())
        self.kv = r.json()["kv_transfer_params"]

    async def decode_direct(self) -> Sample:
        t0 = time.perf_counter()
        return await stream_post(self.client, self.d + "/v1/completions", decode_body(self.body, self.kv),
                                 self.rid(), t0)

    async def client_p_then_d(self) -> Sample:
        headers = self.rid()
        t0 = time.perf_counter()
        r = await self.client.post(self.p + "/v1/completions", json=self.p_body, headers=headers)
        kv = r.json()["kv_transfer_params"]
        return await stream_post(self.client, self.d + "/v1/completions", decode_body(self.body, kv), headers, t0)

    async def through_proxy(self) -> Sample:
        t0 = time.perf_counter()
        return await stream_post(self.client, self.proxy + "/v1/completions", self.body, self.rid(), t0)

    def ways(self) -> dict[str, Callable[[], Awaitable[Sample]]]:
        return dict(zip(MODES, (self.decode_direct, self.client_p_then_d, self.through_proxy), strict=True))


def ms(x: float) -> str:
    return f"{x * 1000:8.3f}"


def row(label: str, ttft: list[float], total: list[float]) -> str:
    return (f"  {label:<34} {len(total):>5} {ms(percentile(ttft, 50))} {ms(percentile(ttft, 99))}"
            f" {ms(percentile(total, 50))} {ms(percentile(total, 99))}")


HEADER = f"  {'':<34} {'n':>5} {'TTFT p50':>8} {'TTFT p99':>8} {'tot p50':>8} {'tot p99':>8}   (ms)"


async def run(args: argparse.Namespace, p: Child, d: Child, proxy: Child) -> list[str]:
    words = " ".join(f"w{i % 997}" for i in range(args.prompt_words))
    body = {"model": "fake/model", "prompt": words, "max_tokens": args.tokens, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    # idle connections dropped before the servers' 5 s keep-alive ends, so none is reused as a server closes it
    limits = httpx.Limits(max_connections=4 * args.concurrency, max_keepalive_connections=4 * args.concurrency,
                          keepalive_expiry=2.0)
    out: list[str] = []
    async with httpx.AsyncClient(timeout=30, limits=limits, trust_env=False) as client:
        runner = Runner(client, p.url, d.url, proxy.url, body)
        await runner.prepare()
        ways = runner.ways()
        for _ in range(args.warmup):
            for way in ways.values():
                await way()

        # sequential, interleaved, paired
        seq: dict[str, list[Sample]] = {m: [] for m in MODES}
        cpu0 = cpu_of(p, d, proxy)
        for i in range(args.requests):
            for mode in MODES[i % 3:] + MODES[:i % 3]:
                seq[mode].append(await ways[mode]())
        cpu_seq = per_request(cpu0, cpu_of(p, d, proxy), args.requests)
        out.append(f"sequential: {args.requests} requests each way, one at a time, the ways taking turns")
        out.append(HEADER)
        for mode in MODES:
            out.append(row(mode, [s.ttft for s in seq[mode]], [s.total for s in seq[mode]]))
        for ref in MODES[:2]:
            pairs = list(zip(seq["through proxy"], seq[ref], strict=True))
            out.append(row(f"proxy − {ref} (paired)", [a.ttft - b.ttft for a, b in pairs],
                           [a.total - b.total for a, b in pairs]))

        # concurrent: each way in turn, several rounds
        conc: dict[str, list[Sample]] = {m: [] for m in MODES}
        per_worker = max(1, args.concurrent_requests // args.concurrency // args.rounds)
        cpu0 = cpu_of(p, d, proxy)
        for _ in range(args.rounds):
            for mode in MODES:
                way = ways[mode]

                async def worker(way: Callable[[], Awaitable[Sample]] = way, mode: str = mode) -> None:
                    for _ in range(per_worker):
                        conc[mode].append(await way())

                await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        n_conc = len(conc["through proxy"])
        cpu_conc = per_request(cpu0, cpu_of(p, d, proxy), n_conc)
        out.append("")
        out.append(f"concurrent: {args.concurrency} clients at once, {n_conc} requests each way over {args.rounds} "
                   "rounds")
        out.append(HEADER)
        for mode in MODES:
            out.append(row(mode, [s.ttft for s in conc[mode]], [s.total for s in conc[mode]]))
        for ref in MODES[:2]:
            a, b = conc["through proxy"], conc[ref]
            out.append(f"  {'proxy − ' + ref + ' (percentiles)':<34} {'':>5}"
                       f" {ms(percentile([s.ttft for s in a], 50) - percentile([s.ttft for s in b], 50))}"
                       f" {ms(percentile([s.ttft for s in a], 99) - percentile([s.ttft for s in b], 99))}"
                       f" {ms(percentile([s.total for s in a], 50) - percentile([s.total for s in b], 50))}"
                       f" {ms(percentile([s.total for s in a], 99) - percentile([s.total for s in b], 99))}")

        # CPU per relayed chunk: the slope between short and long answers, through the proxy and straight to D
        slope: dict[str, float] = {}
        for name, target, child in (("proxy", proxy.url, proxy), ("fake D", d.url, d)):
            per: dict[int, float] = {}
            for tokens in (1, args.slope_tokens):
                b = {**body, "max_tokens": tokens}
                if target == d.url:
                    b = decode_body(b, runner.kv)
                c0 = child.cpu()
                for _ in range(args.slope_requests // 4):
                    await asyncio.gather(*(stream_post(client, target + "/v1/completions", b, runner.rid(),
                                                       time.perf_counter()) for _ in range(4)))
                per[tokens] = (child.cpu() - c0) / (args.slope_requests // 4 * 4)
            slope[name] = (per[args.slope_tokens] - per[1]) / (args.slope_tokens - 1)

        metrics = (await client.get(proxy.url + "/metrics")).text
    internal_sum = float(re.search(r"^disagg_proxy_internal_seconds_sum (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    internal_n = float(re.search(r"^disagg_proxy_internal_seconds_count (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    out.append("")
    out.append("CPU per request, ms (user+system from /proc over a whole phase, ÷ the requests each process served)")
    out.append(f"  {'':<34} {'proxy':>8} {'fake P':>8} {'fake D':>8}   proxy ÷ (P + D)")
    for label, (cp, cd, cx) in (("sequential", cpu_seq), ("concurrent", cpu_conc)):
        out.append(f"  {label:<34} {ms(cx)} {ms(cp)} {ms(cd)}   {cx / (cp + cd):.2f}×" if cp + cd else label)
    out.append(f"  per relayed chunk (slope from 1 to {args.slope_tokens} tokens, 4 streams at a time): proxy "
               f"{slope['proxy'] * 1e6:.0f} µs, the fake decode server producing it {slope['fake D'] * 1e6:.0f} µs")
    out.append(f"  the proxy's own work between reading a body and sending it to decode (parse, rewrite, pick; wall "
               f"time from its /metrics, so on a busy host it includes waits for a CPU): mean "
               f"{internal_sum / internal_n * 1e6:.0f} µs over {internal_n:.0f} requests")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=200, help="sequential requests per way (default 200)")
    ap.add_argument("--concurrency", type=int, default=16, help="concurrent clients (default 16)")
    ap.add_argument("--concurrent-requests", type=int, default=960,
                    help="concurrent-phase requests per way, all rounds together (default 960)")
    ap.add_argument("--rounds", type=int, default=3, help="concurrent rounds, ways interleaved (default 3)")
    ap.add_argument("--tokens", type=int, default=32, help="tokens streamed per request (default 32)")
    ap.add_argument("--token-delay", type=float, default=0.0005, help="seconds between tokens (default 0.0005)")
    ap.add_argument("--prompt-words", type=int, default=1000, help="prompt length in words (default 1000)")
    ap.add_argument("--slope-tokens", type=int, default=200, help="long answers of the per-chunk phase (default 200)")
    ap.add_argument("--slope-requests", type=int, default=100,
                    help="requests per length and target in the per-chunk phase (default 100)")
    ap.add_argument("--warmup", type=int, default=20, help="unmeasured requests per way first (default 20)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="proxy-bench-") as tmp:
        logdir = Path(tmp)
        children: list[Child] = []
        try:
            p = start("prefill", [sys.executable, "-m", "tui.sim.fakepd", "--role", "prefill", "--port", "0"], logdir)
            children.append(p)
            d = start("decode", [sys.executable, "-m", "tui.sim.fakepd", "--role", "decode", "--port", "0",
                                 "--token-delay", str(args.token_delay)], logdir)
            children.append(d)
            proxy = start("proxy", [sys.executable, "-m", "tui.core.proxy", "--port", "0", "--prefill", p.url,
                                    "--decode", d.url], logdir)
            children.append(proxy)
            try:
                import uvloop  # noqa: F401

                loop_name = "uvloop"
            except ImportError:
                loop_name = "asyncio"
            print(f"proxy overhead — {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, httpx "
                  f"{httpx.__version__}, proxy event loop {loop_name}; {args.tokens} tokens "
                  f"{args.token_delay * 1000:g} ms apart, {args.prompt_words}-word prompt; client, fake P, fake D and "
                  "proxy share this host")
            print()
            for line in asyncio.run(run(args, p, d, proxy)):
                print(line)
            access_lines = sum(1 for line in proxy.log.read_text(errors="replace").splitlines()
                               if '"POST /v1/completions' in line)
            print(f"  (the proxy wrote {access_lines} access lines to its log file meanwhile)")
        finally:
            stop(children)
    return 0


if __name__ == "__main__":
    sys.exit(main())
