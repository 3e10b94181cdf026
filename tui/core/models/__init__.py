"""Model sources, one part of the core: what a model is and how vLLM serves it (profiles and workloads), the
catalogue of them, and what is derived from a model folder, its ``config.json`` and safetensors headers, or the
Hugging Face cache; the ranges every figure of a model or workload is checked against."""

from tui.core.models.catalog import Catalog
from tui.core.models.profiles import (
    ARCH_FAMILIES,
    ATTENTION_KINDS,
    BYTES_PER_PARAM,
    KV_DTYPES,
    MAX_ID,
    OVERRIDE_KEYS,
    QUANTIZATIONS,
    RANDOM_CELL,
    ModelProfile,
    ModelShape,
    ServeOverride,
    Workload,
    expand_env_refs,
    parse_model_profile,
    parse_rate,
    parse_workload,
    parse_workloads_file,
)

__all__ = ["ARCH_FAMILIES", "ATTENTION_KINDS", "BYTES_PER_PARAM", "KV_DTYPES", "MAX_ID", "OVERRIDE_KEYS",
           "QUANTIZATIONS", "RANDOM_CELL", "Catalog", "ModelProfile", "ModelShape", "ServeOverride", "Workload",
           "expand_env_refs", "parse_model_profile", "parse_rate", "parse_workload", "parse_workloads_file"]
