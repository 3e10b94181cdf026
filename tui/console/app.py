"""The operator console: one Textual app over the core, the same for a live host and a replayed recording.

``make_console`` is the one factory the CLI, the tests and the benchmarks use. The app owns one ``EventBus``;
every source publishes on it (the GPU sampler thread and the server poller of ``LiveTelemetry``, the
``LayoutFollower`` thread for launches and logs, the benchmark runner, or a recording), the ``ConsoleState`` folds
each event in as it arrives (cheap), and a 4 Hz timer draws what changed on the screen that is visible.

Attributes down, messages up: the app makes each mode's screen with the console's context and state; a screen
never reaches into the app, it posts what the operator asks for (:mod:`tui.console.messages`) and the app, which
owns the jobs, the benchmark it follows, the recording and the state, handles it. Long work runs in workers; the
failure of any of them (the app's, or a screen's, forwarded as ``WorkerFailed``) and every refusal reach the
operator as one notification with a title and a hint.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import shlex
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from typing import Any, ClassVar

from rich.text import Text
from textual import events, work
from textual.app import App, ScreenStackError, SystemCommand
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.filter import LineFilter
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import Input, Select, TextArea
from textual.worker import Worker, WorkerState, get_current_worker

from tui.console import across, fmt
from tui.console.argv import down_argv, launch_argv, run_argv
from tui.console.benchjob import BenchJob, running_benches, start_bench
from tui.console.campaigns import campaigns
from tui.console.commands import ConsoleCommands
from tui.console.context import ConsoleContext
from tui.console.jobs import Job, start_job
from tui.console.messages import (
    BenchRequested,
    BenchStopRequested,
    CampaignChoice,
    CampaignRequested,
    CampaignResumeRequested,
    DismissRequested,
    FixRequested,
    LaunchRequested,
    PlaybookChanged,
    RestartRequested,
    StopRequested,
    WorkerFailed,
)
from tui.console.remotes import RemoteSource, declare
from tui.console.safetext import UnprintableFilter
from tui.console.screens.base import ConsoleScreen
from tui.console.screens.bench import BenchScreen
from tui.console.screens.campaign import CampaignScreen
from tui.console.screens.dashboard import DashboardScreen
from tui.console.screens.launch import LaunchScreen
from tui.console.screens.playbook import PlaybookScreen
from tui.console.screens.results import ResultsScreen
from tui.console.state import BAND, ConsoleState
from tui.core.errors import AppError, printable
from tui.core.events import Event, Notice
from tui.core.follow import LayoutFollower
from tui.core.host.base import Host, HostOptions
from tui.core.launch import ownership
from tui.core.launch.history import StartupHistory
from tui.core.launch.state import StateStore
from tui.core.models import Catalog, Workload
from tui.core.plan.request import LaunchRequest
from tui.core.playbook import Playbook, load_playbook
from tui.core.playbook.loader import is_entry_id
from tui.core.record.present import SessionPresent
from tui.core.remote.events import HostReconnected, HostUnreachable, RemoteEvent, RemoteTick

FLUSH_S = 0.25
FREEZE_AFTER_S = 2.0
#: how often a detached command this console started is asked whether it ended (waitpid WNOHANG: no thread waits)
JOB_POLL_S = 0.25
#: how often the ended ones are reaped
REAP_S = 2.0
LAYOUT_RECHECK_S = 2.0
#: a host's layout events held for the next flush at most (a burst past it is published at once)
PENDING_EVENTS = 512
#: a burst of a host's layout events gives the loop back this often
YIELD_EVERY = 64


#: a layout in one of these states is up (what stop, the quit dialog and "one layout at a time" look at)
UP = ("starting", "ready", "degraded")
__all__ = ["ConsoleApp", "ConsoleContext", "make_console"]


def make_console(options: HostOptions | None = None, *, live: bool = True, clock: Callable[[], float] | None = None,
                 host: Host | None = None, catalog: Catalog | None = None, book: Playbook | None = None,
                 events: Iterable[Event] = (), ports: tuple[int, int, int] | None = None,
                 record: bool = True, remotes: Mapping[str, RemoteSource] | None = None,
                 follows: Mapping[str, RemoteSource] | None = None,
                 connect: Callable[[str], across.Connected] | None = None) -> ConsoleApp:
    """The console on the host ``options`` select (``live``), or fed only by ``events`` (tests, replay).
    ``remotes``: the other hosts shown, each followed through its source of ``RemoteTick``/``HostUnreachable``/
    ``HostReconnected`` events (``RemoteHost.watch()``; a test's fake), live or not. ``follows``: each one's
    layout stream (``RemoteEvent``s: ``RemoteHost.follow()``; by default made from its watch stream's transport).
    ``connect``: both streams of a host a launch across hosts adds (default: from the inventory)."""
    opts = options or HostOptions()
    if host is None and live:
        from tui.hosts import select_host

        host = select_host(opts)
    ctx = ConsoleContext(options=opts, host=host, catalog=catalog or Catalog.load(), store=StateStore(),
                         book=book if book is not None else (load_playbook() if live else None), live=live,
                         ports=ports, record=record and live, remote_hosts=tuple(remotes or ()))
    app = ConsoleApp(ctx, clock=clock, remotes=remotes, follows=follows, connect=connect)
    for ev in events:
        app.state.apply(ev)
    return app


#: the console's one net under every line it draws (one object: Textual caches a line's filtered form by filter)
UNPRINTABLE = UnprintableFilter()


class ConsoleApp(App[int]):
    CSS_PATH = "console.tcss"
    TITLE = "disagg-tui"
    ENABLE_COMMAND_PALETTE = True
    COMMANDS: ClassVar[set[Any]] = App.COMMANDS | {ConsoleCommands}
    #: each mode's screen, made once by the app with the console's context and state (see ``_make_screen``)
    SCREENS_OF_MODES: ClassVar[dict[str, type[ConsoleScreen]]] = {
        "dashboard": DashboardScreen, "launch": LaunchScreen, "bench": BenchScreen, "results": ResultsScreen,
        "campaign": CampaignScreen, "playbook": PlaybookScreen,
    }
    #: the modes a replay does not offer (it launches nothing)
    LIVE_MODES: ClassVar[frozenset[str]] = frozenset({"launch", "campaign"})
    DEFAULT_MODE: ClassVar[str] = "dashboard"
    # the letters are taken as they come (priority: a burst like "l qwen3.6" switches to the launch screen before
    # the name reaches it), and never where the operator types (check_action: an input, a drop-down, a dialog)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "go('launch')", "launch", priority=True),
        Binding("b", "go('bench')", "bench", priority=True),
        Binding("c", "go('campaign')", "campaign", priority=True),
        Binding("r", "go('results')", "results", priority=True),
        Binding("p", "go('playbook')", "playbook", priority=True),
        Binding("escape", "mode('dashboard')", "dashboard", show=False),
        Binding("ctrl+t", "toggle_recording", "rec on/off"),
        Binding("question_mark,f1", "help", "help", show=False),
        Binding("q", "ask_quit", "quit", priority=True),
        # quitting always asks (the dialog): ctrl+c and ctrl+q too, never an exit at once
        Binding("ctrl+c,ctrl+q", "quit_console", "quit", show=False, priority=True),
    ]

    def __init__(self, ctx: ConsoleContext, *, clock: Callable[[], float] | None = None,
                 remotes: Mapping[str, RemoteSource] | None = None,
                 follows: Mapping[str, RemoteSource] | None = None,
                 connect: Callable[[str], across.Connected] | None = None) -> None:
        super().__init__()
        self.ctx = ctx
        self.clock = clock or time.time
        self.state = ConsoleState(self.clock)
        declare(self.state, ctx.remote_hosts)
        #: the other hosts' streams, and the newest tick of each not yet published (coalesced to the flush)
        self._remote_sources: dict[str, RemoteSource] = dict(remotes or {})
        self._pending_ticks: dict[str, RemoteTick] = {}
        #: each host's layout stream (its follow --json), and its events not yet published (a batch a flush)
        self._follow_sources: dict[str, RemoteSource] = dict(follows or {})
        for name, source in self._remote_sources.items():
            if name not in self._follow_sources and (made := across.follow_of(source)) is not None:
                self._follow_sources[name] = made
        self._pending_events: dict[str, list[RemoteEvent]] = {}
        #: which of a host's streams are down now ("watch", "follow"): one unreachable state a host
        self._streams_down: dict[str, set[str]] = {}
        self._connect = connect or across.connect
        #: what closes the connections of the hosts this console added (a launch across them)
        self._closers: list[Callable[[], None]] = []
        self._unsubscribe = ctx.bus.subscribe(self.state.apply)
        self.follower: LayoutFollower | None = None
        self.telemetry: Any = None
        self.jobs: list[Job] = []
        #: the benchmark this console follows (started here, or found running): its process is not this one
        self.bench_job: BenchJob | None = None
        #: the last launch from this console (what apply-fix and restart repeat)
        self.last_launch: LaunchRequest | None = None
        self.last_across: LaunchRequest | None = None  # the layout across hosts this console launched, as asked
        self.draws = 0
        self.last_draw_ms = 0.0
        #: the modes whose screens were made and frozen out of the garbage collector (see on_mount)
        self._frozen_modes: set[str] = {self.DEFAULT_MODE}
        #: the session's recording (on by default in a live console; ctrl+t toggles it)
        self.recorder: Any = None
        self.recording_path: str = ""
        #: what the session shows now, kept from its start for a recording that begins later (issue 22, 9)
        self.present = SessionPresent(ctx.bus)
        #: the screens made so far (each mode's, once): the app hands them a new state when a replay seeks
        self._screens: list[ConsoleScreen] = []
        for mode, screen_class in self.SCREENS_OF_MODES.items():
            self.add_mode(mode, partial(self._make_screen, screen_class))

    def get_line_filters(self) -> list[LineFilter]:
        """Textual's filters and the console's net: no widget's line reaches the terminal with a control character
        (:class:`tui.console.safetext.UnprintableFilter`)."""
        return [*super().get_line_filters(), UNPRINTABLE]

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """As Textual's, but a notification is plain text whoever asks (a screen's ``notify`` says markup): its
        message and title through the sink (a quoted value from outside: escaped, its markup shown as written,
        never an action or a link)."""
        super().notify(printable(message, keep="\n"), title=printable(title), severity=severity, timeout=timeout,
                       markup=False)

    def _make_screen(self, screen_class: type[ConsoleScreen]) -> ConsoleScreen:
        screen = screen_class(self.ctx, self.state)
        self._screens.append(screen)
        return screen

    def hand_down_state(self) -> None:
        """Give every screen made so far the console's state (a replay's seek made a new one)."""
        for screen in self._screens:
            screen.state = self.state

    # --- modes -------------------------------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.ctx.bus.attach_loop(asyncio.get_running_loop())
        self.set_interval(FLUSH_S, self.flush)
        self.set_interval(REAP_S, self._reap_jobs)
        # what exists once the first screen is up (modules, CSS, widgets: ~10^5 objects) lives as long as the app:
        # out of the collector's sight, a full collection scans only what came later (65 ms pauses become ~5 ms,
        # benchmarks/console_load.py); objects made later are collected as usual
        self.set_timer(FREEZE_AFTER_S, self._freeze_startup_objects)
        if self.ctx.live:
            self.start_sources()
        for name, source in self._remote_sources.items():
            self.follow_remote(name, source)
        for name, source in self._follow_sources.items():
            self.follow_remote_layout(name, source)
        if self.ctx.live:
            self.find_layout_across()

    async def on_event(self, event: events.Event) -> None:
        """A key goes first to the screen shown, which takes what is typed where the operator types (a search
        list's letters go to its search box; see ``ConsoleScreen.take_typed_key``): never a mode switch or a quit."""
        if isinstance(event, events.Key) and not event.is_forwarded:
            try:
                screen = self.screen
            except ScreenStackError:
                screen = None
            if isinstance(screen, ConsoleScreen) and screen.take_typed_key(event):
                return
        await super().on_event(event)

    def _freeze_startup_objects(self) -> None:
        gc.collect()
        gc.freeze()

    def on_resize(self, event: Any) -> None:
        """80 columns: the side forms narrow down (console.tcss ``.-narrow``)."""
        self.set_class(event.size.width < 100, "-narrow")

    def action_mode(self, mode: str) -> None:
        if mode != self.current_mode:
            self.switch_mode(mode)
            if mode not in self._frozen_modes:  # a screen is made once and kept: its objects frozen out too
                self._frozen_modes.add(mode)
                self.set_timer(FREEZE_AFTER_S, self._freeze_startup_objects)

    def action_go(self, mode: str) -> None:
        """A mode's letter (l b c r p): the mode."""
        self.action_mode(mode)

    def action_ask_quit(self) -> None:
        """``q``: the quit dialog."""
        self.action_quit_console()

    def _typing(self) -> bool:
        """The key goes where the operator types: an input or a drop-down, or a dialog (the palette's too)."""
        try:
            screen = self.screen
        except ScreenStackError:
            return True
        return not isinstance(screen, ConsoleScreen) or isinstance(screen.focused, Input | TextArea | Select)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A letter is the operator's text where they type (``go``, ``ask_quit``: the key then goes on to the
        input). A replay offers only what shows the recording: no launch or campaign screen, no recording of its
        own (hidden from the footer and the palette, and the keys do nothing)."""
        if action in ("go", "ask_quit") and self._typing():
            return False
        if self.ctx.replay is not None:
            if action in ("mode", "go") and parameters and parameters[0] in self.LIVE_MODES:
                return False
            if action == "toggle_recording":
                return False
        return True

    def replay_label(self, width: int = 160) -> str | None:
        """What the header says of a replay (None: live), for a header ``width`` columns wide. The replay console
        adds its clock and timeline."""
        return self.ctx.replay

    def refuse_in_replay(self) -> bool:
        """True (and a notification saying why) when this console only shows: it replays a recording, or it is
        watch-only (a browser's, served without ``--operator``): it launches, stops, measures and edits nothing."""
        if self.ctx.replay:
            self.notify("this console replays a recording: nothing is launched, stopped or measured",
                        title="replay", severity="warning", timeout=4)
            return True
        refusal = self.ctx.watch_only_refusal()
        if refusal is not None:
            self.notify(refusal, title="watch-only", severity="warning", timeout=8)
            return True
        return False

    # --- sources ---------------------------------------------------------------------------------------------
    def start_sources(self) -> None:
        host = self.ctx.host
        assert host is not None
        self.follower = LayoutFollower(self.ctx.bus, self.ctx.store, self.ctx.book,
                                       history=StartupHistory(self.ctx.store.root),
                                       sim_startup_s=host.sim_startup_s())
        self.ctx.bus.subscribe(self._follower_notice)
        self.follower.start()
        self.run_telemetry()
        self.run_reattach_check()
        if self.ctx.record:
            self.start_recording()

    def _follower_notice(self, ev: Event) -> None:
        """What the layout follower could not read (a damaged state file, a FIFO in a log's place): a
        notification, once each (the follower says each once)."""
        if isinstance(ev, Notice) and ev.source == "follow" and ev.level == "error":
            self.notify(ev.message, title="cannot follow the layout", severity="error", timeout=12)

    @work(exclusive=True, group="telemetry", exit_on_error=False, description="GPU sampler and server poller")
    async def run_telemetry(self) -> None:
        from tui.core.telemetry.live import LiveTelemetry

        host = self.ctx.host
        assert host is not None
        telemetry = LiveTelemetry(host, self.ctx.store, bus=self.ctx.bus)
        async with telemetry:
            self.telemetry = telemetry
            for err in telemetry.errors:
                self.notify(err, title="GPUs", severity="warning")
            telemetry.start_sampling()
            while True:
                await asyncio.sleep(LAYOUT_RECHECK_S)
                await telemetry.follow_layout()

    @work(group="remote", exit_on_error=False, description="another host's watch stream")
    async def follow_remote(self, name: str, source: RemoteSource) -> None:
        """One remote host's stream (one SSH session, reconnecting: ``RemoteWatch``), read in this worker, never
        waited for on the loop. Its ticks are coalesced: only the newest of each host is published, at the next
        flush (4 Hz); an unreachable or reconnected host is published at once, after the tick it followed."""
        async for ev in source.events():
            if isinstance(ev, RemoteTick):
                self._pending_ticks[name] = ev
                continue
            pending = self._pending_ticks.pop(name, None)
            if pending is not None:
                self.ctx.bus.publish(pending)
            down = self._streams_down.setdefault(name, set())
            if isinstance(ev, HostUnreachable):
                down.add("watch")
            elif isinstance(ev, HostReconnected):
                down.discard("watch")
            self.ctx.bus.publish(ev)

    @work(group="remote-follow", exit_on_error=False, description="another host's layout stream")
    async def follow_remote_layout(self, name: str, source: RemoteSource) -> None:
        """One remote host's layout stream (its ``follow --json`` over one more SSH session: ``RemoteFollow``), read
        in this worker. A start's log is thousands of lines: its events are kept in order and published in a batch
        at the next flush (or at once past ``PENDING_EVENTS``), and the loop is given back every
        ``YIELD_EVERY`` events of a burst (a reconnect sends the log again; the stream drops what it had sent)."""
        n = 0
        async for ev in source.events():
            if isinstance(ev, RemoteEvent):
                pending = self._pending_events.setdefault(name, [])
                pending.append(ev)
                if len(pending) >= PENDING_EVENTS:
                    self._publish_remote_events(name)
                n += 1
                if n % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
            elif isinstance(ev, HostUnreachable | HostReconnected):
                self._publish_remote_events(name)
                self._follow_connection(name, ev)

    def _follow_connection(self, name: str, ev: Event) -> None:
        """The layout stream's own outages are the host's one unreachable state: told when the host was reachable
        (its watch stream says the rest; its next tick shows it reachable again), its reconnect only when it ends
        the host's outage (never a second 'reconnected'). One that stays down while the ticks flow (a remote
        disagg-tui without ``follow``) is told once, as a notification."""
        down = self._streams_down.setdefault(name, set())
        view = self.state.remotes.get(name)
        if isinstance(ev, HostUnreachable):
            first = "follow" not in down
            was_reachable = not down and (view is None or view.down is None)
            down.add("follow")
            if first and was_reachable:
                self.ctx.bus.publish(ev)
                self.state.host_notes.append((f"{name}: its log stream is down ({ev.reason})",
                                              f"{ev.detail or ev.reason}; retried in {ev.retry_in_s:.0f} s: its "
                                              "servers' logs and phases resume then", "warning"))
        elif isinstance(ev, HostReconnected):
            down.discard("follow")
            if not down and view is not None and view.down is not None:
                self.ctx.bus.publish(ev)

    def _publish_remote_events(self, name: str | None = None) -> None:
        names = [name] if name is not None else list(self._pending_events)
        for n in names:
            pending = self._pending_events.pop(n, None)
            for ev in pending or ():
                self.ctx.bus.publish(ev)

    def _publish_remote_ticks(self) -> None:
        if self._pending_events:
            self._publish_remote_events()
        if self._pending_ticks:
            pending, self._pending_ticks = self._pending_ticks, {}
            for ev in pending.values():
                self.ctx.bus.publish(ev)

    def add_hosts(self, names: Iterable[str]) -> None:
        """Follow these inventory hosts too (a launch across them), each not followed yet: both its streams."""
        for name in names:
            if name in self._remote_sources:
                continue
            try:
                watch, follow, close = self._connect(name)
            except AppError as err:
                self.notify(err.hint or "", title=err.one_line(), severity="error", timeout=8)
                continue
            self._closers.append(close)
            self._remote_sources[name] = watch
            self.ctx.remote_hosts = (*self.ctx.remote_hosts, name)
            declare(self.state, [name])
            self.follow_remote(name, watch)
            if follow is not None:
                self._follow_sources[name] = follow
                self.follow_remote_layout(name, follow)
            self.state.dirty.update(("gpus", "servers", "header"))

    def _tell_host_notes(self) -> None:
        """What the remote hosts' events said once (reconnected after a time down, a tick skipped): notifications."""
        notes = self.state.host_notes
        while notes:
            title, message, severity = notes.popleft()
            self.notify(message, title=title, severity=severity, timeout=8)  # type: ignore[arg-type]

    @work(exclusive=True, group="reattach", exit_on_error=False, description="what runs on this host already")
    async def run_reattach_check(self) -> None:
        running = await asyncio.to_thread(lambda: [c for c in campaigns(limit=10) if c.running])
        for c in running:
            self.notify(f"campaign {c.name} is running: {c.done}/{c.total} cells done (c to watch it)",
                        title="Reattached")
        benches = await asyncio.to_thread(running_benches)
        if benches and self.bench_job is None:
            self.follow_bench(BenchJob(benches[0]))
            self.notify("a benchmark started earlier is running: b to watch it, ctrl+x there stops it",
                        title="Reattached")

    # --- benchmarks ---------------------------------------------------------------------------------------------
    def follow_bench(self, bench: BenchJob) -> None:
        """Follow a benchmark's events file: its events reach the bus (the state, the recording) as if the run
        were ours; it runs in a process of its own (``disagg-tui bench``), which outlives the console."""
        self.bench_job = bench
        self._follow_bench(bench)

    @work(group="bench-follow", thread=True, exit_on_error=False, description="following a benchmark")
    def _follow_bench(self, bench: BenchJob) -> None:
        worker = get_current_worker()
        try:
            if bench.job is None:  # found running: its header (who writes it) comes first
                got = bench.read()
                if got:
                    self.call_from_thread(self._publish_all, got)
            while not worker.is_cancelled:
                alive = bench.alive()  # before the read: what it wrote before it ended is read after
                got = bench.read()
                if got:
                    self.call_from_thread(self._publish_all, got)
                if bench.done:
                    return
                if not alive:
                    end = bench.ended_without_end()
                    if end is not None:
                        self.call_from_thread(self._publish_all, [end])
                    elif bench.job is not None:
                        code = bench.job.poll()
                        err = bench.job.last_error()
                        self.call_from_thread(self.notify, err or f"exit code {code}",
                                              title=f"benchmark failed (exit {code})", severity="error",
                                              timeout=12)
                    return
                time.sleep(FLUSH_S)
        except RuntimeError:  # the app is gone (quitting): the run goes on without us
            return
        finally:
            if self.bench_job is bench:
                self.bench_job = None

    def _publish_all(self, events: list[Event]) -> None:
        for ev in events:
            self.ctx.bus.publish(ev)

    def stop_bench(self) -> bool:
        """Ask the benchmark this console follows to stop (what was measured is stored); False if none runs."""
        bench = self.bench_job
        return bench is not None and bench.stop()

    # --- recording ----------------------------------------------------------------------------------------------
    @work(exclusive=True, group="recorder", thread=True, exit_on_error=False, description="starting the recording")
    def start_recording(self) -> None:
        """Record every event of the session (GPU samples, health, phases, logs, diagnoses, runs, the operator's
        actions) under the data directory's ``recordings/``; flushed twice a second, replayable in this console."""
        from tui.core.record import Recorder, new_header, recording_path
        from tui.core.record.fingerprint import host_fingerprint

        host = self.ctx.host
        facts = host.facts if host is not None else None
        extra = {"hosts": list(self.ctx.remote_hosts)} if self.ctx.remote_hosts else None
        rec = Recorder(recording_path("console"), new_header("disagg-tui console", host=host_fingerprint(
            facts, simulated=bool(host and host.simulated)), simulated=bool(host and host.simulated),
            extra=extra)).start()
        rec.attach(self.ctx.bus, self.present)  # the layout shown before it began comes first
        self.recorder, self.recording_path = rec, str(rec.path)
        self.call_from_thread(self.notify, self.recording_path, title="recording this session", timeout=4)

    @work(exclusive=True, group="recorder", thread=True, exit_on_error=False, description="closing the recording")
    def stop_recording(self) -> None:
        rec, self.recorder = self.recorder, None
        if rec is not None:
            stats = rec.close()
            self.call_from_thread(self.notify, f"{self.recording_path}: {stats.events} events",
                                  title="recording closed", timeout=4)

    def action_toggle_recording(self) -> None:
        if self.refuse_in_replay():
            return
        if self.recorder is None:
            self.start_recording()
        else:
            self.stop_recording()

    def operator(self, action: str, target: str = "", **detail: Any) -> None:
        """What the operator did, on the bus (the recording keeps it; a replay's markers show it)."""
        from tui.core.events import OperatorAction

        self.ctx.bus.publish(OperatorAction(action=action, target=target, source="console", detail=detail))

    # --- drawing ---------------------------------------------------------------------------------------------
    def flush(self) -> None:
        """Draw what changed on the visible screen; the state's dirty parts are cleared once drawn."""
        self._publish_remote_ticks()
        if self.state.host_notes:
            self._tell_host_notes()
        try:
            screen = self.screen
        except ScreenStackError:  # shutting down: nothing left to draw on
            return
        draw = getattr(screen, "draw", None)
        if draw is None:
            return
        t0 = time.perf_counter()
        self.state.replay_label = self.replay_label(self.size.width)
        self.state.recording = self.recorder is not None
        try:
            with self.batch_update():
                draw(self.state)
        except NoMatches:  # the screen is still being composed: the next flush draws it
            return
        self.state.dirty.clear()
        self.draws += 1
        self.last_draw_ms = (time.perf_counter() - t0) * 1000

    # --- detached commands ----------------------------------------------------------------------------------
    def _reap_jobs(self) -> None:
        """The detached commands that ended are reaped (no zombie per benchmark over a long session) and
        forgotten; those still running are kept (a benchmark this console follows, a campaign)."""
        self.jobs = [j for j in self.jobs if j.poll() is None]

    @work(group="jobs", exit_on_error=False, description="a detached disagg-tui command")
    async def run_job(self, name: str, argv: list[str], done_message: str = "") -> int | None:
        """Start ``disagg-tui ARGV`` detached and tell the operator how it ended (its own error line if it
        failed). The command goes on if the console quits."""
        if self.refuse_in_replay():
            return None
        job = await asyncio.to_thread(start_job, name, argv)
        self.jobs.append(job)
        self.operator(name, argv=argv)
        self.notify(job.shell(), title=f"{name} started", timeout=4)
        assert job.popen is not None
        # polled, not waited for in a thread: a thread blocked in waitpid on an overnight campaign would keep the
        # console from exiting (asyncio joins its executor's threads at exit) until the campaign ended
        while (code := job.poll()) is None:  # noqa: ASYNC110 (a child process has no event to await)
            await asyncio.sleep(JOB_POLL_S)
        if code == 0:
            if done_message:
                self.notify(done_message, title=name)
        else:
            err = await asyncio.to_thread(job.last_error)
            self.notify(fmt.short_notice(err) if err else f"exit code {code}", title=f"{name} failed (exit {code})",
                        severity="error", timeout=12)
        return code

    def stop_layout(self, *, force: bool = False) -> None:
        self.run_job("down", down_argv(self.ctx.options, force=force), "every server of the layout stopped")

    # --- what the screens ask for (messages up) -----------------------------------------------------------------
    def _layout_up(self) -> bool:
        lay = self.state.layout
        return lay is not None and lay.status in (*UP, "stopping")

    def _confirm(self, title: str, body: str | Text, yes: str, then: Callable[[], None]) -> None:
        """A dialog that says what is about to happen; ``then`` runs only on ``y`` (or its button)."""
        from tui.console.screens.modals import ConfirmModal

        def answer(ok: bool | None) -> None:
            if ok:
                then()

        self.push_screen(ConfirmModal(title, body, yes), answer)

    async def _holders_of_shown(self) -> tuple[ownership.Holder, ...]:
        """Who holds the layout shown now (a running campaign, a benchmark), read afresh: the state file and
        the processes, in a thread."""
        lay = self.state.layout
        if lay is None:
            return ()

        def look() -> tuple[ownership.Holder, ...]:
            rec = self.ctx.store.read().get(lay.id)
            return tuple(ownership.holders(rec)) if rec is not None else ()

        return await asyncio.to_thread(look)

    def _held_dialog(self, what: str, yes: str, holders: tuple[ownership.Holder, ...],
                     then: Callable[[], None], extra: str = "") -> None:
        lay = self.state.layout
        body = Text()
        if lay is not None:
            body.append(f"{lay.topology} of {lay.profile_id} ({lay.status})"
                        + (f", {lay.started_by}" if lay.started_by else "") + ".\n\n")
        for h in holders:
            body.append(f"It is in use by {h.text}.\n", style="bold yellow")
        body.append(f"\n{what}{extra}")
        self._confirm(f"{lay.topology if lay else 'The layout'} is in use", body, yes, then)

    def on_launch_requested(self, message: LaunchRequested) -> None:
        if self.refuse_in_replay():
            return
        if message.hosts:
            self._launch_across(message.request, message.hosts)
            return
        lay = self.state.layout
        if lay is not None and self._layout_up() and not message.request.replace:
            self.notify(f"{lay.topology} of {lay.profile_id} is {lay.status}: stop it first (s on the dashboard)",
                        title="one layout at a time", severity="warning", timeout=6)
            return
        if message.request.replace:
            self._replace(message.request)
        else:
            self._launch(message.request)

    def _launch(self, request: LaunchRequest, *, force: bool = False) -> None:
        self.last_launch = request
        self.run_job("up", launch_argv(request, self.ctx.options, force=force))
        self.action_mode("dashboard")

    @work(exclusive=True, group="layout-guard", exit_on_error=False, description="who holds the layout")
    async def _replace(self, request: LaunchRequest) -> None:
        """``up --replace``: a layout a running campaign or benchmark holds is replaced once the operator says so."""
        holders = await self._holders_of_shown()
        if holders:
            self._held_dialog("Launching replaces it: its servers stop under what runs on it.", "Replace it",
                              holders, lambda: self._launch(request, force=True))
        else:
            self._launch(request)

    def _launch_across(self, request: LaunchRequest, hosts: tuple[str, ...]) -> None:
        """``disagg-tui up --hosts A,B ...`` started detached (each host's part by its own disagg-tui, as the CLI
        does), and each of those hosts followed from now on (both streams) if it was not."""
        self.ctx.across = hosts
        self.last_across = request
        self.run_job("up", across.up_argv(request, hosts), f"the layout across {', '.join(hosts)} is up")
        self.add_hosts(hosts)
        self.action_mode("dashboard")

    def on_stop_requested(self, message: StopRequested) -> None:
        if self.refuse_in_replay():
            return
        hosts = self.ctx.across
        if hosts and (self.state.layout is None or message.host in hosts):
            names = ", ".join(hosts)
            self._confirm(f"Stop the layout across {names}?",
                          f"disagg-tui down --hosts {','.join(hosts)}: every host's part is stopped by its own "
                          "disagg-tui over SSH.", "Stop it", lambda: self.stop_across(hosts))
            return
        if self.state.layout is None:
            self.notify("no layout is up", timeout=3)
            return
        self._stop()

    def stop_across(self, hosts: tuple[str, ...]) -> None:
        """``disagg-tui down --hosts A,B`` started detached (it goes on if the console quits)."""
        self.run_job("down", across.down_argv(hosts), f"every part on {', '.join(hosts)} stopped")
        if self.ctx.across == hosts:
            self.ctx.across = ()

    @work(exclusive=True, group="across", exit_on_error=False, description="the layout across hosts started here")
    async def find_layout_across(self) -> None:
        """The layout across hosts up in ``clusters.json`` (started here by this console or the CLI): ``s`` stops it
        (the console opened later reattaches to it as to a local layout)."""
        from tui.core.remote import record

        rec = await asyncio.to_thread(record.active)
        if rec is not None and not self.ctx.across:
            self.ctx.across = tuple(rec.names)

    @work(exclusive=True, group="layout-guard", exit_on_error=False, description="who holds the layout")
    async def _stop(self) -> None:
        """Stop the layout shown; one a running campaign or benchmark holds only once the operator says so."""
        holders = await self._holders_of_shown()
        if holders:
            self._held_dialog("Stopping it now fails what runs on it (a campaign's cell; a benchmark ends "
                              "incomplete).", "Stop it", holders, lambda: self.stop_layout(force=True))
        else:
            self.stop_layout()

    def on_restart_requested(self, _: RestartRequested) -> None:
        self._launch_again()

    def on_fix_requested(self, message: FixRequested) -> None:
        if message.host:
            self._fix_across(message.host, message.entry_id)
            return
        d = self.state.active_diagnosis()
        if d is None or d.entry_id != message.entry_id:
            self.notify("no diagnosis to fix", timeout=3)
            return
        if not d.fixable:
            self.notify(f"{d.entry_id} has no fix to apply: {d.fix}", title="no automatic fix", timeout=8)
            return
        if self.refuse_in_replay():
            return
        self._launch_again(apply_fix=d.entry_id)

    def _fix_across(self, host: str, entry_id: str) -> None:
        """``a`` on a server of another host: its host's diagnosis fixed as a local one is, by launching the layout
        across hosts again with the fix (``up --hosts A,B … --apply-fix ENTRY``: each host plans its own part with
        it) once the operator says so; a layout this console did not launch across hosts gets the command to run."""
        from tui.console.screens.modals import TextModal

        rv = self.state.remotes.get(host)
        d = next((x for x in (rv.diagnoses if rv is not None else []) if x.entry_id == entry_id), None)
        if rv is None or d is None:
            self.notify("no diagnosis to fix", timeout=3)
            return
        if not d.fixable:
            self.notify(f"{entry_id} has no fix to apply: {d.fix}", title=f"no automatic fix (on {host})", timeout=8)
            return
        if not is_entry_id(entry_id) or entry_id == "auto":  # the remote's word, about to be an argument
            self.notify(f"{entry_id[:60]!r} is not a playbook entry id", title=f"not fixed (on {host})",
                        severity="error", timeout=8)
            return
        if self.refuse_in_replay():
            return
        hosts, request = self.ctx.across, self.last_across
        if request is None or host not in hosts:
            lay = rv.layout
            what = f"-m {lay.profile_id} -t {lay.topology}" if lay is not None else "-m MODEL -t TOPOLOGY"
            self.notify(f"relaunch it with the fix: disagg-tui up --hosts {','.join(hosts) or host} {what} "
                        f"--apply-fix {entry_id}", title=f"{entry_id} on {host}: not launched across hosts here",
                        timeout=12)
            return
        fixes = [f for f in (request.apply_fix or "").split(",") if f and f != "auto"]
        again = dataclasses.replace(request, apply_fix=",".join(dict.fromkeys([*fixes, entry_id])))
        argv = across.up_argv(again, hosts)
        up = rv.layout is not None and rv.layout.status in UP

        def go() -> None:
            for each in list(rv.diagnoses):
                if each.entry_id == entry_id:
                    rv.diagnoses.remove(each)
            self.state.dirty.add(BAND)
            self.operator("apply_fix", ",".join(hosts), command=shlex.join(["disagg-tui", *argv]), host=host)
            self._launch_across(again, hosts)

        body = Text(f"{d.title}\n\nFix: {d.fix}\n\nRuns: disagg-tui {shlex.join(argv)}\n"
                    f"(each host plans its own part with the fix; every part starts again)")
        if up:
            body.append("\n\nThe layout across hosts is up: stop it first (s), then apply the fix.", style="bold")
            self.push_screen(TextModal(f"{entry_id} on {host}", body))
            return
        self._confirm(f"Apply {entry_id} and relaunch across {', '.join(hosts)}?", body, "Relaunch", go)

    def on_dismiss_requested(self, _: DismissRequested) -> None:
        """``x``: a failed layout goes at once, every diagnosis of it with it, out of the state file too (``status``
        agrees; the playbook screen lists it among the past failures); on a layout that is up, the diagnosis shown
        goes."""
        state = self.state
        lay = state.layout
        if lay is not None and lay.status == "failed":
            for each in list(state.diagnoses):
                state.dismiss(each)
            if self.follower is not None:
                self.follower.dismiss(lay.id)
            self._dismiss_failed(lay.id)
        else:
            d = state.active_diagnosis()
            if d is not None:
                state.dismiss(d)
        self.flush()

    @work(group="dismiss", exit_on_error=False, description="dismissing a failed layout")
    async def _dismiss_failed(self, layout_id: str) -> None:
        from tui.core.launch import failures

        if self.ctx.watch_only is not None:  # the state file is the operator's: only this console forgets it
            self.notify(self.ctx.watch_only_refusal() or "", title="dismissed here only", timeout=6)
            return
        if not await asyncio.to_thread(failures.dismiss, self.ctx.store, layout_id):
            self.notify("it is no longer a failed layout of the state file (or a process of it still runs: "
                        "'disagg-tui down --all' stops it)", title="dismissed here only", timeout=6)

    @work(exclusive=True, group="layout-guard", exit_on_error=False, description="preparing the relaunch")
    async def _launch_again(self, apply_fix: str | None = None) -> None:
        """Launch the layout shown again with the request it was started with (the state file's: a layout started
        from the CLI or by a campaign restarts with its own), ``apply_fix`` added to the fixes it carries. A
        restart always asks first, saying what it runs and which fixes it carries; an applied fix asks when the
        layout is up or someone holds it."""
        from tui.console import relaunch

        if self.refuse_in_replay():
            return
        lay = self.state.layout
        try:
            again = await asyncio.to_thread(relaunch.prepare, self.ctx.store, lay, self.last_launch,
                                            ports=self.ctx.ports, apply_fix=apply_fix)
        except AppError as err:
            self.notify(err.hint or "", title=err.one_line(), severity="error", timeout=10)
            return
        if again is None:
            self.notify("no layout to launch again: press l to launch one", timeout=4)
            return

        def go() -> None:
            if lay is not None and lay.status == "failed":
                for d in list(self.state.diagnoses):
                    self.state.dismiss(d)
                if self.follower is not None:
                    self.follower.dismiss(lay.id)
            self.last_launch = again.request
            self.operator("restart" if apply_fix is None else "apply_fix", lay.id if lay else "",
                          command=again.command)
            self.run_job("up", launch_argv(again.request, self.ctx.options, force=bool(again.holders)))

        if apply_fix is None or again.serving or again.holders:
            title = f"Apply {apply_fix} and relaunch?" if apply_fix else \
                f"Restart {lay.topology if lay else 'the layout'}?"
            self._confirm(title, relaunch.dialog_text(again, fix=apply_fix),
                          "Relaunch" if apply_fix else "Restart", go)
        else:
            go()

    def on_bench_requested(self, message: BenchRequested) -> None:
        if self.refuse_in_replay():
            return
        if self.state.bench.running or self.bench_job is not None:
            self.notify("a benchmark is running: ctrl+x stops it", severity="warning", timeout=4)
            return
        self.run_benchmark(message.workload, message.slo, message.runner)

    @work(exclusive=True, group="bench", exit_on_error=False, description="starting a benchmark")
    async def run_benchmark(self, workload: Workload, slo: dict[str, float], runner: str,
                            force: bool = False) -> None:
        """``disagg-tui bench`` started detached against the active layout, then followed; why not, if not. A
        layout a running campaign or another benchmark holds is benchmarked only once the operator says so (the
        run is stored under ``runs/console/``, apart from the campaign's)."""
        try:
            bench = await asyncio.to_thread(start_bench, self.ctx.store, self.ctx.options, workload, slo, runner,
                                            force=force)
        except ownership.LayoutInUse as err:
            def anyway() -> None:
                self.run_benchmark(workload, slo, runner, force=True)

            self._held_dialog("A second load on it skews both runs, and the campaign may stop the layout under "
                              "this one. ", "Benchmark it anyway", err.holders, anyway,
                              extra="This run is stored under runs/console/, apart from the campaign's cells.")
            return
        assert bench.job is not None
        self.jobs.append(bench.job)
        self.operator("bench", argv=bench.job.argv)
        self.follow_bench(bench)

    def on_bench_stop_requested(self, _: BenchStopRequested) -> None:
        if self.refuse_in_replay():
            return
        stopped = self.stop_bench()
        self.notify("stopping: what was measured is kept" if stopped else "no benchmark is running", timeout=4)

    def _run_campaign(self, choice: CampaignChoice, name: str | None = None) -> None:
        argv = run_argv(choice.model, choice.topologies, choice.workloads, self.ctx.options, rates=choice.rates,
                        repeat=choice.repeat, campaign=name, num_prompts=choice.num_prompts, runner=choice.runner,
                        ports=self.ctx.ports, knobs=choice.knobs)
        self.run_job("run", argv, "the campaign finished")

    def on_campaign_requested(self, message: CampaignRequested) -> None:
        if self.refuse_in_replay():
            return
        if self._layout_up():
            self.notify("a layout is up: the campaign brings up its own; stop this one first (s on the dashboard)",
                        title="one layout at a time", severity="warning", timeout=6)
            return
        self._run_campaign(message.choice)

    def on_campaign_resume_requested(self, message: CampaignResumeRequested) -> None:
        if not self.refuse_in_replay():
            self._run_campaign(message.choice, message.name)

    def on_playbook_changed(self, message: PlaybookChanged) -> None:
        """The operator's playbook was written: the starts to come are matched against it, the screens show it."""
        self.ctx.book = message.book
        if self.follower is not None:
            self.follower.book = message.book

    # --- errors ------------------------------------------------------------------------------------------------
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The failure of one of the app's own workers."""
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.tell_failure(event.worker.description or event.worker.group, event.worker.error)

    def on_worker_failed(self, message: WorkerFailed) -> None:
        """The failure of a screen's or a dialog's worker (forwarded: Worker.StateChanged does not bubble)."""
        self.tell_failure(message.what, message.error)

    def tell_failure(self, what: str, err: BaseException) -> None:
        """Every worker's failure becomes one notification with a title and a hint; never a traceback."""
        if isinstance(err, AppError):
            self.notify(err.hint or "", title=err.title, severity="error", timeout=10)
        else:
            self.notify(f"{type(err).__name__}: {err}", title=f"{what} failed", severity="error", timeout=10)

    # --- help and the palette -----------------------------------------------------------------------------------
    def get_system_commands(self, screen: Screen[Any]) -> Iterator[SystemCommand]:
        """Textual's own commands, less its Quit (the console's asks first, and is listed once) and its Keys (the
        console's help lists them)."""
        for c in super().get_system_commands(screen):
            if c.title not in ("Quit", "Keys"):
                yield c

    def action_help(self) -> None:
        """``?``/F1: every key this screen offers now, and where the rest are (the palette)."""
        from tui.console.commands import help_text
        from tui.console.screens.modals import TextModal

        self.push_screen(TextModal("Keys (? or F1)", help_text(self)))

    # --- quitting --------------------------------------------------------------------------------------------
    def action_quit_console(self) -> None:
        """Quitting asks once (a key typed by accident never ends the console): leave the servers running (the
        default) or stop them when a layout is up; a replay has no layout of its own to stop."""
        from tui.console.screens.modals import QuitModal

        if isinstance(self.screen, QuitModal):
            return
        acts = self.ctx.replay is None and self.ctx.watch_only is None
        local = acts and self.state.layout is not None and self.state.layout.status in UP
        hosts = self.ctx.across if acts else ()  # a layout across hosts started here or found in clusters.json
        offer_stop = local or bool(hosts)

        def answer(choice: str | None) -> None:
            layout = self.state.layout.id if self.state.layout is not None else ""
            if choice == "leave":
                # what the operator chose is in the recording (issue 22, finding 16)
                self.operator("quit", layout, servers="left running" if offer_stop else "none up")
                self.exit(0)
            elif choice == "stop":
                self.operator("quit", layout, servers="stopped", **({"hosts": list(hosts)} if hosts else {}))
                self.stop_bench()  # before its servers go: the run ends as stopped, not as a server death
                if local:
                    # the dialog named who holds it (a campaign, a benchmark) and the stop button said "anyway"
                    held = self.state.layout is not None and bool(self.state.layout.held_by)
                    self.run_job("down", down_argv(self.ctx.options, force=held or self.bench_job is not None))
                if hosts:
                    self.stop_across(hosts)  # detached: it goes on after the console has quit
                self.set_timer(0.5, lambda: self.exit(0))

        self.push_screen(QuitModal(self.state, offer_stop=offer_stop, replay=self.ctx.replay is not None,
                                   across=hosts), answer)

    def on_unmount(self) -> None:
        self._unsubscribe()
        for close in self._closers:
            with contextlib.suppress(Exception):
                close()
        if self.follower is not None:
            self.follower.stop()
        if self.recorder is not None:
            self.recorder.close()  # its last events flushed; a kill loses at most the last half second
