"""The recorder: a consumer of the event bus that appends every event of a session to a recording.

The subscriber only puts the (immutable) event on a bounded queue; a writer thread turns it into JSON, redacts
secrets, finds markers, compresses and writes. Every ``flush_s`` (half a second by default) what arrived is written
as one chunk and handed to the OS, so a SIGKILL of the process loses at most that much; a new zstd frame starts
every ``frame_s`` of recording time so a seek decodes at most that much. When the queue is full (the disk stalls)
new events are dropped and counted, never waited for: a source is never slowed down by the recorder.

Usage::

    rec = Recorder(path, header).start()
    rec.attach(bus)           # or bus.subscribe(rec.record)
    ...
    stats = rec.close()       # the last chunk, marked as a clean end
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zstandard

from tui import __version__
from tui.core import paths, safewrite
from tui.core.errors import InputError
from tui.core.events import Event, EventBus
from tui.core.record.format import (
    CHUNK_HEAD,
    FLAG_NEW_FRAME,
    INDEX_ENTRY,
    SUFFIX,
    TRAILER,
    TRAILER_MAGIC,
    RecordingHeader,
    encode_chunk,
)
from tui.core.record.markers import MarkerFinder
from tui.core.redact import Redactor

if TYPE_CHECKING:
    from tui.core.record.present import SessionPresent

DEFAULT_FLUSH_S = 0.5
DEFAULT_FRAME_S = 60.0
DEFAULT_QUEUE = 100_000
FRAME_MAX_BYTES = 16 << 20  # uncompressed bytes in one frame at most (a seek decodes one frame)
#: what a session records, for the header's "recorded" list (by event kind)
TOPICS = {"gpu_sampled": "gpu", "server_health": "servers", "server_metrics": "servers",
           "layout_changed": "layouts", "plan_launched": "plans", "server_launched": "layouts",
           "server_phase": "startup", "server_ready": "startup", "server_exited": "startup",
           "server_stalled": "startup", "log_line": "logs", "diagnosis": "diagnoses", "fix_applied": "diagnoses",
           "bench_started": "bench", "bench_tick": "bench", "bench_done": "bench", "bench_line": "bench",
           "campaign_step": "campaign", "results_reported": "results", "operator_action": "operator",
           "notice": "notices", "remote_tick": "hosts", "host_unreachable": "hosts", "host_reconnected": "hosts",
           "remote_event": "hosts"}
_STOP = object()
_FLUSH = object()


@dataclass
class RecorderStats:
    events: int = 0  # written
    dropped: int = 0  # the queue was full
    failed: int = 0  # could not be serialised (a bug in an event class; the recording goes on)
    chunks: int = 0
    bytes: int = 0  # the file's size
    cpu_s: float = 0.0  # CPU time of the writer thread
    error: str = ""  # the write error that stopped the recorder ("" when none)


def recording_path(label: str, directory: Path | None = None) -> Path:
    """A new recording's path: ``<data dir>/recordings/<UTC time>-<label>.dtrec``."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "session"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = directory or paths.recordings_dir()
    path = base / f"{stamp}-{safe}{SUFFIX}"
    n = 2
    while path.exists():
        path = base / f"{stamp}-{safe}-{n}{SUFFIX}"
        n += 1
    return path


def new_header(command: str, *, recorded: tuple[str, ...] = ("everything",), host: dict[str, Any] | None = None,
               simulated: bool = False, extra: dict[str, Any] | None = None) -> RecordingHeader:
    return RecordingHeader(app_version=__version__, started=time.time(), command=command, recorded=recorded,
                           host=dict(host or {}), simulated=simulated, extra=dict(extra or {}))


class Recorder:
    """Appends every event it is given to a recording file (see :mod:`tui.core.record.format`)."""

    def __init__(self, path: Path, header: RecordingHeader, *, flush_s: float = DEFAULT_FLUSH_S,
                 frame_s: float = DEFAULT_FRAME_S, queue_size: int = DEFAULT_QUEUE, level: int = 3,
                 redactor: Redactor | None = None) -> None:
        if not 0 < flush_s <= 1.0:
            raise ValueError("flush_s must be within (0, 1] s: a SIGKILL may lose at most one second")
        self.path = Path(path)
        self.header = header
        self.flush_s = flush_s
        self.frame_s = frame_s
        self.level = level
        self.redactor = redactor or Redactor()
        self.stats = RecorderStats()
        self.topics: set[str] = set()
        self._queue: queue.Queue[object] = queue.Queue(queue_size)
        self._thread: threading.Thread | None = None
        self._file: Any = None
        self._unsubscribe: Any = None
        self._closed = False

    # --- the loop's side ---------------------------------------------------------------------------------------
    def start(self) -> Recorder:
        """Create the file (never overwriting one), write the header and start the writer thread."""
        try:
            # never overwriting one, never through a link; the operator's alone (a session's logs may carry what
            # they would not show)
            self._file = safewrite.open_new(self.path, root=paths.root_for(self.path))
            header = self.header
            header = RecordingHeader(app_version=header.app_version, started=header.started,
                                     command=self.redactor.text(header.command), recorded=header.recorded,
                                     host=self.redactor.value(header.host), simulated=header.simulated,
                                     version=header.version, extra=self.redactor.value(header.extra))
            self._file.write(header.to_json_line())
            self._file.flush()
        except OSError as exc:
            raise InputError(f"cannot write the recording: {exc.strerror or exc}", file=self.path) from None
        self._thread = threading.Thread(target=self._writer, name="recorder", daemon=True)
        self._thread.start()
        return self

    def attach(self, bus: EventBus, present: SessionPresent | None = None) -> None:
        """Subscribe to ``bus`` (``close`` unsubscribes). With ``present`` (a :class:`SessionPresent` on that bus,
        subscribed when the session began) the recording first gets what the session shows now (the layout, its
        servers and phases, the diagnoses), then every later event: a recording started after them has them."""
        self._unsubscribe = present.attach(self.record) if present is not None else bus.subscribe(self.record)

    def record(self, event: Event) -> None:
        """The bus subscriber: queue the event (never blocks; counted as dropped when the queue is full)."""
        if self._closed:
            return
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.stats.dropped += 1

    def flush(self) -> None:
        """Write what is queued as a chunk now (without waiting for the flush interval)."""
        if not self._closed:
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(_FLUSH)

    def close(self, timeout_s: float = 10.0) -> RecorderStats:
        """Write what is queued and a clean-end chunk, close the file. Safe to call twice."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._closed:
            return self.stats
        self._closed = True
        if self._thread is not None:
            while True:
                try:
                    self._queue.put(_STOP, timeout=timeout_s)
                    break
                except queue.Full:  # the writer is stuck: stop waiting
                    break
            self._thread.join(timeout_s)
        with contextlib.suppress(OSError):
            self.stats.bytes = self.path.stat().st_size
        return self.stats

    def __enter__(self) -> Recorder:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the writer thread -------------------------------------------------------------------------------------
    def _writer(self) -> None:
        f = self._file
        cctx = zstandard.ZstdCompressor(level=self.level, write_checksum=True)
        cobj = cctx.compressobj()
        finder = MarkerFinder()
        frame_open = False
        frame_started = 0.0  # recording time of the frame's first event
        frame_bytes = 0
        lines: list[bytes] = []
        markers: list[list[Any]] = []
        t0 = t1 = 0.0
        deadline = 0.0
        dumps = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False).encode
        stats = self.stats
        index: list[bytes] = []  # one INDEX_ENTRY per chunk written
        all_markers: list[list[Any]] = []
        pos = f.tell()
        frame_index = 0

        def flush(end: bool = False) -> None:
            nonlocal cobj, frame_open, frame_started, frame_bytes, lines, markers
            if not lines and not end:
                return
            data = b"".join(lines)
            new_frame = not frame_open and bool(lines)
            if new_frame:
                frame_open, frame_started, frame_bytes = True, t0, 0
            out = cobj.compress(data) if data else b""
            frame_bytes += len(data)
            if frame_open and (end or t1 - frame_started >= self.frame_s or frame_bytes >= FRAME_MAX_BYTES):
                out += cobj.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)
                cobj = cctx.compressobj()
                frame_open = False
            elif frame_open:
                out += cobj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
            nonlocal pos, frame_index
            chunk = encode_chunk(t0, t1, len(lines), new_frame=new_frame, end=end, markers=markers, payload=out)
            f.write(chunk)
            f.flush()  # to the OS: a SIGKILL of this process loses nothing written so far
            _magic, mlen, plen, crc, _t0, _t1, n, flags = CHUNK_HEAD.unpack_from(chunk)
            if flags & FLAG_NEW_FRAME:
                frame_index = len(index)
            if n or plen:
                meta_at = pos + CHUNK_HEAD.size
                index.append(INDEX_ENTRY.pack(pos, meta_at + mlen, plen, t0, t1, n, flags, crc, meta_at, mlen,
                                              frame_index))
            all_markers.extend(markers)
            pos += len(chunk)
            stats.chunks += 1
            lines, markers = [], []

        try:
            while True:
                timeout = None if not lines else max(deadline - time.monotonic(), 0.0)
                try:
                    item = self._queue.get(timeout=timeout)
                except queue.Empty:
                    flush()
                    continue
                if item is _FLUSH:
                    flush()
                    continue
                if item is _STOP:
                    flush(end=True)
                    marks = json.dumps(all_markers, separators=(",", ":")).encode()
                    blob = len(marks).to_bytes(4, "little") + marks + b"".join(index)
                    f.write(blob + TRAILER.pack(TRAILER_MAGIC, pos, len(blob), zlib.crc32(blob)))
                    f.flush()
                    with contextlib.suppress(OSError):
                        os.fsync(f.fileno())
                    break
                assert isinstance(item, Event)
                try:
                    d = self.redactor.value(item.to_dict())
                    line = dumps(d).encode("utf-8") + b"\n"
                except (TypeError, ValueError):
                    stats.failed += 1
                    continue
                ts = float(d.get("ts") or 0.0)
                if not lines:
                    t0 = t1 = ts
                    deadline = time.monotonic() + self.flush_s
                else:
                    t0, t1 = min(t0, ts), max(t1, ts)
                lines.append(line)
                stats.events += 1
                topic = TOPICS.get(str(d.get("kind")))
                if topic is not None:
                    self.topics.add(topic)
                m = finder(d)
                if m is not None:
                    markers.append(m.to_list())
                if time.monotonic() >= deadline:
                    flush()
        except OSError as exc:  # the disk is full or gone: stop recording, say why in the stats
            stats.error = f"recording stopped: {exc.strerror or exc}"
        finally:
            stats.cpu_s = time.thread_time()
            with contextlib.suppress(OSError):
                f.close()
