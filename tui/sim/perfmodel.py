"""The simulated GPU's performance model: how long one engine step takes, in seconds of virtual time (pure).

One step of vLLM's continuous batching runs a batch of decode tokens (one per running sequence) and prefill chunks
(``max_num_batched_tokens`` in all) through the model once. Its time on every GPU of a tensor-parallel group is

    overhead + bytes / HBM bandwidth + FLOPs / compute rate + all-reduce time

- **bytes**: the weights (MoE: the experts the step's tokens touch, all of them at large batch), the KV cache each
  decode token attends to, the recurrent state of linear-attention (Mamba-style) layers, read and written once per
  sequence. Weights and KV are split across the TP group.
- **FLOPs**: 2 × active non-embedding parameters per token, the LM head for the sampled tokens only, and causal
  attention over the context for prefill chunks. Not overlapped with the memory time: at vLLM's batch sizes decode
  GEMMs stream weights and then compute, and the real H200 timings (below) fit a sum, not a max.
- **all-reduce**: two per layer (attention and MLP outputs) of the step's activations, over NVLink, for TP > 1.
- **overhead**: a fixed per-step cost (scheduling, launches) plus per-layer terms (every layer; more for
  linear-attention, MoE and Triton-attention layers), per-sequence bookkeeping and the sampler over the vocabulary
  for every sampled sequence.

What kernels run is the **stack** (:class:`Stack`), from the plan and the host's facts as vLLM 0.24 picks them:
the attention backend (``--attention-backend``, else FlashInfer on Blackwell, FlashAttention 3 on Hopper), the
sampler (FlashInfer's, or the Triton top-k/top-p kernel with ``VLLM_USE_FLASHINFER_SAMPLER=0``), and whether
FlashInfer's kernels are usable at all (no nvcc: no JIT, and NVFP4 GEMMs leave their fast path). The seed's host ran
without nvcc (:data:`SEED_STACK`); the H200 captures ran FA3 with the Triton sampler (:data:`H200_CAPTURE_STACK`).
A host's calibration (:class:`Correction`, ``predict --calibrate``) scales the memory/overhead and the compute
parts of a step and the KV transfer.

Every constant below says where it comes from: the datasheet, the H200 captures (``fixtures/vllm-0.24.0-h200``), or
a fit to the seed's 2×B200 table (DESIGN.md), or a fit to the real H200 tp1 grid (``fixtures/vllm-0.24.0-h200-grid``);
``benchmarks/sim_calibration.py`` prints the result against all three (tests/test_sim_calibration.py guards the
bounds: H200 within 10 %, every seed cell within 15 %, every tp1 grid cell within 10 %).

Short prompts in a burst (the tp1 grid's 64 × 128 tokens) lean on what the long ones hide: the API server admits a
burst one request at a time (:mod:`tui.sim.frontend`), FA3's decode pays a combine kernel per layer on Hopper
(``ATTN_HOPPER``), and a GPU coming from idle computes at its boost clock until its power limiter catches up
(``BOOST_COMPUTE_GAIN``). The host's CPU share of a step (``HOST_STEP_S``) hides behind the GPU with async scheduling
and adds without it.

Efficiency anchors: the measured H200 ceilings (4.3 TB/s device copy, 790 TFLOP/s bf16 matmul); other GPUs take
their datasheet figures scaled by the same measured/datasheet ratios. ``SERVE_COMPUTE_EFF`` makes an 8192-token
prefill chunk of the Qwen3-8B-shaped model take the ~0.23 s the real server's 35k prompt tokens/s imply; decode at
128 sequences then lands on the real 13.75 ms TPOT within a few per cent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tui.core.models import ModelProfile
from tui.core.plan.gpuspecs import GpuSpec
from tui.sim.knobs_model import ServeKnobs, SpecPlan, spec_plan

GIB = float(2**30)
BLOCK_SIZE = 16

# measured on a real H200 (DESIGN.md): used as efficiency anchors for every GPU
H200_MEASURED_BW_RATIO = 4.3 / 4.8  # device-to-device copy / datasheet HBM bandwidth
H200_MEASURED_FLOPS_RATIO = 790.0 / 990.0  # 8192^3 bf16 matmul / datasheet dense bf16
#: share of the matmul ceiling a whole vLLM forward pass reaches (norms, activations, rotary, attention glue)
#: [H200 captures: the prefill-heavy run's TTFT and the 35.6k prompt tokens/s peak]
SERVE_COMPUTE_EFF = 0.77
#: ...with the GPU at its power limit, as it is a fraction of a second into a run (the real H200 drew 693-703 W of its
#: 700 W through every prefill-heavy cell of the tp1 grid). A GPU that was idle starts at its boost clock and computes
#: this much faster until its power limiter has caught up (an exponential average of its busy time, BOOST_TAU_S)
#: [tp1 grid fit: 64 × 128-token prompts prefill at ~18 µs a token in the first 250 ms, 23 µs in sustained runs]
BOOST_COMPUTE_GAIN = 1.15
BOOST_TAU_S = 0.5
#: effective GEMM speed-up over bf16 that vLLM 0.24 reaches with quantised weights on the fast path (FlashInfer's
#: CUTLASS/TRT-LLM FP4 and FP8 GEMMs; activation quantisation and scale handling eat part of the datasheet's 2×/4×).
#: FP8 1.6 (80 % of the datasheet's 2×) [in shape against the seed table]; NVFP4 3.2 assumed (the datasheet's 4× at
#: FP8's discount: no capture ran FlashInfer's FP4 GEMMs)
QUANT_GEMM_SPEEDUP = {"bf16": 1.0, "fp16": 1.0, "fp8": 1.6, "nvfp4": 3.2, "int4": 1.0, "awq": 1.0, "gptq": 1.0}
#: the same without FlashInfer's kernels (no nvcc for its JIT, no flashinfer-cubin), as on the seed's host: NVFP4
#: falls back to vLLM's own CUTLASS FP4 GEMM with separate activation-quantisation kernels [seed table fit: 2.45];
#: FP8 runs vLLM's CUTLASS scaled-mm either way
QUANT_GEMM_SPEEDUP_NO_FLASHINFER = {"fp8": 1.6, "nvfp4": 2.45}
#: grouped expert GEMMs (routing, permute/unpermute, many small GEMMs) reach this share of the dense rate
#: [seed table fit: gemma's prefill-heavy rows]
MOE_GEMM_EFF = 0.10
#: per MoE layer per step: router top-k, permute/unpermute and grouped-GEMM launches [seed table fit]
MOE_LAYER_OVERHEAD_S = 56e-6
#: how much of the shorter of (weight streaming, GEMM compute) does not hide behind the longer one [H200 captures]
GEMM_OVERLAP_REST = 0.5
#: the same for attention: decode queries streaming KV beside prefill queries computing in one varlen kernel
ATTN_OVERLAP_REST = 0.5
#: attention kernels at head_dim 256 run at this share of the head_dim-128 rate (FA3 / FlashInfer tiles)
ATTN_EFF = {64: 1.0, 128: 1.0, 256: 0.55}
#: by attention backend: the share of HBM bandwidth its decode kernel reaches reading KV, the share of the
#: FlashAttention rate its prefill kernel reaches, and a per-full-attention-layer launch cost per step.
#: FLASH_ATTN (FA3, Hopper's choice) is the H200 captures' reference; FLASHINFER (Blackwell's automatic choice)
#: is taken equal to it (no capture); TRITON_ATTN (the seed's backend: no nvcc for FlashInfer) [seed table fit:
#: its decode kernel streams KV as fast, its prefill reaches 76 % of FA3's rate, each layer costs 38 µs more a step]
ATTN_DECODE_BW_EFF = {"FLASH_ATTN": 1.0, "FLASHINFER": 1.0, "TRITON_ATTN": 1.0}
ATTN_PREFILL_EFF = {"FLASH_ATTN": 1.0, "FLASHINFER": 1.0, "TRITON_ATTN": 0.76}
ATTN_LAYER_OVERHEAD_S = {"FLASH_ATTN": 0.0, "FLASHINFER": 0.0, "TRITON_ATTN": 38e-6}
#: the same on Hopper, where the backends' kernels differ [H200 knob runs: one server per backend, the same four
#: cells]: FA3's decode splits the KV of a short batch and runs a combine kernel per layer; Triton's unified
#: attention does it in one kernel (decode 3-9 % faster than FA3 at 64 short sequences) but reads KV more slowly and,
#: without Hopper's wgmma/TMA paths, computes prefill attention at a fraction of FA3's rate (2,048-token prompts:
#: TTFT 1.27×); FlashInfer's Hopper kernels trail FA3 in both (3-7 % in every cell)
ATTN_HOPPER = {  # backend -> (decode KV bandwidth share, prefill rate share, per-layer cost a step)
    "FLASH_ATTN": (1.07, 1.0, 10e-6),  # its KV read is a pure read stream (4.6 TB/s, above the 4.3 of a copy)
    "FLASHINFER": (1.0, 0.5, 15e-6),
    "TRITON_ATTN": (0.9, 0.15, 0.0),
}
#: the sampler, per sampled sequence per vocabulary entry: vLLM 0.24's Triton top-k/top-p kernel (what runs with
#: VLLM_USE_FLASHINFER_SAMPLER=0, as in the H200 captures and the seed; the model's generation_config asks for
#: top_k 20 / top_p 0.95) [H200 captures and seed table fit: 78 ps a logit, 19 µs a sequence at Qwen3.6's 248k
#: vocabulary]; FlashInfer's rejection sampler is assumed to cost half (no capture)
SAMPLER_S_PER_LOGIT = {"triton": 78e-12, "flashinfer": 39e-12}
#: and a fixed part per step that samples at all: the sampling path's kernels (penalties, temperature, top-k/top-p,
#: the draw) are launched outside the CUDA graph, and a row's passes over its vocabulary run serially on one SM
#: while the rows run side by side across the SMs [tp1 grid fit]
SAMPLER_STEP_S = {"triton": 0.0, "flashinfer": 0.0}
#: the first batch after start compiles the Triton top-k/top-p kernel (``jit_monitor`` warns
#: "_topk_topp_kernel"): 8 s in the real H200 run [H200 captures]; on the seed's B200 [seed table fit]
FIRST_BATCH_JIT_S = {"hopper": 8.0, "blackwell": 7.1}
#: share of the per-direction NVLink bandwidth a NIXL transfer or an NCCL ring all-reduce of prefill activations
#: reaches [seed table fit: TP=2's prefill-heavy rows; no NVLS, NCCL_NVLS_ENABLE=0 as in the captures' setup]
NVLINK_EFF = 0.37
ALLREDUCE_LATENCY_S = 7.8e-6  # vLLM custom all-reduce, small messages, one NVLink hop [seed table fit]
STEP_OVERHEAD_S = 0.3e-3  # scheduler, input preparation, sampling launch, output processing
LAYER_OVERHEAD_S = 6e-6  # per layer per step: kernel launch and tail latency inside the CUDA graph
#: per linear-attention layer per step: conv1d update, gating, recurrent-update and gated-norm kernels (FLA's
#: Triton kernels, whatever the attention backend) [seed table fit]
LINEAR_LAYER_OVERHEAD_S = 97e-6
SEQ_OVERHEAD_S = 2e-6  # per sequence per step: detokenisation, bookkeeping (sampling: SAMPLER_S_PER_LOGIT)
#: the host's CPU share of a step: the engine core schedules, prepares the inputs and processes the outputs of every
#: sequence in it (the API server streams them in its own process). With async scheduling (vLLM 0.24's default) it
#: runs beside the GPU's step, so a step takes the longer of the two; without it (``--no-async-scheduling``, or
#: forced off by n-gram speculative decoding: "Async scheduling not supported with ngram-based speculative
#: decoding") it runs between the GPU's steps and adds [H200 knob runs: the n-gram server, async off and on the V1
#: model runner, decodes 64 sequences ~4.7 ms a step slower than the base server while its drafter finds almost
#: nothing to propose]
HOST_STEP_S = 1.5e-3
HOST_SEQ_S = 35e-6
NIXL_SETUP_S = 1.2e-3  # per KV transfer: descriptor preparation and notification [seed table fit]
#: state of one linear-attention layer for one sequence, in bytes per unit of hidden size (Gated-DeltaNet-style:
#: value heads × key dim × value dim ≈ hidden × 128 elements in bf16)
LINEAR_STATE_BYTES_PER_HIDDEN = 128 * 2
#: torch.cuda's total memory is this much below what NVML reports (the real H200: 143771 MiB vs 139.8 GiB)
TORCH_RESERVED_MIB = 616
CUDA_CONTEXT_GIB = 2.3  # what nvidia-smi shows on top of the gpu_memory_utilization budget (real H200: +2.3 GiB)
NON_TORCH_GIB = 0.135  # non-torch allocations counted inside the budget (NCCL, cuBLAS workspaces)
#: vLLM's V1 model runner (what n-gram speculative decoding falls back to) peaks this much higher in the memory
#: profile than the V2 runner, per 8,192 batched tokens [H200 knob runs: 21.45 GiB of KV against 25.16]
V1_RUNNER_EXTRA_GIB = 3.71

# --- serve knobs (tui/sim/knobs_model.py reads them from the command line) -------------------------------------
#: FP8 KV cache (``--kv-cache-dtype fp8``): one byte per element, so twice the tokens in the same memory and half the
#: bytes a decode token reads; prefill attention quantises the new K/V as it writes them and dequantises in the
#: kernel: this share of the bf16 rate [assumed; the H200 knob runs check it]
FP8_KV_PREFILL_ATTN_EFF = 1.0
#: ...and decode attention reads its half-size KV at this share of the bf16 kernel's bandwidth (dequantisation in
#: the kernel, FA3's FP8 path) [H200 knob runs: decode 2-5 % faster, not the ~10 % half the bytes would give]
FP8_KV_DECODE_BW_EFF = 0.7
#: FP8 KV is stored as float8_e4m3/e5m2: compute capability 8.9 or newer (Ada, Hopper, Blackwell)
FP8_KV_MIN_CC = 8.9
#: speculative decoding, per step while any sequence decodes speculatively: the rejection sampler, the drafts'
#: bookkeeping and the non-uniform batch shapes that fall back from full CUDA graphs [H200 knob runs: ngram]
SPEC_STEP_OVERHEAD_S = 0.5e-3
#: the n-gram / suffix drafter runs on the CPU between steps (vLLM's numba KMP over each context): per sequence and
#: per context token [H200 knob runs: ngram on the dummy model, whose drafts are never accepted]
NGRAM_S_PER_SEQ = 4e-6
NGRAM_S_PER_CTX_TOKEN = 0.5e-9
#: a separate draft model (``draft_model``, no size known to the model): this share of the target's weight bytes
DRAFT_MODEL_SHARE = 0.10
#: ``--enforce-eager`` (or cudagraph mode NONE, -O0): no CUDA graphs and no torch.compile fusions. Each layer's
#: dozen kernels are launched from Python (~4 µs each); the GPU waits when launching is slower than running
#: [assumed: PyTorch eager dispatch; no capture ran eager]
EAGER_LAUNCH_S_PER_LAYER = 55e-6
#: and the unfused norms, rotary and activations cost this much more GPU time per layer per step
EAGER_UNFUSED_S_PER_LAYER = 8e-6
#: expert parallel: each GPU holds whole experts (E / ep of them) instead of a 1/tp slice of every expert; the
#: grouped GEMMs of whole experts run this much faster than of slices [assumed], and the step waits for the most
#: loaded GPU: tokens × top_k assignments spread over ep GPUs, imbalance ≈ 1 + 1/sqrt(assignments per GPU)
EP_GEMM_GAIN = 1.25

ATTENTION_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN")


def _model_backend(name: str) -> str:
    """The backend whose costs the model has for a vLLM backend name (the DIFFKV variants run the same kernels;
    any other one is costed as FlashAttention)."""
    att = name.upper().removesuffix("_DIFFKV")
    return att if att in ATTENTION_BACKENDS else "FLASH_ATTN"


@dataclass(frozen=True, slots=True)
class Stack:
    """The kernels a vLLM 0.24 engine runs with, from the plan (flags, env) and the host's facts (GPU, nvcc):
    the attention backend, the sampler, whether FlashInfer's kernels (and with them the quantised GEMMs' fast
    path) are usable."""

    attention: str = "FLASH_ATTN"
    flashinfer_sampler: bool = True
    flashinfer_kernels: bool = True

    @classmethod
    def select(cls, spec: GpuSpec, *, attention_backend: str | None = None, flashinfer_sampler: bool = True,
               nvcc: bool = True) -> Stack:
        """What vLLM picks: an explicit ``--attention-backend``, else FlashInfer on Blackwell, FlashAttention 3 on
        Hopper. Without nvcc FlashInfer's JIT kernels are out (the seed: Triton attention, no FlashInfer
        sampler)."""
        if attention_backend:
            att = _model_backend(attention_backend)
        else:
            att = "FLASHINFER" if spec.compute_capability >= 10.0 else "FLASH_ATTN"
        return cls(attention=att, flashinfer_sampler=flashinfer_sampler, flashinfer_kernels=nvcc)

    def with_knobs(self, knobs: ServeKnobs) -> Stack:
        """This stack with a command line's explicit choices: ``--attention-backend`` and
        ``VLLM_USE_FLASHINFER_SAMPLER`` win over the host's defaults."""
        att = self.attention
        if knobs.attention_backend:
            att = _model_backend(knobs.attention_backend)
        sampler = self.flashinfer_sampler if knobs.flashinfer_sampler is None else knobs.flashinfer_sampler
        if att == self.attention and sampler == self.flashinfer_sampler:
            return self
        return Stack(attention=att, flashinfer_sampler=sampler, flashinfer_kernels=self.flashinfer_kernels)

    @property
    def sampler(self) -> str:
        return "flashinfer" if self.flashinfer_sampler else "triton"

    def describe(self) -> str:
        quant = "FlashInfer GEMMs" if self.flashinfer_kernels else "no FlashInfer GEMMs"
        return f"{self.attention} attention, {self.sampler} sampler, {quant}"


#: the seed's stack on 2× B200 (DESIGN.md): no nvcc, the article's fix (Triton attention, FlashInfer sampler off)
SEED_STACK = Stack(attention="TRITON_ATTN", flashinfer_sampler=False, flashinfer_kernels=False)
#: the H200 captures' stack: FlashAttention 3, VLLM_USE_FLASHINFER_SAMPLER=0, nvcc present
H200_CAPTURE_STACK = Stack(attention="FLASH_ATTN", flashinfer_sampler=False, flashinfer_kernels=True)


#: how far ``predict --calibrate`` may move a correction factor from 1 (a host more than 2× off the model is a
#: model error, not a host property)
CORRECTION_BOUNDS = (0.5, 2.0)


@dataclass(frozen=True, slots=True)
class Correction:
    """Per-host correction factors (``predict --calibrate``): each multiplies a part of the step time."""

    decode: float = 1.0  # memory streaming (weights, KV, state) and per-step overheads: what a decode step is
    prefill: float = 1.0  # GEMM and attention compute: what a prefill chunk is
    kv_transfer: float = 1.0  # a KV pull between P and D

    def to_dict(self) -> dict[str, float]:
        return {"decode": self.decode, "prefill": self.prefill, "kv_transfer": self.kv_transfer}

    @property
    def identity(self) -> bool:
        return self.decode == self.prefill == self.kv_transfer == 1.0


def boost_factor(heat: float) -> float:
    """The compute speed-up over the sustained (power-limited) rate of a GPU whose recent busy share is ``heat``."""
    return 1.0 + (BOOST_COMPUTE_GAIN - 1.0) * (1.0 - min(1.0, max(0.0, heat)))


def heat_after(heat: float, busy_s: float, idle_s: float = 0.0) -> float:
    """The busy share's exponential average after ``idle_s`` idle then ``busy_s`` busy."""
    if idle_s > 0:
        heat *= math.exp(-idle_s / BOOST_TAU_S)
    return 1.0 - (1.0 - heat) * math.exp(-busy_s / BOOST_TAU_S)


def first_batch_jit_s(spec: GpuSpec, stack: Stack) -> float:
    """The first batch's Triton sampler compile (only the Triton sampler compiles at first use)."""
    if stack.flashinfer_sampler:
        return 0.0
    return FIRST_BATCH_JIT_S.get(spec.arch, FIRST_BATCH_JIT_S["hopper"])


@dataclass(frozen=True, slots=True)
class Hardware:
    """Effective rates of one simulated GPU."""

    spec: GpuSpec
    hbm_bw: float  # bytes/s
    bf16_flops: float  # FLOP/s a vLLM forward reaches with bf16 GEMMs
    nvlink_bw: float  # bytes/s, one direction, effective

    @classmethod
    def for_gpu(cls, spec: GpuSpec) -> Hardware:
        bw = spec.measured_hbm_bandwidth or spec.hbm_bandwidth * H200_MEASURED_BW_RATIO
        peak = spec.measured_bf16_flops or spec.flops["bf16"] * H200_MEASURED_FLOPS_RATIO
        return cls(spec=spec, hbm_bw=bw, bf16_flops=peak * SERVE_COMPUTE_EFF,
                   nvlink_bw=spec.nvlink_bandwidth * NVLINK_EFF)

    @property
    def torch_total_gib(self) -> float:
        return (self.spec.memory_total_mib - TORCH_RESERVED_MIB) / 1024.0


@dataclass(frozen=True, slots=True)
class Chunk:
    """A prefill chunk in a step: ``tokens`` prompt tokens starting at position ``start``."""

    tokens: int
    start: int
    samples: bool  # the chunk finishes the prompt, so the step samples a token for it


class ModelCost:
    """Step times of one model on one GPU type with a given TP degree (every rank runs the same step), with the
    serve ``knobs`` the engine was started with (KV dtype, speculative decoding, expert parallel, async scheduling,
    CUDA graphs; the attention backend and sampler are the ``stack``'s)."""

    def __init__(self, profile: ModelProfile, hw: Hardware, tp: int = 1, stack: Stack | None = None,
                 correction: Correction | None = None, knobs: ServeKnobs | None = None, ep: int | None = None) -> None:
        self.profile = profile
        self.correction = correction or Correction()
        self.hw = hw
        self.tp = max(1, tp)
        self.knobs = knobs or ServeKnobs()
        kn = self.knobs
        self.stack = stack if stack is not None else Stack.select(hw.spec)
        att = self.stack.attention
        s = profile.shape
        self.layers = s.layers
        self.full_layers = s.full_attention_layers
        self.linear_layers = s.layers - s.full_attention_layers
        self.hidden = s.hidden_size
        weights_bytes = profile.weights_gib * GIB
        params = profile.params_b * 1e9
        bpp = weights_bytes / params  # bytes per parameter, averaged over the checkpoint
        embed = float(s.vocab_size * s.hidden_size)
        untied = 2 * embed < 0.5 * profile.active_params_b * 1e9
        self.body_active = profile.active_params_b * 1e9 - (2 * embed if untied else embed)
        self.body_total = params - (2 * embed if untied else embed)
        # weights read per step, per GPU (the embedding table is gathered, not streamed)
        read = weights_bytes - embed * bpp
        self.experts = s.num_experts
        self.top_k = s.experts_per_token
        if profile.is_moe and self.experts > self.top_k > 0:
            per_expert = (self.body_total - self.body_active) / (self.experts - self.top_k)
            self.expert_active = per_expert * self.top_k
            expert_bytes = per_expert * self.experts * bpp
        else:
            self.expert_active = 0.0
            expert_bytes = 0.0
        # expert parallel over the server's GPUs (its TP group; a DP server's ranks with ``ep``)
        self.ep = max(1, ep if ep is not None else self.tp) if kn.expert_parallel and self.expert_active > 0 else 1
        self.dense_read = (read - expert_bytes) / self.tp
        self.expert_read = expert_bytes / (self.ep if self.ep > 1 else self.tp)
        self.lm_head_flops = 2.0 * embed / self.tp
        self.lm_head_bytes = embed * bpp / self.tp
        speedup = QUANT_GEMM_SPEEDUP.get(profile.quantization, 1.0)
        if not self.stack.flashinfer_kernels:
            speedup = QUANT_GEMM_SPEEDUP_NO_FLASHINFER.get(profile.quantization, speedup)
        self.gemm_flops = hw.bf16_flops * speedup
        self.moe_gemm_flops = self.gemm_flops * MOE_GEMM_EFF * (EP_GEMM_GAIN if self.ep > 1 else 1.0)
        attn_eff = ATTN_EFF.get(s.head_dim, 1.0 if s.head_dim < 128 else 0.55)
        kv_fp8 = profile.kv_cache_dtype == "fp8" or kn.kv_fp8
        if hw.spec.arch == "hopper" and att in ATTN_HOPPER:
            bw_eff, prefill_eff, layer_s = ATTN_HOPPER[att]
        else:
            bw_eff, prefill_eff = ATTN_DECODE_BW_EFF.get(att, 1.0), ATTN_PREFILL_EFF.get(att, 1.0)
            layer_s = ATTN_LAYER_OVERHEAD_S.get(att, 0.0)
        self.attn_flops_rate = (hw.bf16_flops * attn_eff * prefill_eff
                                * (FP8_KV_PREFILL_ATTN_EFF if kn.kv_fp8 else 1.0))
        self.kv_bw = hw.hbm_bw * bw_eff * (FP8_KV_DECODE_BW_EFF if kv_fp8 and kn.kv_fp8 else 1.0)
        # the sampler runs over the whole vocabulary on every rank (logits are gathered), per sampled sequence
        self.sample_s = SAMPLER_S_PER_LOGIT[self.stack.sampler] * s.vocab_size
        self.sample_step_s = SAMPLER_STEP_S[self.stack.sampler]
        # causal attention FLOPs per (query token × context token): QK^T and PV, 2 FLOPs per MAC
        self.attn_coeff = 4.0 * self.full_layers * s.num_attention_heads * s.head_dim / self.tp
        kv_heads_per_gpu = max(1.0, s.num_kv_heads / self.tp)
        elem = 1.0 if kv_fp8 else 2.0
        self.kv_bytes_per_token = 2.0 * self.full_layers * kv_heads_per_gpu * s.head_dim * elem
        self.state_bytes_per_seq = float(self.linear_layers * s.hidden_size * LINEAR_STATE_BYTES_PER_HIDDEN) / self.tp
        moe_layers = self.layers if self.expert_active > 0 else 0
        self.overhead_fixed = (STEP_OVERHEAD_S + self.layers * LAYER_OVERHEAD_S
                               + self.linear_layers * LINEAR_LAYER_OVERHEAD_S
                               + self.full_layers * layer_s
                               + moe_layers * MOE_LAYER_OVERHEAD_S)
        self.seq_overhead = SEQ_OVERHEAD_S
        # the engine core's CPU share of a step overlaps the GPU's only with async scheduling, which vLLM 0.24 turns
        # off for n-gram speculative decoding ("Async scheduling not supported with ngram-based ...")
        self.sync = not kn.async_on
        self.eager_launch_s = self.layers * EAGER_LAUNCH_S_PER_LAYER if kn.enforce_eager else 0.0
        if kn.enforce_eager:
            self.overhead_fixed += self.layers * EAGER_UNFUSED_S_PER_LAYER
        # speculative decoding: every decoding sequence verifies its drafts in the step
        self.spec: SpecPlan | None = spec_plan(kn, dummy_weights=(kn.load_format or profile.load_format) == "dummy")
        self.draft_share = 0.0  # share of decode steps on which a sequence carries k drafts
        self.mean_tokens = 1.0  # tokens a decoding sequence gets per step, on average
        self.draft_step_s = 0.0  # the drafter's GPU time per step, fixed part (weights) and per sequence
        self.draft_seq_s = 0.0
        if self.spec is not None:
            sp = self.spec
            self.draft_share = sp.draft_share
            self.mean_tokens = 1.0 + self.draft_share * (sp.mean_length - 1.0)
            self.overhead_fixed += SPEC_STEP_OVERHEAD_S
            if sp.cpu_drafter:
                self.draft_seq_s = NGRAM_S_PER_SEQ
            else:
                layer_bytes = self.dense_read / max(1, self.layers)
                if sp.method == "mtp":
                    drafter_layers = max(1, getattr(s, "mtp_layers", 0) or 1)
                elif sp.method == "draft_model":
                    drafter_layers = max(1, round(DRAFT_MODEL_SHARE * self.layers))
                else:  # EAGLE-style: one decoder layer (EAGLE-3 adds a fusion of three hidden states)
                    drafter_layers = 1
                # per draft token: the drafter's layers and the LM head streamed once, launched as a graph
                per_draft = (drafter_layers * (layer_bytes / hw.hbm_bw + LAYER_OVERHEAD_S)
                             + self.lm_head_bytes / hw.hbm_bw)
                self.draft_step_s = sp.k * per_draft
                self.draft_seq_s = sp.k * (2.0 * self.body_active / max(1, self.layers) * drafter_layers
                                           + self.lm_head_flops * self.tp) / self.tp / self.gemm_flops

    # --- pieces ---------------------------------------------------------------------------------------------
    def weight_bytes(self, tokens: int) -> float:
        if self.expert_read <= 0 or tokens <= 0:
            return self.dense_read + (self.expert_read if tokens > 0 else 0.0)
        touched = 1.0 - (1.0 - self.top_k / self.experts) ** tokens
        return self.dense_read + self.expert_read * touched

    def gemm_time(self, tokens: float, sampled: float) -> float:
        dense = (self.body_active - self.expert_active) / self.tp * 2.0 * tokens
        expert = self.expert_active * 2.0 * tokens / (self.ep if self.ep > 1 else self.tp)
        if self.ep > 1:  # the most loaded GPU sets the pace: (tokens × top_k) / ep assignments on average
            expert *= 1.0 + 1.0 / math.sqrt(max(1.0, tokens * self.top_k / self.ep))
        t = dense / self.gemm_flops + expert / self.moe_gemm_flops
        return t + sampled * self.lm_head_flops / self.gemm_flops

    def allreduce_time(self, tokens: float) -> float:
        if self.tp <= 1 or tokens <= 0:
            return 0.0
        size = tokens * self.hidden * 2.0
        one = ALLREDUCE_LATENCY_S + 2.0 * (self.tp - 1) / self.tp * size / self.hw.nvlink_bw
        if self.ep > 1:  # the MoE layer's all-reduce becomes a dispatch and a combine (all-gather, reduce-scatter)
            return self.layers * (2.0 * one + ALLREDUCE_LATENCY_S)
        return 2.0 * self.layers * one

    # --- a whole step ---------------------------------------------------------------------------------------
    def step_time(self, decode_seqs: int, decode_ctx: int, chunks: list[Chunk] | tuple[Chunk, ...] = ()) -> float:
        """One engine step: ``decode_seqs`` sequences decoding one token over ``decode_ctx`` context tokens in all,
        plus prefill ``chunks``."""
        return self.step(decode_seqs, decode_ctx, chunks)[0]

    def step(self, decode_seqs: int, decode_ctx: int, chunks: list[Chunk] | tuple[Chunk, ...] = (),
             boost: float = 1.0) -> tuple[float, float]:
        """(step time, the part of it spent streaming memory): the second is what the simulated NVML reports as
        memory utilisation. With speculative decoding each decoding sequence runs 1 + k query tokens (its drafts)
        through the target, and the drafter runs before the step. ``boost``: how much faster than sustained the GPU
        computes now (:func:`boost_factor`)."""
        prefill = 0
        attn = 0.0
        kv = float(decode_ctx) * self.kv_bytes_per_token
        q = 1.0 + (self.draft_share * self.spec.k if self.spec is not None and decode_seqs else 0.0)
        sampled = decode_seqs * q
        for c in chunks:
            prefill += c.tokens
            attn += self.attn_coeff * c.tokens * (c.start + c.tokens / 2.0)
            kv += (c.start + c.tokens) * self.kv_bytes_per_token  # read the earlier context, write the new KV
            sampled += 1 if c.samples else 0
        tokens = decode_seqs * q + prefill
        if tokens == 0:
            return 0.0, 0.0
        seqs = decode_seqs + len(chunks)
        attn += self.attn_coeff * decode_ctx * q
        corr = self.correction
        weights = self.weight_bytes(math.ceil(tokens)) / self.hw.hbm_bw * corr.decode
        gemm = self.gemm_time(tokens, sampled) * corr.prefill / boost
        # GEMMs stream their weights while computing: the shorter of the two hides behind the longer, in part
        linear = max(weights, gemm) + GEMM_OVERLAP_REST * min(weights, gemm)
        # attention: decode queries stream KV while prefill queries compute, in the same varlen kernels
        kv_time = kv / self.kv_bw * corr.decode
        attn_time = attn / self.attn_flops_rate * corr.prefill / boost
        state_time = seqs * 2.0 * self.state_bytes_per_seq / self.hw.hbm_bw * corr.decode
        other = max(kv_time, attn_time) + ATTN_OVERLAP_REST * min(kv_time, attn_time) + state_time
        overhead = (self.overhead_fixed + seqs * self.seq_overhead + sampled * self.sample_s
                    + (self.sample_step_s if sampled else 0.0)) * corr.decode
        gpu = linear + other + self.allreduce_time(tokens) * corr.decode
        if self.eager_launch_s > gpu:  # no CUDA graphs: the GPU waits for Python to launch the layers' kernels
            gpu = self.eager_launch_s
        total = overhead + gpu
        host = HOST_STEP_S + HOST_SEQ_S * (decode_seqs + sum(1 for c in chunks if c.samples))
        if self.sync:
            total += host
        elif host > total:
            total = host
        if self.spec is not None and decode_seqs:
            if self.spec.cpu_drafter:
                total += (decode_seqs * self.draft_seq_s + decode_ctx * NGRAM_S_PER_CTX_TOKEN) * corr.decode
            else:
                total += (self.draft_step_s + decode_seqs * self.draft_seq_s) * corr.decode
        return total, min(total, weights + kv_time + state_time)

    # --- KV transfer (P/D) ----------------------------------------------------------------------------------
    def kv_transfer_bytes(self, tokens: int) -> int:
        """Bytes a decode instance pulls for ``tokens`` prompt tokens (all ranks together)."""
        return int(tokens * self.kv_bytes_per_token * self.tp + self.state_bytes_per_seq * self.tp)

    def kv_transfer_time(self, nbytes: int, *, same_gpu: bool = False) -> float:
        bw = self.hw.hbm_bw / 2.0 if same_gpu else self.hw.nvlink_bw * self.tp
        return (NIXL_SETUP_S + nbytes / bw) * self.correction.kv_transfer


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Where one GPU's gpu_memory_utilization budget goes, in GiB (per GPU of a TP group), and the KV capacity."""

    total_gib: float  # torch's view of the GPU
    budget_gib: float
    weights_gib: float
    activation_gib: float
    graphs_gib: float
    non_torch_gib: float
    kv_gib: float
    kv_tokens: int  # tokens, a multiple of the block size (0 if kv_gib <= 0)
    state_tokens_per_seq: int  # KV-token equivalents one sequence's linear-attention state occupies

    @property
    def claim_gib(self) -> float:
        """What nvidia-smi shows for the engine once started."""
        return self.budget_gib + CUDA_CONTEXT_GIB


def memory_plan(profile: ModelProfile, hw: Hardware, *, tp: int, gpu_memory_utilization: float,
                max_num_batched_tokens: int, enforce_eager: bool = False, kv_cache_dtype: str = "auto",
                v1_runner: bool = False) -> MemoryPlan:
    """``kv_cache_dtype`` fp8 (``--kv-cache-dtype``): one byte per KV element, twice the tokens; ``v1_runner``: the
    engine runs vLLM's V1 model runner (n-gram speculative decoding), whose profile peaks higher."""
    cost = ModelCost(profile, hw, tp, knobs=ServeKnobs(kv_cache_dtype=kv_cache_dtype))  # only its byte counts
    total = hw.torch_total_gib
    budget = gpu_memory_utilization * total
    weights = profile.weights_gib / max(1, tp)
    s = profile.shape
    act_width = 2 * s.intermediate_size * (s.experts_per_token if profile.is_moe else 1)
    activation = max_num_batched_tokens * act_width * 2.0 / max(1, tp) / GIB
    if v1_runner:
        activation += V1_RUNNER_EXTRA_GIB * max_num_batched_tokens / 8192 / max(1, tp)
    graphs = 0.0 if enforce_eager else 0.5 + 0.5 * s.layers / 36.0
    kv = budget - weights - activation - graphs - NON_TORCH_GIB
    per_token = cost.kv_bytes_per_token
    tokens = int(kv * GIB / per_token) // BLOCK_SIZE * BLOCK_SIZE if kv > 0 else 0
    state = math.ceil(cost.state_bytes_per_seq / per_token) if cost.state_bytes_per_seq else 0
    return MemoryPlan(total_gib=total, budget_gib=budget, weights_gib=weights, activation_gib=activation,
                      graphs_gib=graphs, non_torch_gib=NON_TORCH_GIB, kv_gib=kv, kv_tokens=tokens,
                      state_tokens_per_seq=state)


def batch_defaults(spec: GpuSpec) -> tuple[int, int]:
    """vLLM's (max_num_batched_tokens, max_num_seqs) defaults for the API server: 8192/1024 on GPUs of ≥70 GiB."""
    if spec.memory_total_mib / 1024 >= 70 and "A100" not in spec.name:
        return 8192, 1024
    return 2048, 256
