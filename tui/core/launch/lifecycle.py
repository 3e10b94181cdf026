"""Bring a layout up, follow it to readiness, and take it down: what ``up``, ``down``, campaigns and the console use.

One active layout per host: a second ``bring_up`` is refused (``LayoutBusy``) unless it is told to replace the
active one. The layout is recorded in the state file *before* its processes start and updated as each starts, so
``down`` from any later process (the launcher may have been killed) finds and stops every one of them.

Readiness is ours, not vLLM's: vLLM has no start deadline for TP or 1P1D, so each server is probed over HTTP
(``/health`` 200) against our own deadline, and a start whose log has been silent for too long is reported as
stalled in the phase it reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from tui.core import paths, safewrite
from tui.core.errors import AppError, LayoutBusy, PlanRefused, RunFailed
from tui.core.events import EventBus, Notice
from tui.core.host.base import Host
from tui.core.launch import failures, ownership, subphases
from tui.core.launch.events import (
    LayoutChanged,
    LogLine,
    PlanLaunched,
    ServerDeferred,
    ServerExited,
    ServerLaunched,
    ServerPhase,
    ServerReady,
    ServerStalled,
    ServerSubPhase,
    StartupExpected,
)
from tui.core.launch.history import Expected, StartupHistory, StartupRecord, expected_startup, plan_key
from tui.core.launch.phases import PHASE_INDEX, PhaseTracker
from tui.core.launch.state import (
    LayoutHealth,
    LayoutOwner,
    LayoutRecord,
    ProcessRecord,
    StateStore,
    layout_health,
    new_layout_id,
)
from tui.core.launch.supervisor import LogFollower, StopTarget, create_time, process_alive, spawn, stop_processes
from tui.core.models import ModelProfile
from tui.core.plan.planner import LaunchPlan
from tui.core.plan.preflight import Check, failed, preflight
from tui.core.plan.request import LaunchRequest
from tui.core.plan.spec import shell_line
from tui.core.redact import Redactor, argv_secret_values, redact_argv, secret_values

#: a real cold start: ~2 min for an 8B model on H200, ~15 min for the seed's 27B (torch.compile + CUDA graphs)
REAL_READY_TIMEOUT_S = 2400.0
REAL_STALL_TIMEOUT_S = 600.0

LineHook = Callable[[str, int, str], None]  # (server, lineno, text), called in the log thread


class StartFailure(RunFailed):
    """A server did not become ready: it exited, stalled, or ran out of time. Says which and in what phase."""

    def __init__(self, title: str, *, server: str, phase: str, returncode: int | None = None,
                 stalled: bool = False, hint: str | None = None) -> None:
        super().__init__(title, hint)
        self.server = server
        self.phase = phase
        self.returncode = returncode
        self.stalled = stalled


@dataclass
class UpOptions:
    ready_timeout_s: float = REAL_READY_TIMEOUT_S
    stall_timeout_s: float = REAL_STALL_TIMEOUT_S
    replace: bool = False
    probe_interval_s: float = 0.5
    skip_preflight: bool = False
    line_hooks: Sequence[LineHook] = field(default_factory=tuple)
    #: start a server on a GPU another server of the layout uses only once that one has allocated its KV cache
    #: (vLLM's memory profiling counts a neighbour's allocations as its own: both would get about half the cache)
    stagger_shared_gpus: bool = True
    #: how often a starting server's process tree and caches are sampled (sub-phases; progress for the stall
    #: detector); 0 turns it off
    watch_interval_s: float = 2.0
    #: who starts the layout (None: ``up`` from the CLI, in this process) and the request it is started with, with
    #: the playbook fixes applied to it (entry ids) and the diagnoses they took their values from: all recorded in
    #: the state file (what ``status`` shows and a restart replays)
    started_by: LayoutOwner | None = None
    request: LaunchRequest | None = None
    fixes: tuple[str, ...] = ()
    fix_basis: tuple[dict[str, Any], ...] = ()
    #: replace a layout that a running campaign or benchmark holds all the same (``--force``)
    force: bool = False


def timeouts_for(host: Host) -> tuple[float, float]:
    """(ready, stall) deadlines: real ones, or scaled to the simulated host's compressed start."""
    startup = host.sim_startup_s()
    if startup is None or startup == 0.0:  # a real host, or the simulator in real time
        return REAL_READY_TIMEOUT_S, REAL_STALL_TIMEOUT_S
    return 60.0 + 10.0 * startup, max(8.0, 3.0 * startup)


def plan_redactor(plan: LaunchPlan) -> Redactor:
    """Redacts what a layout's servers say (log lines, failure excerpts): also the values of the plan's own secrets
    (``--env MY_PASSWORD=...``, ``--api-key ...``), which a log line may echo."""
    extra = [v for s in plan.servers for v in (*secret_values(s.env_dict()), *argv_secret_values(s.argv))]
    return Redactor(extra_values=extra)


class Launch:
    """One bring-up: spawn, follow, probe, and either a ready layout or a failure with the last log lines."""

    def __init__(self, host: Host, plan: LaunchPlan, profile: ModelProfile, bus: EventBus,
                 options: UpOptions | None = None, store: StateStore | None = None) -> None:
        self.host = host
        self.plan = plan
        self.profile = profile
        self.bus = bus
        self.options = options or UpOptions()
        self.store = store or StateStore()
        self.layout_id = new_layout_id(plan.topology, plan.profile_id)
        self.record: LayoutRecord | None = None
        self.popens: dict[int, Any] = {}
        self.trackers: dict[str, PhaseTracker] = {}
        self.expected: dict[str, Expected | None] = {}  # server -> the ETA its start was given
        self.phase_at: dict[str, dict[str, float]] = {}  # server -> phase -> seconds after the start
        self.history = StartupHistory(self.store.root)
        self.started_at = time.monotonic()
        self.spawned_at: dict[str, float] = {}  # server -> when its process started (monotonic)
        #: servers held back until the servers they share a GPU with have allocated their KV cache
        self.deferred: dict[str, tuple[_SpawnItem, tuple[str, ...]]] = {}
        self.preflight: list[Check] = []
        self.subtrackers: dict[str, subphases.SubPhaseTracker] = {}
        self.progress_at: dict[str, float] = {}  # server -> last time a compiler worked or a cache grew
        self.cache_states: dict[str, str] = {}  # server -> cold | warm, judged before it starts
        #: server -> what its own log says it compiled or loaded (the cache state its start is remembered with)
        self.evidence: dict[str, subphases.CompileEvidence] = {}
        self.envs: dict[str, dict[str, str]] = {}
        #: what the servers say is redacted before it is published, matched or kept (the real logs stay as written)
        self.redactor = plan_redactor(plan)

    # --- state -------------------------------------------------------------------------------------------------
    def _claim_slot(self) -> LayoutRecord:
        with self.store.locked() as layouts:
            for rec in list(layouts.values()):
                if rec.status in ("starting", "ready", "stopping"):
                    if not any(process_alive(p.pid, p.create_time) for p in rec.processes) and rec.processes:
                        rec.status = "failed"
                        rec.note = "found dead: every process had exited"
                        continue
                    if not self.options.replace:
                        raise _busy(rec)
            # a new start: the failure shown until now is history (the dashboard shows the layout that is up)
            failures.retire_failed(self.store, layouts)
            plan_dict = self.plan.redacted_dict()
            sim: dict[str, Any] = {}
            if self.host.simulated:
                o = getattr(self.host, "options", None)
                sim = {"gpu": getattr(self.host, "gpu", ""), "gpus": getattr(self.host, "count", 0),
                       "faults": list(o.sim_faults) if o else []}
            o = self.options
            me = os.getpid()
            rec = LayoutRecord(id=self.layout_id, created=time.time(), simulated=self.host.simulated,
                               plan=plan_dict, processes=[], status="starting", owner_pid=me,
                               owner_create_time=create_time(me), owner_user=ownership.user_name(), sim=sim,
                               endpoint=self.plan.endpoint, started_by=o.started_by or ownership.owner("cli"),
                               request=ownership.request_to_store(o.request, o.fixes) if o.request else None,
                               fix_basis=[dict(d) for d in o.fix_basis], ready_timeout_s=o.ready_timeout_s)
            layouts[rec.id] = rec
            self.record = rec
            return rec

    def _save(self) -> None:
        assert self.record is not None
        with self.store.locked() as layouts:
            layouts[self.record.id] = self.record

    async def _status(self, status: str, note: str = "") -> None:
        assert self.record is not None
        self.record.status = status
        self.record.note = note
        await asyncio.to_thread(self._save)
        self.bus.publish(LayoutChanged(layout_id=self.layout_id, status=status, topology=self.plan.topology,
                                       profile_id=self.plan.profile_id, endpoint=self.plan.endpoint,
                                       simulated=self.plan.simulated, note=note))

    # --- run ---------------------------------------------------------------------------------------------------
    async def run(self) -> LayoutRecord:
        """Launch and wait until ready. The state file, the spawning and the stops run in threads: the event loop
        (the console's) never waits on a file lock, a fork or a process exit."""
        loop = asyncio.get_running_loop()
        self.bus.attach_loop(loop)
        if self.options.replace:
            active = await asyncio.to_thread(self.store.active)
            if active is not None:
                # a layout a running campaign or benchmark holds is replaced only when told to (--force)
                await asyncio.to_thread(ownership.check_free, active, "replace it", force=self.options.force)
                self.bus.publish(Notice(level="info", message=f"replacing layout {active.id}", source="up"))
                await tear_down(active, self.bus, store=self.store)
        busy = await asyncio.to_thread(self.store.active)
        if busy is not None and not self.options.replace and \
                any(process_alive(p.pid, p.create_time) for p in busy.processes):
            raise _busy(busy)
        if not self.options.skip_preflight:
            nvml = None
            with contextlib.suppress(Exception):
                nvml = await asyncio.to_thread(self.host.nvml)
            # host.facts is lazy on a real host (NVML, a vllm subprocess): evaluated in the thread too
            self.preflight = await asyncio.to_thread(lambda: preflight(self.plan, self.host.facts, nvml))
            bad = failed(self.preflight)
            if bad:
                raise PlanRefused("preflight failed: " + "; ".join(f"{c.name}: {c.reason}" for c in bad))
        record = await asyncio.to_thread(self._claim_slot)
        self.bus.publish(PlanLaunched(layout_id=self.layout_id, plan=record.plan))
        await self._status("starting")
        follower = LogFollower(self._on_line)
        try:
            await self._spawn(follower)
            follower.start()
            await self._wait_ready(follower)
        except BaseException as exc:
            follower.stop()
            note = exc.title if isinstance(exc, AppError) else type(exc).__name__
            await asyncio.to_thread(self._stop_all)
            await self._status("failed" if not isinstance(exc, asyncio.CancelledError | KeyboardInterrupt)
                               else "stopped", note)
            raise
        follower.stop()
        await self._status("ready")
        assert self.record is not None
        return self.record

    async def _spawn(self, follower: LogFollower) -> None:
        """``_spawn_all`` in a thread; a cancellation waits for it to finish, so the stop that follows sees every
        process it started."""
        job = asyncio.ensure_future(asyncio.to_thread(self._spawn_all, follower))
        try:
            await asyncio.shield(job)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await job
            raise

    def _spawn_all(self, follower: LogFollower) -> None:
        """In a worker thread: start every process that need not wait, record it, follow its log. A server that
        shares a GPU with one started before it is held back (``self.deferred``) until ``_release_deferred``."""
        assert self.record is not None
        profile_json = self.profile.to_dict()
        items = [_SpawnItem(s.name, s.role, s.url, tuple(s.gpus), self.host.server_command(s, self.plan, profile_json),
                            s.env_dict(), list(s.argv)) for s in self.plan.servers]
        items = [replace(i, api_key=bool(i.cmd.env.get("VLLM_API_KEY"))) for i in items]
        # the secrets the host adds to a server's environment (VLLM_API_KEY) are looked for in its lines too
        host_secrets = {v for i in items for v in secret_values(i.cmd.env)} - set(self.redactor.values)
        if host_secrets:
            self.redactor = Redactor(extra_values=[*self.redactor.values, *host_secrets])
        if self.plan.proxy is not None:
            pc = self.host.proxy_command(self.plan.proxy)
            items.append(_SpawnItem("proxy", "proxy", self.plan.proxy.url, (), pc, {},
                                    ["disagg-tui", "proxy", *self.plan.proxy.args()],
                                    api_key=any(i.api_key for i in items)))
        waits = shared_gpu_waits([(i.name, i.gpus) for i in items]) if self.options.stagger_shared_gpus else {}
        for item in items:
            if item.role != "proxy":
                self._expect(item)
            before = waits.get(item.name, ())
            if before:
                self.deferred[item.name] = (item, before)
                shared = tuple(sorted(set(item.gpus) & {g for i in items if i.name in before for g in i.gpus}))
                self.bus.publish_threadsafe(ServerDeferred(server=item.name, waits_for=before, gpus=shared))
                continue
            self._spawn_one(item, follower)

    def _spawn_one(self, item: _SpawnItem, follower: LogFollower) -> ProcessRecord:
        """Blocking (a fork and the state file): start one process and follow its log."""
        assert self.record is not None
        log = self.store.logs_dir(self.layout_id) / f"{item.name}.log"
        popen = spawn(item.cmd, log, self.layout_id, root=self.store.root)
        self.popens[popen.pid] = popen
        self.spawned_at[item.name] = time.monotonic()
        rec = ProcessRecord(name=item.name, role=item.role, pid=popen.pid, pgid=popen.pid,
                            create_time=create_time(popen.pid), log=str(log), url=item.url, gpus=list(item.gpus),
                            argv=redact_argv(item.shown_argv), started=time.time(), api_key=item.api_key)
        self.record.processes.append(rec)
        self._save()
        self.trackers[item.name] = PhaseTracker()
        self.subtrackers[item.name] = subphases.SubPhaseTracker()
        self.evidence[item.name] = subphases.CompileEvidence()
        follower.follow(item.name, log)
        found = self.expected.get(item.name)
        self.bus.publish_threadsafe(ServerLaunched(
            layout_id=self.layout_id, server=item.name, role=item.role, pid=popen.pid, url=item.url,
            command=shell_line(item.env, item.shown_argv), log=str(log), gpus=tuple(item.gpus), started=rec.started,
            expected_s=found.seconds if found else None, expected_source=found.describe() if found else ""))
        return rec

    def _expect(self, item: _SpawnItem) -> None:
        """Before a server starts: its cache state and the ETA of a start in that state (a thread)."""
        env = dict(item.cmd.env)
        self.envs[item.name] = env
        state = subphases.cache_state(env, item.shown_argv)
        if state == "warm" and not self.history.started_before(plan_key(self.plan), item.name):
            # torch.compile keys its cache by the configuration: one never started here finds no entry of its own
            # in a folder that other configurations filled
            state = "cold"
        self.cache_states[item.name] = state
        found = expected_startup(self.history, self.plan, item.name, sim_startup_s=self.host.sim_startup_s(),
                                 cache_state=state)
        self.expected[item.name] = found
        hint = ""
        if state == "cold":
            hint = self.history.cold_hint(plan_key(self.plan), item.name)
        self.bus.publish_threadsafe(StartupExpected(
            server=item.name, seconds=found.seconds if found else None, samples=found.samples if found else 0,
            cache_state=state, source=found.source if found else "", cold_hint=hint))

    async def _watch(self, names: list[str], follower: LogFollower) -> None:
        """Sample the starting servers' process trees and caches (in a thread) and publish sub-phases; the log
        lines written before the sample are read first, so a phase the log names comes before the sub-phase that
        followed it (the follower's own 0.1 s poll may not have reached them yet on a busy machine)."""
        assert self.record is not None
        procs = {p.name: p for p in self.record.processes}

        def sample_then_catch_up() -> dict[str, tuple[list[subphases.ProcSample], dict[str, tuple[str, int]]]]:
            out = self._sample([(n, procs[n].pid) for n in names if n in procs])
            follower.poll_once()
            return out

        samples = await asyncio.to_thread(sample_then_catch_up)
        now = time.monotonic()
        users: dict[str, list[str]] = {}  # cache directory -> the starting servers that write to it
        for name, (_tree, caches) in samples.items():
            for path, _size in caches.values():
                users.setdefault(path, []).append(name)
        for name, (tree, caches) in samples.items():
            tracker = self.subtrackers.setdefault(name, subphases.SubPhaseTracker())
            t = now - self.spawned_at.get(name, self.started_at)
            for tr in tracker.feed(t, tree, caches):
                others = [u for u in users.get(tr.detail, []) if u != name] if tr.key.startswith("cache_") else []
                if others:  # one cache directory, several starting servers: whose write it is is not known
                    tr.label += f" (shared with {', '.join(others)})"
                phase = self.trackers[name].phase.key if name in self.trackers else ""
                self.bus.publish(ServerSubPhase(server=name, key=tr.key, label=tr.label, state=tr.state,
                                                elapsed_s=tr.elapsed_s, phase=phase, jobs=tr.jobs, cpu_s=tr.cpu_s,
                                                detail=tr.detail, cache_bytes=tr.cache_bytes))
            if tracker.progress:
                self.progress_at[name] = now

    def _sample(self, servers: list[tuple[str, int]]) -> dict[str, tuple[list[subphases.ProcSample],
                                                                          dict[str, tuple[str, int]]]]:
        out = {}
        for name, pid in servers:
            dirs = subphases.cache_dirs(self.envs.get(name, {}))
            out[name] = (subphases.sample_tree(pid), subphases.cache_sizes(dirs))
        return out

    def _releasable(self) -> list[str]:
        """Held-back servers whose GPU neighbours have all allocated their KV cache (passed the ``kv_cache``
        phase: the line after it comes once the cache is allocated) or are ready."""
        out = []
        for name, (_item, before) in self.deferred.items():
            if all(b in self.trackers and self.trackers[b].index > PHASE_INDEX[STAGGER_PHASE] for b in before):
                out.append(name)
        return out

    async def _release_deferred(self, follower: LogFollower, pending: dict[str, ProcessRecord]) -> None:
        for name in self._releasable():
            item, before = self.deferred.pop(name)
            self.bus.publish(Notice(level="info", source="up",
                                    message=f"{name}: {', '.join(before)} allocated its KV cache; starting {name} "
                                            f"on GPU {','.join(map(str, item.gpus))}"))
            rec = await asyncio.to_thread(self._spawn_one, item, follower)
            pending[name] = rec

    def _on_line(self, name: str, lineno: int, text: str) -> None:
        """In the follower thread: phases, log lines and hooks (the playbook matcher), on the redacted line."""
        text = self.redactor.text(text)
        self.bus.publish_threadsafe(LogLine(server=name, lineno=lineno, text=text))
        evidence = self.evidence.get(name)
        if evidence is not None:
            evidence.feed(text)
        tracker = self.trackers.get(name)
        if tracker is not None:
            update = tracker.feed(text)
            if update is not None:
                elapsed = time.monotonic() - self.spawned_at.get(name, self.started_at)
                self.phase_at.setdefault(name, {}).setdefault(update.phase.key, elapsed)
                self.bus.publish_threadsafe(ServerPhase(
                    server=name, phase=update.phase.key, label=update.phase.label, progress=update.progress,
                    detail=update.detail, elapsed_s=elapsed))
        for hook in self.options.line_hooks:
            hook(name, lineno, text)

    async def _wait_ready(self, follower: LogFollower) -> None:
        assert self.record is not None
        pending = {p.name: p for p in self.record.processes}
        deadline = self.started_at + self.options.ready_timeout_s
        async with httpx.AsyncClient(timeout=httpx.Timeout(2.0, connect=1.0), trust_env=False) as client:
            next_watch = 0.0
            compressed = bool(self.host.sim_startup_s())  # a compressed simulated start: sample often
            while pending or self.deferred:
                if self.deferred:
                    await self._release_deferred(follower, pending)
                if self.options.watch_interval_s > 0 and time.monotonic() >= next_watch:
                    next_watch = time.monotonic() + (min(self.options.watch_interval_s, 0.2) if compressed
                                                     else self.options.watch_interval_s)
                    await self._watch([n for n in pending if n != "proxy"], follower)
                # servers before the proxy: the proxy's /health needs them
                for name, proc in list(pending.items()):
                    popen = self.popens.get(proc.pid)
                    code = popen.poll() if popen is not None else (None if process_alive(proc.pid, proc.create_time)
                                                                   else -1)
                    if code is not None:
                        await asyncio.sleep(0.3)  # let the process's last writes land
                        await asyncio.to_thread(follower.poll_once)
                        last = self.redactor.lines(tuple(follower.last_lines.get(name, ()))[-25:])
                        at = self.trackers[name].phase.key if name in self.trackers else "?"
                        proc.exited = code
                        self.bus.publish(ServerExited(server=name, returncode=code, during=at, last_lines=last))
                        raise StartFailure(f"{name} exited with code {code} during startup ({at})",
                                           server=name, phase=at, returncode=code, hint=f"log: {proc.log}")
                checks = [n for n in pending if n != "proxy" or (len(pending) == 1 and not self.deferred)]
                results = await asyncio.gather(*(self._probe(client, pending[n].url) for n in checks))
                if any(results):  # read what the log says up to now, so its phases come before "ready"
                    await asyncio.to_thread(follower.poll_once)
                for name, ok in zip(checks, results, strict=True):
                    if ok:
                        proc = pending.pop(name)
                        proc.ready_at = time.time()
                        elapsed = time.monotonic() - self.spawned_at.get(name, self.started_at)
                        tracker = self.trackers.get(name)
                        if tracker is not None:
                            upd = tracker.mark_ready()
                            self.bus.publish(ServerPhase(server=name, phase="ready", label=upd.phase.label,
                                                         progress=1.0, elapsed_s=elapsed))
                        self.bus.publish(ServerReady(server=name, url=proc.url, startup_s=elapsed))
                        await asyncio.to_thread(self._save)
                        if name != "proxy":
                            await asyncio.to_thread(self._remember_start, name, elapsed)
                now = time.monotonic()
                for name in pending:
                    # a compiler at work or a cache that grows is progress, not silence
                    silent = min(follower.silent_for(name), now - self.progress_at.get(name, -1e18))
                    if name != "proxy" and silent > self.options.stall_timeout_s:
                        phase = self.trackers[name].phase
                        last = self.redactor.lines(tuple(follower.last_lines.get(name, ()))[-25:])
                        self.bus.publish(ServerStalled(server=name, phase=phase.key, silent_s=silent, last_lines=last))
                        raise StartFailure(f"{name} stalled: no log output for {silent:.0f} s during startup "
                                           f"({phase.key}: {phase.label})", server=name, phase=phase.key,
                                           stalled=True, hint=f"log: {pending[name].log}")
                late = [n for n in pending if (n != "proxy" or len(pending) == 1) and now > self.spawned_at.get(
                    n, self.started_at) + self.options.ready_timeout_s]
                if late or (self.deferred and now > deadline):
                    name = late[0] if late else next(iter(self.deferred))
                    reached = self.trackers[name].phase if name in self.trackers else None
                    raise StartFailure(f"{name} not ready after {self.options.ready_timeout_s:.0f} s"
                                       + (f" (reached {reached.key}: {reached.label})" if reached else ""),
                                       server=name, phase=reached.key if reached else "?", stalled=True,
                                       hint="a first start compiles for minutes; raise --ready-timeout if it "
                                            "was still making progress")
                if pending or self.deferred:
                    await asyncio.sleep(self.options.probe_interval_s)

    def _remember_start(self, name: str, elapsed: float) -> None:
        """The start's length and phase times, for the next start's ETA (a history that cannot be written is no
        reason to fail a start that worked)."""
        tracker = self.subtrackers.get(name)
        subs: tuple[tuple[str, float], ...] = ()
        if tracker is not None:
            tracker.finish(elapsed)
            subs = tuple((k, round(b - a, 3)) for k, a, b in tracker.history)
        # the class this start is learnt as comes from what it did (compiled, or loaded its compiled graphs), not
        # from the folders before it (a non-empty torch.compile cache may hold other configurations' keys only)
        evidence = self.evidence.get(name, subphases.CompileEvidence())
        state = evidence.cache_state((k for k, _ in subs), self.cache_states.get(name, ""))
        record = StartupRecord(key=plan_key(self.plan), server=name, startup_s=elapsed, simulated=self.host.simulated,
                               phases=tuple(sorted(self.phase_at.get(name, {}).items(), key=lambda kv: kv[1])),
                               cache_state=state, subphases=subs)
        with contextlib.suppress(OSError):
            self.history.append(record)

    @staticmethod
    async def _probe(client: httpx.AsyncClient, url: str) -> bool:
        try:
            r = await client.get(url + "/health")
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    def _stop_all(self) -> None:
        assert self.record is not None
        targets = _targets(self.record.processes)
        int_wait, term_wait = stop_waits(self.host.simulated)
        stop_processes(targets, layout_id=self.layout_id, popens=self.popens, int_wait=int_wait, term_wait=term_wait)


def stop_waits(simulated: bool) -> tuple[float, float]:
    """How long a stop waits after SIGINT and after SIGTERM before the next signal. A real server's graceful
    shutdown (engine cores, NIXL, CUDA contexts) takes seconds; a simulated one's is immediate, so a simulated
    server that ignores both signals (the stalled-JIT fault) is killed after 6 s, not 25."""
    return (3.0, 3.0) if simulated else (15.0, 10.0)


#: written into a server's log when ``down`` stops it: what the log says after it is the stop, not a crash
STOP_MARK = "[disagg-tui] stopping this server"
#: a server sharing a GPU waits until its neighbours have passed this phase (their KV cache is allocated)
STAGGER_PHASE = "kv_cache"


@dataclass(frozen=True, slots=True)
class _SpawnItem:
    name: str
    role: str
    url: str
    gpus: tuple[int, ...]
    cmd: Any
    env: dict[str, str]
    shown_argv: list[str]
    #: whether it answers /v1 only with vLLM's API key (its environment has VLLM_API_KEY; the proxy: whether a
    #: server behind it does): recorded as a flag, never the key, so the telemetry knows to send one
    api_key: bool = False


def shared_gpu_waits(servers: Sequence[tuple[str, Sequence[int]]]) -> dict[str, tuple[str, ...]]:
    """For each server, the servers listed before it that use one of its GPUs (it must start after their KV cache
    is allocated). Servers on GPUs of their own wait for nothing and start together."""
    out: dict[str, tuple[str, ...]] = {}
    for i, (name, gpus) in enumerate(servers):
        before = tuple(n for n, g in servers[:i] if set(g) & set(gpus))
        if before:
            out[name] = before
    return out


def _busy(rec: LayoutRecord) -> LayoutBusy:
    who = ownership.started_by_text(rec)
    return LayoutBusy(f"layout {rec.id} ({rec.topology} of {rec.profile_id} on GPU {','.join(map(str, rec.gpus))}) "
                      f"is {rec.status}" + (f", {who}" if who else "") + "; one layout per host",
                      hint="'disagg-tui down' first, or 'up --replace'")


async def bring_up(profile: ModelProfile, plan: LaunchPlan, host: Host, bus: EventBus, *,
                   options: UpOptions | None = None, store: StateStore | None = None) -> LayoutRecord:
    """Launch ``plan`` and wait until every server (and the proxy) is ready. Raises on failure, stopping the rest."""
    return await Launch(host, plan, profile, bus, options, store).run()


@dataclass
class OwnedLifecycle:
    """``bring_up``/``tear_down`` as a campaign takes them (``tui.core.bench.campaign.Lifecycle``), recording who
    starts each layout (``owner``: the campaign, this process) and the request of each topology (``requests``)."""

    owner: LayoutOwner
    requests: Callable[[str], LaunchRequest | None]
    store: StateStore | None = None

    async def bring_up(self, profile: ModelProfile, plan: LaunchPlan, host: Host, bus: EventBus) -> LayoutRecord:
        request = self.requests(plan.topology)
        if request is not None and plan.knobs:  # a campaign's configuration: a restart replays its knobs too
            request = replace(request, knobs=plan.knobs)
        return await bring_up(profile, plan, host, bus, store=self.store,
                              options=UpOptions(started_by=self.owner, request=request))

    async def tear_down(self, record: LayoutRecord, bus: EventBus) -> None:
        await tear_down(record, bus, store=self.store)


def _targets(procs: Iterable[ProcessRecord]) -> list[StopTarget]:
    return [StopTarget(p.name, p.pid, p.pgid, p.create_time) for p in procs]


def _mark_stop(p: ProcessRecord) -> None:
    """Append :data:`STOP_MARK` to a running server's log: only a log inside a project folder (the state file names
    it; a path elsewhere is no log of ours), never through a link."""
    root = paths.root_for(Path(p.log)) if p.log and os.path.isabs(p.log) else None
    if p.role == "proxy" or root is None or not process_alive(p.pid, p.create_time):
        return
    with contextlib.suppress(OSError, safewrite.UnsafeDir), safewrite.open_append(Path(p.log), root=root) as fh:
        fh.write(f"{STOP_MARK} (disagg-tui down, {time.strftime('%H:%M:%S')})\n".encode())


def stop_layout(record: LayoutRecord, *, int_wait: float = 15.0, term_wait: float = 10.0,
                on_step: Callable[[str], None] | None = None) -> list[str]:
    """Blocking: stop every process of a layout (proxy first, then the servers)."""
    proxy = _targets(p for p in record.processes if p.role == "proxy")
    servers = _targets(p for p in record.processes if p.role != "proxy")
    for p in record.processes:  # what the log says after this is the stop, not a crash (the playbook reads it)
        _mark_stop(p)
    out = stop_processes(proxy, int_wait=3.0, on_step=on_step) if proxy else []
    out += stop_processes(servers, layout_id=record.id, int_wait=int_wait, term_wait=term_wait, on_step=on_step)
    return out


async def tear_down(record: LayoutRecord, bus: EventBus, *, store: StateStore | None = None,
                    forget: bool = True) -> None:
    """Stop a layout and drop it from the state file (its logs stay on disk)."""
    store = store or StateStore()
    bus.publish(LayoutChanged(layout_id=record.id, status="stopping", topology=record.topology,
                              profile_id=record.profile_id, endpoint=record.endpoint, simulated=record.simulated))

    def mark_stopping() -> None:
        with store.locked() as layouts:
            if record.id in layouts:
                layouts[record.id].status = "stopping"

    def forget_or_mark_stopped() -> None:
        with store.locked() as layouts:
            if forget:
                gone = layouts.pop(record.id, None)
                if gone is not None and record.status == "failed":  # a failure stopped (down --all): history
                    failures.archive(store, gone)
            elif record.id in layouts:
                layouts[record.id].status = "stopped"

    await asyncio.to_thread(mark_stopping)
    int_wait, term_wait = stop_waits(record.simulated)
    await asyncio.to_thread(stop_layout, record, int_wait=int_wait, term_wait=term_wait)
    await asyncio.to_thread(forget_or_mark_stopped)
    bus.publish(LayoutChanged(layout_id=record.id, status="stopped", topology=record.topology,
                              profile_id=record.profile_id, endpoint=record.endpoint, simulated=record.simulated))


def process_states(record: LayoutRecord) -> dict[str, bool]:
    return {p.name: process_alive(p.pid, p.create_time) for p in record.processes}


def assess_layout(record: LayoutRecord, alive: dict[str, bool] | None = None) -> LayoutHealth:
    """Blocking (one psutil look per process): the status to show for a layout, ``degraded`` or ``failed`` when a
    server or the proxy of a ready (or starting) layout has exited, naming which. What ``status``, ``watch`` and
    the console's follower show; the state file keeps the recorded status (``down`` still finds the layout)."""
    return layout_health(record, process_states(record) if alive is None else alive)

