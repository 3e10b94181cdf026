"""What the commands that take a model and a topology share: the launch request their flags make, and its plan.

The flags themselves, their conversion and their validation are the core's (``tui.core.plan.request``): the
console's launch form goes through the same request.
"""

from __future__ import annotations

import argparse

from tui.cli.context import CliContext
from tui.core.models import ModelProfile
from tui.core.plan.request import LaunchRequest, plan_request
from tui.core.plan.spec import LaunchPlan


def add_force_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--force``, the same on every command that refuses a layout held by a running campaign or benchmark
    (``up --replace``, ``down``, ``bench``)."""
    p.add_argument("--force", action="store_true", dest="force",
                   help=what + " (refused otherwise, naming who holds it)")


def launch_request(args: argparse.Namespace, ctx: CliContext, *, topology: str | None = None) -> LaunchRequest:
    """The request of this command line (every mistake in it at once, naming the flags); its warnings said."""
    request = LaunchRequest.from_args(args, topology=topology)
    for w in request.warnings():
        ctx.warn(w)
    return request


def make_plan(request: LaunchRequest, ctx: CliContext, topology: str | None = None) -> tuple[ModelProfile,
                                                                                               LaunchPlan]:
    """The plan of ``request`` on this host (``topology``: another one of the same request, as ``run`` has)."""
    return plan_request(request, ctx.catalog, ctx.host.facts, topology=topology)
