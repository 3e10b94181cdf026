"""A layout across hosts, carried out: each host's part planned, preflighted, started and stopped by that host's own
``disagg-tui`` over SSH (:mod:`tui.core.plan.cluster` says what each part is).

- :func:`remote_plans`: every host's ``disagg-tui plan PART --json`` at once: the exact commands its own planner
  makes and its own preflight (ports, GPUs, vLLM, NIXL), read back as hostile input (strict JSON, bounded, every
  text shown through :func:`safeio.shown`).
- :func:`up_across`: every host's ``disagg-tui up PART`` at once (the head waits for the other hosts' engines, so
  they start together), each one's progress lines handed on with its host's name; when one fails, every host's
  part is stopped (``disagg-tui down``), so nothing is left half up.
- :func:`down_across`: every host's ``disagg-tui down``.

A host that cannot be reached is one line naming it and why (:class:`~tui.core.remote.ssh.Unreachable`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tui.core import safeio
from tui.core.errors import AppError, InputError
from tui.core.plan.cluster import ClusterHost, ClusterPlan, cross_checks
from tui.core.plan.hostfacts import HostFacts
from tui.core.remote.check import version_in
from tui.core.remote.host import RemoteHost
from tui.core.remote.inventory import Inventory
from tui.core.remote.ssh import SshTransport, Unreachable, last_line

#: the longest line of a remote ``up``'s progress kept
MAX_LINE = 4096
#: servers one host's plan may list, words of a server's argv, variables of its environment
MAX_SERVERS = 256
MAX_WORDS = 4096
MAX_VARS = 1024


@dataclass(frozen=True, slots=True)
class RemoteServer:
    name: str
    role: str
    url: str
    shell: str
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # as that host's plan --json gives it: secrets redacted
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RemotePlan:
    """What a host's own planner made of its part, and its own preflight, as it answered."""

    host: str
    servers: tuple[RemoteServer, ...]
    proxy_shell: str | None
    proxy_url: str | None
    warnings: tuple[str, ...]
    preflight: tuple[tuple[str, str, str], ...]  # (check, pass|warn|fail, reason)
    simulated: bool

    @property
    def failed(self) -> list[str]:
        return [f"{self.host}: {name}: {reason}" for name, status, reason in self.preflight if status == "fail"]


def cluster_hosts(inv: Inventory, names: Sequence[str], facts: dict[str, HostFacts] | None = None
                  ) -> list[ClusterHost]:
    """The hosts ``names`` of the inventory as a layout spans them (their addresses, vllm and GPUs); no SSH."""
    out = []
    for n in names:
        e = inv.get(n)
        out.append(ClusterHost(name=n, address=e.routable_address(), facts=(facts or {}).get(n),
                               vllm=e.vllm if e.vllm != "vllm" else None, gpus=e.gpus))
    return out


@dataclass
class Hosts:
    """The inventory hosts of a layout, each with its transport (one shared SSH connection each)."""

    inventory: Inventory
    names: list[str]
    transports: dict[str, SshTransport] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for n in self.names:
            self.transports[n] = SshTransport(self.inventory.get(n), ssh_config=self.inventory.ssh_config)

    def cluster_hosts(self, facts: dict[str, HostFacts] | None = None) -> list[ClusterHost]:
        return cluster_hosts(self.inventory, self.names, facts)

    def facts(self) -> dict[str, HostFacts]:
        """Every host's facts (``hosts facts --json``), read at once."""
        def one(n: str) -> HostFacts:
            return RemoteHost(self.transports[n]).facts
        with ThreadPoolExecutor(max_workers=min(16, len(self.names))) as pool:
            return dict(zip(self.names, pool.map(one, self.names), strict=True))

    def vllm_versions(self) -> dict[str, str | None]:
        """What each host's vllm (the inventory's ``vllm:``) answers to ``--version`` there; None where it does
        not run or names no version."""
        def one(n: str) -> str | None:
            t = self.transports[n]
            res = t.run([t.entry.vllm, "--version"], timeout_s=60.0)
            return version_in(res.stdout) if res.ok else None
        with ThreadPoolExecutor(max_workers=min(16, len(self.names))) as pool:
            return dict(zip(self.names, pool.map(one, self.names), strict=True))

    def close(self) -> None:
        for t in self.transports.values():
            t.close()


def _text(d: dict[str, Any], key: str, source: str, *, limit: int = 2000, optional: bool = False) -> str:
    v = d.get(key)
    if v is None and optional:
        return ""
    if not isinstance(v, str):
        raise InputError(f"expected a string, got {safeio.shown(repr(v), 40)}", file=source, field=key)
    return safeio.shown(v, limit)


def read_remote_plan(host: str, text: str) -> RemotePlan:
    """A host's ``plan --json`` answer (from outside: strict, bounded, every string made printable)."""
    source = f"{host}: plan --json"
    data = safeio.parse_json(text, source)
    if not isinstance(data, dict) or not isinstance(data.get("plan"), dict) or \
            not isinstance(data.get("preflight"), list):
        raise InputError("not a 'plan --json' answer", file=source, field="plan")
    plan = data["plan"]
    servers_raw = plan.get("servers")
    if not isinstance(servers_raw, list) or not 1 <= len(servers_raw) <= MAX_SERVERS:
        raise InputError(f"expected 1 to {MAX_SERVERS} servers", file=source, field="plan.servers")
    servers = []
    for s in servers_raw:
        if not isinstance(s, dict):
            raise InputError("a server is not an object", file=source, field="plan.servers")
        argv, env = s.get("argv"), s.get("env")
        if not isinstance(argv, list) or not 1 <= len(argv) <= MAX_WORDS or \
                not all(isinstance(w, str) and len(w) <= 2000 for w in argv):
            raise InputError(f"a server's argv is 1 to {MAX_WORDS} words", file=source, field="plan.servers.argv")
        if not isinstance(env, dict) or len(env) > MAX_VARS or \
                not all(isinstance(k, str) and isinstance(v, str) and len(k) + len(v) <= 4000 for k, v in env.items()):
            raise InputError(f"a server's env is at most {MAX_VARS} variables", file=source, field="plan.servers.env")
        gpus = s.get("gpus") or []
        if not isinstance(gpus, list) or len(gpus) > 72 or \
                not all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 72 for g in gpus):
            raise InputError("a server's GPUs are at most 72 indices 0-71", file=source, field="plan.servers.gpus")
        servers.append(RemoteServer(name=_text(s, "name", source, limit=64), role=_text(s, "role", source, limit=16),
                                    url=_text(s, "url", source, limit=300), shell=_text(s, "shell", source),
                                    argv=tuple(argv), env=tuple(env.items()), gpus=tuple(gpus)))
    proxy = plan.get("proxy")
    proxy_shell = _text(proxy, "shell", source) if isinstance(proxy, dict) else None
    proxy_url = _text(proxy, "url", source, limit=300) if isinstance(proxy, dict) else None
    warnings = plan.get("warnings") or []
    if not isinstance(warnings, list):
        raise InputError("expected a list", file=source, field="plan.warnings")
    checks = []
    for c in data["preflight"][:64]:
        if not isinstance(c, dict) or c.get("status") not in ("pass", "warn", "fail"):
            raise InputError("a preflight check without a status", file=source, field="preflight")
        checks.append((_text(c, "name", source, limit=40), str(c["status"]), _text(c, "reason", source, limit=400)))
    return RemotePlan(host=host, servers=tuple(servers), proxy_shell=proxy_shell, proxy_url=proxy_url,
                      warnings=tuple(safeio.shown(w, 400) for w in warnings[:32]), preflight=tuple(checks),
                      simulated=bool(plan.get("simulated")))


def combined_plan(plan: ClusterPlan, plans: dict[str, RemotePlan]) -> dict[str, Any]:
    """Every host's servers in one plan document (named ``HOST/NAME``): what a run measured on the layout keeps
    as its plan, so its serve flags are compared like a one-host layout's."""
    return {"topology": plan.topology, "endpoint": plan.endpoint, "simulated": all(p.simulated for p in plans.values()),
            "servers": [{"name": f"{h}/{s.name}", "role": s.role, "argv": list(s.argv), "env": dict(s.env), "host": h,
                         "url": s.url} for h, p in plans.items() for s in p.servers]}


def remote_plans(hosts: Hosts, plan: ClusterPlan, *, preflight: bool = True, timeout_s: float = 60.0
                 ) -> dict[str, RemotePlan]:
    """Every host's own plan (and preflight) of its part, asked at once. AppError naming the host when one cannot
    plan it (its one-line error) or cannot be reached."""
    def one(name: str) -> RemotePlan:
        t = hosts.transports[name]
        argv = t.entry.remote_cli("plan", *plan.part(name).request.to_argv(), "--json",
                                  *(() if preflight else ("--no-preflight",)))
        res = t.run(argv, timeout_s=timeout_s)
        if not res.ok:
            raise AppError(f"{name}: its planner refused its part: {last_line(res.stderr) or f'exit {res.rc}'}")
        return read_remote_plan(name, res.stdout)
    with ThreadPoolExecutor(max_workers=min(16, len(plan.parts))) as pool:
        return dict(zip(plan.hosts, pool.map(one, plan.hosts), strict=True))


def preflight_across(hosts: Hosts, plan: ClusterPlan, plans: dict[str, RemotePlan],
                     facts: dict[str, HostFacts] | None = None) -> list[tuple[str, str, str]]:
    """Each host's own checks (named with the host) and the checks across hosts (versions, the network path)."""
    out = [(f"{h}: {name}", status, reason) for h, p in plans.items() for name, status, reason in p.preflight]
    return out + cross_checks(plan, facts if facts is not None else hosts.facts(), hosts.vllm_versions())


@dataclass
class PartResult:
    host: str
    rc: int
    last: str = ""


async def _run_streaming(t: SshTransport, remote: list[str], on_line: Callable[[str, str], None],
                         timeout_s: float) -> PartResult:
    argv = t.argv(remote, shared=False)  # its own connection: a start of minutes never holds the shared one
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT, limit=MAX_LINE * 4,
                                                    start_new_session=True)
    except OSError as exc:
        raise Unreachable(t.name, "ssh-missing", f"cannot run ssh: {exc.strerror}") from None
    last = ""
    assert proc.stdout is not None

    async def pump() -> None:
        nonlocal last
        assert proc.stdout is not None
        while True:
            try:
                raw = await proc.stdout.readline()
            except ValueError:  # a line beyond the limit: skip what is left of it
                raw = await proc.stdout.read(MAX_LINE)
            if not raw:
                return
            line = safeio.shown(raw.decode("utf-8", "replace").rstrip("\n"), MAX_LINE)
            if line.strip():
                last = line
                on_line(t.name, line)
    try:
        await asyncio.wait_for(pump(), timeout_s)
        rc = await asyncio.wait_for(proc.wait(), 10.0)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return PartResult(t.name, 124, f"no end within {timeout_s:g} s")
    return PartResult(t.name, rc, last)


async def up_across(hosts: Hosts, plan: ClusterPlan, on_line: Callable[[str, str], None], *,
                    extra: Sequence[str] = (), timeout_s: float = 3600.0) -> list[PartResult]:
    """Start every host's part at once (its own ``disagg-tui up``); when one fails, stop them all. The results
    in the plan's order."""
    async def one(name: str) -> PartResult:
        t = hosts.transports[name]
        remote = t.entry.remote_cli("up", *plan.part(name).request.to_argv(), *extra)
        return await _run_streaming(t, remote, on_line, timeout_s)

    results = list(await asyncio.gather(*(one(n) for n in plan.hosts), return_exceptions=True))
    out: list[PartResult] = []
    for n, r in zip(plan.hosts, results, strict=True):
        if isinstance(r, PartResult):
            out.append(r)
        elif isinstance(r, Unreachable):
            out.append(PartResult(n, 255, r.one_line()))
        elif isinstance(r, BaseException):
            raise r
    if any(r.rc != 0 for r in out):
        await down_across(hosts, plan.hosts, on_line)
    return out


async def down_across(hosts: Hosts, names: Sequence[str], on_line: Callable[[str, str], None], *,
                      extra: Sequence[str] = (), timeout_s: float = 120.0) -> list[PartResult]:
    """Every host's ``disagg-tui down`` at once."""
    async def one(name: str) -> PartResult:
        t = hosts.transports[name]
        try:
            return await _run_streaming(t, t.entry.remote_cli("down", *extra), on_line, timeout_s)
        except Unreachable as err:
            return PartResult(name, 255, err.one_line())
    return list(await asyncio.gather(*(one(n) for n in names)))


__all__ = ["Hosts", "PartResult", "RemotePlan", "cluster_hosts", "combined_plan", "down_across", "preflight_across",
           "read_remote_plan", "remote_plans", "up_across"]
