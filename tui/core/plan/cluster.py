"""Layouts across hosts (pure): one launch request and the hosts it spans → each host's own part.

A part is a :class:`LaunchRequest` for that host's own ``disagg-tui plan``/``up`` (the same request a local launch
takes, with the part fields set): every host plans its servers with its own planner and facts, and runs them under
its own supervisor, state file and logs. Nothing here writes a command for another host: it writes the request
that host's planner turns into commands, so a host never runs what its own planner did not make.

What spans hosts, the way vLLM 0.24 serves across nodes (``../shared/VLLM-0.24.md``):

- ``dp<N>`` over H hosts: vLLM's multi-node data parallel. N/H ranks a host; the first host is the head (the API
  server and its local engines, ``--data-parallel-address`` its own address and ``--data-parallel-rpc-port``); the
  others run engines only (``--headless --data-parallel-start-rank K``), which reach the head's RPC port. One
  endpoint: the head's.
- ``<X>p<Y>d`` over 2 hosts: the prefill servers on the first, the decode servers on the second, each binding and
  advertising its own address (``VLLM_NIXL_SIDE_CHANNEL_HOST``: D pulls P's KV from there), the proxy on the host the
  operator names (default the first), sending to the other host's servers by their addresses.
- ``tp<N>`` across hosts is refused: tensor (and pipeline) parallel over nodes needs vLLM's Ray backend and a Ray
  cluster, which this planner does not start; TP within a host and DP or P/D across hosts is what it plans.

Every host must have an ``address`` the others reach (the inventory's ``address:``); servers bind it, never
0.0.0.0.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from tui.core import netaddr
from tui.core.errors import InputError, PlanRefused
from tui.core.plan.hostfacts import HostFacts
from tui.core.plan.ports import SERVER_PORT_STEP, is_loopback
from tui.core.plan.request import LaunchRequest
from tui.core.topology import Topology, parse_topology

#: hosts one layout may span
MAX_HOSTS = 64


@dataclass(frozen=True, slots=True)
class ClusterHost:
    """A host a layout spans: its inventory name, the address the other hosts reach it at, and (for the preflight
    across hosts) its facts as it reported them."""

    name: str
    address: str
    facts: HostFacts | None = None
    vllm: str | None = None  # its vllm executable (the inventory's), None: found on its PATH
    gpus: tuple[int, ...] | None = None  # its GPUs to use (the inventory's), None: the first ones


@dataclass(frozen=True, slots=True)
class Part:
    """One host's part: its request (what ``disagg-tui up`` gets there) and what it runs, in words."""

    host: str
    address: str
    request: LaunchRequest
    does: str  # "head: API server + DP ranks 0-1", "prefill servers", "decode servers + proxy"...


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    """A layout across hosts: each host's part, the one endpoint clients use, and where KV and RPC traffic go."""

    topology: str
    parts: tuple[Part, ...]
    endpoint: str
    network: tuple[str, ...]  # each cross-host path in words: "KV: a 10.1.0.2:5600 → b (NIXL side channel)"
    proxy_on: str | None = None

    @property
    def hosts(self) -> list[str]:
        return [p.host for p in self.parts]

    def part(self, host: str) -> Part:
        for p in self.parts:
            if p.host == host:
                return p
        raise KeyError(host)

    def to_dict(self) -> dict[str, object]:
        return {"topology": self.topology, "endpoint": self.endpoint, "proxy_on": self.proxy_on,
                "network": list(self.network),
                "parts": [{"host": p.host, "address": p.address, "does": p.does, "argv": p.request.to_argv()}
                          for p in self.parts]}


def check_address(name: str, address: str) -> str:
    """The address of a host of a layout across hosts: an IP or a name, not loopback (the others cannot reach it)."""
    a = address.strip()
    try:
        ipaddress.ip_address(a)
    except ValueError:
        if not a or len(a) > 253 or not all(c.isalnum() or c in ".-" for c in a):
            raise InputError(f"{name}: {address[:60]!r} is not an address", field=f"hosts.{name}.address") from None
    if is_loopback(a) or netaddr.is_wildcard(a):
        raise InputError(f"{name}: {a} is not an address the other hosts reach"
                         + (f" ({netaddr.wildcard_why(a)})" if netaddr.is_wildcard(a) else ""),
                         field=f"hosts.{name}.address", hint="give the host's address on the network the hosts share")
    return a


def _url(address: str, port: int) -> str:
    return f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"


def plan_across(request: LaunchRequest, hosts: Sequence[ClusterHost], *, proxy_on: str | None = None
                ) -> ClusterPlan:
    """Each host's part of ``request``'s layout over ``hosts`` (in order: the first is the head / the prefill
    host). PlanRefused (one line) for what cannot span these hosts."""
    if request.bundle is not None:
        raise PlanRefused("a bundle's layout is launched on one host; plan the layout across hosts from its "
                          "profile (--model) and topology")
    if request.topology is None or request.model is None:
        raise PlanRefused("--model and --topology are needed for a layout across hosts")
    if request.dp_local is not None or request.roles or request.peers or request.advertise or request.dp_address:
        raise PlanRefused("--hosts writes each host's part (--dp-*, --roles, --peer, --advertise) itself: drop them")
    names = [h.name for h in hosts]
    if len(hosts) < 2:
        raise PlanRefused("a layout across hosts needs at least 2 hosts (--hosts a,b)")
    if len(hosts) > MAX_HOSTS or len(set(names)) != len(names):
        raise PlanRefused(f"--hosts {','.join(names)[:80]}: each host once, at most {MAX_HOSTS}")
    addresses = [check_address(h.name, h.address) for h in hosts]
    if len(set(addresses)) != len(addresses):
        raise PlanRefused("two hosts of --hosts have the same address: each host needs its own")
    if proxy_on is not None and proxy_on not in names:
        raise PlanRefused(f"--proxy-on {proxy_on}: not one of --hosts ({', '.join(names)})")
    topo = parse_topology(request.topology)
    if topo.kind == "dp":
        return _dp_across(request, topo, hosts, addresses, proxy_on)
    if topo.kind == "pd":
        return _pd_across(request, topo, hosts, addresses, proxy_on)
    raise PlanRefused(f"{topo.name} across hosts: tensor parallel over nodes needs vLLM's Ray backend "
                      "(--distributed-executor-backend ray) and a Ray cluster, which disagg-tui does not start; "
                      f"run {topo.name} within one host, or dp<N> / <X>p<Y>d across hosts")


def _for_host(request: LaunchRequest, h: ClusterHost, address: str, **part: object) -> LaunchRequest:
    """The request for one host: its address bound, its vllm and GPUs (the inventory's), the part's fields."""
    return dataclasses.replace(request, host=address, vllm=h.vllm or request.vllm,
                               gpus=h.gpus if request.gpus is None else request.gpus, **part)  # type: ignore[arg-type]


def _dp_across(request: LaunchRequest, topo: Topology, hosts: Sequence[ClusterHost], addresses: list[str],
               proxy_on: str | None) -> ClusterPlan:
    n = len(hosts)
    if proxy_on is not None:
        raise PlanRefused(f"{topo.name} has no proxy: its one endpoint is the head's API server ({hosts[0].name})")
    if topo.dp % n:
        raise PlanRefused(f"{topo.name} over {n} hosts: each host runs the same number of ranks, so the DP size "
                          f"must be a multiple of {n}")
    local = topo.dp // n
    head = addresses[0]
    parts = []
    for k, (h, addr) in enumerate(zip(hosts, addresses, strict=True)):
        start = k * local
        ranks = f"rank {start}" if local == 1 else f"ranks {start}-{start + local - 1}"
        does = f"head: the API server and DP {ranks}" if k == 0 else \
            f"DP {ranks}, engines only (--headless), joining the head"
        parts.append(Part(h.name, addr, _for_host(request, h, addr, dp_local=local, dp_start_rank=start,
                                                  dp_address=head), does))
    network = tuple(f"DP: {h.name} → {hosts[0].name} {head}:{request.dp_rpc_port} (the head's RPC port; vLLM's "
                    "engine messages over TCP)" for h in hosts[1:])
    return ClusterPlan(topology=topo.name, parts=tuple(parts), endpoint=_url(head, request.port), network=network)


def _pd_across(request: LaunchRequest, topo: Topology, hosts: Sequence[ClusterHost], addresses: list[str],
               proxy_on: str | None) -> ClusterPlan:
    if len(hosts) != 2:
        raise PlanRefused(f"{topo.name} across hosts: prefill on one host, decode on the other (--hosts P_HOST,"
                          f"D_HOST); {len(hosts)} hosts given")
    proxy_host = proxy_on or hosts[0].name
    base, step = request.server_port, SERVER_PORT_STEP
    urls = {"prefill": [_url(addresses[0], base + step * i) for i in range(topo.prefill)],
            "decode": [_url(addresses[1], base + step * (topo.prefill + i)) for i in range(topo.decode)]}
    parts = []
    for h, addr, role in ((hosts[0], addresses[0], "prefill"), (hosts[1], addresses[1], "decode")):
        other = "decode" if role == "prefill" else "prefill"
        peers = tuple((other, u) for u in urls[other]) if h.name == proxy_host else ()
        does = f"{role} servers ({len(urls[role])})" + (" and the proxy" if peers else "")
        parts.append(Part(h.name, addr, _for_host(request, h, addr, roles=(role,), advertise=addr, peers=peers),
                          does))
    proxy_addr = addresses[0] if proxy_host == hosts[0].name else addresses[1]
    side = request.side_channel_port
    network = (f"KV: {hosts[1].name} pulls from {hosts[0].name} {addresses[0]}:{side}"
               + (f"-{side + topo.prefill * topo.tp - 1}" if topo.prefill * topo.tp > 1 else "")
               + " (the NIXL side channel; the KV itself over the transport NIXL's UCX picks)",
               f"HTTP: the proxy on {proxy_host} → prefill on {hosts[0].name}, decode on {hosts[1].name}")
    return ClusterPlan(topology=topo.name, parts=tuple(parts), endpoint=_url(proxy_addr, request.port),
                       network=network, proxy_on=proxy_host)


def cross_checks(plan: ClusterPlan, facts: dict[str, HostFacts], vllm_versions: dict[str, str | None] | None = None
                 ) -> list[tuple[str, str, str]]:
    """The preflight across hosts: (check, pass|warn|fail, line). vLLM (and NIXL for P/D) the same version on
    every host (a different vLLM speaks another engine protocol and KV layout), every host simulated or none.
    ``vllm_versions``: what each host's vllm executable (the inventory's) answered to ``--version``, which wins
    over the facts' (the executable the part will run)."""
    out: list[tuple[str, str, str]] = []
    versions = {h: (vllm_versions or {}).get(h) or (f.vllm.version if f.vllm and f.vllm.found else None)
                for h, f in facts.items()}
    missing = [h for h, v in versions.items() if v is None]
    if missing:
        out.append(("vllm across hosts", "fail", f"no vLLM version from {', '.join(missing)}"))
    elif len(set(versions.values())) > 1:
        out.append(("vllm across hosts", "fail", "vLLM differs: " + ", ".join(f"{h} {v}" for h, v in
                                                                               versions.items())
                    + " (every host of one layout runs the same vLLM)"))
    else:
        out.append(("vllm across hosts", "pass", f"{next(iter(versions.values()))} on every host"))
    if parse_topology(plan.topology).kind == "pd":
        nixl = {h: (f.vllm.nixl if f.vllm else None) for h, f in facts.items()}
        if any(v is None for v in nixl.values()):
            out.append(("nixl across hosts", "fail", "no NIXL on " + ", ".join(h for h, v in nixl.items() if not v)))
        elif len(set(nixl.values())) > 1:
            out.append(("nixl across hosts", "fail", "NIXL differs: " + ", ".join(f"{h} {v}" for h, v in
                                                                                 nixl.items())))
        else:
            out.append(("nixl across hosts", "pass", f"nixl {next(iter(nixl.values()))} on every host"))
    sims = {f.simulated for f in facts.values()}
    if len(sims) > 1:
        out.append(("hosts", "fail", "simulated and real hosts mixed: "
                    + ", ".join(f"{h} {'SIMULATED' if f.simulated else 'real'}" for h, f in facts.items())))
    for line in plan.network:
        out.append(("network", "pass", line))
    return out
