"""One tick of another host's ``watch --json``, read as hostile input: what the console draws of that host.

The tick is a line from another machine (``RemoteTick.tick``, a JSON object the stream's strict parser already
bounded: no NaN, no deep nesting, at most 1 MiB). :func:`read_tick` checks it field by field through ``typedread``
against the shape ``tui.core.telemetry.view.tick_dict`` writes (the one writer of that line): every number within
the range a measurement of its kind can have (:data:`_RANGES`: a utilisation 0-100 %, a temperature, a pid, a
status code), every name or version (a host name, a GPU's name and UUID, a server's name, role, URL, vLLM version
and model, the layout's words: :data:`_NAMES`) printable (no control character, no terminal escape, no bidi mark:
refused, not escaped, so that a name is never drawn as something else). Texts that are messages (a server's error,
the host's errors, a process's command name, which any user of that host may choose) are kept as data and made
printable by the sink when drawn. It keeps at most :data:`MAX_GPUS` GPUs, :data:`MAX_SERVERS` servers and
:data:`MAX_PROCESSES` processes a GPU and turns what is left into the console's own types (``GpuSample``,
``ServerHealth``, ``ServerFigures``), so a remote GPU or server is drawn by the same code as a local one. A tick
of the wrong shape is a :class:`TickError`: one line naming the host and the field; the caller skips it and the
next good tick is drawn.

No Textual here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tui.core import typedread
from tui.core.errors import printable
from tui.core.telemetry.derive import DisaggProof, KvTransferFigures, ServerFigures
from tui.core.telemetry.events import ServerHealth
from tui.core.telemetry.gpu import GpuProcess, GpuSample

#: GPUs of one host drawn (the most one NVLink domain holds, as the inventory's limit)
MAX_GPUS = 72
#: servers of one host's layout drawn
MAX_SERVERS = 64
#: processes of one GPU kept
MAX_PROCESSES = 64
#: characters kept of a name, a label, an error
NAME_CHARS = 64
TEXT_CHARS = 300
#: epoch seconds a tick's time may hold (as typedread's time fields)
TIME_MAX = typedread.TIME_MAX


class TickError(ValueError):
    """A tick of the wrong shape: one line naming the host (when known) and the field."""

    def __init__(self, reason: str, field: str = "", host: str = "") -> None:
        self.reason = reason
        self.field = field
        self.host = host
        where = f"field '{field}': " if field else ""
        super().__init__(printable(f"{host + ': ' if host else ''}{where}{reason}", 400))

    def of(self, host: str) -> TickError:
        """The same error naming ``host``."""
        return TickError(self.reason, self.field, host)


# --- the wire shape (what tick_dict writes; a newer version's extra keys are ignored) ----------------------------

@dataclass(frozen=True, slots=True)
class _Host:
    label: str = ""
    simulated: bool = False
    hostname: str = ""


@dataclass(frozen=True, slots=True)
class _Process:
    pid: int = 0
    name: str | None = None
    memory: int | None = None
    kind: str | None = None
    owner: str | None = None
    role: str | None = None
    tp_rank: int | None = None
    dp_rank: int | None = None
    mapping: str | None = None


@dataclass(frozen=True, slots=True)
class _Gpu:
    index: int
    uuid: str = ""
    name: str = ""
    ts: float | None = None
    utilization_gpu: float | None = None
    utilization_memory: float | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    pstate: int | None = None
    throttle: tuple[str, ...] | None = None
    processes: tuple[_Process, ...] = ()


@dataclass(frozen=True, slots=True)
class _BySource:
    computed: float | None = None
    cached: float | None = None
    kv_transfer: float | None = None


@dataclass(frozen=True, slots=True)
class _Kv:
    transfers: float | None = None
    transfers_per_s: float | None = None
    bytes: float | None = None
    bytes_per_s: float | None = None
    xfer_time_mean_ms: float | None = None
    xfer_time_p90_ms: float | None = None
    failed_transfers: float | None = None
    failed_notifications: float | None = None
    expired_requests: float | None = None


@dataclass(frozen=True, slots=True)
class _Disagg:
    verdict: str = ""
    external_kv_transfer_tokens: float | None = None
    local_compute_tokens: float | None = None
    local_cache_hit_tokens: float | None = None
    external_share: float | None = None
    explanation: str = ""


@dataclass(frozen=True, slots=True)
class _Figures:
    ts: float | None = None
    span_s: float | None = None
    scrapes: int | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    prompt_tokens_per_s_by_source: _BySource | None = None
    kv_transfer: _Kv | None = None
    disaggregation: _Disagg | None = None


@dataclass(frozen=True, slots=True)
class _Server:
    name: str
    endpoint: str = ""
    role: str = ""
    health: str = "unknown"
    latency_ms: float | None = None
    status_code: int | None = None
    error: str | None = None
    since: float | None = None
    version: str | None = None
    model: str | None = None
    metrics: _Figures | None = None
    metrics_error: str | None = None


@dataclass(frozen=True, slots=True)
class _Layout:
    id: str = ""
    topology: str = ""
    profile: str = ""
    status: str = ""
    exited: tuple[str, ...] = ()
    endpoint: str | None = None


@dataclass(frozen=True, slots=True)
class _Tick:
    time: float = 0.0
    host: _Host | None = None
    layout: _Layout | None = None
    gpus: tuple[Any, ...] = ()
    servers: tuple[Any, ...] = ()
    errors: tuple[str, ...] = ()


#: the range of each number of the wire shape, by class and field (what no measurement of its kind leaves)
_BYTES = (0.0, float(1 << 50))  # a PiB
_RATE = (0.0, 1e15)
_COUNT = (0.0, 1e18)
_RANGES: dict[type, dict[str, tuple[float, float]]] = {
    _Gpu: {"index": (0, 1023), "utilization_gpu": (0, 100), "utilization_memory": (0, 100), "memory_used": _BYTES,
           "memory_total": _BYTES, "power_w": (0, 1e5), "power_limit_w": (0, 1e5), "temperature_c": (-100, 300),
           "sm_clock_mhz": (0, 1e5), "mem_clock_mhz": (0, 1e5), "pstate": (0, 32)},
    _Process: {"pid": (0, typedread.PID_MAX), "memory": _BYTES, "tp_rank": (0, 1 << 20), "dp_rank": (0, 1 << 20)},
    _Server: {"latency_ms": (0, 1e9), "status_code": (0, 999)},
    _Figures: {"span_s": (0, 1e9), "scrapes": _COUNT, "requests_running": _COUNT, "requests_waiting": _COUNT,
               "kv_cache_usage": (0, 1), "prompt_tokens_per_s": _RATE, "generation_tokens_per_s": _RATE},
    _BySource: {"computed": _RATE, "cached": _RATE, "kv_transfer": _RATE},
    _Kv: {"transfers": _COUNT, "transfers_per_s": _RATE, "bytes": _COUNT, "bytes_per_s": _RATE,
          "xfer_time_mean_ms": (0, 1e9), "xfer_time_p90_ms": (0, 1e9), "failed_transfers": _COUNT,
          "failed_notifications": _COUNT, "expired_requests": _COUNT},
    _Disagg: {"external_kv_transfer_tokens": _COUNT, "local_compute_tokens": _COUNT, "local_cache_hit_tokens": _COUNT,
              "external_share": (0, 1)},
}
#: the names and versions of the wire shape, by class and field, and the most characters each may have: printable
#: or the tick is refused (a list field: each of its items)
_NAMES: dict[type, dict[str, int]] = {
    _Host: {"label": 1024, "hostname": 253},
    _Gpu: {"uuid": 128, "name": 128, "throttle": 64},
    _Process: {"kind": 32, "owner": 256, "role": 32, "mapping": 32},
    _Server: {"name": 256, "endpoint": 1024, "role": 32, "health": 32, "version": 128, "model": 1024},
    _Layout: {"id": 256, "topology": 64, "profile": 256, "status": 32, "exited": 256, "endpoint": 1024},
    _Disagg: {"verdict": 64},
}


# --- what the console keeps --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RemoteServer:
    name: str
    role: str
    url: str
    health: ServerHealth
    figures: ServerFigures | None
    metrics_error: str | None


@dataclass(frozen=True, slots=True)
class RemoteLayout:
    id: str
    topology: str
    profile: str
    status: str
    exited: tuple[str, ...]
    endpoint: str


@dataclass(frozen=True, slots=True)
class HostTick:
    """One remote tick, checked: the host's words, its GPUs and servers as the console's own types."""

    time: float
    label: str
    hostname: str
    simulated: bool
    gpus: tuple[GpuSample, ...]
    servers: tuple[RemoteServer, ...]
    layout: RemoteLayout | None
    errors: tuple[str, ...]
    #: GPUs or servers beyond the caps, left out
    cut: int = 0


def _text(value: str | None, limit: int = NAME_CHARS) -> str:
    return printable((value or "")[: limit * 4])[:limit]


def _pct(x: float | None) -> float | None:
    return None if x is None else min(max(float(x), 0.0), 100.0)


def _bound(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _join(where: str, field: str) -> str:
    return f"{where}.{field}" if where and field and not field.startswith("[") else where + field


def _checked(obj: Any, where: str) -> None:
    """Every range and name of ``obj`` (a wire-shape dataclass typedread built) and of those inside it."""
    for name, (lo, hi) in _RANGES.get(type(obj), {}).items():
        v = getattr(obj, name)
        if v is not None and not lo <= v <= hi:
            raise TickError(f"out of range: {typedread.described(v)} (within {_bound(lo)}..{_bound(hi)})",
                            _join(where, name))
    for name, limit in _NAMES.get(type(obj), {}).items():
        v = getattr(obj, name)
        for i, text in enumerate(v) if isinstance(v, tuple) else ((None, v),):
            try:
                typedread.check_text(text, (), limit=limit)
            except typedread.FieldError as exc:
                raise TickError(exc.reason, _join(where, name + (f"[{i}]" if i is not None else ""))) from None
    for name in getattr(obj, "__dataclass_fields__", {}):
        v = getattr(obj, name)
        if dataclasses.is_dataclass(v):
            _checked(v, _join(where, name))
        elif isinstance(v, tuple):
            for i, item in enumerate(v):
                if dataclasses.is_dataclass(item):
                    _checked(item, _join(where, f"{name}[{i}]"))


def _read(cls: type[Any], data: Any, where: str) -> Any:
    try:
        obj = typedread.read(cls, data)
    except typedread.FieldError as exc:
        raise TickError(exc.reason, _join(where, exc.field)) from None
    _checked(obj, where)
    return obj


def _gpu(g: _Gpu, tick_time: float) -> GpuSample:
    procs = tuple(GpuProcess(pid=p.pid, memory=p.memory, kind=_text(p.kind, 24) or "compute",
                             name=_text(p.name), owner=_text(p.owner) or None, role=_text(p.role, 16) or None,
                             tp_rank=p.tp_rank, dp_rank=p.dp_rank, mapping=_text(p.mapping, 16) or "unknown")
                  for p in g.processes[:MAX_PROCESSES])
    return GpuSample(index=g.index, uuid=_text(g.uuid, 80), name=_text(g.name), ts=g.ts or tick_time,
                     util_gpu=_pct(g.utilization_gpu), util_mem=_pct(g.utilization_memory),
                     mem_used=g.memory_used, mem_total=g.memory_total, power_w=g.power_w,
                     power_limit_w=g.power_limit_w, temp_c=g.temperature_c, sm_clock_mhz=g.sm_clock_mhz,
                     mem_clock_mhz=g.mem_clock_mhz, pstate=g.pstate,
                     throttle=tuple(_text(t, 32) for t in g.throttle[:8]) if g.throttle is not None else None,
                     processes=procs)


def _figures(m: _Figures, tick_time: float) -> ServerFigures:
    by = m.prompt_tokens_per_s_by_source
    kv = m.kv_transfer
    d = m.disaggregation

    def ms(x: float | None) -> float | None:
        return None if x is None else x / 1000.0

    kv_fig = None if kv is None else KvTransferFigures(
        transfers=kv.transfers or 0.0, transfers_per_s=kv.transfers_per_s, bytes=kv.bytes or 0.0,
        bytes_per_s=kv.bytes_per_s, xfer_time_mean_s=ms(kv.xfer_time_mean_ms), xfer_time_p90_s=ms(kv.xfer_time_p90_ms),
        failed_transfers=kv.failed_transfers or 0.0, failed_notifications=kv.failed_notifications or 0.0,
        expired_requests=kv.expired_requests or 0.0)
    proof = None if d is None else DisaggProof(
        verdict=_text(d.verdict, 40), external_tokens=d.external_kv_transfer_tokens or 0.0,
        local_compute_tokens=d.local_compute_tokens or 0.0, cache_hit_tokens=d.local_cache_hit_tokens or 0.0,
        external_share=d.external_share, explanation=_text(d.explanation, TEXT_CHARS))
    return ServerFigures(ts=m.ts or tick_time, span_s=m.span_s or 0.0, scrapes=m.scrapes or 0,
                         running=m.requests_running, waiting=m.requests_waiting, kv_cache_usage=m.kv_cache_usage,
                         prompt_tps=m.prompt_tokens_per_s, generation_tps=m.generation_tokens_per_s,
                         prompt_computed_tps=by.computed if by is not None else None,
                         prompt_cached_tps=by.cached if by is not None else None,
                         prompt_transferred_tps=by.kv_transfer if by is not None else None,
                         kv_transfer=kv_fig, disagg=proof)


def _server(s: _Server, tick_time: float) -> RemoteServer:
    name, role, url = _text(s.name), _text(s.role, 16), _text(s.endpoint, 120)
    health = ServerHealth(ts=tick_time, server=name, endpoint=url, role=role, state=_text(s.health, 16),
                          latency_ms=s.latency_ms, status_code=s.status_code,
                          error=_text(s.error, TEXT_CHARS) if s.error else None, since=s.since,
                          version=_text(s.version, 40) or None, model=_text(s.model, 120) or None)
    figures = _figures(s.metrics, tick_time) if s.metrics is not None else None
    return RemoteServer(name=name, role=role, url=url, health=health, figures=figures,
                        metrics_error=_text(s.metrics_error, TEXT_CHARS) if s.metrics_error else None)


def read_tick(data: Any, host: str = "") -> HostTick:
    """The checked tick of ``host`` (a :class:`TickError` naming the host and the field when it is not one)."""
    try:
        return _read_tick(data)
    except TickError as err:
        raise err.of(host) from None


def _read_tick(data: Any) -> HostTick:
    if not isinstance(data, dict):
        raise TickError(f"not a JSON object but {typedread.described(data)}")
    t: _Tick = _read(_Tick, data, "")
    if not 0 <= t.time <= TIME_MAX:
        raise TickError(f"out of range: {t.time!r}", "time")
    h = t.host or _Host()
    gpus_raw = t.gpus[:MAX_GPUS]
    servers_raw = t.servers[:MAX_SERVERS]
    gpus: list[GpuSample] = []
    seen: set[int] = set()
    for i, g in enumerate(gpus_raw):
        sample = _gpu(_read(_Gpu, g, f"gpus[{i}]"), t.time)
        if sample.index in seen:
            raise TickError(f"GPU {sample.index} is listed twice", f"gpus[{i}].index")
        seen.add(sample.index)
        gpus.append(sample)
    servers: list[RemoteServer] = []
    names: set[str] = set()
    for i, s in enumerate(servers_raw):
        server = _server(_read(_Server, s, f"servers[{i}]"), t.time)
        if server.name in names or not server.name:
            continue  # a second row of one name (or none): the first is drawn
        names.add(server.name)
        servers.append(server)
    lay = t.layout
    layout = None if lay is None else RemoteLayout(
        id=_text(lay.id, 120), topology=_text(lay.topology, 40), profile=_text(lay.profile, 80),
        status=_text(lay.status, 16), exited=tuple(_text(x) for x in lay.exited[:MAX_SERVERS]),
        endpoint=_text(lay.endpoint, 120))
    return HostTick(time=t.time, label=_text(h.label, TEXT_CHARS), hostname=_text(h.hostname), simulated=h.simulated,
                    gpus=tuple(sorted(gpus, key=lambda g: g.index)), servers=tuple(servers), layout=layout,
                    errors=tuple(_text(e, TEXT_CHARS) for e in t.errors[:8]),
                    cut=len(t.gpus) - len(gpus_raw) + len(t.servers) - len(servers_raw))


