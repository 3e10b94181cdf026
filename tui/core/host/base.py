"""A Host is where servers run and GPUs are read: what every part of the core takes, real or simulated.

The real machine is ``tui.core.host.local.LocalHost``; the simulated one (``tui.sim.host.SimHost``) plugs in from
``tui.sim``. Which one a front end gets is decided once, in ``tui.hosts.select_host``, never inside the core.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from tui.core import paths
from tui.core.plan.hostfacts import HostFacts
from tui.core.plan.planner import LaunchPlan, ProxySpec, ServerSpec


@dataclass(frozen=True, slots=True)
class HostOptions:
    sim: bool = False
    sim_gpu: str | None = None
    sim_gpus: int | None = None
    sim_faults: tuple[str, ...] = ()
    sim_startup_s: float | None = None
    sim_clock: float | None = None
    vllm: str | None = None
    #: vLLM's API key: handed to every server as VLLM_API_KEY at spawn, never part of a plan (so never shown,
    #: recorded or stored), and sent by the load generator as a bearer token
    api_key: str | None = None


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
