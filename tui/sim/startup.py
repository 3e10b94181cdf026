"""A simulated ``vllm serve`` start: vLLM 0.24's start-up lines, in order, from the right processes, paced.

The API process runs this synchronously (single-threaded, so forking the engine processes is safe) before it starts
serving. The pace follows :mod:`tui.sim.timeline`, compressed by ``DISAGG_SIM_STARTUP_S``; while waiting it watches
its children, so an engine killed during start-up is noticed at once. Failures (:mod:`tui.sim.faults`) print their
lines in the process and phase where vLLM prints them and end the start with :class:`StartFailed`, or hang.
"""

from __future__ import annotations

import socket

from tui.sim import faults
from tui.sim.config import VLLM_VERSION
from tui.sim.dphead import HandshakeServer
from tui.sim.logfmt import Proc, banner
from tui.sim.procs import spawn
from tui.sim.startup_ctx import (
    CONTEXT_GIB,
    ROUTES,
    StartContext,
    Started,
    StartFailed,
    bind_http,
)
from tui.sim.startup_engine import EnginePhases
from tui.sim.timeline import architecture


class Startup(StartContext):
    """The API server's side of a simulated start; the engine side is :class:`tui.sim.startup_engine.EnginePhases`."""

    handshake: HandshakeServer | None = None  # the head of DP across hosts: its remote engines' handshake

    # --- the sequence ---------------------------------------------------------------------------------------
    def run(self) -> Started:
        cfg, t, fp = self.cfg, self.times, self.fp
        if fp.hog and not (self.claims.state is not None and self.claims.state.taken_share()):
            # a server started on its own: its hog is its own child (the simulated host's is there before it)
            self.hog = spawn("hog", "python3", "python3", gpus=cfg.gpu_ids[: max(1, cfg.tp * cfg.dp_local)])
            total = cfg.hardware.torch_total_gib
            self.claims.set_memory(self.hog.pid, "python3", self.hog.gpus, total * faults.HOG_SHARE)
        self.pacer.at(t.imports)
        api = self.api
        if cfg.env.disable_logo:
            self.info(api, "api_utils.py:337", f"vLLM server version {VLLM_VERSION}, serving model {cfg.model}")
        else:
            self.info(api, "api_utils.py:339", banner(VLLM_VERSION, cfg.model))
        self.info(api, "api_utils.py:273", f"non-default args: {_args_repr(cfg.non_default)}")
        if self.dp_mode and "api_server_count" not in cfg.non_default:
            self.info(api, "serve.py:119", f"Defaulting api_server_count to data_parallel_size ({cfg.dp}).")
        for name in cfg.env.unknown_env:
            self.log.warning(api, "envs.py:2004", f"Unknown vLLM environment variable detected: {name}")
        if cfg.kv_transfer and cfg.kv_transfer.role == "kv_both" and cfg.kv_transfer.is_nixl:
            self.log.warning(api, "kv_transfer.py:134", "Using kv_role='kv_both' with NixlConnector is deprecated "
                             "and will be removed in a future release. Please set kv_role='kv_producer' for prefill "
                             "instances and kv_role='kv_consumer' for decode instances.")
        if fp.nixl_missing:
            self.log.warning(api, "nixl_utils.py:58", "NIXL is not available")
        try:
            if fp.port_taken:
                raise OSError(98, "Address already in use")
            http_sock = bind_http(cfg)
        except OSError:
            self.pacer.after(0.8)
            self.log.raw(api, faults.port_in_use())
            raise StartFailed(1) from None
        try:
            return self._engine_phases(http_sock)
        except BaseException:
            http_sock.close()
            raise

    def _engine_phases(self, http_sock: socket.socket) -> Started:
        cfg, t, api = self.cfg, self.times, self.api
        self.pacer.after(t.config)
        arch = architecture(cfg.profile)
        self.info(api, "model.py:598", f"Resolved architecture: {arch}")
        self.info(api, "model.py:1725", f"Using max model len {cfg.max_model_len}")
        self.info(api, "scheduler.py:252",
                  f"Chunked prefill is enabled with max_num_batched_tokens={cfg.max_num_batched_tokens}.")
        if cfg.enforce_eager:
            self.log.warning(api, "vllm.py:1135", "Enforce eager set, disabling torch.compile and CUDAGraphs. This "
                             "is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none")
        kn = cfg.knobs
        ngram = kn.cpu_drafter
        if kn.kv_fp8:
            self.info(api, "cache.py:279", "Using fp8 data type to store kv cache. It reduces the GPU memory footprint "
                      "and boosts the performance. Meanwhile, it may cause accuracy drop without a proper scaling "
                      "factor")
        if ngram and kn.async_scheduling is not False:
            self.log.warning(api, "vllm.py:981", "Async scheduling not supported with ngram-based speculative "
                             "decoding and will be disabled.")
        self.info(api, "vllm.py:1006", "Asynchronous scheduling is "
                  + ("enabled." if kn.async_on else "disabled."))
        if ngram:
            self.log.warning(api, "vllm.py:541", "Model Runner V2 does not yet support ngram/ngram_gpu speculative "
                             "decoding; using the V1 model runner instead.")
        if cfg.remote_ranks:
            self._listen_handshake()
        self.spawn_engines()
        if self.dp_mode:
            for i in range(cfg.api_server_count):
                self.api_children.append(spawn("api", f"ApiServer_{i}", f"VLLM::APIServer_{i}", dp_rank=i))
            self.info(api, "utils.py:241", f"Started {cfg.api_server_count} API server processes")
            deadline = self.pacer.now + cfg.env.ready_timeout_s
            self.pacer.alarms.append((deadline, self._ready_timeout))
        self.set_memory(lambda _pid: CONTEXT_GIB)
        self.pacer.after(t.engine_spawn)
        phases = EnginePhases(self, arch)
        phases.run()
        peers = []
        if self.handshake is not None:  # the remote engines: the API server answers once every one has started
            peers = self.handshake.wait(stop=lambda: self.api_failed is not None)
            self.handshake.close()
        if self.api_failed is not None:
            c = self.api_failed
            self.log.error(api, "utils.py:565", f"Exception occurred while running API servers: Process {c.name} "
                                                f"(PID: {c.pid}) died with exit code 1")
            raise StartFailed(1)
        self.pacer.ignore_deaths = False
        started = self._api_ready(http_sock, phases.side_socks)
        started.peers = peers
        return started

    def _listen_handshake(self) -> None:
        """vLLM's head binds its handshake socket before it starts its own engines (``launch_core_engines``)."""
        cfg = self.cfg
        try:
            self.handshake = HandshakeServer(self)
        except OSError:
            self.pacer.after(0.5)
            self.log.raw(self.api, faults.handshake_in_use(cfg.dp_address, cfg.dp_rpc_port))
            raise StartFailed(1) from None

    def _ready_timeout(self) -> None:
        for c in self.api_children:
            self.log.raw(Proc(c.name, c.pid), faults.ready_timeout(self.cfg.env.ready_timeout_s))
            c.extra["exiting"] = True
            c.exit_with(1)
        self.api_failed = self.api_children[0] if self.api_children else None

    def _api_ready(self, http_sock: socket.socket, side_socks: list[socket.socket]) -> Started:
        cfg = self.cfg
        fronts = [Proc(c.name, c.pid) for c in self.api_children] or [self.api]
        self.pacer.after(0.2)
        for p in fronts:
            if self.dp_mode:
                self.info(p, "async_llm.py:251", "AsyncLLM created with api_server_count more than 1; disabling "
                                                 "stats logging to avoid incomplete stats.")
            self.info(p, "api_server.py:577", "Supported tasks: ['generate']")
        self.pacer.after(0.4)
        for p in fronts:
            self.info(p, "api_server.py:581", f"Starting vLLM server on http://{cfg.host_label}:{cfg.port}")
            self.info(p, "launcher.py:37", "Available routes are:")
            for path, methods in ROUTES:
                self.info(p, "launcher.py:46", f"Route: {path}, Methods: {methods}")
        self.pacer.after(0.1)
        return Started(engines=self.engines, api_children=self.api_children, memory=self.memory,
                       kv_tokens=self.memory.kv_tokens, http_sock=http_sock, side_socks=side_socks, api=fronts[0],
                       hog=self.hog, engine_ids=self.engine_ids)

    def cleanup(self) -> None:
        if self.handshake is not None:
            self.handshake.close()
        for c in self.all_children():
            c.stop()
            self.claims.drop(c.pid)
            c.close()


def _args_repr(d: dict[str, object]) -> str:
    parts = []
    for k, v in d.items():
        parts.append(f"{k!r}: {v if k == 'kv_transfer_config' else repr(v)}")
    return "{" + ", ".join(parts) + "}"
