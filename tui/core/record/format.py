"""The recording file: zstd-framed JSON Lines with a seek index in the chunk headers (``*.dtrec``).

Layout (little-endian)::

    {"format": "disagg-tui-recording", "version": 1, ...}\\n      the header: one line of JSON, readable with `head -1`
    chunk*                                                       appended while the session goes

    chunk = MAGIC (4 bytes) | meta_len (u32) | payload_len (u32) | crc32 (u32) | t0 (f64) | t1 (f64) | n (u32)
            | flags (u8) | meta | payload

``t0``/``t1`` are the first and last event time in the chunk (epoch seconds), ``n`` its events; ``flags`` bit 0
says the chunk starts a new zstd frame, bit 1 that it is the last chunk of a recording closed cleanly. ``meta`` is
empty or a small JSON object: ``m``, the markers in the chunk (``[ts, kind, label]``). The CRC-32 covers the fixed
fields after it, the meta and the payload. Opening a recording reads only the fixed headers (a seek index for free:
an hour is ~7,200 of them); each chunk's checksum is checked when it is read. ``payload`` is the zstd output of the
chunk's JSON Lines (one ``Event.to_dict()`` per line, secrets redacted): a frame spans many chunks (the
compressor keeps its window across them, so one-second chunks still compress like a whole minute) and each chunk
ends on a zstd block flush, so everything up to the last complete chunk decodes even when the writer was killed.

Why this and not SQLite (dolphie's way): ``benchmarks/recording_cost.py`` measures both on a synthetic hour. The
framed file is half the size (the compressor keeps its window across chunks; SQLite rows compress one by one),
both stay far below 1 % of a core, and SQLite seeks faster (an index lookup, under a millisecond, against opening
the index and decoding up to a minute of events here, tens of milliseconds): both meet the 200 ms target. The
framed file wins on what matters for this tool: a killed or truncated recording replays up to its last complete
chunk (a damaged SQLite page can make the whole database unreadable), it is one append-only file that copies and
ships as it is, and ``head -1`` tells what it is. A cleanly closed recording ends with its index
(``INDEX_ENTRY`` per chunk, the markers, and a ``TRAILER``), so opening it reads one block; a killed one is
opened by walking its chunk headers.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from tui.core import typedread

FORMAT = "disagg-tui-recording"
FORMAT_VERSION = 1
SUFFIX = ".dtrec"
MAGIC = b"\x89DTC"
CHUNK_HEAD = struct.Struct("<4sIIIddIB")
CHECKED = struct.Struct("<ddIB")  # the fixed fields the CRC covers
FLAG_NEW_FRAME = 1
FLAG_END = 2
#: a clean close appends the index after the last chunk, so opening an hour's recording reads one block instead of
#: walking ~7,200 chunk headers (a recording without it, killed or cut short, is walked as before):
#: markers_len (u32) | markers JSON | entries | TRAILER (at the very end of the file)
INDEX_ENTRY = struct.Struct("<QQIddIBIQII")  # start, payload offset, size, t0, t1, n, flags, crc, meta off/len, frame
TRAILER = struct.Struct("<4sQII")  # magic, offset of the index, its length, crc32 of it
TRAILER_MAGIC = b"DTIX"
MAX_META = 1 << 20
MAX_PAYLOAD = 1 << 28


@dataclass(frozen=True, slots=True)
class RecordingHeader:
    """What the first line of a recording says."""

    app_version: str
    started: float  # epoch seconds
    command: str  # the command recorded ("run --sim --model ... ") or "console"
    recorded: tuple[str, ...]  # what the session recorded: gpu, servers, startup, logs, diagnoses, bench, ...
    host: dict[str, Any] = field(default_factory=dict)  # the host's fingerprint (see tui.core.record.fingerprint)
    simulated: bool = False
    version: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json_line(self) -> bytes:
        data = {"format": FORMAT, "version": self.version, "app_version": self.app_version, "started": self.started,
                "command": self.command, "recorded": list(self.recorded), "simulated": self.simulated,
                "host": self.host, "extra": self.extra}
        return json.dumps(data, separators=(",", ":"), sort_keys=False).encode() + b"\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RecordingHeader:
        """The header a file's first line says, every field of its type (``started`` a time within range): a
        :class:`~tui.core.typedread.FieldError` naming the first that is not. A field left out or null is its
        default (an older writer's)."""
        filled: dict[str, Any] = {"app_version": "?", "started": 0.0, "command": "", "recorded": (), "host": {},
                                  "simulated": False, "version": 0, "extra": {}}
        filled.update((k, v) for k, v in d.items() if k in filled and v is not None)
        return typedread.read(cls, filled)


def chunk_crc(t0: float, t1: float, n: int, flags: int, meta: bytes | memoryview, payload: bytes | memoryview
              ) -> int:
    return zlib.crc32(payload, zlib.crc32(meta, zlib.crc32(CHECKED.pack(t0, t1, n, flags))))


def encode_chunk(t0: float, t1: float, n: int, *, new_frame: bool, end: bool, markers: list[list[Any]],
                 payload: bytes) -> bytes:
    flags = (FLAG_NEW_FRAME if new_frame else 0) | (FLAG_END if end else 0)
    m = json.dumps({"m": markers}, separators=(",", ":")).encode() if markers else b""
    crc = chunk_crc(t0, t1, n, flags, m, payload)
    return CHUNK_HEAD.pack(MAGIC, len(m), len(payload), crc, t0, t1, n, flags) + m + payload
