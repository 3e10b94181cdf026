"""A simulated server's serving state: one scheduler per DP rank, the periodic stats line, the GPU claims'
utilisation, and the watch over the engine processes (an engine that dies fails requests with vLLM's EngineDeadError,
``/health`` answers 503, and the server exits, as vLLM does with ``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=0``).
"""


from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import secrets
import signal
import statistics
import time
from typing import Any

import uvicorn

from tui.sim import faults
from tui.sim.claims import ClaimWriter
from tui.sim.config import VLLM_VERSION, ServeConfig
from tui.sim.dphead import AnyEngine, HeadLink, RemoteEngine
from tui.sim.faults import FaultPlan
from tui.sim.logfmt import Proc, VllmLog
from tui.sim.metrics import EngineMetrics
from tui.sim.pd import Held, SideChannel
from tui.sim.perfmodel import FIRST_BATCH_JIT_S, ModelCost
from tui.sim.procs import Child
from tui.sim.runtime import EngineRuntime
from tui.sim.scheduler import EngineScheduler, SimRequest
from tui.sim.startup_ctx import Started
from tui.sim.tokenizer import SimTokenizer

ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
UTIL_PERIOD_S = 0.5


class ServerState:
    def __init__(self, cfg: ServeConfig, started: Started, log: VllmLog, fp: FaultPlan, claims: ClaimWriter) -> None:
        self.cfg = cfg
        self.started = started
        self.log = log
        self.fp = fp
        self.claims = claims
        self.api: Proc = started.api
        self.tok = SimTokenizer(cfg.profile.shape.vocab_size)
        self.created = int(time.time())
        self.perm_id = "modelperm-" + secrets.token_hex(8)
        suffix = (f"-tp{cfg.tp}" if cfg.tp > 1 else "") + (f"-dp{cfg.dp}" if cfg.dp > 1 else "")
        digest = hashlib.sha256(f"{cfg.model}|{cfg.served_name}|{cfg.max_model_len}".encode()).hexdigest()[:8]
        self.fingerprint = f"vllm-{VLLM_VERSION}{suffix}-{digest}"
        self.dead = False
        self.in_flight = 0
        self.shutting_down = False
        self.exit_code = 0
        self.uvicorn: uvicorn.Server | None = None
        self.held: dict[str, Held] = {}
        self.block_cursor = 0
        self.xfer_log: list[tuple[float, float, int, int]] = []  # (xfer s, post s, bytes, descriptors)
        cost = ModelCost(cfg.profile, cfg.hardware, cfg.tp, cfg.stack, knobs=cfg.knobs)
        self.cost = cost
        nixl = cfg.kv_transfer is not None and cfg.kv_transfer.is_nixl
        lease = cfg.kv_transfer.lease_s if cfg.kv_transfer else 30.0
        self.engines: list[EngineRuntime] = []  # this host's ranks
        for rank in cfg.local_ranks:
            sched = EngineScheduler(cost, kv_tokens=started.kv_tokens, max_num_seqs=cfg.max_num_seqs,
                                    max_num_batched_tokens=cfg.max_num_batched_tokens,
                                    state_tokens_per_seq=started.memory.state_tokens_per_seq,
                                    jit_stall_s=FIRST_BATCH_JIT_S.get(cfg.gpu.arch, faults.JIT_STALL_S)
                                    if fp.triton_jit else 0.0, lease_s=lease,
                                    spec_rng=random.Random(rank) if cost.spec is not None else None)
            metrics = EngineMetrics(cfg.max_model_len, nixl=nixl,
                                    spec_tokens=cost.spec.k if cost.spec is not None else 0)
            rt = EngineRuntime(rank, sched, metrics, clock=cfg.clock,
                               jit_warning=self._jit_warning(rank), on_expired=self._on_expired,
                               prefix_caching=cfg.enable_prefix_caching)
            self.engines.append(rt)
        self.side = SideChannel(self.release_held) if nixl else None
        self.tasks: list[asyncio.Task[Any]] = []
        self._util_marks = [(0.0, 0.0, time.monotonic()) for _ in self.engines]
        #: the head of DP across hosts: the other hosts' ranks, each served over its host's link
        self.remote: list[RemoteEngine] = []
        self.links: list[HeadLink] = []
        for peer in [] if cfg.headless else started.peers:  # a headless host's one peer is its head
            by_rank: dict[int, RemoteEngine] = {}
            link = HeadLink(peer, by_rank, self.remote_lost)
            for rank in peer.ranks:
                by_rank[rank] = RemoteEngine(
                    rank, link.send, EngineMetrics(cfg.max_model_len, spec_tokens=cost.spec.k if cost.spec else 0),
                    clock=cfg.clock, kv_tokens=peer.kv_tokens.get(rank, started.kv_tokens),
                    max_model_len=cfg.max_model_len)
            self.remote += by_rank.values()
            self.links.append(link)
        self.remote.sort(key=lambda e: e.index)
        self.exit_requested = asyncio.Event()  # a headless host has no uvicorn to stop: it waits on this

    @property
    def all_engines(self) -> list[AnyEngine]:
        """Every DP rank this server balances over, local and remote, in rank order."""
        return sorted([*self.engines, *self.remote], key=lambda e: e.index)

    # --- engines --------------------------------------------------------------------------------------------
    def pick_engine(self, pinned: int | None = None, *, local_only: bool = False) -> AnyEngine:
        """The engine a request goes to: the pinned rank (``X-data-parallel-rank``) or the least loaded one, remote
        ranks included unless ``local_only`` (a P/D request: its KV is on this host's GPUs)."""
        engines: list[AnyEngine] = list(self.engines) if local_only else self.all_engines
        for e in engines:
            if e.index == pinned:
                return e
        return min(engines, key=lambda e: (e.load, e.index))

    def engine_proc(self, rank: int) -> Proc:
        e = self.started.engine(rank)
        return Proc(e.proc.name, e.proc.pid)

    def _jit_warning(self, rank: int) -> Any:
        def warn() -> None:
            self.log.warning(self.engine_proc(rank), "jit_monitor.py:106", "Triton kernel JIT compilation during "
                             "inference: _topk_topp_kernel. This causes a latency spike; consider extending warmup to "
                             "cover this shape/config.")
        return warn

    def _on_expired(self, rt: EngineRuntime, req: SimRequest) -> None:
        for key, held in list(self.held.items()):
            if held.rid == req.rid and held.engine == rt.index:
                del self.held[key]
        if rt.metrics.nixl:
            rt.metrics.nixl_counters["nixl_num_kv_expired_reqs"] += 1
        self.log.warning(self.engine_proc(rt.index), "pull_scheduler.py:402", f"Releasing expired KV blocks for "
                         f"request {req.rid} which were retrieved by 0 remote worker(s) before lease expired.")

    def release_held(self, remote_id: str) -> Held | None:
        held = self.held.pop(remote_id, None)
        if held is not None:
            self.engines[held.engine].sched.release_held(held.rid)
        return held

    def next_blocks(self, count: int) -> int:
        start = self.block_cursor
        self.block_cursor += count + 1
        return start

    # --- background tasks -----------------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for e in self.engines:
            self.tasks.append(asyncio.create_task(e.run()))
        for link in self.links:
            self.tasks.append(asyncio.create_task(link.run()))
        if self.side is not None:
            await self.side.start(self.started.side_socks)
        self.tasks.append(asyncio.create_task(self._utilisation()))
        if self.cfg.api_server_count == 1 and not self.cfg.disable_log_stats:
            self.tasks.append(asyncio.create_task(self._stats()))
        for child in self.started.children():
            loop.add_reader(child.life_fd, self._child_exited, child)

    async def stop(self) -> None:
        self.shutting_down = True
        loop = asyncio.get_running_loop()
        for child in self.started.children():
            with contextlib.suppress(Exception):
                loop.remove_reader(child.life_fd)
        for e in self.all_engines:
            e.stop()
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self.side is not None:
            await self.side.close()

    async def _utilisation(self) -> None:
        while True:
            await asyncio.sleep(UTIL_PERIOD_S)
            now = time.monotonic()
            for i, e in enumerate(self.engines):
                busy0, mem0, t0 = self._util_marks[i]
                span = max(1e-6, (now - t0) * e.clock)
                util = (e.busy_v - busy0) / span
                mem_util = (e.mem_v - mem0) / span
                self._util_marks[i] = (e.busy_v, e.mem_v, now)
                for holder in self.started.engines[i].gpu_holders:
                    self.claims.set_util(holder.pid, util, mem_util)

    async def _stats(self) -> None:
        interval = self.cfg.env.stats_interval_s
        last_active = [False] * len(self.engines)
        while True:
            await asyncio.sleep(interval / self.cfg.clock)
            for i, e in enumerate(self.engines):
                prompt, gen = e.iv_prompt, e.iv_gen
                e.iv_prompt = e.iv_gen = 0
                active = bool(prompt or gen or e.sched.num_running or e.sched.num_waiting)
                if not (active or last_active[i]):
                    continue
                last_active[i] = active
                m = e.metrics
                queries = m.counters["prefix_cache_queries"]
                hit = 100.0 * m.counters["prefix_cache_hits"] / queries if queries else 0.0
                self.log.info(self.api, "loggers.py:273", f"Engine {i:03d}: Avg prompt throughput: "
                              f"{prompt / interval:.1f} tokens/s, Avg generation throughput: {gen / interval:.1f} "
                              f"tokens/s, Running: {e.sched.num_running} reqs, Waiting: {e.sched.num_waiting} reqs, "
                              f"GPU KV cache usage: {100 * e.sched.kv_usage:.1f}%, Prefix cache hit rate: {hit:.1f}%")
                if self.xfer_log:
                    self._log_transfers()
                if e.sched.spec is not None:
                    self._log_spec(e, interval)

    def _log_spec(self, e: EngineRuntime, interval: float) -> None:
        """vLLM's periodic spec-decode line (``v1/spec_decode/metrics.py``), over the last interval."""
        sc = e.sched
        now = sc.spec_counters()
        last = e.spec_mark or [0.0] * len(now)
        e.spec_mark = now
        drafts, drafted, accepted = (now[i] - last[i] for i in range(3))
        if drafts <= 0:
            return
        per_pos = ", ".join(f"{(a - b) / drafts:.3f}" for a, b in zip(now[3:], last[3:], strict=True))
        rate = 100.0 * accepted / drafted if drafted > 0 else float("nan")
        self.log.info(self.api, "metrics.py:120", f"SpecDecoding metrics: Mean acceptance length: "
                      f"{1 + accepted / drafts:.2f}, Accepted throughput: {accepted / interval:.2f} tokens/s, "
                      f"Drafted throughput: {drafted / interval:.2f} tokens/s, Accepted: {int(accepted)} tokens, "
                      f"Drafted: {int(drafted)} tokens, Per-position acceptance rate: {per_pos}, "
                      f"Avg Draft acceptance rate: {rate:.1f}%")

    def _log_transfers(self) -> None:
        xs = self.xfer_log
        self.xfer_log = []
        n = len(xs)
        times = sorted(x[0] * 1000 for x in xs)
        posts = sorted(x[1] * 1000 for x in xs)
        mb = sum(x[2] for x in xs) / 1e6
        # vLLM's "Throughput (MB/s)" is the MB moved over the time spent transferring them (the H200 fixture:
        # 72 MB per transfer / 191.2 ms = 376.5 MB/s), not over the logging interval: an idle-padded figure
        # would read as the slow path (nixl-slow-transfer) on every healthy simulated 1P1D
        busy_s = sum(x[0] for x in xs)
        p90 = max(0, int(0.9 * n) - 1)
        self.log.info(self.api, "metrics.py:103", f"KV Transfer metrics: Num successful transfers={n}, "
                      f"Avg xfer time (ms)={statistics.fmean(times):.3f}, P90 xfer time (ms)={times[p90]:.3f}, "
                      f"Avg post time (ms)={statistics.fmean(posts):.3f}, P90 post time (ms)={posts[p90]:.3f}, "
                      f"Avg MB per transfer={mb / n:.3f}, Throughput (MB/s)={mb / busy_s if busy_s > 0 else 0.0:.3f}, "
                      f"Avg number of descriptors={statistics.fmean(x[3] for x in xs):.1f}")

    # --- an engine process died -----------------------------------------------------------------------------
    def _child_exited(self, child: Child) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(Exception):
            loop.remove_reader(child.life_fd)
        child.alive()
        if child.exit_code in (128 + signal.SIGTERM, 128 + signal.SIGINT):
            # a signal to the whole process group reaches us too: give uvicorn a moment to start shutting down
            loop.call_later(0.3, self._engine_died, child)
        else:
            self._engine_died(child)

    def _engine_died(self, child: Child) -> None:
        stopping = self.uvicorn is not None and self.uvicorn.should_exit
        if self.shutting_down or stopping or self.dead or child.role == "hog":
            return
        self.dead = True
        self.exit_code = 1
        if child.role == "api":
            self.log.error(Proc(None, os.getpid()), "utils.py:565", f"Exception occurred while running API servers: "
                           f"Process {child.name} (PID: {child.pid}) died with exit code {child.exit_code}")
        else:
            engine = self.started.engine(child.dp_rank)
            if child.role == "worker":
                self.log.error(Proc(engine.proc.name, engine.proc.pid), "multiproc_executor.py:258",
                               f"Worker proc {child.name} died unexpectedly, shutting down executor.")
                self.log.error(Proc(engine.proc.name, engine.proc.pid), "core.py:1233",
                               "EngineCore encountered a fatal error.")
            self.log.error(self.api, "core_client.py:610",
                           f"Engine core proc {engine.proc.name} died unexpectedly, shutting down client.")
            if self.cfg.api_server_count > 1:
                self.log.error(Proc(None, os.getpid()), "utils.py:881",
                               f"Engine core process {engine.proc.name} died unexpectedly.")
        self._dead()

    def remote_lost(self, ranks: list[int], why: str) -> None:
        """The link to a headless host's engines dropped: to the head, those engine cores died."""
        stopping = self.uvicorn is not None and self.uvicorn.should_exit
        if self.shutting_down or stopping or self.dead:
            return
        self.dead = True
        self.exit_code = 1
        names = [f"EngineCore_DP{r}" for r in ranks]
        self.log.error(self.api, "core_client.py:598", f"Lost the connection to remote engine core(s) "
                                                       f"{', '.join(names)}: {why}")
        for name in names:
            self.log.error(self.api, "core_client.py:610", f"Engine core proc {name} died unexpectedly, shutting "
                                                           "down client.")
            if self.cfg.api_server_count > 1:
                self.log.error(Proc(None, os.getpid()), "utils.py:881", f"Engine core process {name} died "
                                                                        "unexpectedly.")
        self._dead()

    def _dead(self) -> None:
        """Every request fails with EngineDeadError, /health answers 503, and (unless kept alive) the server exits."""
        for e in self.all_engines:
            e.fail_all(ENGINE_DEAD_MESSAGE)
        if not self.cfg.env.keep_alive_on_death:
            asyncio.get_running_loop().call_later(min(5.0, max(0.5, 5.0 / self.cfg.clock)), self._exit_now)

    def _exit_now(self) -> None:
        self.exit_requested.set()
        if self.uvicorn is not None:
            self.uvicorn.should_exit = True
