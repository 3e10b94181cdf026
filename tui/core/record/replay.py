"""A recording as an event source: its events published on a bus at the pace they were recorded, paused,
sped up (0.5-100x) or seeked, the same bus a live host feeds (the console cannot tell them apart)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator

from tui.core.events import Event, EventBus
from tui.core.record.markers import Marker
from tui.core.record.reader import Recording

MIN_SPEED = 0.5
MAX_SPEED = 100.0
SeekListener = Callable[[float], None]


class ReplaySource:
    """Publishes a recording's events onto ``bus`` in recording time, like a live host would.

    Run :meth:`run` as a task on the loop that owns the bus. The controls may be called from that loop at any
    time: :meth:`pause`, :meth:`resume`, :meth:`set_speed` (0.5–100), :meth:`seek` (recording time, clamped to the
    recording), :meth:`next_marker`. :meth:`now` is the recording's clock (epoch seconds), which a screen shows
    instead of the wall clock. Events keep their recorded ``ts``. After a seek, publishing resumes from the new
    time (events before it are not sent again): a consumer that keeps state registers a listener with
    :meth:`on_seek` to reset it first.
    """

    def __init__(self, recording: Recording, bus: EventBus, *, speed: float = 1.0, start: float | None = None,
                 paused: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.recording = recording
        self.bus = bus
        self._clock = clock
        self._speed = _check_speed(speed)
        self._paused = paused
        self._anchor_rec = recording.start if start is None else self._clamp(start)
        self._anchor_wall = clock()
        self._seek_to: float | None = self._anchor_rec
        self._changed = asyncio.Event()
        self._listeners: list[SeekListener] = []
        self._at_end = False
        self.published = 0

    # --- state -------------------------------------------------------------------------------------------------
    @property
    def start(self) -> float:
        return self.recording.start

    @property
    def end(self) -> float:
        return self.recording.end

    @property
    def speed(self) -> float:
        return self._speed

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def at_end(self) -> bool:
        """Every event up to the end (or the damage) has been published."""
        return self._at_end

    def now(self) -> float:
        """The recording's clock: where the replay stands, in recording time (epoch seconds)."""
        if self._paused:
            return self._anchor_rec
        return self._clamp(self._anchor_rec + (self._clock() - self._anchor_wall) * self._speed)

    def _clamp(self, t: float) -> float:
        return min(max(t, self.recording.start), self.recording.end)

    def _reanchor(self, rec_t: float) -> None:
        self._anchor_rec = rec_t
        self._anchor_wall = self._clock()
        self._changed.set()

    # --- controls ----------------------------------------------------------------------------------------------
    def pause(self) -> None:
        if not self._paused:
            self._reanchor(self.now())
            self._paused = True

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self._reanchor(self._anchor_rec)

    def set_speed(self, speed: float) -> None:
        """Replay at ``speed`` × real time (0.5 to 100); ValueError outside."""
        speed = _check_speed(speed)
        self._reanchor(self.now())
        self._speed = speed

    def seek(self, t: float) -> float:
        """Go to recording time ``t`` (clamped); returns where the replay now stands. Seek listeners run first."""
        t = self._clamp(t)
        for fn in list(self._listeners):
            fn(t)
        self._seek_to = t
        self._at_end = False
        self._reanchor(t)
        return t

    def next_marker(self, kind: str | None = None) -> Marker | None:
        """Seek to the next marker (of ``kind``: phase, diagnosis, run, failure, operator) after now; None and no
        move when there is none."""
        m = self.recording.next_marker(self.now(), kind)
        if m is not None:
            self.seek(m.ts)
        return m

    def on_seek(self, fn: SeekListener) -> Callable[[], None]:
        """Call ``fn(t)`` before every seek; returns a function that removes it."""
        self._listeners.append(fn)

        def remove() -> None:
            if fn in self._listeners:
                self._listeners.remove(fn)

        return remove

    # --- the pump ----------------------------------------------------------------------------------------------
    async def run(self, *, until_end: bool = False) -> None:
        """Publish events as the recording clock reaches them. With ``until_end``, return at the end; otherwise
        wait there for a seek (cancel the task to stop)."""
        loop = asyncio.get_running_loop()
        self.bus.attach_loop(loop)
        batches: Iterator[list[Event]] | None = None
        pending: list[Event] = []
        try:
            while True:
                if self._seek_to is not None:
                    t, self._seek_to = self._seek_to, None
                    batches = self.recording.batches(t)
                    pending = []
                if not pending:
                    assert batches is not None
                    nxt = await asyncio.to_thread(next, batches, None)  # decompression off the loop
                    if self._seeking():
                        continue
                    if nxt is None:
                        self._at_end = True
                        if until_end:
                            return
                        self._changed.clear()
                        while not self._seeking():
                            await self._changed.wait()
                            self._changed.clear()
                        continue
                    pending = nxt
                    continue
                ev = pending[0]
                if not await self._wait_for(ev.ts):
                    continue  # a seek came: start over from there
                pending.pop(0)
                self.bus.publish(ev)
                self.published += 1
        finally:
            # the chunks being read hold a view of the mapped file: let it go now, not when a traceback
            # that holds this frame is collected (the recording could not be closed until then)
            close = getattr(batches, "close", None)
            if close is not None:
                with contextlib.suppress(ValueError):  # still running in its thread: it ends there
                    close()

    def _seeking(self) -> bool:
        """A seek is waiting to be taken up (set by the controls while the pump awaits)."""
        return self._seek_to is not None

    async def _wait_for(self, ts: float) -> bool:
        """Wait until the clock reaches ``ts``; False when a seek interrupted the wait."""
        while True:
            if self._seek_to is not None:
                return False
            if not self._paused:
                ahead = ts - self.now()
                if ahead <= 0:
                    return True
                delay: float | None = ahead / self._speed
            else:
                delay = None
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), delay)
            except TimeoutError:
                pass


def _check_speed(speed: float) -> float:
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise ValueError(f"replay speed must be within {MIN_SPEED:g}–{MAX_SPEED:g}×, got {speed:g}")
    return float(speed)
