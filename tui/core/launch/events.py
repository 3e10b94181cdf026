"""Events of a layout's lifecycle: launched, log lines, startup phases, ready, exited, stalled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tui.core.events import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class LayoutChanged(Event):
    kind: ClassVar[str] = "layout_changed"
    layout_id: str
    status: str  # starting | ready | failed | stopping | stopped
    topology: str = ""
    profile_id: str = ""
    endpoint: str = ""
    simulated: bool = False
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanLaunched(Event):
    """A layout's plan is being launched: the whole plan (``LaunchPlan.to_dict()``, secrets redacted), so a
    recording says exactly what ran."""

    kind: ClassVar[str] = "plan_launched"
    layout_id: str
    plan: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerLaunched(Event):
    kind: ClassVar[str] = "server_launched"
    layout_id: str
    server: str
    role: str
    pid: int
    url: str
    command: str  # the plan's shell line (secrets redacted)
    log: str
    gpus: tuple[int, ...] = ()
    started: float = 0.0  # epoch seconds the process was started
    #: how long its start should take (``tui.core.launch.history``): seconds and where the figure comes from
    expected_s: float | None = None
    expected_source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogLine(Event):
    kind: ClassVar[str] = "log_line"
    server: str
    lineno: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerPhase(Event):
    kind: ClassVar[str] = "server_phase"
    server: str
    phase: str
    label: str
    progress: float  # 0..1 of a cold start
    detail: str = ""
    elapsed_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerReady(Event):
    kind: ClassVar[str] = "server_ready"
    server: str
    url: str
    startup_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerExited(Event):
    kind: ClassVar[str] = "server_exited"
    server: str
    returncode: int | None
    during: str  # the phase it was in ("serving" after ready)
    last_lines: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerStalled(Event):
    kind: ClassVar[str] = "server_stalled"
    server: str
    phase: str
    silent_s: float
    last_lines: tuple[str, ...] = ()
