"""Preflight: what must hold on this host before a plan is launched. Each check passes, warns or fails with one line.

This module holds the checks every launch runs (ports free, GPUs free, nvcc, NIXL, vLLM version); ``doctor``
(the playbook's preflight) adds host-wide checks on top of the same :class:`Check` values. Blocking (sockets,
NVML): run off the event loop.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tui.core import netaddr
from tui.core.plan.hostfacts import HostFacts
from tui.core.plan.planner import LaunchPlan

PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str  # pass | warn | fail
    reason: str

    def line(self) -> str:
        mark = {PASS: "ok  ", WARN: "WARN", FAIL: "FAIL"}[self.status]
        return f"[{mark}] {self.name}: {self.reason}"

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "reason": self.reason}


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (we can bind it without SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    # a listener with SO_REUSEPORT (another vLLM) does not stop a plain bind on some kernels: try to connect too
    with socket.socket(family, socket.SOCK_STREAM) as c:
        c.settimeout(0.2)
        target = netaddr.connect_host(host)
        with contextlib.suppress(OSError):
            if c.connect_ex((target, port)) == 0:
                return False
    return True


def only_time_wait(port: int) -> bool:
    """True when the sockets on local ``port`` are all connections in TIME-WAIT (Linux ``/proc/net/tcp``): no
    listener, only what a closed one left. They block a bind only when that listener lacked SO_REUSEADDR, and
    clear within ~60 s."""
    states: list[str] = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name, encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            with contextlib.suppress(IndexError, ValueError):
                if int(cols[1].rsplit(":", 1)[1], 16) == port:
                    states.append(cols[3])
    return bool(states) and all(st == "06" for st in states)


def check_ports(plan: LaunchPlan) -> list[Check]:
    out: list[Check] = []
    busy: list[str] = []
    # a headless part (engines of data parallel across hosts) binds no HTTP port here: its URL is the head's
    entries: list[tuple[str, str, int]] = [(s.name, s.host, s.port) for s in plan.servers if s.role != "headless"]
    if plan.proxy is not None:
        entries.append(("proxy", plan.proxy.host, plan.proxy.port))
    for s in plan.servers:
        side_host = s.env_dict().get("VLLM_NIXL_SIDE_CHANNEL_HOST", "127.0.0.1")
        entries += [(f"{s.name} NIXL side channel", side_host, p) for p in s.side_channel_ports()]
    for name, host, port in entries:
        try:
            free = port_free(host, port)
        except OSError as exc:  # a host name that does not resolve, an address not on this machine
            out.append(Check("ports", FAIL, f"cannot bind {host}:{port} ({name}): {exc}"))
            return out
        if not free:
            why = (": only connections in TIME-WAIT, left by a listener without SO_REUSEADDR; free within ~60 s"
                   if only_time_wait(port) else "")
            busy.append(f"{port} ({name}{why})")
    if busy:
        out.append(Check("ports", FAIL, f"in use: {', '.join(busy)}"))
    else:
        out.append(Check("ports", PASS, "free: " + ", ".join(str(p) for _, _, p in entries)))
    return out


def check_gpus_free(plan: LaunchPlan, nvml: Any, *, threshold_mib: int = 2048) -> list[Check]:
    """GPUs of the plan hold no more than ``threshold_mib`` of memory already (a previous layout, another job)."""
    taken = []
    for idx in plan.gpus:
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(idx)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
        except Exception as exc:  # noqa: BLE001 - reported as a warning, not a crash
            return [Check("gpu memory", WARN, f"could not read GPU {idx}: {exc}")]
        used = int(mem.used) // 2**20
        if used > threshold_mib:
            taken.append(f"GPU {idx} has {used / 1024:.1f} GiB in use")
    if taken:
        return [Check("gpu memory", FAIL, "; ".join(taken) + " (stop what holds it, or pick other GPUs)")]
    return [Check("gpu memory", PASS, f"GPU {','.join(map(str, plan.gpus))} free")]


def check_toolchain(facts: HostFacts) -> Check:
    t = facts.toolchain
    if t.nvcc_on_path:
        return Check("nvcc", PASS, f"{t.nvcc_on_path} on PATH")
    if t.cuda_home is not None:
        if t.nvcc_in_cuda_home:
            return Check("nvcc", PASS, f"{t.nvcc_in_cuda_home} (CUDA_HOME)")
        return Check("nvcc", WARN, f"CUDA_HOME={t.cuda_home} has no bin/nvcc: FlashInfer JIT would fail; the plan "
                                   "turns the FlashInfer sampler off")
    if t.nvcc_in_default:
        return Check("nvcc", WARN, f"{t.nvcc_in_default} exists but is not on PATH and CUDA_HOME is unset: the first "
                                   "start may JIT-compile FlashInfer kernels silently for minutes")
    return Check("nvcc", WARN, "no nvcc: the plan turns the FlashInfer sampler off (and uses Triton attention on "
                               "Blackwell)")


def check_vllm(facts: HostFacts, plan: LaunchPlan | None = None) -> list[Check]:
    out: list[Check] = []
    v = facts.vllm
    if v is None or not v.found:
        out.append(Check("vllm", FAIL, (v.error if v and v.error else "vllm not found") +
                         " (hint: --vllm /path/to/venv/bin/vllm, or pip install 'disagg-tui[vllm]')"))
        return out
    if v.version is None:
        out.append(Check("vllm", WARN, f"{v.resolved}: version unknown"))
    elif not v.version_matches:
        out.append(Check("vllm", WARN, f"{v.version} at {v.resolved}; checked with 0.24.0: flags and log texts "
                                       "may differ"))
    else:
        out.append(Check("vllm", PASS, f"{v.version} at {v.resolved}"))
    if plan is not None and (plan.proxy is not None or any(s.kv_role for s in plan.servers)):
        if v.nixl:
            out.append(Check("nixl", PASS, f"nixl {v.nixl} in vLLM's environment"))
        else:
            out.append(Check("nixl", FAIL, "nixl is not installed in vLLM's environment: a disaggregated layout "
                                           "cannot move KV cache (hint: pip install nixl into that venv)"))
    return out


def preflight(plan: LaunchPlan, facts: HostFacts, nvml: Any | None) -> list[Check]:
    checks: list[Check] = []
    checks += check_vllm(facts, plan)
    checks.append(check_toolchain(facts))
    checks += check_ports(plan)
    if nvml is not None:
        checks += check_gpus_free(plan, nvml)
    return checks


def failed(checks: Iterable[Check]) -> list[Check]:
    return [c for c in checks if c.status == FAIL]
