"""Our load generator against the real ``vllm bench serve``, on the same simulated vLLM server and workloads.

The simulated layout (``tui.sim.vllm``, real-time token pacing by its calibrated performance model) is brought up
through the supervisor, then for each workload both clients run at saturation, in alternating order: the real tool
through our ``vllm bench serve`` runner (``tui.core.bench.vllmbench``), ours through ``run_bench``. The table shows
output throughput, mean/median TPOT and mean TTFT side by side with the ratio ours/vllm (target: within 3 %).
Two runs of the same real server differ by ~2 % (fixtures ``bench/`` vs ``rerun/bench/``), which bounds what
any ratio here can say. Mean TTFT with every request sent at once is the touchiest figure: whether the first few
requests get a prefill step of their own is a race at the server, and each tool runs several times in alternating
order. Each run's send span (first to last request out) is printed: on an H200 host ours gets 128 requests out in
2–3 ms, vllm bench's client in 13–17 ms, and the server then takes vllm's burst in one more short prefill step,
which puts its mean TTFT ~3.5 % above ours at 512-token prompts (every other figure within 0.5 %).
``--ours-span-ms 15`` spreads our burst over as long, and the means met (960.5 vs 960.9 ms on the H200).
Both tools warm up (ours automatically, vllm bench with as many requests as the run sends: a client that
opens its connections inside the burst adds their setup to every TTFT, ~5 % for vllm bench's client at 512-token
prompts on the simulator). vllm bench's warm-up sends its first prompt N times, which leaves that prompt in the
prefix cache and takes a whole prefill off its run (~3 % of the mean TTFT at 7,500-token prompts), so the
simulated server runs with ``--no-enable-prefix-caching``; against a real server, start it so. Every run sends
prompts of its own (a seed per repeat): with prefix caching on, the cache would otherwise serve a repeat from the
run before (seen on the H200: mean TTFT 1.0 s, then 0.25 s). Both tools send text prompts, aligned to the server's
tokenizer; vLLM 0.24 serves token-id prompts measurably slower (2.6 % in TTFT at 7,500 tokens on the H200).

    python benchmarks/bench_vs_vllm.py [--num-prompts 64] [--workloads 512x2048,7500x200] [--vllm PATH]

Against a server that is already up (a real vLLM on a GPU host, as ``../shared/tools/device-vllm/`` starts one on
127.0.0.1:8100 serving ``dummy-qwen3-8b``), skip the simulated layout and name the vLLM command:

    python benchmarks/bench_vs_vllm.py --endpoint http://127.0.0.1:8100 --num-prompts 128 --repeat 3 \
        --vllm-cmd "python3 -m vllm.entrypoints.cli.main" --tokenizer /tmp/model

(start that server with ``--no-enable-prefix-caching``, e.g. ``disagg-tui up ... --arg=--no-enable-prefix-caching``)

Needs vLLM 0.24 in its own venv (``/tmp/vllmenv``: ``python3 -m venv /tmp/vllmenv && /tmp/vllmenv/bin/pip install
vllm==0.24.0``); its tokenizer is the fixtures' model folder. This machine's cores are shared: the load average is
printed before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import socket
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KEYS = (("output_throughput", "output tok/s", ",.0f"), ("mean_tpot_ms", "mean TPOT ms", ".2f"),
        ("median_tpot_ms", "median TPOT ms", ".2f"), ("mean_ttft_ms", "mean TTFT ms", ",.1f"),
        ("p99_tpot_ms", "p99 TPOT ms", ".2f"), ("mean_itl_ms", "mean ITL ms", ".2f"))
TOKENIZER = ROOT / "tests" / "fixtures" / "vllm-0.24.0-h200" / "model"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def main_async(a: argparse.Namespace) -> int:
    from tui.core.bench.dataset import run_seed
    from tui.core.bench.runner import BenchOptions, BenchTarget, run_bench
    from tui.core.bench.vllmbench import run_vllm_bench
    from tui.core.events import EventBus
    from tui.core.host.base import HostOptions
    from tui.core.launch import lifecycle
    from tui.core.models import Catalog, Workload
    from tui.core.plan.planner import PlanOptions, plan
    from tui.sim.host import SimHost

    cat = Catalog.load()
    profile = cat.model(a.model)
    bus = EventBus()
    served = profile.served_name
    record = None
    if a.endpoint:
        endpoint, where = a.endpoint.rstrip("/"), f"the server at {a.endpoint}"
    else:
        host = SimHost(HostOptions(sim=True, sim_gpu=a.gpu, sim_gpus=a.gpus, sim_startup_s=1.0, sim_clock=1.0))
        launch = plan(profile, a.topology, host.facts,
                      PlanOptions(port=free_port(), server_base_port=free_port(), side_channel_base=free_port(),
                                  extra_args=() if a.prefix_caching else ("--no-enable-prefix-caching",)))
        print(f"bringing up {a.topology} of {profile.id} on simulated {a.gpus}× {a.gpu} ...", flush=True)
        record = await lifecycle.bring_up(profile, launch, host, bus)
        endpoint, served = record.endpoint, launch.served_name
        where = f"{a.topology} of {profile.id} on simulated {a.gpu}"
    vllm_cmd = a.vllm_cmd.split() if a.vllm_cmd else [str(a.vllm)]
    rows = []
    cache_warned = False
    try:
        for i, spec in enumerate(a.workloads.split(",")):
            in_len, out_len = (int(x) for x in spec.lower().split("x"))
            wl = Workload(name=f"random-{in_len}x{out_len}", input_len=in_len, output_len=out_len,
                          num_prompts=a.num_prompts)
            results: dict[str, list[dict[str, float]]] = {"vllm": [], "ours": []}
            if a.warmups == 0:
                # both tools start cold (no warm-up of their own): one discarded run warms the server first
                print(f"  {wl.name}: warming the server (discarded run) ...", flush=True)
                prime = wl.with_overrides(seed=run_seed(0, repeat=999 + 1000 * i))
                await run_bench(BenchOptions(workload=prime, model=served, vocab_size=profile.shape.vocab_size),
                                BenchTarget(endpoint=endpoint, topology=a.topology, layout=record,
                                            campaign="bench-vs-vllm-prime", runs_root=Path(a.runs)))
            for rep in range(a.repeat):
                # prompts of their own for every run (both tools): vLLM's prefix cache would otherwise serve a
                # repeat's prompts from the run before and cut its TTFT by ~4x (seen on the H200)
                wl = wl.with_overrides(seed=run_seed(0, repeat=rep + 1 + 1000 * i))
                opts = BenchOptions(workload=wl, model=served, vocab_size=profile.shape.vocab_size)
                order = ("vllm", "ours") if (i + rep) % 2 == 0 else ("ours", "vllm")
                for who in order:
                    target = BenchTarget(endpoint=endpoint, topology=a.topology, layout=record,
                                         campaign="bench-vs-vllm", runs_root=Path(a.runs), repeat=rep + 1)
                    print(f"  {wl.name}: {who} (run {rep + 1}/{a.repeat}) ...", flush=True)
                    if who == "vllm":
                        warm = a.vllm_warmups if a.vllm_warmups is not None else (
                            a.num_prompts if a.warmups is None else a.warmups)
                        vopts = BenchOptions(workload=wl, model=served, warmup=warm)
                        run = await run_vllm_bench(vllm_cmd, vopts, target, str(a.tokenizer))
                    else:
                        ours = opts
                        if a.ours_span_ms:  # the burst spread evenly over this long, as a slower client sends it
                            ours = replace(opts, workload=wl.with_overrides(
                                request_rate=a.num_prompts / (a.ours_span_ms / 1000), burstiness=math.inf))
                        run = await run_bench(replace(ours, warmup=-1 if a.warmups is None else a.warmups), target)
                        if (run.meta.prefix_cache or {}).get("queries") and a.endpoint and not cache_warned:
                            cache_warned = True
                            print("    note: this server caches prefixes, and vllm bench's warm-up (its first prompt, "
                                  "N times) leaves that prompt cached for its run: serve with "
                                  "--no-enable-prefix-caching for a like-for-like comparison", flush=True)
                    results[who].append(run.summary)
                    got = run.summary
                    flags = "  flags: " + ",".join(run.meta.flags) if run.meta.flags else ""
                    starts = [r.start for r in run.records()]
                    span = f"  send span {1000 * (max(starts) - min(starts)):.1f} ms" if starts else ""
                    print("    " + "  ".join(f"{title} {got[key]:{fmt}}" for key, title, fmt in KEYS
                                             if got.get(key) is not None) + span + flags, flush=True)
            rows.append((wl.name, results))
    finally:
        if record is not None:
            await lifecycle.tear_down(record, bus)
    from tui.core.bench.stats import confidence_interval

    print(f"\n{where}, {a.num_prompts} prompts at once, ignore_eos, "
          f"{a.repeat} run(s) of each tool in alternating order: mean ± 95% CI; ratio = ours / vllm bench serve")
    print(f"{'workload':<18} {'metric':<16} {'vllm bench':>20} {'ours':>20} {'ratio':>7}")
    print("-" * 85)
    worst = 0.0
    for name, res in rows:
        for key, title, fmt in KEYS:
            vs = [r[key] for r in res["vllm"] if r.get(key) is not None]
            os_ = [r[key] for r in res["ours"] if r.get(key) is not None]
            if not vs or not os_:
                continue
            v, o = confidence_interval(vs), confidence_interval(os_)
            ratio = o.mean / v.mean if v.mean else float("nan")
            if key in ("output_throughput", "mean_tpot_ms", "median_tpot_ms", "mean_ttft_ms"):
                worst = max(worst, abs(ratio - 1))
            print(f"{name:<18} {title:<16} {v.text(fmt):>20} {o.text(fmt):>20} {ratio:>7.3f}")
    print(f"\nlargest deviation of the means on the four compared figures: {worst:.1%} (target ≤ 3%)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="dummy-qwen3-8b")
    ap.add_argument("--topology", default="tp1")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--workloads", default="512x2048,7500x200")
    ap.add_argument("--vllm", type=Path, default=Path("/tmp/vllmenv/bin/vllm"))
    ap.add_argument("--vllm-cmd", help="the vllm command as words (instead of --vllm), e.g. "
                                       "'python3 -m vllm.entrypoints.cli.main'")
    ap.add_argument("--tokenizer", type=Path, default=TOKENIZER, help="tokenizer folder for vllm bench")
    ap.add_argument("--endpoint", help="compare against this running server instead of a simulated layout")
    ap.add_argument("--warmups", type=int, default=None,
                    help="warm-up requests of both tools (default: ours automatic, vllm bench as many as the run "
                         "sends, so both start with warm connections; 0: both start cold, after one discarded run "
                         "has warmed the server)")
    ap.add_argument("--prefix-caching", action="store_true",
                    help="leave the simulated server's prefix caching on (by default it is off: vllm bench's warm-up "
                         "sends its first prompt N times, which leaves it cached and takes a whole prefill off its "
                         "run, ~3 %% of the mean TTFT at 7,500-token prompts)")
    ap.add_argument("--vllm-warmups", type=int, default=None,
                    help="vllm bench's --num-warmups alone (e.g. the prompt count, so that both clients start the "
                         "run with a warm pool of that many connections, as ours does after its warm-up burst)")
    ap.add_argument("--ours-span-ms", type=float, default=0.0,
                    help="send our burst evenly over this many ms instead of at once (vllm bench's client takes "
                         "13-17 ms to get 128 requests out on an H200 host, ours ~3 ms: with this the server sees "
                         "the same arrival pattern from both)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each tool per workload (alternating order)")
    ap.add_argument("--keep", type=Path, help="keep both tools' runs (records included) in this directory")
    a = ap.parse_args()
    if not a.vllm_cmd and not a.vllm.exists():
        print(f"no vllm at {a.vllm}: install vLLM 0.24 there (see this script's docstring)", file=sys.stderr)
        return 2
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DISAGG_TUI_STATE_DIR"] = str(Path(tmp) / "state")  # the simulated GPUs and layout: private
        a.runs = str(a.keep or Path(tmp) / "runs")
        code = asyncio.run(main_async(a))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return code


if __name__ == "__main__":
    sys.exit(main())
