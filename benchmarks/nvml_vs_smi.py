"""The GPU sampler's readings next to ``nvidia-smi``'s, taken at the same moment, with the differences.

Run on a host with an NVIDIA driver (not the simulated one). For each round the sampler reads every GPU just
before and just after one ``nvidia-smi --query-gpu`` run (nvidia-smi reads somewhere in between, after its own
start-up), and nvidia-smi's value is checked against the nearer of the two. Tolerances (issue 3): memory used
within 1 %, power within 10 %, utilisation within 10 points, clocks exact at rest (within 10 % under load),
temperature within 2 °C; power limit, total memory, memory clock and P-state exact. The processes
(``--query-compute-apps``) must be the same pids with the same memory.

    python benchmarks/nvml_vs_smi.py [--rounds 3] [--interval 1] [--load SECONDS] [--json]

``--load S`` keeps GPU 0 busy with bf16 matrix products (PyTorch) for S seconds while the rounds run, so
utilisation, power and clocks are compared under load as well as at rest. Exit code 0 when every check passes.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.core.host.nvml import NvmlUnavailable, open_nvml  # noqa: E402
from tui.core.telemetry.gpu import GpuSample  # noqa: E402
from tui.core.telemetry.sampler import GpuSampler  # noqa: E402

MIB = 2**20
FIELDS = ["index", "uuid", "name", "driver_version", "pstate", "utilization.gpu", "utilization.memory",
          "memory.used", "memory.total", "power.draw", "power.limit", "temperature.gpu", "clocks.sm", "clocks.mem",
          "clocks_event_reasons.active"]
LEGACY = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}

_LOAD = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1])
print("loaded", flush=True)
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


def query_smi(fields: list[str]) -> tuple[list[dict[str, str]], list[str]]:
    """One ``nvidia-smi --query-gpu`` run; fields this nvidia-smi does not know are dropped (and retried)."""
    fields = list(fields)
    while True:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=False)
        if out.returncode == 0:
            rows = [dict(zip(fields, (c.strip() for c in line.split(",")), strict=False))
                    for line in out.stdout.strip().splitlines()]
            return rows, fields
        bad = next((f for f in fields if f'"{f}"' in out.stdout + out.stderr), None)
        if bad is None:
            raise RuntimeError(f"nvidia-smi failed: {(out.stdout + out.stderr).strip()}")
        if bad in LEGACY and LEGACY[bad] not in fields:
            fields[fields.index(bad)] = LEGACY[bad]
        else:
            fields.remove(bad)


def query_apps() -> list[dict[str, str]]:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30, check=False)
    rows = []
    for line in out.stdout.strip().splitlines():
        parts = [c.strip() for c in line.split(",")]
        if len(parts) >= 4 and parts[1].isdigit():
            rows.append({"gpu_uuid": parts[0], "pid": parts[1], "name": parts[2], "used_memory": parts[3]})
    return rows


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


@dataclass
class Check:
    gpu: int
    field: str
    nvml: Any
    smi: Any
    diff: str
    tolerance: str
    ok: bool


def _closest(smi: float | None, a: float | None, b: float | None) -> float | None:
    options = [x for x in (a, b) if x is not None]
    if smi is None or not options:
        return options[0] if options else None
    return min(options, key=lambda x: abs(x - smi))


def compare(before: GpuSample, after: GpuSample, row: dict[str, str]) -> list[Check]:
    checks: list[Check] = []
    gpu = before.index
    at_rest = (before.util_gpu == 0 and after.util_gpu == 0 and _num(row.get("utilization.gpu")) == 0)

    def add(name: str, ours_a: float | None, ours_b: float | None, smi_text: str | None, tol: str,
            ok_fn: Any) -> None:
        smi = _num(smi_text)
        ours = _closest(smi, ours_a, ours_b)
        if ours is None or smi is None:
            checks.append(Check(gpu, name, ours, smi_text, "n/a", tol, ours is None and smi is None))
            return
        checks.append(Check(gpu, name, round(ours, 3), smi, f"{ours - smi:+.3f}", tol, bool(ok_fn(ours, smi))))

    def mib(x: int | None) -> float | None:
        return None if x is None else x / MIB

    add("memory.used MiB", mib(before.mem_used), mib(after.mem_used), row.get("memory.used"), "1% (min 2 MiB)",
        lambda o, s: abs(o - s) <= max(0.01 * s, 2.0))
    add("memory.total MiB", mib(before.mem_total), mib(after.mem_total), row.get("memory.total"), "exact (±1 MiB)",
        lambda o, s: abs(o - s) <= 1.0)
    add("power.draw W", before.power_w, after.power_w, row.get("power.draw"), "10%",
        lambda o, s: abs(o - s) <= 0.10 * max(s, 1.0))
    add("power.limit W", before.power_limit_w, after.power_limit_w, row.get("power.limit"), "exact (±0.5 W)",
        lambda o, s: abs(o - s) <= 0.5)
    add("utilization.gpu %", before.util_gpu, after.util_gpu, row.get("utilization.gpu"), "10 points",
        lambda o, s: abs(o - s) <= 10)
    add("utilization.memory %", before.util_mem, after.util_mem, row.get("utilization.memory"), "10 points",
        lambda o, s: abs(o - s) <= 10)
    add("temperature.gpu C", before.temp_c, after.temp_c, row.get("temperature.gpu"), "2 C",
        lambda o, s: abs(o - s) <= 2)
    sm_a = float(before.sm_clock_mhz) if before.sm_clock_mhz is not None else None
    sm_b = float(after.sm_clock_mhz) if after.sm_clock_mhz is not None else None
    if at_rest:
        add("clocks.sm MHz (rest)", sm_a, sm_b, row.get("clocks.sm"), "exact", lambda o, s: o == s)
    else:
        add("clocks.sm MHz (load)", sm_a, sm_b, row.get("clocks.sm"), "10%", lambda o, s: abs(o - s) <= 0.1 * s)
    mem_a = float(before.mem_clock_mhz) if before.mem_clock_mhz is not None else None
    add("clocks.mem MHz", mem_a, float(after.mem_clock_mhz) if after.mem_clock_mhz is not None else None,
        row.get("clocks.mem"), "exact", lambda o, s: o == s)
    pstate = row.get("pstate", "")
    add("pstate", float(before.pstate) if before.pstate is not None else None,
        float(after.pstate) if after.pstate is not None else None, pstate[1:] if pstate.startswith("P") else None,
        "exact", lambda o, s: o == s)
    reasons = row.get("clocks_event_reasons.active") or row.get("clocks_throttle_reasons.active")
    if reasons is not None and before.throttle is not None:
        try:
            mask = int(reasons, 16)
        except ValueError:
            mask = -1
        from tui.core.telemetry.gpu import decode_throttle

        smi_names = decode_throttle(mask) if mask >= 0 else (reasons,)
        same = set(smi_names) in (set(before.throttle), set(after.throttle or ()))
        checks.append(Check(gpu, "clock event reasons", ",".join(before.throttle) or "none",
                            ",".join(smi_names) or "none", "same" if same else "differ",
                            "exact at rest" if at_rest else "report only", same or not at_rest))
    return checks


def compare_apps(samples: tuple[GpuSample, ...], apps: list[dict[str, str]]) -> list[Check]:
    ours = {(g.uuid, p.pid): p.memory for g in samples for p in g.processes}
    theirs = {(a["gpu_uuid"], int(a["pid"])): _num(a["used_memory"]) for a in apps}
    checks = []
    for key in sorted(set(ours) | set(theirs)):
        mem = ours.get(key)
        ours_mib = mem / MIB if mem is not None else None
        smi = theirs.get(key)
        ok = key in ours and key in theirs and ours_mib is not None and smi is not None and abs(ours_mib - smi) <= 1
        gpu = next((g.index for g in samples if g.uuid == key[0]), -1)
        checks.append(Check(gpu, f"process {key[1]} MiB", None if ours_mib is None else round(ours_mib, 1), smi,
                            "n/a" if ours_mib is None or smi is None else f"{ours_mib - smi:+.1f}", "same pid, ±1 MiB",
                            ok))
    return checks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between rounds (default 1)")
    ap.add_argument("--load", type=float, default=0.0, metavar="SECONDS",
                    help="run a bf16 matmul load on GPU 0 (PyTorch) and compare under it too")
    ap.add_argument("--json", action="store_true", help="print the checks as JSON")
    args = ap.parse_args()
    if shutil.which("nvidia-smi") is None:
        print("nvidia-smi not found: run this on the GPU host", file=sys.stderr)
        return 2
    try:
        nvml = open_nvml()
    except NvmlUnavailable as exc:
        print(f"NVML unavailable: {exc}", file=sys.stderr)
        return 2
    sampler = GpuSampler(nvml)
    facts = sampler.host_facts()
    sampler.sample()  # first reading: NVLink counters and the 1 Hz tier primed
    phases = [("rest", None)]
    load_proc = None
    if args.load > 0:
        phases.append(("load", args.load))
    all_checks: list[tuple[str, int, Check]] = []
    for phase, seconds in phases:
        if seconds is not None:
            load_proc = subprocess.Popen([sys.executable, "-c", _LOAD, str(seconds + 2 + args.rounds * 3)],
                                         stdout=subprocess.PIPE, text=True)
            assert load_proc.stdout is not None
            load_proc.stdout.readline()
            time.sleep(min(seconds, 5.0))  # let power and clocks settle
        for r in range(args.rounds):
            before = sampler.sample()
            smi_rows, _fields = query_smi(FIELDS)  # nvidia-smi reads between the two samples
            after = sampler.sample()
            apps = query_apps()
            rows = {int(row["index"]): row for row in smi_rows}
            for b, a in zip(before, after, strict=True):
                for c in compare(b, a, rows[b.index]):
                    all_checks.append((phase, r, c))
            for c in compare_apps(after, apps):
                all_checks.append((phase, r, c))
            time.sleep(args.interval)
        if load_proc is not None:
            load_proc.kill()
            load_proc.wait()
            load_proc = None
    driver_rows, _ = query_smi(["driver_version"])
    ok = all(c.ok for _, _, c in all_checks)
    if args.json:
        print(json.dumps({"driver": facts.driver, "smi_driver": driver_rows[0].get("driver_version"),
                          "cuda": facts.cuda_driver, "links": facts.links, "ok": ok,
                          "checks": [{"phase": p, "round": r, **c.__dict__} for p, r, c in all_checks]},
                         default=str, indent=1))
        return 0 if ok else 1
    smi_driver = driver_rows[0].get("driver_version")
    print(f"driver (NVML) {facts.driver}  (nvidia-smi) {smi_driver}  CUDA {facts.cuda_driver}")
    print("topology (sampler):")
    print(facts.topo_text())
    print(f"{'phase':<5} {'rd':>2} {'gpu':>3} {'field':<26} {'sampler':>14} {'nvidia-smi':>14} {'diff':>10} "
          f"{'tolerance':<18} ok")
    for phase, r, c in all_checks:
        nv = "n/a" if c.nvml is None else (f"{c.nvml:g}" if isinstance(c.nvml, float) and math.isfinite(c.nvml)
                                           else str(c.nvml))
        sm = "n/a" if c.smi is None else (f"{c.smi:g}" if isinstance(c.smi, float) else str(c.smi))
        print(f"{phase:<5} {r:>2} {c.gpu:>3} {c.field:<26} {nv:>14} {sm:>14} {c.diff:>10} {c.tolerance:<18} "
              f"{'ok' if c.ok else 'FAIL'}")
    failed = [c for _, _, c in all_checks if not c.ok]
    print(f"{len(all_checks) - len(failed)}/{len(all_checks)} checks within tolerance: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
