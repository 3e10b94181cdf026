"""A launch plan as data: each server's argv, environment, GPUs and ports, the proxy, and fixes to apply.

Made by :func:`tui.core.plan.planner.plan`; shown to the operator as copy-paste shell (secrets redacted: the shell
is what is shown, never what runs); recorded (:meth:`LaunchPlan.redacted_dict`) in the state file; changed by
playbook fixes (:class:`PlanFix`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tui.core import netaddr
from tui.core.redact import redact_argv, redact_data, redact_env
from tui.core.topology import Topology, parse_topology


def shell_line(env: Mapping[str, str], argv: Sequence[str]) -> str:
    """A command with its environment as one line of copy-paste shell, secrets redacted (what is shown)."""
    env_part = " ".join(f"{k}={shlex.quote(v)}" for k, v in redact_env(env).items())
    cmd = " ".join(shlex.quote(a) for a in redact_argv(argv))
    return f"{env_part} {cmd}" if env_part else cmd


@dataclass(frozen=True, slots=True)
class Workaround:
    """A change the planner made for this host or profile, and why."""

    change: str
    reason: str
    source: str = "host"  # host | profile | fix:<playbook id>


@dataclass(frozen=True, slots=True)
class ServerSpec:
    name: str  # server | prefill-0 | decode-0 ...
    role: str  # single | prefill | decode
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # what the plan adds to the environment, in display order
    gpus: tuple[int, ...]
    host: str
    port: int
    tp: int = 1
    dp: int = 1
    side_channel_port: int | None = None
    kv_role: str | None = None
    #: variables taken out of the environment the server inherits (a playbook fix's ``unset_env`` of a variable
    #: the plan itself does not set, such as Kubernetes' ``VLLM_PORT=tcp://...``)
    unset_env: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        host = netaddr.connect_host(self.host)  # bound on the wildcard: reached on this host's loopback
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def shell(self, *, display_exe: str | None = None) -> str:
        """The server's command as copy-paste shell, secrets redacted."""
        argv = list(self.argv)
        if display_exe is not None:
            argv[0] = display_exe
        line = shell_line(dict(self.env), argv)
        return f"env {' '.join(f'-u {shlex.quote(k)}' for k in self.unset_env)} {line}" if self.unset_env else line

    def side_channel_ports(self) -> list[int]:
        if self.side_channel_port is None:
            return []
        return [self.side_channel_port + r for r in range(self.dp)]


@dataclass(frozen=True, slots=True)
class ProxySpec:
    host: str
    port: int
    prefill: tuple[str, ...]  # server URLs
    decode: tuple[str, ...]
    name: str = "proxy"
    role: str = "proxy"

    @property
    def url(self) -> str:
        host = netaddr.connect_host(self.host)
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def args(self) -> list[str]:
        out = ["--host", self.host, "--port", str(self.port)]
        for u in self.prefill:
            out += ["--prefill", u]
        for u in self.decode:
            out += ["--decode", u]
        return out

    def shell(self) -> str:
        return shell_line({}, ["disagg-tui", "proxy", *self.args()])


@dataclass(frozen=True, slots=True)
class PlanFix:
    """A change to a plan, as data (what a playbook entry's fix or an operator's edit does)."""

    set_env: tuple[tuple[str, str], ...] = ()
    unset_env: tuple[str, ...] = ()
    add_args: tuple[str, ...] = ()  # each item one flag with its value, e.g. "--attention-backend TRITON_ATTN"
    remove_args: tuple[str, ...] = ()  # flag names; their value goes too
    roles: tuple[str, ...] = ()  # limit to these roles (empty: every server)

    @property
    def empty(self) -> bool:
        return not (self.set_env or self.unset_env or self.add_args or self.remove_args)

    def describe(self) -> list[str]:
        out = [f"set {k}={v}" for k, v in self.set_env]
        out += [f"unset {k}" for k in self.unset_env]
        out += [f"add {a}" for a in self.add_args]
        out += [f"remove {a}" for a in self.remove_args]
        return out


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    profile_id: str
    model: str
    served_name: str
    topology: str
    gpus: tuple[int, ...]
    servers: tuple[ServerSpec, ...]
    proxy: ProxySpec | None
    simulated: bool
    vllm_executable: str
    workarounds: tuple[Workaround, ...] = ()
    warnings: tuple[str, ...] = ()
    fixes_applied: tuple[str, ...] = ()
    host_label: str = ""
    shared_gpus: bool = False
    #: the serve knobs it was planned with (``[ROLE.]NAME``, value), in order; () for none
    knobs: tuple[tuple[str, str], ...] = ()

    @property
    def endpoint(self) -> str:
        """Where clients send requests: the proxy, or the single server."""
        if self.proxy is not None:
            return self.proxy.url
        return self.servers[0].url

    @property
    def topo(self) -> Topology:
        return parse_topology(self.topology)

    def server(self, name: str) -> ServerSpec | None:
        for s in self.servers:
            if s.name == name:
                return s
        return None

    def shell(self) -> str:
        """The whole layout as copy-paste shell (each server in the background, then the proxy), secrets
        redacted."""
        lines = [f"# {self.profile_id} as {self.topology} on GPU {','.join(map(str, self.gpus))}"
                 + (" (SIMULATED host)" if self.simulated else "")]
        for w in self.workarounds:
            lines.append(f"# {w.change}: {w.reason}")
        for s in self.servers:
            lines.append(f"# {s.name} ({s.role}) on {s.url}")
            lines.append(s.shell() + (" &" if len(self.servers) > 1 or self.proxy else ""))
        if self.proxy is not None:
            lines.append(f"# proxy on {self.proxy.url}: prefill first, then decode with the KV-transfer parameters")
            lines.append(self.proxy.shell())
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile_id": self.profile_id, "model": self.model, "served_name": self.served_name,
            "topology": self.topology, "gpus": list(self.gpus), "simulated": self.simulated,
            "vllm_executable": self.vllm_executable, "endpoint": self.endpoint, "host_label": self.host_label,
            "servers": [
                {"name": s.name, "role": s.role, "argv": list(s.argv), "env": dict(s.env), "gpus": list(s.gpus),
                 "host": s.host, "port": s.port, "tp": s.tp, "dp": s.dp, "side_channel_port": s.side_channel_port,
                 "kv_role": s.kv_role, "url": s.url, "shell": s.shell(),
                 **({"unset_env": list(s.unset_env)} if s.unset_env else {})}
                for s in self.servers
            ],
            "proxy": None if self.proxy is None else {
                "host": self.proxy.host, "port": self.proxy.port, "prefill": list(self.proxy.prefill),
                "decode": list(self.proxy.decode), "url": self.proxy.url, "shell": self.proxy.shell()},
            "workarounds": [{"change": w.change, "reason": w.reason, "source": w.source} for w in self.workarounds],
            "warnings": list(self.warnings),
            "fixes_applied": list(self.fixes_applied),
            "shared_gpus": self.shared_gpus,
            **({"knobs": dict(self.knobs)} if self.knobs else {}),
        }

    def redacted_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` with every secret redacted (each server's environment and argv by name and by value, the
        texts by value): what is written (the state file, ``plan --json``) or shown. A plan rebuilt from it gets
        its secrets back with :func:`tui.core.redact.restore_env`."""
        out: dict[str, Any] = redact_data(self.to_dict())
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaunchPlan:
        servers = tuple(
            ServerSpec(name=s["name"], role=s["role"], argv=tuple(s["argv"]),
                       env=tuple((s.get("env") or {}).items()),
                       gpus=tuple(s["gpus"]), host=s["host"], port=int(s["port"]), tp=int(s.get("tp", 1)),
                       dp=int(s.get("dp", 1)), side_channel_port=s.get("side_channel_port"),
                       kv_role=s.get("kv_role"), unset_env=tuple(s.get("unset_env") or ()))
            for s in d["servers"]
        )
        p = d.get("proxy")
        proxy = None if p is None else ProxySpec(host=p["host"], port=int(p["port"]), prefill=tuple(p["prefill"]),
                                                 decode=tuple(p["decode"]))
        return cls(
            profile_id=d["profile_id"], model=d["model"], served_name=d["served_name"], topology=d["topology"],
            gpus=tuple(d["gpus"]), servers=servers, proxy=proxy, simulated=bool(d["simulated"]),
            vllm_executable=d.get("vllm_executable", "vllm"), host_label=d.get("host_label", ""),
            workarounds=tuple(Workaround(w["change"], w["reason"], w.get("source", "host"))
                              for w in d.get("workarounds", [])),
            warnings=tuple(d.get("warnings", [])), fixes_applied=tuple(d.get("fixes_applied", [])),
            shared_gpus=bool(d.get("shared_gpus", False)),
            knobs=tuple((str(k), str(v)) for k, v in (d.get("knobs") or {}).items()),
        )
