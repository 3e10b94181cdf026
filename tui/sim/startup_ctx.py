"""The shared state of a simulated start (config, log, faults, pacer, engines, memory), below both of its sides:
the API-server side (:mod:`tui.sim.startup`) and the engine side (:mod:`tui.sim.startup_engine`)."""


from __future__ import annotations

import contextlib
import hashlib
import math
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tui.sim import faults
from tui.sim.claims import ClaimWriter
from tui.sim.config import ServeConfig
from tui.sim.faults import FaultPlan
from tui.sim.logfmt import Proc, VllmLog
from tui.sim.perfmodel import MemoryPlan, ModelCost
from tui.sim.procs import Child, spawn
from tui.sim.timeline import Times, cold_start

ROUTES = (("/openapi.json", "HEAD, GET"), ("/docs", "HEAD, GET"), ("/docs/oauth2-redirect", "HEAD, GET"),
          ("/redoc", "HEAD, GET"), ("/load", "GET"), ("/version", "GET"), ("/health", "GET"), ("/metrics", "GET"),
          ("/tokenize", "POST"), ("/detokenize", "POST"), ("/v1/models", "GET"), ("/ping", "GET"),
          ("/ping", "POST"), ("/invocations", "POST"), ("/v1/chat/completions", "POST"),
          ("/v1/chat/completions/batch", "POST"), ("/v1/responses", "POST"), ("/v1/responses/{response_id}", "GET"),
          ("/v1/responses/{response_id}/cancel", "POST"), ("/v1/completions", "POST"), ("/v1/messages", "POST"),
          ("/v1/messages/count_tokens", "POST"), ("/generative_scoring", "POST"), ("/inference/v1/generate", "POST"),
          ("/scale_elastic_ep", "POST"), ("/is_scaling_elastic_ep", "POST"), ("/v1/chat/completions/render", "POST"),
          ("/v1/completions/render", "POST"), ("/v1/chat/completions/derender", "POST"),
          ("/v1/completions/derender", "POST"))
CONTEXT_GIB = 0.6  # what an engine holds on its GPU as soon as CUDA is initialised


class StartFailed(Exception):
    def __init__(self, code: int = 1) -> None:
        super().__init__(code)
        self.code = code


class ChildDied(Exception):
    def __init__(self, child: Child) -> None:
        super().__init__(child.name)
        self.child = child


@dataclass
class Engine:
    """One engine (one DP rank): its process, its TP workers, and what it owns."""

    rank: int
    proc: Child
    workers: list[Child]
    gpus: tuple[int, ...]

    @property
    def gpu_holders(self) -> list[Child]:
        return self.workers if self.workers else [self.proc]


@dataclass
class DpPeer:
    """A host's engines of data parallel across hosts, over its TCP link (:mod:`tui.sim.dplink`): on the head one
    per headless process that joined, on a headless host the link to the head. ``leftover``: bytes already read
    past the handshake."""

    sock: socket.socket
    address: str
    ranks: list[int]
    kv_tokens: dict[int, int] = field(default_factory=dict)
    leftover: bytes = b""


@dataclass
class Started:
    engines: list[Engine]
    api_children: list[Child]
    memory: MemoryPlan
    kv_tokens: int
    http_sock: socket.socket | None
    side_socks: list[socket.socket]
    api: Proc
    hog: Child | None = None
    engine_ids: list[str] = field(default_factory=list)
    peers: list[DpPeer] = field(default_factory=list)

    def engine(self, rank: int) -> Engine:
        """The local engine of global DP rank ``rank``."""
        return next(e for e in self.engines if e.rank == rank)

    def children(self) -> list[Child]:
        out = [c for e in self.engines for c in (e.proc, *e.workers)] + self.api_children
        return out + ([self.hog] if self.hog else [])


class Pacer:
    """Sleeps until a point of the (scaled) timeline, watching children and firing alarms on the way."""

    def __init__(self, scale: float, children: Callable[[], list[Child]], t0: float | None = None) -> None:
        self.t0 = time.monotonic() if t0 is None else t0
        self.scale = scale
        self.now = 0.0
        self.children = children
        self.alarms: list[tuple[float, Callable[[], None]]] = []
        self.ignore_deaths = False
        #: sockets served while the start goes on (the DP handshake): fd -> what to do when it is readable
        self.watch: dict[int, Callable[[], None]] = {}

    def at(self, t: float, until: Callable[[], bool] | None = None) -> None:
        """Wait until virtual time ``t`` (or, with ``until``, until that holds, whichever comes first)."""
        while True:
            due = [a for a in self.alarms if a[0] <= t]
            if not due:
                break
            first = min(due, key=lambda a: a[0])
            self.alarms.remove(first)
            if self._wait(first[0], until):
                return
            first[1]()
        self._wait(t, until)

    def after(self, dt: float) -> None:
        self.at(self.now + dt)

    def wait_wall(self, seconds: float, until: Callable[[], bool] | None = None) -> None:
        """Wait ``seconds`` of wall time (not scaled: a peer's pace is not ours), firing alarms on the way."""
        self.at(max(self.now, self.virtual_now()) + seconds / max(self.scale, 1e-9), until)

    def virtual_now(self) -> float:
        return (time.monotonic() - self.t0) / max(self.scale, 1e-9)

    def _wait(self, t: float, until: Callable[[], bool] | None = None) -> bool:
        """True when ``until`` came true before ``t`` (``now`` is then the virtual time it did)."""
        before = self.now
        self.now = max(self.now, t)
        target = self.t0 + t * self.scale if math.isfinite(t) else math.inf
        while True:
            if until is not None and until():
                self.now = min(self.now, max(before, self.virtual_now()))
                return True
            remaining = target - time.monotonic()
            if remaining <= 0:
                return False
            watched = [c for c in self.children() if c.exit_code is None and not c.extra.get("exiting")]
            fds = [c.life_fd for c in watched] + list(self.watch)
            ready, _, _ = select.select(fds, [], [], min(remaining, 1.0)) if fds else ([], [], [])
            if not fds:
                time.sleep(min(remaining, 1.0))
            for c in watched:
                if c.life_fd in ready and not c.alive() and not self.ignore_deaths:
                    raise ChildDied(c)
            for fd in ready:
                handler = self.watch.get(fd)
                if handler is not None:
                    handler()


def _hash(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()


def bind_http(cfg: ServeConfig) -> socket.socket:
    """vLLM's ``create_server_socket``: SO_REUSEADDR and SO_REUSEPORT, bound now, listening only once ready."""
    host = cfg.host or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, cfg.port))
    except OSError:
        sock.close()
        raise
    return sock


class StartContext:
    """What both sides of a start share: the config, the log, the faults, the pacer, the engines and their memory."""

    def __init__(self, cfg: ServeConfig, log: VllmLog, fp: FaultPlan, claims: ClaimWriter,
                 t0: float | None = None) -> None:
        self.cfg = cfg
        self.log = log
        self.fp = fp
        self.claims = claims
        self.times: Times = cold_start(cfg.profile, tp=cfg.tp, enforce_eager=cfg.enforce_eager,
                                       dummy=cfg.load_format == "dummy")
        self.dp_mode = cfg.api_server_count > 1
        wait_start = self.times.imports + self.times.config
        if fp.cold_dp_start:
            self.times.cold_extra = max(0.0, faults.DP_COLD_START_S - self.times.engine_init)
        self.scale = cfg.startup_s / self.times.total if cfg.startup_s > 0 else 1.0
        self.engines: list[Engine] = []
        self.api_children: list[Child] = []
        self.hog: Child | None = None
        self.api = Proc(None if self.dp_mode else "APIServer", os.getpid())
        self.pacer = Pacer(self.scale, self.all_children, t0)
        self.wait_start = wait_start
        self.api_failed: Child | None = None
        self.cost = ModelCost(cfg.profile, cfg.hardware, cfg.tp)
        self.memory = cfg.memory()
        self.engine_ids = [(cfg.kv_transfer.engine_id if cfg.kv_transfer else _hash(os.getpid())[:8])
                           + (f"_dp{r}" if cfg.dp > 1 else "") for r in range(cfg.dp)]

    def spawn_engines(self) -> None:
        """Fork this host's engines (its ranks of the DP size), each with its TP workers and its local GPUs."""
        cfg = self.cfg
        for r in cfg.local_ranks:
            name = f"EngineCore_DP{r}" if cfg.dp > 1 else "EngineCore"
            gpus = cfg.engine_gpus(r)
            proc = spawn("engine", name, f"VLLM::{name}", gpus=gpus if cfg.tp == 1 else (), dp_rank=r)
            workers: list[Child] = []
            if cfg.tp > 1:
                for k in range(cfg.tp):
                    wname = f"Worker_DP{r}_TP{k}" if cfg.dp > 1 else f"Worker_TP{k}"
                    workers.append(spawn("worker", wname, f"VLLM::{wname}", gpus=gpus[k:k + 1], dp_rank=r))
            self.engines.append(Engine(rank=r, proc=proc, workers=workers, gpus=gpus))

    def all_children(self) -> list[Child]:
        out = [c for e in self.engines for c in (e.proc, *e.workers)] + self.api_children
        return out + ([self.hog] if self.hog else [])

    # --- helpers --------------------------------------------------------------------------------------------
    def info(self, proc: Proc, where: str, msg: str) -> None:
        self.log.info(proc, where, msg)

    def each_worker(self) -> list[tuple[Engine, Proc, Child, int]]:
        """(engine, log proc, process, tp rank) for every GPU-holding process."""
        out = []
        for e in self.engines:
            for r, holder in enumerate(e.gpu_holders):
                out.append((e, Proc(holder.name, holder.pid), holder, r))
        return out

    def engine_proc(self, e: Engine) -> Proc:
        return Proc(e.proc.name, e.proc.pid)

    def set_memory(self, gib: Callable[[int], float]) -> None:
        for e in self.engines:
            for holder in e.gpu_holders:
                self.claims.set_memory(holder.pid, holder.title, holder.gpus, gib(holder.pid))

    def fail_engine(self, e: Engine, proc: Proc, text: str, *, error_where: str = "core.py:1231") -> None:
        """An engine raised during start-up: its ERROR record, its exit, then the front end's error."""
        self.log.error(proc, error_where, text)
        for c in (e.proc, *e.workers):
            c.extra["exiting"] = True
            c.exit_with(1)
        self.pacer.after(3.2)
        self.log.raw(self.api, faults.api_init_failed("{}"))
        raise StartFailed(1)


def ignore_termination() -> None:
    """A silent stall ignores SIGINT and SIGTERM, as the real FlashInfer-JIT hang did: only SIGKILL ends it."""
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
