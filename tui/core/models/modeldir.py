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
- never ``trust_remote_code``: a folder that ships its own code (``auto_map``) gets a warning and ``false``; only a
  profile the operator writes says true.

The parameter counts are computed from that shape (embedding, attention or linear-attention/Mamba projections, MLP
or experts with the router and shared experts); the weights' size is what the files hold. The KV cache per token
follows from the shape: 2 (K and V) × full-attention layers × KV heads × head dim × bytes per element.

Anything that cannot be derived is reported with the profile field to set; :meth:`DerivedModel.profile` then
raises one :class:`InputError` line naming them all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tui.core.errors import InputError
from tui.core.models.hfcache import repo_of_snapshot
from tui.core.models.hfconfig import (
    ConfigReader,
    attention_layers,
    int_field,
    param_counts,
    quantization,
    read_config,
    text_config,
)
from tui.core.models.profiles import MAX_ID, ModelProfile, parse_model_profile
from tui.core.models.safetensors_meta import WeightsInfo, weights_info
from tui.core.safeio import shown

#: the seed experiments' ``--max-model-len``; a model with a shorter context gets its own
DEFAULT_MAX_MODEL_LEN = 32768
DEFAULT_GPU_MEMORY_UTILIZATION = 0.90
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "spiece.model",
                   "tekken.json")
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
    return s[:MAX_ID].rstrip("-._") or "model"


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
    raw = read_config(folder)
    cfg = text_config(raw)
    r = ConfigReader(cfg, folder)
    layers = r.need("architecture.layers", "num_hidden_layers", "n_layer", "num_layers")
    hidden = r.need("architecture.hidden_size", "hidden_size", "d_model", "n_embd")
    heads = r.need("architecture.num_attention_heads", "num_attention_heads", "n_head")
    kv_heads, kv_key = int_field(cfg, "num_key_value_heads", "num_kv_heads")
    mla_rank, _ = int_field(cfg, "kv_lora_rank")
    mla_rope, _ = int_field(cfg, "qk_rope_head_dim")
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
    head_dim, hd_key = int_field(cfg, "head_dim")
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
    experts, ex_key = int_field(cfg, "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
    experts = experts if experts and experts > 1 else 0
    top_k = 0
    if experts:
        r.comments["architecture.num_experts"] = f"config.json {ex_key}"
        top_k = r.need("architecture.experts_per_token", "num_experts_per_tok", "top_k_experts", "moe_top_k",
                       "num_experts_per_token") or 0
    dense_inter, di_key = int_field(cfg, "intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size")
    expert_inter, ei_key = int_field(cfg, "moe_intermediate_size", "expert_intermediate_size")
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
    max_pos, mp_key = int_field(cfg, "max_position_embeddings", "max_sequence_length", "seq_length", "n_positions")
    if max_pos is None:
        r.missing.append(("vllm.max_model_len", "config.json has no max_position_embeddings"))
    else:
        r.comments["vllm.max_model_len"] = (f"config.json {mp_key} {max_pos}" if max_pos <= DEFAULT_MAX_MODEL_LEN
                                            else f"{DEFAULT_MAX_MODEL_LEN} of the model's {max_pos} ({mp_key}): "
                                                 "raise it if the GPUs hold the KV cache")
    quant, kv_dtype = quantization(cfg, r)
    attn = attention_layers(cfg, layers, r) if layers else []
    full_layers = sum(attn)
    if layers and full_layers == 0:
        r.missing.append(("architecture.full_attention_layers", "no attention layer found in config.json"))
    weights = weights_info(folder)
    if weights is None:
        r.missing.append(("weights_gib", "no weights in the folder (*.safetensors or *.bin)"))
    elif weights.total_bytes <= 0:
        r.missing.append(("weights_gib", "the safetensors files hold no tensors"))
    if not any((folder / name).exists() for name in TOKENIZER_FILES):
        r.warnings.append(f"{shown(str(folder), 300)}: no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...): "
                          "vLLM needs a tokenizer; add --arg '--tokenizer DIR'")
    name = repo_id.split("/", 1)[1] if repo_id else folder.name
    pid = profile_id or slug(name)
    params = None
    if layers and hidden and heads and kv_heads and head_dim and vocab and (inter is not None):
        params = param_counts(cfg, layers=layers, hidden=hidden, heads=heads, kv=kv_heads, head_dim=head_dim,
                         vocab=vocab, dense_inter=dense_inter, expert_inter=expert_inter, experts=experts,
                         top_k=top_k, attn=attn)
    else:
        r.missing.append(("architecture.params_b", "needs the shape fields above; or "
                                                   "set the total parameters in billions"))
    arch_names = raw.get("architectures")
    arch_text = shown(", ".join(str(a) for a in arch_names[:8]) if isinstance(arch_names, list) else str(
        raw.get("model_type", "?")), 120)
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
    mtp, mtp_key = int_field(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers",
                             "mtp_num_layers")
    if mtp and mtp > 0:
        architecture["mtp_layers"] = mtp
        r.comments["architecture.mtp_layers"] = f"config.json {mtp_key}: an MTP head (speculative decoding)"
    data: dict[str, Any] = {
        "id": pid,
        "title": f"{shown(repo_id or folder.name, 120)} ({family}"
                 f"{', hybrid attention' if attention == 'hybrid' else ''}, {quant or '?'}; derived)",
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
    if "auto_map" in raw or "auto_map" in cfg:  # never trusted on a folder's word: a profile of the operator's says so
        vllm["trust_remote_code"] = False
        r.comments["vllm.trust_remote_code"] = ("config.json auto_map: the model ships its own Python code; true lets "
                                                "vLLM run it (only for a folder you trust)")
        r.warnings.append(f"{shown(repo_id or str(folder), 200)} ships its own Python code (config.json auto_map): "
                          "vLLM runs it only with trust_remote_code: true in a profile of yours ('disagg-tui profile "
                          "new --from MODEL -o FILE', then --model FILE); vLLM's own implementation is used until then")
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
