"""``disagg-tui replay FILE``: the console fed by a recording instead of the host.

The screens are the live console's; only the source differs: a ``ReplaySource`` publishes the recording's events
on the console's bus at the recording's pace, and the console's clock is the recording's, so ages, ETAs and the
header's time are those of the moment replayed. The header carries the replay's state and a timeline with the
markers (phase changes, diagnoses, finished runs, failures). A seek rebuilds the console's state from the start of
the recording up to the new time (off the event loop) before the pump goes on from there, and the app hands the new
state to every screen. Nothing is launched, stopped or measured from a replay: the footer, the palette and the keys
offer only what shows the recording (the screens' ``LIVE_ACTIONS`` and the app's ``LIVE_MODES`` are left out).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.binding import Binding, BindingType

from tui.console.app import ConsoleApp
from tui.console.context import ConsoleContext
from tui.console.remotes import MAX_HOSTS, declare
from tui.console.state import ConsoleState
from tui.core.errors import printable
from tui.core.host.base import HostOptions
from tui.core.launch.state import StateStore
from tui.core.models import Catalog
from tui.core.playbook import load_playbook
from tui.core.record import Recording, ReplaySource

SPEEDS = (0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0)
#: how long a jump's notice shows (the next jump replaces it)
JUMP_NOTICE_S = 4.0
MARK = {"phase": "│", "diagnosis": "✖", "run": "●", "failure": "!", "operator": "·"}


class ReplayConsoleApp(ConsoleApp, inherit_bindings=False):
    # the replay's own keys first (an 80-column footer shows them before the others), then the console's
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "toggle_pause", "pause/play"),
        Binding("plus,equals_sign", "speed(1)", "faster"),
        Binding("minus", "speed(-1)", "slower"),
        Binding("right", "seek(30)", "+30 s", show=False),
        Binding("left", "seek(-30)", "-30 s", show=False),
        Binding("shift+right", "seek(300)", "+5 min", show=False),
        Binding("shift+left", "seek(-300)", "-5 min", show=False),
        Binding("n", "next_marker('')", "next mark"),
        Binding("1", "next_marker('phase')", "next phase", show=False),
        Binding("2", "next_marker('diagnosis')", "next diagnosis", show=False),
        Binding("3", "next_marker('run')", "next run", show=False),
        Binding("m", "markers", "markers"),
        *ConsoleApp.BINDINGS,
    ]

    def __init__(self, ctx: ConsoleContext, recording: Recording, *, speed: float = 1.0) -> None:
        self.recording = recording
        self.source: ReplaySource | None = None
        self._speed = speed
        self._was_paused = False
        #: until when (monotonic) a notice other than a jump's shows: a jump clears only its own kind
        self._other_notice_until = 0.0
        super().__init__(ctx, clock=self._now)
        declare(self.state, self.recorded_hosts)

    @property
    def recorded_hosts(self) -> list[str]:
        """The other hosts the recorded console showed (its header's ``extra.hosts``; checked: a file from
        outside), in their order; a host whose events come without being named there is shown as they come."""
        raw = self.recording.header.extra.get("hosts") if isinstance(self.recording.header.extra, dict) else None
        if not isinstance(raw, list):
            return []
        return [printable(h[:32]) for h in raw[:MAX_HOSTS] if isinstance(h, str) and h]

    def _now(self) -> float:
        return self.source.now() if self.source is not None else self.recording.start

    def on_mount(self) -> None:
        super().on_mount()
        self.source = ReplaySource(self.recording, self.ctx.bus, speed=self._speed)
        self.source.on_seek(self._rebuild)
        self._told: tuple[str | None, int] = (None, 0)
        self._pump()
        self._tell_damage()
        self.set_interval(1.0, self._tell_damage)

    def _tell_damage(self) -> None:
        """A recording damaged part-way (cut short, a decompression bomb, events of the wrong shape) replays up to
        the damage: the operator is told once where it stopped, and how many events were left out."""
        rec = self.recording
        told, bad = self._told
        name = Path(str(self.ctx.replay)).name
        if rec.damage is not None and rec.damage != told:
            self.notify(f"{name}: {rec.damage}; replayed up to there", title="recording damaged",
                        severity="warning", timeout=10)
        if rec.bad_events and not bad:
            self.notify(f"{name}: {rec.bad_events} damaged events left out (the first {rec.first_bad})",
                        title="recording damaged", severity="warning", timeout=10)
        self._told = (rec.damage, rec.bad_events)

    @work(exclusive=True, group="replay", exit_on_error=False, description="replaying the recording")
    async def _pump(self) -> None:
        assert self.source is not None
        await self.source.run()

    # --- the header ------------------------------------------------------------------------------------------
    def replay_label(self, width: int = 160) -> str | None:
        """The recording's name (wide headers only), the replay's state and clock, its timeline with the markers,
        and how far it is: at 80 columns without the name and on a shorter timeline, so the header is not cut."""
        src = self.source
        rec = self.recording
        name = Path(str(self.ctx.replay)).name
        if src is None:
            return name
        span = max(rec.end - rec.start, 1e-9)
        pos = (src.now() - rec.start) / span
        wide = width >= 200  # the recording's name only where the header keeps the layout and the clock too
        cells_n = 24 if width >= 120 else 10
        cells = [" "] * cells_n
        for m in rec.markers_of(None):
            i = min(int((m.ts - rec.start) / span * cells_n), cells_n - 1)
            if cells[i] == " " or m.kind in ("failure", "diagnosis"):
                cells[i] = MARK.get(m.kind, "·")
        at = min(int(pos * cells_n), cells_n - 1)
        cells[at] = "▶" if not src.paused else "⏸"
        state = "paused" if src.paused else ("end" if src.at_end else f"{src.speed:g}×")
        clock = time.strftime("%H:%M:%S", time.localtime(src.now()))
        # the header's own clock is the recording's: at 80 columns it is not said twice
        line = f"{state}{f' {clock}' if width >= 120 else ''} [{''.join(cells)}] {pos * 100:.0f}%"
        return f"{name} {line}" if wide else line

    # --- controls ------------------------------------------------------------------------------------------
    def action_toggle_pause(self) -> None:
        if self.source is None:
            return
        if self.source.paused:
            self.source.resume()
        else:
            self.source.pause()
        self.flush()

    def action_speed(self, step: int) -> None:
        if self.source is None:
            return
        i = min(range(len(SPEEDS)), key=lambda k: abs(SPEEDS[k] - self.source.speed))  # type: ignore[union-attr]
        self.source.set_speed(SPEEDS[max(0, min(len(SPEEDS) - 1, i + step))])
        self.notify(f"replay at {self.source.speed:g}×", timeout=2)

    def action_seek(self, seconds: float) -> None:
        if self.source is not None:
            self.source.seek(self.source.now() + seconds)

    def notify(self, message: str, *, title: str = "", severity: Any = "information", timeout: float | None = None,
               markup: bool = True) -> None:
        """As the console's (plain text, through the sink); a notice that is not a jump's is kept when the next jump
        clears the last one."""
        self._other_notice_until = max(self._other_notice_until,
                                       time.monotonic() + (timeout or self.NOTIFICATION_TIMEOUT))
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def _jump_notice(self, message: str, title: str) -> None:
        """One jump's notice at a time: the previous one goes (others stay while they last)."""
        if time.monotonic() >= self._other_notice_until:
            self.clear_notifications()
        super().notify(message, title=title, timeout=JUMP_NOTICE_S)

    def action_next_marker(self, kind: str) -> None:
        if self.source is None:
            return
        m = self.source.next_marker(kind or None)
        if m is None:
            self._jump_notice(f"no {kind or 'marker'} after this point", "replay")
        else:
            self._jump_notice(m.label, f"{m.kind} at {time.strftime('%H:%M:%S', time.localtime(m.ts))}")

    def action_markers(self) -> None:
        """The recording's markers; Enter jumps to the one highlighted."""
        from tui.console.screens.markers import MarkersModal

        def jump(ts: float | None) -> None:
            if ts is not None and self.source is not None:
                self.source.seek(ts)

        self.push_screen(MarkersModal(f"markers of {Path(str(self.ctx.replay)).name}",
                                      self.recording.markers_of(None), self._now()), jump)

    # --- seeking ---------------------------------------------------------------------------------------------
    def _rebuild(self, t: float) -> None:
        """Before the pump goes on from ``t``: the console's state as it was at ``t``, folded in a thread. The
        replay holds still meanwhile, so no event lands in the state being replaced."""
        assert self.source is not None
        self._was_paused = self.source.paused
        self.source.pause()
        self._fold_until(t)

    @work(exclusive=True, group="replay-seek", thread=True, exit_on_error=False, description="seeking")
    def _fold_until(self, t: float) -> None:
        state = ConsoleState(self._now)
        declare(state, self.recorded_hosts)
        for ev in self.recording.events():
            if ev.ts >= t:  # the pump goes on from t, these included: folded here too, a run would count twice
                break
            state.apply(ev)
        state.host_notes.clear()  # what was told before the jump is not told again at once
        self.call_from_thread(self._swap, state)

    def _swap(self, state: ConsoleState) -> None:
        old = self.state
        self._unsubscribe()
        self.state = state
        self._unsubscribe = self.ctx.bus.subscribe(self.state.apply)
        self.hand_down_state()
        del old
        if self.source is not None and not self._was_paused:
            self.source.resume()
        self.flush()


def make_replay(path: Path, *, speed: float = 1.0, options: HostOptions | None = None) -> ReplayConsoleApp:
    recording = Recording.open(path)
    ctx = ConsoleContext(options=options or HostOptions(sim=True), host=None, catalog=Catalog.load(),
                         store=StateStore(), book=load_playbook(), live=False, replay=str(path), record=False)
    return ReplayConsoleApp(ctx, recording, speed=speed)


def replay(path: Path, *, speed: float = 1.0, **_: Any) -> int:
    app = make_replay(path, speed=speed)
    try:
        code = app.run()
    finally:
        app.recording.close()
    return 0 if code is None else int(code)

