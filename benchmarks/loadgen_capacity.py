"""How many streamed tokens per second the load generator sustains on one core, and how exact its TPOT is.

Capacity: the stub server (``tui.sim.stubserver --mode fast``, 32 SSE events per write) runs pinned to one core;
each client runs pinned to the other, against the same stub, in the same run:

- ours: the real worker process (``tui.core.bench.worker``) started by ``run_bench``; the parent (which reads
  ticks and journals records) sits on the stub's core (``PARENT_CPU=0`` puts it on the client's);
- ``vllm bench serve`` 0.24's client, when ``/tmp/vllmenv`` (or ``--vllm``) exists;
- two reference httpx loops, for scale: one JSON-parsing every chunk, one counting chunks by bytes.

Every client counts every chunk and timestamps every read. Ratios are against vllm bench's client when it ran,
else against the httpx JSON loop.

Accuracy: the stub paces every stream at a fixed 20 ms per token; 1,000 concurrent streams each send an
8,000-token prompt (8 MB of request bodies at once); the measured mean TPOT should be within 2 % of 20 ms.

This machine's 2 cores are shared with other work: the script prints the load average before and after, and
the results vary with it. Run: ``python benchmarks/loadgen_capacity.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.core import paths  # noqa: E402
from tui.core.bench.runner import BenchOptions, BenchTarget, run_bench  # noqa: E402
from tui.core.models import Workload  # noqa: E402

TOKENIZER = ROOT / "tests" / "fixtures" / "vllm-0.24.0-h200" / "model"
CLIENT_CPU, SERVER_CPU = 0, 1
PARENT_CPU = int(os.environ.get("PARENT_CPU", SERVER_CPU))  # the run's parent: reads ticks, journals records


def start_stub(*args: str) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen([*paths.python_module_argv("tui.sim.stubserver"), "--port", "0", "--cpu", str(SERVER_CPU),
                          *args], stdout=subprocess.PIPE, text=True, env=paths.child_env())
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line.startswith("listening on"):
        p.kill()
        raise SystemExit(f"stub did not start: {line!r}")
    return p, line.split()[-1]


async def ours(url: str, streams: int, out_len: int, in_len: int, runs_root: Path) -> dict[str, float]:
    wl = Workload(name="capacity", input_len=in_len, output_len=out_len, num_prompts=streams)
    run = await run_bench(BenchOptions(workload=wl, warmup=0, worker_cpu=CLIENT_CPU, vocab_size=8192,
                                       prompt_format="ids"),  # the stub has no tokenizer
                          BenchTarget(endpoint=url, campaign="capacity", runs_root=runs_root))
    s = run.summary
    return {"tok_s": s["output_throughput"], "cpu": run.meta.client.get("cpu", 0.0), "ok": s["completed"],
            "tokens": s["total_output_tokens"], "mean_tpot_ms": s["mean_tpot_ms"],
            "median_tpot_ms": s["median_tpot_ms"], "mean_ttft_ms": s["mean_ttft_ms"],
            "lag_p99_ms": run.meta.client.get("loop_lag_p99_ms", 0.0)}


def vllm_bench(vllm: Path, url: str, streams: int, out_len: int, in_len: int, tmp: Path) -> dict[str, float]:
    """vllm bench serve pinned to the client core (its threads inherit the affinity)."""
    out = tmp / "vllm.json"
    argv = [str(vllm), "bench", "serve", "--base-url", url, "--model", "stub-model", "--tokenizer", str(TOKENIZER),
            "--dataset-name", "random", "--random-input-len", str(in_len), "--random-output-len", str(out_len),
            "--num-prompts", str(streams), "--ignore-eos", "--save-result", "--result-dir", str(tmp),
            "--result-filename", out.name, "--disable-tqdm"]
    pin = f"import os,sys; os.sched_setaffinity(0,{{{CLIENT_CPU}}}); os.execv(sys.argv[1], sys.argv[1:])"
    proc = subprocess.run([sys.executable, "-c", pin, *argv], capture_output=True, text=True, cwd=tmp, timeout=900,
                          check=False)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"vllm bench serve failed ({proc.returncode}): {proc.stderr[-500:]}")
    d = json.loads(out.read_text())
    return {"tok_s": d["output_throughput"], "cpu": float("nan"), "ok": d["completed"],
            "tokens": d["total_output_tokens"], "mean_tpot_ms": d["mean_tpot_ms"],
            "median_tpot_ms": d["median_tpot_ms"], "mean_ttft_ms": d["mean_ttft_ms"], "lag_p99_ms": float("nan")}


HTTPX_LOOP = r'''
import asyncio, json, os, sys, time
import httpx
os.sched_setaffinity(0, {CPU_ID})
url, streams, out_len, parse = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "json"
body = {"model": "stub-model", "prompt": list(range(32)), "max_tokens": out_len, "stream": True,
        "stream_options": {"include_usage": True}, "ignore_eos": True}
async def one(client):
    n = 0
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        if parse:
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    d = json.loads(line[6:])
                    if d.get("choices"):
                        n += 1; time.perf_counter()
        else:
            async for chunk in r.aiter_bytes():
                time.perf_counter(); n += chunk.count(b'"choices":[{')
    return n
async def main():
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=None, limits=limits) as c:
        t, cpu = time.perf_counter(), time.process_time()
        counts = await asyncio.gather(*(one(c) for _ in range(streams)))
        d = time.perf_counter() - t
        print(json.dumps({"tok_s": sum(counts) / d, "cpu": (time.process_time() - cpu) / d, "tokens": sum(counts)}))
asyncio.run(main())
'''


def httpx_loop(url: str, streams: int, out_len: int, mode: str) -> dict[str, float]:
    code = HTTPX_LOOP.replace("CPU_ID", str(CLIENT_CPU))
    proc = subprocess.run([sys.executable, "-c", code, url, str(streams), str(out_len), mode], capture_output=True,
                          text=True, timeout=600, check=False, env=paths.child_env())
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-500:])
    d = json.loads(proc.stdout)
    return {"tok_s": d["tok_s"], "cpu": d["cpu"], "ok": streams, "tokens": d["tokens"]}


def table(rows: list[tuple[str, dict[str, float]]], ref: str) -> str:
    ref_tps = next(r["tok_s"] for name, r in rows if name == ref)
    lines = [f"{'client (pinned to core ' + str(CLIENT_CPU) + ')':<44} {'tok/s':>11} {'× ' + ref:>22} {'CPU':>6}",
             "-" * 86]
    for name, r in rows:
        cpu = "-" if r["cpu"] != r["cpu"] else f"{r['cpu']:.2f}"
        lines.append(f"{name:<44} {r['tok_s']:>11,.0f} {r['tok_s'] / ref_tps:>22.2f} {cpu:>6}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=8000)
    ap.add_argument("--chunks-per-write", type=int, default=32)
    ap.add_argument("--vllm", type=Path, default=Path("/tmp/vllmenv/bin/vllm"))
    ap.add_argument("--accuracy-streams", type=int, default=1000)
    ap.add_argument("--accuracy-prompt-len", type=int, default=8000)
    ap.add_argument("--accuracy-output-len", type=int, default=250)
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke test of the script)")
    ap.add_argument("--skip-accuracy", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.streams, a.output_len, a.accuracy_streams, a.accuracy_output_len = 32, 2000, 100, 100
    if len(os.sched_getaffinity(0)) < 2:
        print("needs two cores (client on one, server on the other)", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {PARENT_CPU})
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        stub, url = start_stub("--mode", "fast", "--chunks-per-write", str(a.chunks_per_write))
        rows: list[tuple[str, dict[str, float]]] = []
        try:
            have_vllm = a.vllm.exists()
            if have_vllm:
                rows.append(("vllm bench serve 0.24 client", vllm_bench(a.vllm, url, a.streams, a.output_len, 32,
                                                                         tmp)))
            rows.append(("httpx, JSON-parse every chunk", httpx_loop(url, a.streams, a.output_len, "json")))
            rows.append(("httpx, count chunks by bytes", httpx_loop(url, a.streams, a.output_len, "count")))
            rows.append(("disagg-tui load generator (worker process)",
                         asyncio.run(ours(url, a.streams, a.output_len, 32, tmp / "runs"))))
        finally:
            stub.kill()
            stub.wait()
        print(f"\nCapacity: {a.streams} streams × {a.output_len} tokens, stub writing {a.chunks_per_write} chunks "
              f"per write on core {SERVER_CPU}")
        ref = "vllm bench serve 0.24 client" if have_vllm else "httpx, JSON-parse every chunk"
        print(table(rows, ref))
        if not a.skip_accuracy:
            stub, url = start_stub("--mode", "paced", "--ms-per-token", "20")
            try:
                r = asyncio.run(ours(url, a.accuracy_streams, a.accuracy_output_len, a.accuracy_prompt_len,
                                     tmp / "runs"))
                delivered = json.loads(urllib.request.urlopen(url + "/stub/stats", timeout=10).read())
            finally:
                stub.kill()
                stub.wait()
            sent = delivered["delivered_tpot_ms_mean"]
            err = (r["mean_tpot_ms"] - 20.0) / 20.0
            print(f"\nAccuracy: {a.accuracy_streams} concurrent streams × {a.accuracy_prompt_len}-token prompts, "
                  f"{a.accuracy_output_len} tokens each, stub pacing 20 ms/token")
            print(f"{'':<28} {'measured':>10} {'target':>8} {'error':>8}")
            print(f"{'mean TPOT (ms)':<28} {r['mean_tpot_ms']:>10.3f} {20.0:>8.3f} {err:>+8.2%}")
            print(f"{'median TPOT (ms)':<28} {r['median_tpot_ms']:>10.3f} {20.0:>8.3f} "
                  f"{(r['median_tpot_ms'] - 20) / 20:>+8.2%}")
            print(f"{'TPOT the stub delivered':<28} {sent:>10.3f} {20.0:>8.3f} {(sent - 20) / 20:>+8.2%}"
                  "   (its own clock: last − first token sent; > 20 when it fell behind)")
            print(f"{'client vs delivered':<28} {r['mean_tpot_ms']:>10.3f} {sent:>8.3f} "
                  f"{(r['mean_tpot_ms'] - sent) / sent:>+8.2%}")
            print(f"{'completed':<28} {r['ok']:>10.0f} {a.accuracy_streams:>8}")
            print(f"{'client event-loop lag p99 (ms)':<28} {r['lag_p99_ms']:>10.1f}")
            print(f"within 2 %: {'yes' if abs(err) <= 0.02 else 'NO'}")
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
