"""The serve knobs the performance model cares about, read from a ``vllm serve`` command line and its environment
(pure): one reader for the simulated server (``config.build``) and for a stored run's prediction (``run_facts``),
so that a simulated run and its prediction see the same knobs.

- :class:`ServeKnobs`: what a command line sets (``None``: vLLM 0.24's default); :func:`knobs_from_flags` reads it
  from an argv (``--flag value``, ``--flag=value``, JSON values of ``--speculative-config``/``-sc``,
  ``--compilation-config``/``-cc`` and ``--attention-config``/``-ac``, their dotted forms ``-sc.method ngram``) and
  an environment (``VLLM_USE_FLASHINFER_SAMPLER``, and the simulator's ``DISAGG_SIM_SPEC_ACCEPTANCE``).
- :class:`SpecPlan`: speculative decoding as the model runs it (method, draft tokens, the per-token acceptance and
  where that figure came from), from :func:`spec_plan`; :func:`mean_accepted_length`: the standard result.

Acceptance defaults (per draft token, i.i.d. across positions), for when no measured figure is given:

- ``mtp``: 0.85 — DeepSeek-V3 technical report (arXiv 2412.19437, §5.4.3): the second token predicted by its MTP
  module is accepted 85–90 % of the time; Qwen3-Next's MTP reports figures in the same range.
- ``eagle`` 0.70 / ``eagle3`` 0.75 — EAGLE-2/EAGLE-3 papers (arXiv 2406.16858, 2503.01840): mean accepted lengths
  of ~3.5–4.5 tokens at 5–7 drafts on chat benchmarks, i.e. a per-token acceptance of 0.7–0.8.
- ``draft_model`` 0.60 — a small draft model of the same family (Leviathan et al., arXiv 2211.17192: α 0.5–0.8).
- ``ngram`` / ``suffix`` 0.0 — prompt lookup finds matches only where the output repeats the prompt (code edits,
  summaries, RAG); on ``vllm bench``'s random prompts it finds none. Workload-dependent: give a measured figure.
- With random weights (``--load-format dummy``) every method's acceptance is 0: the target's tokens are noise that
  no draft predicts (the real H200 knob runs on the dummy model measure the methods' overhead, not their gain).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: per-draft-token acceptance by method when none is measured (sources in the module docstring)
SPEC_DEFAULT_ACCEPTANCE = {"mtp": 0.85, "eagle": 0.70, "eagle3": 0.75, "draft_model": 0.60, "medusa": 0.60,
                           "mlp_speculator": 0.60, "ngram": 0.0, "suffix": 0.0}
SPEC_ACCEPTANCE_SOURCE = {
    "mtp": "DeepSeek-V3 report: MTP's 2nd-token acceptance 85-90 %",
    "eagle": "EAGLE-2 paper: mean accepted length ~3.5 at 5 drafts",
    "eagle3": "EAGLE-3 paper: mean accepted length ~4-4.5 at 6-7 drafts",
    "draft_model": "Leviathan et al.: alpha 0.5-0.8 for same-family drafts",
    "medusa": "Medusa paper: ~0.6 per head", "mlp_speculator": "assumed as Medusa",
    "ngram": "random prompts: no n-gram of the prompt recurs (workload-dependent)",
    "suffix": "random prompts: no suffix recurs (workload-dependent)",
}
#: methods whose drafter runs on the CPU (no GPU forward), and those that draft with extra layers on the GPU
CPU_DRAFTERS = ("ngram", "suffix")
#: the share of steps on which the n-gram / suffix drafter finds a match (and proposes its k tokens) when no
#: measured acceptance is given, i.e. on ``vllm bench``'s random prompts [H200 knob runs: the spec_decode counters]
CPU_DRAFT_SHARE_RANDOM = 0.0027  # the H200 n-gram run: 307 drafts over 114,688 generated tokens
#: the simulator's override of the acceptance (a simulated server's env; a stored simulated run's plan carries it)
ACCEPTANCE_ENV = "DISAGG_SIM_SPEC_ACCEPTANCE"
#: vLLM 0.24's attention backends by their ``AttentionBackendEnum`` names (the ones ``--attention-backend`` takes;
#: case-insensitive) — docs: VLLM-0.24.md §1, ``v1/attention/backends/registry.py``
ATTENTION_BACKEND_NAMES = ("FLASH_ATTN", "FLASH_ATTN_DIFFKV", "TRITON_ATTN", "TRITON_ATTN_DIFFKV", "FLASHINFER",
                           "FLASHINFER_MLA", "TORCH_SDPA", "FLEX_ATTENTION", "TRITON_MLA", "CUTLASS_MLA", "FLASHMLA",
                           "TURBOQUANT", "CPU_ATTN")
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")


@dataclass(frozen=True, slots=True)
class ServeKnobs:
    """What a ``vllm serve`` command line sets that the performance model cares about; None = vLLM's default."""

    attention_backend: str | None = None  # FLASH_ATTN | TRITON_ATTN | FLASHINFER ... (upper case)
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    kv_cache_dtype: str = "auto"  # auto | fp8 (fp8_e4m3 / fp8_e5m2 are fp8 too)
    spec_method: str | None = None  # ngram | mtp | eagle | eagle3 | draft_model | suffix ...
    spec_tokens: int = 0  # num_speculative_tokens / --spec-tokens
    spec_acceptance: float | None = None  # per-draft-token acceptance; None: the method's published default
    expert_parallel: bool = False  # --enable-expert-parallel / -ep
    async_scheduling: bool | None = None  # --async-scheduling / --no-async-scheduling (vLLM 0.24: on)
    prefix_caching: bool | None = None  # --enable-prefix-caching / --no-enable-prefix-caching (vLLM 0.24: on)
    enforce_eager: bool = False  # --enforce-eager, -O0, or -cc cudagraph_mode NONE
    flashinfer_sampler: bool | None = None  # VLLM_USE_FLASHINFER_SAMPLER (vLLM 0.24: on)
    load_format: str | None = None  # --load-format (dummy: random weights, so no draft is ever accepted)

    @property
    def kv_fp8(self) -> bool:
        return self.kv_cache_dtype.lower().startswith("fp8")

    @property
    def speculative(self) -> bool:
        return bool(self.spec_method) and self.spec_tokens > 0

    @property
    def async_on(self) -> bool:
        """Async scheduling as the engine runs it: vLLM 0.24 turns it off for n-gram speculative decoding."""
        return self.async_scheduling is not False and not self.cpu_drafter

    @property
    def cpu_drafter(self) -> bool:
        """n-gram / suffix speculative decoding: a CPU drafter, no async scheduling, vLLM's V1 model runner."""
        return self.speculative and self.spec_method in CPU_DRAFTERS

    @property
    def is_default(self) -> bool:
        return self == ServeKnobs(load_format=self.load_format)

    def describe(self) -> str:
        """The knobs that differ from vLLM's defaults, as short words ("" when none)."""
        parts: list[str] = []
        if self.attention_backend:
            parts.append(f"attention {self.attention_backend}")
        if self.max_num_batched_tokens:
            parts.append(f"max-num-batched-tokens {self.max_num_batched_tokens}")
        if self.max_num_seqs:
            parts.append(f"max-num-seqs {self.max_num_seqs}")
        if self.kv_cache_dtype != "auto":
            parts.append(f"KV {self.kv_cache_dtype}")
        if self.speculative:
            parts.append(f"spec {self.spec_method}:{self.spec_tokens}")
        if self.expert_parallel:
            parts.append("expert parallel")
        if self.async_scheduling is False:
            parts.append("no async scheduling")
        if self.prefix_caching is False:
            parts.append("no prefix caching")
        if self.enforce_eager:
            parts.append("eager (no CUDA graphs)")
        if self.flashinfer_sampler is not None:
            parts.append(f"FlashInfer sampler {'on' if self.flashinfer_sampler else 'off'}")
        return ", ".join(parts)


# --- reading a command line -------------------------------------------------------------------------------------

_ALIASES = {"-sc": "--speculative-config", "-cc": "--compilation-config", "-ac": "--attention-config",
            "-ep": "--enable-expert-parallel", "-O": "--optimization-level"}
_BOOLS = {"--enable-expert-parallel": "expert_parallel", "--async-scheduling": "async_scheduling",
          "--enable-prefix-caching": "prefix_caching", "--enforce-eager": "enforce_eager"}
_JSON = ("--speculative-config", "--compilation-config", "--attention-config")


def _words(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """(flag, value or None) pairs of a serve argv, ``--flag=value`` split, short aliases made long."""
    out: list[tuple[str, str | None]] = []
    items = [str(a) for a in argv]
    i = 0
    while i < len(items):
        a = items[i]
        i += 1
        if not a.startswith("-") or a == "-":
            continue
        value: str | None = None
        if "=" in a:
            a, value = a.split("=", 1)
        head, dot, tail = a.partition(".")
        if head.startswith("-O") and head not in ("-O",) and head[2:].isdigit():  # -O0, -O3
            out.append(("--optimization-level", head[2:]))
            continue
        head = _ALIASES.get(head, head)
        flag = head + (dot + tail if dot else "")
        if value is None and i < len(items) and not items[i].startswith("-") and not _is_switch(head):
            value = items[i]
            i += 1
        out.append((flag, value))
    return out


def _is_switch(flag: str) -> bool:
    base = flag[5:] if flag.startswith("--no-") else flag[2:]
    return f"--{base}" in _BOOLS


def _json(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _int(text: Any) -> int | None:
    try:
        v = int(str(text).strip())
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def _float01(text: Any) -> float | None:
    try:
        v = float(str(text).strip())
    except (TypeError, ValueError):
        return None
    return min(1.0, max(0.0, v)) if math.isfinite(v) else None


def _no_graphs(flag: str, value: str | None) -> bool:
    """``-cc '{"cudagraph_mode": "NONE"}'``, ``-cc.cudagraph_mode NONE`` or ``-O0``: no CUDA graphs."""
    if flag == "--compilation-config":
        cc = _json(value)
        return str(cc.get("cudagraph_mode", "")).upper() == "NONE" or cc.get("level") == 0 or cc.get("mode") == 0
    if flag == "--compilation-config.cudagraph_mode":
        return (value or "").strip().upper() == "NONE"
    return flag == "--optimization-level" and (value or "").strip() == "0"


def normalise_method(method: str | None, model: str | None = None) -> str | None:
    """vLLM's method names as the model groups them: every ``*_mtp`` is ``mtp``; a draft ``model`` without a method
    is ``eagle``/``eagle3`` when its name says so, else ``draft_model`` (``config/speculative.py``)."""
    m = (method or "").strip().lower()
    if not m:
        if not model:
            return None
        name = model.lower()
        return "eagle3" if "eagle3" in name else "eagle" if "eagle" in name else "draft_model"
    if m == "mtp" or m.endswith("_mtp"):
        return "mtp"
    if m in ("ngram_gpu", "[ngram]"):
        return "ngram"
    return m


def knobs_from_flags(argv: Sequence[str], env: Mapping[str, str]) -> ServeKnobs:
    """The knobs a ``vllm serve`` argv (``["vllm", "serve", MODEL, "--flag", "value", ...]``) and its environment
    set. Unparseable values count as unset (the simulated server rejects them at start, as vLLM does)."""
    fields: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    spec_model: str | None = None
    for flag, value in _words(argv):
        base = flag[5:] if flag.startswith("--no-") else flag[2:]
        if f"--{base}" in _BOOLS:
            on = not flag.startswith("--no-")
            if value is not None:
                on = value.strip().lower() not in ("0", "false", "no", "off")
            fields[_BOOLS[f"--{base}"]] = on
        elif flag == "--attention-backend" and value:
            fields["attention_backend"] = value.strip().upper()
        elif flag == "--attention-config":
            backend = _json(value).get("backend")
            if isinstance(backend, str) and backend:
                fields["attention_backend"] = backend.upper()
        elif flag == "--attention-config.backend" and value:
            fields["attention_backend"] = value.strip().upper()
        elif flag == "--max-num-batched-tokens":
            fields["max_num_batched_tokens"] = _int(value)
        elif flag == "--max-num-seqs":
            fields["max_num_seqs"] = _int(value)
        elif flag == "--kv-cache-dtype" and value:
            fields["kv_cache_dtype"] = value.strip().lower()
        elif flag == "--load-format" and value:
            fields["load_format"] = value.strip().lower()
        elif flag == "--speculative-config":
            spec.update(_json(value))
        elif flag.startswith("--speculative-config.") and value is not None:
            spec[flag.split(".", 1)[1]] = value
        elif flag == "--spec-method" and value:
            spec["method"] = value
        elif flag == "--spec-tokens":
            spec["num_speculative_tokens"] = value
        elif flag == "--spec-model" and value:
            spec_model = value
        elif _no_graphs(flag, value):
            fields["enforce_eager"] = True
    method = normalise_method(str(spec.get("method") or "") or None, str(spec.get("model") or spec_model or "")
                              or None)
    if method:
        fields["spec_method"] = method
        fields["spec_tokens"] = _int(spec.get("num_speculative_tokens")) or 0
    sampler = env.get("VLLM_USE_FLASHINFER_SAMPLER")
    if sampler is not None:
        fields["flashinfer_sampler"] = sampler.strip().lower() not in ("0", "false")
    acc = _float01(env.get(ACCEPTANCE_ENV))
    if acc is not None:
        fields["spec_acceptance"] = acc
    return ServeKnobs(**{k: v for k, v in fields.items() if v is not None})


def merge(base: ServeKnobs, extra: ServeKnobs) -> ServeKnobs:
    """``extra``'s settings over ``base``'s (a configuration's knobs over the plan's)."""
    default = ServeKnobs()
    out: dict[str, Any] = {}
    for f in dataclasses.fields(ServeKnobs):
        v = getattr(extra, f.name)
        out[f.name] = v if v != getattr(default, f.name) else getattr(base, f.name)
    return ServeKnobs(**out)


# --- speculative decoding ---------------------------------------------------------------------------------------


def mean_accepted_length(acceptance: float, k: int) -> float:
    """Expected tokens a verification step yields with ``k`` drafts of per-token acceptance ``a`` (the accepted
    prefix plus the target's own token): (1 − a^(k+1)) / (1 − a)."""
    a = min(1.0, max(0.0, acceptance))
    if k <= 0:
        return 1.0
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


@dataclass(frozen=True, slots=True)
class SpecPlan:
    """Speculative decoding as the model runs it."""

    method: str
    k: int  # draft tokens per step
    acceptance: float  # per draft token
    source: str  # where the acceptance figure came from
    draft_share: float = 1.0  # share of a sequence's steps that carry k drafts (a CPU drafter may find none)

    @property
    def mean_length(self) -> float:
        return mean_accepted_length(self.acceptance, self.k)

    @property
    def cpu_drafter(self) -> bool:
        return self.method in CPU_DRAFTERS

    def per_position(self) -> list[float]:
        """P(draft position i accepted) = a^(i+1): each needs every earlier one accepted."""
        return [self.acceptance ** (i + 1) for i in range(self.k)]


def spec_plan(knobs: ServeKnobs, *, dummy_weights: bool = False) -> SpecPlan | None:
    """The speculative decoding ``knobs`` ask for (None without): the acceptance measured or given
    (``spec_acceptance``), else 0 with random weights, else the method's published default."""
    if not knobs.speculative or knobs.spec_method is None:
        return None
    method = knobs.spec_method
    share = 1.0
    if knobs.spec_acceptance is not None:
        acc, src = knobs.spec_acceptance, "given"
    else:
        if dummy_weights:
            acc, src = 0.0, "random weights (--load-format dummy): no draft matches the target"
        else:
            acc = SPEC_DEFAULT_ACCEPTANCE.get(method, 0.6)
            src = "default: " + SPEC_ACCEPTANCE_SOURCE.get(method, "assumed")
        if method in CPU_DRAFTERS:  # the lookup finds a match on so many steps of random prompts
            share = CPU_DRAFT_SHARE_RANDOM
    return SpecPlan(method=method, k=knobs.spec_tokens, acceptance=acc, source=src, draft_share=share)
