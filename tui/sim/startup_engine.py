"""The engine side of a simulated start: from ``Initializing a V1 LLM engine`` to ``init engine ... took``.

Lines come from the engine process (``EngineCore``, ``EngineCore_DP<n>``) or, with TP > 1, from each worker
(``Worker_TP<n>``), as in vLLM 0.24; the GPU memory claims grow as the model loads and the KV cache is allocated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from tui.sim import faults, jitsim
from tui.sim.config import VLLM_VERSION
from tui.sim.logfmt import Proc, tqdm_segment
from tui.sim.perfmodel import CUDA_CONTEXT_GIB, GIB
from tui.sim.startup_ctx import ignore_termination
from tui.sim.timeline import V2_RUNNER_ARCHS

if TYPE_CHECKING:
    from tui.sim.startup_ctx import Engine, StartContext

GRAPH_SIZES = 51


class EnginePhases:
    def __init__(self, s: StartContext, arch: str) -> None:
        self.s = s
        self.arch = arch
        self.cfg = s.cfg
        kn = s.cfg.knobs
        self.ngram = kn.cpu_drafter
        self.v2 = arch in V2_RUNNER_ARCHS and not self.ngram  # "Model Runner V2 does not yet support ngram ..."
        self.side_socks: list[socket.socket] = []
        self.compile_s = s.times.compile_total
        self.t_engine = s.pacer.now
        #: GPU -> GiB other processes held when this engine took its memory baseline (``_free_memory_check``)
        self.baseline: dict[int, float] = {}
        self.interference = 0.0  # GiB of other processes' memory the profiling counted as this engine's

    def info(self, proc: Proc, where: str, msg: str) -> None:
        self.s.log.info(proc, where, msg)

    def run(self) -> None:
        s, cfg, t = self.s, self.cfg, self.s.times
        nixl = cfg.kv_transfer is not None and cfg.kv_transfer.is_nixl
        for e in s.engines:
            ep = s.engine_proc(e)
            self.info(ep, "core.py:114", f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: "
                      + self._config_text(e.rank))
            if nixl and cfg.kv_transfer is not None:
                self.info(ep, "factory.py:62", "Creating v1 connector with name: NixlConnector and engine_id: "
                          + s.engine_ids[e.rank])
        s.pacer.after(t.dist)
        world = cfg.tp
        for e, wp, holder, r in s.each_worker():
            port = 30000 + int(hashlib.sha256(str(e.proc.pid).encode()).hexdigest()[:4], 16) % 30000
            self.info(wp, "parallel_state.py:1588", f"world_size={world} rank={r} local_rank={r} "
                      f"distributed_init_method=tcp://127.0.0.1:{port} backend=nccl")
            self.info(wp, "parallel_state.py:1923", f"rank {r} in world size {world} is assigned as DP rank {e.rank}, "
                      f"PP rank 0, PCP rank 0, TP rank {r}, EP rank N/A, EPLB rank N/A")
            self._free_memory_check(e, wp, holder.pid, holder.gpus)
            if self.v2:
                self.info(wp, "gpu_worker.py:331", "Using V2 Model Runner")
            if nixl:
                self._nixl_worker_init(e, wp)
            if cfg.profile.is_hybrid and (cfg.env.ssm_layout or "").upper() == "DS":
                self.info(wp, "mamba_utils.py:57", "VLLM_SSM_CONV_STATE_LAYOUT env detected. Setting SSM conv state "
                          "layout to DS.")
        s.pacer.after(t.load_start)
        for _e, wp, _h, _r in s.each_worker():
            if self.v2:
                self.info(wp, "model_runner.py:281", "Loading model from scratch...")
            else:
                self.info(wp, "gpu_model_runner.py:5160", f"Starting to load model {cfg.model}...")
        s.pacer.after(t.attn)
        for _e, wp, _h, _r in s.each_worker():
            self._attention_line(wp)
        s.pacer.after(t.load)
        per_gpu = cfg.profile.weights_gib / cfg.tp
        for _e, wp, _h, _r in s.each_worker():
            head = f"Model loading took {per_gpu:.2f} GiB"
            secs = t.attn + t.load
            if self.v2:
                self.info(wp, "model_runner.py:302", f"{head} and {secs:.6f} seconds")
            else:
                self.info(wp, "gpu_model_runner.py:5255", f"{head} memory and {secs:.6f} seconds")
            if cfg.env.flashinfer_sampler:
                self.info(wp, "topk_topp_sampler.py:55", "Using FlashInfer for top-p & top-k sampling.")
            else:
                self.info(wp, "topk_topp_sampler.py:39",
                          "FlashInfer top-p/top-k sampling disabled via VLLM_USE_FLASHINFER_SAMPLER=0.")
        s.set_memory(lambda _pid: 0.6 + per_gpu)
        self._compile()
        self.interference = self._profiled_others()  # the profiling run starts: what others took counts as ours
        s.pacer.after(t.profile)
        self._profile_failures()
        for _e, wp, _h, _r in s.each_worker():
            self.info(wp, "monitor.py:81", f"Initial profiling/warmup run took {t.profile:.2f} s")
        s.pacer.after(t.kv)
        self._kv_cache(nixl)
        self._graphs()
        self._flashinfer_jit()
        s.pacer.after(t.warmup)
        for _e, wp, _h, r in s.each_worker():
            if r == 0:
                self.info(wp, "jit_monitor.py:60", "Kernel JIT monitor activated — Triton JIT compilations during "
                          "inference will be logged as warnings.")
        s.pacer.after(t.init_done)
        took = s.pacer.now - self.t_engine
        for e in s.engines:
            if self.compile_s > 0:
                self.info(s.engine_proc(e), "core.py:337", "init engine (profile, create kv cache, warmup model) took "
                          f"{took:.2f} s (compilation: {self.compile_s:.2f} s)")
            else:
                self.info(s.engine_proc(e), "core.py:344",
                          f"init engine (profile, create kv cache, warmup model) took {took:.2f} s")

    # --- pieces ---------------------------------------------------------------------------------------------
    def _config_text(self, rank: int) -> str:
        cfg = self.cfg
        dtype = "torch.bfloat16"
        quant = {"fp8": "fp8", "nvfp4": "modelopt_fp4"}.get(cfg.profile.quantization)
        kv = cfg.profile.kv_cache_dtype if cfg.profile.kv_cache_dtype != "bf16" else "auto"
        kv = cfg.knobs.kv_cache_dtype if cfg.knobs.kv_cache_dtype != "auto" else kv
        kn = cfg.knobs
        spec = (f"SpeculativeConfig(method={kn.spec_method!r}, model=None, num_spec_tokens={kn.spec_tokens})"
                if kn.speculative else "None")
        return (f"model={cfg.model!r}, speculative_config={spec}, tokenizer={cfg.model!r}, skip_tokenizer_init=False, "
                f"tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code="
                f"{cfg.trust_remote_code}, dtype={dtype}, max_seq_len={cfg.max_model_len}, download_dir=None, "
                f"load_format={cfg.load_format}, tensor_parallel_size={cfg.tp}, pipeline_parallel_size=1, "
                f"data_parallel_size={cfg.dp}, decode_context_parallel_size=1, dcp_comm_backend=ag_rs, "
                f"disable_custom_all_reduce=False, quantization={quant}, enforce_eager={cfg.enforce_eager}, "
                f"kv_cache_dtype={kv}, device_config=cuda, seed=0, served_model_name={cfg.served_name}, "
                f"enable_prefix_caching={cfg.enable_prefix_caching}, enable_chunked_prefill=True, "
                f"pooler_config=None, compilation_config={{'mode': <CompilationMode."
                f"{'NONE: 0' if cfg.enforce_eager else 'VLLM_COMPILE: 3'}>, 'max_cudagraph_capture_size': 512}}, "
                f"kernel_config=KernelConfig(moe_backend={cfg.moe_backend!r}, linear_backend='auto')")

    def _attention_line(self, wp: Proc) -> None:
        cfg = self.cfg
        if cfg.attention_backend:
            self.info(wp, "cuda.py:420", f"Using AttentionBackendEnum.{cfg.attention_backend.upper()} backend.")
        elif cfg.gpu.compute_capability >= 10.0:
            self.info(wp, "cuda.py:480", "Using FLASHINFER attention backend out of potential backends: "
                      "['FLASHINFER', 'FLASH_ATTN', 'TRITON_ATTN', 'FLEX_ATTENTION'].")
        else:
            self.info(wp, "cuda.py:480", "Using FLASH_ATTN attention backend out of potential backends: "
                      "['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].")
            self.info(wp, "flash_attn.py:670", "Using FlashAttention version 3")

    def _free_memory_check(self, e: Engine, wp: Proc, pid: int, gpus: tuple[int, ...]) -> None:
        """vLLM's ``request_memory``: the GPU must have gpu_memory_utilization × total free when the worker starts
        (other servers' engines and the memory-hog fault count; this process's own CUDA context takes ~0.55 GiB)."""
        s, cfg = self.s, self.cfg
        total = cfg.hardware.torch_total_gib
        mine = {c.pid for c in s.all_children() if c.role != "hog"}
        for g in gpus:
            others = s.claims.others_on(g, mine)
            self.baseline[g] = min(self.baseline.get(g, others), others)
            free = total - others - 0.55
            if free < cfg.gpu_memory_utilization * total:
                s.fail_engine(e, wp, faults.free_memory(free, total, cfg.gpu_memory_utilization))

    def _profiled_others(self) -> float:
        """What vLLM's memory profiling wrongly counts as this engine's own: memory other processes took on its
        GPUs between its baseline and the end of its profiling run (``non_torch`` grows by it, the KV cache shrinks
        by it). Two servers starting at once on one GPU each see the other's weights and activations appear: the
        real H200 gave 21.06 / 17.75 GiB instead of 39.45 GiB each (fixtures ``vllm-0.24.0-h200-1p1d``)."""
        s, mem = self.s, self.s.memory
        mine = {c.pid for c in s.all_children() if c.role != "hog"}
        grew = [s.claims.others_on(g, mine) - base for g, base in self.baseline.items()]
        # what a neighbour takes before its own KV cache (context, weights, activations): its cache comes after
        # its profiling, which in a start at once ends about when this one's does
        cap = CUDA_CONTEXT_GIB + mem.weights_gib + mem.activation_gib
        return min(cap, max([0.0, *grew]))

    def _nixl_worker_init(self, e: Engine, wp: Proc) -> None:
        s, fp = self.s, self.s.fp
        if fp.nixl_missing:
            self.s.log.warning(wp, "nixl_utils.py:58", "NIXL is not available")
            self.s.log.error(wp, "base_worker.py:241", "NIXL is not available")
            s.fail_engine(e, wp, faults.nixl_missing())
        self.info(wp, "nixl_utils.py:32", "Setting UCX_RCACHE_MAX_UNRELEASED to '1024' to avoid a rare memory leak "
                  "in UCX when using NIXL.")
        self.info(wp, "nixl_utils.py:55", "NIXL is available")
        self.info(wp, "base_worker.py:248", "Initializing NIXL wrapper")
        self.info(wp, "base_worker.py:252", f"Initializing NIXL worker {s.engine_ids[e.rank]}")
        self.info(wp, "base_worker.py:265", "NixlConnector setting KV cache layout to HND for better xfer "
                  "performance.")

    def _compile(self) -> None:
        s, cfg, t = self.s, self.cfg, self.s.times
        if cfg.enforce_eager:
            return
        key = hashlib.sha256(f"{cfg.model}|{sorted(cfg.vllm_env.items())}".encode()).hexdigest()
        root = os.environ.get("VLLM_CACHE_ROOT")
        if root and (Path(root) / "torch_compile_cache" / key[:10] / "rank_0_0" / "backbone" / "cache.bin").is_file():
            self._load_compiled(key)  # an earlier start of this configuration left its compiled graphs
            return
        s.pacer.after(t.dynamo)
        for e, wp, _h, r in s.each_worker():
            self.info(wp, "backends.py:1089", f"Using cache directory: /root/.cache/vllm/torch_compile_cache/"
                      f"{key[:10]}/rank_{r}_{e.rank}/backbone for vLLM's torch.compile")
            self.info(wp, "backends.py:1148", f"Dynamo bytecode transform time: {t.dynamo * 0.957:.2f} s")
        s.pacer.after(t.cache_graph)
        rng = f"(1, {cfg.max_num_batched_tokens})"
        for _e, wp, _h, _r in s.each_worker():
            self.info(wp, "backends.py:378", f"Cache the graph of compile range {rng} for later use")
        s.pacer.after(t.compile)
        for _e, wp, _h, _r in s.each_worker():
            self.info(wp, "backends.py:393", f"Compiling a graph for compile range {rng} takes "
                      f"{t.cache_graph + t.compile:.2f} s")
        s.pacer.after(t.save + t.cold_extra)
        root = os.environ.get("VLLM_CACHE_ROOT")
        if root:  # what the compile leaves behind: the next start finds a warm cache
            with contextlib.suppress(OSError):
                out = Path(root) / "torch_compile_cache" / key[:10] / "rank_0_0" / "backbone"
                out.mkdir(parents=True, exist_ok=True)
                (out / "cache.bin").write_bytes(key.encode())
        for e, wp, _h, r in s.each_worker():
            self.info(wp, "decorators.py:708", f"saved AOT compiled function to /root/.cache/vllm/torch_compile_cache/"
                      f"torch_aot_compile/{key}/rank_{r}_{e.rank}/model")
            self.info(wp, "monitor.py:53", f"torch.compile took {self.compile_s:.2f} s in total")

    def _load_compiled(self, key: str) -> None:
        """A warm torch.compile cache: vLLM 0.24 loads the AOT-compiled function and the graphs instead of compiling
        (VLLM-0.24.md §5), in a fraction of the time."""
        s, cfg, t = self.s, self.cfg, self.s.times
        self.compile_s = round(t.dynamo * 0.3, 2)
        s.pacer.after(self.compile_s)
        rng = f"(1, {cfg.max_num_batched_tokens})"
        for e, wp, _h, r in s.each_worker():
            self.info(wp, "decorators.py:311", "Directly load AOT compilation from path /root/.cache/vllm/"
                      f"torch_compile_cache/torch_aot_compile/{key}/rank_{r}_{e.rank}/model")
            self.info(wp, "backends.py:292", f"Directly load the compiled graph(s) for compile range {rng} from the "
                      f"cache, took {self.compile_s * 0.6:.3f} s")
            self.info(wp, "monitor.py:53", f"torch.compile took {self.compile_s:.2f} s in total")

    def _flashinfer_jit(self) -> None:
        """The sampler's first use JIT-compiles FlashInfer's sampling kernels when its cache is cold: ninja and
        three nvcc jobs under the engine, a growing cache, and not a log line (as on the real H200)."""
        s = self.s
        arch = f"{round(self.cfg.gpu.compute_capability * 10)}a"
        if not s.fp.flashinfer_jit or jitsim.is_warm(os.environ, arch):
            return
        pid = jitsim.start(os.environ, jitsim.JIT_S * s.scale, arch)
        s.pacer.after(jitsim.JIT_S)
        jitsim.wait(pid, 5.0 + jitsim.JIT_S * s.scale)

    def _profile_failures(self) -> None:
        s, fp, cfg = self.s, self.s.fp, self.cfg
        if fp.flashinfer_fail and cfg.env.flashinfer_sampler:
            e = s.engines[0]
            s.fail_engine(e, s.engine_proc(e), faults.flashinfer_nvcc(attention=False))
        if fp.moe_dp_crash:
            e = s.engines[0]
            s.fail_engine(e, s.engine_proc(e), faults.moe_assertion())

    def _kv_cache(self, nixl: bool) -> None:
        s, cfg, fp = self.s, self.cfg, self.s.fp
        mem = s.memory
        kv_gib = mem.kv_gib - (faults.kv_penalty_gib(cfg) if fp.kv_too_small else 0.0) - self.interference
        per_token = s.cost.kv_bytes_per_token
        for e, wp, _h, _r in s.each_worker():
            self.info(wp, "gpu_worker.py:508", f"Available KV cache memory: {kv_gib:.2f} GiB")
            if kv_gib <= 0:
                s.fail_engine(e, s.engine_proc(e), faults.no_kv_memory())
        need = cfg.max_model_len * per_token / GIB
        if need > kv_gib:
            est = int(kv_gib * GIB / per_token) // 16 * 16
            e = s.engines[0]
            s.fail_engine(e, s.engine_proc(e), faults.kv_too_small(cfg.max_model_len, need, kv_gib, est))
        tokens = int(kv_gib * GIB / per_token) // 16 * 16
        s.memory = dataclasses.replace(mem, kv_gib=kv_gib, kv_tokens=tokens)
        for e in s.engines:
            ep = s.engine_proc(e)
            self.info(ep, "kv_cache_utils.py:2146", f"GPU KV cache size: {tokens:,} tokens")
            self.info(ep, "kv_cache_utils.py:2147", f"Maximum concurrency for {cfg.max_model_len:,} tokens per "
                      f"request: {tokens / cfg.max_model_len:.2f}x")
        s.set_memory(lambda _pid: mem.budget_gib - mem.graphs_gib + CUDA_CONTEXT_GIB)
        if nixl:
            self._nixl_register()
        if s.fp.flashinfer_fail and cfg.uses_flashinfer_attention:
            e = s.engines[0]
            self.info(s.engine_proc(e), "kernel_warmup.py:101", "Warming up FlashInfer attention.")
            s.pacer.after(0.5)
            s.fail_engine(e, s.engine_proc(e), faults.flashinfer_nvcc(attention=True))
        if cfg.uses_flashinfer_attention:
            for _e, wp, _h, _r in s.each_worker():
                self.info(wp, "kernel_warmup.py:101", "Warming up FlashInfer attention.")

    def _nixl_register(self) -> None:
        s, cfg = self.s, self.cfg
        backend = (cfg.attention_backend or ("FLASHINFER" if cfg.gpu.compute_capability >= 10 else "FLASH_ATTN"))
        for e, wp, _h, _r in s.each_worker():
            self.info(wp, "base_worker.py:470", f"Detected attention backend(s) ['{backend.upper()}']")
            self.info(wp, "base_worker.py:471", "Detected kv cache layout HND")
            self.info(wp, "base_worker.py:520", "Registering KV_Caches. use_mla: False, kv_buffer_device: cuda, "
                      "use_host_buffer: False")
            if s.fp.ssm_layout:
                s.fail_engine(e, s.engine_proc(e), faults.ssm_layout())
        for e in s.engines:
            host = cfg.env.side_channel_host
            port = cfg.env.side_channel_port + e.rank
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            # ZMQ's TCP listener sets SO_REUSEADDR: connections of an earlier layout left in TIME-WAIT on this port
            # neither block this bind nor (left by this listener) the next layout's preflight
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1" if host == "localhost" else host, port))
            except OSError:
                sock.close()
                proc = s.engine_proc(e) if not e.workers else Proc(e.workers[0].name, e.workers[0].pid)
                s.log.raw(proc, faults.side_channel_in_use(host, port))
                s.pacer.at(float("inf"))  # the handshake listener is gone: the engine waits for it forever
            self.side_socks.append(sock)

    def _graphs(self) -> None:
        s, cfg, t = self.s, self.cfg, self.s.times
        mem = s.memory
        if not cfg.enforce_eager:
            s.pacer.after(t.graph_pre)
            lead = s.each_worker()[0][1]
            for desc, dur in (("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)", t.graph_piecewise),
                              ("Capturing CUDA graphs (decode, FULL)", t.graph_full)):
                self._bar(lead, desc, dur)
            secs = t.graph_piecewise + t.graph_full + 1
            for _e, wp, _h, _r in s.each_worker():
                self.info(wp, "model_runner.py:726", f"Graph capturing finished in {secs:.0f} secs, "
                          f"took {mem.graphs_gib:.2f} GiB")
        s.set_memory(lambda _pid: mem.claim_gib)
        if s.fp.flashinfer_stall:
            ignore_termination()
            s.pacer.ignore_deaths = True
            s.pacer.at(float("inf"))

    def _bar(self, proc: Proc, desc: str, duration: float) -> None:
        s = self.s
        start = s.pacer.now
        s.log.bar_segment(proc, tqdm_segment(desc, 0, GRAPH_SIZES, 0.0))
        for n in range(3, GRAPH_SIZES + 1, 3):
            s.pacer.at(start + duration * n / GRAPH_SIZES)
            s.log.bar_segment(None, "\r" + tqdm_segment(desc, n, GRAPH_SIZES, max(1e-3, duration * n / GRAPH_SIZES)))
        s.log.bar_segment(None, "\r" + tqdm_segment(desc, GRAPH_SIZES, GRAPH_SIZES, max(duration, 1e-3)) + "\n")
