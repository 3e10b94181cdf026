"""The launch request's command-line arguments, defined once: ``plan``, ``up``, ``run`` and ``doctor`` register them
(``tui/cli``), and ``LaunchRequest.from_argv`` parses with them. argparse takes every value as text and
``LaunchRequest.from_args`` converts and validates it, so a flag and a field of the console's launch form are read
by the same code. Light on purpose (argparse and constants): the CLI builds its parsers before it knows whether the
command needs the planner.
"""

from __future__ import annotations

import argparse
from typing import Any

from tui.core.plan.ports import DEFAULT_HOST, DEFAULT_PORT, DP_RPC_PORT, SERVER_BASE_PORT, SIDE_CHANNEL_BASE


def add_plan_arguments(p: argparse.ArgumentParser | Any, *, required: bool = True, topology_metavar: str = "T",
                       topology_help: str = "tp<N>, dp<N>, <X>p<Y>d or <X>p<Y>d-tp<K>",
                       model_help: str = "profile id, profile file, model folder or ORG/NAME in the Hugging Face "
                                         "cache",
                       knob_metavar: str = "[ROLE.]NAME=VALUE",
                       knob_help: str = "a serve knob from the catalogue (profiles/knobs.yaml; 'disagg-tui knobs' "
                                        "lists them), e.g. attn=triton, decode.mnbt=2048, spec=ngram:4; "
                                        "repeatable") -> None:
    """The model, the topology and every plan option (``plan``, ``up``, ``run``, ``doctor``)."""
    p.add_argument("--model", "-m", required=required, metavar="M", help=model_help)
    p.add_argument("--topology", "-t", required=required, metavar=topology_metavar, help=topology_help)
    p.add_argument("--gpus", metavar="0,1", help="GPU indices to use (default: the first ones)")
    p.add_argument("--host", help=f"address servers and proxy bind (default {DEFAULT_HOST})")
    p.add_argument("--port", metavar="PORT", help=f"endpoint port: proxy or single server (default {DEFAULT_PORT})")
    p.add_argument("--server-port", metavar="PORT",
                   help="first server port of a disaggregated layout; the next ones step by 100 (default "
                        f"{SERVER_BASE_PORT})")
    p.add_argument("--side-channel-port", metavar="PORT",
                   help=f"first NIXL side-channel port; one per engine (default {SIDE_CHANNEL_BASE})")
    p.add_argument("--model-path", metavar="DIR", help="serve this local folder instead of the profile's model")
    p.add_argument("--arg", action="append", default=[], metavar="'--flag value'",
                   help="extra vllm serve argument(s), repeatable; split as a shell would, except that a JSON "
                        "object or list is one word kept as written: --arg '--speculative-config {\"method\": "
                        "\"ngram\", \"num_speculative_tokens\": 3}'")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="extra environment, repeatable")
    p.add_argument("--gpu-memory-utilization", metavar="F", help="vLLM's share of each GPU's memory (0.05-0.99)")
    p.add_argument("--max-model-len", metavar="N", help="the longest request, prompt and output, in tokens")
    p.add_argument("--allow-shared-gpus", action="store_true",
                   help="let servers of a disaggregated layout share a GPU (--gpus 0,0): a functional check only")
    p.add_argument("--knob", action="append", default=[], metavar=knob_metavar,
                   help=knob_help)
    add_part_arguments(p)


def add_part_arguments(p: argparse.ArgumentParser | Any) -> None:
    """This host's part of a layout across hosts: what ``plan --hosts`` gives each host's own ``plan``/``up``."""
    g = p.add_argument_group("a part of a layout across hosts (plan --hosts writes these for each host)")
    g.add_argument("--dp-local", metavar="N", help="data parallel across hosts: the ranks this host runs")
    g.add_argument("--dp-start-rank", metavar="R",
                   help="the global rank of this host's first one (above 0: engines only, vLLM's --headless)")
    g.add_argument("--dp-address", metavar="ADDR", help="the head host's address, which every host's engines reach")
    g.add_argument("--dp-rpc-port", metavar="PORT", help=f"the head's RPC port (default {DP_RPC_PORT})")
    g.add_argument("--roles", metavar="prefill|decode", help="P/D across hosts: the roles this host runs")
    g.add_argument("--advertise", metavar="ADDR",
                   help="the address other hosts reach this host at (its NIXL side channel)")
    g.add_argument("--peer", action="append", default=[], metavar="ROLE=URL",
                   help="another host's server for the proxy here (prefill=http://ADDR:PORT), repeatable")


def add_bundle_arguments(p: argparse.ArgumentParser | Any) -> None:
    """What an operator may accept from a bundle on this host, beyond the allowlist (``import``, ``up --bundle``)."""
    p.add_argument("--allow-env", action="append", default=[], metavar="NAME",
                   help="accept this environment variable from the bundle though the allowlist does not name it: "
                        "only tuning variables of vLLM and the libraries under it (VLLM_*, NCCL_*, UCX_*, CUDA_*, "
                        "TORCH_*, PYTORCH_*, OMP_*, ...); never one that loads code or libraries, chooses a cache, "
                        "config or plugin folder, or moves traffic or trust (PYTHONPATH, LD_*, *_HOME, *_DIR, "
                        "*PLUGIN*, proxies, CA bundles), nor placement (CUDA_VISIBLE_DEVICES); repeatable")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="accept the bundle profile's trust_remote_code: vLLM then runs the Python code of the "
                        "model's repository on this host")


def add_up_arguments(p: argparse.ArgumentParser | Any) -> None:
    """What ``up`` adds to the plan options: a bundle, a fix, replacing, staggering, timeouts."""
    p.add_argument("--bundle", metavar="FILE",
                   help="launch a bundle's layout, planned on this host (this host's --host, ports, --gpus and "
                        "vllm; the bundle adds only allowlisted flags and variables), after preflight; --topology "
                        "picks one of its layouts")
    add_bundle_arguments(p)
    p.add_argument("--replace", action="store_true", help="stop the layout that is up first")
    p.add_argument("--ready-timeout", metavar="S", help="give up on a start after S seconds")
    p.add_argument("--stall-timeout", metavar="S", help="report a start whose log is silent for S seconds as stalled")
    p.add_argument("--no-stagger", action="store_true",
                   help="start servers that share a GPU at once (each then gets a fraction of its KV cache)")
    p.add_argument("--apply-fix", metavar="ID[,ID]|auto",
                   help="apply playbook entries' fixes to the plan before launching (in order); 'auto': launch, and "
                        "when a start fails with a known failure whose fix is safe, apply it and relaunch")


def add_vllm_argument(p: argparse.ArgumentParser | Any, *, default: Any = None) -> None:
    """``--vllm PATH`` (a global option of the CLI: ``default`` is argparse.SUPPRESS on a command's parser)."""
    p.add_argument("--vllm", default=default, metavar="PATH",
                   help="the vllm executable (default: found on PATH; it often lives in its own venv)")


def add_hosts_arguments(p: argparse.ArgumentParser | Any, *, proxy: bool = True) -> None:
    p.add_argument("--hosts", metavar="A,B",
                   help="a layout across these inventory hosts (hosts.yaml), each part run by that host's own "
                        "disagg-tui over SSH: dp<N> as vLLM's multi-node data parallel (the first host the head), "
                        "<X>p<Y>d with prefill on the first and decode on the second")
    if proxy:
        p.add_argument("--proxy-on", metavar="HOST", help="with --hosts: the host that runs the proxy of a P/D "
                                                          "layout (default the first)")
