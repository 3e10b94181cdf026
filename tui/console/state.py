"""What the console shows, folded from the event stream: plain data, no Textual.

Every event that reaches the console goes through :meth:`ConsoleState.apply` (O(1) work each: keep the newest
reading of a kind, append to a bounded history); the screens draw from the state at most four times a second,
only the parts marked dirty. Live and replayed sessions are the same events, so the console cannot tell them
apart. Histories are bounded (``deque(maxlen=...)``): memory does not grow with time.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from tui.console import remotes
from tui.console.views import (  # noqa: F401 - what was imported from this module before the views moved
    BAND,
    BENCH,
    BENCH_HISTORY,
    CAMPAIGN,
    GPU_HISTORY,
    GPU_PERIOD_S,
    GPUS,
    HEADER,
    LOG,
    LOG_LINES,
    RUNS_KEPT,
    SERVER_PERIOD_S,
    SERVERS,
    STALE_PERIODS,
    GpuView,
    ServerView,
    fold_gpu,
    fold_server,
    printable_diagnosis,
)
from tui.core.bench.events import BenchDone, BenchLine, BenchStarted, BenchTick, CampaignStep
from tui.core.errors import printable
from tui.core.events import Event, Notice
from tui.core.launch.events import (
    LayoutChanged,
    LogLine,
    PlanLaunched,
    ServerDeferred,
    ServerExited,
    ServerLaunched,
    ServerPhase,
    ServerReady,
    ServerStalled,
    ServerSubPhase,
)
from tui.core.playbook import Diagnosis
from tui.core.remote.events import HostReconnected, HostUnreachable, RemoteEvent, RemoteTick
from tui.core.telemetry.events import GpuSampled, ServerHealth, ServerMetrics
from tui.core.telemetry.gpu import GpuSample


@dataclass
class LayoutView:
    id: str
    status: str
    topology: str
    profile_id: str
    endpoint: str
    simulated: bool
    note: str = ""
    since: float = 0.0
    #: the playbook fixes its plan carries: (entry id, the changes it made), from ``PlanLaunched``
    fixes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: who started it (``started by campaign X (pid 4242) at 19:54``) and who holds it now (a running campaign, a
    #: benchmark against it: a benchmark, a stop or a restart of it asks first); empty when not known or nobody
    started_by: str = ""
    held_by: str = ""


def plan_fixes(plan: dict[str, object]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The fixes a plan (``LaunchPlan.to_dict()``, perhaps a recording's: checked) was launched with, each with the
    changes it made (its workarounds sourced ``fix:ENTRY``)."""
    ids = plan.get("fixes_applied")
    if not isinstance(ids, list):
        return ()
    changes: dict[str, list[str]] = {}
    works = plan.get("workarounds")
    for w in works if isinstance(works, list) else ():
        if isinstance(w, dict) and isinstance(w.get("source"), str) and isinstance(w.get("change"), str) \
                and w["source"].startswith("fix:"):
            changes.setdefault(w["source"][4:], []).append(printable(w["change"][:200]))
    return tuple((printable(i[:80]), tuple(changes.get(i, ())[:8])) for i in ids[:8] if isinstance(i, str))


@dataclass
class BenchView:
    started: BenchStarted | None = None
    tick: BenchTick | None = None
    done: BenchDone | None = None
    #: (elapsed s, value) per series name: output_tps, ttft_p50, ttft_p99, tpot_p50, tpot_p99, itl_p50, itl_p99
    series: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=200))

    def add(self, name: str, t: float, v: float | None) -> None:
        if v is None:
            return
        self.series.setdefault(name, deque(maxlen=BENCH_HISTORY)).append((t, float(v)))

    @property
    def running(self) -> bool:
        return self.started is not None and self.done is None


@dataclass
class CampaignView:
    name: str = ""
    step: CampaignStep | None = None
    steps: deque[CampaignStep] = field(default_factory=lambda: deque(maxlen=200))


class ConsoleState:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.host_label = ""
        self.simulated = False
        self.gpus: dict[int, GpuView] = {}
        self.gpu_error: str | None = None
        self.servers: dict[str, ServerView] = {}
        self.layout: LayoutView | None = None
        #: the layout shown last, once it stopped (what a campaign or a launch offers to run again)
        self.last_layout: LayoutView | None = None
        self.diagnoses: list[Diagnosis] = []
        self.dismissed: set[tuple[str, str]] = set()
        self.bench = BenchView()
        self.campaign = CampaignView()
        self.notices: deque[Notice] = deque(maxlen=50)
        #: the runs that ended in this session, as their events told (a replay's results are the recording's)
        self.runs_done: deque[BenchDone] = deque(maxlen=RUNS_KEPT)
        #: servers of the layouts shown before, not launched again since (their late readings are not drawn)
        self._gone: set[str] = set()
        #: set by the app before each draw: the header's words for a replay (None: live), a recording going on
        self.replay_label: str | None = None
        self.recording = False
        #: the fixes of the plan last launched, and its layout (``PlanLaunched`` may come before its layout)
        self._plan: tuple[str, tuple[tuple[str, tuple[str, ...]], ...]] = ("", ())
        self.dirty: set[str] = {GPUS, SERVERS, BAND, LOG, HEADER, BENCH, CAMPAIGN}
        self.events = 0
        #: the other hosts followed (``--hosts``), in the order shown; what the app tells once about them
        self.remotes: dict[str, remotes.RemoteView] = {}
        self.host_notes = remotes.notes()

    # --- folding ---------------------------------------------------------------------------------------------
    def apply(self, ev: Event) -> None:
        self.events += 1
        handler = _HANDLERS.get(type(ev))
        if handler is not None:
            handler(self, ev)

    def server(self, name: str) -> ServerView:
        view = self.servers.get(name)
        if view is None:
            view = self.servers[name] = ServerView(name=name)
            self.dirty.add(SERVERS)
        return view

    def _gpu(self, ev: GpuSampled) -> None:
        now = self.clock()
        self.host_label, self.simulated = ev.host, ev.simulated
        self.gpu_error = ev.error
        for g in ev.gpus:
            fold_gpu(self.gpus, g, now)
            for p in g.processes:  # a server whose launch named no GPU (an older recording's): the ones it holds
                v = self.servers.get(p.owner) if p.owner else None
                if v is not None and not v.gpus_named and g.index not in v.gpus:
                    v.gpus = tuple(sorted((*v.gpus, g.index)))
                    self.dirty.add(SERVERS)
        self.dirty.update((GPUS, HEADER))

    def _known(self, name: str) -> bool:
        """Readings of a server count while a layout is shown (a poller's last reading of a layout that just
        stopped must not bring its rows back, nor one of the layout before into the next one's table)."""
        return name in self.servers or (self.layout is not None and name not in self._gone)

    def _health(self, ev: ServerHealth) -> None:
        if not self._known(ev.server):
            return
        v = self.server(ev.server)
        v.health, v.health_at = ev, self.clock()
        v.role = v.role or ev.role
        v.url = v.url or ev.endpoint
        self.dirty.add(SERVERS)

    def _metrics(self, ev: ServerMetrics) -> None:
        if not self._known(ev.server):
            return
        v = self.server(ev.server)
        v.metrics_at = self.clock()
        if ev.error is None:
            v.metrics_failing_since = 0.0
        elif v.metrics_error is None or not v.metrics_failing_since:
            v.metrics_failing_since = v.metrics_at
        v.metrics_error = ev.error
        if ev.figures is not None:
            v.figures = ev.figures
        self.dirty.add(SERVERS)

    def _layout(self, ev: LayoutChanged) -> None:
        same = self.layout is not None and self.layout.id == ev.layout_id
        if not same:
            self._gone |= set(self.servers)
            self.servers = {}
            self.diagnoses = []
            if not self.bench.running:  # a finished run was the previous layout's: a new one has none yet
                self.bench = BenchView()
                self.dirty.add(BENCH)
            self.dirty.update((LOG, SERVERS))
        since = self.layout.since if self.layout is not None and same and self.layout.status == ev.status else ev.ts
        fixes = self.layout.fixes if self.layout is not None and same else \
            self._plan[1] if self._plan[0] == ev.layout_id else ()
        self.layout = LayoutView(id=ev.layout_id, status=ev.status, topology=ev.topology, profile_id=ev.profile_id,
                                 endpoint=ev.endpoint, simulated=ev.simulated, note=ev.note,
                                 since=since, fixes=fixes, started_by=printable(ev.started_by[:300]),
                                 held_by=printable(ev.held_by[:600]))
        if ev.status == "stopped":
            self.last_layout, self.layout = self.layout, None
            self._gone |= set(self.servers)
            self.servers = {}
            self.diagnoses = []
        self.dirty.update((HEADER, BAND, SERVERS))

    def _plan_launched(self, ev: PlanLaunched) -> None:
        fixes = plan_fixes(ev.plan)
        self._plan = (ev.layout_id, fixes)  # before or after its layout's first LayoutChanged
        if self.layout is not None and self.layout.id == ev.layout_id:
            self.layout.fixes = fixes
            self.dirty.add(BAND)

    def _launched(self, ev: ServerLaunched) -> None:
        self._gone.discard(ev.server)
        self._server_event(ev)

    def _log(self, ev: LogLine) -> None:
        self.server(ev.server).add_line(ev.lineno, ev.text)
        self.dirty.add(LOG)

    def _server_event(self, ev: ServerPhase | ServerReady | ServerDeferred | ServerSubPhase | ServerExited
                      | ServerStalled | ServerLaunched) -> None:
        fold_server(self.server(ev.server), ev)
        self.dirty.update((SERVERS, BAND))

    def _diagnosis(self, ev: Diagnosis) -> None:
        if any(d.server == ev.server and d.entry_id == ev.entry_id and d.line_no == ev.line_no
               for d in self.diagnoses):
            return
        ev = printable_diagnosis(ev)
        self.diagnoses.append(ev)
        v = self.servers.get(ev.server)
        if v is not None and ev.line_no is not None:  # mark the line in the log pane
            v.mark_line(ev.line_no, ev.entry_id)
        self.dirty.update((BAND, LOG))

    def _bench_started(self, ev: BenchStarted) -> None:
        self.bench = BenchView(started=ev)
        self.dirty.update((BENCH, BAND))

    def _bench_tick(self, ev: BenchTick) -> None:
        b = self.bench
        b.tick = ev
        if ev.phase == "run":
            t = ev.elapsed_s
            b.add("output_tps", t, ev.output_tps)
            for name in ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "itl_p50", "itl_p99"):
                b.add(name, t, getattr(ev, name + "_ms"))
        self.dirty.update((BENCH, BAND))

    def _bench_done(self, ev: BenchDone) -> None:
        self.bench.done = ev
        self.runs_done.append(ev)
        self.dirty.update((BENCH, BAND))

    def _bench_line(self, ev: BenchLine) -> None:
        self.bench.lines.append(ev.text)
        self.dirty.add(BENCH)

    def _campaign(self, ev: CampaignStep) -> None:
        c = self.campaign
        c.name, c.step = ev.campaign, ev
        c.steps.append(ev)
        self.dirty.update((CAMPAIGN, BAND))

    def _notice(self, ev: Notice) -> None:
        self.notices.append(ev)

    # --- questions the screens ask -------------------------------------------------------------------------
    def age(self, at: float) -> float:
        return max(self.clock() - at, 0.0) if at else float("inf")

    def gpu_stale(self, view: GpuView) -> bool:
        return self.age(view.received) > STALE_PERIODS * GPU_PERIOD_S * 4  # 4 s without a sample

    def server_stale(self, view: ServerView) -> bool:
        return bool(view.health_at) and self.age(view.health_at) > STALE_PERIODS * SERVER_PERIOD_S

    def owners_on(self, index: int) -> list[tuple[str, str, int]]:
        """(owner, role, bytes) of the processes on a GPU, the servers' first (summed per owner)."""
        view = self.gpus.get(index)
        return [] if view is None else owners_of(view.sample)

    def server_rows(self) -> list[tuple[str, ServerView]]:
        """The servers table's rows: this host's servers (keyed by name), then each remote host's (keyed
        ``host/name``), in the order the hosts are shown."""
        rows = list(self.servers.items())
        for host, rv in self.remotes.items():
            rows.extend((f"{host}/{name}", v) for name, v in rv.servers.items())
        return rows

    def server_at(self, key: str | None) -> ServerView | None:
        """The server of a table row's key (this host's by name, a remote one's by ``host/name``)."""
        if key is None:
            return None
        local = self.servers.get(key)
        if local is not None or "/" not in key:
            return local
        host, name = key.split("/", 1)
        rv = self.remotes.get(host)
        return rv.servers.get(name) if rv is not None else None

    def active_diagnosis(self) -> Diagnosis | None:
        """The failure to show in the banner: the most severe one not dismissed."""
        open_ = [d for d in self.diagnoses if (d.server, d.entry_id) not in self.dismissed]
        if not open_:
            return None
        return sorted(open_, key=lambda d: d.sort_key())[0]

    def starting(self) -> bool:
        return self.layout is not None and self.layout.status == "starting"

    def dismiss(self, d: Diagnosis) -> None:
        self.dismissed.add((d.server, d.entry_id))
        self.dirty.add(BAND)


def owners_of(sample: GpuSample) -> list[tuple[str, str, int]]:
    """(owner, role, bytes) of the processes on a GPU, the servers' first (summed per owner)."""
    acc: dict[tuple[str, str], int] = {}
    for p in sample.processes:
        owner = printable(p.owner or (p.name or f"pid {p.pid}"))  # a process's name is anyone's
        role = p.role or ""
        if p.tp_rank is not None:
            role = f"{role} TP{p.tp_rank}".strip()
        if p.dp_rank is not None:
            role = f"{role} DP{p.dp_rank}".strip()
        acc[(owner, role)] = acc.get((owner, role), 0) + int(p.memory or 0)
    return sorted(((o, r, b) for (o, r), b in acc.items()), key=lambda t: (t[0].startswith("pid"), t[0]))


_HANDLERS: dict[type[Event], Callable[[ConsoleState, Event], None]] = {
    GpuSampled: ConsoleState._gpu,  # type: ignore[dict-item]
    ServerHealth: ConsoleState._health,  # type: ignore[dict-item]
    ServerMetrics: ConsoleState._metrics,  # type: ignore[dict-item]
    LayoutChanged: ConsoleState._layout,  # type: ignore[dict-item]
    PlanLaunched: ConsoleState._plan_launched,  # type: ignore[dict-item]
    ServerLaunched: ConsoleState._launched,  # type: ignore[dict-item]
    LogLine: ConsoleState._log,  # type: ignore[dict-item]
    ServerPhase: ConsoleState._server_event,  # type: ignore[dict-item]
    ServerReady: ConsoleState._server_event,  # type: ignore[dict-item]
    ServerExited: ConsoleState._server_event,  # type: ignore[dict-item]
    ServerStalled: ConsoleState._server_event,  # type: ignore[dict-item]
    ServerSubPhase: ConsoleState._server_event,  # type: ignore[dict-item]
    ServerDeferred: ConsoleState._server_event,  # type: ignore[dict-item]
    Diagnosis: ConsoleState._diagnosis,  # type: ignore[dict-item]
    BenchStarted: ConsoleState._bench_started,  # type: ignore[dict-item]
    BenchTick: ConsoleState._bench_tick,  # type: ignore[dict-item]
    BenchDone: ConsoleState._bench_done,  # type: ignore[dict-item]
    BenchLine: ConsoleState._bench_line,  # type: ignore[dict-item]
    CampaignStep: ConsoleState._campaign,  # type: ignore[dict-item]
    Notice: ConsoleState._notice,  # type: ignore[dict-item]
    RemoteTick: remotes.apply_tick,  # type: ignore[dict-item]
    HostUnreachable: remotes.apply_unreachable,  # type: ignore[dict-item]
    HostReconnected: remotes.apply_reconnected,  # type: ignore[dict-item]
    RemoteEvent: remotes.apply_event,  # type: ignore[dict-item]
}
