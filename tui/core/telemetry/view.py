"""One telemetry tick as plain data (the ``watch --json`` line, the ``status`` snapshot) and as readable lines.

Every number is JSON-safe (a NaN or infinity becomes null); sizes are bytes, rates bytes or tokens per second,
latencies milliseconds, powers watts. A value that is not available is null, with its reason under
``unavailable``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from tui.core.telemetry.derive import Quantiles, ServerFigures
from tui.core.telemetry.events import GpuSampled
from tui.core.telemetry.gpu import GpuHostFacts, GpuProcess, GpuSample
from tui.core.telemetry.poller import ServerStatus

GIB = 2**30


@dataclass(frozen=True, slots=True)
class HostInfo:
    hostname: str
    simulated: bool
    driver: str | None = None
    cuda: str | None = None

    def label(self, gpu_names: list[str] | tuple[str, ...] = ()) -> str:
        kind = "SIMULATED" if self.simulated else "real"
        names = sorted(set(gpu_names))
        gpus = f"{len(gpu_names)}× {', '.join(names)}" if names else "no GPU read"
        return f"{kind} host {self.hostname}: {gpus}"


def _num(x: float | int | None) -> float | int | None:
    if x is None:
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _ms(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x * 1000.0, 3)


def process_dict(p: GpuProcess) -> dict[str, Any]:
    return {"pid": p.pid, "name": p.name, "memory": p.memory, "kind": p.kind, "owner": p.owner, "role": p.role,
            "rank": p.rank, "tp_rank": p.tp_rank, "dp_rank": p.dp_rank, "mapping": p.mapping}


def gpu_dict(g: GpuSample) -> dict[str, Any]:
    return {
        "index": g.index, "uuid": g.uuid, "name": g.name, "ts": g.ts,
        "utilization_gpu": _num(g.util_gpu), "utilization_memory": _num(g.util_mem),
        "memory_used": g.mem_used, "memory_total": g.mem_total,
        "power_w": _num(g.power_w), "power_limit_w": _num(g.power_limit_w), "temperature_c": _num(g.temp_c),
        "sm_clock_mhz": g.sm_clock_mhz, "mem_clock_mhz": g.mem_clock_mhz, "pstate": g.pstate,
        "throttle": list(g.throttle) if g.throttle is not None else None,
        "pcie_tx_bps": _num(g.pcie_tx_bps), "pcie_rx_bps": _num(g.pcie_rx_bps),
        "nvlink_tx_bps": _num(g.nvlink_tx_bps), "nvlink_rx_bps": _num(g.nvlink_rx_bps),
        "energy_j": _num(g.energy_j),
        "processes": [process_dict(p) for p in g.processes],
        "unavailable": {k: v for k, v in g.unavailable},
    }


def quantiles_dict(q: Quantiles | None) -> dict[str, Any] | None:
    if q is None:
        return None
    return {"count": _num(q.count), "mean_ms": _ms(q.mean), "p50_ms": _ms(q.p50), "p90_ms": _ms(q.p90),
            "p99_ms": _ms(q.p99)}


def figures_dict(f: ServerFigures | None) -> dict[str, Any] | None:
    if f is None:
        return None
    kv = f.kv_transfer
    d = f.disagg
    return {
        "ts": f.ts, "span_s": _num(f.span_s), "scrapes": f.scrapes,
        "requests_running": _num(f.running), "requests_waiting": _num(f.waiting),
        "kv_cache_usage": _num(f.kv_cache_usage), "kv_cache_usage_max": _num(f.kv_cache_usage_max),
        "prefix_cache_hit_rate": _num(f.prefix_cache_hit_rate),
        "prompt_tokens_per_s": _num(f.prompt_tps), "generation_tokens_per_s": _num(f.generation_tps),
        "prompt_tokens_per_s_by_source": None if f.prompt_computed_tps is None else {
            "computed": _num(f.prompt_computed_tps), "cached": _num(f.prompt_cached_tps),
            "kv_transfer": _num(f.prompt_transferred_tps)},
        "requests_per_s": _num(f.requests_per_s), "finished": {k: _num(v) for k, v in f.finished.items()},
        "preemptions": _num(f.preemptions), "preemptions_total": _num(f.preemptions_total),
        "ttft": quantiles_dict(f.ttft), "tpot": quantiles_dict(f.tpot), "itl": quantiles_dict(f.itl),
        "e2e": quantiles_dict(f.e2e), "queue": quantiles_dict(f.queue),
        # what the latency quantiles cover: the last window, or a benchmark run (since, until: epoch seconds)
        "latency_window": "window" if f.latency_since is None else "run",
        "latency_since": f.latency_since, "latency_until": f.latency_until,
        "engines": [{"engine": e.engine, "requests_running": _num(e.running), "requests_waiting": _num(e.waiting),
                     "kv_cache_usage": _num(e.kv_cache_usage), "prompt_tokens_per_s": _num(e.prompt_tps),
                     "generation_tokens_per_s": _num(e.generation_tps)} for e in f.engines],
        "kv_transfer": None if kv is None else {
            "transfers": _num(kv.transfers), "transfers_per_s": _num(kv.transfers_per_s), "bytes": _num(kv.bytes),
            "bytes_per_s": _num(kv.bytes_per_s), "xfer_time_mean_ms": _ms(kv.xfer_time_mean_s),
            "xfer_time_p90_ms": _ms(kv.xfer_time_p90_s), "failed_transfers": _num(kv.failed_transfers),
            "failed_notifications": _num(kv.failed_notifications), "expired_requests": _num(kv.expired_requests),
            "failed_transfers_total": _num(kv.failed_transfers_total), "mb_per_s": _num(kv.mb_per_s)},
        "disaggregation": None if d is None else {
            "verdict": d.verdict, "external_kv_transfer_tokens": _num(d.external_tokens),
            "local_compute_tokens": _num(d.local_compute_tokens), "local_cache_hit_tokens": _num(d.cache_hit_tokens),
            "external_share": _num(d.external_share), "explanation": d.explanation},
        "unavailable": {k: v for k, v in f.unavailable},
    }


def server_dict(st: ServerStatus) -> dict[str, Any]:
    h = st.health
    m = st.metrics
    return {
        "name": st.endpoint.name, "endpoint": st.endpoint.url.rstrip("/"), "role": st.endpoint.role,
        "health": h.state if h is not None else "unknown",
        "latency_ms": _num(round(h.latency_ms, 3)) if h is not None and h.latency_ms is not None else None,
        "status_code": h.status_code if h is not None else None,
        "error": h.error if h is not None else None,
        "since": h.since if h is not None else None,
        "version": st.version, "model": st.model, "max_model_len": st.max_model_len,
        "metrics": figures_dict(m.figures) if m is not None else None,
        "metrics_error": m.error if m is not None else None,
    }


def facts_dict(facts: GpuHostFacts | None) -> dict[str, Any] | None:
    if facts is None:
        return None
    return {"nvml_version": facts.nvml_version, "links": [list(r) for r in facts.links],
            "affinity": [{"index": a.index, "cpus": a.cpus, "numa_node": a.numa_node} for a in facts.affinity]}


def tick_dict(host: HostInfo, sample: GpuSampled | None, statuses: list[ServerStatus], *,
              facts: GpuHostFacts | None = None, layout: dict[str, Any] | None = None,
              now: float | None = None) -> dict[str, Any]:
    gpus = list(sample.gpus) if sample is not None else []
    errors = [sample.error] if sample is not None and sample.error else []
    return {
        "time": now if now is not None else (sample.ts if sample is not None else time.time()),
        "host": {"label": host.label([g.name for g in gpus]), "simulated": host.simulated,
                 "hostname": host.hostname, "driver": host.driver, "cuda": host.cuda,
                 "topology": facts_dict(facts)},
        "layout": layout,
        "gpus": [gpu_dict(g) for g in gpus],
        "servers": [server_dict(st) for st in statuses],
        "errors": errors,
    }


def json_safe(value: Any) -> Any:
    """The same data with every NaN or infinity replaced by None (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def json_line(tick: dict[str, Any]) -> str:
    return json.dumps(json_safe(tick), separators=(",", ":"), allow_nan=False)


# --- readable lines -------------------------------------------------------------------------------------------


def _fmt(x: float | None, spec: str, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:{spec}}{unit}"


def gpu_line(g: dict[str, Any]) -> str:
    used = g["memory_used"]
    total = g["memory_total"]
    mem = (f"{used / GIB:.1f}/{total / GIB:.1f} GiB" if used is not None and total else "mem n/a")
    power = (f"{g['power_w']:.0f}/{g['power_limit_w']:.0f} W" if g["power_w"] is not None and g["power_limit_w"]
             else f"{_fmt(g['power_w'], '.0f', ' W')}")
    throttle = ",".join(t for t in (g["throttle"] or []) if t != "gpu_idle")
    parts = [f"GPU{g['index']} {g['name']}", f"util {_fmt(g['utilization_gpu'], '.0f', '%')}",
             f"mem-util {_fmt(g['utilization_memory'], '.0f', '%')}", mem, power,
             _fmt(g["temperature_c"], ".0f", "°C"),
             f"SM {_fmt(g['sm_clock_mhz'], 'd', ' MHz')}", f"MEM {_fmt(g['mem_clock_mhz'], 'd', ' MHz')}"]
    if throttle:
        parts.append(f"throttle {throttle}")
    if g["nvlink_tx_bps"] is not None:
        parts.append(f"NVLink {g['nvlink_tx_bps'] / 1e9:.2f}/{(g['nvlink_rx_bps'] or 0) / 1e9:.2f} GB/s")
    return "  ".join(parts)


def process_line(p: dict[str, Any]) -> str:
    mem = f"{p['memory'] / GIB:.1f} GiB" if p["memory"] is not None else "mem n/a"
    owner = p["owner"] or "not ours"
    rank = f" {p['rank']}" if p["rank"] else ""
    role = f" ({p['role']})" if p["role"] else ""
    return f"    pid {p['pid']} {p['name'] or '?'}  {mem}  {owner}{role}{rank}  [{p['mapping']}]"


def server_line(s: dict[str, Any]) -> str:
    lat = f" {s['latency_ms']:.1f} ms" if s["latency_ms"] is not None else ""
    head = f"{s['name']} ({s['role']}) {s['endpoint']}  {s['health'].upper()}{lat}"
    if s["error"] and s["health"] != "up":
        head += f" — {s['error']}"
    m = s["metrics"]
    if not m:
        return head
    parts = [head, f"run {_fmt(m['requests_running'], '.0f')} wait {_fmt(m['requests_waiting'], '.0f')}"]
    if m["kv_cache_usage"] is not None:
        parts.append(f"KV {m['kv_cache_usage'] * 100:.1f}%")
    by = m.get("prompt_tokens_per_s_by_source")
    if by is not None and by["kv_transfer"]:  # the prompts that arrived by transfer are no work of its own
        parts.append(f"prompt {_fmt(by['computed'], '.0f')} computed + {_fmt(by['kv_transfer'], '.0f')} by KV "
                     "transfer tok/s")
    else:
        parts.append(f"prompt {_fmt(m['prompt_tokens_per_s'], '.0f')} tok/s")
    parts.append(f"gen {_fmt(m['generation_tokens_per_s'], '.0f')} tok/s")
    over = " (the run)" if m.get("latency_window") == "run" else ""
    for key, label in (("ttft", "TTFT"), ("itl", "ITL")):
        q = m[key]
        if q and q["p50_ms"] is not None:
            parts.append(f"{label}{over} p50 {q['p50_ms']:.0f} p99 {q['p99_ms']:.0f} ms")
    kv = m["kv_transfer"]
    if kv is not None:
        parts.append(f"KV xfer {_fmt(kv['transfers_per_s'], '.1f')}/s {_fmt(kv.get('mb_per_s'), ',.1f')} MB/s "
                     f"{_fmt(kv['bytes_per_s'], '.2e')} B/s"
                     + (f" FAILED {kv['failed_transfers']:.0f}" if kv["failed_transfers"] else ""))
    d = m["disaggregation"]
    if d is not None:
        parts.append(f"disagg {d['verdict']}")
    return "  ".join(parts)


def layout_line(lay: dict[str, Any]) -> str:
    """``layout ID: degraded (exited: decode-0) — 1p1d of qwen3-8b``."""
    exited = lay.get("exited") or []
    return (f"layout {lay['id']}: {lay['status']}" + (f" (exited: {', '.join(exited)})" if exited else "")
            + f" — {lay['topology']} of {lay['profile']}")


def tick_lines(tick: dict[str, Any], *, show_layout: bool = True) -> list[str]:
    """A tick as lines; ``show_layout=False`` for a caller that has printed the layout already (``status``)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(tick["time"])) + f".{int(tick['time'] * 1000) % 1000:03d}"
    host = tick["host"]
    lines = [f"[{stamp}] {host['label']}"]
    if show_layout and tick.get("layout"):
        lines.append("  " + layout_line(tick["layout"]))
    for g in tick["gpus"]:
        lines.append("  " + gpu_line(g))
        lines.extend(process_line(p) for p in g["processes"])
    for s in tick["servers"]:
        lines.append("  " + server_line(s))
    lines.extend(f"  error: {e}" for e in tick["errors"])
    return lines
