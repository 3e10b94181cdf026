"""The composition root: which Host a front end (the CLI, the console) gets. The core never chooses.

The real host when an NVIDIA driver answers (and ``--sim`` is not given), else the simulated one, always labelled
SIMULATED. This is the one module outside ``tui.sim`` that may import both the core and the simulator.
"""

from __future__ import annotations

from tui.core.host.base import Host, HostOptions
from tui.core.host.local import LocalHost
from tui.core.host.nvml import NvmlUnavailable, open_nvml
from tui.sim import predict as predictor
from tui.sim import runpredict
from tui.sim.faults import INJECTABLE
from tui.sim.host import MAX_SIM_GPUS as SIM_MAX_GPUS
from tui.sim.host import SimHost

#: the simulator as a predictor, for the front ends (the core never imports it): the same performance model and
#: schedulers the simulated server paces its tokens with, evaluated in virtual time (``predict``, ``results``)
__all__ = ["SIM_FAULTS", "host_for_layout", "predictor", "runpredict", "select_host"]

#: the simulated failures ``--sim-fault`` can inject (the front ends' choices)
SIM_FAULTS = INJECTABLE
#: the most GPUs ``--sim-gpus`` may ask for
MAX_SIM_GPUS = SIM_MAX_GPUS


def select_host(options: HostOptions) -> Host:
    """The real host when an NVIDIA driver answers (and --sim is not given), else the simulated one."""
    if options.sim:
        return SimHost(options)
    try:
        module = open_nvml()
    except NvmlUnavailable as exc:
        return SimHost(options, reason=f"SIMULATED host: {exc}")
    return LocalHost(module, options.vllm, api_key=options.api_key)


def host_for_layout(options: HostOptions, simulated_layout: bool | None, default: Host | None = None) -> Host:
    """The host a running layout lives on: the simulated one for a simulated layout (found through the state file,
    so ``status`` and the console need no ``--sim``), else ``default`` or the one ``select_host`` finds."""
    if simulated_layout:
        return default if default is not None and default.simulated else SimHost(options)
    return default if default is not None else select_host(options)
