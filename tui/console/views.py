"""The views the console keeps of one GPU and one server (this host's or another's), and the names of what changed
since the last draw: plain data, no Textual (``state`` folds the events into them; the widgets draw them)."""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass, field

from tui.console import loglines
from tui.core.launch.events import (
    LogLine,
    ServerDeferred,
    ServerExited,
    ServerLaunched,
    ServerPhase,
    ServerReady,
    ServerStalled,
    ServerSubPhase,
)
from tui.core.playbook import Diagnosis
from tui.core.printable import is_printable, printable
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


def fold_gpu(views: dict[int, GpuView], g: GpuSample, now: float) -> GpuView:
    """One GPU's sample into its view (made on its first sample), its utilisation history kept: this host's and a
    remote host's GPUs alike."""
    view = views.get(g.index)
    if view is None:
        view = views[g.index] = GpuView(sample=g, received=now)
    view.sample, view.received = g, now
    view.util.append(g.util_gpu or 0.0)
    return view


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

    def add_line(self, lineno: int, raw: str) -> None:
        """One line of its log (this host's follower's, or another host's follow stream's): kept printable (an
        escape sequence never reaches the terminal), sorted into the console's own polls or not."""
        text = printable(raw.expandtabs())
        self.logs.append((lineno, text, None))
        self.log_serial += 1
        if loglines.is_own_poll(text):
            self.polls += 1
        else:
            self.quiet.append((lineno, text, None))
            self.quiet_serial += 1
        if text.strip():
            self.last_line = text

    def mark_line(self, line_no: int, entry_id: str) -> None:
        """The playbook entry that matched its line ``line_no``, marked in the log pane."""
        for lines in (self.logs, self.quiet):
            for i, (n, text, _) in enumerate(lines):
                if n == line_no:
                    lines[i] = (n, text, entry_id)
                    self.marks += 1
                    break


#: the lifecycle events of one server folded into its view (this host's and another host's alike)
LIFECYCLE = (ServerLaunched, LogLine, ServerPhase, ServerReady, ServerDeferred, ServerSubPhase, ServerExited,
             ServerStalled)


def fold_server(v: ServerView, ev: object) -> bool:
    """Fold one lifecycle event of a server into its view; True when the band and table change (not a log line)."""
    if isinstance(ev, LogLine):
        v.add_line(ev.lineno, ev.text)
        return False
    if isinstance(ev, ServerLaunched):
        v.role, v.url, v.pid, v.gpus = ev.role, ev.url, ev.pid, ev.gpus
        v.gpus_named = bool(ev.gpus)
        v.log_path = ev.log
        v.started = ev.started or ev.ts
        v.expected_s, v.expected_source = ev.expected_s, ev.expected_source
        v.exited = None
        v.stalled = None
        v.waits_for = ()
    elif isinstance(ev, ServerPhase):
        v.phase, v.phase_label, v.progress, v.detail = ev.phase, ev.label, ev.progress, ev.detail
    elif isinstance(ev, ServerReady):
        v.ready_s = ev.startup_s
        v.phase, v.progress = "ready", 1.0
        v.subphase = None
    elif isinstance(ev, ServerDeferred):
        v.waits_for = ev.waits_for
        v.gpus = v.gpus or ev.gpus
    elif isinstance(ev, ServerSubPhase):
        v.subphase = ev if ev.state == "running" else None
    elif isinstance(ev, ServerExited):
        v.exited = ev
    elif isinstance(ev, ServerStalled):
        v.stalled = ev
    return True


def printable_diagnosis(ev: Diagnosis) -> Diagnosis:
    """A diagnosis (a recording's, another host's) with every text it shows passed through the sink
    (:func:`tui.core.printable.printable`; the explanation keeps its own line breaks). The server and the entry id
    are keys, kept as they are: what draws them passes them through the sink itself."""
    texts = (ev.title, ev.severity, ev.line, ev.fix, ev.detail, *ev.changes)
    if all(t.isprintable() for t in texts) and is_printable(ev.explanation, "\n"):
        return ev
    return dataclasses.replace(ev, title=printable(ev.title), severity=printable(ev.severity), line=printable(ev.line),
                               fix=printable(ev.fix), detail=printable(ev.detail),
                               changes=tuple(printable(c) for c in ev.changes),
                               explanation=printable(ev.explanation, keep="\n"))
