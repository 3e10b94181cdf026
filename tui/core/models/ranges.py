"""The ranges of the figures a model or a workload may have: one table for every reader of them.

A model's shape reaches the planner (memory checks), the simulator (its performance model, its tokenizer) and the
derivation of a profile from ``config.json`` (which loops over the layers); a workload's lengths and counts reach
the benchmark's prompt builder and the simulated benchmark, which allocate per prompt and per token. A figure out
of these ranges is one line naming the file and field (:func:`check`), never a MemoryError or a loop that does
not end.

The bounds leave headroom over the largest public models (late 2026: about 2 T parameters, ~128 layers, hidden
sizes up to ~32 k, 256 attention heads, vocabularies of a few hundred thousand, 1,024 experts, 10 M tokens of
context): roughly eight times the largest known value, and no more, so that nothing downstream allocates or loops
per unit without bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tui.core.errors import InputError


@dataclass(frozen=True, slots=True)
class Range:
    lo: float
    hi: float
    why: str = ""  # said when a value is too large: what the bound stands for

    def message(self, value: float) -> str | None:
        """None when ``value`` is within the range, else why not (one line)."""
        if self.lo <= value <= self.hi:
            return None
        why = f" ({self.why})" if self.why and value > self.hi else ""
        return f"must be {_fmt(self.lo)} to {_fmt(self.hi)}; got {_fmt(value)}{why}"


def _fmt(x: float) -> str:
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:,.0f}" if x.is_integer() and abs(x) < 1e15 else f"{x:g}"


#: a model's figures, by the profile field they are written to (``architecture.<name>`` or ``vllm.<name>``)
MODEL: dict[str, Range] = {
    "layers": Range(1, 2048, "no model has that many layers"),
    "full_attention_layers": Range(1, 2048, "no model has that many layers"),
    "hidden_size": Range(1, 262_144, "the largest models have ~32k"),
    "num_attention_heads": Range(1, 2048, "the largest models have 128-256"),
    "num_kv_heads": Range(1, 2048, "the largest models have 128-256"),
    "head_dim": Range(1, 8192, "the largest models have 512"),
    "intermediate_size": Range(1, 1_048_576, "the largest models have ~64k"),
    "vocab_size": Range(1, 33_554_432, "the largest vocabularies hold a few million tokens"),
    "num_experts": Range(0, 8192, "the largest MoE models have ~1,024"),
    "experts_per_token": Range(0, 1024, "MoE models route a token to at most a few dozen"),
    "mtp_layers": Range(0, 64, "MTP heads have one to a few layers"),
    "max_model_len": Range(16, 134_217_728, "the longest contexts are ~10M tokens"),
    "params_b": Range(0.01, 16_000, "the largest models have ~2,000 billion"),
    "active_params_b": Range(0.01, 16_000, "the largest models have ~2,000 billion"),
    "weights_gib": Range(0.01, 65_536, "the largest checkpoints hold ~4,000 GiB"),
    "gpu_memory_utilization": Range(0.05, 0.99),
    "min_compute_capability": Range(1.0, 99.0),
}
#: any other dimension ``config.json`` may give (a latent rank, a Mamba state size, a shared expert's width)
DIMENSION = Range(1, 1_048_576, "no model has a dimension that large")
#: bytes of weights a checkpoint may hold (:data:`MODEL`'s ``weights_gib``, in bytes)
MAX_WEIGHT_BYTES = int(MODEL["weights_gib"].hi) * 2**30

#: a workload's figures (the simulated benchmark and the prompt builder allocate per prompt and per token)
WORKLOAD: dict[str, Range] = {
    "input_len": Range(1, 10_000_000, "no model reads that many tokens"),
    "output_len": Range(1, 10_000_000, "no model writes that many tokens"),
    "prefix_len": Range(0, 10_000_000, "no model reads that many tokens"),
    "num_prompts": Range(1, 1_000_000, "the prompts are built in memory before the clock starts"),
    "max_concurrency": Range(1, 1_000_000),
    "request_rate": Range(1e-6, 1_000_000, "or 'inf' for all at once"),
    "burstiness": Range(0.01, 1000),
    "range_ratio": Range(0.0, 0.999),
    "seed": Range(0, 2**32 - 1, "vllm bench seeds numpy, which takes seeds below 2**32"),
}
#: tokens a run's prompts may hold together (they are built in memory before the clock starts)
MAX_PROMPT_TOKENS = 100_000_000


def check(table: dict[str, Range], name: str, value: float, *, file: str | Path | None = None,
          line: int | None = None, field: str | None = None) -> None:
    """InputError (one line naming ``file``, ``line`` and ``field``, default ``name``) when ``value`` is out of
    ``table[name]``."""
    problem = table[name].message(value)
    if problem is not None:
        raise InputError(problem, file=file, line=line, field=field or name)
