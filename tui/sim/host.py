"""The simulated host: fake NVML over the shared simulated-GPU state, simulated vLLM servers over loopback.

It plugs into the core as a ``tui.core.host.base.Host``. It runs the same plan as the real host: each ``vllm serve``
argv is handed to the simulated vLLM server (``python -m tui.sim.vllm serve ...``), which reads the same flags and
environment a real vLLM would, so a plan that lacks a fix fails in the simulator as it would on the real host.
"""

from __future__ import annotations

import json
import socket
from dataclasses import replace
from typing import Any

from tui.core import paths
from tui.core.errors import InputError
from tui.core.host.base import Command, Host, HostOptions
from tui.core.plan.hostfacts import HostFacts, Toolchain, sim_facts
from tui.core.plan.planner import LaunchPlan, ServerSpec
from tui.sim import fakenvml, faults
from tui.sim.gpustate import SimGpuState

DEFAULT_SIM_GPU = "b200"
DEFAULT_SIM_GPUS = 2
#: the most GPUs a simulated host holds (the largest NVLink domain sold, GB200 NVL72; hosts have 4-16)
MAX_SIM_GPUS = 72
#: default simulated cold start, seconds (a real one takes ~2 min for an 8B model, ~15 for the seed's 27B)
DEFAULT_SIM_STARTUP_S = 4.0
#: where the simulated host's nvcc is (the CUDA toolkit's default place)
SIM_NVCC = "/usr/local/cuda/bin/nvcc"


def host_facts(gpu: str, count: int, injected: tuple[str, ...] = ()) -> HostFacts:
    """The simulated host's facts, as a real host with the injected failures would report them: its preflight and
    its planner see what its servers run into. ``flashinfer-no-nvcc``: no nvcc anywhere (the plan then turns
    FlashInfer's JIT off; the failure shows where a plan keeps it on, e.g. ``--env VLLM_USE_FLASHINFER_SAMPLER=1``);
    ``flashinfer-jit-stall``: nvcc only under /usr/local/cuda, off PATH and without CUDA_HOME (FlashInfer finds it
    and compiles silently for minutes); ``nixl-missing``: no NIXL in vLLM's environment. (``gpu-memory-taken`` is
    in the GPUs' state: the fake NVML reports the other process's memory.)"""
    facts = sim_facts(gpu, count, hostname=f"sim-{socket.gethostname()}",
                      nvcc="flashinfer-no-nvcc" not in injected, nixl="nixl-missing" not in injected)
    if "flashinfer-jit-stall" in injected and "flashinfer-no-nvcc" not in injected:
        facts = replace(facts, toolchain=Toolchain(nvcc_in_default=SIM_NVCC))
    return facts


class SimHost(Host):
    """The simulated host: fake NVML over the shared simulated-GPU state, simulated vLLM servers over loopback."""

    simulated = True

    def __init__(self, options: HostOptions, *, reason: str | None = None) -> None:
        self.options = options
        self.notes = [reason] if reason else []
        self.state = SimGpuState(paths.state_dir())
        # a simulated layout that is up keeps its GPUs (and what another process holds of them); otherwise the
        # options or the defaults (2x B200)
        current = self.state.host() if self.state.claims(foreign=False) else None
        gpu = options.sim_gpu or (current[0].key if current else DEFAULT_SIM_GPU)
        count = options.sim_gpus or (current[1] if current else DEFAULT_SIM_GPUS)
        if not 1 <= count <= MAX_SIM_GPUS:
            raise InputError(f"must be within [1, {MAX_SIM_GPUS}], got {count}", field="--sim-gpus")
        taken = faults.HOG_SHARE if "gpu-memory-taken" in options.sim_faults else (
            self.state.taken_share() if current else 0.0)
        if current is None or (current[0].key, current[1]) != (gpu, count) or self.state.taken_share() != taken:
            self.state.init_host(gpu, count, taken_share=taken)
        self.gpu = gpu
        self.count = count
        self._facts = host_facts(gpu, count, options.sim_faults)

    @property
    def facts(self) -> HostFacts:
        return self._facts

    def sim_startup_s(self) -> float | None:
        s = self.options.sim_startup_s
        return DEFAULT_SIM_STARTUP_S if s is None else s

    def sim_env(self, server_name: str, profile_json: dict[str, Any] | None) -> dict[str, str]:
        o = self.options
        env = {
            "DISAGG_SIM_STATE_DIR": str(paths.state_dir()),
            "DISAGG_SIM_GPU": self.gpu,
            "DISAGG_SIM_GPUS": str(self.count),
            "DISAGG_SIM_SERVER_NAME": server_name,
            "DISAGG_SIM_STARTUP_S": str(self.sim_startup_s()),
            "DISAGG_SIM_CLOCK": str(o.sim_clock or 1.0),
            # the simulated servers' compile caches (FlashInfer JIT, torch.compile): in the state directory, never
            # the operator's ~/.cache
            "FLASHINFER_WORKSPACE_BASE": str(paths.state_dir() / "simhome"),
            "VLLM_CACHE_ROOT": str(paths.state_dir() / "simhome" / ".cache" / "vllm"),
        }
        if o.sim_faults:
            env["DISAGG_SIM_FAULTS"] = ",".join(o.sim_faults)
        if profile_json is not None:
            env["DISAGG_SIM_PROFILE_JSON"] = json.dumps(profile_json)
        return env

    def server_command(self, spec: ServerSpec, plan: LaunchPlan, profile_json: dict[str, Any] | None = None
                       ) -> Command:
        argv = [*paths.python_module_argv("tui.sim.vllm"), *spec.argv[1:]]
        env = paths.child_env(self.sim_env(spec.name, profile_json))
        for name in spec.unset_env:
            env.pop(name, None)
        env.update(spec.env_dict())
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self.options.api_key:
            env["VLLM_API_KEY"] = self.options.api_key  # the environment, not --api-key: vLLM logs its argv
        return Command(argv=argv, env=env)

    def nvml(self) -> Any:
        fakenvml.configure(paths.state_dir())
        fakenvml.nvmlInit()
        return fakenvml
