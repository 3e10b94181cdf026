"""``disagg-tui console`` (and bare ``disagg-tui`` on a terminal): the operator console on this host.

The global flags choose the host as for every command (``--sim``, or the simulated host where no NVIDIA driver
answers). Without a terminal (a pipe, CI) the bare command prints help and the host summary instead.
``--hosts a,b`` (or ``all``) shows the inventory's hosts too (``hosts.yaml``), each followed over one SSH session
streaming its ``watch --json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from tui.cli.context import CliContext, add_global_options, add_hosts_option, split_list
from tui.core.errors import EXIT_BAD_INPUT, EXIT_OK, InputError

if TYPE_CHECKING:
    from tui.core.remote.host import RemoteHost


def register(sub: Any) -> None:
    p = sub.add_parser("console", help="the operator console (the default on a terminal)",
                       description="Open the console: GPUs, servers, launches, benchmarks, campaigns, results and "
                                   "the playbook in one screen. Servers and campaigns it starts keep running when "
                                   "it quits; a console opened later reattaches. --hosts adds other hosts of "
                                   "hosts.yaml: their GPUs and servers grouped by host.")
    add_global_options(p)
    add_hosts_option(p)
    p.set_defaults(handler=run)


def remote_hosts(spec: str | None) -> list[RemoteHost]:
    """The hosts ``--hosts`` names (``all``: every host of the inventory), in the order given, each once."""
    if spec is None:
        return []
    from tui.core.remote import inventory
    from tui.core.remote.host import RemoteHost
    from tui.core.remote.ssh import SshTransport

    inv = inventory.load()
    names = inv.names if spec.strip() == "all" else split_list(spec, "--hosts")
    if not names:
        raise InputError(f"no hosts: {inv.source} names none", field="--hosts",
                         hint="add hosts under 'hosts:' there (disagg-tui hosts --help)")
    return [RemoteHost(SshTransport(inv.get(n), ssh_config=inv.ssh_config)) for n in dict.fromkeys(names)]


def on_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty() and os.environ.get("TERM", "") not in ("", "dumb")


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    hosts = remote_hosts(getattr(args, "hosts", None))  # a wrong --hosts is one line, terminal or not
    if not on_terminal():
        ctx.error("the console needs a terminal (stdin and stdout a TTY); the headless commands work anywhere")
        return EXIT_BAD_INPUT
    from tui.console.main import run_console

    try:
        code = run_console(ctx.host_options(), host=ctx.host, remotes={h.name: h.watch() for h in hosts})
    finally:
        for h in hosts:
            h.close()
    return EXIT_OK if code is None else int(code)
