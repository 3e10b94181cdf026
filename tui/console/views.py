"""The views the console keeps of one GPU and one server (this host's or another's), and the names of what changed
since the last draw: plain data, no Textual (``state`` folds the events into them; the widgets draw them)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tui.core.launch.events import ServerExited, ServerStalled, ServerSubPhase
from tui.core.telemetry.derive import ServerFigures
from tui.core.telemetry.events import ServerHealth
from tui.core.telemetry.gpu import GpuSample

#: 60 s of GPU history at 4 Hz
GPU_HISTORY = 240
#: a bench chart's window: 10 minutes of 4 Hz ticks
BENCH_HISTORY = 2400
LOG_LINES = 1000
#: finished runs kept (a long campaign has a few hundred)
RUNS_KEPT = 2000
#: a reading older than this many of its periods is stale (drawn grey, with its age)
STALE_PERIODS = 4.0
GPU_PERIOD_S = 0.25
SERVER_PERIOD_S = 1.0

# what changed since the last draw
GPUS, SERVERS, BAND, LOG, HEADER, BENCH, CAMPAIGN = "gpus", "servers", "band", "log", "header", "bench", "campaign"


@dataclass
class GpuView:
    sample: GpuSample
    received: float
    util: deque[float] = field(default_factory=lambda: deque(maxlen=GPU_HISTORY))


@dataclass
class ServerView:
    name: str
    role: str = ""
    url: str = ""
    pid: int = 0
    gpus: tuple[int, ...] = ()
    #: the launch named the server's GPUs (else they are the ones its processes are seen on)
    gpus_named: bool = False
    started: float = 0.0
    expected_s: float | None = None
    expected_source: str = ""
    health: ServerHealth | None = None
    health_at: float = 0.0
    figures: ServerFigures | None = None
    metrics_error: str | None = None
    metrics_at: float = 0.0
    #: when the failing scrapes began (0: the last scrape worked)
    metrics_failing_since: float = 0.0
    phase: str = ""
    phase_label: str = ""
    progress: float = 0.0
    detail: str = ""
    ready_s: float | None = None
    exited: ServerExited | None = None
    stalled: ServerStalled | None = None
    last_line: str = ""
    #: what its silent log hides (a JIT compile, a cache being written), while it lasts
    subphase: ServerSubPhase | None = None
    #: held back until these servers on its GPU have allocated their KV cache (a shared GPU's staggered start)
    waits_for: tuple[str, ...] = ()
    logs: deque[tuple[int, str, str | None]] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    #: counts the lines appended (the log pane appends only those new since it last drew)
    log_serial: int = 0
    #: the lines that are not the console's own polls (``loglines.is_own_poll``): what the log pane shows by default
    quiet: deque[tuple[int, str, str | None]] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    quiet_serial: int = 0
    #: the poll lines seen (hidden by default; the pane says how many)
    polls: int = 0
    #: the server's log file (``ServerLaunched.log``)
    log_path: str = ""
    #: counts the playbook marks placed on lines already shown (the pane redraws then)
    marks: int = 0
    #: the remote host it runs on ("": this host), from that host's watch stream
    host: str = ""

    @property
    def port(self) -> str:
        tail = self.url.rsplit(":", 1)[-1] if self.url else ""
        return tail if tail.isdigit() else ""
