"""A simulated ``vllm serve`` start: vLLM 0.24's start-up lines, in order, from the right processes, paced.

The API process runs this synchronously (single-threaded, so forking the engine processes is safe) before it starts
serving. The pace follows :mod:`tui.sim.timeline`, compressed by ``DISAGG_SIM_STARTUP_S``; while waiting it watches
its children, so an engine killed during start-up is noticed at once. Failures (:mod:`tui.sim.faults`) print their
lines in the process and phase where vLLM prints them and end the start with :class:`StartFailed`, or hang.
"""

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
from tui.sim.config import VLLM_VERSION, ServeConfig
from tui.sim.faults import FaultPlan
from tui.sim.logfmt import Proc, VllmLog, banner
from tui.sim.perfmodel import MemoryPlan, ModelCost
from tui.sim.procs import Child, spawn
from tui.sim.timeline import Times, architecture, cold_start

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
class Started:
    engines: list[Engine]
    api_children: list[Child]
    memory: MemoryPlan
    kv_tokens: int
    http_sock: socket.socket
    side_socks: list[socket.socket]
    api: Proc
    hog: Child | None = None
    engine_ids: list[str] = field(default_factory=list)

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

    def at(self, t: float) -> None:
        while True:
            due = [a for a in self.alarms if a[0] <= t]
            if not due:
                break
            first = min(due, key=lambda a: a[0])
            self.alarms.remove(first)
            self._wait(first[0])
            first[1]()
        self._wait(t)

    def after(self, dt: float) -> None:
        self.at(self.now + dt)

    def _wait(self, t: float) -> None:
        self.now = max(self.now, t)
        target = self.t0 + t * self.scale if math.isfinite(t) else math.inf
        while True:
            remaining = target - time.monotonic()
            if remaining <= 0:
                return
            watched = [c for c in self.children() if c.exit_code is None and not c.extra.get("exiting")]
            fds = [c.life_fd for c in watched]
            ready, _, _ = select.select(fds, [], [], min(remaining, 1.0)) if fds else ([], [], [])
            if not fds:
                time.sleep(min(remaining, 1.0))
            for c in watched:
                if c.life_fd in ready and not c.alive() and not self.ignore_deaths:
                    raise ChildDied(c)


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


class Startup:
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

    # --- the sequence ---------------------------------------------------------------------------------------
    def run(self) -> Started:
        cfg, t, fp = self.cfg, self.times, self.fp
        if fp.hog:
            self.hog = spawn("hog", "python3", "python3", gpus=cfg.gpu_ids[: max(1, cfg.tp * cfg.dp)])
            total = cfg.hardware.torch_total_gib
            self.claims.set_memory(self.hog.pid, "python3", self.hog.gpus, total * faults.HOG_SHARE)
        self.pacer.at(t.imports)
        api = self.api
        if cfg.env.disable_logo:
            self.info(api, "api_utils.py:337", f"vLLM server version {VLLM_VERSION}, serving model {cfg.model}")
        else:
            self.info(api, "api_utils.py:339", banner(VLLM_VERSION, cfg.model))
        self.info(api, "api_utils.py:273", f"non-default args: {_args_repr(cfg.non_default)}")
        if self.dp_mode and "api_server_count" not in cfg.non_default:
            self.info(api, "serve.py:119", f"Defaulting api_server_count to data_parallel_size ({cfg.dp}).")
        for name in cfg.env.unknown_env:
            self.log.warning(api, "envs.py:2004", f"Unknown vLLM environment variable detected: {name}")
        if cfg.kv_transfer and cfg.kv_transfer.role == "kv_both" and cfg.kv_transfer.is_nixl:
            self.log.warning(api, "kv_transfer.py:134", "Using kv_role='kv_both' with NixlConnector is deprecated "
                             "and will be removed in a future release. Please set kv_role='kv_producer' for prefill "
                             "instances and kv_role='kv_consumer' for decode instances.")
        if fp.nixl_missing:
            self.log.warning(api, "nixl_utils.py:58", "NIXL is not available")
        try:
            if fp.port_taken:
                raise OSError(98, "Address already in use")
            http_sock = bind_http(cfg)
        except OSError:
            self.pacer.after(0.8)
            self.log.raw(api, faults.port_in_use())
            raise StartFailed(1) from None
        try:
            return self._engine_phases(http_sock)
        except BaseException:
            http_sock.close()
            raise

    def _engine_phases(self, http_sock: socket.socket) -> Started:
        cfg, t, api = self.cfg, self.times, self.api
        self.pacer.after(t.config)
        arch = architecture(cfg.profile)
        self.info(api, "model.py:598", f"Resolved architecture: {arch}")
        self.info(api, "model.py:1725", f"Using max model len {cfg.max_model_len}")
        self.info(api, "scheduler.py:252",
                  f"Chunked prefill is enabled with max_num_batched_tokens={cfg.max_num_batched_tokens}.")
        if cfg.enforce_eager:
            self.log.warning(api, "vllm.py:1135", "Enforce eager set, disabling torch.compile and CUDAGraphs. This "
                             "is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none")
        self.info(api, "vllm.py:1006", "Asynchronous scheduling is enabled.")
        self._spawn_engines()
        if self.dp_mode:
            for i in range(cfg.api_server_count):
                self.api_children.append(spawn("api", f"ApiServer_{i}", f"VLLM::APIServer_{i}", dp_rank=i))
            self.info(api, "utils.py:241", f"Started {cfg.api_server_count} API server processes")
            deadline = self.pacer.now + cfg.env.ready_timeout_s
            self.pacer.alarms.append((deadline, self._ready_timeout))
        self.set_memory(lambda _pid: CONTEXT_GIB)
        self.pacer.after(t.engine_spawn)
        from tui.sim.startup_engine import EnginePhases

        phases = EnginePhases(self, arch)
        phases.run()
        if self.api_failed is not None:
            c = self.api_failed
            self.log.error(api, "utils.py:565", f"Exception occurred while running API servers: Process {c.name} "
                                                f"(PID: {c.pid}) died with exit code 1")
            raise StartFailed(1)
        self.pacer.ignore_deaths = False
        return self._api_ready(http_sock, phases.side_socks)

    def _spawn_engines(self) -> None:
        cfg = self.cfg
        for r in range(cfg.dp):
            name = f"EngineCore_DP{r}" if cfg.dp > 1 else "EngineCore"
            gpus = cfg.engine_gpus(r)
            proc = spawn("engine", name, f"VLLM::{name}", gpus=gpus if cfg.tp == 1 else (), dp_rank=r)
            workers: list[Child] = []
            if cfg.tp > 1:
                for k in range(cfg.tp):
                    wname = f"Worker_DP{r}_TP{k}" if cfg.dp > 1 else f"Worker_TP{k}"
                    g = gpus[k:k + 1]
                    workers.append(spawn("worker", wname, f"VLLM::{wname}", gpus=g, dp_rank=r))
            self.engines.append(Engine(rank=r, proc=proc, workers=workers, gpus=gpus))

    def _ready_timeout(self) -> None:
        for c in self.api_children:
            self.log.raw(Proc(c.name, c.pid), faults.ready_timeout(self.cfg.env.ready_timeout_s))
            c.extra["exiting"] = True
            c.exit_with(1)
        self.api_failed = self.api_children[0] if self.api_children else None

    def _api_ready(self, http_sock: socket.socket, side_socks: list[socket.socket]) -> Started:
        cfg = self.cfg
        fronts = [Proc(c.name, c.pid) for c in self.api_children] or [self.api]
        self.pacer.after(0.2)
        for p in fronts:
            if self.dp_mode:
                self.info(p, "async_llm.py:251", "AsyncLLM created with api_server_count more than 1; disabling "
                                                 "stats logging to avoid incomplete stats.")
            self.info(p, "api_server.py:577", "Supported tasks: ['generate']")
        self.pacer.after(0.4)
        for p in fronts:
            self.info(p, "api_server.py:581", f"Starting vLLM server on http://{cfg.host_label}:{cfg.port}")
            self.info(p, "launcher.py:37", "Available routes are:")
            for path, methods in ROUTES:
                self.info(p, "launcher.py:46", f"Route: {path}, Methods: {methods}")
        self.pacer.after(0.1)
        return Started(engines=self.engines, api_children=self.api_children, memory=self.memory,
                       kv_tokens=self.memory.kv_tokens, http_sock=http_sock, side_socks=side_socks, api=fronts[0],
                       hog=self.hog, engine_ids=self.engine_ids)

    def cleanup(self) -> None:
        for c in self.all_children():
            c.stop()
            self.claims.drop(c.pid)
            c.close()


def _args_repr(d: dict[str, object]) -> str:
    parts = []
    for k, v in d.items():
        parts.append(f"{k!r}: {v if k == 'kv_transfer_config' else repr(v)}")
    return "{" + ", ".join(parts) + "}"


def ignore_termination() -> None:
    """A silent stall ignores SIGINT and SIGTERM, as the real FlashInfer-JIT hang did: only SIGKILL ends it."""
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

