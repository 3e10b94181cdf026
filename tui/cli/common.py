"""Argument helpers shared by commands that take a model and a topology."""

from __future__ import annotations

import argparse
import ipaddress
import re

from tui.cli.argtypes import positive_int
from tui.cli.context import CliContext, parse_gpu_list, parse_pairs, split_args
from tui.core.errors import InputError
from tui.core.models import ModelProfile
from tui.core.plan.planner import LaunchPlan, PlanOptions, plan
from tui.core.topology import parse_topology


def add_plan_options(p: argparse.ArgumentParser, *, topology_required: bool = True) -> None:
    p.add_argument("--model", "-m", required=True, metavar="M", help="profile id or path to a profile file")
    p.add_argument("--topology", "-t", required=topology_required, metavar="T",
                   help="tp<N>, dp<N>, <X>p<Y>d or <X>p<Y>d-tp<K>")
    p.add_argument("--gpus", metavar="0,1", help="GPU indices to use (default: the first ones)")
    p.add_argument("--host", default="127.0.0.1", help="address servers and proxy bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="endpoint port: proxy or single server (default 8000)")
    p.add_argument("--server-port", type=int, default=8100, metavar="PORT",
                   help="first server port of a disaggregated layout; the next ones step by 100 (default 8100)")
    p.add_argument("--side-channel-port", type=int, default=5600, metavar="PORT",
                   help="first NIXL side-channel port; one per engine (default 5600)")
    p.add_argument("--model-path", metavar="DIR", help="serve this local folder instead of the profile's model")
    p.add_argument("--arg", action="append", default=[], metavar="'--flag value'",
                   help="extra vllm serve argument(s), repeatable")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="extra environment, repeatable")
    p.add_argument("--gpu-memory-utilization", type=float, metavar="F")
    p.add_argument("--max-model-len", type=positive_int, metavar="N")
    p.add_argument("--allow-shared-gpus", action="store_true",
                   help="let servers of a disaggregated layout share a GPU (--gpus 0,0): a functional check only")


_HOST_NAME = re.compile(r"^(?=.{1,253}\Z)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                        r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\Z")


def check_host(text: str, ctx: CliContext, flag: str = "--host") -> str:
    """The address servers and the proxy bind: an IP address or a host name; anything but loopback warns (vLLM's
    API answers whoever reaches it unless it has an API key)."""
    host = text.strip()
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        addr = None
        if not _HOST_NAME.match(host):
            raise InputError(f"expected an IP address or a host name, got {text!r}", field=flag) from None
    if not (host == "localhost" or (addr is not None and addr.is_loopback)):
        ctx.warn(f"{flag} {host}: the servers and the proxy will accept connections from other machines "
                 "(their API has no authentication unless --api-key); the default 127.0.0.1 keeps them local")
    return host


def plan_options(args: argparse.Namespace, ctx: CliContext) -> PlanOptions:
    extra_args = split_args(args.arg, "--arg")
    env = parse_pairs(args.env, "--env")
    for name, value in (("--port", args.port), ("--server-port", args.server_port),
                        ("--side-channel-port", args.side_channel_port)):
        if not 1 <= value <= 65535:
            raise InputError(f"port must be 1..65535, got {value}", field=name)
    host = check_host(args.host, ctx)
    gmu = args.gpu_memory_utilization
    if gmu is not None and not 0.05 <= gmu <= 0.99:
        raise InputError(f"must be within 0.05..0.99, got {gmu}", field="--gpu-memory-utilization")
    return PlanOptions(
        gpus=parse_gpu_list(args.gpus), host=host, port=args.port, server_base_port=args.server_port,
        side_channel_base=args.side_channel_port,
        vllm_executable=getattr(args, "vllm", None) or "vllm", extra_args=tuple(extra_args), extra_env=tuple(env),
        model_path=args.model_path, gpu_memory_utilization=gmu, max_model_len=args.max_model_len,
        allow_shared_gpus=args.allow_shared_gpus,
    )


def make_plan(args: argparse.Namespace, ctx: CliContext, topology: str | None = None) -> tuple[ModelProfile,
                                                                                                  LaunchPlan]:
    profile = ctx.catalog.model(args.model)
    topo = parse_topology(topology or args.topology)
    return profile, plan(profile, topo, ctx.host.facts, plan_options(args, ctx))
