"""Following the layout a host runs, whoever launched it: the source of lifecycle events for a front end that
watches (the console), or reattaches over SSH.

A :class:`LayoutFollower` thread reads the state file (lock-free ``peek``) twice a second, and for the layout it
shows (the active one; else the newest that failed, until another starts) publishes the same events ``up``
publishes while it launches: ``LayoutChanged``, ``PlanLaunched`` (the plan as the state file holds it), one
``ServerLaunched`` per process (with its GPUs and the ETA from this host's start-up history), every ``LogLine`` of
every log from its first line (so a console opened later sees the whole start), ``ServerPhase``, ``ServerReady``,
``ServerExited`` and the playbook's ``Diagnosis`` events as lines arrive and, for a failed start, the diagnoses
``up`` saved with the layout. A recorder on the same bus records what the operator saw; a replay publishes the
same events again.

Everything here runs in the follower's thread (state file, logs, regular expressions); events cross to the
front end's event loop through ``EventBus.publish_threadsafe``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tui.core import safeio
from tui.core.bench.windows import BenchWindows
from tui.core.errors import InputError
from tui.core.events import EventBus, Notice, event_from_dict
from tui.core.launch import ownership, subphases
from tui.core.launch.events import (
    LayoutChanged,
    LogLine,
    PlanLaunched,
    ServerDeferred,
    ServerExited,
    ServerLaunched,
    ServerPhase,
    ServerReady,
    ServerSubPhase,
)
from tui.core.launch.history import StartupHistory, expected_startup
from tui.core.launch.lifecycle import assess_layout
from tui.core.launch.phases import PhaseTracker, logged_at
from tui.core.launch.state import LayoutRecord, ProcessRecord, StateStore, drain_notes
from tui.core.launch.supervisor import process_alive
from tui.core.plan.spec import LaunchPlan
from tui.core.playbook import Diagnosis, MatchContext, Matcher, Playbook
from tui.core.redact import Redactor
from tui.core.topology import parse_topology

ACTIVE = ("starting", "ready", "stopping")
#: how often a starting server's process tree and caches are sampled (what its silent log hides)
SUBPHASE_PERIOD_S = 2.0
#: how many of a server's last lines an exit event carries
LAST_LINES = 25
#: bytes of one log line at most (a longer one is cut there)
MAX_LOG_LINE = 1 << 20


@dataclass
class _Server:
    record: ProcessRecord
    tracker: PhaseTracker = field(default_factory=PhaseTracker)
    matcher: Matcher | None = None
    offset: int = 0
    lineno: int = 0
    partial: bytes = b""
    last: deque[str] = field(default_factory=lambda: deque(maxlen=LAST_LINES))
    ready_sent: bool = False
    exit_sent: bool = False
    subs: subphases.SubPhaseTracker = field(default_factory=subphases.SubPhaseTracker)
    env: dict[str, str] | None = None


def shown_layout(layouts: dict[str, LayoutRecord], *, since: float = 0.0) -> LayoutRecord | None:
    """The active layout, else the newest one that failed (its diagnosis stays on screen) if it is not older than
    ``since`` (the layout shown before it: a layout that stopped never gives the screen back to an older failure),
    else None."""
    active = [r for r in layouts.values() if r.status in ACTIVE]
    if active:
        return max(active, key=lambda r: r.created)
    failed = [r for r in layouts.values() if r.status == "failed" and r.created >= since]
    return max(failed, key=lambda r: r.created) if failed else None


class LayoutFollower(threading.Thread):
    def __init__(self, bus: EventBus, store: StateStore | None = None, book: Playbook | None = None, *,
                 history: StartupHistory | None = None, sim_startup_s: float | None = None,
                 interval_s: float = 0.5, read_chunk: int = 1 << 20,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(name="layout-follower", daemon=True)
        self.bus = bus
        self.store = store or StateStore()
        self.book = book
        self.history = history or StartupHistory(self.store.root)
        self.sim_startup_s = sim_startup_s
        self.interval_s = interval_s
        self.read_chunk = read_chunk
        self.clock = clock
        self._stop_event = threading.Event()
        self._layout: LayoutRecord | None = None
        self._servers: dict[str, _Server] = {}
        self._diagnosed: set[tuple[str, str, int | None]] = set()
        self._dismissed: set[str] = set()
        self._lock = threading.Lock()
        self._next_sample = 0.0
        self._deferred: set[str] = set()
        self._shown: tuple[str, str, str, str] = ("", "", "", "")  # (status, note, started by, held by) published
        #: when the newest layout shown so far was created: an older failure is never shown after it
        self._since = 0.0
        self._told: set[str] = set()  # the files from outside already said to be unreadable (once each)
        #: a log line is redacted before it is published, matched or kept for an exit's excerpt
        self.redactor = Redactor()
        #: what the benchmarks on this bus did when (their events): a line is matched as of the phase it was
        #: logged in (a Triton JIT inside a benchmark's own warm-up is no request the warm-up missed)
        self.benches = BenchWindows()
        bus.subscribe(self.benches.feed)

    # --- control (any thread) ------------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop_event.set()

    def dismiss(self, layout_id: str) -> None:
        """Stop showing a failed layout (the operator closed its banner)."""
        with self._lock:
            self._dismissed.add(layout_id)

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.poll_once()
            self._stop_event.wait(self.interval_s)

    # --- one round ---------------------------------------------------------------------------------------------
    def poll_once(self) -> None:
        try:
            layouts = self.store.peek()
        except InputError as err:  # damaged, or a FIFO in its place: said once, followed as empty
            self._tell(err)
            layouts = {}
        for note in drain_notes():  # a record that does not read back, left out or quarantined: said once
            self.bus.publish_threadsafe(Notice(level="warning", message=note, source="state"))
        with self._lock:
            dismissed = set(self._dismissed)
        rec = shown_layout({k: v for k, v in layouts.items() if k not in dismissed or v.status in ACTIVE},
                           since=self._since)
        if rec is None:
            if self._layout is not None:
                gone = self._layout
                self.bus.publish_threadsafe(LayoutChanged(
                    layout_id=gone.id, status="stopped",  # shown no longer: a failed one was dismissed
                    topology=gone.topology, profile_id=gone.profile_id, endpoint=gone.endpoint,
                    simulated=gone.simulated, note="dismissed" if gone.status == "failed" else "stopped"))
                self._layout, self._servers = None, {}
            return
        if self._layout is None or rec.id != self._layout.id:
            self._switch(rec)
        elif self._shown != self._shown_state(rec):
            self._publish_layout(rec)
        self._layout = rec
        self._since = max(self._since, rec.created)
        self._add_processes(rec)
        self._held_back(rec)
        for srv in self._servers.values():
            self._read(srv)
        self._check_processes(rec)
        if rec.status == "starting" and time.monotonic() >= self._next_sample:
            self._next_sample = time.monotonic() + SUBPHASE_PERIOD_S
            self._sample_subphases()
        if rec.status == "failed":
            self._saved_diagnoses(rec)

    def _switch(self, rec: LayoutRecord) -> None:
        self._servers = {}
        self._diagnosed = set()
        self._deferred = set()
        self._publish_layout(rec)
        # the plan as the state file holds it (redacted): what a front end shows of it (the fixes applied) and a
        # recording keeps, as ``up`` publishes it for the layouts it launches
        self.bus.publish_threadsafe(PlanLaunched(layout_id=rec.id, plan=rec.plan))

    @staticmethod
    def _shown_state(rec: LayoutRecord) -> tuple[str, str, str, str]:
        """(status, note, started by, held by) as shown: ``degraded``/``failed`` once a server or the proxy of a
        running layout has exited, the note naming which (the state file still says ``ready``); who started it;
        who holds it now (a running campaign, a benchmark against it)."""
        health = assess_layout(rec)
        gone = f"exited: {', '.join(health.exited)}" if health.exited else ""
        held = ownership.held_text(ownership.holders(rec)) if rec.status in ACTIVE else ""
        return (health.status, "; ".join(n for n in (rec.note, gone) if n), ownership.started_by_text(rec),
                held)

    def _publish_layout(self, rec: LayoutRecord) -> None:
        self._shown = self._shown_state(rec)
        status, note, started_by, held_by = self._shown
        self.bus.publish_threadsafe(LayoutChanged(
            layout_id=rec.id, status=status, topology=rec.topology, profile_id=rec.profile_id,
            endpoint=rec.endpoint, simulated=rec.simulated, note=note, started_by=started_by, held_by=held_by))

    def _context(self, rec: LayoutRecord) -> MatchContext:
        """What the record says of the server (its topology); ``up`` saves the full context's diagnoses."""
        try:
            return MatchContext.for_launch(None, parse_topology(rec.topology))
        except InputError:
            return MatchContext()

    def _add_processes(self, rec: LayoutRecord) -> None:
        plan: LaunchPlan | None
        try:
            plan = LaunchPlan.from_dict(rec.plan)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, RecursionError):
            plan = None  # a plan of the wrong shape: the servers are followed without their ETA
        for p in rec.processes:
            if p.name in self._servers:
                self._servers[p.name].record = p
                continue
            srv = _Server(record=p)
            if self.book is not None and p.role != "proxy":
                srv.matcher = self.book.matcher(p.name, self._context(rec))
            self._servers[p.name] = srv
            expected = None
            if plan is not None and p.role != "proxy":
                expected = expected_startup(self.history, plan, p.name,
                                            sim_startup_s=self.sim_startup_s if rec.simulated else None)
            self.bus.publish_threadsafe(ServerLaunched(
                layout_id=rec.id, server=p.name, role=p.role, pid=p.pid, url=p.url, command=" ".join(p.argv),
                log=p.log, gpus=tuple(p.gpus), started=p.started,
                expected_s=expected.seconds if expected else None,
                expected_source=expected.describe() if expected else ""))

    def _held_back(self, rec: LayoutRecord) -> None:
        """Servers of the plan not launched yet while the layout starts: held back behind a GPU neighbour."""
        if rec.status != "starting":
            return
        for s in rec.plan.get("servers", []):
            name = str(s.get("name", ""))
            if not name or name in self._servers or name in self._deferred:
                continue
            gpus = {int(g) for g in s.get("gpus", [])}
            before = tuple(p.name for p in rec.processes if gpus & set(p.gpus))
            if before:
                self._deferred.add(name)
                self.bus.publish_threadsafe(ServerDeferred(server=name, waits_for=before,
                                                           gpus=tuple(sorted(gpus))))

    def _tell(self, err: InputError) -> None:
        """A file the follower reads (the state file, a server's log it names) cannot be read: a Notice, once."""
        line = err.one_line()
        if line not in self._told and len(self._told) < 100:
            self._told.add(line)
            self.bus.publish_threadsafe(Notice(level="error", message=line, source="follow"))

    def _read(self, srv: _Server) -> None:
        path = Path(srv.record.log)
        if not srv.record.log:
            return
        try:
            fd, _st = safeio.open_regular(path)  # a log the state file names may be a FIFO: never waited on
        except InputError as err:
            if err.message != "no such file":  # not written yet: the server is starting
                self._tell(err)
            return
        try:
            with os.fdopen(fd, "rb") as fh:
                fh.seek(srv.offset)
                data = fh.read(self.read_chunk)
        except OSError:
            return
        if not data:
            return
        srv.offset += len(data)
        *complete, srv.partial = (srv.partial + data).split(b"\n")
        if len(srv.partial) > MAX_LOG_LINE:  # a log that never ends its line: shown cut, never held growing
            complete.append(srv.partial[:MAX_LOG_LINE])
            srv.partial = b""
        name = srv.record.name
        for raw in complete:
            srv.lineno += 1
            text = raw.decode("utf-8", errors="replace")
            if "\r" in text:
                segments = [s for s in text.split("\r") if s.strip()]
                text = segments[-1] if segments else ""
            text = self.redactor.text(text)
            srv.last.append(text)
            self.bus.publish_threadsafe(LogLine(server=name, lineno=srv.lineno, text=text))
            update = srv.tracker.feed(text)
            if update is not None and not srv.ready_sent:
                self.bus.publish_threadsafe(ServerPhase(
                    server=name, phase=update.phase.key, label=update.phase.label, progress=update.progress,
                    detail=update.detail, elapsed_s=self._elapsed(srv)))
            if srv.matcher is not None:
                srv.matcher.set_bench_phase(self._bench_phase(text))
                for d in srv.matcher.feed(text, srv.lineno):
                    self._diagnosis(d)

    def _bench_phase(self, text: str) -> str:
        """The phase of the benchmark going on when ``text`` was logged (its own stamp, else now)."""
        now = self.clock()
        if not self.benches.known():
            return "none"
        return self.benches.phase_at(logged_at(text, now, tolerance_s=86400.0) or now)

    def _elapsed(self, srv: _Server) -> float:
        return max(self.clock() - srv.record.started, 0.0) if srv.record.started else 0.0

    def _check_processes(self, rec: LayoutRecord) -> None:
        for srv in self._servers.values():
            p = srv.record
            if p.ready_at and not srv.ready_sent:
                srv.ready_sent = True
                upd = srv.tracker.mark_ready()
                startup = max(p.ready_at - p.started, 0.0) if p.started else 0.0
                self.bus.publish_threadsafe(ServerPhase(server=p.name, phase="ready", label=upd.phase.label,
                                                        progress=1.0, elapsed_s=startup))
                self.bus.publish_threadsafe(ServerReady(server=p.name, url=p.url, startup_s=startup))
            if srv.exit_sent:
                continue
            if p.exited is not None or (rec.status != "stopping" and not process_alive(p.pid, p.create_time)):
                self._read(srv)  # its last words first
                srv.exit_sent = True
                during = "serving" if srv.ready_sent else srv.tracker.phase.key
                self.bus.publish_threadsafe(ServerExited(server=p.name, returncode=p.exited, during=during,
                                                         last_lines=tuple(srv.last)))
                if srv.matcher is not None and not srv.ready_sent and rec.status != "stopping":
                    for d in srv.matcher.finish(exit_code=p.exited, ready=False):
                        self._diagnosis(d)

    def _sample_subphases(self) -> None:
        """What each starting server's process tree and compile caches show (``up`` publishes the same from its
        own process; a console that did not launch the layout sees it here)."""
        for srv in self._servers.values():
            p = srv.record
            if p.role == "proxy" or srv.ready_sent or srv.exit_sent:
                continue
            if srv.env is None:
                try:
                    srv.env = dict(psutil.Process(p.pid).environ())
                except psutil.Error:
                    srv.env = dict(os.environ)
            tree = subphases.sample_tree(p.pid)
            caches = subphases.cache_sizes(subphases.cache_dirs(srv.env))
            for tr in srv.subs.feed(self._elapsed(srv), tree, caches):
                self.bus.publish_threadsafe(ServerSubPhase(
                    server=p.name, key=tr.key, label=tr.label, state=tr.state, elapsed_s=tr.elapsed_s,
                    phase=srv.tracker.phase.key, jobs=tr.jobs, cpu_s=tr.cpu_s, detail=tr.detail,
                    cache_bytes=tr.cache_bytes))

    def _saved_diagnoses(self, rec: LayoutRecord) -> None:
        for d in rec.diagnoses:
            try:
                ev = event_from_dict(dict(d))
            except (ValueError, TypeError, KeyError):
                continue
            if isinstance(ev, Diagnosis):
                self._diagnosis(ev)

    def _diagnosis(self, d: Diagnosis) -> None:
        key = (d.server, d.entry_id, d.line_no)
        if key in self._diagnosed:
            return
        self._diagnosed.add(key)
        self.bus.publish_threadsafe(d)
