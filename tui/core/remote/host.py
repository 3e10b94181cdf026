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
from tui.core.plan.hostfacts import GpuInfo, HostFacts, Toolchain, VllmInfo
from tui.core.plan.planner import LaunchPlan, ServerSpec
from tui.core.remote.ssh import SshTransport, last_line
from tui.core.remote.stream import RemoteFollow, RemoteWatch

#: the version of the ``hosts facts --json`` document
FACTS_FORMAT = 1
#: bytes of a ``hosts facts --json`` answer read at most (the facts of 8 GPUs are ~3 kB, of 72 with their NVLink
#: matrix ~60 kB)
MAX_FACTS_ANSWER = 1024 * 1024
#: GPUs one host's facts may list (the most one NVLink domain holds, as the inventory's limit)
MAX_GPUS = 72

#: the numbers of the facts and their ranges, by class and field
_RANGES: dict[type, dict[str, tuple[float, float]]] = {
    GpuInfo: {"index": (0, 1023), "memory_total_mib": (0, 1 << 30), "compute_capability": (0, 100)},
}
#: the names, versions and paths of the facts, by class and field, with the most characters each may have: printable
#: (no control character, escape or bidi mark) or the answer is refused. An error text (``vllm.error``) is a
#: message: kept as data, made printable where it is shown.
_NAMES: dict[type, dict[str, int]] = {
    HostFacts: {"driver": 64, "cuda_driver": 64, "hostname": 253},
    GpuInfo: {"name": 128, "uuid": 128},
    Toolchain: {"nvcc_on_path": 4096, "cuda_home": 4096, "nvcc_in_cuda_home": 4096, "nvcc_in_default": 4096},
    VllmInfo: {"executable": 4096, "resolved": 4096, "version": 128, "python": 4096, "nixl": 128,
               "flashinfer_cubin": 128, "flashinfer": 128},
}


def _check_fields(obj: Any, where: str) -> None:
    for name, (lo, hi) in _RANGES.get(type(obj), {}).items():
        v = getattr(obj, name)
        if not lo <= v <= hi:
            raise typedread.FieldError(f"out of range: {typedread.described(v)} (within {lo:g}..{hi:g})",
                                       (f"{where}{name}",))
    for name, limit in _NAMES.get(type(obj), {}).items():
        typedread.check_text(getattr(obj, name), (f"{where}{name}",), limit=limit)


def check_facts(facts: HostFacts) -> None:
    """A :class:`typedread.FieldError` naming the first field of ``facts`` out of its range, or a name, version or
    path in it that is not printable."""
    _check_fields(facts, "")
    if len(facts.gpus) > MAX_GPUS:
        raise typedread.FieldError(f"{len(facts.gpus)} GPUs (at most {MAX_GPUS})", ("gpus",))
    seen: set[int] = set()
    for i, g in enumerate(facts.gpus):
        _check_fields(g, f"gpus[{i}].")
        if g.index in seen:
            raise typedread.FieldError(f"GPU {g.index} is listed twice", (f"gpus[{i}].index",))
        seen.add(g.index)
    _check_fields(facts.toolchain, "toolchain.")
    if facts.vllm is not None:
        _check_fields(facts.vllm, "vllm.")
        if facts.vllm.error is not None and len(facts.vllm.error) > 4096:
            raise typedread.FieldError("a text of more than 4,096 characters", ("vllm.error",))
    if len(facts.nvlink) > MAX_GPUS or any(len(row) > MAX_GPUS for row in facts.nvlink):
        raise typedread.FieldError(f"more than {MAX_GPUS} rows or columns", ("nvlink",))
    for i, row in enumerate(facts.nvlink):
        for j, cell in enumerate(row):
            typedread.check_text(cell, (f"nvlink[{i}][{j}]",), limit=16)


def read_facts(text: str, source: str) -> HostFacts:
    """The ``HostFacts`` of a ``hosts facts --json`` answer (from outside: strict JSON, typed fields, numbers in
    their ranges, names and versions printable); InputError naming the field otherwise."""
    data = safeio.parse_json(text, source)
    if not isinstance(data, dict) or data.get("format") != FACTS_FORMAT:
        raise InputError("not a 'hosts facts --json' answer of this version", file=source, field="format")
    try:
        facts = typedread.read(HostFacts, data.get("facts"))
        check_facts(facts)
    except typedread.FieldError as exc:
        raise InputError(exc.reason, file=source, field="facts." + exc.field if exc.field else "facts") from None
    return facts


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
                                     timeout_s=self.timeout_s, max_bytes=MAX_FACTS_ANSWER)
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
