"""Known vLLM 0.24 failures: when each fires, and the exact lines vLLM prints for it.

Injected ones (``DISAGG_SIM_FAULTS``, a comma list) fire only while the launch lacks the fix the playbook would
apply, so a fixed relaunch really starts:

===================== =========================================================== ==================================
fault                 fires while                                                  fixed by
===================== =========================================================== ==================================
flashinfer-no-nvcc    FlashInfer would JIT: its sampler (default on) or FlashInfer VLLM_USE_FLASHINFER_SAMPLER=0 and,
                      attention (Blackwell's automatic choice)                     on Blackwell, a non-FlashInfer
                                                                                   --attention-backend
flashinfer-jit-stall  the same (the start stalls silently, never exits)            the same
dp-ready-timeout      DP > 1 (the first, cold start takes ≥ 800 s)                 VLLM_ENGINE_READY_TIMEOUT_S above
                                                                                   the start's duration (1800)
moe-dp-crash          a MoE model with DP > 1                                      --moe-backend triton
kv-too-small          the KV pool is half what the profile's max_model_len needs   a lower --max-model-len or a
                      at its gpu_memory_utilization                                higher --gpu-memory-utilization
gpu-memory-taken      another process holds 40 % of each GPU                       --gpu-memory-utilization below
                                                                                   the free share
port-taken            --port below 9000                                            a port of 9000 or above
nixl-missing          a NixlConnector kv-transfer-config                           none (install nixl)
ssm-layout            a hybrid model behind NIXL without the DS layout             VLLM_SSM_CONV_STATE_LAYOUT=DS
triton-jit            always (a first-batch stall, not a failure)                  none needed
kv-slow-path          a NixlConnector decode server (KV read over TCP loopback at  none (a GPU-to-GPU path)
                      ~0.4 GB/s, as UCX fell back on the real H200)
flashinfer-jit        the FlashInfer sampler is on and its JIT cache is empty (a   VLLM_USE_FLASHINFER_SAMPLER=0, or
                      silent compile: ninja and nvcc children, a growing cache)    a warm cache (the second start)
===================== =========================================================== ==================================

Some fire without injection too, exactly where real vLLM fails: a hybrid model behind NIXL without the DS layout, an
FP8 MoE with DP, a DP start longer than the ready timeout, a KV pool too small for max_model_len, a GPU without the
free memory asked for, an HTTP port held by a non-vLLM listener.
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.core.models import ModelProfile
from tui.sim.config import ServeConfig
from tui.sim.perfmodel import FIRST_BATCH_JIT_S

INJECTABLE = ("flashinfer-no-nvcc", "flashinfer-jit-stall", "dp-ready-timeout", "moe-dp-crash", "kv-too-small",
              "gpu-memory-taken", "port-taken", "nixl-missing", "ssm-layout", "triton-jit", "kv-slow-path",
              "flashinfer-jit")
#: kv-slow-path: what UCX's TCP-loopback fallback moved on the real H200 (bytes/s; fixtures vllm-0.24.0-h200-1p1d)
SLOW_KV_BANDWIDTH = 0.4e9
PORT_FIX_THRESHOLD = 9000
HOG_SHARE = 0.40  # gpu-memory-taken: the share of each GPU another process holds
DP_COLD_START_S = 800.0  # dp-ready-timeout: the engines' cold start (torch.compile, CUDA graphs) at least this long
#: triton-jit: the first batch's Triton compile, as the real H200 run showed (perfmodel.FIRST_BATCH_JIT_S holds it)
JIT_STALL_S = FIRST_BATCH_JIT_S["hopper"]
SITE = "/usr/local/lib/python3.12/dist-packages"


@dataclass(frozen=True)
class FaultPlan:
    """Which failure (if any) this launch runs into, decided before it starts."""

    flashinfer_fail: bool = False
    flashinfer_stall: bool = False
    cold_dp_start: bool = False
    moe_dp_crash: bool = False
    kv_too_small: bool = False
    hog: bool = False
    port_taken: bool = False
    nixl_missing: bool = False
    ssm_layout: bool = False
    triton_jit: bool = False
    kv_slow_path: bool = False
    flashinfer_jit: bool = False  # a FlashInfer JIT compile may run (the sampler is on); it runs if the cache is cold


def moe_dp_fails(profile: ModelProfile, dp: int, moe_backend: str = "auto") -> bool:
    """vLLM 0.24 cannot start an FP8 MoE model with data parallelism on its CUTLASS MoE path (the seed's gemma DP=2:
    the warm-up assertion); ``--moe-backend triton`` is the untested way out."""
    return (profile.is_moe and dp > 1 and profile.quantization == "fp8"
            and moe_backend.lower() in ("auto", "cutlass"))


def plan(cfg: ServeConfig) -> FaultPlan:
    f = cfg.faults
    flashinfer = cfg.env.flashinfer_sampler or cfg.uses_flashinfer_attention
    nixl = cfg.kv_transfer is not None and cfg.kv_transfer.is_nixl
    hybrid_nixl = nixl and cfg.profile.is_hybrid and (cfg.env.ssm_layout or "SD").upper() != "DS"
    moe_dp = cfg.profile.is_moe and cfg.dp > 1 and cfg.moe_backend != "triton"
    natural_moe = moe_dp_fails(cfg.profile, cfg.dp, cfg.moe_backend)
    return FaultPlan(
        flashinfer_fail="flashinfer-no-nvcc" in f and flashinfer,
        flashinfer_stall="flashinfer-jit-stall" in f and flashinfer and "flashinfer-no-nvcc" not in f,
        cold_dp_start="dp-ready-timeout" in f and cfg.dp > 1,
        moe_dp_crash=natural_moe or ("moe-dp-crash" in f and moe_dp),
        kv_too_small="kv-too-small" in f,
        hog="gpu-memory-taken" in f,
        port_taken="port-taken" in f and cfg.port < PORT_FIX_THRESHOLD,
        nixl_missing="nixl-missing" in f and nixl,
        ssm_layout=hybrid_nixl,
        triton_jit="triton-jit" in f,
        kv_slow_path="kv-slow-path" in f and nixl,
        flashinfer_jit="flashinfer-jit" in f and cfg.env.flashinfer_sampler and "flashinfer-no-nvcc" not in f,
    )


def kv_penalty_gib(cfg: ServeConfig) -> float:
    """kv-too-small: memory taken off the KV pool so that, at the profile's own gpu_memory_utilization, the pool is
    half of what one request of the profile's max_model_len needs (a constant of the profile, not of the launch)."""
    prof = cfg.profile
    mem = cfg.memory(prof.gpu_memory_utilization)
    per_token = mem_per_token(cfg)
    need = prof.max_model_len * per_token / 2**30
    return max(0.0, mem.kv_gib - 0.5 * need)


def mem_per_token(cfg: ServeConfig) -> float:
    from tui.sim.perfmodel import ModelCost

    return ModelCost(cfg.profile, cfg.hardware, cfg.tp).kv_bytes_per_token


# --- message texts ------------------------------------------------------------------------------------------


def engine_traceback(frames: list[tuple[str, int, str, str]], exc: str) -> str:
    """``EngineCore failed to start.`` and its traceback (logged by core.py as one multi-line ERROR record)."""
    lines = ["EngineCore failed to start.", "Traceback (most recent call last):",
             f'  File "{SITE}/vllm/v1/engine/core.py", line 1200, in run_engine_core',
             "    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)",
             f'  File "{SITE}/vllm/v1/engine/core.py", line 966, in __init__', "    super().__init__("]
    for path, line, func, code in frames:
        lines += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    lines.append(exc)
    return "\n".join(lines)


#: how every traceback raised in ``vllm serve``'s main process begins (python -m vllm.entrypoints.cli.main)
_CLI_TRACEBACK_HEAD = (
    "Traceback (most recent call last):",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    '  File "<frozen runpy>", line 88, in _run_code',
    f'  File "{SITE}/vllm/entrypoints/cli/main.py", line 101, in <module>',
    "    main()",
)


def api_init_failed(failed: str) -> str:
    """The front end's traceback when the engines did not come up (printed raw on stderr)."""
    where = "v1/engine/utils.py"
    return "\n".join([
        *_CLI_TRACEBACK_HEAD,
        f'  File "{SITE}/vllm/entrypoints/cli/serve.py", line 148, in cmd',
        "    uvloop.run(run_server(args))",
        f'  File "{SITE}/vllm/v1/engine/core_client.py", line 573, in __init__',
        "    with launch_core_engines(",
        f'  File "{SITE}/vllm/{where}", line 1213, in launch_core_engines',
        "    wait_for_engine_startup(",
        f'  File "{SITE}/vllm/{where}", line 1272, in wait_for_engine_startup',
        "    raise RuntimeError(",
        f"RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {failed}",
    ])


def flashinfer_nvcc(attention: bool) -> str:
    if attention:
        frames = [(f"{SITE}/vllm/v1/worker/gpu_worker.py", 654, "compile_or_warm_up_model", "kernel_warmup(self)"),
                  (f"{SITE}/vllm/model_executor/warmup/kernel_warmup.py", 104, "kernel_warmup",
                   "worker.model_runner._dummy_run(")]
    else:
        frames = [(f"{SITE}/vllm/v1/worker/gpu_worker.py", 470, "determine_available_memory",
                   "self.model_runner.profile_run()"),
                  (f"{SITE}/vllm/v1/worker/gpu_model_runner.py", 5512, "_dummy_sampler_run",
                   "sampler_output = self.sampler(logits=logits, sampling_metadata=dummy_metadata)"),
                  (f"{SITE}/vllm/v1/sample/ops/topk_topp_sampler.py", 130, "forward_cuda",
                   "return flashinfer_sample(logits.contiguous(), k, p, generators), None")]
    frames += [(f"{SITE}/flashinfer/jit/core.py", 316, "build_and_load", "self.build(verbose, need_lock=False)"),
               (f"{SITE}/flashinfer/jit/cpp_ext.py", 96, "get_cuda_path",
                "raise RuntimeError(")]
    return engine_traceback(frames, "RuntimeError: Could not find nvcc and default cuda_home='/usr/local/cuda' "
                                    "doesn't exist")


def moe_assertion() -> str:
    frames = [(f"{SITE}/vllm/v1/worker/gpu_worker.py", 470, "determine_available_memory",
               "self.model_runner.profile_run()"),
              (f"{SITE}/vllm/model_executor/layers/fused_moe/layer.py", 1811, "forward_impl",
               "final_hidden_states = self.quant_method.apply("),
              (f"{SITE}/vllm/model_executor/layers/fused_moe/experts/cutlass_moe.py", 214, "run_cutlass_moe_fp8",
               'assert w1.size(2) * 2 == hidden_size, "Hidden size mismatch w1"')]
    return engine_traceback(frames, "AssertionError: Hidden size mismatch w1")


def kv_too_small(max_len: int, need_gib: float, avail_gib: float, est_len: int) -> str:
    frames = [(f"{SITE}/vllm/v1/engine/core.py", 133, "__init__",
               "kv_cache_config = self._initialize_kv_caches(vllm_config)"),
              (f"{SITE}/vllm/v1/core/kv_cache_utils.py", 760, "check_enough_kv_cache_memory", "raise ValueError(")]
    msg = (f"ValueError: To serve at least one request with the model's max seq len ({max_len}), "
           f"({need_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
           f"({avail_gib:.2f} GiB). Based on the available memory, the estimated maximum model length is {est_len}. "
           "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
           "decreasing `max_model_len` when initializing the engine. See "
           "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    return engine_traceback(frames, msg)


def no_kv_memory() -> str:
    frames = [(f"{SITE}/vllm/v1/core/kv_cache_utils.py", 740, "check_enough_kv_cache_memory", "raise ValueError(")]
    return engine_traceback(frames, "ValueError: No available memory for the cache blocks. Try increasing "
                                    "`gpu_memory_utilization` when initializing the engine (this flag also controls "
                                    "CPU memory reservation on the CPU backend, despite its name). See "
                                    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
                                    "details.")


def free_memory(free_gib: float, total_gib: float, gmu: float) -> str:
    frames = [(f"{SITE}/vllm/v1/worker/gpu_worker.py", 262, "init_device",
               "self.requested_memory = request_memory(init_snapshot, self.cache_config)"),
              (f"{SITE}/vllm/v1/worker/utils.py", 415, "request_memory", "raise ValueError(")]
    return engine_traceback(frames, f"ValueError: Free memory on device cuda:0 ({free_gib:.2f}/{total_gib:.1f} GiB) "
                                    f"on startup is less than desired GPU memory utilization ({gmu}, "
                                    f"{gmu * total_gib:.2f} GiB). Decrease GPU memory utilization or reduce GPU "
                                    "memory used by other processes.")


def nixl_missing() -> str:
    frames = [(f"{SITE}/vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py", 118, "__init__",
               "self.connector_worker = NixlConnectorWorker(vllm_config, self.engine_id)"),
              (f"{SITE}/vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py", 242, "__init__",
               'raise RuntimeError("NIXL is not available")')]
    return engine_traceback(frames, "RuntimeError: NIXL is not available")


def ssm_layout() -> str:
    frames = [(f"{SITE}/vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py", 295,
               "register_kv_caches", 'assert self._conv_state_layout_ds, ("3-read Mamba conv transfer requires DS "')]
    return engine_traceback(frames, "AssertionError: 3-read Mamba conv transfer requires DS conv state layout. Set "
                                    "VLLM_SSM_CONV_STATE_LAYOUT=DS")


def ready_timeout(seconds: float) -> str:
    return "\n".join([
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/v1/engine/core_client.py", line 963, in __init__',
        "    super().__init__(",
        f'  File "{SITE}/vllm/v1/engine/core_client.py", line 621, in __init__',
        "    raise TimeoutError(",
        "TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow weight "
        f"loading for large models. Waited {int(seconds)}s (configured by VLLM_ENGINE_READY_TIMEOUT_S). To increase "
        "the timeout, set the environment variable: VLLM_ENGINE_READY_TIMEOUT_S=<seconds>",
    ])


def port_in_use() -> str:
    return "\n".join([
        *_CLI_TRACEBACK_HEAD,
        f'  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 662, in run_server',
        "    listen_address, sock = setup_server(args)",
        f'  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 541, in setup_server',
        "    sock = create_server_socket(sock_addr)",
        f'  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 490, in create_server_socket',
        "    sock.bind(addr)",
        "OSError: [Errno 98] Address already in use",
    ])


def side_channel_in_use(host: str, port: int) -> str:
    return "\n".join([
        "Exception in thread nixl_handshake_listener:",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/threading.py", line 1075, in _bootstrap_inner',
        "    self.run()",
        f'  File "{SITE}/vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py", line 612, in '
        "_nixl_handshake_listener",
        "    with zmq_ctx(zmq.ROUTER, path) as sock:",
        f'  File "{SITE}/zmq/sugar/socket.py", line 311, in bind',
        "    super().bind(addr)",
        f"zmq.error.ZMQError: Address already in use (addr='tcp://{host}:{port}')",
    ])


def handshake_in_use(host: str, port: int) -> str:
    """The head's DP handshake port (``--data-parallel-rpc-port``) held by another process."""
    return "\n".join([
        *_CLI_TRACEBACK_HEAD,
        f'  File "{SITE}/vllm/v1/engine/utils.py", line 1139, in launch_core_engines',
        "    with zmq_socket_ctx(handshake_address, zmq.ROUTER, bind=True) as handshake_socket:",
        f'  File "{SITE}/zmq/sugar/socket.py", line 311, in bind',
        "    super().bind(addr)",
        f"zmq.error.ZMQError: Address already in use (addr='tcp://{host}:{port}')",
    ])


def head_lost(uri: str, name: str) -> str:
    """A headless host's engine when the head's link drops (logged by core.py as one multi-line ERROR record)."""
    return "\n".join([
        "EngineCore encountered a fatal error.",
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/v1/engine/core.py", line 1224, in run_engine_core',
        "    engine_core.run_busy_loop()",
        f'  File "{SITE}/vllm/v1/engine/core.py", line 1262, in run_busy_loop',
        "    self._process_input_queue()",
        f'  File "{SITE}/vllm/v1/engine/core.py", line 1301, in process_input_sockets',
        "    raise RuntimeError(",
        f"RuntimeError: {name}: lost the connection to the front-end process at {uri}.",
    ])


def no_front_end() -> str:
    """A headless engine that never heard from the head (``core.py:1137``)."""
    return "\n".join([
        "EngineCore failed to start.",
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/v1/engine/core.py", line 1200, in run_engine_core',
        "    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)",
        f'  File "{SITE}/vllm/v1/engine/core.py", line 1137, in _perform_handshake',
        "    raise RuntimeError(",
        "RuntimeError: Did not receive response from front-end process within 5 minutes",
    ])
