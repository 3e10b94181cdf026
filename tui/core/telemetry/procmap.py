"""Which server owns a GPU process: by the process tree, never by name.

The state file records, for every server and the proxy, the pid and process group we launched and the pid's
start time. A process NVML reports on a GPU is ours when walking up its parents reaches a recorded pid whose start
time matches (a reused pid is never taken for ours), or when it sits in a recorded process group that is still
led by our server. vLLM's memory lives in the API server's children: ``VLLM::EngineCore`` (TP 1),
``VLLM::Worker_TP<n>`` (TP > 1), ``VLLM::EngineCore_DP<n>`` (DP). Ranks come from the process title
(``/proc/PID/cmdline``; ``/proc/PID/comm`` is cut to 15 characters, ``VLLM::EngineCor``) or, where the title says
nothing, from the server's log, whose lines carry ``(Worker_TP1 pid=N)`` prefixes.

Where the pid is not visible to us (a server in a container, another PID namespace) the owner is *guessed* from
the GPUs each server was given and the memory vLLM would take there (``--gpu-memory-utilization`` × total), and
labelled ``guessed``. Blocking (/proc reads): call from the sampler's thread, never the event loop.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from tui.core.launch.state import LayoutRecord
from tui.core.telemetry.gpu import EXACT, GUESSED, UNKNOWN, GpuProcess

DEFAULT_GMU = 0.92  # vLLM 0.24's --gpu-memory-utilization default (config/cache.py:67)
_TITLE = re.compile(r"VLLM::([A-Za-z_][A-Za-z0-9_]*)")
_RANK = re.compile(r"(?:^|_)(TP|DP)(\d+)")
_LOG_PREFIX = re.compile(rb"\(([A-Za-z_][\w:]*) pid=(\d+)\)")
_LOG_READ_LIMIT = 16 * 2**20


@dataclass(frozen=True, slots=True)
class ServerRef:
    """What the telemetry needs to know about one launched process (server or proxy)."""

    name: str
    role: str  # single | prefill | decode | proxy
    pid: int
    pgid: int
    create_time: float
    log: str = ""
    gpus: tuple[int, ...] = ()
    tp: int = 1
    dp: int = 1
    gpu_memory_utilization: float = DEFAULT_GMU
    started: float = 0.0
    url: str = ""
    layout: str = ""


def _flag_value(argv: Sequence[str], *names: str) -> str | None:
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def _as_int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def refs_from_layout(layout: LayoutRecord) -> tuple[ServerRef, ...]:
    """Every recorded process of a layout, with TP/DP, GPUs and memory share from its plan."""
    plan_servers: dict[str, dict[str, Any]] = {s.get("name", ""): s for s in layout.plan.get("servers", [])}
    out = []
    for p in layout.processes:
        spec = plan_servers.get(p.name, {})
        argv = list(p.argv or spec.get("argv", []))
        tp = int(spec.get("tp") or _as_int(_flag_value(argv, "--tensor-parallel-size", "-tp"), 1))
        dp = int(spec.get("dp") or _as_int(_flag_value(argv, "--data-parallel-size", "-dp"), 1))
        gmu_text = _flag_value(argv, "--gpu-memory-utilization")
        try:
            gmu = float(gmu_text) if gmu_text is not None else DEFAULT_GMU
        except ValueError:
            gmu = DEFAULT_GMU
        gpus = tuple(int(g) for g in (p.gpus or spec.get("gpus") or ()))
        if not gpus:
            cvd = dict(spec.get("env", {})).get("CUDA_VISIBLE_DEVICES", "")
            gpus = tuple(int(g) for g in cvd.split(",") if g.strip().isdigit())
        out.append(ServerRef(name=p.name, role=p.role, pid=p.pid, pgid=p.pgid, create_time=p.create_time,
                             log=p.log, gpus=gpus, tp=max(tp, 1), dp=max(dp, 1), gpu_memory_utilization=gmu,
                             started=p.started, url=p.url, layout=layout.id))
    return tuple(out)


def ranks_from_name(proc_name: str) -> tuple[int | None, int | None]:
    """(tp_rank, dp_rank) from ``Worker_TP1``, ``EngineCore_DP0``, ``Worker_DP1_TP0`` …"""
    tp = dp = None
    for kind, num in _RANK.findall(proc_name):
        if kind == "TP":
            tp = int(num)
        else:
            dp = int(num)
    return tp, dp


class LogPids:
    """pid → vLLM process name (``Worker_TP1``) from the ``(Name pid=N)`` prefixes of one server's log.

    Read incrementally (only the bytes appended since the last read), at most once a second.
    """

    def __init__(self, path: str, *, clock: Callable[[], float] = time.monotonic, min_interval_s: float = 1.0
                 ) -> None:
        self.path = path
        self.offset = 0
        self.names: dict[int, str] = {}
        self._clock = clock
        self._min_interval = min_interval_s
        self._last_read = -1e18

    def lookup(self, pid: int) -> str | None:
        name = self.names.get(pid)
        if (name is None or not _RANK.search(name)) and self._clock() - self._last_read >= self._min_interval:
            self.refresh()
            name = self.names.get(pid)
        return name

    def refresh(self) -> None:
        self._last_read = self._clock()
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < self.offset:  # rotated or truncated
                    self.offset = 0
                    self.names.clear()
                fh.seek(self.offset)
                data = fh.read(_LOG_READ_LIMIT)
        except OSError:
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        chunk = data[: end + 1]
        self.offset += len(chunk)
        for m in _LOG_PREFIX.finditer(chunk):
            name = m.group(1).decode("ascii", "replace")
            pid = int(m.group(2))
            # the most specific name wins: "Worker" before distributed init, then "Worker_TP1"
            if pid not in self.names or _RANK.search(name) or not _RANK.search(self.names[pid]):
                self.names[pid] = name


@dataclass(frozen=True, slots=True)
class _Resolved:
    ref: ServerRef | None
    title: str  # "VLLM::Worker_TP1", or the process name
    visible: bool  # the pid exists in our PID namespace
    checked: float
    create_time: float | None


def process_title(proc: psutil.Process) -> str:
    """``VLLM::Worker_TP1`` from the command line (setproctitle), else the (possibly truncated) name."""
    try:
        cmd = proc.cmdline()
    except (psutil.Error, OSError):
        cmd = []
    m = _TITLE.search(" ".join(cmd)) if cmd else None
    if m:
        return "VLLM::" + m.group(1)
    try:
        name = proc.name()
    except (psutil.Error, OSError):
        name = ""
    if name:
        return name
    return os.path.basename(cmd[0]) if cmd else ""


class ProcessOwners:
    """Maps the pids NVML reports on each GPU to servers; cheap per sample (results cached per pid)."""

    def __init__(self, refs: Callable[[], Sequence[ServerRef]] | Sequence[ServerRef] = (), *,
                 clock: Callable[[], float] = time.monotonic, revalidate_s: float = 5.0,
                 tolerance_s: float = 1.0) -> None:
        self._refs_source = refs if callable(refs) else (lambda: tuple(refs))
        self._clock = clock
        self._revalidate = revalidate_s
        self._tolerance = tolerance_s
        self._cache: dict[int, _Resolved] = {}
        self._logs: dict[str, LogPids] = {}
        self._refs: tuple[ServerRef, ...] = ()

    # --- public -----------------------------------------------------------------------------------------------
    def refs(self) -> tuple[ServerRef, ...]:
        refs = tuple(self._refs_source())
        if refs != self._refs:
            self._refs = refs
            self._cache.clear()
            self._logs = {r.log: self._logs.get(r.log) or LogPids(r.log, clock=self._clock)
                          for r in refs if r.log}
        return self._refs

    def assign(self, gpu_index: int, gpu_total: int | None,
               procs: Sequence[tuple[int, int | None, str]]) -> tuple[GpuProcess, ...]:
        """(pid, memory bytes, kind) of one GPU → processes with owner, role, ranks and how they were mapped."""
        refs = self.refs()
        out: list[GpuProcess | None] = []
        pending: list[tuple[int, int, int | None, str, str]] = []  # (slot, pid, mem, kind, title)
        for pid, mem, kind in procs:
            res = self._lookup(pid, refs)
            if res.ref is not None:
                out.append(self._exact(res, pid, mem, kind, gpu_index))
            else:
                pending.append((len(out), pid, mem, kind, res.title))
                out.append(None)
        if pending:
            exact_owners = {p.owner for p in out if p is not None}
            for slot, proc in self._guess(gpu_index, gpu_total, pending, refs, exact_owners):
                out[slot] = proc
        return tuple(p for p in out if p is not None)

    # --- exact ------------------------------------------------------------------------------------------------
    def _lookup(self, pid: int, refs: tuple[ServerRef, ...]) -> _Resolved:
        now = self._clock()
        hit = self._cache.get(pid)
        if hit is not None and now - hit.checked < self._revalidate:
            return hit
        if hit is not None and hit.create_time is not None:
            try:  # same process still? then only the timestamp moves
                if abs(psutil.Process(pid).create_time() - hit.create_time) <= 1e-6:
                    res = _Resolved(hit.ref, hit.title, hit.visible, now, hit.create_time)
                    self._cache[pid] = res
                    return res
            except (psutil.Error, OSError):
                pass
        res = self._resolve(pid, refs, now)
        self._cache[pid] = res
        if len(self._cache) > 4096:
            self._cache = {k: v for k, v in self._cache.items() if now - v.checked < self._revalidate}
        return res

    def _verified(self, proc: psutil.Process, ref: ServerRef) -> bool:
        try:
            return abs(proc.create_time() - ref.create_time) <= self._tolerance
        except (psutil.Error, OSError):
            return False

    def _resolve(self, pid: int, refs: tuple[ServerRef, ...], now: float) -> _Resolved:
        try:
            proc = psutil.Process(pid)
            ctime = proc.create_time()
        except (psutil.Error, OSError):
            return _Resolved(None, "", False, now, None)
        title = process_title(proc)
        by_pid = {r.pid: r for r in refs}
        try:
            chain = [proc, *proc.parents()]
        except (psutil.Error, OSError):
            chain = [proc]
        for p in chain:
            ref = by_pid.get(p.pid)
            if ref is not None and self._verified(p, ref):
                return _Resolved(ref, title, True, now, ctime)
        # reparented (the API server died, its engine lives on): same process group, led by our server or
        # created after our server started while the group leader is gone
        try:
            pgid = os.getpgid(pid)
        except OSError:
            pgid = -1
        for ref in refs:
            if ref.pgid != pgid or pgid <= 1:
                continue
            try:
                leader = psutil.Process(ref.pid)
                leader_ok = self._verified(leader, ref)
            except (psutil.Error, OSError):
                leader_ok = ctime + self._tolerance >= ref.create_time
            if leader_ok:
                return _Resolved(ref, title, True, now, ctime)
        return _Resolved(None, title, True, now, ctime)

    def _exact(self, res: _Resolved, pid: int, mem: int | None, kind: str, gpu_index: int) -> GpuProcess:
        ref = res.ref
        assert ref is not None
        name = res.title
        tp_rank, dp_rank = ranks_from_name(name[6:] if name.startswith("VLLM::") else "")
        if (tp_rank is None and ref.tp > 1) or (dp_rank is None and ref.dp > 1):
            log = self._logs.get(ref.log)
            logged = log.lookup(pid) if log is not None else None
            if logged:
                ltp, ldp = ranks_from_name(logged)
                tp_rank = tp_rank if tp_rank is not None else ltp
                dp_rank = dp_rank if dp_rank is not None else ldp
                if not name.startswith("VLLM::"):
                    name = f"{name} ({logged})" if name else logged
        tp_rank, dp_rank = _ranks_by_position(ref, gpu_index, tp_rank, dp_rank)
        return GpuProcess(pid=pid, memory=mem, kind=kind, name=name, owner=ref.name, role=ref.role,
                          tp_rank=tp_rank, dp_rank=dp_rank, mapping=EXACT, layout=ref.layout or None)

    # --- guessed ----------------------------------------------------------------------------------------------
    def _guess(self, gpu_index: int, gpu_total: int | None, pending: list[tuple[int, int, int | None, str, str]],
               refs: tuple[ServerRef, ...], exact_owners: set[str | None]
               ) -> list[tuple[int, GpuProcess]]:
        cands = [r for r in refs if r.role != "proxy" and gpu_index in r.gpus and r.name not in exact_owners]
        results: list[tuple[int, GpuProcess]] = []
        if not cands:
            for slot, pid, mem, kind, title in pending:
                results.append((slot, GpuProcess(pid=pid, memory=mem, kind=kind, name=title, mapping=UNKNOWN)))
            return results
        # pair processes and candidate servers: closest to the memory vLLM would take, then pid order against
        # start order (an earlier server's engine usually has the lower pid)
        by_pid = sorted(range(len(pending)), key=lambda i: pending[i][1])
        by_start = sorted(range(len(cands)), key=lambda j: (cands[j].started, cands[j].pid))
        pid_rank = {i: k for k, i in enumerate(by_pid)}
        start_rank = {j: k for k, j in enumerate(by_start)}
        pairs = []
        for i, (_slot, _pid, mem, _kind, _title) in enumerate(pending):
            for j, ref in enumerate(cands):
                expected = ref.gpu_memory_utilization * gpu_total if gpu_total else None
                dist = abs(mem - expected) / expected if (mem is not None and expected) else 0.0
                pairs.append((round(dist, 2), abs(pid_rank[i] - start_rank[j]), i, j))
        pairs.sort()
        taken_i: set[int] = set()
        taken_j: set[int] = set()
        chosen: dict[int, ServerRef] = {}
        for _d, _o, i, j in pairs:
            if i in taken_i or j in taken_j:
                continue
            taken_i.add(i)
            taken_j.add(j)
            chosen[i] = cands[j]
        for i, (slot, pid, mem, kind, title) in enumerate(pending):
            guess = chosen.get(i)
            if guess is None:
                results.append((slot, GpuProcess(pid=pid, memory=mem, kind=kind, name=title, mapping=UNKNOWN)))
                continue
            tp_rank, dp_rank = _ranks_by_position(guess, gpu_index, None, None)
            results.append((slot, GpuProcess(pid=pid, memory=mem, kind=kind, name=title, owner=guess.name,
                                             role=guess.role, tp_rank=tp_rank, dp_rank=dp_rank, mapping=GUESSED,
                                             layout=guess.layout or None)))
        return results


def _ranks_by_position(ref: ServerRef, gpu_index: int, tp_rank: int | None, dp_rank: int | None
                       ) -> tuple[int | None, int | None]:
    """Fill ranks vLLM would give the process on this GPU (rank r runs on the r-th visible device)."""
    if ref.tp <= 1 and tp_rank == 0:
        tp_rank = None
    if ref.dp <= 1 and dp_rank == 0:
        dp_rank = None
    if gpu_index in ref.gpus:
        pos = ref.gpus.index(gpu_index)
        if tp_rank is None and ref.tp > 1:
            tp_rank = pos % ref.tp
        if dp_rank is None and ref.dp > 1:
            dp_rank = pos // ref.tp
    return tp_rank, dp_rank
