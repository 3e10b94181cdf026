"""The command lines of the detached commands the console starts (``up``, ``down``, ``run``, ``bench``), with the
console's host options as the CLI's global flags, so that a detached command sees the same host; and the launch a
restart or an applied fix repeats."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from tui.core.host.base import HostOptions
from tui.core.plan.request import LaunchRequest


def port_args(ports: tuple[int, int, int] | None) -> list[str]:
    """The flags of a layout's ports (endpoint, first server, first NIXL side channel); none for the defaults."""
    if ports is None:
        return []
    return ["--port", str(ports[0]), "--server-port", str(ports[1]), "--side-channel-port", str(ports[2])]


def global_args(options: HostOptions) -> list[str]:
    """The console's host options as the CLI's global flags (a detached command sees the same host)."""
    out: list[str] = []
    if options.sim:
        out.append("--sim")
    if options.sim_gpu:
        out += ["--sim-gpu", options.sim_gpu]
    if options.sim_gpus:
        out += ["--sim-gpus", str(options.sim_gpus)]
    for f in options.sim_faults:
        out += ["--sim-fault", f]
    if options.sim_startup_s is not None:
        out += ["--sim-startup", f"{options.sim_startup_s:g}"]
    if options.sim_clock is not None:
        out += ["--sim-clock", f"{options.sim_clock:g}"]
    if options.vllm:
        out += ["--vllm", options.vllm]
    return out


def bench_argv(workload_file: Path, events: Path, slo: dict[str, float], runner: str, options: HostOptions, *,
               campaign: str = "console", force: bool = False) -> list[str]:
    """``disagg-tui bench`` for a run started from the console: against the active layout, stored under
    ``runs/<campaign>/``, its events to ``events`` for the console to follow, no progress line (nobody reads it);
    ``force``: on a layout a running campaign or benchmark holds (the operator said so)."""
    argv = ["bench", "--workload", str(workload_file), "--campaign", campaign, "--events-to", str(events), "--quiet"]
    if force:
        argv.append("--force")
    if slo:
        argv += ["--goodput", *(f"{k}:{v:g}" for k, v in slo.items())]
    if runner == "vllm":
        argv += ["--runner", "vllm"]
    return [*argv, *global_args(options)]


def launch_argv(request: LaunchRequest, options: HostOptions, *, force: bool = False) -> list[str]:
    """``disagg-tui up`` of a launch request (``request.to_argv()`` first, as it is), started by this console (the
    state file records it as the owner), on the console's host (its ``--vllm`` is the request's when the request
    names one); ``force``: replace a layout a running campaign or benchmark holds (the operator said so)."""
    host = dataclasses.replace(options, vllm=None) if request.vllm is not None else options
    return ["up", *request.to_argv(), *global_args(host), "--started-by", "console", "--owner-pid", str(os.getpid()),
            *(["--force"] if force else [])]


def again_request(last: LaunchRequest | None, profile_id: str | None, topology: str | None, *,
                  ports: tuple[int, int, int] | None, apply_fix: str | None = None,
                  replace: bool = False) -> LaunchRequest | None:
    """What a restart (or an applied fix) launches: the last launch from this console when it is of the layout
    shown (``profile_id``, ``topology``; None when none is shown), else that layout as planned by default on the
    console's ports; None when there is nothing to launch again."""
    if last is not None and (profile_id is None or (last.model, last.topology) == (profile_id, topology)):
        base = last
    elif profile_id is not None and topology is not None:
        base = LaunchRequest(model=profile_id, topology=topology)
        if ports is not None:
            base = dataclasses.replace(base, port=ports[0], server_port=ports[1], side_channel_port=ports[2])
    else:
        return None
    return dataclasses.replace(base, apply_fix=apply_fix, replace=replace)


def down_argv(options: HostOptions, *, all_layouts: bool = False, force: bool = False) -> list[str]:
    """``disagg-tui down``; ``force``: stop a layout a running campaign or benchmark holds (the operator said so)."""
    return ["down", *(["--all"] if all_layouts else []), *(["--force"] if force else []), *global_args(options)]


def run_argv(model: str, topologies: Sequence[str], workloads: Sequence[str], options: HostOptions, *,
             ports: tuple[int, int, int] | None = None, rates: str | None = None, repeat: int = 1,
             campaign: str | None = None, num_prompts: int | None = None, runner: str = "ours",
             knobs: Sequence[str] = ()) -> list[str]:
    """``disagg-tui run`` of a campaign started (or resumed) here; ``knobs``: its axes, each a ``--knob``."""
    argv = ["run", "--model", model, "--topology", ",".join(topologies), "--workload", ",".join(workloads),
            "--repeat", str(repeat), "--quiet"]
    for axis in knobs:
        argv += ["--knob", axis]
    if rates:
        argv += ["--rates", rates]
    if campaign:
        argv += ["--campaign", campaign]
    if num_prompts:
        argv += ["--num-prompts", str(num_prompts)]
    if runner != "ours":
        argv += ["--runner", runner]
    return [*argv, *port_args(ports), *global_args(options)]
