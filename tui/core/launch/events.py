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
    #: who started it (``started by campaign X (pid 4242) at 19:54``; empty when not known)
    started_by: str = ""
    #: who holds it now (a running campaign that started it, a benchmark against it; empty: nobody): a benchmark,
    #: a stop or a restart of it asks first
    held_by: str = ""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerDeferred(Event):
    """A server of the layout is held back: it shares a GPU with servers that are still starting, and vLLM's memory
    profiling would count their allocations as its own (each would get a fraction of its KV cache). It is launched
    once every server in ``waits_for`` has allocated its KV cache (the ``until`` phase was passed)."""

    kind: ClassVar[str] = "server_deferred"
    server: str
    waits_for: tuple[str, ...]
    gpus: tuple[int, ...]  # the GPUs it shares with them
    until: str = "kv_cache"  # the phase each of them must have passed


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSubPhase(Event):
    """What a server does while its log is silent, seen from its process tree and its cache directories.

    ``key`` names the activity (``flashinfer_jit``, ``triton_ptxas``, ``inductor_compile``, ``nvcc``,
    ``cache_write``), ``label`` says it in words ("JIT-compiling FlashInfer sampling kernels (3 nvcc jobs, 40 s)"),
    ``state`` is ``running`` while it is seen (published again as it changes: jobs, elapsed, bytes written) and
    ``done`` once it is gone. ``elapsed_s`` is the sub-phase's own time since it was first seen; ``phase`` the log
    phase the server was in. ``jobs`` counts the compiler processes (nvcc, cicc, ptxas); ``cpu_s`` their CPU
    seconds so far; ``cache_bytes`` what the watched cache directory grew by since the start (``cache_write``)."""

    kind: ClassVar[str] = "server_subphase"
    server: str
    key: str
    label: str
    state: str = "running"  # running | done
    elapsed_s: float = 0.0
    phase: str = ""
    jobs: int = 0
    cpu_s: float = 0.0
    detail: str = ""  # the module being compiled ("sampling"), or the cache directory being written
    cache_bytes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class StartupExpected(Event):
    """The ETA of a server's start, before it starts: earlier starts of the same plan on this host with the same
    cache state (``cold``: compile caches empty, JIT compiles to come; ``warm``: caches filled), or the simulated
    host's compressed start. ``seconds`` is None when this host has never started the plan; ``cold_hint`` then
    says what a cold start will do (a FlashInfer JIT compile, torch.compile) and how long it took last time."""

    kind: ClassVar[str] = "startup_expected"
    server: str
    seconds: float | None
    samples: int = 0
    cache_state: str = ""  # cold | warm | "" (not known)
    source: str = ""  # history | simulated start | ""
    cold_hint: str = ""
