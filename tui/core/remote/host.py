"""A :class:`~tui.core.host.base.Host` on another machine, reached over SSH: what the remote side says of itself.

``facts`` (the remote ``disagg-tui hosts facts --json``: the very ``HostFacts`` its own planner and preflight see,
read back through ``typedread``), telemetry as the remote ``watch --json`` stream (:meth:`RemoteHost.watch`), and
its layout's launches, logs and diagnoses as the remote ``follow --json`` stream (:meth:`RemoteHost.follow`).
Servers there are started and stopped by that host's own ``disagg-tui up``/``down`` (``tui.core.remote.cluster``:
its supervisor, state file and logs stay there), so ``server_command`` and ``nvml`` refuse in one line: nothing
here spawns a process on another host or reads its GPUs but through its own commands.
"""

from __future__ import annotations

from typing import Any

from tui.core import safeio, typedread
from tui.core.errors import AppError, InputError
from tui.core.host.base import Command, Host
from tui.core.plan.hostfacts import HostFacts
from tui.core.plan.planner import LaunchPlan, ServerSpec
from tui.core.remote.ssh import SshTransport, last_line
from tui.core.remote.stream import RemoteFollow, RemoteWatch

#: the version of the ``hosts facts --json`` document
FACTS_FORMAT = 1


def read_facts(text: str, source: str) -> HostFacts:
    """The ``HostFacts`` of a ``hosts facts --json`` answer (a file from outside: strict JSON, typed fields)."""
    data = safeio.parse_json(text, source)
    if not isinstance(data, dict) or data.get("format") != FACTS_FORMAT:
        raise InputError("not a 'hosts facts --json' answer of this version", file=source, field="format")
    try:
        return typedread.read(HostFacts, data.get("facts"))
    except typedread.FieldError as exc:
        raise InputError(exc.reason, file=source, field="facts." + exc.field if exc.field else "facts") from None


class RemoteHost(Host):
    """Another host of the inventory."""

    def __init__(self, transport: SshTransport, *, timeout_s: float = 30.0) -> None:
        self.transport = transport
        self.timeout_s = timeout_s
        self.simulated = transport.entry.sim
        self.notes: list[str] = []
        self._facts: HostFacts | None = None

    @property
    def name(self) -> str:
        return self.transport.name

    @property
    def facts(self) -> HostFacts:
        if self._facts is None:
            res = self.transport.run(self.transport.entry.remote_cli("hosts", "facts", "--json"),
                                     timeout_s=self.timeout_s)
            if not res.ok:
                raise AppError(f"{self.name}: 'disagg-tui hosts facts --json' failed there: "
                               f"{last_line(res.stderr) or res.rc}",
                               "is the remote disagg-tui of this version? (disagg-tui hosts check)")
            self._facts = read_facts(res.stdout, f"{self.name}: hosts facts --json")
            self.simulated = self._facts.simulated
        return self._facts

    def watch(self, rate_hz: float = 2.0, **kwargs: Any) -> RemoteWatch:
        """Its telemetry: the remote ``watch --json``, one SSH session, reconnected with backoff."""
        return RemoteWatch(self.transport, rate_hz=rate_hz, **kwargs)

    def follow(self, **kwargs: Any) -> RemoteFollow:
        """Its layout's lifecycle: the remote ``follow --json`` (launches, every log line, phases, diagnoses), one
        SSH session, reconnected with backoff, each log line once."""
        return RemoteFollow(self.transport, **kwargs)

    def server_command(self, spec: ServerSpec, plan: LaunchPlan, profile_json: dict[str, Any] | None = None
                       ) -> Command:
        raise AppError(f"{self.name}: servers on another host are started by its own 'disagg-tui up'",
                       "plan and start a layout across hosts with 'disagg-tui up --hosts A,B'")

    def nvml(self) -> Any:
        raise AppError(f"{self.name}: another host's GPUs are read by its own watch stream, not over NVML here",
                       "use RemoteHost.watch()")

    def close(self) -> None:
        self.transport.close()
