"""Reading a Hugging Face ``config.json``: the shape, the layers' kinds, the quantisation, the parameter counts.

Used by :mod:`tui.core.models.modeldir`, which documents what is read. Every reader records where a value came from
(``ConfigReader.comments``, shown in the YAML ``profile new`` writes) and what could not be found, with the profile
field to set (``ConfigReader.missing``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core import safeio
from tui.core.errors import InputError
from tui.core.models import ranges

_ATTN_TYPES = {"full_attention", "attention", "sliding_attention", "sliding_window", "global", "local",
               "chunked_attention", "global_attention", "local_attention", "hybrid"}
_LINEAR_TYPES = {"linear_attention", "mamba", "mamba2", "conv", "ssm", "gated_deltanet", "deltanet",
                 "recurrent", "rwkv", "lightning_attention"}
_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
           "float32": "bf16", "float": "bf16", "fp32": "bf16"}
_SUB_CONFIGS = ("text_config", "llm_config", "language_config")


#: the integer fields of config.json the derivation reads, by the row of :data:`tui.core.models.ranges.MODEL` that
#: bounds them (None: :data:`tui.core.models.ranges.DIMENSION`)
RANGED_KEYS: dict[str, str | None] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "attn_layer_period", "full_attention_interval",
                     "expert_layer_period", "decoder_sparse_step", "moe_layer_freq"), "layers"),
    **dict.fromkeys(("hidden_size", "d_model", "n_embd"), "hidden_size"),
    **dict.fromkeys(("num_attention_heads", "n_head", "linear_num_key_heads", "linear_num_value_heads"),
                    "num_attention_heads"),
    **dict.fromkeys(("num_key_value_heads", "num_kv_heads"), "num_kv_heads"),
    **dict.fromkeys(("head_dim", "linear_key_head_dim", "linear_value_head_dim"), "head_dim"),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size", "moe_intermediate_size",
                     "expert_intermediate_size", "shared_expert_intermediate_size"), "intermediate_size"),
    "vocab_size": "vocab_size",
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "n_shared_experts",
                     "num_shared_experts"), "num_experts"),
    **dict.fromkeys(("num_experts_per_tok", "top_k_experts", "moe_top_k", "num_experts_per_token"),
                    "experts_per_token"),
    **dict.fromkeys(("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions"),
                    "max_model_len"),
    **dict.fromkeys(("kv_lora_rank", "qk_rope_head_dim", "q_lora_rank", "v_head_dim", "qk_nope_head_dim",
                     "linear_conv_kernel_dim", "mamba_expand", "mamba_d_state", "mamba_dt_rank", "mamba_d_conv"),
                    None),
}


def read_config(folder: Path) -> dict[str, Any]:
    """``folder/config.json``: a regular file within its size limit, strict JSON (no NaN/Infinity, no huge
    integers, bounded nesting), every shape figure the derivation reads within :mod:`tui.core.models.ranges`."""
    path = folder / "config.json"
    if not folder.is_dir():
        raise InputError("no such folder", file=folder, field="--model")
    if not os.path.lexists(path):
        raise InputError("not a model folder: no config.json", file=folder, field="--model",
                         hint="a Hugging Face model folder holds config.json, the safetensors weights and the "
                              "tokenizer")
    if path.is_symlink() and not path.exists():
        try:
            path.stat()
        except FileNotFoundError:
            raise InputError("not a model folder: a broken link (an unfinished download?)", file=path,
                             field="--model") from None
        except OSError as exc:  # a link to itself or a loop of links
            raise InputError(f"cannot read: {exc.strerror or exc}", file=path) from None
    text = safeio.read_text(path, "config.json")
    data = safeio.parse_json(text, path)
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", file=path)
    check_ranges(data, text, path)
    return data


def check_ranges(raw: dict[str, Any], text: str, path: Path) -> None:
    """InputError (one line with the file, the line and the field) for a figure the derivation would read that no
    model has: a layer count of 10**12 is refused here, before anything loops over the layers."""
    sub_key = next((k for k in _SUB_CONFIGS if isinstance(raw.get(k), dict)), None)
    cfg = text_config(raw)
    for key, row in RANGED_KEYS.items():
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            continue  # not a figure: the derivation treats it as missing
        bound = ranges.MODEL[row] if row is not None else ranges.DIMENSION
        problem = bound.message(value)
        if problem is None:
            continue
        inside = sub_key is not None and key in raw[sub_key]
        field = f"{sub_key}.{key}" if inside else key
        raise InputError(problem, file=path, line=_key_line(text, key, f'"{sub_key}"' if inside else None),
                         field=field)


def _key_line(text: str, key: str, after: str | None) -> int | None:
    """The line of ``"key"`` in a JSON text (after ``after`` where given), or None."""
    start = text.find(after) if after is not None else 0
    pos = text.find(f'"{key}"', max(start, 0))
    return text.count("\n", 0, pos) + 1 if pos != -1 else None


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    for key in _SUB_CONFIGS:
        sub = cfg.get(key)
        if isinstance(sub, dict):
            return {**cfg, **sub}
    return cfg


def int_field(cfg: dict[str, Any], *keys: str) -> tuple[int | None, str | None]:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, key
    return None, None


class ConfigReader:
    def __init__(self, cfg: dict[str, Any], folder: Path) -> None:
        self.cfg = cfg
        self.folder = folder
        self.missing: list[tuple[str, str]] = []
        self.comments: dict[str, str] = {}
        self.warnings: list[str] = []

    def need(self, target: str, *keys: str) -> int | None:
        value, key = int_field(self.cfg, *keys)
        if value is None:
            self.missing.append((target, f"config.json has no {' or '.join(keys)}"))
        else:
            self.comments[target] = f"config.json {key}"
        return value


def attention_layers(cfg: dict[str, Any], layers: int, r: ConfigReader) -> list[bool]:
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
                                  f"config.json layer_types has {safeio.shown(repr(t), 60)}, neither attention "
                                  "nor linear"))
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
    period, _ = int_field(cfg, "attn_layer_period")
    if period is not None:
        offset = cfg.get("attn_layer_offset", 0)
        offset = offset if isinstance(offset, int) else 0
        r.comments["architecture.full_attention_layers"] = "config.json attn_layer_period/attn_layer_offset"
        return [i % period == offset for i in range(layers)]
    interval, _ = int_field(cfg, "full_attention_interval")
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
    period, _ = int_field(cfg, "expert_layer_period")
    if period is not None:
        offset = cfg.get("expert_layer_offset", 0)
        offset = offset if isinstance(offset, int) else 0
        return [i % period == offset and i not in dense for i in range(layers)]
    first_dense = cfg.get("first_k_dense_replace")
    first = first_dense if isinstance(first_dense, int) else 0
    step, _ = int_field(cfg, "decoder_sparse_step", "moe_layer_freq")
    step = step or 1
    return [i >= first and (i + 1) % step == 0 and i not in dense for i in range(layers)]


def quantization(cfg: dict[str, Any], r: ConfigReader) -> tuple[str | None, str]:
    """(quantization, kv_cache_dtype) of the checkpoint."""
    qc = cfg.get("quantization_config")
    if not isinstance(qc, dict):
        dtype = cfg.get("torch_dtype") or cfg.get("dtype")
        plain = _DTYPES.get(str(dtype).lower()) if isinstance(dtype, str) else None
        if plain is None:
            r.missing.append(("quantization", "config.json has no quantization_config and no torch_dtype"
                              + (f" it knows (got {safeio.shown(repr(dtype), 60)})" if dtype else "")))
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
        r.missing.append(("quantization", f"config.json quantization_config (quant_method "
                                          f"{safeio.shown(repr(method or 'none'), 60)}) "
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
class ParamCounts:
    total: float
    active: float


def param_counts(cfg: dict[str, Any], *, layers: int, hidden: int, heads: int, kv: int, head_dim: int, vocab: int,
            dense_inter: int | None, expert_inter: int | None, experts: int, top_k: int,
            attn: list[bool]) -> ParamCounts:
    """Parameters from the shape: embeddings, per layer the attention (or linear-attention/Mamba) projections and
    the MLP or experts (with router and shared experts)."""
    tie = bool(cfg.get("tie_word_embeddings", False))
    embed = float(vocab * hidden) * (1 if tie else 2)
    attn_p = _mla_params(cfg, hidden, heads) or float(hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2)
    linear_p = _linear_params(cfg, hidden, attn_p)
    moe_at = _moe_layers(cfg, layers) if experts > 1 else [False] * layers
    gemma_both = bool(cfg.get("enable_moe_block"))  # Gemma 4: a dense MLP beside the experts in every layer
    shared_inter, _ = int_field(cfg, "shared_expert_intermediate_size")
    n_shared, _ = int_field(cfg, "n_shared_experts", "num_shared_experts")
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
    return ParamCounts(total=total, active=active)


def _mla_params(cfg: dict[str, Any], hidden: int, heads: int) -> float | None:
    """Multi-head latent attention's projections (q or q_a/q_b, kv_a, kv_b, o); None for other attention."""
    rank, _ = int_field(cfg, "kv_lora_rank")
    if rank is None:
        return None
    rope = int_field(cfg, "qk_rope_head_dim")[0] or 0
    nope = int_field(cfg, "qk_nope_head_dim")[0] or 0
    v_dim = int_field(cfg, "v_head_dim")[0] or nope
    q_rank = int_field(cfg, "q_lora_rank")[0]
    qk = heads * (nope + rope)
    q = hidden * q_rank + q_rank * qk if q_rank else hidden * qk
    return float(q + hidden * (rank + rope) + rank * heads * (nope + v_dim) + heads * v_dim * hidden)


def _linear_params(cfg: dict[str, Any], hidden: int, attn_p: float) -> float:
    nk, _ = int_field(cfg, "linear_num_key_heads")
    nv, _ = int_field(cfg, "linear_num_value_heads")
    dk, _ = int_field(cfg, "linear_key_head_dim")
    dv, _ = int_field(cfg, "linear_value_head_dim")
    if nk and nv and dk and dv:  # Gated DeltaNet (Qwen3-Next, Qwen3.5/3.6)
        key_dim, value_dim = nk * dk, nv * dv
        conv, _ = int_field(cfg, "linear_conv_kernel_dim")
        return float(hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * nv + value_dim * hidden
                     + (2 * key_dim + value_dim) * (conv or 4))
    expand, _ = int_field(cfg, "mamba_expand")
    d_state, _ = int_field(cfg, "mamba_d_state")
    if expand and d_state:  # Mamba (Jamba)
        inner = expand * hidden
        dt_rank, _ = int_field(cfg, "mamba_dt_rank")
        dt_rank = dt_rank or -(-hidden // 16)
        conv, _ = int_field(cfg, "mamba_d_conv")
        return float(hidden * 2 * inner + inner * (conv or 4) + inner * (dt_rank + 2 * d_state)
                     + dt_rank * inner + inner * d_state + inner + inner * hidden)
    return attn_p
