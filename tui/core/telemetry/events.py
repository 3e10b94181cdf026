"""Telemetry events: GPU samples, server health, server metrics (round-trip through JSON like every event)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tui.core.events import Event
from tui.core.telemetry.derive import ServerFigures
from tui.core.telemetry.gpu import GpuSample

# health states
UP = "up"  # /health answered 200
DOWN = "down"  # connection refused (or the host unreachable)
STARTING = "starting"  # refused while the supervisor says the server is starting
UNRESPONSIVE = "unresponsive"  # no answer within the timeout (shorter than the polling period)
DEAD = "dead"  # 503: vLLM's engine died (EngineDeadError), the API process still answers
ERROR = "error"  # any other answer (404, 500, a broken connection)
HEALTH_STATES = (UP, DOWN, STARTING, UNRESPONSIVE, DEAD, ERROR)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSampled(Event):
    """One reading of every GPU of the host."""

    kind: ClassVar[str] = "gpu_sampled"
    host: str  # the host label
    simulated: bool
    gpus: tuple[GpuSample, ...]
    error: str | None = None  # set when the whole sample failed (NVML gone); gpus is then empty


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerHealth(Event):
    """One ``/health`` poll of one server (or the proxy)."""

    kind: ClassVar[str] = "server_health"
    server: str
    endpoint: str
    role: str
    state: str  # one of HEALTH_STATES
    latency_ms: float | None = None
    status_code: int | None = None
    error: str | None = None
    since: float | None = None  # when the server entered this state (epoch seconds)
    version: str | None = None  # /version, read once per up-transition
    model: str | None = None  # /v1/models data[0].id
    max_model_len: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerMetrics(Event):
    """Figures derived from a server's ``/metrics`` after one more scrape."""

    kind: ClassVar[str] = "server_metrics"
    server: str
    endpoint: str
    role: str
    figures: ServerFigures | None = None
    error: str | None = None  # why there are no figures (no /metrics, parse failure)
    scrape_ms: float | None = None
    parse_errors: int = 0
