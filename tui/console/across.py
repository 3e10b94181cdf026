"""The console over several hosts, beside its drawing: each host's two streams, and layouts across hosts.

- :func:`follow_of`: the follow stream (``RemoteHost.follow()``: the host's launches, every log line, phases,
  diagnoses) of a host whose watch stream the console was given (``RemoteWatch``, with its transport): one more SSH
  session per host, on the same inventory entry.
- :func:`connect`: both streams of an inventory host the console did not follow yet (a launch across it).
- :func:`inventory_names`: the inventory's hosts (what the launch screen offers), or why there are none.
- :func:`plan_parts` (pure, fast: ``plan_across`` over the inventory's addresses) and :func:`ask_hosts` (each host's
  own ``plan PART --json`` and the preflight across hosts: an SSH round trip each, for a worker).
- :func:`up_argv`/:func:`down_argv`: the CLI's own ``up --hosts``/``down --hosts`` the console starts detached.

No Textual here; the SSH parts are imported when used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tui.core.plan.cluster import ClusterPlan, plan_across
from tui.core.plan.request import LaunchRequest

#: a host's two streams (watch, follow) and what closes their connections
Connected = tuple[Any, Any, Callable[[], None]]


def follow_of(watch: Any) -> Any | None:
    """The follow stream of the host ``watch`` follows (None: a source without a transport, a test's fake)."""
    transport = getattr(watch, "transport", None)
    if transport is None or not hasattr(transport, "entry"):
        return None
    from tui.core.remote.stream import RemoteFollow

    return RemoteFollow(transport)


def connect(name: str) -> Connected:
    """Both streams of inventory host ``name`` (InputError: no such host)."""
    from tui.core.remote import inventory
    from tui.core.remote.host import RemoteHost
    from tui.core.remote.ssh import SshTransport

    inv = inventory.load()
    host = RemoteHost(SshTransport(inv.get(name), ssh_config=inv.ssh_config))
    return host.watch(), host.follow(), host.close


def inventory_names() -> tuple[list[str], str]:
    """The inventory's host names, and why there are none ("" when there are)."""
    from tui.core.errors import AppError
    from tui.core.remote import inventory

    try:
        inv = inventory.load()
    except AppError as err:
        return [], err.one_line()
    return list(inv.names), "" if inv.names else f"{inv.source} names no host"


def plan_parts(request: LaunchRequest, names: Sequence[str], *, proxy_on: str | None = None) -> ClusterPlan:
    """Each host's part of ``request`` over ``names`` (pure: the inventory's addresses, no SSH). PlanRefused or
    InputError (one line) when it cannot span them."""
    from tui.core.remote import inventory
    from tui.core.remote.cluster import cluster_hosts

    return plan_across(request, cluster_hosts(inventory.load(), names), proxy_on=proxy_on)


@dataclass(frozen=True, slots=True)
class HostsAnswer:
    """What the hosts said of their parts: each one's servers (name, role, shell), its warnings, and the preflight
    (each host's own checks and the checks across hosts); ``error``: why they could not be asked (one line)."""

    servers: dict[str, list[tuple[str, str, str]]]
    proxies: dict[str, str]
    warnings: list[str]
    checks: list[tuple[str, str, str]]
    error: str = ""

    @property
    def refusal(self) -> str:
        """The first failed check across hosts, or why the hosts could not be asked ("" when it may launch)."""
        if self.error:
            return self.error
        failed = [f"{n}: {r}" for n, st, r in self.checks if st == "fail"]
        return failed[0] + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else "") if failed else ""


def ask_hosts(plan: ClusterPlan) -> HostsAnswer:
    """Every host's own plan of its part and the preflight across hosts, over SSH (blocking: a worker's)."""
    from tui.core.errors import AppError
    from tui.core.remote import inventory
    from tui.core.remote.cluster import Hosts, preflight_across, remote_plans

    try:
        hosts = Hosts(inventory.load(), plan.hosts)
    except AppError as err:
        return HostsAnswer({}, {}, [], [], error=err.one_line())
    try:
        plans = remote_plans(hosts, plan)
        checks = preflight_across(hosts, plan, plans)
    except AppError as err:
        return HostsAnswer({}, {}, [], [], error=err.one_line())
    finally:
        hosts.close()
    return HostsAnswer(servers={h: [(s.name, s.role, s.shell) for s in p.servers] for h, p in plans.items()},
                       proxies={h: p.proxy_shell for h, p in plans.items() if p.proxy_shell},
                       warnings=[f"{h}: {w}" for h, p in plans.items() for w in p.warnings], checks=checks)


def across_request(request: LaunchRequest) -> LaunchRequest:
    """The form's request for a layout across hosts: each host's vllm is the inventory's, not this console's."""
    import dataclasses

    return dataclasses.replace(request, vllm=None)


def up_argv(request: LaunchRequest, names: Sequence[str]) -> list[str]:
    """``disagg-tui up --hosts A,B ...``: every host's part started by its own disagg-tui over SSH (each host's
    ``sim:`` and ``vllm:`` are the inventory's: no host option of this console's applies)."""
    return ["up", "--hosts", ",".join(names), *across_request(request).to_argv()]


def down_argv(names: Sequence[str], *, force: bool = False) -> list[str]:
    """``disagg-tui down --hosts A,B``: every host's part stopped by its own disagg-tui."""
    return ["down", "--hosts", ",".join(names), *(["--force"] if force else [])]


def topologies_across(hosts: int, gpus: int) -> list[str]:
    """What may span ``hosts`` hosts of ``gpus`` GPUs each (tp is listed: its refusal says why it cannot)."""
    out = [f"dp{hosts}"]
    if gpus > 1:
        out.append(f"dp{hosts * gpus}")
    if hosts == 2:
        out.append("1p1d")
        if gpus > 1:
            out += [f"{gpus}p{gpus}d", f"1p1d-tp{gpus}"]
    out.append(f"tp{max(gpus, 2)}")
    return list(dict.fromkeys(out))
