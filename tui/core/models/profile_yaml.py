"""A derived profile written as commented YAML for the operator to edit (``disagg-tui profile new``).

The file has the schema of the shipped profiles (``profiles/models/*.yaml``) and loads back strictly through
:func:`tui.core.profiles.parse_model_profile`; each value says in a comment where it came from. A field that could
not be derived is written empty (``layers:``) with the reason, so loading the file names it until it is set.
"""

from __future__ import annotations

from typing import Any

import yaml

from tui.core.models.modeldir import DerivedModel
from tui.core.safeio import shown

_ORDER = ("id", "title", "model", "architecture", "quantization", "kv_cache_dtype", "weights_gib",
          "min_compute_capability", "checked_with_vllm", "vllm", "notes")
_ARCH_ORDER = ("family", "attention", "params_b", "active_params_b", "layers", "full_attention_layers",
               "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "intermediate_size", "vocab_size",
               "num_experts", "experts_per_token", "mtp_layers")
_VLLM_ORDER = ("gpu_memory_utilization", "max_model_len", "trust_remote_code", "load_format", "served_model_name",
               "args", "env")
_FIXED_COMMENTS = {
    "id": "what --model takes once the file is in the profiles folder",
    "model": "what vllm serve is given (a folder, or an HF repo id)",
    "architecture.family": "dense or moe",
    "architecture.attention": "full, or hybrid (linear/Mamba-style layers beside full attention)",
    "kv_cache_dtype": "auto (the checkpoint's), bf16, fp16 or fp8",
    "checked_with_vllm": "vLLM versions this profile was run with (none yet)",
    "vllm.gpu_memory_utilization": "share of each GPU's memory vLLM may take",
}
_WIDTH = 40


def _scalar(value: Any) -> str:
    if value is None:
        return ""
    text: str = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000)
    text = text.strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    elif text.endswith("..."):
        text = text[:-3].rstrip()
    return text


def _line(indent: str, key: str, value: Any, comment: str | None) -> str:
    body = f"{indent}{key}:" + (f" {_scalar(value)}" if value is not None else "")
    if comment:
        body = f"{body:<{_WIDTH}} # {shown(comment, 400)}"  # one line: a newline would end the comment
    return body


def profile_yaml(derived: DerivedModel) -> str:
    """The profile as commented, strict YAML."""
    data = derived.data
    missing = dict(derived.missing)
    comments = {**_FIXED_COMMENTS, **derived.comments}
    for name, why in missing.items():
        comments[name] = f"SET THIS: {why}"
    out = [f"# Model profile derived by disagg-tui from {shown(derived.source, 400)}.",
           "# Check the values against the model card, then save it under the profiles folder's models/ (or give",
           "# --model FILE). The schema is that of the shipped profiles; unknown keys are errors."]
    if missing:
        out.append("# Not derived (set before use): " + ", ".join(missing) + ".")
    for w in derived.warnings:
        out.append(f"# Warning: {shown(w, 400)}")
    for key in _ORDER:
        if key == "architecture":
            out.append("architecture:")
            arch = data.get("architecture", {})
            for ak in _ARCH_ORDER:
                name = f"architecture.{ak}"
                if ak in arch or name in missing:
                    out.append(_line("  ", ak, arch.get(ak), comments.get(name)))
            continue
        if key == "vllm":
            out.append("vllm:")
            v = data.get("vllm", {})
            for vk in _VLLM_ORDER:
                name = f"vllm.{vk}"
                if vk in v or name in missing:
                    out.append(_line("  ", vk, v.get(vk), comments.get(name)))
            continue
        if key == "notes":
            if data.get("notes"):
                out.append("notes: >")
                out.extend(f"  {ln}" for ln in _wrap(shown(str(data["notes"]), 4000), 110))
            continue
        if key in data or key in missing:
            out.append(_line("", key, data.get(key), comments.get(key)))
    return "\n".join(out) + "\n"


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False) or [""]
