"""The composition root: which Host a front end (the CLI, the console) gets. The core never chooses.

The real host when an NVIDIA driver answers (and ``--sim`` is not given), else the simulated one, always labelled
SIMULATED. This is the one module outside ``tui.sim`` that may import both the core and the simulator. It imports
them when asked (a function called, a name read): a command that never touches a host, or only the real one, does
not load the simulator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tui.core.host.base import Host, HostOptions

__all__ = ["host_for_layout", "select_host"]


def __getattr__(name: str) -> Any:
    """The simulator's parts the front ends reach, imported the first time one is read: ``predictor``, the simulator
    as a predictor (the core never imports it): the same performance model and schedulers the simulated server paces
    its tokens with, evaluated in virtual time (``predict``, ``results``); ``runpredict`` the same for a stored run;
    ``SIM_FAULTS`` the simulated failures ``--sim-fault`` can inject; ``MAX_SIM_GPUS`` the most GPUs ``--sim-gpus``
    may ask for."""
    if name == "predictor":
        from tui.sim import predict

        return predict
    if name == "runpredict":
        from tui.sim import runpredict

        return runpredict
    if name == "SIM_FAULTS":
        from tui.sim.faults import INJECTABLE

        return INJECTABLE
    if name == "MAX_SIM_GPUS":
        from tui.sim.host import MAX_SIM_GPUS

        return MAX_SIM_GPUS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def select_host(options: HostOptions) -> Host:
    """The real host when an NVIDIA driver answers (and --sim is not given), else the simulated one."""
    if options.sim:
        from tui.sim.host import SimHost

        return SimHost(options)
    from tui.core.host.nvml import NvmlUnavailable, open_nvml

    try:
        module = open_nvml()
    except NvmlUnavailable as exc:
        from tui.sim.host import SimHost

        return SimHost(options, reason=f"SIMULATED host: {exc}")
    from tui.core.host.local import LocalHost

    return LocalHost(module, options.vllm, api_key=options.api_key)


def host_for_layout(options: HostOptions, simulated_layout: bool | None, default: Host | None = None) -> Host:
    """The host a running layout lives on: the simulated one for a simulated layout (found through the state file,
    so ``status`` and the console need no ``--sim``), else ``default`` or the one ``select_host`` finds."""
    if simulated_layout:
        if default is not None and default.simulated:
            return default
        from tui.sim.host import SimHost

        return SimHost(options)
    return default if default is not None else select_host(options)
