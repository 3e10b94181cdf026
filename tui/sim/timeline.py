"""How long each phase of a cold ``vllm serve`` start takes, in real seconds, for a model on a GPU.

Anchored on the real H200 start of the Qwen3-8B-shaped model (fixtures startup/main.log, ready after ~121 s):
imports 18.8 s, config 21.3 s, engine process 18.2 s, weights 2.5 s (dummy), torch.compile 31.2 s, KV profiling
2.7 s, CUDA graphs 5 s, warm-up 16.7 s. Compile and graph capture grow with the layer count and with the kind of
model (hybrid linear-attention models compile and capture many more pieces; MoE and quantised kernels autotune),
which puts the seed's 27B hybrid NVFP4 model at ~850 s, as the design note reports (~800 s on first start).
``DISAGG_SIM_STARTUP_S`` compresses the whole timeline to that many seconds, keeping the proportions.
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.core.models import ModelProfile

V2_RUNNER_ARCHS = ("Qwen3ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM", "Qwen2MoeForCausalLM")


@dataclass
class Times:
    """Durations of the phases, in order, real seconds."""

    imports: float = 18.8  # python, torch and vllm imports (banner, args)
    config: float = 21.3  # HF config resolution (Resolved architecture)
    engine_spawn: float = 18.2  # engine process start-up (Initializing a V1 LLM engine)
    dist: float = 1.4  # distributed init, runner choice
    load_start: float = 0.9
    attn: float = 1.0
    load: float = 1.2  # weights (Model loading took)
    dynamo: float = 9.5
    cache_graph: float = 9.2
    compile: float = 7.5
    save: float = 5.4
    profile: float = 0.6
    kv: float = 2.1
    graph_pre: float = 3.2
    graph_piecewise: float = 2.0
    graph_full: float = 2.0
    warmup: float = 16.7
    init_done: float = 0.6
    api: float = 1.3  # Supported tasks → Application startup complete
    cold_extra: float = 0.0  # dp-ready-timeout: an extra-cold compile

    @property
    def compile_total(self) -> float:
        return self.dynamo + self.cache_graph + self.compile + self.save + self.cold_extra

    @property
    def graphs_total(self) -> float:
        return self.graph_pre + self.graph_piecewise + self.graph_full

    @property
    def engine_init(self) -> float:
        """From the engine process being spawned to ``init engine ... took``."""
        return (self.engine_spawn + self.dist + self.load_start + self.attn + self.load + self.compile_total
                + self.profile + self.kv + self.graphs_total + self.warmup + self.init_done)

    @property
    def total(self) -> float:
        return self.imports + self.config + self.engine_init + self.api


def architecture(profile: ModelProfile) -> str:
    name = (profile.model + " " + profile.id).lower()
    if "gemma" in name:
        return "Gemma4ForConditionalGeneration"
    if profile.is_hybrid:
        return "Qwen3_5ForConditionalGeneration"
    if profile.is_moe:
        return "Qwen3MoeForCausalLM"
    if "llama" in name:
        return "LlamaForCausalLM"
    return "Qwen3ForCausalLM"


def cold_start(profile: ModelProfile, *, tp: int = 1, enforce_eager: bool = False, dummy: bool = False) -> Times:
    t = Times()
    layers = profile.shape.layers / 36.0
    kind_compile = 6.0 if profile.is_hybrid else 3.0 if profile.is_moe else 1.0
    kind_graphs = 20.0 if profile.is_hybrid else 3.0 if profile.is_moe else 1.0
    quant = {"nvfp4": 1.5, "fp8": 1.2}.get(profile.quantization, 1.0)
    if profile.trust_remote_code:
        t.config += 2.0
    if tp > 1:
        t.dist += 8.0  # NCCL and custom all-reduce set-up
    t.load = 1.2 + (0.0 if dummy else profile.weights_gib / max(1, tp) / 1.6)
    f = layers * kind_compile * quant
    t.dynamo, t.cache_graph, t.compile, t.save = (x * f for x in (t.dynamo, t.cache_graph, t.compile, t.save))
    g = layers * kind_graphs
    t.graph_pre, t.graph_piecewise, t.graph_full = (x * g for x in (t.graph_pre, t.graph_piecewise, t.graph_full))
    t.warmup *= layers
    if enforce_eager:
        t.dynamo = t.cache_graph = t.compile = t.save = 0.0
        t.graph_pre = t.graph_piecewise = t.graph_full = 0.0
    return t
