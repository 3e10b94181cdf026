"""Model profiles and workloads: strict YAML, shipped ones overridden by the operator's.

A model profile (``profiles/models/<id>.yaml``) says what a model is (dense or MoE, full or hybrid attention,
quantisation, sizes), how vLLM serves it (the flags and environment it needs) and what is known about it. A
workload says what traffic a benchmark sends. ``--model`` takes a profile id or a path to a profile file;
``--workload`` a workload name or a path to a workload file.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tui.core import vllmargv
from tui.core.errors import InputError
from tui.core.models import ranges
from tui.core.safeio import shown
from tui.core.yamlio import Fields, LDict

ARCH_FAMILIES = ("dense", "moe")
ATTENTION_KINDS = ("full", "hybrid")
QUANTIZATIONS = ("bf16", "fp16", "fp8", "nvfp4", "int4", "awq", "gptq")
KV_DTYPES = ("auto", "bf16", "fp16", "fp8")
#: a workload named by its lengths, as ``bench --input-len/--output-len`` names its runs: ``random-512x2048``
RANDOM_CELL = re.compile(r"random-([1-9]\d*)x([1-9]\d*)")
BYTES_PER_PARAM = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "nvfp4": 0.5625, "int4": 0.5625, "awq": 0.5625,
                   "gptq": 0.5625}
OVERRIDE_KEYS = ("tp", "dp", "pd", "prefill", "decode")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
#: a profile or workload id (it names files and run folders: at most MAX_ID characters)
MAX_ID = 96
_ID = re.compile(rf"^[a-z0-9][a-z0-9._-]{{0,{MAX_ID - 1}}}\Z")
#: a vLLM version a profile was run with (0.24.0, 0.24.1rc1, 0.24.0+cu130)
_VERSION_TEXT = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,39}")


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The transformer's dimensions: what the simulator's performance model and the memory checks need."""

    layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    full_attention_layers: int  # layers with a growing KV cache (all of them for full attention)
    num_experts: int = 0
    experts_per_token: int = 0
    #: multi-token-prediction layers the checkpoint ships (config.json ``num_nextn_predict_layers`` or
    #: ``mtp_num_hidden_layers``): what MTP speculative decoding drafts with; 0 = no MTP head
    mtp_layers: int = 0


@dataclass(frozen=True, slots=True)
class ServeOverride:
    """Per-topology (``tp``, ``dp``, ``pd``, a topology name) or per-role (``prefill``, ``decode``) changes."""

    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None


@dataclass(frozen=True, slots=True)
class ModelProfile:
    id: str
    title: str
    model: str  # HF id or local folder (``${VAR:-default}`` expanded)
    family: str  # dense | moe
    attention: str  # full | hybrid
    quantization: str
    kv_cache_dtype: str
    params_b: float
    active_params_b: float
    weights_gib: float
    shape: ModelShape
    gpu_memory_utilization: float
    max_model_len: int
    trust_remote_code: bool
    load_format: str | None
    served_model_name: str | None
    extra_args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    checked_with_vllm: tuple[str, ...]
    min_compute_capability: float | None
    overrides: tuple[tuple[str, ServeOverride], ...] = ()
    notes: str = ""
    source: str = ""  # the file it came from (a derived profile: the model folder's config.json)
    #: what the plan should warn about (a derived profile whose folder has no tokenizer); not part of the schema
    warnings: tuple[str, ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.family == "moe"

    @property
    def has_mtp_head(self) -> bool:
        return self.shape.mtp_layers > 0

    @property
    def is_hybrid(self) -> bool:
        return self.attention == "hybrid"

    @property
    def served_name(self) -> str:
        return self.served_model_name or self.model

    def override_for(self, key: str) -> ServeOverride | None:
        for name, ov in self.overrides:
            if name == key:
                return ov
        return None

    def kv_bytes_per_token(self) -> float:
        """Bytes of KV cache one token takes over the whole model (all GPUs together)."""
        elem = 1.0 if self.kv_cache_dtype == "fp8" else 2.0
        s = self.shape
        return 2.0 * s.full_attention_layers * s.num_kv_heads * s.head_dim * elem

    def to_dict(self) -> dict[str, Any]:
        """The profile as plain data (what the simulated server is told about the model it serves)."""
        out: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "model": self.model,
            "architecture": {
                "family": self.family,
                "attention": self.attention,
                "params_b": self.params_b,
                "active_params_b": self.active_params_b,
                **{k: getattr(self.shape, k) for k in ModelShape.__dataclass_fields__},
            },
            "quantization": self.quantization,
            "kv_cache_dtype": self.kv_cache_dtype,
            "weights_gib": self.weights_gib,
            "checked_with_vllm": list(self.checked_with_vllm),
            "vllm": {
                "gpu_memory_utilization": self.gpu_memory_utilization,
                "max_model_len": self.max_model_len,
                "trust_remote_code": self.trust_remote_code,
                "load_format": self.load_format,
                "served_model_name": self.served_model_name,
                "args": list(self.extra_args),
                "env": dict(self.env),
            },
        }
        if self.min_compute_capability is not None:
            out["min_compute_capability"] = self.min_compute_capability
        if self.overrides:
            out["overrides"] = {
                k: {"args": list(v.args), "env": dict(v.env), "gpu_memory_utilization": v.gpu_memory_utilization,
                    "max_model_len": v.max_model_len}
                for k, v in self.overrides
            }
        if self.notes:
            out["notes"] = self.notes
        return out


@dataclass(frozen=True, slots=True)
class Workload:
    """Traffic for one benchmark cell, with ``vllm bench serve``'s meanings."""

    name: str
    input_len: int
    output_len: int
    num_prompts: int = 128
    request_rate: float = math.inf  # requests/s; inf = all at once (saturation)
    burstiness: float = 1.0
    max_concurrency: int | None = None
    range_ratio: float = 0.0
    prefix_len: int = 0
    ignore_eos: bool = True
    seed: int = 0
    description: str = ""
    source: str = ""

    def with_overrides(self, **changes: Any) -> Workload:
        clean = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **clean) if clean else self


def expand_env_refs(text: str) -> str:
    """``${VAR}`` / ``${VAR:-default}`` from the environment (used for configurable model folders)."""

    def sub(m: re.Match[str]) -> str:
        value = os.environ.get(m.group(1))
        if value:
            return value
        return m.group(2) if m.group(2) is not None else ""

    return _ENV_REF.sub(sub, text)


def _ranged(f: Fields, key: str, kind: type, default: Any = None, *, required: bool = False,
            table: dict[str, ranges.Range] = ranges.MODEL) -> Any:
    """``f[key]`` (an int, or a number for ``kind`` float) within its row of :mod:`tui.core.models.ranges` (one line
    naming the file, line and field otherwise)."""
    value = f.require(key, kind) if required else f.get(key, kind, default)
    if value is not None:
        ranges.check(table, key, value, file=f.source, line=f.line_of(key), field=f.name(key))
    return value


def _vllm_words(f: Fields, key: str) -> tuple[str, ...]:
    """A profile's ``args``: each flag judged by its role as vLLM reads it (:mod:`tui.core.vllmargv`), one line
    naming the file, line and field for the first a profile may not set."""
    args = tuple(f.str_list(key))
    vllmargv.check_tail(args, vllmargv.Source.PROFILE, field=f.name(key), file=f.source, line=f.line_of(key))
    return args


def _vllm_env(f: Fields, key: str) -> dict[str, str]:
    env = f.str_map(key)
    _check_env_names(f, key, env)
    for k, v in env.items():
        vllmargv.check_env(k, v, vllmargv.Source.PROFILE, field=f"{f.name(key)}.{k}", file=f.source,
                           line=f.line_of(key))
    return env


def _parse_override(f: Fields) -> ServeOverride:
    args = _vllm_words(f, "args")
    env = tuple(_vllm_env(f, "env").items())
    gmu = f.number("gpu_memory_utilization", None, lo=0.05, hi=0.99)
    mml = _ranged(f, "max_model_len", int)
    f.done()
    return ServeOverride(args=args, env=env, gpu_memory_utilization=gmu, max_model_len=mml)


def _check_env_names(f: Fields, key: str, env: dict[str, str]) -> None:
    for name in env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise f.error(key, f"bad environment variable name {name!r}")
        if name == "VLLM_ATTENTION_BACKEND":
            raise f.error(key, "VLLM_ATTENTION_BACKEND is not read by vLLM 0.24 (it only warns); use "
                               "'--attention-backend NAME' in args")


def parse_model_profile(data: Any, source: str | Path, *, expand_env: bool = True) -> ModelProfile:
    """A model profile from plain data. ``expand_env=False`` (a bundle's profile, made on another host): a
    ``${VAR}`` or ``$VAR`` is refused instead of expanded, so the file cannot make this host reveal a variable."""
    f = Fields(data, source)
    pid = f.require("id", str)
    if not _ID.match(pid):
        raise f.error("id", f"must be lowercase letters, digits, '.', '-' or '_' (at most {MAX_ID}); got "
                            f"{shown(pid, 60)}")
    title = f.get("title", str, pid)
    model_raw = f.require("model", str)
    if not expand_env and "$" in model_raw:
        raise f.error("model", f"{shown(model_raw, 80)} refers to an environment variable: a bundle's values are "
                               "never expanded on the importing host (write the repo id or folder itself)")
    model = expand_env_refs(model_raw) if expand_env else model_raw
    if not model:
        raise f.error("model", f"{model_raw!r} expands to nothing")
    if any(not ch.isprintable() for ch in model):
        raise f.error("model", f"holds a control character: {shown(model, 80)}")
    vllmargv.check_model(model, field=f.name("model"), file=f.source, line=f.line_of("model"))
    arch = f.sub("architecture", required=True)
    assert arch is not None
    family = arch.choice("family", ARCH_FAMILIES, required=True)
    attention = arch.choice("attention", ATTENTION_KINDS, "full")
    params_b = _ranged(arch, "params_b", float, required=True)
    active = _ranged(arch, "active_params_b", float, params_b)
    if active > params_b:
        raise arch.error("active_params_b", f"cannot exceed params_b ({params_b:g})")
    layers = _ranged(arch, "layers", int, required=True)
    shape = ModelShape(
        layers=layers,
        hidden_size=_ranged(arch, "hidden_size", int, required=True),
        num_attention_heads=_ranged(arch, "num_attention_heads", int, required=True),
        num_kv_heads=_ranged(arch, "num_kv_heads", int, required=True),
        head_dim=_ranged(arch, "head_dim", int, required=True),
        intermediate_size=_ranged(arch, "intermediate_size", int, required=True),
        vocab_size=_ranged(arch, "vocab_size", int, required=True),
        full_attention_layers=arch.integer("full_attention_layers", layers, lo=1, hi=layers),
        num_experts=_ranged(arch, "num_experts", int, 0),
        experts_per_token=_ranged(arch, "experts_per_token", int, 0),
        mtp_layers=_ranged(arch, "mtp_layers", int, 0),
    )
    arch.done()
    if family == "moe" and (shape.num_experts < 2 or shape.experts_per_token < 1):
        raise f.error("architecture", "a MoE model needs num_experts ≥ 2 and experts_per_token ≥ 1")
    if family == "moe" and shape.experts_per_token > shape.num_experts:
        raise arch.error("experts_per_token", f"cannot exceed num_experts ({shape.num_experts})")
    if attention == "full" and shape.full_attention_layers != layers:
        raise f.error("architecture", "full attention means full_attention_layers == layers; use "
                                      "attention: hybrid for a model with linear/Mamba-style layers")
    quant = f.choice("quantization", QUANTIZATIONS, required=True)
    kv = f.choice("kv_cache_dtype", KV_DTYPES, "auto")
    weights_gib = _ranged(f, "weights_gib", float)
    if weights_gib is None:
        weights_gib = params_b * 1e9 * BYTES_PER_PARAM[quant] / 2**30
    min_cc = _ranged(f, "min_compute_capability", float)
    if min_cc is None and quant == "nvfp4":
        min_cc = 10.0
    checked = tuple(f.str_list("checked_with_vllm"))
    if len(checked) > 64 or any(not _VERSION_TEXT.fullmatch(c) for c in checked):
        bad = next((c for c in checked if not _VERSION_TEXT.fullmatch(c)), "")
        raise f.error("checked_with_vllm", f"at most 64 vLLM versions like 0.24.0, each at most 40 characters; got "
                                           f"{shown(repr(bad), 60) if bad else f'{len(checked)} of them'}")
    v = f.sub("vllm", required=True)
    assert v is not None
    gmu = v.number("gpu_memory_utilization", 0.9, lo=0.05, hi=0.99)
    mml = _ranged(v, "max_model_len", int, required=True)
    trust = v.get("trust_remote_code", bool, False)
    load_format = v.get("load_format", str, None)
    served = v.get("served_model_name", str, None)
    for key, value in (("load_format", load_format), ("served_model_name", served)):
        if value is not None:
            vllmargv.check_value(value, field=v.name(key), file=v.source, line=v.line_of(key))
    args = _vllm_words(v, "args")
    env = _vllm_env(v, "env")
    v.done()
    overrides: list[tuple[str, ServeOverride]] = []
    ov = f.sub("overrides")
    if ov is not None:
        for key in list(ov.data):
            if key not in OVERRIDE_KEYS and not _looks_like_topology(key):
                raise ov.error(key, f"override keys are {', '.join(OVERRIDE_KEYS)} or a topology name")
            sub = ov.sub(key, required=True)
            assert sub is not None
            overrides.append((key, _parse_override(sub)))
        ov.done()
    notes = f.get("notes", str, "")
    f.done()
    return ModelProfile(
        id=pid, title=title, model=model, family=family, attention=attention, quantization=quant,
        kv_cache_dtype=kv, params_b=params_b, active_params_b=active, weights_gib=float(weights_gib), shape=shape,
        gpu_memory_utilization=gmu, max_model_len=mml, trust_remote_code=bool(trust), load_format=load_format,
        served_model_name=served, extra_args=args, env=tuple(env.items()), checked_with_vllm=checked,
        min_compute_capability=min_cc, overrides=tuple(overrides), notes=notes.strip(), source=str(source),
    )


def _looks_like_topology(key: str) -> bool:
    from tui.core.topology import parse_topology

    try:
        parse_topology(key)
    except InputError:
        return False
    return True


_NUMERIC_RATE = re.compile(r"^\d+(\.\d+)?\Z")


def parse_rate(value: Any, *, source: str | Path = "", field: str = "request_rate", line: int | None = None
               ) -> float:
    """``inf`` (saturation) or a positive number of requests per second."""
    if isinstance(value, bool):
        raise InputError(f"expected 'inf' or a number of requests/s, got {value!r}", file=source or None,
                         line=line, field=field)
    if isinstance(value, int | float):
        rate = float(value)
    elif isinstance(value, str) and value.strip().lower() in ("inf", "infinity", "saturation"):
        return math.inf
    elif isinstance(value, str) and _NUMERIC_RATE.match(value.strip()):
        rate = float(value)
    else:
        raise InputError(f"expected 'inf' or a number of requests/s, got {value!r}", file=source or None,
                         line=line, field=field)
    if rate <= 0:
        raise InputError(f"must be > 0 (or 'inf'); got {shown(repr(value), 60)}", file=source or None, line=line,
                         field=field)
    problem = ranges.WORKLOAD["request_rate"].message(rate) if math.isfinite(rate) else "must be a finite number " \
        "of requests/s (or 'inf')"
    if problem is not None:
        raise InputError(problem, file=source or None, line=line, field=field)
    return rate


def parse_workload(name: str, data: Any, source: str | Path, prefix: str = "") -> Workload:
    f = Fields(data, source, prefix)
    rate_raw = f.get("request_rate", (str, int, float), "inf")
    rate = parse_rate(rate_raw, source=source, field=f.name("request_rate"), line=f.line_of("request_rate"))
    w = Workload(
        name=name,
        input_len=_ranged(f, "input_len", int, required=True, table=ranges.WORKLOAD),
        output_len=_ranged(f, "output_len", int, required=True, table=ranges.WORKLOAD),
        num_prompts=_ranged(f, "num_prompts", int, 128, table=ranges.WORKLOAD),
        request_rate=rate,
        burstiness=_ranged(f, "burstiness", float, 1.0, table=ranges.WORKLOAD),
        max_concurrency=_ranged(f, "max_concurrency", int, table=ranges.WORKLOAD),
        range_ratio=_ranged(f, "range_ratio", float, 0.0, table=ranges.WORKLOAD),
        prefix_len=_ranged(f, "prefix_len", int, 0, table=ranges.WORKLOAD),
        ignore_eos=f.get("ignore_eos", bool, True),
        seed=_ranged(f, "seed", int, 0, table=ranges.WORKLOAD),
        description=str(f.get("description", str, "")).strip(),
        source=str(source),
    )
    f.done()
    return w


def parse_workloads_file(data: Any, source: str | Path) -> dict[str, Workload]:
    """A workloads file: ``workloads: {name: {...}, ...}``, or one workload with a ``name`` key."""
    top = Fields(data, source)
    if top.has("workloads"):
        ws = top.sub("workloads", required=True)
        assert ws is not None
        out: dict[str, Workload] = {}
        for name in list(ws.data):
            ws.get(name, dict)
            if not _ID.match(name):
                raise ws.error(name, f"workload names are lowercase letters, digits, '.', '-', '_'; got {name!r}")
            out[name] = parse_workload(name, ws.data[name], source, prefix=f"workloads.{name}.")
        ws.done()
        top.done()
        return out
    name = top.require("name", str)
    body = {k: v for k, v in data.items() if k != "name"}
    if isinstance(data, LDict):
        ld = LDict(body)
        ld.line = data.line
        ld.key_lines = dict(data.key_lines)
        body = ld
    return {name: parse_workload(name, body, source)}
