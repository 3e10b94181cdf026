"""Scripted event sources for the console's snapshot tests: the same typed events the live sources publish, with
fixed times and figures, so a screen drawn from them is the same on every run (no live timing in a snapshot).

The figures are shaped like a simulated 2× B200 host serving the seed's Qwen3.6-27B as 1P1D under the
prefill-heavy workload (7,500 → 200 tokens, 128 prompts at once).
"""

from __future__ import annotations

import json
from pathlib import Path

from tui.core.bench.events import BenchStarted, BenchTick
from tui.core.events import Event
from tui.core.launch.events import (
    LayoutChanged,
    LogLine,
    ServerExited,
    ServerLaunched,
    ServerPhase,
    ServerReady,
)
from tui.core.playbook import Diagnosis
from tui.core.telemetry.derive import DisaggProof, KvTransferFigures, Quantiles, ServerFigures
from tui.core.telemetry.events import GpuSampled, ServerHealth, ServerMetrics
from tui.core.telemetry.gpu import GpuProcess, GpuSample

T0 = 1_764_590_400.0  # 2025-12-01 12:00:00 UTC: every scripted event is timed from here
GIB = 1024**3
LAYOUT = "20251201-115500-qwen3.6-27b-nvfp4-1p1d-ab12"
SERVERS = (("prefill-0", "prefill", 0, 8100), ("decode-0", "decode", 1, 8200))


def clock() -> float:
    return T0


def gpus(util: tuple[float, float] = (0.0, 0.0), loaded: bool = False, ts: float = T0) -> GpuSampled:
    samples = []
    for i in range(2):
        procs: tuple[GpuProcess, ...] = ()
        if loaded:
            name, role, _, _ = SERVERS[i]
            procs = (GpuProcess(pid=4100 + i, memory=int(162.9 * GIB), kind="compute", name="VLLM::EngineCore",
                                owner=name, role=role, mapping="exact", layout=LAYOUT),)
        u = util[i]
        samples.append(GpuSample(index=i, uuid=f"GPU-5153494d-b200-{i:04d}", name="NVIDIA B200", ts=ts, util_gpu=u,
                                 util_mem=u * 0.6, mem_used=int((163.0 if loaded else 0.0) * GIB),
                                 mem_total=int(179.0 * GIB), power_w=140 + 8.0 * u, power_limit_w=1000.0,
                                 temp_c=35 + 0.25 * u, sm_clock_mhz=1965 if loaded else 342, mem_clock_mhz=3996,
                                 throttle=("gpu_idle",) if u == 0 else (), processes=procs))
    return GpuSampled(ts=ts, host="SIMULATED host sim-ci: 2× NVIDIA B200", simulated=True, gpus=tuple(samples))


def history(util: tuple[float, float], n: int = 60, loaded: bool = True) -> list[Event]:
    """``n`` GPU samples a quarter of a second apart ending at T0, utilisation ramping up (the sparkline)."""
    out: list[Event] = []
    for k in range(n):
        f = min(1.0, (k + 1) / (n * 0.6))
        out.append(gpus((util[0] * f, util[1] * f), loaded=loaded, ts=T0 - (n - 1 - k) * 0.25))
    return out


def launched(status: str = "starting") -> list[Event]:
    ev: list[Event] = [LayoutChanged(ts=T0 - 40, layout_id=LAYOUT, status=status, topology="1p1d",
                                     profile_id="qwen3.6-27b-nvfp4", endpoint="http://127.0.0.1:8000",
                                     simulated=True)]
    for name, role, gpu, port in SERVERS:
        ev.append(ServerLaunched(ts=T0 - 40, layout_id=LAYOUT, server=name, role=role, pid=4000 + gpu,
                                 url=f"http://127.0.0.1:{port}", command=f"vllm serve nvidia/Qwen3.6-27B-NVFP4 --port "
                                 f"{port}", log=f"/state/layouts/{LAYOUT}/{name}.log", gpus=(gpu,),
                                 started=T0 - 40, expected_s=95.0,
                                 expected_source="~95 s (median of 3 earlier starts here)"))
    ev.append(ServerLaunched(ts=T0 - 40, layout_id=LAYOUT, server="proxy", role="proxy", pid=4010,
                             url="http://127.0.0.1:8000", command="disagg-tui proxy", log="proxy.log",
                             started=T0 - 40))
    return ev


LOG = (
    "(APIServer pid=4000) INFO 12-01 11:59:21 [api_utils.py:273] non-default args: {'model_tag': "
    "'nvidia/Qwen3.6-27B-NVFP4', 'port': 8200, 'kv_transfer_config': ...}",
    "(EngineCore pid=4001) INFO 12-01 11:59:23 [gpu_model_runner.py:5160] Starting to load model "
    "nvidia/Qwen3.6-27B-NVFP4...",
    "(EngineCore pid=4001) INFO 12-01 11:59:34 [gpu_model_runner.py:5255] Model loading took 14.00 GiB memory and "
    "10.95 seconds",
    "(EngineCore pid=4001) INFO 12-01 11:59:35 [backends.py:1089] Using cache directory: "
    "/root/.cache/vllm/torch_compile_cache/618d27ad62/rank_0_0/backbone for vLLM's torch.compile",
)


def starting() -> list[Event]:
    """1P1D forty seconds into its start: both servers compiling, the proxy waiting for them."""
    ev = [*history((0.0, 0.0), loaded=True), *launched("starting")]
    for i, line in enumerate(LOG, 1):
        for name, _, _, _ in SERVERS:
            ev.append(LogLine(ts=T0 - 30 + i, server=name, lineno=i, text=line))
    ev += [ServerPhase(ts=T0 - 5, server="prefill-0", phase="compiling", label="torch.compile", progress=0.46,
                       elapsed_s=35.0),
           ServerPhase(ts=T0 - 4, server="decode-0", phase="kv_cache", label="allocating KV cache", progress=0.7,
                       elapsed_s=36.0),
           ServerHealth(ts=T0 - 1, server="proxy", endpoint="http://127.0.0.1:8000", role="proxy", state="dead",
                        status_code=503, latency_ms=1.0)]
    return ev


def _figures(name: str) -> ServerFigures:
    q = Quantiles
    if name == "prefill-0":
        return ServerFigures(ts=T0, span_s=10.0, scrapes=10, running=3, waiting=41, kv_cache_usage=0.031,
                             prompt_tps=38210.0, generation_tps=9.0, ttft=q(40, 3.1, 2.9, 6.2, 9.4))
    return ServerFigures(ts=T0, span_s=10.0, scrapes=10, running=121, waiting=0, kv_cache_usage=0.614,
                         prompt_tps=121.0, generation_tps=11870.0, ttft=q(40, 3.2, 3.0, 7.0, 9.8),
                         tpot=q(500, 0.0061, 0.0060, 0.0079, 0.0089),
                         kv_transfer=KvTransferFigures(transfers=32, transfers_per_s=3.2, bytes=4.7e9,
                                                       bytes_per_s=4.7e8, xfer_time_mean_s=0.096,
                                                       xfer_time_p90_s=0.14, failed_transfers=0,
                                                       failed_notifications=0, expired_requests=0),
                         disagg=DisaggProof(verdict="kv_transfer_ok", external_tokens=239_968, local_compute_tokens=32,
                                            cache_hit_tokens=0, external_share=0.9999,
                                            explanation="100% of prompt tokens arrived over KV transfer"))


def ready_under_load() -> list[Event]:
    """1P1D ready, the prefill-heavy benchmark 68 % through, figures from both servers and the proxy."""
    ev = [*history((86.0, 99.0)), *launched("ready")]
    for name, _, _, _ in SERVERS:
        ev += [ServerPhase(ts=T0 - 10, server=name, phase="ready", label="ready (/health 200)", progress=1.0,
                           elapsed_s=31.0),
               ServerReady(ts=T0 - 10, server=name, url="", startup_s=31.0)]
    ev.append(LayoutChanged(ts=T0 - 9, layout_id=LAYOUT, status="ready", topology="1p1d",
                            profile_id="qwen3.6-27b-nvfp4", endpoint="http://127.0.0.1:8000", simulated=True))
    for i, line in enumerate(LOG, 1):
        ev.append(LogLine(ts=T0 - 30 + i, server="prefill-0", lineno=i, text=line))
    ev.append(LogLine(ts=T0 - 1, server="prefill-0", lineno=len(LOG) + 1, text=(
        "(APIServer pid=4000) INFO 12-01 12:00:55 [loggers.py:257] Engine 000: Avg prompt throughput: 38210.4 "
        "tokens/s, Avg generation throughput: 9.0 tokens/s, Running: 3 reqs, Waiting: 41 reqs")))
    for name, role, _, port in SERVERS:
        ev += [ServerHealth(ts=T0, server=name, endpoint=f"http://127.0.0.1:{port}", role=role, state="up",
                            latency_ms=3.0 if role == "decode" else 12.0, status_code=200, version="0.24.0"),
               ServerMetrics(ts=T0, server=name, endpoint=f"http://127.0.0.1:{port}", role=role,
                             figures=_figures(name))]
    ev.append(ServerHealth(ts=T0, server="proxy", endpoint="http://127.0.0.1:8000", role="proxy", state="up",
                           latency_ms=2.0, status_code=200))
    ev.append(BenchStarted(ts=T0 - 40, run_id="console/1p1d-prefill-heavy-20251201-115920", runner="disagg-tui",
                           topology="1p1d", workload="prefill-heavy", total=128, request_rate="inf",
                           endpoint="http://127.0.0.1:8000"))
    for k in range(1, 121):
        t = k * 0.25
        ramp = min(1.0, k / 40)
        ev.append(BenchTick(ts=T0 - 30 + t, run_id="console/1p1d-prefill-heavy-20251201-115920", phase="run",
                            elapsed_s=t, total=128, sent=128, done=int(87 * k / 120), failed=0,
                            inflight=128 - int(87 * k / 120), output_tps=1403.0 * ramp, ttft_p50_ms=3200.0 * ramp,
                            ttft_p99_ms=9800.0 * ramp, tpot_p50_ms=6.1 + ramp, tpot_p99_ms=8.9 + 2 * ramp,
                            itl_p50_ms=6.0, itl_p99_ms=14.0 * ramp, window_s=10.0, loop_lag_ms=1.2))
    return ev


NVCC_LINE = ("(EngineCore pid=4001) ERROR 12-01 11:59:58 [core.py:1231] RuntimeError: Could not find nvcc and "
             "default cuda_home='/usr/local/cuda' doesn't exist")


def failed() -> list[Event]:
    """decode-0 died during warm-up on a host without nvcc; the playbook's diagnosis is in."""
    ev = [*history((0.0, 0.0), loaded=False), *launched("starting")]
    for i, line in enumerate((*LOG, NVCC_LINE), 1):
        ev.append(LogLine(ts=T0 - 20 + i, server="decode-0", lineno=i, text=line))
    ev += [ServerExited(ts=T0 - 5, server="decode-0", returncode=1, during="warmup", last_lines=(NVCC_LINE,)),
           LayoutChanged(ts=T0 - 4, layout_id=LAYOUT, status="failed", topology="1p1d",
                         profile_id="qwen3.6-27b-nvfp4", endpoint="http://127.0.0.1:8000", simulated=True,
                         note="decode-0 exited with code 1 during startup (warmup)"),
           Diagnosis(ts=T0 - 4, server="decode-0", entry_id="flashinfer-no-nvcc",
                     title="FlashInfer must JIT-compile kernels and finds no nvcc", severity="error", priority=90,
                     line_no=len(LOG) + 1, line=NVCC_LINE,
                     explanation="FlashInfer compiles its sampling (and on Blackwell its attention) kernels on the "
                                 "first batch; without the CUDA toolkit the engine dies in warm-up.",
                     fix="use the Triton attention backend and turn the FlashInfer sampler off",
                     changes=("set VLLM_USE_FLASHINFER_SAMPLER=0", "add --attention-backend TRITON_ATTN"),
                     fixable=True, auto=True)]
    return ev


def write_runs(root: Path) -> None:
    """A finished simulated bake-off on disk (the seed's table as a campaign): results and campaign screens."""
    seed = {("dp2", "decode-heavy"): (8245, 11.4, 13.0, 980), ("tp2", "decode-heavy"): (7655, 12.2, 14.1, 1010),
            ("1p1d", "decode-heavy"): (6023, 14.8, 16.2, 700), ("dp2", "prefill-heavy"): (2230, 32.8, 61.0, 9800),
            ("tp2", "prefill-heavy"): (1545, 44.1, 80.2, 12100), ("1p1d", "prefill-heavy"): (1330, 9.9, 12.0, 16800)}
    shape = {"decode-heavy": (512, 2048), "prefill-heavy": (7500, 200)}
    camp = root / "seed-bakeoff"
    camp.mkdir(parents=True, exist_ok=True)
    (camp / "campaign.json").write_text(json.dumps({
        "name": "seed-bakeoff", "model": "qwen3.6-27b-nvfp4", "topologies": ["dp2", "tp2", "1p1d"],
        "workloads": ["decode-heavy", "prefill-heavy"], "rates": None, "repeat": 1, "seed": 0, "num_prompts": None,
        "goodput": {}, "warmup": -1, "simulated": True, "host": "sim:NVIDIA B200x2 clock 1", "client": "ours",
        "created": T0 - 3600}))
    for (topo, wl), (tps, tpot, p99, ttft) in seed.items():
        d = camp / f"{topo}-{wl}"
        d.mkdir(exist_ok=True)
        isl, osl = shape[wl]
        (d / "run.json").write_text(json.dumps({
            "campaign": "seed-bakeoff", "name": f"{topo}-{wl}", "topology": topo, "workload": wl,
            "request_rate": "inf", "repeat": 1, "status": "complete", "runner": "disagg-tui", "started": T0 - 3000,
            "ended": T0 - 2900, "pid": 0, "model": "nvidia/Qwen3.6-27B-NVFP4",
            "fingerprint": {"simulated": True, "host": "sim:NVIDIA B200x2 clock 1", "model": "qwen3.6-27b-nvfp4",
                            "client": "disagg-tui"}}))
        (d / "workload.json").write_text(json.dumps({"name": wl, "input_len": isl, "output_len": osl,
                                                     "num_prompts": 128, "request_rate": "inf"}))
        (d / "summary.json").write_text(json.dumps({
            "completed": 128, "failed": 0, "total_input_tokens": 128 * isl, "total_output_tokens": 128 * osl,
            "output_throughput": float(tps), "mean_tpot_ms": tpot, "p99_tpot_ms": p99, "mean_ttft_ms": float(ttft),
            "request_throughput": tps / osl, "request_goodput": tps / osl * 0.9, "duration": 128 * osl / tps,
            "max_concurrency": None, "request_rate": "inf", "burstiness": 1.0, "simulated": True}))
