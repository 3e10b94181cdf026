"""One simulated engine's scheduler, in virtual time (pure: no clocks, no I/O).

It follows vLLM V1's continuous batching: every step has a token budget (``max_num_batched_tokens``); running
requests are served first (one token for each decoding sequence, the next chunk of a prompt still being prefilled),
then waiting requests are admitted in arrival order while the budget, ``max_num_seqs`` and free KV blocks allow.
KV blocks (16 tokens) are allocated as tokens are scheduled; when a running request cannot get a block, the most
recently admitted running request is preempted (its KV freed, recomputed later), as vLLM does. A step's duration
comes from :class:`tui.sim.perfmodel.ModelCost`; a prefill chunk in a step therefore slows every decode in it.

P/D: a request may arrive with ``external_tokens`` (its prompt KV pulled from a prefill instance): it is admitted
with blocks for its whole prompt, waits ``transfer_time`` for the pull, then computes only the remaining tokens. A
prefill-only request (``hold_after_finish``) keeps its blocks after its one token until the decode side reads them
(:meth:`EngineScheduler.release_held`) or its lease runs out.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from tui.sim.perfmodel import BLOCK_SIZE, Chunk, ModelCost

WAITING = "waiting"
REMOTE_KV = "remote_kv"  # blocks allocated, KV being pulled from the prefill instance
RUNNING = "running"
FINISHED = "finished"


@dataclass(eq=False)
class SimRequest:
    rid: str
    prompt_len: int
    max_tokens: int
    arrival: float
    external_tokens: int = 0
    transfer_time: float = 0.0
    hold_after_finish: bool = False
    cached_tokens: int = 0
    # progress
    num_computed: int = 0
    generated: int = 0
    blocks: int = 0
    state: str = WAITING
    ready_at: float = 0.0
    scheduled_at: float | None = None  # first admitted (end of queueing)
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    finish_reason: str | None = None
    preemptions: int = 0
    computed_prompt: int = 0  # prompt tokens this engine computed itself (not cached, not transferred)
    lease_until: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_len + self.generated


@dataclass
class StepResult:
    start: float
    duration: float
    emitted: list[SimRequest] = field(default_factory=list)  # requests that got one new token this step
    finished: list[SimRequest] = field(default_factory=list)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    preempted: int = 0
    stalled: float = 0.0  # part of the duration spent in a JIT stall
    mem_time: float = 0.0  # part of the duration spent streaming memory

    @property
    def end(self) -> float:
        return self.start + self.duration

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens


class EngineScheduler:
    def __init__(self, cost: ModelCost, *, kv_tokens: int, max_num_seqs: int, max_num_batched_tokens: int,
                 state_tokens_per_seq: int = 0, jit_stall_s: float = 0.0, lease_s: float = 30.0) -> None:
        self.cost = cost
        self.total_blocks = max(0, kv_tokens // BLOCK_SIZE)
        self.free_blocks = self.total_blocks
        self.state_blocks = math.ceil(state_tokens_per_seq / BLOCK_SIZE) if state_tokens_per_seq else 0
        self.max_num_seqs = max_num_seqs
        self.max_batched = max_num_batched_tokens
        self.jit_stall_s = jit_stall_s
        self.lease_s = lease_s
        self.waiting: deque[SimRequest] = deque()
        self.transferring: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self.held: dict[str, SimRequest] = {}
        self.by_id: dict[str, SimRequest] = {}
        self.num_preemptions = 0
        self.expired: list[SimRequest] = []

    # --- queries --------------------------------------------------------------------------------------------
    @property
    def kv_usage(self) -> float:
        return 0.0 if self.total_blocks == 0 else 1.0 - self.free_blocks / self.total_blocks

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.transferring)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self.transferring)

    def next_ready_time(self) -> float | None:
        """When an engine with nothing runnable now has something to do (a KV pull finishing)."""
        if self.running or self.waiting:
            return None
        if self.transferring:
            return min(r.ready_at for r in self.transferring)
        return None

    # --- changes --------------------------------------------------------------------------------------------
    def add(self, req: SimRequest) -> None:
        req.num_computed = 0
        self.waiting.append(req)
        self.by_id[req.rid] = req

    def abort(self, rid: str, now: float) -> SimRequest | None:
        req = self.by_id.pop(rid, None)
        if req is None or req.state == FINISHED:
            return None
        if req in self.running:
            self.running.remove(req)
        elif req in self.transferring:
            self.transferring.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self._free(req)
        req.state = FINISHED
        req.finish_reason = "abort"
        req.finished_at = now
        return req

    def release_held(self, rid: str) -> SimRequest | None:
        """The decode side read this request's KV: free its blocks."""
        req = self.held.pop(rid, None)
        if req is not None:
            self._free(req)
        return req

    def expire_leases(self, now: float) -> list[SimRequest]:
        gone = [r for r in self.held.values() if r.lease_until <= now]
        for r in gone:
            self.held.pop(r.rid, None)
            self._free(r)
        return gone

    # --- the step -------------------------------------------------------------------------------------------
    def step(self, now: float) -> StepResult | None:
        """Schedule and run one step starting at ``now``; None when there is nothing to run now."""
        if self.held:
            self.expired.extend(self.expire_leases(now))
        if self.transferring:
            for req in [r for r in self.transferring if r.ready_at <= now]:
                self.transferring.remove(req)
                req.num_computed = req.external_tokens
                req.state = RUNNING
                self.running.append(req)
        budget = self.max_batched
        decodes: list[SimRequest] = []
        decode_ctx = 0
        prefills: list[tuple[SimRequest, int]] = []
        preempted = 0
        cap_offset = self.state_blocks * BLOCK_SIZE
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            computed = req.num_computed
            n = req.prompt_len + req.generated - computed
            if n > budget:
                n = budget
            if computed + n > req.blocks * BLOCK_SIZE - cap_offset and not self._grow(req, computed + n):
                while not self._grow(req, computed + n):
                    victim = running[-1]
                    self._preempt(victim)
                    preempted += 1
                    if victim is req:
                        break
                if req.state != RUNNING:
                    continue  # req itself was preempted; index i now points at the next one
            if n == 1 and computed >= req.prompt_len:
                decodes.append(req)
                decode_ctx += computed
            else:
                prefills.append((req, n))
            budget -= n
            i += 1
        if not preempted:
            self._admit(now, budget, prefills)
        if not decodes and not prefills:
            return None
        chunks = [Chunk(n, req.num_computed, req.num_computed + n == req.total_tokens) for req, n in prefills]
        duration, mem_time = self.cost.step(len(decodes), decode_ctx, chunks)
        sampled = len(decodes) + sum(1 for c in chunks if c.samples)
        stall = 0.0
        if self.jit_stall_s > 0 and sampled > 1:
            stall = self.jit_stall_s
            self.jit_stall_s = 0.0
        duration += stall
        end = now + duration
        result = StepResult(start=now, duration=duration, prefill_tokens=sum(n for _, n in prefills),
                            decode_tokens=len(decodes), preempted=preempted, stalled=stall, mem_time=mem_time)
        emitted = result.emitted
        for req in decodes:
            req.num_computed += 1
            req.generated += 1
            req.last_token_at = end
            emitted.append(req)
        for req, n in prefills:
            if req.num_computed < req.prompt_len:
                req.computed_prompt += min(n, req.prompt_len - req.num_computed)
            req.num_computed += n
            if req.num_computed < req.total_tokens:
                continue
            req.generated += 1
            if req.first_token_at is None:
                req.first_token_at = end
            req.last_token_at = end
            emitted.append(req)
        for req in emitted:
            if req.generated >= req.max_tokens:
                self._finish(req, end, "length")
                result.finished.append(req)
        return result

    def decode_run(self, now: float, until: float = math.inf) -> tuple[list[float], list[SimRequest]] | None:
        """Consecutive pure-decode steps at once, up to the next request finishing, while nothing else can happen
        (no request waiting, every running one decoding, blocks to spare) and steps start before ``until`` (the
        next arrival): the step ends and the requests that finished. Exactly what as many :meth:`step` calls would
        do; a fast path for virtual-time runs (the real-time server steps one by one, since it streams each)."""
        running = self.running
        if not running or self.waiting or self.transferring or self.held or self.jit_stall_s > 0 or now >= until:
            return None
        k = 1 << 30
        for req in running:
            if req.num_computed != req.prompt_len + req.generated - 1 or req.num_computed < req.prompt_len:
                return None
            left = req.max_tokens - req.generated
            if left < k:
                k = left
        if k < 2:
            return None

        def blocks_needed(steps: int) -> int:
            return sum(max(0, self._blocks_for(r.num_computed + steps) + self.state_blocks - r.blocks)
                       for r in running)

        need = blocks_needed(k)
        if need > self.free_blocks:  # as many steps as the free blocks allow: none of them preempts
            lo, hi = 1, k - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if blocks_needed(mid) <= self.free_blocks:
                    lo = mid
                else:
                    hi = mid - 1
            k = lo
            if k < 2:
                return None
            need = blocks_needed(k)
        b = len(running)
        ctx = sum(r.num_computed for r in running)
        ends: list[float] = []
        t = now
        for i in range(k):
            if t >= until:
                break
            t += self.cost.step(b, ctx + i * b)[0]
            ends.append(t)
        if len(ends) < k:  # stopped at an arrival: fewer steps, so fewer blocks
            k = len(ends)
            need = sum(max(0, self._blocks_for(r.num_computed + k) + self.state_blocks - r.blocks) for r in running)
        self.free_blocks -= need
        finished: list[SimRequest] = []
        for req in running:
            req.num_computed += k
            req.generated += k
            req.blocks = max(req.blocks, self._blocks_for(req.num_computed) + self.state_blocks)
            req.last_token_at = t
        for req in list(running):
            if req.generated >= req.max_tokens:
                self._finish(req, t, "length")
                finished.append(req)
        return ends, finished

    # --- internals ------------------------------------------------------------------------------------------
    def _take(self, req: SimRequest, need: int) -> bool:
        """Move the first waiting request out of the queue with ``need`` KV blocks, if that many are free."""
        if need > self.free_blocks:
            return False
        self.waiting.popleft()
        self.free_blocks -= need
        req.blocks = need
        return True

    def _admit(self, now: float, budget: int, scheduled: list[tuple[SimRequest, int]]) -> None:
        """Admit waiting requests in arrival order while budget, max_num_seqs and free blocks allow (all of them
        start with a prefill chunk, appended to ``scheduled``)."""
        while self.waiting and budget > 0 and len(self.running) + len(self.transferring) < self.max_num_seqs:
            req = self.waiting[0]
            if req.external_tokens > 0 and req.state == WAITING:
                if not self._take(req, self._blocks_for(req.prompt_len) + self.state_blocks):
                    break
                req.state = REMOTE_KV
                req.scheduled_at = now
                req.ready_at = now + req.transfer_time
                self.transferring.append(req)
                continue
            start = min(req.cached_tokens, max(0, req.prompt_len - 1))
            n = min(req.total_tokens - start, budget)
            if not self._take(req, self._blocks_for(start + n) + self.state_blocks):
                break
            req.num_computed = start
            req.state = RUNNING
            if req.scheduled_at is None:
                req.scheduled_at = now
            self.running.append(req)
            scheduled.append((req, n))
            budget -= n

    @staticmethod
    def _blocks_for(tokens: int) -> int:
        return -(-tokens // BLOCK_SIZE)

    def _grow(self, req: SimRequest, tokens: int) -> bool:
        need = self._blocks_for(tokens) + self.state_blocks - req.blocks
        if need <= 0:
            return True
        if need > self.free_blocks:
            return False
        self.free_blocks -= need
        req.blocks += need
        return True

    def _free(self, req: SimRequest) -> None:
        self.free_blocks += req.blocks
        req.blocks = 0

    def _preempt(self, req: SimRequest) -> None:
        self.running.remove(req)
        self._free(req)
        req.num_computed = 0
        req.cached_tokens = 0
        req.external_tokens = 0
        req.state = WAITING
        req.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)

    def _finish(self, req: SimRequest, now: float, reason: str) -> None:
        self.running.remove(req)
        req.state = FINISHED
        req.finish_reason = reason
        req.finished_at = now
        self.by_id.pop(req.rid, None)
        if req.hold_after_finish and req.blocks:
            req.lease_until = now + self.lease_s
            self.held[req.rid] = req
        else:
            self._free(req)
