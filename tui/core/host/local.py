"""The real machine: real NVML, the real ``vllm`` executable.

With NVML but no ``vllm`` the host stays real, and launching says in one line how to point the app at vLLM.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from tui.core.errors import AppError
from tui.core.host.base import Command, Host
from tui.core.plan.hostfacts import HostFacts, detect_toolchain, detect_vllm
from tui.core.plan.planner import LaunchPlan, ServerSpec


class LocalHost(Host):
    """The real machine: real NVML, the real ``vllm`` executable."""

    simulated = False

    def __init__(self, nvml_module: Any, vllm: str | None = None, *, api_key: str | None = None) -> None:
        self._nvml = nvml_module
        self._vllm_exe = vllm
        self._api_key = api_key
        self._facts: HostFacts | None = None
        self.notes: list[str] = []

    @property
    def facts(self) -> HostFacts:
        if self._facts is None:
            from tui.core.host.nvml import driver_versions, link_matrix, list_gpus

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
        for name in spec.unset_env:  # a fix's unset of an inherited variable (Kubernetes' VLLM_PORT=tcp://...)
            env.pop(name, None)
        env.update(spec.env_dict())
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self._api_key:
            env["VLLM_API_KEY"] = self._api_key  # the environment, not --api-key: vLLM logs its argv
        return Command(argv=argv, env=env)

    def nvml(self) -> Any:
        return self._nvml
