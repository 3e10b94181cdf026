"""A Host is where servers run and GPUs are read: the real machine, or the simulated one.

Chosen once at start: ``--sim``, or automatically when no NVIDIA driver answers (always labelled SIMULATED). With
NVML but no ``vllm`` the host stays real, and launching says in one line how to point the app at vLLM.

The simulated host runs the same plan: each ``vllm serve`` argv is handed to the simulated vLLM server
(``python -m tui.sim.vllm serve ...``), which reads the same flags and environment a real vLLM would, so a plan
that lacks a fix fails in the simulator as it would on the real host.
"""

from __future__ import annotations

import json
import os
import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from tui.core import paths
from tui.core.errors import AppError
from tui.core.hostfacts import HostFacts, detect_toolchain, detect_vllm, sim_facts
from tui.core.planner import LaunchPlan, ProxySpec, ServerSpec

DEFAULT_SIM_GPU = "b200"
DEFAULT_SIM_GPUS = 2
#: default simulated cold start, seconds (a real one takes ~2 min for an 8B model, ~15 for the seed's 27B)
DEFAULT_SIM_STARTUP_S = 4.0


@dataclass(frozen=True, slots=True)
class HostOptions:
    sim: bool = False
    sim_gpu: str | None = None
    sim_gpus: int | None = None
    sim_faults: tuple[str, ...] = ()
    sim_startup_s: float | None = None
    sim_clock: float | None = None
    vllm: str | None = None


@dataclass(frozen=True, slots=True)
class Command:
    argv: list[str]
    env: dict[str, str]  # the complete environment of the child


class Host(ABC):
    simulated: bool
    notes: list[str]

    @property
    @abstractmethod
    def facts(self) -> HostFacts: ...

    @abstractmethod
    def server_command(self, spec: ServerSpec, plan: LaunchPlan, profile_json: dict[str, Any] | None = None
                       ) -> Command: ...

    def proxy_command(self, proxy: ProxySpec) -> Command:
        return Command(argv=[*paths.python_module_argv("tui.core.proxy"), *proxy.args()], env=paths.child_env())

    @abstractmethod
    def nvml(self) -> Any:
        """A pynvml-compatible module, initialised (real NVML, or the fake one of the simulated host)."""

    def sim_startup_s(self) -> float | None:
        """How long a simulated cold start takes (0 = real time); None on a real host."""
        return None

    def close(self) -> None:
        return None


class LocalHost(Host):
    """The real machine: real NVML, the real ``vllm`` executable."""

    simulated = False

    def __init__(self, nvml_module: Any, vllm: str | None = None) -> None:
        self._nvml = nvml_module
        self._vllm_exe = vllm
        self._facts: HostFacts | None = None
        self.notes: list[str] = []

    @property
    def facts(self) -> HostFacts:
        if self._facts is None:
            from tui.core.nvml import driver_versions, link_matrix, list_gpus

            gpus = list_gpus(self._nvml)
            driver, cuda = driver_versions(self._nvml)
            try:
                matrix = link_matrix(self._nvml, len(gpus))
            except Exception:  # noqa: BLE001 - topology is a nicety
                matrix = ()
            self._facts = HostFacts(simulated=False, gpus=gpus, toolchain=detect_toolchain(),
                                    vllm=detect_vllm(self._vllm_exe), driver=driver, cuda_driver=cuda,
                                    hostname=socket.gethostname(), nvlink=matrix)
        return self._facts

    def server_command(self, spec: ServerSpec, plan: LaunchPlan, profile_json: dict[str, Any] | None = None
                       ) -> Command:
        info = self.facts.vllm
        if info is None or not info.found:
            raise AppError("vllm not found" + (f": {info.error}" if info and info.error else ""),
                           hint="install it (pip install 'disagg-tui[vllm]') or point at it with --vllm "
                                "/path/to/venv/bin/vllm")
        argv = list(spec.argv)
        if argv[0] == plan.vllm_executable and info.resolved:
            argv[0] = info.resolved
        env = dict(os.environ)
        env.update(spec.env_dict())
        env.setdefault("PYTHONUNBUFFERED", "1")
        return Command(argv=argv, env=env)

    def nvml(self) -> Any:
        return self._nvml


class SimHost(Host):
    """The simulated host: fake NVML over the shared simulated-GPU state, simulated vLLM servers over loopback."""

    simulated = True

    def __init__(self, options: HostOptions, *, reason: str | None = None) -> None:
        from tui.sim.gpustate import SimGpuState

        self.options = options
        self.notes = [reason] if reason else []
        self.state = SimGpuState(paths.state_dir())
        # a simulated layout that is up keeps its GPUs; otherwise the options or the defaults (2x B200)
        current = self.state.host() if self.state.claims() else None
        gpu = options.sim_gpu or (current[0].key if current else DEFAULT_SIM_GPU)
        count = options.sim_gpus or (current[1] if current else DEFAULT_SIM_GPUS)
        if current is None or (current[0].key, current[1]) != (gpu, count):
            self.state.init_host(gpu, count)
        self.gpu = gpu
        self.count = count
        self._facts = sim_facts(gpu, count, hostname=f"sim-{socket.gethostname()}")

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
        env.update(spec.env_dict())
        env.setdefault("PYTHONUNBUFFERED", "1")
        return Command(argv=argv, env=env)

    def nvml(self) -> Any:
        import importlib

        fake = importlib.import_module("tui.sim.fakenvml")
        fake.configure(paths.state_dir())
        fake.nvmlInit()
        return fake


def select_host(options: HostOptions) -> Host:
    """The real host when an NVIDIA driver answers (and --sim is not given), else the simulated one."""
    if options.sim:
        return SimHost(options)
    from tui.core.nvml import NvmlUnavailable, open_nvml

    try:
        module = open_nvml()
    except NvmlUnavailable as exc:
        return SimHost(options, reason=f"SIMULATED host: {exc}")
    return LocalHost(module, options.vllm)
