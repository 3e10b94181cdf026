"""A model profile derived from what a model folder holds: ``config.json``, the safetensors index or headers, the
tokenizer's files.

What is read from ``config.json`` (a multimodal model's ``text_config`` first, the top level after):

- the shape: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads`` (default: the
  attention heads), ``head_dim`` (default: hidden / heads), ``intermediate_size`` (``moe_intermediate_size`` for a
  MoE's experts), ``vocab_size``, ``max_position_embeddings``;
- multi-head latent attention (``kv_lora_rank``, DeepSeek/Kimi): the latent (``kv_lora_rank`` +
  ``qk_rope_head_dim``) is written as one KV head of half its width, so the KV figure is the latent's;
- the family: MoE when it has experts (``num_experts``, ``num_local_experts``, ``n_routed_experts``) with the active
  ones (``num_experts_per_tok``, ``top_k_experts``), dense otherwise;
- the attention: hybrid when some layers keep no growing KV cache (``layer_types`` with ``linear_attention`` or
  ``mamba``; Jamba's ``attn_layer_period``/``attn_layer_offset``; Qwen3-Next's ``full_attention_interval``;
  Nemotron-H's ``hybrid_override_pattern``). Sliding-window layers count as attention layers (their KV is
  bounded by the window; counting them in full errs on the safe side of the memory checks);
- the quantisation from ``quantization_config`` (fp8, compressed-tensors, modelopt, AWQ, GPTQ), else the checkpoint
  dtype (``torch_dtype``/``dtype``), and an FP8 KV cache where the checkpoint quantises it;
- ``trust_remote_code`` where the model ships its own code (``auto_map``).

The parameter counts are computed from that shape (embedding, attention or linear-attention/Mamba projections, MLP
or experts with the router and shared experts); the weights' size is what the files hold. The KV cache per token
follows from the shape: 2 (K and V) × full-attention layers × KV heads × head dim × bytes per element.

Anything that cannot be derived is reported with the profile field to set; :meth:`DerivedModel.profile` then
raises one :class:`InputError` line naming them all.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tui.core.errors import InputError
from tui.core.hfcache import repo_of_snapshot
from tui.core.profiles import ModelProfile, parse_model_profile
from tui.core.safetensors_meta import WeightsInfo, weights_info

#: the seed experiments' ``--max-model-len``; a model with a shorter context gets its own
DEFAULT_MAX_MODEL_LEN = 32768
DEFAULT_GPU_MEMORY_UTILIZATION = 0.90
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "spiece.model",
                   "tekken.json")
_ATTN_TYPES = {"full_attention", "attention", "sliding_attention", "sliding_window", "global", "local",
               "chunked_attention", "global_attention", "local_attention", "hybrid"}
_LINEAR_TYPES = {"linear_attention", "mamba", "mamba2", "conv", "ssm", "gated_deltanet", "deltanet",
                 "recurrent", "rwkv", "lightning_attention"}
_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
           "float32": "bf16", "float": "bf16", "fp32": "bf16"}
_SUB_CONFIGS = ("text_config", "llm_config", "language_config")


@dataclass
class DerivedModel:
    """A profile derived from a folder: the profile's data (the YAML schema), what could not be derived, and
    warnings (a missing tokenizer) the plan should carry."""

    folder: Path
    repo_id: str | None
    revision: str
    data: dict[str, Any]
    missing: list[tuple[str, str]] = field(default_factory=list)  # (profile field, why)
    warnings: list[str] = field(default_factory=list)
    comments: dict[str, str] = field(default_factory=dict)  # profile field -> where its value came from
    weights: WeightsInfo | None = None

    @property
    def source(self) -> str:
        return f"{self.repo_id} ({self.folder})" if self.repo_id else str(self.folder)

    def problem(self) -> str | None:
        """One line naming every field that could not be derived, or None."""
        if not self.missing:
            return None
        what = "; ".join(f"{name} ({why})" for name, why in self.missing)
        return f"cannot derive {what}"

    def profile(self) -> ModelProfile:
        problem = self.problem()
        if problem is not None:
            ref = self.repo_id or str(self.folder)
            raise InputError(f"{problem}", file=self.folder / "config.json", field="--model",
                             hint=f"write a profile with 'disagg-tui profile new --from {ref} -o FILE', set it "
                                  "there and give --model FILE")
        prof = parse_model_profile(self.data, self.folder / "config.json")
        return replace(prof, warnings=tuple(self.warnings))


def slug(name: str) -> str:
    """A profile id from a folder or repo name: lowercase letters, digits, '.', '-', '_'."""
    s = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._")
    return s or "model"


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not folder.is_dir():
        raise InputError("no such folder", file=folder, field="--model")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        what = "a broken link (an unfinished download?)" if path.is_symlink() else "no config.json"
        raise InputError(f"not a model folder: {what}", file=folder, field="--model",
                         hint="a Hugging Face model folder holds config.json, the safetensors weights and the "
                              "tokenizer") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", file=path) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"not valid JSON: {exc.args[0] if exc.args else exc}", file=path,
                         line=getattr(exc, "lineno", None)) from None
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", file=path)
    return data


def _merged(cfg: dict[str, Any]) -> dict[str, Any]:
    for key in _SUB_CONFIGS:
        sub = cfg.get(key)
        if isinstance(sub, dict):
            return {**cfg, **sub}
    return cfg


def _int(cfg: dict[str, Any], *keys: str) -> tuple[int | None, str | None]:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, key
    return None, None


class _Reader:
    def __init__(self, cfg: dict[str, Any], folder: Path) -> None:
        self.cfg = cfg
        self.folder = folder
        self.missing: list[tuple[str, str]] = []
        self.comments: dict[str, str] = {}
        self.warnings: list[str] = []

    def need(self, target: str, *keys: str) -> int | None:
        value, key = _int(self.cfg, *keys)
        if value is None:
            self.missing.append((target, f"config.json has no {' or '.join(keys)}"))
        else:
            self.comments[target] = f"config.json {key}"
        return value


def _layer_kinds(cfg: dict[str, Any], layers: int, r: _Reader) -> list[bool]:
    """True for each layer with a growing KV cache (attention), False for linear-attention/Mamba layers."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types and all(isinstance(t, str) for t in types):
        kinds = []
        for t in types[:layers]:
            low = t.lower()
            if low in _ATTN_TYPES:
                kinds.append(True)
            elif low in _LINEAR_TYPES:
                kinds.append(False)
            else:
                r.missing.append(("architecture.full_attention_layers",
                                  f"config.json layer_types has {t!r}, neither attention nor linear"))
                return [True] * layers
        if len(kinds) < layers:
            r.missing.append(("architecture.full_attention_layers",
                              f"config.json layer_types names {len(kinds)} layers of {layers}"))
            return [True] * layers
        r.comments["architecture.full_attention_layers"] = "config.json layer_types"
        return kinds
    blocks = cfg.get("layers_block_type")
    if isinstance(blocks, list) and len(blocks) >= layers:
        r.comments["architecture.full_attention_layers"] = "config.json layers_block_type"
        return [str(b).lower() in _ATTN_TYPES for b in blocks[:layers]]
    period, _ = _int(cfg, "attn_layer_period")
    if period is not None:
        offset = cfg.get("attn_layer_offset", 0)
        offset = offset if isinstance(offset, int) else 0
        r.comments["architecture.full_attention_layers"] = "config.json attn_layer_period/attn_layer_offset"
        return [i % period == offset for i in range(layers)]
    interval, _ = _int(cfg, "full_attention_interval")
    if interval is not None:
        r.comments["architecture.full_attention_layers"] = "config.json full_attention_interval"
        return [(i + 1) % interval == 0 for i in range(layers)]
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and len(pattern) == layers:
        r.comments["architecture.full_attention_layers"] = "config.json hybrid_override_pattern ('*' = attention)"
        return [c == "*" for c in pattern]
    return [True] * layers


def _moe_layers(cfg: dict[str, Any], layers: int) -> list[bool]:
    only_dense = cfg.get("mlp_only_layers")
    dense = {int(i) for i in only_dense if isinstance(i, int)} if isinstance(only_dense, list) else set()
    period, _ = _int(cfg, "expert_layer_period")
    if period is not None:
        offset = cfg.get("expert_layer_offset", 0)
        offset = offset if isinstance(offset, int) else 0
        return [i % period == offset and i not in dense for i in range(layers)]
    first_dense = cfg.get("first_k_dense_replace")
    first = first_dense if isinstance(first_dense, int) else 0
    step, _ = _int(cfg, "decoder_sparse_step", "moe_layer_freq")
    step = step or 1
    return [i >= first and (i + 1) % step == 0 and i not in dense for i in range(layers)]


def _quantization(cfg: dict[str, Any], r: _Reader) -> tuple[str | None, str]:
    """(quantization, kv_cache_dtype) of the checkpoint."""
    qc = cfg.get("quantization_config")
    if not isinstance(qc, dict):
        dtype = cfg.get("torch_dtype") or cfg.get("dtype")
        plain = _DTYPES.get(str(dtype).lower()) if isinstance(dtype, str) else None
        if plain is None:
            r.missing.append(("quantization", "config.json has no quantization_config and no torch_dtype"
                              + (f" it knows (got {dtype!r})" if dtype else "")))
            return None, "auto"
        upcast = str(dtype).lower() in ("float32", "float", "fp32")
        r.comments["quantization"] = f"config.json torch_dtype {dtype}" + (
            " (vLLM serves float32 checkpoints in bf16)" if upcast else "")
        return plain, "auto"
    method = str(qc.get("quant_method", "")).lower()
    kv = "fp8" if _kv_is_fp8(qc) else "auto"
    quant: str | None = None
    if method in ("fp8", "fbgemm_fp8", "ptpc_fp8"):
        quant = "fp8"
    elif method in ("modelopt", "modelopt_fp4", "modelopt_fp8"):
        algo = str(qc.get("quant_algo", "")).upper()
        quant = {"NVFP4": "nvfp4", "FP8": "fp8", "W4A16_AWQ": "awq"}.get(algo) or _from_groups(qc)
        if method == "modelopt_fp4" and quant is None:
            quant = "nvfp4"
    elif method == "compressed-tensors":
        fmt = str(qc.get("format", "")).lower()
        quant = "nvfp4" if fmt.startswith("nvfp4") else "fp8" if fmt == "float-quantized" else _from_groups(qc)
    elif method in ("awq", "awq_marlin"):
        quant = "awq"
    elif method in ("gptq", "gptq_marlin"):
        quant = "gptq"
    if quant is None:
        r.missing.append(("quantization", f"config.json quantization_config (quant_method {method or 'none'!r}) "
                                          "has no profile equivalent: one of bf16, fp16, fp8, nvfp4, int4, awq, gptq"))
        return None, kv
    r.comments["quantization"] = f"config.json quantization_config.quant_method {method}"
    if kv == "fp8":
        r.comments["kv_cache_dtype"] = "the checkpoint quantises the KV cache to FP8 (vLLM's auto picks it up)"
    return quant, kv


def _from_groups(qc: dict[str, Any]) -> str | None:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict):
        return None
    for group in groups.values():
        w = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(w, dict):
            continue
        bits, kind = w.get("num_bits"), str(w.get("type", "")).lower()
        if bits == 4 and kind == "float":
            return "nvfp4"
        if bits == 8 and kind == "float":
            return "fp8"
        if bits == 4 and kind == "int":
            return "int4"
    return None


def _kv_is_fp8(qc: dict[str, Any]) -> bool:
    if str(qc.get("kv_cache_quant_algo", "")).upper() == "FP8":
        return True
    kv = qc.get("kv_cache_scheme")
    return isinstance(kv, dict) and kv.get("num_bits") == 8 and str(kv.get("type", "float")).lower() == "float"


@dataclass(frozen=True, slots=True)
class _Params:
    total: float
    active: float


def _params(cfg: dict[str, Any], *, layers: int, hidden: int, heads: int, kv: int, head_dim: int, vocab: int,
            dense_inter: int | None, expert_inter: int | None, experts: int, top_k: int,
            attn: list[bool]) -> _Params:
    """Parameters from the shape: embeddings, per layer the attention (or linear-attention/Mamba) projections and
    the MLP or experts (with router and shared experts)."""
    tie = bool(cfg.get("tie_word_embeddings", False))
    embed = float(vocab * hidden) * (1 if tie else 2)
    attn_p = _mla_params(cfg, hidden, heads) or float(hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2)
    linear_p = _linear_params(cfg, hidden, attn_p)
    moe_at = _moe_layers(cfg, layers) if experts > 1 else [False] * layers
    gemma_both = bool(cfg.get("enable_moe_block"))  # Gemma 4: a dense MLP beside the experts in every layer
    shared_inter, _ = _int(cfg, "shared_expert_intermediate_size")
    n_shared, _ = _int(cfg, "n_shared_experts", "num_shared_experts")
    if shared_inter is None and n_shared and expert_inter:
        shared_inter = n_shared * expert_inter
    total = active = embed
    for i in range(layers):
        mix = attn_p if attn[i] else linear_p
        total += mix
        active += mix
        if moe_at[i] and expert_inter:
            one = 3.0 * hidden * expert_inter
            shared = 3.0 * hidden * shared_inter if shared_inter else 0.0
            router = float(hidden * experts)
            dense = 3.0 * hidden * dense_inter if gemma_both and dense_inter else 0.0
            total += experts * one + shared + router + dense
            active += top_k * one + shared + router + dense
        elif dense_inter:
            total += 3.0 * hidden * dense_inter
            active += 3.0 * hidden * dense_inter
    return _Params(total=total, active=active)


def _mla_params(cfg: dict[str, Any], hidden: int, heads: int) -> float | None:
    """Multi-head latent attention's projections (q or q_a/q_b, kv_a, kv_b, o); None for other attention."""
    rank, _ = _int(cfg, "kv_lora_rank")
    if rank is None:
        return None
    rope = _int(cfg, "qk_rope_head_dim")[0] or 0
    nope = _int(cfg, "qk_nope_head_dim")[0] or 0
    v_dim = _int(cfg, "v_head_dim")[0] or nope
    q_rank = _int(cfg, "q_lora_rank")[0]
    qk = heads * (nope + rope)
    q = hidden * q_rank + q_rank * qk if q_rank else hidden * qk
    return float(q + hidden * (rank + rope) + rank * heads * (nope + v_dim) + heads * v_dim * hidden)


def _linear_params(cfg: dict[str, Any], hidden: int, attn_p: float) -> float:
    nk, _ = _int(cfg, "linear_num_key_heads")
    nv, _ = _int(cfg, "linear_num_value_heads")
    dk, _ = _int(cfg, "linear_key_head_dim")
    dv, _ = _int(cfg, "linear_value_head_dim")
    if nk and nv and dk and dv:  # Gated DeltaNet (Qwen3-Next, Qwen3.5/3.6)
        key_dim, value_dim = nk * dk, nv * dv
        conv, _ = _int(cfg, "linear_conv_kernel_dim")
        return float(hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * nv + value_dim * hidden
                     + (2 * key_dim + value_dim) * (conv or 4))
    expand, _ = _int(cfg, "mamba_expand")
    d_state, _ = _int(cfg, "mamba_d_state")
    if expand and d_state:  # Mamba (Jamba)
        inner = expand * hidden
        dt_rank, _ = _int(cfg, "mamba_dt_rank")
        dt_rank = dt_rank or -(-hidden // 16)
        conv, _ = _int(cfg, "mamba_d_conv")
        return float(hidden * 2 * inner + inner * (conv or 4) + inner * (dt_rank + 2 * d_state)
                     + dt_rank * inner + inner * d_state + inner + inner * hidden)
    return attn_p


def derive(folder: Path, *, repo_id: str | None = None, revision: str = "", profile_id: str | None = None
           ) -> DerivedModel:
    """Derive a profile from ``folder`` (a model folder or an HF-cache snapshot). Raises InputError (one line) for
    a folder that is no model (no config.json, broken JSON, a missing shard); fields that cannot be derived are in
    ``missing``."""
    folder = Path(folder).expanduser().absolute()
    if repo_id is None:
        snap = repo_of_snapshot(folder)
        if snap is not None:
            repo_id, revision = snap
    raw = _read_config(folder)
    cfg = _merged(raw)
    r = _Reader(cfg, folder)
    layers = r.need("architecture.layers", "num_hidden_layers", "n_layer", "num_layers")
    hidden = r.need("architecture.hidden_size", "hidden_size", "d_model", "n_embd")
    heads = r.need("architecture.num_attention_heads", "num_attention_heads", "n_head")
    kv_heads, kv_key = _int(cfg, "num_key_value_heads", "num_kv_heads")
    mla_rank, _ = _int(cfg, "kv_lora_rank")
    mla_rope, _ = _int(cfg, "qk_rope_head_dim")
    if mla_rank is not None:
        # multi-head latent attention (DeepSeek, Kimi): one latent of kv_lora_rank + qk_rope_head_dim per layer and
        # token instead of K and V per head; written as 1 KV head of half that width so that 2 x heads x head_dim
        # is the latent's size
        kv_heads, kv_key = 1, None
        r.comments["architecture.num_kv_heads"] = "MLA: one latent per token (kv_lora_rank + qk_rope_head_dim)"
        r.comments["architecture.head_dim"] = "MLA: half the latent, so that K+V = the latent's width"
    if kv_heads is None and heads is not None:
        kv_heads, kv_key = heads, None
        r.comments["architecture.num_kv_heads"] = "no num_key_value_heads in config.json: one per attention head"
    elif kv_key:
        r.comments["architecture.num_kv_heads"] = f"config.json {kv_key}"
    head_dim, hd_key = _int(cfg, "head_dim")
    if mla_rank is not None:
        head_dim, hd_key = -(-(mla_rank + (mla_rope or 0)) // 2), None
    elif head_dim is None and hidden and heads:
        if hidden % heads == 0:
            head_dim = hidden // heads
            r.comments["architecture.head_dim"] = "hidden_size / num_attention_heads"
        else:
            r.missing.append(("architecture.head_dim", "config.json has no head_dim and hidden_size is not a "
                                                       "multiple of num_attention_heads"))
    elif hd_key:
        r.comments["architecture.head_dim"] = "config.json head_dim"
    vocab = r.need("architecture.vocab_size", "vocab_size")
    experts, ex_key = _int(cfg, "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
    experts = experts if experts and experts > 1 else 0
    top_k = 0
    if experts:
        r.comments["architecture.num_experts"] = f"config.json {ex_key}"
        top_k = r.need("architecture.experts_per_token", "num_experts_per_tok", "top_k_experts", "moe_top_k",
                       "num_experts_per_token") or 0
    dense_inter, di_key = _int(cfg, "intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size")
    expert_inter, ei_key = _int(cfg, "moe_intermediate_size", "expert_intermediate_size")
    if experts and expert_inter is None:
        expert_inter, ei_key = dense_inter, di_key  # Mixtral, Jamba: the experts are MLPs of intermediate_size
    inter = expert_inter if experts else dense_inter
    if inter is None:
        r.missing.append(("architecture.intermediate_size",
                          "config.json has no " + ("moe_intermediate_size or " if experts else "")
                          + "intermediate_size"))
    else:
        r.comments["architecture.intermediate_size"] = f"config.json {ei_key if experts else di_key}" + (
            " (per expert)" if experts else "")
    max_pos, mp_key = _int(cfg, "max_position_embeddings", "max_sequence_length", "seq_length", "n_positions")
    if max_pos is None:
        r.missing.append(("vllm.max_model_len", "config.json has no max_position_embeddings"))
    else:
        r.comments["vllm.max_model_len"] = (f"config.json {mp_key} {max_pos}" if max_pos <= DEFAULT_MAX_MODEL_LEN
                                            else f"{DEFAULT_MAX_MODEL_LEN} of the model's {max_pos} ({mp_key}): "
                                                 "raise it if the GPUs hold the KV cache")
    quant, kv_dtype = _quantization(cfg, r)
    attn = _layer_kinds(cfg, layers, r) if layers else []
    full_layers = sum(attn)
    if layers and full_layers == 0:
        r.missing.append(("architecture.full_attention_layers", "no attention layer found in config.json"))
    weights = weights_info(folder)
    if weights is None:
        r.missing.append(("weights_gib", "no weights in the folder (*.safetensors or *.bin)"))
    elif weights.total_bytes <= 0:
        r.missing.append(("weights_gib", "the safetensors files hold no tensors"))
    if not any((folder / name).exists() for name in TOKENIZER_FILES):
        r.warnings.append(f"{folder}: no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...): vLLM needs a "
                          "tokenizer; add --arg '--tokenizer DIR'")
    name = repo_id.split("/", 1)[1] if repo_id else folder.name
    pid = profile_id or slug(name)
    params = None
    if layers and hidden and heads and kv_heads and head_dim and vocab and (inter is not None):
        params = _params(cfg, layers=layers, hidden=hidden, heads=heads, kv=kv_heads, head_dim=head_dim,
                         vocab=vocab, dense_inter=dense_inter, expert_inter=expert_inter, experts=experts,
                         top_k=top_k, attn=attn)
    else:
        r.missing.append(("architecture.params_b", "needs the shape fields above; or "
                                                   "set the total parameters in billions"))
    arch_names = raw.get("architectures")
    arch_text = ", ".join(str(a) for a in arch_names) if isinstance(arch_names, list) else str(
        raw.get("model_type", "?"))
    family = "moe" if experts else "dense"
    attention = "hybrid" if layers and 0 < full_layers < layers else "full"
    architecture: dict[str, Any] = {"family": family, "attention": attention}
    if params is not None:
        architecture["params_b"] = max(0.01, round(params.total / 1e9, 3))
        if experts:
            architecture["active_params_b"] = max(0.01, round(params.active / 1e9, 3))
        r.comments["architecture.params_b"] = "computed from the shape in config.json"
    architecture.update({"layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
                         "num_kv_heads": kv_heads, "head_dim": head_dim, "intermediate_size": inter,
                         "vocab_size": vocab})
    if attention == "hybrid":
        architecture["full_attention_layers"] = full_layers
    if experts:
        architecture["num_experts"] = experts
        architecture["experts_per_token"] = top_k
    data: dict[str, Any] = {
        "id": pid,
        "title": f"{repo_id or folder.name} ({family}{', hybrid attention' if attention == 'hybrid' else ''}, "
                 f"{quant or '?'}; derived)",
        "model": str(folder.absolute()),
        "architecture": {k: v for k, v in architecture.items() if v is not None},
        "quantization": quant,
        "kv_cache_dtype": kv_dtype,
    }
    if weights is not None and weights.total_bytes > 0:
        data["weights_gib"] = max(0.01, round(weights.gib, 3))
        r.comments["weights_gib"] = (f"metadata.total_size of the safetensors index ({weights.total_bytes:,} bytes "
                                     f"in {len(weights.files)} shards)" if weights.how == "index" else
                                     f"the headers of {len(weights.files)} safetensors file(s): "
                                     f"{weights.tensors} tensors, {weights.total_bytes:,} bytes"
                                     if weights.how == "headers" else
                                     f"the sizes of {len(weights.files)} .bin file(s): {weights.total_bytes:,} bytes")
    data["checked_with_vllm"] = []
    vllm: dict[str, Any] = {"gpu_memory_utilization": DEFAULT_GPU_MEMORY_UTILIZATION,
                            "max_model_len": min(max_pos, DEFAULT_MAX_MODEL_LEN) if max_pos else None}
    if "auto_map" in raw or "auto_map" in cfg:
        vllm["trust_remote_code"] = True
        r.comments["vllm.trust_remote_code"] = "config.json auto_map: the model ships its own code"
    if repo_id:
        vllm["served_model_name"] = repo_id
        r.comments["vllm.served_model_name"] = "the repo id, as vLLM names a model it is given by id"
    data["vllm"] = {k: v for k, v in vllm.items() if v is not None}
    notes = [f"Derived by disagg-tui from {folder / 'config.json'} ({arch_text})."]
    if repo_id:
        notes.append(f"Hugging Face cache: {repo_id}" + (f" at {revision}" if revision else "") + ".")
    if attention == "hybrid":
        notes.append(f"{full_layers} of {layers} layers keep a KV cache; the others hold a fixed Mamba-style state "
                     "(behind NIXL: VLLM_SSM_CONV_STATE_LAYOUT=DS).")
    if family == "moe":
        notes.append("MoE + data parallel did not start on vLLM 0.24 for the seed's MoE model: prefer tp.")
    if cfg.get("global_head_dim") or cfg.get("num_global_key_value_heads"):
        notes.append("Global-attention layers have their own head_dim/KV heads (global_head_dim, "
                     "num_global_key_value_heads); the KV figure uses the sliding layers' values.")
    data["notes"] = " ".join(notes)
    return DerivedModel(folder=folder, repo_id=repo_id, revision=revision, data=data, missing=r.missing,
                        warnings=r.warnings, comments=r.comments, weights=weights)
