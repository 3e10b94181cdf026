"""What one simulated ``vllm serve`` is: typed flags, the environment vLLM reads, the model and the GPUs.

The model's facts come from ``DISAGG_SIM_PROFILE_JSON`` (a ``ModelProfile.to_dict()``), else a Qwen3-8B-shaped bf16
default. The GPU type from ``DISAGG_SIM_GPU`` (else the simulated host's ``host.json``, else B200), the GPUs from
``CUDA_VISIBLE_DEVICES`` as on a real host.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.core.models import ModelProfile, parse_model_profile
from tui.core.plan.argtext import JSON_FLAGS
from tui.core.plan.gpuspecs import PRESETS, GpuSpec
from tui.sim.gpustate import simgpu_dir
from tui.sim.knobs_model import ATTENTION_BACKEND_NAMES, ServeKnobs, knobs_from_flags
from tui.sim.perfmodel import Hardware, MemoryPlan, Stack, batch_defaults, memory_plan

VLLM_VERSION = "0.24.0"
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
KV_ROLES = ("kv_producer", "kv_both", "kv_consumer")
KV_TRANSFER_KEYS = ("kv_connector", "engine_id", "kv_buffer_device", "kv_buffer_size", "kv_role", "kv_rank",
                    "kv_parallel_size", "kv_ip", "kv_port", "kv_connector_extra_config", "kv_connector_module_path",
                    "enable_permute_local_kv", "kv_load_failure_policy")
#: ``VLLM_*`` variables vLLM 0.24 defines (those the app or the fixtures use); any other one is warned about
_KNOWN_VLLM_ENV = """
VLLM_ENGINE_READY_TIMEOUT_S VLLM_ENGINE_ITERATION_TIMEOUT_S VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS
VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS VLLM_RPC_BASE_PATH VLLM_HTTP_TIMEOUT_KEEP_ALIVE VLLM_KEEP_ALIVE_ON_ENGINE_DEATH
VLLM_USE_FLASHINFER_SAMPLER VLLM_NIXL_SIDE_CHANNEL_HOST VLLM_NIXL_SIDE_CHANNEL_PORT VLLM_SSM_CONV_STATE_LAYOUT
VLLM_KV_CACHE_LAYOUT VLLM_LOGGING_LEVEL VLLM_CONFIGURE_LOGGING VLLM_LOGGING_PREFIX VLLM_LOGGING_STREAM
VLLM_LOGGING_CONFIG_PATH VLLM_LOGGING_COLOR VLLM_LOG_STATS_INTERVAL VLLM_DISABLE_LOG_LOGO VLLM_CACHE_ROOT
VLLM_DISABLE_COMPILE_CACHE VLLM_USE_AOT_COMPILE VLLM_USE_STANDALONE_COMPILE VLLM_COMPILE_CACHE_SAVE_FORMAT
VLLM_USE_V2_MODEL_RUNNER VLLM_API_KEY VLLM_SERVER_DEV_MODE VLLM_ALLOW_RUNTIME_LORA_UPDATING VLLM_HOST_IP VLLM_PORT
VLLM_LOOPBACK_IP VLLM_WORKER_MULTIPROC_METHOD VLLM_DISABLE_REQUEST_ID_RANDOMIZATION
VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS VLLM_NO_USAGE_STATS VLLM_DO_NOT_TRACK VLLM_USAGE_STATS_SERVER
VLLM_ALLOW_LONG_MAX_MODEL_LEN VLLM_TARGET_DEVICE VLLM_MAIN_CUDA_VERSION VLLM_USE_PRECOMPILED VLLM_CONFIG_ROOT
VLLM_ASSETS_CACHE VLLM_IMAGE_FETCH_TIMEOUT VLLM_VIDEO_FETCH_TIMEOUT VLLM_AUDIO_FETCH_TIMEOUT
VLLM_MEDIA_LOADING_THREAD_COUNT
VLLM_MAX_AUDIO_CLIP_FILESIZE_MB VLLM_XLA_CACHE_PATH VLLM_FUSED_MOE_CHUNK_SIZE VLLM_USE_RAY_SPMD_WORKER
VLLM_USE_RAY_COMPILED_DAG VLLM_TRACE_FUNCTION VLLM_USE_TRITON_FLASH_ATTN VLLM_FLASH_ATTN_VERSION VLLM_USE_DEEP_GEMM
VLLM_USE_FLASHINFER_MOE_FP8 VLLM_USE_FLASHINFER_MOE_FP4 VLLM_USE_FLASHINFER_MOE_FP16 VLLM_FLASHINFER_MOE_BACKEND
VLLM_MOE_DP_CHUNK_SIZE VLLM_ENABLE_V1_MULTIPROCESSING VLLM_ALL2ALL_BACKEND VLLM_TORCH_PROFILER_DIR VLLM_SKIP_P2P_CHECK
VLLM_ALLOW_INSECURE_SERIALIZATION VLLM_NCCL_SO_PATH VLLM_PP_LAYER_PARTITION VLLM_CPU_KVCACHE_SPACE
VLLM_DP_RANK VLLM_DP_RANK_LOCAL VLLM_DP_SIZE VLLM_DP_MASTER_IP VLLM_DP_MASTER_PORT VLLM_MARLIN_USE_ATOMIC_ADD
VLLM_MXFP4_USE_MARLIN VLLM_TUNED_CONFIG_FOLDER VLLM_DEBUG_LOG_API_SERVER_RESPONSE VLLM_COMPUTE_NANS_IN_LOGITS
VLLM_SLEEP_WHEN_IDLE VLLM_GPU_MEMORY_UTILIZATION VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE
"""
KNOWN_VLLM_ENV = frozenset(_KNOWN_VLLM_ENV.split())
REMOVED_VLLM_ENV = ("VLLM_ATTENTION_BACKEND",)

#: the fallback model: Qwen3-8B-shaped, bf16, random weights (what the real H200 captures served)
DEFAULT_PROFILE: dict[str, Any] = {
    "id": "dummy-qwen3-8b", "title": "Qwen3-8B-shaped default", "model": "/tmp/model",
    "architecture": {"family": "dense", "attention": "full", "params_b": 8.19, "layers": 36, "hidden_size": 4096,
                     "num_attention_heads": 32, "num_kv_heads": 8, "head_dim": 128, "intermediate_size": 12288,
                     "vocab_size": 151936},
    "quantization": "bf16", "kv_cache_dtype": "auto", "weights_gib": 15.27,
    "vllm": {"gpu_memory_utilization": 0.85, "max_model_len": 16384, "load_format": "dummy"},
}


DP_RPC_PORT = 29550  # ParallelConfig.data_parallel_rpc_port: the head's handshake port when engines are remote


class ConfigError(Exception):
    """A configuration vLLM rejects before starting (argparse-style message, exit 2)."""


@dataclass(frozen=True)
class KvTransfer:
    connector: str
    role: str
    engine_id: str
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def is_nixl(self) -> bool:
        return self.connector in ("NixlConnector", "NixlPullConnector", "NixlPushConnector")

    @property
    def lease_s(self) -> float:
        return float(self.extra.get("kv_lease_duration", 30))

    def describe(self) -> str:
        return (f"KVTransferConfig(kv_connector={self.connector!r}, engine_id={self.engine_id!r}, "
                f"kv_buffer_device='cuda', kv_buffer_size=1000000000.0, kv_role={self.role!r}, kv_rank=None, "
                f"kv_parallel_size=1, kv_ip='127.0.0.1', kv_port=14579, kv_connector_extra_config={self.extra!r}, "
                f"kv_connector_module_path=None, enable_permute_local_kv=False, kv_load_failure_policy="
                f"{self.raw.get('kv_load_failure_policy', 'fail')!r})")


@dataclass(frozen=True)
class SimEnv:
    flashinfer_sampler: bool
    ready_timeout_s: float
    side_channel_host: str
    side_channel_port: int
    ssm_layout: str | None
    stats_interval_s: float
    keep_alive_on_death: bool
    unknown_env: tuple[str, ...]
    disable_logo: bool


@dataclass(frozen=True)
class ServeConfig:
    model: str
    served_name: str
    served_names: tuple[str, ...]
    api_keys: tuple[str, ...]
    host: str | None
    port: int
    tp: int
    dp: int
    api_server_count: int
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    enforce_eager: bool
    attention_backend: str | None
    moe_backend: str
    load_format: str
    trust_remote_code: bool
    enable_prefix_caching: bool
    disable_log_stats: bool
    access_log: bool
    uvicorn_log_level: str
    server_load_tracking: bool
    kv_transfer: KvTransfer | None
    non_default: dict[str, Any]
    env: SimEnv
    profile: ModelProfile
    gpu: GpuSpec
    gpu_ids: tuple[int, ...]  # simulated GPUs this server may use (CUDA_VISIBLE_DEVICES)
    gpu_count: int
    faults: frozenset[str]
    startup_s: float  # 0 = real time
    clock: float
    state_dir: Path | None
    server_name: str
    vllm_env: dict[str, str]
    knobs: ServeKnobs = field(default_factory=ServeKnobs)  # what the performance model runs with
    # --- data parallel across hosts (vLLM's multi-node DP): this process's ranks and the head's handshake address
    headless: bool = False  # engines only, no API server (``--headless``)
    dp_local: int = 1  # ranks this process runs (``--data-parallel-size-local``, default: all of them)
    dp_start_rank: int = 0  # the first one's global rank (``--data-parallel-start-rank``)
    dp_address: str = "127.0.0.1"  # the head's address (``--data-parallel-address``)
    dp_rpc_port: int = DP_RPC_PORT  # the head's handshake port (``--data-parallel-rpc-port``)

    @property
    def local_ranks(self) -> range:
        return range(self.dp_start_rank, self.dp_start_rank + self.dp_local)

    @property
    def remote_ranks(self) -> range:
        """The ranks the head waits for over TCP (none unless this is the head of DP across hosts)."""
        return range(0) if self.headless or self.dp_start_rank else range(self.dp_local, self.dp)

    @property
    def handshake_uri(self) -> str:
        host = f"[{self.dp_address}]" if ":" in self.dp_address else self.dp_address
        return f"tcp://{host}:{self.dp_rpc_port}"

    @property
    def hardware(self) -> Hardware:
        return Hardware.for_gpu(self.gpu)

    def memory(self, gpu_memory_utilization: float | None = None) -> MemoryPlan:
        return memory_plan(self.profile, self.hardware, tp=self.tp,
                           gpu_memory_utilization=gpu_memory_utilization or self.gpu_memory_utilization,
                           max_num_batched_tokens=self.max_num_batched_tokens, enforce_eager=self.enforce_eager,
                           kv_cache_dtype=self.knobs.kv_cache_dtype, v1_runner=self.knobs.cpu_drafter)

    @property
    def stack(self) -> Stack:
        """The kernels this engine runs with: the attention backend and sampler from the flags and env, FlashInfer's
        kernels out when the simulated host has no nvcc (the flashinfer faults)."""
        nvcc = not ({"flashinfer-no-nvcc", "flashinfer-jit-stall"} & self.faults)
        return Stack.select(self.gpu, attention_backend=self.knobs.attention_backend,
                            flashinfer_sampler=self.env.flashinfer_sampler, nvcc=nvcc)

    @property
    def host_label(self) -> str:
        return self.host or "0.0.0.0"

    @property
    def uses_flashinfer_attention(self) -> bool:
        if self.attention_backend is not None:
            return self.attention_backend.upper() in ("FLASHINFER", "FLASHINFER_MLA")
        return self.gpu.compute_capability >= 10.0

    def engine_gpus(self, dp_rank: int) -> tuple[int, ...]:
        """The GPUs of global rank ``dp_rank`` among this host's (each local rank T of them, in order)."""
        start = (dp_rank - self.dp_start_rank) * self.tp
        return self.gpu_ids[start:start + self.tp]


def _int(ns: Any, dest: str, default: int) -> int:
    v = getattr(ns, dest, None)
    return default if v is None else int(v)


def parse_max_model_len(text: str) -> int:
    t = text.strip().lower()
    if t.endswith("k"):
        return int(float(t[:-1]) * 1000)
    if t.endswith("m"):
        return int(float(t[:-1]) * 1_000_000)
    return int(t)


def _check_json_flags(ns: Any) -> None:
    """vLLM parses every JSON-valued flag at start-up and exits 2 when one does not parse (a value whose double
    quotes a shell dropped: ``{method:ngram}``)."""
    for flag in sorted(JSON_FLAGS):
        text = getattr(ns, flag[2:].replace("-", "_"), None)
        if not isinstance(text, str):
            continue
        try:
            json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"argument {flag}: Invalid JSON: {exc}") from None


def _kv_transfer(text: str | None, dp: int) -> KvTransfer | None:
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"argument --kv-transfer-config: Invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError("argument --kv-transfer-config: Input should be a valid dictionary")
    for key in data:
        if key not in KV_TRANSFER_KEYS:
            raise ConfigError(f"argument --kv-transfer-config: 1 validation error for KVTransferConfig\n{key}\n"
                              f"  Unexpected keyword argument [type=unexpected_keyword_argument, "
                              f"input_value={data[key]!r}, input_type={type(data[key]).__name__}]")
    role = data.get("kv_role")
    connector = data.get("kv_connector")
    if role is not None and role not in KV_ROLES:
        raise ConfigError(f"argument --kv-transfer-config: 1 validation error for KVTransferConfig\nkv_role\n"
                          f"  Input should be 'kv_producer', 'kv_both' or 'kv_consumer' [type=literal_error, "
                          f"input_value={role!r}, input_type=str]")
    if connector and role is None:
        raise ConfigError("Please specify kv_role when kv_connector is set, supported roles are "
                          "('kv_producer', 'kv_consumer', 'kv_both')")
    if not connector:
        return None
    return KvTransfer(connector=str(connector), role=str(role), engine_id=str(data.get("engine_id") or uuid.uuid4()),
                      extra=dict(data.get("kv_connector_extra_config") or {}), raw=data)


def _non_default(ns: Any, order: list[str], typed: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if ns.model_tag:
        out["model_tag"] = ns.model_tag
    skip = {"port": 8000, "tensor_parallel_size": 1, "data_parallel_size": 1, "load_format": "auto",
            "gpu_memory_utilization": 0.92}
    # the help lists flags sorted within each config group, vLLM defines ``model`` first in ModelConfig's group
    dests = [d for d in order if d != "model"]
    first_model_flag = dests.index("allow_deprecated_quantization") if "allow_deprecated_quantization" in dests \
        else len(dests)
    dests.insert(first_model_flag, "model")
    for dest in dests:
        value = typed.get(dest, getattr(ns, dest, None))
        if dest == "model" and value is None and ns.model_tag:
            value = ns.model_tag
        if value is None or skip.get(dest, object()) == value:
            continue
        out[dest] = value
    return out


def _dp_layout(ns: Any, dp: int, is_moe: bool) -> tuple[bool, int, int, int]:
    """(headless, local ranks, start rank, API server count) as vLLM 0.24 resolves them, refusing what it refuses
    (``entrypoints/cli/serve.py``, ``engine/arg_utils.py``, ``config/parallel.py``; each a one-line ValueError)."""
    headless = bool(getattr(ns, "headless", None))
    asc_arg = getattr(ns, "api_server_count", None)
    start_arg = getattr(ns, "data_parallel_start_rank", None)
    hybrid = bool(getattr(ns, "data_parallel_hybrid_lb", None))
    if headless:
        if asc_arg is not None and int(asc_arg) > 0:
            raise ValueError(f"--api-server-count={int(asc_arg)} cannot be used with --headless (no API servers are "
                             "started in headless mode).")
        if hybrid:
            raise ValueError("data_parallel_hybrid_lb is not applicable in headless mode")
    local_arg = getattr(ns, "data_parallel_size_local", None)
    local = dp if local_arg is None else int(local_arg)
    start = int(start_arg) if start_arg is not None else 0
    if local > dp:
        raise ValueError(f"data_parallel_size_local ({local}) must be <= data_parallel_size ({dp})")
    if (dp > 1 or local == 0) and not 0 <= start < dp:
        raise ValueError(f"data_parallel_rank ({start}) must be in the range [0, {dp})")
    if headless:
        if local <= 0:
            raise ValueError("data_parallel_size_local must be > 0 in headless mode")
        return True, local, start, 0
    if start and local < dp:
        # --data-parallel-start-rank without --headless: hybrid load balancing, with one local rank external
        if local == 1 and not is_moe:
            raise ValueError("Non-MoE models do not support external data parallel mode. For external load "
                             "balancing, launch independent vLLM instances without --data-parallel-* arguments.")
        raise ValueError("the simulated vLLM runs data parallel across hosts with internal load balancing only: "
                         "an API server on the head (start rank 0), --headless engines elsewhere")
    if local <= 0:
        raise ValueError("the simulated vLLM needs data_parallel_size_local > 0 on the API server's host")
    asc = int(asc_arg) if asc_arg is not None else (local if start_arg is not None else dp)
    return False, local, start, asc


def load_profile(env: dict[str, str]) -> ModelProfile:
    raw = env.get("DISAGG_SIM_PROFILE_JSON")
    data = json.loads(raw) if raw else DEFAULT_PROFILE
    return parse_model_profile(data, "DISAGG_SIM_PROFILE_JSON" if raw else "default profile")


def _gpu(env: dict[str, str], state_dir: Path | None) -> tuple[GpuSpec, int]:
    key = env.get("DISAGG_SIM_GPU")
    count = env.get("DISAGG_SIM_GPUS")
    if (not key or not count) and state_dir is not None:
        try:
            host = json.loads((simgpu_dir(state_dir) / "host.json").read_text(encoding="utf-8"))
            key = key or str(host.get("gpu"))
            count = count or str(host.get("count"))
        except (OSError, ValueError):
            pass
    spec = PRESETS.get((key or "b200").lower(), PRESETS["b200"])
    return spec, int(count or 2)


def _visible(env: dict[str, str], count: int) -> tuple[int, ...]:
    text = env.get("CUDA_VISIBLE_DEVICES")
    if text is None:
        return tuple(range(count))
    out = []
    for part in text.split(","):
        part = part.strip()
        if part.isdigit() and int(part) < count:
            out.append(int(part))
        elif part:
            break  # CUDA stops at the first invalid entry
    return tuple(out)


def knob_argv(ns: Any, model: str) -> list[str]:
    """The parsed command line's knob flags as an argv :func:`knobs_from_flags` reads (a ``--config`` file's and
    the dotted ``-sc.method`` forms already merged into the namespace), so that the simulated server and a
    prediction of its run read the knobs the same way."""
    out = ["vllm", "serve", model]
    for dest, flag in (("attention_backend", "--attention-backend"), ("attention_config", "--attention-config"),
                       ("max_num_batched_tokens", "--max-num-batched-tokens"), ("max_num_seqs", "--max-num-seqs"),
                       ("kv_cache_dtype", "--kv-cache-dtype"), ("speculative_config", "--speculative-config"),
                       ("spec_method", "--spec-method"), ("spec_tokens", "--spec-tokens"),
                       ("spec_model", "--spec-model"), ("compilation_config", "--compilation-config"),
                       ("optimization_level", "--optimization-level"), ("load_format", "--load-format")):
        v = getattr(ns, dest, None)
        if v is not None and v != "":
            out += [flag, str(v)]
    for dest, flag in (("enable_expert_parallel", "--enable-expert-parallel"),
                       ("async_scheduling", "--async-scheduling"), ("enable_prefix_caching", "--enable-prefix-caching"),
                       ("enforce_eager", "--enforce-eager")):
        v = getattr(ns, dest, None)
        if v is True:
            out.append(flag)
        elif v is False:
            out.append("--no-" + flag[2:])
    return out


def _check_attention_backend(knobs: ServeKnobs) -> None:
    """vLLM resolves ``--attention-backend`` (or ``attention_config.backend``) through ``AttentionBackendEnum`` at
    config time: an unknown name is a ValueError before anything starts."""
    name = knobs.attention_backend
    if name and name not in ATTENTION_BACKEND_NAMES:
        raise ValueError(f"Unknown attention backend: '{name}'. Valid options are: "
                         f"{', '.join(ATTENTION_BACKEND_NAMES)}")


def build(ns: Any, order: list[str], env: dict[str, str]) -> ServeConfig:
    profile = load_profile(env)
    state = env.get("DISAGG_SIM_STATE_DIR")
    state_dir = Path(state) if state else None
    spec, count = _gpu(env, state_dir)
    mbt_default, mns_default = batch_defaults(spec)
    tp = _int(ns, "tensor_parallel_size", 1)
    dp = _int(ns, "data_parallel_size", 1)
    model = ns.model_tag or ns.model or DEFAULT_MODEL
    served = ns.served_model_name[0] if ns.served_model_name else model
    gmu = float(ns.gpu_memory_utilization) if ns.gpu_memory_utilization is not None else 0.92
    mml = parse_max_model_len(ns.max_model_len) if ns.max_model_len else profile.max_model_len
    _check_json_flags(ns)
    kv = _kv_transfer(ns.kv_transfer_config, dp)
    typed: dict[str, Any] = {"port": _int(ns, "port", 8000), "tensor_parallel_size": tp,
                             "data_parallel_size": dp, "gpu_memory_utilization": gmu,
                             "max_model_len": int(mml) if ns.max_model_len else None,
                             "model": model if ns.model or ns.model_tag else None}
    for dest in ("max_num_seqs", "max_num_batched_tokens", "api_server_count", "seed", "block_size"):
        if getattr(ns, dest, None) is not None:
            typed[dest] = int(getattr(ns, dest))
    if kv is not None:
        typed["kv_transfer_config"] = kv
    non_default = _non_default(ns, order, typed)
    if kv is not None:
        non_default["kv_transfer_config"] = kv.describe()
    headless, dp_local, dp_start, asc = _dp_layout(ns, dp, profile.is_moe)
    rpc = getattr(ns, "data_parallel_rpc_port", None)
    unknown = tuple(sorted(k for k in env if k.startswith("VLLM_") and (k not in KNOWN_VLLM_ENV
                                                                         or k in REMOVED_VLLM_ENV)))
    sim_env = SimEnv(
        flashinfer_sampler=env.get("VLLM_USE_FLASHINFER_SAMPLER", "1").strip().lower() not in ("0", "false"),
        ready_timeout_s=float(env.get("VLLM_ENGINE_READY_TIMEOUT_S", "600") or 600),
        side_channel_host=env.get("VLLM_NIXL_SIDE_CHANNEL_HOST", "localhost"),
        side_channel_port=int(env.get("VLLM_NIXL_SIDE_CHANNEL_PORT", "5600") or 5600),
        ssm_layout=(env.get("VLLM_SSM_CONV_STATE_LAYOUT") or None),
        stats_interval_s=float(env.get("VLLM_LOG_STATS_INTERVAL", "10") or 10),
        keep_alive_on_death=env.get("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "0") not in ("0", ""),
        unknown_env=unknown,
        disable_logo=env.get("VLLM_DISABLE_LOG_LOGO", "0") not in ("0", ""),
    )
    faults = frozenset(f.strip() for f in env.get("DISAGG_SIM_FAULTS", "").split(",") if f.strip())
    knobs = knobs_from_flags(knob_argv(ns, model), env)
    _check_attention_backend(knobs)
    return ServeConfig(
        model=model, served_name=served, served_names=tuple(ns.served_model_name or (model,)),
        api_keys=tuple(ns.api_key or ([env["VLLM_API_KEY"]] if env.get("VLLM_API_KEY") else [])), host=ns.host,
        port=typed["port"], tp=tp, dp=dp, api_server_count=asc,
        gpu_memory_utilization=gmu, max_model_len=int(mml),
        max_num_seqs=_int(ns, "max_num_seqs", mns_default),
        max_num_batched_tokens=_int(ns, "max_num_batched_tokens", mbt_default),
        enforce_eager=bool(ns.enforce_eager), attention_backend=ns.attention_backend,
        moe_backend=(ns.moe_backend or "auto").lower(), load_format=ns.load_format or "auto",
        trust_remote_code=bool(ns.trust_remote_code),
        enable_prefix_caching=ns.enable_prefix_caching is not False, disable_log_stats=bool(ns.disable_log_stats),
        access_log=not ns.disable_uvicorn_access_log, uvicorn_log_level=(ns.uvicorn_log_level or "info"),
        server_load_tracking=bool(ns.enable_server_load_tracking), kv_transfer=kv, non_default=non_default,
        env=sim_env, profile=profile, gpu=spec, gpu_ids=_visible(env, count), gpu_count=count, faults=faults,
        startup_s=float(env.get("DISAGG_SIM_STARTUP_S", "4") or 0), clock=float(env.get("DISAGG_SIM_CLOCK", "1") or 1),
        state_dir=state_dir, server_name=env.get("DISAGG_SIM_SERVER_NAME", "server"),
        vllm_env={k: v for k, v in env.items() if k.startswith("VLLM_")}, knobs=knobs,
        headless=headless, dp_local=dp_local, dp_start_rank=dp_start,
        dp_address=getattr(ns, "data_parallel_address", None) or getattr(ns, "master_addr", None) or "127.0.0.1",
        dp_rpc_port=int(rpc) if rpc is not None else DP_RPC_PORT,
    )
