"""The TCP link between the head of data parallel across hosts and a ``--headless`` host's engines.

vLLM's head binds ``--data-parallel-address:--data-parallel-rpc-port`` (default 29550) and waits for every remote
engine's handshake before its API server answers; the simulator does the same over one TCP connection per headless
process, in JSON lines (no pickle). Each side treats the other as untrusted input: a line is at most
:data:`MAX_LINE` bytes, must be a JSON object of a known kind, and every field is checked for type and range before
it is used; anything else ends the link. What one side has queued for the other is bounded too (:data:`MAX_QUEUED`):
a peer that stops reading is a lost link, never a growing buffer.

Messages (``t`` is the kind):

================ ========= =================================================================================
hello            B → head  ``ranks``, ``dp_size``, ``model``, ``tp``, ``max_model_len``, ``version``
init / reject    head → B  the handshake's answer (``error`` for a reject)
ready            B → head  ``rank``, ``kv_tokens``: that engine finished its start
add / abort      head → B  a request for rank ``r``: ``id``, ``p`` prompt tokens, ``m`` max tokens, ``n``,
                           ``h`` the prompt's block hashes (prefix caching)
p                B → head  progress of rank ``r``: ``u`` = ``[[id, generated, finished], ...]``
x                B → head  rank ``r``'s metrics and gauges (``m``), for the head's ``/metrics``
================ ========= =================================================================================
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
from typing import Any

from tui.sim.metrics import EngineGauges, EngineMetrics

MAX_LINE = 1 << 20  # bytes in one message
MAX_QUEUED = 16 << 20  # bytes queued to a peer before the link counts as stuck
MAX_ID = 256  # characters of a request id
MAX_BATCH = 2000  # progress entries per line
HANDSHAKE_TIMEOUT_S = 300.0  # core.py: "Did not receive response from front-end process within 5 minutes"
KINDS = frozenset({"hello", "init", "reject", "ready", "add", "abort", "p", "x"})


class LinkError(Exception):
    """The peer sent something that is not the protocol, or the link broke."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def encode(obj: dict[str, Any]) -> bytes:
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode() + b"\n"
    if len(data) > MAX_LINE:
        raise LinkError(f"message of {len(data)} bytes is over the link's {MAX_LINE}")
    return data


def decode(line: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(line, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LinkError(f"not a JSON line: {exc}") from None
    if not isinstance(obj, dict) or obj.get("t") not in KINDS:
        raise LinkError("not a message of the DP link")
    return obj


class LineBuffer:
    """Lines from a non-blocking socket during the (synchronous) start-up, bounded."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self.buf += data
        out = []
        while True:
            end = self.buf.find(b"\n")
            if end < 0:
                break
            line = bytes(self.buf[:end])
            del self.buf[:end + 1]
            out.append(decode(line))
        if len(self.buf) > MAX_LINE:
            raise LinkError(f"a line over {MAX_LINE} bytes")
        return out

    def take_rest(self) -> bytes:
        rest = bytes(self.buf)
        self.buf.clear()
        return rest


# --- fields ---------------------------------------------------------------------------------------------------
def want_int(d: dict[str, Any], key: str, lo: int, hi: int) -> int:
    v = d.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise LinkError(f"field {key!r}: an integer in [{lo}, {hi}] expected")
    return v


def want_str(d: dict[str, Any], key: str, limit: int = MAX_ID) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not 0 < len(v) <= limit:
        raise LinkError(f"field {key!r}: a string of 1 to {limit} characters expected")
    return v


def want_ints(d: dict[str, Any], key: str, limit: int, lo: int, hi: int) -> list[int]:
    v = d.get(key)
    if not isinstance(v, list) or len(v) > limit or not all(
            isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi for x in v):
        raise LinkError(f"field {key!r}: a list of at most {limit} integers in [{lo}, {hi}] expected")
    return v


def _num(v: Any, what: str, hi: float = 1e18) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or not 0 <= v <= hi:
        raise LinkError(f"{what}: a finite number in [0, {hi:g}] expected")
    return float(v)


# --- metrics over the link ------------------------------------------------------------------------------------
def snapshot(m: EngineMetrics, g: EngineGauges, busy_v: float, lag_v: float, lag_max_v: float) -> dict[str, Any]:
    """An engine's counters, histograms and gauges as plain JSON (what the head renders for that rank)."""
    return {"c": m.counters, "s": m.success, "b": m.by_source, "ca": m.cached, "sp": m.spec,
            "h": {k: [h.counts, h.total, h.n] for k, h in m.hist.items()},
            "g": [g.running, g.waiting, g.waiting_deferred, g.kv_usage], "pace": [busy_v, lag_v, lag_max_v]}


def apply_snapshot(m: EngineMetrics, data: Any) -> tuple[EngineGauges, tuple[float, float, float]]:
    """Check a peer's snapshot against ``m``'s own shape (same keys, same bucket counts) and copy it in."""
    if not isinstance(data, dict):
        raise LinkError("metrics: an object expected")
    for key, target in (("c", m.counters), ("s", m.success), ("b", m.by_source)):
        src = data.get(key)
        if not isinstance(src, dict) or set(src) != set(target):
            raise LinkError(f"metrics {key!r}: the engine's own names expected")
        for name in target:
            target[name] = _num(src[name], f"metrics {key}.{name}")
    m.cached = _num(data.get("ca"), "metrics ca")
    spec = data.get("sp")
    if not isinstance(spec, list) or len(spec) != len(m.spec):
        raise LinkError("metrics sp: the spec-decode counters expected")
    m.spec = [_num(v, "metrics sp") for v in spec]
    hist = data.get("h")
    if not isinstance(hist, dict) or set(hist) != set(m.hist):
        raise LinkError("metrics h: the engine's own histograms expected")
    for name, h in m.hist.items():
        row = hist[name]
        if not isinstance(row, list) or len(row) != 3 or not isinstance(row[0], list) \
                or len(row[0]) != len(h.counts):
            raise LinkError(f"metrics h.{name}: [counts, sum, count] with {len(h.counts)} buckets expected")
        counts = [int(_num(c, f"metrics h.{name}")) for c in row[0]]
        h.counts, h.total, h.n = counts, _num(row[1], f"metrics h.{name} sum"), int(_num(row[2], f"h.{name} n"))
    g = data.get("g")
    pace = data.get("pace")
    if not isinstance(g, list) or len(g) != 4 or not isinstance(pace, list) or len(pace) != 3:
        raise LinkError("metrics: gauges [running, waiting, deferred, kv] and pacing expected")
    gauges = EngineGauges(running=int(_num(g[0], "running", 1e7)), waiting=int(_num(g[1], "waiting", 1e7)),
                          waiting_deferred=int(_num(g[2], "deferred", 1e7)), kv_usage=_num(g[3], "kv usage", 1.0))
    busy, lag, lag_max = (_num(v, "pacing") for v in pace)
    return gauges, (busy, lag, lag_max)


# --- the link, once serving -----------------------------------------------------------------------------------
class Link:
    """One peer over asyncio streams: bounded lines in, bounded queue out, never awaiting a send."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str) -> None:
        self.reader = reader
        self.writer = writer
        self.address = address
        self.broken: str | None = None

    @classmethod
    async def open(cls, sock: socket.socket, leftover: bytes, address: str) -> Link:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_LINE + 1, loop=loop)
        if leftover:
            reader.feed_data(leftover)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        sock.setblocking(False)
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock=sock)
        return cls(reader, asyncio.StreamWriter(transport, protocol, reader, loop), address)

    def send(self, obj: dict[str, Any]) -> None:
        """Queue one message; raises LinkError when the link is gone or the peer stopped reading."""
        if self.broken is not None:
            raise LinkError(self.broken)
        if self.writer.is_closing():
            self.broken = "connection closed"
            raise LinkError(self.broken)
        if self.writer.transport.get_write_buffer_size() > MAX_QUEUED:
            self.broken = f"peer stopped reading ({MAX_QUEUED} bytes queued)"
            raise LinkError(self.broken)
        self.writer.write(encode(obj))

    async def recv(self) -> dict[str, Any] | None:
        """The next message; None when the peer closed the connection."""
        try:
            line = await self.reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise LinkError("connection closed in the middle of a message") from None
            return None
        except asyncio.LimitOverrunError:
            raise LinkError(f"a line over {MAX_LINE} bytes") from None
        except (ConnectionError, OSError) as exc:
            raise LinkError(f"connection lost: {exc}") from None
        return decode(line[:-1])

    def close(self) -> None:
        self.writer.close()
