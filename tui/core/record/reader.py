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
import bisect
import itertools
import json
import mmap
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, overload

import zstandard

from tui.core import safeio, typedread
from tui.core.errors import InputError
from tui.core.events import Event, event_from_dict, registered_kinds
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

MAX_HEADER = 1 << 20
#: what a recording may decompress to: a frame (the recorder ends one at 16 MiB, after its last chunk), and a whole
#: pass over the file (its size times the ratio, or the floor for a small file; real recordings are ~10x)
MAX_FRAME_OUT = 128 << 20
MAX_OUTPUT_RATIO = 64
MAX_OUTPUT_FLOOR = 32 << 20
#: events (lines) one pass reads: the file's size in bytes, or the floor for a small file. A recording's event takes
#: tens of bytes of file (80 in the shipped fixture); 10 million 3-byte lines ('{}') of a 3 kB file took 41 s
MAX_EVENTS_PER_BYTE = 1
MAX_EVENTS_FLOOR = 200_000
#: one event's line of JSON (a log line's text is at most 4 MiB)
MAX_EVENT_LINE = 8 << 20
#: compressed bytes fed to the decompressor at a time: a zstd block is at least 4 bytes for at most 128 KiB, so one
#: call makes at most ~8 MiB however the file was made (a bomb is stopped before it is held)
INFLATE_STEP = 256
#: events in one batch (a chunk of more is handed on in several)
BATCH = 10_000
#: markers held (an hour has hundreds; a file that claims millions keeps the first)
MAX_MARKERS = 100_000
#: characters of a marker's label kept
MARKER_LABEL = 200


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

    def columns(self, size: int) -> tuple[array.array[float], float | None, int] | None:
        """The running maximum of the chunks' end times, the first event's time, the event count; None when an
        entry does not fit a file of ``size`` bytes (a time out of range, a chunk outside the file, a frame that
        starts after its chunk): such an index is not trusted."""
        t1s: array.array[float] = array.array("d")
        start: float | None = None
        total = 0
        top = float("-inf")
        for i, (s, o, z, t0, t1, n, _fl, _c, mo, ml, fr) in enumerate(INDEX_ENTRY.iter_unpack(self._entries)):
            if not (_times_ok(t0, t1) and s < o and o + z <= size and mo + ml <= size and fr <= i):
                return None
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
    bad_events: int = 0  # events of the wrong shape (a field of the wrong type or range): left out, counted
    first_bad: str | None = None  # where the first of them is and what is wrong with it
    markers_left_out: int = 0  # markers past MAX_MARKERS, or of the wrong shape
    _map: Any = field(default=None, repr=False)
    _file: Any = field(default=None, repr=False)
    _t1s: Sequence[float] = field(default_factory=list, repr=False)
    _start: float = field(default=0.0, repr=False)
    event_total: int = field(default=0, repr=False)

    # --- opening -----------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path) -> Recording:
        """Open a recording: a regular file (a FIFO, a device or a folder is refused at once, never waited on)
        whose first line is a header of the right types; RecordingError (one line, exit 2) otherwise."""
        p = Path(path)
        try:
            fd, st = safeio.open_regular(p)
        except InputError as exc:
            message = "no such recording" if exc.message == "no such file" else exc.message
            raise RecordingError(message, file=p) from None
        limit = safeio.LIMITS["recording"]
        if st.st_size > limit:
            os.close(fd)
            raise RecordingError(f"too large for a recording: {st.st_size:,} bytes (at most {limit:,})", file=p)
        f = os.fdopen(fd, "rb")
        try:
            return cls._read(p, f)
        except BaseException:
            f.close()
            raise

    @classmethod
    def _read(cls, p: Path, f: Any) -> Recording:
        first = f.readline(MAX_HEADER)
        if not first.lstrip().startswith(b"{"):
            raise RecordingError("not a disagg-tui recording (its first line is no JSON header)", file=p, line=1)
        try:
            head = safeio.parse_json(first, p)
        except InputError as exc:
            raise RecordingError(f"not a disagg-tui recording header: {exc.message}", file=p, line=1) from None
        if not isinstance(head, dict) or head.get("format") != FORMAT:
            raise RecordingError("not a disagg-tui recording", file=p, line=1, field="format")
        version = head.get("version")
        if isinstance(version, bool) or not isinstance(version, int):
            raise RecordingError(f"bad format version {safeio.shown(repr(version), 40)}", file=p, line=1,
                                 field="version")
        if version > FORMAT_VERSION:
            raise RecordingError(f"recording format version {version} is newer than this disagg-tui reads "
                                 f"({FORMAT_VERSION}): upgrade disagg-tui to replay it", file=p, line=1,
                                 field="version")
        try:
            header = RecordingHeader.from_dict(head)
        except typedread.FieldError as exc:
            raise RecordingError(exc.reason, file=p, line=1, field=exc.field) from None
        size = os.fstat(f.fileno()).st_size
        try:
            data: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else b""
        except (OSError, ValueError) as exc:  # no address space left for it (a memory limit), or it changed
            raise RecordingError(f"cannot map {size:,} bytes: {exc.strerror if isinstance(exc, OSError) else exc}",
                                 file=p) from None
        indexed = cls._indexed(p, f, header, data, size, len(first))
        if indexed is not None:
            return indexed
        chunks: list[Chunk] = []
        markers: list[Marker] = []
        pos = len(first)
        damage: str | None = None
        ended = False
        frame = 0
        dropped_marks = 0
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
            if (n or plen) and not _times_ok(t0, t1):
                damage = f"damaged at byte {pos} (a chunk's times are out of range: {t0!r}..{t1!r})"
                break
            marks: list[Marker] = []
            if mlen:
                meta = _meta_json(bytes(data[start:start + mlen]))
                if not isinstance(meta, dict):
                    damage = f"damaged at byte {pos} (unreadable chunk header)"
                    break
                raw_marks = meta.get("m") or []
                raw_marks = raw_marks if isinstance(raw_marks, list) else [raw_marks]
                marks = _markers(raw_marks)
                dropped_marks += len(raw_marks) - len(marks)
            new_frame = bool(flags & FLAG_NEW_FRAME)
            if new_frame:
                frame = len(chunks)
            if n > 0 or plen > 0:
                chunks.append(Chunk(pos, start + mlen, plen, t0, t1, n, new_frame, frame, crc, flags,
                                    (start, mlen)))
            room = max(MAX_MARKERS - len(markers), 0)
            markers.extend(marks[:room])
            dropped_marks += len(marks) - min(len(marks), room)
            ended = bool(flags & FLAG_END)
            pos = end
        # the checksums: the last chunk's now (where a killed writer leaves its mark), the others when read
        while chunks and not chunks[-1].intact(data):
            bad = chunks.pop()
            damage = f"damaged at byte {bad.start} (checksum mismatch)"
            markers = [m for m in markers if m.ts <= (chunks[-1].t1 if chunks else float("-inf"))]
            ended = False
        rec = cls(p, header, chunks, markers, ended_cleanly=ended and damage is None, damage=damage, _map=data,
                  _file=f, markers_left_out=dropped_marks)
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
        raw_marks = _meta_json(bytes(blob[4:4 + mlen]))
        if not isinstance(raw_marks, list):
            return None
        markers = _markers(raw_marks)
        left_out = len(raw_marks) - len(markers) + max(len(markers) - MAX_MARKERS, 0)
        markers = markers[:MAX_MARKERS]
        chunks = ChunkIndex(bytes(entries))
        columns = chunks.columns(size)
        if columns is None or (len(chunks) and not chunks[-1].intact(data)):
            return None  # walk it instead: the walk says where the damage is
        rec = cls(p, header, chunks, markers, ended_cleanly=True, damage=None, _map=data, _file=f,
                  markers_left_out=left_out)
        t1s, start, rec.event_total = columns
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
        """The events chunk by chunk (each list is at most one flush interval of the session, and at most
        :data:`BATCH` events). What the chunks decompress to is bounded (:data:`MAX_FRAME_OUT` a frame, the
        file's size times :data:`MAX_OUTPUT_RATIO` a pass): past it, or at a line that is no event, the replay
        stops there as at any damage. An event of the wrong shape is left out and counted (:attr:`bad_events`)."""
        load_event_kinds()
        first = self._first_chunk(start)
        if first is None:
            return
        kinds = registered_kinds()
        size = len(self._map)
        budget = max(MAX_OUTPUT_FLOOR, MAX_OUTPUT_RATIO * size)
        event_budget = max(MAX_EVENTS_FLOOR, MAX_EVENTS_PER_BYTE * size)
        events_read = 0
        dctx = zstandard.ZstdDecompressor()
        dobj: Any = None
        tail = b""
        frame_at = 0
        frame_out = 0
        produced = 0
        for i in range(self.chunks[first].frame, len(self.chunks)):
            c = self.chunks[i]
            if not c.intact(self._map):
                self._damaged(f"damaged at byte {c.start} (checksum mismatch)", i)
                return
            if c.new_frame or dobj is None:
                dobj = dctx.decompressobj()
                tail = b""
                frame_at, frame_out = c.start, 0
            out: list[Event] = []
            lines_seen = 0
            payload = memoryview(self._map)[c.offset:c.offset + c.size]
            for at in range(0, c.size, INFLATE_STEP):
                try:
                    raw = dobj.decompress(bytes(payload[at:at + INFLATE_STEP]))
                except zstandard.ZstdError as exc:
                    why = f"damaged at byte {c.offset + at} (zstd: {safeio.shown(str(exc), 120)})"
                    yield from self._stop(out, why, i)
                    return
                if not raw:
                    continue
                frame_out += len(raw)
                produced += len(raw)
                if frame_out > MAX_FRAME_OUT:
                    why = (f"damaged at byte {c.offset + at} (the zstd frame from byte {frame_at} decompresses to "
                           f"more than {MAX_FRAME_OUT >> 20} MiB: a decompression bomb?)")
                    yield from self._stop(out, why, i)
                    return
                if produced > budget:
                    why = (f"damaged at byte {c.offset + at} (the recording decompresses to more than "
                           f"{budget >> 20} MiB, {MAX_OUTPUT_RATIO}x its size: a decompression bomb?)")
                    yield from self._stop(out, why, i)
                    return
                if b"\n\n" in raw or (not tail and raw[:1] == b"\n"):
                    yield from self._stop(out, f"damaged at byte {c.offset + at} (an empty line among the events)", i)
                    return
                lines = (tail + raw).split(b"\n")
                tail = lines.pop()
                if len(tail) > MAX_EVENT_LINE:
                    why = (f"damaged at byte {c.offset + at} (a line of more than {MAX_EVENT_LINE >> 20} MiB: "
                           "no event is that long)")
                    yield from self._stop(out, why, i)
                    return
                lines_seen += len(lines)
                if lines_seen > c.n:
                    why = f"damaged at byte {c.offset + at} (more events than its chunk says: {c.n})"
                    yield from self._stop(out, why, i)
                    return
                if i < first:
                    continue
                events_read += len(lines)
                if events_read > event_budget:
                    why = (f"damaged at byte {c.offset + at} (more than {event_budget:,} events in a file of "
                           f"{size:,} bytes: no recording is that dense)")
                    yield from self._stop(out, why, i)
                    return
                for line in lines:
                    ev = self._event(line, c, kinds)
                    if ev is _NOT_JSON:
                        yield from self._stop(out, f"damaged at byte {c.offset} (an event that is not JSON)", i)
                        return
                    if isinstance(ev, Event) and (start is None or ev.ts >= start):
                        out.append(ev)
                if len(out) >= BATCH:
                    yield out
                    out = []
            if i >= first:
                yield out

    def _stop(self, out: list[Event], why: str, chunk: int) -> Iterator[list[Event]]:
        """The damage at ``chunk``: what was read of it before is handed on, nothing after."""
        self._damaged(why, chunk)
        if out:
            yield out

    def _event(self, line: bytes, c: Chunk, kinds: dict[str, Any]) -> Event | object | None:
        """One line as an event; None when left out (a newer kind, or one of the wrong shape: counted); _NOT_JSON
        when it is no JSON at all (damage)."""
        try:
            d = json.loads(line, parse_constant=_no_constant)
        except _Refused as exc:
            self._bad(c, str(exc))
            return None
        except (ValueError, RecursionError):
            return _NOT_JSON
        try:
            return event_from_dict(d)
        except typedread.FieldError as exc:
            if exc.reason == "unknown field":
                self.skipped += 1  # a field of a newer version
            else:
                self._bad(c, exc.text())
        except (ValueError, TypeError):
            if isinstance(d, dict) and isinstance(d.get("kind"), str) and d["kind"] not in kinds:
                self.skipped += 1  # a kind of a newer version: left out
            else:
                self._bad(c, "not an event (an object with a kind)")
        return None

    def _bad(self, c: Chunk, why: str) -> None:
        self.bad_events += 1
        if self.first_bad is None:
            self.first_bad = f"in the chunk at byte {c.start}: {safeio.shown(why, 160)}"

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


def _times_ok(t0: float, t1: float) -> bool:
    """A chunk's first and last event times: finite epoch seconds within range, the first not after the last."""
    return 0.0 <= t0 <= t1 <= typedread.TIME_MAX


def _meta_json(data: bytes) -> Any:
    """A chunk's meta or the index's markers as JSON (None when it is not): the markers' times are checked one by
    one (a NaN the writer let through leaves out its marker, not the chunk), the nesting before parsing."""
    if safeio.json_depth_exceeded(data, 8) is not None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _markers(raw: list[Any]) -> list[Marker]:
    """The markers of a list of ``[ts, kind, label]``: one of the wrong shape (a time out of range, an unknown
    kind) is left out; a label is kept as it prints (control characters escaped, cut at MARKER_LABEL)."""
    out = []
    for m in raw:
        if not (isinstance(m, list) and len(m) == 3):
            continue
        ts, kind, label = m
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not 0.0 <= ts <= typedread.TIME_MAX:
            continue
        if kind not in MARKER_KINDS or not isinstance(label, str):
            continue
        out.append(Marker(float(ts), kind, safeio.shown(label, MARKER_LABEL)))
    return out


class _Refused(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} where a number belongs")


_NOT_JSON = object()
