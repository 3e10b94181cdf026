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
import re
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tui.core import netaddr, safeio, typedread, vllmargv
from tui.core.errors import AppError, InputError
from tui.core.plan.cluster import ClusterHost, ClusterPlan, cross_checks
from tui.core.plan.hostfacts import HostFacts
from tui.core.remote.check import version_in
from tui.core.remote.host import RemoteHost
from tui.core.remote.inventory import Inventory
from tui.core.remote.ssh import SshTransport, Unreachable, last_line, size_text
from tui.core.remote.stream import end_session

#: the longest line of a remote ``up``'s progress kept (a longer one is shown cut, the rest of it skipped)
MAX_LINE = 4096
#: bytes of a remote ``up``/``down``'s progress read at most: past it the command is stopped (a real start of many
#: servers prints well under a MiB)
MAX_PROGRESS = 64 * 1024 * 1024
#: servers one host's plan may list, words of a server's argv, variables of its environment
MAX_SERVERS = 256
MAX_WORDS = 4096
MAX_VARS = 1024
#: bytes of a host's ``plan --json`` answer read at most (a plan of 8 servers is ~20 kB)
MAX_PLAN_ANSWER = 4 * 1024 * 1024
#: bytes of a ``--version`` answer read at most
MAX_VERSION_ANSWER = 64 * 1024


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
            res = t.run([t.entry.vllm, "--version"], timeout_s=60.0, max_bytes=MAX_VERSION_ANSWER)
            return version_in(res.stdout) if res.ok else None
        with ThreadPoolExecutor(max_workers=min(16, len(self.names))) as pool:
            return dict(zip(self.names, pool.map(one, self.names), strict=True))

    def close(self) -> None:
        for t in self.transports.values():
            t.close()


# --- a host's ``plan --json`` answer as it comes over the wire (what ``LaunchPlan.redacted_dict`` writes; a newer
# version's extra keys are ignored) --------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _WireServer:
    name: str
    role: str
    url: str
    shell: str
    argv: tuple[str, ...]
    env: dict[str, str]
    gpus: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class _WireProxy:
    url: str
    shell: str


@dataclass(frozen=True, slots=True)
class _WirePlan:
    servers: tuple[Any, ...]
    proxy: _WireProxy | None = None
    warnings: tuple[str, ...] | None = None
    simulated: bool = False


@dataclass(frozen=True, slots=True)
class _WireCheck:
    name: str
    status: str
    reason: str


@dataclass(frozen=True, slots=True)
class _WireAnswer:
    plan: _WirePlan
    preflight: tuple[Any, ...]


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


def _typed(cls: type[Any], data: Any, source: str, where: str) -> Any:
    try:
        return typedread.read(cls, data)
    except typedread.FieldError as exc:
        raise InputError(exc.reason, file=source, field=".".join(p for p in (where, exc.field) if p)) from None


def _name(value: str, source: str, field: str, limit: int) -> str:
    """A name from the answer (a server's, a check's): printable and short, refused otherwise (never escaped: a
    name is never drawn as something else)."""
    _word(value, source, field, limit)
    if not value.strip():
        raise InputError("empty", file=source, field=field)
    return value


def _same_host(a: str, b: str) -> bool:
    pa, pb = netaddr.parse_host(a), netaddr.parse_host(b)
    if pa is not None or pb is not None:
        return pa == pb
    return a.strip().lower().rstrip(".") == b.strip().lower().rstrip(".")


def _url_of(value: str, source: str, field: str, address: str | None) -> str:
    """A server's or the proxy's URL: ``http://HOST:PORT``, its host never a wildcard (``0``, ``::0``... reach the
    asking host itself) and, when the host's ``address`` is known, that address (its planner binds nothing else)."""
    url = _name(value, source, field, 300)
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if parts.scheme not in ("http", "https") or not host or port is None:
        raise InputError(f"not an http://HOST:PORT URL: {safeio.shown(url, 80)!r}", file=source, field=field)
    if netaddr.is_wildcard(host):
        raise InputError(f"{netaddr.wildcard_why(host)}: an address no other host can use", file=source, field=field)
    if address is not None and not _same_host(host, address):
        raise InputError(f"{safeio.shown(host, 80)!r} is not this host's address {address}", file=source,
                         field=field)
    return url


def read_remote_plan(host: str, text: str, address: str | None = None, *, head: str | None = None) -> RemotePlan:
    """A host's ``plan --json`` answer (from outside: strict, bounded, typed; names and URLs refused unless
    printable, other texts made printable). ``address``: the host's address in the layout, which every URL of its
    answer must name; ``head``: the data-parallel head's address, which a ``--headless`` part's engines name (they
    have no HTTP endpoint of their own: they are ready when the head is)."""
    source = f"{host}: plan --json"
    data = safeio.parse_json(text, source)
    if not isinstance(data, dict) or not isinstance(data.get("plan"), dict):
        raise InputError("not a 'plan --json' answer", file=source, field="plan")
    answer: _WireAnswer = _typed(_WireAnswer, data, source, "")
    plan = answer.plan
    if not 1 <= len(plan.servers) <= MAX_SERVERS:
        raise InputError(f"expected 1 to {MAX_SERVERS} servers", file=source, field="plan.servers")
    servers = []
    names: set[str] = set()
    for i, raw in enumerate(plan.servers):
        where = f"plan.servers[{i}]"
        s: _WireServer = _typed(_WireServer, raw, source, where)
        name = _name(s.name, source, f"{where}.name", 64)
        if name in names:
            raise InputError(f"server {name!r} is listed twice", file=source, field=f"{where}.name")
        names.add(name)
        role = _name(s.role, source, f"{where}.role", 16)
        if not 1 <= len(s.argv) <= MAX_WORDS:
            raise InputError(f"a server's argv is 1 to {MAX_WORDS} words", file=source, field=f"{where}.argv")
        for k, w in enumerate(s.argv):
            _word(w, source, f"{where}.argv[{k}]")
        if len(s.env) > MAX_VARS:
            raise InputError(f"a server's env is at most {MAX_VARS} variables", file=source, field=f"{where}.env")
        if len(s.argv) < 3 or s.argv[1] != "serve":
            raise InputError("a server's command line is 'vllm serve MODEL [flags]'", file=source,
                             field=f"{where}.argv")
        vllmargv.check_model(s.argv[2], field=f"{where}.argv[2]", file=source)
        vllmargv.check_tail(s.argv[3:], vllmargv.Source.REMOTE, field=f"{where}.argv", file=source)
        for var, value in s.env.items():
            if not _ENV_NAME.match(var):
                raise InputError(f"not a variable name: {safeio.shown(var, 40)!r}", file=source, field=f"{where}.env")
            _word(value, source, f"{where}.env.{var}", limit=4000)
            vllmargv.check_env(var, value, vllmargv.Source.REMOTE, field=f"{where}.env.{var}", file=source)
        gpus = s.gpus or ()
        if len(gpus) > 72 or not all(0 <= g < 72 for g in gpus) or len(set(gpus)) != len(gpus):
            raise InputError("a server's GPUs are at most 72 distinct indices 0-71", file=source,
                             field=f"{where}.gpus")
        own = head if role == "headless" and head else address
        servers.append(RemoteServer(name=name, role=role, url=_url_of(s.url, source, f"{where}.url", own),
                                    shell=safeio.shown(s.shell, 2000), argv=s.argv, env=tuple(s.env.items()),
                                    gpus=gpus))
    proxy = plan.proxy
    proxy_url = None if proxy is None else _url_of(proxy.url, source, "plan.proxy.url", address)
    checks = []
    for i, raw in enumerate(answer.preflight[:64]):
        c: _WireCheck = _typed(_WireCheck, raw, source, f"preflight[{i}]")
        if c.status not in ("pass", "warn", "fail"):
            raise InputError(f"a check's status is pass, warn or fail, not {safeio.shown(c.status, 20)!r}",
                             file=source, field=f"preflight[{i}].status")
        checks.append((_name(c.name, source, f"preflight[{i}].name", 64), c.status, safeio.shown(c.reason, 400)))
    return RemotePlan(host=host, servers=tuple(servers), proxy_shell=None if proxy is None else
                      safeio.shown(proxy.shell, 2000), proxy_url=proxy_url,
                      warnings=tuple(safeio.shown(w, 400) for w in (plan.warnings or ())[:32]),
                      preflight=tuple(checks), simulated=plan.simulated)


def _word(value: str, source: str, field: str, limit: int = 2000) -> None:
    """A word of a server's argv or a variable's value: at most ``limit`` characters, no control character (a
    newline or an escape is in no flag or path a planner writes)."""
    try:
        typedread.check_text(value, (), limit=limit)
    except typedread.FieldError as exc:
        raise InputError(exc.reason, file=source, field=field) from None


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
        res = t.run(argv, timeout_s=timeout_s, max_bytes=MAX_PLAN_ANSWER)
        if not res.ok:
            raise AppError(f"{name}: its planner refused its part: {last_line(res.stderr) or f'exit {res.rc}'}")
        part = plan.part(name)
        return read_remote_plan(name, res.stdout, part.address, head=part.request.dp_address)
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


async def bounded_lines(reader: asyncio.StreamReader, max_line: int) -> AsyncIterator[tuple[bytes, bool]]:
    """The lines of ``reader`` as they come, each with whether it was cut: a line longer than ``max_line`` bytes is
    yielded once, its first ``max_line`` bytes, and the rest of it (up to its newline, however far) skipped as it
    is read; nothing more than one chunk beyond ``max_line`` is ever held."""
    held = bytearray()
    skipping = False
    while chunk := await reader.read(64 * 1024):
        start = 0
        while start < len(chunk):
            nl = chunk.find(b"\n", start)
            end = len(chunk) if nl < 0 else nl
            if not skipping:
                held += chunk[start:end]
                if len(held) > max_line:
                    yield bytes(held[:max_line]), True
                    held.clear()
                    skipping = True
                elif nl >= 0:
                    yield bytes(held), False
                    held.clear()
            if nl < 0:
                break
            skipping = False
            start = nl + 1
    if held and not skipping:
        yield bytes(held), False


async def _run_streaming(t: SshTransport, remote: list[str], on_line: Callable[[str, str], None],
                         timeout_s: float) -> PartResult:
    argv = t.argv(remote, shared=False)  # its own connection: a start of minutes never holds the shared one
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT,
                                                    start_new_session=True)
    except OSError as exc:
        raise Unreachable(t.name, "ssh-missing", f"cannot run ssh: {exc.strerror}") from None
    last = ""
    total = 0
    assert proc.stdout is not None

    async def pump() -> bool:
        """Hand on each line; False when the output went past MAX_PROGRESS."""
        nonlocal last, total
        assert proc.stdout is not None
        async for raw, cut in bounded_lines(proc.stdout, MAX_LINE):
            total += len(raw) + 1
            if total > MAX_PROGRESS:
                return False
            line = safeio.shown(raw.decode("utf-8", "replace").rstrip("\r"), MAX_LINE) + (" …(cut)" if cut else "")
            if line.strip():
                last = line
                on_line(t.name, line)
        return True

    try:
        within = await asyncio.wait_for(pump(), timeout_s)
        if not within:
            await end_session(proc)
            return PartResult(t.name, 125, f"the output of `{t.what(remote)}` from {t.name} exceeded "
                                           f"{size_text(MAX_PROGRESS)}: stopped")
        rc = await asyncio.wait_for(proc.wait(), 10.0)
    except TimeoutError:
        await end_session(proc)
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
