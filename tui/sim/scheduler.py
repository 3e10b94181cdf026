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

Speculative decoding (the cost's :class:`~tui.sim.knobs_model.SpecPlan`): a decoding sequence takes 1 + k tokens of
the budget and KV slots (its drafts), and gets 1 + (accepted drafts) tokens from the step. With ``spec_rng`` (the
simulated server) each draft is accepted at random with the plan's acceptance, as vLLM's counters then show; without
(the predictor, virtual time) each sequence gets the expected tokens per step, its fractions carried to the next
step, so a prediction is smooth and exact on average.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from tui.sim.perfmodel import BLOCK_SIZE, Chunk, ModelCost, boost_factor, heat_after

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
    last_emit: int = 0  # tokens the last step (or run of steps) gave it
    spec_credit: float = 0.0  # speculative decoding without randomness: the fraction of a token carried over

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
                 state_tokens_per_seq: int = 0, jit_stall_s: float = 0.0, lease_s: float = 30.0,
                 spec_rng: random.Random | None = None) -> None:
        self.cost = cost
        self.spec = cost.spec
        self.spec_rng = spec_rng
        # KV slots and budget a decoding sequence takes for its drafts
        self.lookahead = self.spec.k if self.spec is not None and cost.draft_share > 0 else 0
        self.spec_drafts = 0.0
        self.spec_draft_tokens = 0.0
        self.spec_accepted = 0.0
        self.spec_accepted_per_pos = [0.0] * (self.spec.k if self.spec is not None else 0)
        # the counters in expectation: sequence-steps not yet counted, and what one adds per draft position
        self._expected_pending = 0
        self._per_position = self.spec.per_position() if self.spec is not None else []
        self._accepted_per_draft = self.spec.mean_length - 1.0 if self.spec is not None else 0.0
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
        self.heat = 0.0  # the GPU's recent busy share: how near its power limit it runs (perfmodel.boost_factor)
        self.busy_until = 0.0

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
            extra = self.lookahead if n == 1 and computed >= req.prompt_len else 0
            need = computed + n + extra
            if need > req.blocks * BLOCK_SIZE - cap_offset and not self._grow(req, need):
                while not self._grow(req, need):
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
            budget -= n + extra
            i += 1
        if not preempted:
            self._admit(now, budget, prefills)
        if not decodes and not prefills:
            return None
        chunks = [Chunk(n, req.num_computed, req.num_computed + n == req.total_tokens) for req, n in prefills]
        self._cool(now)
        duration, mem_time = self.cost.step(len(decodes), decode_ctx, chunks, boost_factor(self.heat))
        self.heat = heat_after(self.heat, duration)
        self.busy_until = now + duration
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
        spec = self.spec is not None
        for req in decodes:
            m = min(self._spec_tokens(req), req.max_tokens - req.generated) if spec else 1
            req.num_computed += m
            req.generated += m
            req.last_emit = m
            req.last_token_at = end
            emitted.append(req)
        result.decode_tokens = len(decodes) * (1 + self.lookahead)
        for req, n in prefills:
            if req.num_computed < req.prompt_len:
                req.computed_prompt += min(n, req.prompt_len - req.num_computed)
            req.num_computed += n
            if req.num_computed < req.total_tokens:
                continue
            req.generated += 1
            req.last_emit = 1
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
        do; a fast path for virtual-time runs (the real-time server steps one by one, since it streams each).
        Each request's ``last_emit`` is the tokens it got over the run."""
        running = self.running
        if not running or self.waiting or self.transferring or self.held or self.jit_stall_s > 0 or now >= until:
            return None
        if self.spec is not None and self.spec_rng is not None:
            return None
        per = self.cost.mean_tokens if self.spec is not None else 1.0
        k = 1 << 30
        for req in running:
            if req.num_computed != req.prompt_len + req.generated - 1 or req.num_computed < req.prompt_len:
                return None
            left = req.max_tokens - req.generated
            steps = left if per == 1.0 else max(1, math.ceil((left - req.spec_credit) / per - 1e-9))
            if steps < k:
                k = steps
        if k < 2:
            return None

        def gained(req: SimRequest, steps: int) -> int:
            if per == 1.0:
                return steps
            return min(int(req.spec_credit + steps * per), req.max_tokens - req.generated)

        def blocks_needed(steps: int) -> int:
            return sum(max(0, self._blocks_for(r.num_computed + gained(r, steps) + self.lookahead) + self.state_blocks
                           - r.blocks) for r in running)

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
        step = self.cost.step
        self._cool(now)
        heat = self.heat
        for i in range(k):
            if t >= until:
                break
            d = step(b, ctx + int(i * b * per), (), boost_factor(heat))[0] if heat < 0.999 else step(
                b, ctx + int(i * b * per))[0]
            heat = heat_after(heat, d)
            t += d
            ends.append(t)
        self.heat = heat
        self.busy_until = t
        if len(ends) < k:  # stopped at an arrival: fewer steps, so fewer blocks
            k = len(ends)
            need = blocks_needed(k)
        self.free_blocks -= need
        finished: list[SimRequest] = []
        for req in running:
            g = gained(req, k)
            if per != 1.0:
                req.spec_credit = req.spec_credit + k * per - int(req.spec_credit + k * per)
            req.num_computed += g
            req.generated += g
            req.last_emit = g
            req.blocks = max(req.blocks, self._blocks_for(req.num_computed + self.lookahead) + self.state_blocks)
            req.last_token_at = t
        if self.spec is not None:
            self._count_expected(b * k)
        for req in list(running):
            if req.generated >= req.max_tokens:
                self._finish(req, t, "length")
                finished.append(req)
        return ends, finished

    def _cool(self, now: float) -> None:
        if now > self.busy_until:
            self.heat = heat_after(self.heat, 0.0, now - self.busy_until)
            self.busy_until = now

    # --- speculative decoding -------------------------------------------------------------------------------
    def _spec_tokens(self, req: SimRequest) -> int:
        """Tokens a speculatively decoding sequence gets from one step (1 + its accepted drafts)."""
        sp = self.spec
        assert sp is not None
        rng = self.spec_rng
        if rng is None:
            req.spec_credit += self.cost.mean_tokens
            m = int(req.spec_credit)
            req.spec_credit -= m
            self._expected_pending += 1  # counted when the counters are read (spec_counters)
            return max(1, m)
        if self.cost.draft_share < 1.0 and rng.random() >= self.cost.draft_share:
            return 1  # the drafter found nothing to propose: a plain decode
        accepted = 0
        while accepted < sp.k and rng.random() < sp.acceptance:
            accepted += 1
        self.spec_drafts += 1
        self.spec_draft_tokens += sp.k
        self.spec_accepted += accepted
        for i in range(accepted):
            self.spec_accepted_per_pos[i] += 1
        return 1 + accepted

    def _count_expected(self, seq_steps: int) -> None:
        """The spec-decode counters in expectation, for ``seq_steps`` sequence-steps without randomness."""
        sp = self.spec
        assert sp is not None
        drafts = seq_steps * self.cost.draft_share
        self.spec_drafts += drafts
        self.spec_draft_tokens += drafts * sp.k
        self.spec_accepted += drafts * self._accepted_per_draft
        for i, p in enumerate(self._per_position):
            self.spec_accepted_per_pos[i] += drafts * p

    def spec_counters(self) -> list[float]:
        """vllm:spec_decode_* so far: drafts, draft tokens, accepted tokens, accepted per draft position."""
        if self._expected_pending:
            self._count_expected(self._expected_pending)
            self._expected_pending = 0
        return [self.spec_drafts, self.spec_draft_tokens, self.spec_accepted, *self.spec_accepted_per_pos]

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
