"""Reading a recording: its header, its index and markers, its events from any moment; and :class:`ReplaySource`,
which publishes a recording onto an event bus in recording time (what the console replays from).

- :meth:`Recording.open` reads the header and scans the chunk headers (the seek index) in one pass; nothing is
  decompressed. A newer format version is refused (:class:`RecordingError`, exit 2); a file cut short or damaged
  part-way is opened up to its last good chunk, and :attr:`Recording.damage` says where it stopped.
- :meth:`Recording.events` decodes from the frame that holds a moment, skipping the events before it.
- :class:`ReplaySource` paces the events by their timestamps (``speed`` × real time), with ``pause``, ``resume``,
  ``set_speed``, ``seek`` and ``next_marker``; :meth:`ReplaySource.now` is the recording's clock, for the screen.
"""

from __future__ import annotations

import array
import asyncio
import bisect
import itertools
import json
import mmap
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, overload

import zstandard

from tui.core.errors import InputError
from tui.core.events import Event, EventBus, event_from_dict
from tui.core.record.format import (
    CHUNK_HEAD,
    FLAG_END,
    FLAG_NEW_FRAME,
    FORMAT,
    FORMAT_VERSION,
    INDEX_ENTRY,
    MAGIC,
    MAX_META,
    MAX_PAYLOAD,
    TRAILER,
    TRAILER_MAGIC,
    RecordingHeader,
    chunk_crc,
)
from tui.core.record.kinds import load_event_kinds
from tui.core.record.markers import MARKER_KINDS, Marker

MIN_SPEED = 0.5
MAX_SPEED = 100.0
MAX_HEADER = 1 << 20


class RecordingError(InputError):
    """Not a recording, or one this version cannot read (a one-line error, exit 2)."""


class Chunk(NamedTuple):
    """One chunk of the index (a named tuple: an hour has ~7,200 of them and opening makes them all)."""

    start: int  # byte offset of the chunk (its header)
    offset: int  # of the payload
    size: int  # payload bytes
    t0: float
    t1: float
    n: int
    new_frame: bool
    frame: int  # index of the chunk that starts this chunk's frame
    crc: int
    flags: int
    meta: tuple[int, int]  # offset and length of the meta

    def intact(self, data: Any) -> bool:
        mo, ml = self.meta
        return chunk_crc(self.t0, self.t1, self.n, self.flags, memoryview(data)[mo:mo + ml],
                         memoryview(data)[self.offset:self.offset + self.size]) == self.crc


class ChunkIndex(Sequence[Chunk]):
    """The chunks of a recording's end index, decoded when asked for: opening an hour's recording keeps one block,
    not ~7,200 objects (which would also make the garbage collector walk the caller's whole heap more often)."""

    def __init__(self, entries: bytes) -> None:
        self._entries = entries
        self._n = len(entries) // INDEX_ENTRY.size

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> Chunk: ...

    @overload
    def __getitem__(self, i: slice) -> list[Chunk]: ...

    def __getitem__(self, i: int | slice) -> Chunk | list[Chunk]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        s, o, z, t0, t1, n, fl, c, mo, ml, fr = INDEX_ENTRY.unpack_from(self._entries, i * INDEX_ENTRY.size)
        return Chunk(s, o, z, t0, t1, n, bool(fl & FLAG_NEW_FRAME), fr, c, fl, (mo, ml))

    def columns(self) -> tuple[array.array[float], float | None, int]:
        """The running maximum of the chunks' end times, the first event's time, the event count."""
        t1s: array.array[float] = array.array("d")
        start: float | None = None
        total = 0
        top = float("-inf")
        for _s, _o, _z, t0, t1, n, _fl, _c, _mo, _ml, _fr in INDEX_ENTRY.iter_unpack(self._entries):
            top = max(top, t1)
            t1s.append(top)
            if n:
                total += n
                if start is None or t0 < start:
                    start = t0
        return t1s, start, total


@dataclass
class Recording:
    """An opened recording (the file is memory-mapped read-only; ``close`` releases it)."""

    path: Path
    header: RecordingHeader
    chunks: Sequence[Chunk]
    markers: list[Marker]
    ended_cleanly: bool
    damage: str | None = None  # where and why reading stopped early (None: the whole file was read)
    skipped: int = 0  # events of a kind this version does not know (left out of the replay)
    _map: Any = field(default=None, repr=False)
    _file: Any = field(default=None, repr=False)
    _t1s: Sequence[float] = field(default_factory=list, repr=False)
    _start: float = field(default=0.0, repr=False)
    event_total: int = field(default=0, repr=False)

    # --- opening -----------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path) -> Recording:
        p = Path(path)
        try:
            f = open(p, "rb")  # noqa: SIM115 - kept open with the map; closed by close()
        except FileNotFoundError:
            raise RecordingError("no such recording", file=p) from None
        except OSError as exc:
            raise RecordingError(f"cannot read: {exc.strerror or exc}", file=p) from None
        try:
            return cls._read(p, f)
        except BaseException:
            f.close()
            raise

    @classmethod
    def _read(cls, p: Path, f: Any) -> Recording:
        first = f.readline(MAX_HEADER)
        try:
            head = json.loads(first)
        except ValueError:
            raise RecordingError("not a disagg-tui recording (its first line is no JSON header)", file=p,
                                 line=1) from None
        if not isinstance(head, dict) or head.get("format") != FORMAT:
            raise RecordingError("not a disagg-tui recording", file=p, line=1, field="format")
        version = head.get("version")
        if not isinstance(version, int):
            raise RecordingError(f"bad format version {version!r}", file=p, line=1, field="version")
        if version > FORMAT_VERSION:
            raise RecordingError(f"recording format version {version} is newer than this disagg-tui reads "
                                 f"({FORMAT_VERSION}): upgrade disagg-tui to replay it", file=p, line=1,
                                 field="version")
        header = RecordingHeader.from_dict(head)
        size = p.stat().st_size
        data: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else b""
        indexed = cls._indexed(p, f, header, data, size, len(first))
        if indexed is not None:
            return indexed
        chunks: list[Chunk] = []
        markers: list[Marker] = []
        pos = len(first)
        damage: str | None = None
        ended = False
        frame = 0
        head_size = CHUNK_HEAD.size
        while pos < size:
            if ended:
                if bytes(data[size - TRAILER.size:size - TRAILER.size + 4]) != TRAILER_MAGIC:
                    damage = f"data after the end of the recording at byte {pos} (ignored)"
                break  # (else its index, which did not check out: the walk has read the chunks)
            if pos + head_size > size:
                damage = f"truncated at byte {pos} (a chunk header cut short)"
                break
            magic, mlen, plen, crc, t0, t1, n, flags = CHUNK_HEAD.unpack_from(data, pos)
            if magic != MAGIC or mlen > MAX_META or plen > MAX_PAYLOAD:
                damage = f"damaged at byte {pos} (no chunk starts there)"
                break
            start = pos + head_size
            end = start + mlen + plen
            if end > size:
                damage = f"truncated at byte {pos} (a chunk of {mlen + plen} bytes cut short)"
                break
            marks: list[Marker] = []
            if mlen:
                try:
                    meta = json.loads(data[start:start + mlen])
                    marks = [Marker(float(m[0]), str(m[1]), str(m[2])) for m in meta.get("m") or ()]
                except (ValueError, TypeError, IndexError, AttributeError):
                    damage = f"damaged at byte {pos} (unreadable chunk header)"
                    break
            new_frame = bool(flags & FLAG_NEW_FRAME)
            if new_frame:
                frame = len(chunks)
            if n > 0 or plen > 0:
                chunks.append(Chunk(pos, start + mlen, plen, t0, t1, n, new_frame, frame, crc, flags,
                                    (start, mlen)))
            markers.extend(marks)
            ended = bool(flags & FLAG_END)
            pos = end
        # the checksums: the last chunk's now (where a killed writer leaves its mark), the others when read
        while chunks and not chunks[-1].intact(data):
            bad = chunks.pop()
            damage = f"damaged at byte {bad.start} (checksum mismatch)"
            markers = [m for m in markers if m.ts <= (chunks[-1].t1 if chunks else float("-inf"))]
            ended = False
        rec = cls(p, header, chunks, markers, ended_cleanly=ended and damage is None, damage=damage, _map=data,
                  _file=f)
        rec._index()
        return rec

    @classmethod
    def _indexed(cls, p: Path, f: Any, header: RecordingHeader, data: Any, size: int, first: int
                 ) -> Recording | None:
        """A cleanly closed recording, opened from the index at its end (None when it has none, or a bad one)."""
        if size < first + TRAILER.size:
            return None
        magic, at, length, crc = TRAILER.unpack_from(data, size - TRAILER.size)
        if magic != TRAILER_MAGIC or at < first or at + length != size - TRAILER.size or length < 4:
            return None
        blob = data[at:at + length]
        if zlib.crc32(blob) != crc:
            return None
        mlen = int.from_bytes(blob[:4], "little")
        entries = blob[4 + mlen:]
        if len(entries) % INDEX_ENTRY.size:
            return None
        try:
            markers = [Marker(float(m[0]), str(m[1]), str(m[2])) for m in json.loads(blob[4:4 + mlen])]
        except (ValueError, TypeError, IndexError):
            return None
        chunks = ChunkIndex(bytes(entries))
        if len(chunks) and not chunks[-1].intact(data):
            return None  # walk it instead: the walk says where the damage is
        rec = cls(p, header, chunks, markers, ended_cleanly=True, damage=None, _map=data, _file=f)
        t1s, start, rec.event_total = chunks.columns()
        rec._t1s = t1s
        rec._start = header.started if start is None else start
        return rec

    def _index(self) -> None:
        self._t1s = list(itertools.accumulate((c.t1 for c in self.chunks), max))
        self._start = min((c.t0 for c in self.chunks if c.n), default=self.header.started)
        self.event_total = sum(c.n for c in self.chunks)

    def close(self) -> None:
        if isinstance(self._map, mmap.mmap):
            self._map.close()
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what it holds -----------------------------------------------------------------------------------------
    @property
    def start(self) -> float:
        """Recording time of its first event (the header's start when it has none)."""
        return self._start

    @property
    def end(self) -> float:
        return self._t1s[-1] if self._t1s else self.start

    @property
    def duration_s(self) -> float:
        return max(self.end - self.start, 0.0)

    @property
    def event_count(self) -> int:
        return self.event_total

    def markers_of(self, kind: str | None = None) -> list[Marker]:
        if kind is not None and kind not in MARKER_KINDS:
            raise ValueError(f"unknown marker kind {kind!r} (one of {', '.join(MARKER_KINDS)})")
        return [m for m in self.markers if kind is None or m.kind == kind]

    def next_marker(self, after: float, kind: str | None = None) -> Marker | None:
        """The first marker (of ``kind``) strictly after recording time ``after``."""
        for m in self.markers_of(kind):
            if m.ts > after:
                return m
        return None

    # --- events ------------------------------------------------------------------------------------------------
    def events(self, start: float | None = None) -> Iterator[Event]:
        """Every event from recording time ``start`` (the beginning when None), in recorded order. Stops at the
        first damaged part (and sets :attr:`damage`)."""
        for batch in self.batches(start):
            yield from batch

    def batches(self, start: float | None = None) -> Iterator[list[Event]]:
        """The events chunk by chunk (each list is at most one flush interval of the session)."""
        load_event_kinds()
        first = self._first_chunk(start)
        if first is None:
            return
        dctx = zstandard.ZstdDecompressor()
        dobj: Any = None
        tail = b""
        for i in range(self.chunks[first].frame, len(self.chunks)):
            c = self.chunks[i]
            if not c.intact(self._map):
                self._damaged(f"damaged at byte {c.start} (checksum mismatch)", i)
                return
            if c.new_frame or dobj is None:
                dobj = dctx.decompressobj()
                tail = b""
            try:
                raw = dobj.decompress(bytes(self._map[c.offset:c.offset + c.size])) if c.size else b""
            except zstandard.ZstdError as exc:
                self._damaged(f"damaged at byte {c.offset} (zstd: {exc})", i)
                return
            buf = tail + raw
            lines = buf.split(b"\n")
            tail = lines.pop()
            if i < first:
                continue
            out: list[Event] = []
            for line in lines:
                if not line:
                    continue
                try:
                    d = json.loads(line)
                except ValueError:
                    self._damaged(f"damaged at byte {c.offset} (an event that is not JSON)", i)
                    yield out
                    return
                if start is not None and float(d.get("ts") or 0.0) < start:
                    continue
                try:
                    out.append(event_from_dict(d))
                except (ValueError, TypeError):
                    self.skipped += 1  # a kind (or field) of a newer version: left out
            yield out

    def _first_chunk(self, start: float | None) -> int | None:
        if not self.chunks:
            return None
        if start is None:
            return 0
        i = bisect.bisect_left(self._t1s, start)
        return i if i < len(self.chunks) else None

    def _damaged(self, why: str, chunk: int) -> None:
        if self.damage is None:
            self.damage = why
        cut = self.chunks[chunk].t0 if chunk < len(self.chunks) else float("inf")
        self.markers = [m for m in self.markers if m.ts < cut]
        self.chunks = list(self.chunks[:chunk])
        self._t1s = self._t1s[:chunk]
        self.event_total = sum(c.n for c in self.chunks)
        self.ended_cleanly = False


# --- replay as an event source ---------------------------------------------------------------------------------

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
