"""The simulator as a predictor: the figures a benchmark would give, from the same performance model and schedulers
the simulated server paces its tokens with (one model, two uses), in virtual time (pure: no server, no clock).

- :func:`predict`: one cell (model, GPU, topology, workload, stack, host correction) → the bench's headline figures.
- :func:`predict_run`: the prediction for a stored run, from what the run recorded (its plan, workload, GPU, flags).
- :func:`fit_correction`: ``predict --calibrate``: per-host correction factors (named, bounded) fitted to measured
  runs, with the residuals per run.
- :func:`decision_map`: sweeps input/output lengths (and rates) and names, per objective, the winning topology in
  each region, the crossovers, and the few real runs that would confirm the nearest one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tui.core.models import ModelProfile
from tui.core.plan.gpuspecs import GpuSpec
from tui.core.topology import parse_topology
from tui.sim.benchsim import simulate_bench
from tui.sim.faults import moe_dp_fails
from tui.sim.knobs_model import CPU_DRAFTERS, ServeKnobs, knobs_from_flags, spec_plan
from tui.sim.perfmodel import CORRECTION_BOUNDS, FP8_KV_MIN_CC, Correction, Stack, first_batch_jit_s

METRICS = ("output_throughput", "mean_tpot_ms", "mean_ttft_ms")
METRIC_TITLES = {"output_throughput": "output tok/s", "mean_tpot_ms": "mean TPOT ms", "mean_ttft_ms": "mean TTFT ms"}
OBJECTIVES = ("max_throughput", "min_tpot", "max_goodput")
OBJECTIVE_TITLES = {"max_throughput": "max output throughput", "min_tpot": "min mean TPOT",
                    "max_goodput": "max goodput under the SLO"}
#: the map's default grid (tokens): powers of four across what vLLM serves at 32k context, plus the seed's workloads
DEFAULT_ISL = (128, 512, 2048, 8192, 32768)
DEFAULT_OSL = (64, 256, 1024, 4096)
SEED_POINTS = ((512, 2048, "decode-heavy"), (7500, 200, "prefill-heavy"))


def stack_for(spec: GpuSpec, *, nvcc: bool, attention_backend: str | None = None,
              flashinfer_sampler: bool | None = None) -> Stack:
    """The stack the planner's rules give on a host: without nvcc, the FlashInfer sampler off and, on Blackwell,
    Triton attention (planner.py's host-driven workarounds); explicit choices win."""
    if attention_backend is None and not nvcc and spec.compute_capability >= 10.0:
        attention_backend = "TRITON_ATTN"
    sampler = nvcc if flashinfer_sampler is None else flashinfer_sampler
    return Stack.select(spec, attention_backend=attention_backend, flashinfer_sampler=sampler, nvcc=nvcc)


@dataclass
class Prediction:
    topology: str
    input_len: int
    output_len: int
    num_prompts: int
    rate: float | None  # None: all at once
    #: METRICS (+ request_goodput with an SLO; with speculative decoding spec_acceptance_rate and
    #: spec_mean_acceptance_length as vLLM defines them: accepted / drafted tokens, 1 + accepted / drafts)
    values: dict[str, float] = field(default_factory=dict)
    refused: str = ""  # why the simulator would not start it (the seed's gemma DP=2)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"topology": self.topology, "input_len": self.input_len, "output_len": self.output_len,
                "num_prompts": self.num_prompts, "request_rate": "inf" if self.rate is None else self.rate,
                "values": dict(self.values), "refused": self.refused, "notes": list(self.notes)}


def predict(profile: ModelProfile, spec: GpuSpec, topology: str, *, input_len: int, output_len: int,
            num_prompts: int = 128, rate: float | None = None, stack: Stack | None = None,
            correction: Correction | None = None, slo_ms: Mapping[str, float] | None = None,
            gpu_memory_utilization: float | None = None, first_run: bool = False, seed: int = 0,
            moe_backend: str = "auto", knobs: ServeKnobs | None = None,
            role_knobs: Mapping[str, ServeKnobs] | None = None) -> Prediction:
    """One cell. ``knobs``: the serve flags every server runs with; ``role_knobs``: a disaggregated layout's
    "prefill" and "decode" servers' (a role missing: ``knobs``). Their attention backend and sampler override
    ``stack``'s."""
    topo = parse_topology(topology)
    out = Prediction(topo.name, input_len, output_len, num_prompts, rate)
    dp = topo.dp if topo.kind == "dp" else 1
    if moe_dp_fails(profile, dp, moe_backend):
        out.refused = "fails to start: MoE + data parallel in vLLM 0.24 (CUTLASS FP8 MoE warm-up)"
        return out
    disagg = topo.kind not in ("tp", "dp")
    roles = dict(role_knobs or {}) if disagg else {}
    st = stack or Stack.select(spec)
    kn = knobs or ServeKnobs()
    first = roles.get("prefill", kn) if disagg else kn
    jit = first_batch_jit_s(spec, st.with_knobs(first)) if first_run else 0.0
    r = simulate_bench(profile, spec, topo, input_len=input_len, output_len=output_len, num_prompts=num_prompts,
                       gpu_memory_utilization=gpu_memory_utilization, jit_stall_s=jit, stack=st,
                       request_rate=rate, seed=seed, correction=correction, knobs=knobs,
                       role_knobs=roles or None)
    out.values = {"output_throughput": r.output_throughput, "mean_tpot_ms": r.mean_tpot_ms,
                  "mean_ttft_ms": r.mean_ttft_ms, "median_ttft_ms": r.median_ttft_ms,
                  "request_throughput": r.request_throughput}
    if slo_ms:
        out.values["request_goodput"] = r.goodput(slo_ms)
    if r.completed < num_prompts:
        out.notes.append(f"only {r.completed} of {num_prompts} requests fit")
    out.notes += knob_notes(profile, spec, roles.get("decode", kn) if disagg else kn, out.values)
    return out


def knob_notes(profile: ModelProfile, spec: GpuSpec, knobs: ServeKnobs, values: dict[str, float]) -> list[str]:
    """What the model made of the (decode side's) knobs; speculative decoding's figures go into ``values``."""
    notes: list[str] = []
    sp = spec_plan(knobs, dummy_weights=(knobs.load_format or profile.load_format) == "dummy")
    if sp is not None:
        per_pos = sp.per_position()
        values["spec_acceptance_rate"] = sum(per_pos) / sp.k
        values["spec_mean_acceptance_length"] = sp.mean_length
        notes.append(f"speculative decoding {sp.method}:{sp.k}: per-draft-token acceptance {sp.acceptance:.2f} "
                     f"({sp.source}); mean acceptance length {sp.mean_length:.2f} tokens a step")
        if sp.draft_share < 1.0:
            notes.append(f"the {sp.method} drafter proposes on {sp.draft_share:.2%} of steps (random prompts, as on "
                         "the real H200)")
        if knobs.cpu_drafter:
            notes.append("vLLM 0.24 runs n-gram drafting without async scheduling, on its V1 model runner")
    if knobs.kv_fp8 and spec.compute_capability < FP8_KV_MIN_CC:
        notes.append(f"FP8 KV cache needs compute capability >= {FP8_KV_MIN_CC} ({spec.name} has "
                     f"{spec.compute_capability:g})")
    if knobs.expert_parallel and not profile.is_moe:
        notes.append("expert parallel: no effect on a dense model")
    return notes


# --- a stored run -----------------------------------------------------------------------------------------------


@dataclass
class RunFacts:
    """What a stored run says about how it was served (from its run.json, plan.json and workload.json)."""

    topology: str
    profile_id: str
    gpu: str  # NVML name ("NVIDIA H200"), else the plan's host label ("SIMULATED host …: 2× NVIDIA B200"), or ""
    input_len: int
    output_len: int
    num_prompts: int
    rate: float | None
    seed: int
    attention_backend: str | None
    flashinfer_sampler: bool | None
    nvcc: bool | None
    gpu_memory_utilization: float | None
    shared_gpus: bool
    first_run_jit: bool  # the servers logged a Triton JIT compile during the run
    clock: float = 1.0  # a simulated run's --sim-clock: its figures are in wall time, virtual time / clock
    moe_backend: str = "auto"
    knobs: ServeKnobs = field(default_factory=ServeKnobs)  # the first server's (every server's, but a P/D role's)
    role_knobs: dict[str, ServeKnobs] = field(default_factory=dict)  # "prefill" / "decode" servers' own
    #: the per-draft-token acceptance the run's own spec_decode counters imply (None: not measured, or a CPU
    #: drafter, which proposes on only some steps: its published default stands)
    spec_measured: float | None = None


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return str(argv[i + 1])
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def run_facts(meta: Mapping[str, Any], plan: Mapping[str, Any] | None, workload: Mapping[str, Any] | None,
              summary: Mapping[str, Any]) -> RunFacts:
    servers = [s for s in list((plan or {}).get("servers") or []) if isinstance(s, Mapping)]
    argv = [str(a) for a in (servers[0].get("argv") or [])] if servers else []
    env = {str(k): str(v) for k, v in dict(servers[0].get("env") or {}).items()} if servers else {}
    role_knobs: dict[str, ServeKnobs] = {}
    for srv in servers:
        role = str(srv.get("role") or "")
        if role in ("prefill", "decode") and role not in role_knobs:
            role_knobs[role] = knobs_from_flags([str(a) for a in (srv.get("argv") or [])],
                                                {str(k): str(v) for k, v in dict(srv.get("env") or {}).items()})
    att = _flag_value(argv, "--attention-backend")
    sampler_env = env.get("VLLM_USE_FLASHINFER_SAMPLER")
    sampler = None if sampler_env is None else str(sampler_env).strip().lower() not in ("0", "false")
    workarounds = " ".join(str(w) for w in ((plan or {}).get("workarounds") or []))
    nvcc: bool | None = False if "no usable nvcc" in workarounds else (True if plan else None)
    gmu = _flag_value(argv, "--gpu-memory-utilization")
    gpus = [int(g) for g in ((plan or {}).get("gpus") or [])]
    fp = meta.get("fingerprint") or {}
    gpu_names = [str(g.get("name", "")) for g in (fp.get("gpus") or []) if isinstance(g, dict)]
    wl = workload or {}
    rate = wl.get("request_rate", meta.get("request_rate", "inf"))
    num = int(wl.get("num_prompts") or summary.get("num_prompts") or summary.get("completed") or 0)
    input_len = int(wl.get("input_len") or 0)
    output_len = int(wl.get("output_len") or 0)
    if not input_len and summary.get("completed"):
        input_len = round(float(summary.get("total_input_tokens", 0)) / float(summary["completed"]))
        output_len = round(float(summary.get("total_output_tokens", 0)) / float(summary["completed"]))
    facts = RunFacts(
        topology=str(meta.get("topology") or (plan or {}).get("topology") or ""),
        profile_id=str((plan or {}).get("profile_id") or meta.get("model") or ""),
        gpu=gpu_names[0] if gpu_names else str((plan or {}).get("host_label") or ""), input_len=input_len,
        output_len=output_len, num_prompts=num,
        rate=None if rate in (None, "inf") or (isinstance(rate, float) and math.isinf(rate)) else float(rate),
        seed=int(wl.get("seed") or 0), attention_backend=att, flashinfer_sampler=sampler, nvcc=nvcc,
        gpu_memory_utilization=float(gmu) if gmu else None, shared_gpus=len(set(gpus)) < len(gpus),
        first_run_jit="triton-jit" in (meta.get("flags") or []),
        clock=float((meta.get("sim_pacing") or {}).get("clock") or 1.0),
        moe_backend=_flag_value(argv, "--moe-backend") or "auto", knobs=knobs_from_flags(argv, env),
        role_knobs=role_knobs)
    return _with_measured_acceptance(facts, meta.get("spec_decode"))


def acceptance_from_rate(rate: float, k: int) -> float:
    """The per-draft-token acceptance ``a`` whose draft of ``k`` tokens has vLLM's acceptance rate ``rate``
    (accepted / draft tokens = (a + a² + … + a^k) / k: each position needs every earlier one accepted)."""
    if k <= 0 or rate <= 0:
        return 0.0
    if rate >= 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if sum(mid ** (i + 1) for i in range(k)) / k < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _with_measured_acceptance(facts: RunFacts, spec: Any) -> RunFacts:
    """A run that measured its drafts' acceptance is predicted with it, not the method's default (a model drafter:
    it drafts every step; a CPU drafter's acceptance covers only the steps it proposed on)."""
    if not isinstance(spec, Mapping):
        return facts
    rate = spec.get("acceptance_rate")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        return facts
    targets = [facts.knobs, *facts.role_knobs.values()]
    live = [kn for kn in targets if kn.speculative and kn.spec_method not in CPU_DRAFTERS and kn.spec_tokens > 0]
    if not live:
        return facts
    a = acceptance_from_rate(float(rate), live[0].spec_tokens)

    def fix(kn: ServeKnobs) -> ServeKnobs:
        ok = kn.speculative and kn.spec_method not in CPU_DRAFTERS and kn.spec_tokens > 0
        return replace(kn, spec_acceptance=a) if ok else kn

    return replace(facts, knobs=fix(facts.knobs), role_knobs={r: fix(kn) for r, kn in facts.role_knobs.items()},
                   spec_measured=a)


def predict_facts(facts: RunFacts, profile: ModelProfile, spec: GpuSpec,
                  correction: Correction | None = None) -> Prediction:
    """The prediction for the cell a run measured, on its GPU, with its stack (and its first-run compile if its
    servers logged one)."""
    nvcc = True if facts.nvcc is None else facts.nvcc
    stack = stack_for(spec, nvcc=nvcc, attention_backend=facts.attention_backend,
                      flashinfer_sampler=facts.flashinfer_sampler)
    p = predict(profile, spec, facts.topology, input_len=facts.input_len, output_len=facts.output_len,
                num_prompts=facts.num_prompts or 128, rate=facts.rate, stack=stack, correction=correction,
                gpu_memory_utilization=facts.gpu_memory_utilization, first_run=facts.first_run_jit, seed=facts.seed,
                moe_backend=facts.moe_backend, knobs=facts.knobs, role_knobs=facts.role_knobs or None)
    p.notes.append(stack.describe())
    for role, kn in sorted(facts.role_knobs.items()):
        if kn.describe():
            p.notes.append(f"{role}: {kn.describe()}")
    if not facts.role_knobs and facts.knobs.describe():
        p.notes.append(facts.knobs.describe())
    if facts.spec_measured is not None:
        p.notes.append(f"speculative decoding with the run's own acceptance: {facts.spec_measured:.2f} per draft "
                       "token, from its vllm:spec_decode_* counters")
    if facts.shared_gpus:
        p.notes.append("the servers shared GPUs: the model gives each its own")
    if facts.first_run_jit:
        p.notes.append("with the first-run Triton sampler compile the servers logged")
    if facts.clock != 1.0 and p.values:  # the simulated servers ran sped up: the run measured wall time
        c = facts.clock
        p.values = {k: (v * c if k in ("output_throughput", "request_throughput", "request_goodput") else v / c)
                    for k, v in p.values.items()}
        p.notes.append(f"at --sim-clock {c:g}: in the run's wall time (virtual time / {c:g})")
    return p


def ratios(pred: Mapping[str, float], measured: Mapping[str, Any]) -> dict[str, float]:
    """measured / predicted per headline metric (where both exist)."""
    out: dict[str, float] = {}
    for k in METRICS:
        p, m = pred.get(k), measured.get(k)
        if isinstance(p, int | float) and isinstance(m, int | float) and p > 0:
            out[k] = float(m) / float(p)
    return out


# --- calibration ------------------------------------------------------------------------------------------------


@dataclass
class FitRun:
    """One measured run the fit uses: its facts, profile, GPU and measured figures."""

    label: str
    facts: RunFacts
    profile: ModelProfile
    spec: GpuSpec
    measured: dict[str, float]


@dataclass
class FitResult:
    correction: Correction
    residuals: list[dict[str, Any]]  # per run: label, metric -> (predicted, measured, measured/predicted)
    before: float  # RMS log residual with no correction
    after: float


def _residual(runs: Sequence[FitRun], corr: Correction) -> tuple[float, list[dict[str, Any]]]:
    total = 0.0
    n = 0
    rows: list[dict[str, Any]] = []
    for r in runs:
        pred = predict_facts(r.facts, r.profile, r.spec, corr).values
        row: dict[str, Any] = {"run": r.label}
        for k in METRICS:
            p, m = pred.get(k), r.measured.get(k)
            if p and m and p > 0 and m > 0:
                e = math.log(m / p)
                total += e * e
                n += 1
                row[k] = {"predicted": p, "measured": m, "ratio": m / p}
        rows.append(row)
    return (math.sqrt(total / n) if n else 0.0), rows


def fit_correction(runs: Sequence[FitRun], *, steps: int = 9, sweeps: int = 2) -> FitResult:
    """Coordinate search over each factor on a log grid within CORRECTION_BOUNDS, narrowing each sweep. The KV
    transfer factor moves only when a disaggregated run is among them."""
    lo, hi = CORRECTION_BOUNDS
    names = ["decode", "prefill"] + (["kv_transfer"] if any("p" in r.facts.topology and "d" in r.facts.topology
                                                           and r.facts.topology[0].isdigit() for r in runs) else [])
    cur = {"decode": 1.0, "prefill": 1.0, "kv_transfer": 1.0}
    before, _ = _residual(runs, Correction())
    best = before
    span = math.log(hi / lo) / 2
    for _ in range(sweeps):
        for name in names:
            centre = math.log(cur[name])
            for i in range(steps):
                x = centre - span + 2 * span * i / (steps - 1)
                v = min(hi, max(lo, math.exp(x)))
                trial = dict(cur, **{name: v})
                err, _ = _residual(runs, Correction(**trial))
                if err < best - 1e-12:
                    best, cur = err, trial
        span /= steps / 2
    corr = Correction(**cur)
    after, rows = _residual(runs, corr)
    return FitResult(corr, rows, before, after)


# --- the decision map -------------------------------------------------------------------------------------------


def topologies_for(gpus: int) -> list[str]:
    """The layouts that use all ``gpus``: DP, TP and an even prefill/decode split (TP 1 per server)."""
    if gpus <= 1:
        return ["tp1"]
    out = [f"dp{gpus}", f"tp{gpus}"]
    if gpus % 2 == 0:
        out.append(f"{gpus // 2}p{gpus // 2}d")
    return out


@dataclass
class MapCell:
    input_len: int
    output_len: int
    rate: float | None
    predictions: dict[str, Prediction]
    winners: dict[str, tuple[str, float | None]] = field(default_factory=dict)  # objective -> (topology, margin)
    on_grid: bool = True  # False: an extra point (the seed's workloads) outside the sweep's grid


def _score(objective: str, p: Prediction) -> float | None:
    v = p.values
    if p.refused or not v:
        return None
    if objective == "max_throughput":
        return v.get("output_throughput")
    if objective == "min_tpot":
        t = v.get("mean_tpot_ms")
        return -t if t else None
    g = v.get("request_goodput")
    return g


def winners(preds: Mapping[str, Prediction]) -> dict[str, tuple[str, float | None]]:
    """Per objective the best topology and its margin over the runner-up (relative: 0.12 = 12 % better)."""
    out: dict[str, tuple[str, float | None]] = {}
    # one name per distinct prediction: a configuration that predicts what another does is not its rival (a
    # decode-only knob on a TP layout, the backend the GPU picks anyway); the first listed keeps the name
    first: dict[tuple[Any, ...], str] = {}
    for t, p in preds.items():
        first.setdefault((p.refused, *sorted(p.values.items())), t)
    names = set(first.values())
    for obj in OBJECTIVES:
        # best first; among equals the first listed (the layout without knobs before its configurations)
        scored = sorted(((s, t) for t, p in preds.items() if t in names and (s := _score(obj, p)) is not None),
                        key=lambda st: -st[0])
        if not scored:
            continue
        best, top = scored[0]
        if obj == "max_goodput" and best <= 0:
            continue  # no topology meets the SLO here: no winner
        margin = None
        if len(scored) > 1:
            second = scored[1][0]
            margin = (best - second) / abs(second) if second else None
            if obj == "min_tpot":  # scores are −TPOT: the runner-up's TPOT over the winner's, less 1
                margin = (second / best) - 1 if best else None
        out[obj] = (top, margin)
    return out


@dataclass
class DecisionMap:
    model: str
    gpu: str
    gpus: int
    stack: str
    calibration: dict[str, float]
    calibration_source: str
    num_prompts: int
    slo_ms: dict[str, float]
    topologies: list[str]
    cells: list[MapCell]
    refused: dict[str, str]
    isls: list[int] = field(default_factory=list)  # the grid
    osls: list[int] = field(default_factory=list)
    skipped: list[tuple[int, int]] = field(default_factory=list)  # grid cells beyond max_model_len
    #: label → role → (extra vllm argv words, extra env pairs); "" is the configuration without knobs
    configurations: dict[str, dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]] = field(
        default_factory=lambda: {"": {}})

    def cell(self, isl: int, osl: int, rate: float | None = None) -> MapCell | None:
        for c in self.cells:
            if c.input_len == isl and c.output_len == osl and c.rate == rate:
                return c
        return None

    def crossovers(self) -> list[dict[str, Any]]:
        """Adjacent grid cells (along input, then output length, at the same rate) whose winners differ."""
        out: list[dict[str, Any]] = []
        isls, osls = self.isls, self.osls
        rates = sorted({c.rate for c in self.cells}, key=lambda r: math.inf if r is None else r)
        for obj in OBJECTIVES:
            for rate in rates:
                for axis, outer, inner in (("input", osls, isls), ("output", isls, osls)):
                    for o in outer:
                        for a, b in itertools.pairwise(inner):
                            ca = self.cell(a, o, rate) if axis == "input" else self.cell(o, a, rate)
                            cb = self.cell(b, o, rate) if axis == "input" else self.cell(o, b, rate)
                            if ca is None or cb is None or obj not in ca.winners or obj not in cb.winners:
                                continue
                            wa, wb = ca.winners[obj][0], cb.winners[obj][0]
                            if wa != wb:
                                out.append({"objective": obj, "axis": axis, "rate": rate, "from": wa, "to": wb,
                                            "between": [(ca.input_len, ca.output_len), (cb.input_len, cb.output_len)],
                                            "margins": [ca.winners[obj][1], cb.winners[obj][1]]})
        return out

    def suggestions(self, limit: int = 3) -> list[dict[str, Any]]:
        """The real runs that would confirm the closest crossovers (the smallest margins on either side)."""
        cands = []
        for x in self.crossovers():
            m = [abs(v) for v in x["margins"] if v is not None]
            cands.append((min(m) if m else math.inf, x))
        cands.sort(key=lambda t: t[0])
        out: list[dict[str, Any]] = []
        seen: set[tuple[int, int, str, str]] = set()
        for _, x in cands:
            topo = sorted({x["from"], x["to"]})
            for isl, osl in x["between"]:
                key = (isl, osl, topo[0], topo[-1])
                if key in seen:
                    continue
                seen.add(key)
                row = {"objective": x["objective"], "input_len": isl, "output_len": osl, "rate": x["rate"],
                       "topologies": sorted({split_candidate(t)[0] for t in topo}),
                       "workload": f"random-{isl}x{osl}"}
                if len(self.configurations) > 1:
                    row["candidates"] = topo
                    row["configurations"] = sorted({split_candidate(t)[1] for t in topo})
                out.append(row)
            if len(out) >= limit:
                break
        return out[:limit]

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": "PREDICTED", "model": self.model, "gpu": self.gpu, "gpus": self.gpus, "stack": self.stack,
            "calibration": self.calibration, "calibration_source": self.calibration_source,
            "num_prompts": self.num_prompts, "slo_ms": self.slo_ms, "topologies": self.topologies,
            "refused": self.refused, "grid": {"input_len": self.isls, "output_len": self.osls},
            "skipped_beyond_max_model_len": [list(x) for x in self.skipped],
            "cells": [{"input_len": c.input_len, "output_len": c.output_len, "on_grid": c.on_grid,
                       "request_rate": "inf" if c.rate is None else c.rate,
                       "winners": {o: {"topology": w[0], "margin": w[1]} for o, w in c.winners.items()},
                       "predictions": {t: p.values for t, p in c.predictions.items() if not p.refused}}
                      for c in self.cells],
            "crossovers": self.crossovers(), "suggested_runs": self.suggestions(),
            "configurations": {label: {role: {"args": list(args), "env": dict(env)} for role, (args, env)
                                       in roles.items()} for label, roles in self.configurations.items()},
        }


def candidate_name(topology: str, label: str) -> str:
    """A map candidate's key: ``"<topology>"`` for the configuration without knobs, else ``"<topology> <label>"``."""
    return f"{topology} {label}" if label else topology


def split_candidate(name: str) -> tuple[str, str]:
    """(topology, configuration label) of a candidate's key."""
    topo, _, label = name.partition(" ")
    return topo, label


ConfigSpec = Mapping[str, Mapping[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]]


def config_knobs(profile: ModelProfile, roles: Mapping[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]
                 ) -> tuple[ServeKnobs, dict[str, ServeKnobs]]:
    """A configuration's knobs: every server's ("*"; with "single": the words of TP and DP servers only, as a knob
    that belongs to decode has them), and each P/D role's ("*" plus the role's own words)."""
    base = ["vllm", "serve", profile.model]
    star_args, star_env = roles.get("*", ((), ()))
    single_args, single_env = roles.get("single", ((), ()))
    every = knobs_from_flags([*base, *star_args, *single_args], {**dict(star_env), **dict(single_env)})
    by_role: dict[str, ServeKnobs] = {}
    for role in ("prefill", "decode"):
        if role in roles or "single" in roles:
            args, env = roles.get(role, ((), ()))
            by_role[role] = knobs_from_flags([*base, *star_args, *args], {**dict(star_env), **dict(env)})
    return every, by_role


def default_slo(profile: ModelProfile, spec: GpuSpec, stack: Stack, correction: Correction | None,
                topologies: Sequence[str], num_prompts: int) -> dict[str, float]:
    """Without an operator SLO: TPOT ≤ 1.5 × the best TPOT any topology reaches on the seed's decode-heavy traffic
    (the recommendation's DERIVED_SLO_FACTOR rule, on predicted figures)."""
    best = math.inf
    for t in topologies:
        p = predict(profile, spec, t, input_len=512, output_len=2048, num_prompts=num_prompts, stack=stack,
                    correction=correction)
        if not p.refused and p.values.get("mean_tpot_ms"):
            best = min(best, p.values["mean_tpot_ms"])
    return {"tpot": round(1.5 * best, 1)} if math.isfinite(best) else {}


def decision_map(profile: ModelProfile, spec: GpuSpec, gpus: int, *, isls: Sequence[int] = DEFAULT_ISL,
                 osls: Sequence[int] = DEFAULT_OSL, rates: Sequence[float | None] = (None,),
                 stack: Stack | None = None, correction: Correction | None = None, calibration_source: str = "none",
                 slo_ms: Mapping[str, float] | None = None, num_prompts: int = 128,
                 topologies: Sequence[str] | None = None, points: Sequence[tuple[int, int]] = (),
                 configs: ConfigSpec | None = None) -> DecisionMap:
    """The map over topologies × ``configs`` (label → role → (extra vllm argv words, extra env pairs); roles "*",
    "prefill", "decode"; label "" is the configuration without knobs). Each candidate is keyed
    :func:`candidate_name`; a configuration's role words apply to the layouts that have the role ("*" alone on TP
    and DP). Identical (topology, knobs) candidates are predicted once."""
    st = stack or Stack.select(spec)
    topos = list(topologies or topologies_for(gpus))
    confs: dict[str, dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]] = (
        {label: {role: (tuple(a), tuple((str(k), str(v)) for k, v in e)) for role, (a, e) in roles.items()}
         for label, roles in configs.items()} if configs else {"": {}})
    resolved = {label: config_knobs(profile, roles) for label, roles in confs.items()}
    slo = dict(slo_ms) if slo_ms else default_slo(profile, spec, st, correction, topos, num_prompts)
    grid = {(i, o) for i in isls for o in osls}
    pairs = sorted(grid | set(points))
    cells: list[MapCell] = []
    refused: dict[str, str] = {}
    skipped = sorted(p for p in grid if p[0] + p[1] > profile.max_model_len)
    # each candidate's (knobs, role knobs): what applies to its topology
    cands: dict[str, tuple[str, ServeKnobs | None, dict[str, ServeKnobs] | None]] = {}
    for label, (every, by_role) in resolved.items():
        for t in topos:
            disagg = parse_topology(t).kind not in ("tp", "dp")
            cands[candidate_name(t, label)] = (t, every if every != ServeKnobs() else None,
                                              by_role if disagg and by_role else None)
    for rate in rates:
        for isl, osl in pairs:
            if isl + osl > profile.max_model_len:
                continue
            memo: dict[tuple[str, Any, Any], Prediction] = {}
            preds: dict[str, Prediction] = {}
            for name, (t, kn, rk) in cands.items():
                key = (t, kn, tuple(sorted(rk.items())) if rk else None)
                if key not in memo:
                    memo[key] = predict(profile, spec, t, input_len=isl, output_len=osl, num_prompts=num_prompts,
                                        rate=rate, stack=st, correction=correction, slo_ms=slo, knobs=kn,
                                        role_knobs=rk)
                preds[name] = memo[key]
            for t, p in preds.items():
                if p.refused:
                    refused[t] = p.refused
            cell = MapCell(isl, osl, rate, preds, on_grid=(isl, osl) in grid)
            cell.winners = winners(preds)
            cells.append(cell)
    return DecisionMap(model=profile.id, gpu=spec.name, gpus=gpus, stack=st.describe(),
                       calibration=(correction or Correction()).to_dict(), calibration_source=calibration_source,
                       num_prompts=num_prompts, slo_ms=slo, topologies=topos, cells=cells, refused=refused,
                       isls=sorted(set(isls)), osls=sorted(set(osls)), skipped=skipped, configurations=confs)
