"""Diagnosing saved logs: read a file as lines the way an editor numbers them, match it, judge how it ended."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core import safeio
from tui.core.errors import InputError
from tui.core.launch.phases import BAR_MARK, PHASE_PATTERNS, PHASES
from tui.core.playbook.book import Playbook
from tui.core.playbook.events import Diagnosis
from tui.core.playbook.literals import required_literals
from tui.core.playbook.matcher import LEARN_MARKS, READY_MARK, SHUTDOWN
from tui.core.playbook.model import MatchContext

_LABEL = {p.key: p.label for p in PHASES}


#: a saved log is read in pieces of about this many bytes (each ending at a line end), so diagnosing a log of
#: gigabytes holds a few pieces in memory, never the whole file; a smaller log is one piece
PIECE_BYTES = 16 * safeio.MiB
#: a line longer than this is split into pieces (it is no server's log line: a file of binary bytes)
SPLIT_BYTES = 64 * safeio.MiB
#: bytes of one line ``playbook add --from`` takes (a pattern is made from the start of its message)
MAX_LINE_BYTES = 64 * safeio.KiB


def check_log(path: Path) -> int:
    """The size of a saved log: a regular file within the log size limit (a FIFO, a device or a folder is refused
    at once, in one line naming it)."""
    try:
        fd, st = safeio.open_regular(path)
    except InputError as err:
        if err.message == "not a regular file: a directory":
            raise InputError("is a directory, not a log file", file=path) from None
        raise
    os.close(fd)
    limit = safeio.LIMITS["log"]
    if st.st_size > limit:
        raise safeio.too_large(path, st.st_size, limit, "log")
    return st.st_size


def read_log_bytes(path: Path) -> bytes:
    """A saved log's bytes (all of them: for logs of a bounded size); one clear error naming the file when it
    cannot be read or is no regular file."""
    check_log(path)
    return safeio.read_bytes(path, "log")


def _pieces(fd: int, size: int, piece: int | None = None) -> Iterator[bytes]:
    """The first ``size`` bytes of ``fd`` in pieces of about ``piece`` (default :data:`PIECE_BYTES`) bytes that end
    at a line end (a line longer than :data:`SPLIT_BYTES` is split: the only way the numbering can differ from
    reading the file whole). About two pieces are held at a time."""
    piece = piece or PIECE_BYTES
    carry = b""  # the start of a line that continues in the next chunk
    left = size
    while left > 0:
        chunk = os.read(fd, min(piece, left))
        if not chunk:
            break
        left -= len(chunk)
        cut = chunk.rfind(b"\n") + 1 if left > 0 else len(chunk)
        if cut == 0:  # no line ends in this chunk: one long line, read on
            carry += chunk
            if len(carry) >= max(2 * piece, SPLIT_BYTES):
                yield carry
                carry = b""
            continue
        out = b"".join((carry, memoryview(chunk)[:cut])) if carry else chunk if cut == len(chunk) else chunk[:cut]
        carry = chunk[cut:]
        del chunk
        yield out
    if carry:
        yield carry


def log_lines(data: bytes) -> list[str]:
    """A log's lines split on ``\\n`` only (tqdm's ``\\r`` stays inside its line), undecodable bytes replaced."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_log_lines(path: Path) -> list[str]:
    """The file's lines split on ``\\n`` only (tqdm's ``\\r`` stays inside its line), undecodable bytes replaced."""
    return log_lines(read_log_bytes(path))


def _line_bytes(path: Path, lineno: int, limit: int) -> tuple[bytes | None, int]:
    """(the first ``limit`` bytes of line ``lineno``, or None when the log has no such line; the lines counted up
    to it, all of them when there is none), read in pieces: a log of gigabytes is never held whole."""
    size = check_log(path)
    fd, _ = safeio.open_regular(path)
    try:
        number = 1
        kept: bytearray | None = None
        has_byte = False  # a byte (text or its line end) at or after the line's start: the line exists
        ends_nl = True  # an empty file has no lines
        left = size
        while left > 0:
            chunk = os.read(fd, min(4 * safeio.MiB, left))
            if not chunk:
                break
            left -= len(chunk)
            ends_nl = chunk.endswith(b"\n")
            pos = 0
            if kept is None:
                while number < lineno:
                    nl = chunk.find(b"\n", pos)
                    if nl == -1:
                        break
                    number, pos = number + 1, nl + 1
                if number < lineno:
                    continue
                kept = bytearray()
            if pos == len(chunk):
                continue
            has_byte = True
            nl = chunk.find(b"\n", pos)
            end = len(chunk) if nl == -1 else nl
            kept += chunk[pos:min(end, pos + limit - len(kept))]
            if nl != -1 or len(kept) >= limit:
                return bytes(kept), number
        if kept is not None and has_byte:
            return bytes(kept), number
        return None, number - 1 if ends_nl else number
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=path) from None
    finally:
        os.close(fd)


def _utf8_whole(data: bytes) -> bytes:
    """``data`` without a UTF-8 sequence cut at its end (a line cut at MAX_LINE_BYTES is no binary line)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # the lead byte of the last sequence: whole when it has all its continuation bytes
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= need else data[:-back]
    return data


def read_log_line(path: Path, lineno: int) -> str:
    """Line ``lineno`` (1-based) of a saved log, at most MAX_LINE_BYTES of it (a longer line is cut: a playbook
    pattern is made from the start of its message)."""
    data, lines = _line_bytes(path, lineno if lineno >= 1 else 2**62, MAX_LINE_BYTES)
    if data is None or lineno < 1:
        raise InputError(f"has {lines} lines; there is no line {lineno}", file=path)
    if len(data) >= MAX_LINE_BYTES:
        data = _utf8_whole(data)
    line = data.decode("utf-8", errors="replace").rstrip("\r")
    if "\ufffd" in line or any(ord(c) < 32 and c != "\t" for c in line):
        # bytes that are not UTF-8 text (a binary file, a corrupt log): a rule written from them matches nothing
        raise InputError("is not a line of text (binary bytes or control characters)", file=path, line=lineno)
    return line


@dataclass(frozen=True, slots=True)
class LogDiagnosis:
    """What one saved log shows."""

    source: str
    lines: int
    ready: bool
    phase: str
    diagnoses: tuple[Diagnosis, ...]  # report order: errors first, then by priority, then by line

    @property
    def problems(self) -> list[Diagnosis]:
        """Errors and warnings: what counts as a known failure. Info notes (e.g. a Triton JIT) do not."""
        return [d for d in self.diagnoses if d.severity in ("error", "warning")]

    @property
    def notes(self) -> list[Diagnosis]:
        return [d for d in self.diagnoses if d.severity == "info"]

    @property
    def known_failure(self) -> bool:
        return bool(self.problems)

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.source, "lines": self.lines, "ready": self.ready, "phase": self.phase,
            "phase_label": _LABEL.get(self.phase, self.phase), "known_failure": self.known_failure,
            "diagnoses": [d.to_dict() for d in self.diagnoses],
        }


def diagnose_lines(lines: Iterable[str], playbook: Playbook, *, source: str = "", server: str = "",
                   context: MatchContext | None = None) -> LogDiagnosis:
    """Match a whole saved log; a log that ends without readiness is judged as a start that stopped there."""
    m = playbook.matcher(server, context)
    count = 0
    for count, line in enumerate(lines, start=1):
        m.feed(line, count)
    m.finish()
    return LogDiagnosis(source=source, lines=count, ready=m.ready_seen, phase=m.tracker.phase.key,
                        diagnoses=tuple(m.diagnoses))


def state_literals(playbook: Playbook) -> tuple[str, ...] | None:
    """Literals one of which is on every line that can change a matcher's state (a playbook pattern or context
    probe, a startup phase, a progress bar, readiness, a shutdown, what the matcher learns from the log), none of
    which contains another (a line with the longer one has the shorter); None when something of that has no
    literal, or one could span two lines (then every line must be fed)."""
    if playbook.rules_always or playbook.context_always:
        return None
    found: set[str] = set(playbook.literals)
    for pattern in (*PHASE_PATTERNS, SHUTDOWN):
        lits = required_literals(pattern.pattern, min_len=1)  # a whole-file search of a short one costs the same
        if not lits:
            return None
        found.update(lits)
    found.update((BAR_MARK, READY_MARK, *LEARN_MARKS))
    if any("\n" in lit or not lit for lit in found):
        return None
    if len(found) > MAX_GROUPED:  # (dropping the literals that contain another only saves searches: skipped)
        return tuple(sorted(found))
    return tuple(sorted(lit for lit in found if not any(other != lit and other in lit for other in found)))


#: anchors for the whole-file search: substrings this long shared by several literals are searched once for all
ANCHOR_LEN = 8
#: anchors are looked for in the first characters of each literal only, and only among this many literals: the
#: greedy search is quadratic, and a playbook of 1,000 long patterns made it take half a minute
ANCHOR_SCAN = 64
MAX_GROUPED = 512
#: an anchor more frequent than this in a sample of the file (per byte) is replaced by its literals: its lines
#: would all be fed (harmless, a line without a literal changes nothing) but they would cost more than the search
ANCHOR_MAX_RATE = 1 / 20_000


def anchors(literals: Iterable[str], sample: bytes = b"") -> tuple[str, ...]:
    """Fewer strings to search a file for than ``literals``: every literal contains one of them. Greedy: the
    ``ANCHOR_LEN``-long substring that most literals share, while one is shared by two or more; the rest stand
    for themselves. An anchor frequent in ``sample`` is dropped for its literals."""
    left = set(literals)
    out: list[str] = []
    if len(left) > MAX_GROUPED:
        return tuple(sorted(left))
    while left:
        counts: dict[str, int] = {}
        for lit in left:
            head = lit[:ANCHOR_SCAN]
            for sub in {head[i:i + ANCHOR_LEN] for i in range(len(head) - ANCHOR_LEN + 1)}:
                counts[sub] = counts.get(sub, 0) + 1
        best = max(counts, key=lambda k: (counts[k], k), default=None)
        if best is None or counts[best] < 2:
            break
        covered = {lit for lit in left if best in lit}
        if sample and sample.count(best.encode("utf-8")) > ANCHOR_MAX_RATE * len(sample):
            out.extend(covered)
        else:
            out.append(best)
        left -= covered
    return tuple(sorted(out + sorted(left)))


def lines_with(data: bytes, literals: Iterable[str]) -> dict[int, int]:
    """The lines of a log's bytes (split on ``\\n``, 0-based) on which one of ``literals`` occurs -> the byte
    offset of one occurrence. One fast substring search per literal over the whole file instead of one per
    literal per line. UTF-8 bytes are searched, which finds a literal exactly where the decoded text has it (a
    replaced invalid byte never joins a valid sequence); no literal may contain ``\\n``."""
    offsets: set[int] = set()
    find = data.find
    for lit in literals:
        needle = lit.encode("utf-8")
        pos = find(needle)
        while pos != -1:
            offsets.add(pos)
            pos = find(needle, pos + 1)
    out: dict[int, int] = {}
    count = data.count
    line, at = 0, 0
    for pos in sorted(offsets):
        line += count(b"\n", at, pos)
        at = pos
        out.setdefault(line, pos)
    return out


def _line_count(data: bytes) -> int:
    """As many lines as :func:`log_lines` gives."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _line_at(data: bytes, pos: int) -> str:
    start = data.rfind(b"\n", 0, pos) + 1
    end = data.find(b"\n", pos)
    return data[start:end if end != -1 else len(data)].decode("utf-8", errors="replace")


def _last_nonblank(data: bytes, total: int) -> tuple[int, str] | None:
    """The last line that is not blank (its number, 1-based, and text), as the matcher sees lines."""
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    number = total
    while number > 0:
        start = data.rfind(b"\n", 0, end) + 1
        text = data[start:end].decode("utf-8", errors="replace").rstrip("\r\n")
        if text.strip():
            return number, text
        number -= 1
        end = start - 1
    return None


def diagnose_bytes(data: bytes, playbook: Playbook, *, source: str = "", server: str = "",
                   context: MatchContext | None = None) -> LogDiagnosis:
    """:func:`diagnose_lines` of a saved log given as its bytes: the same result, faster on a long log.

    The literals of everything that can change the matcher's state (:func:`state_literals`) are searched in the
    whole file first; only the lines that have one are decoded and fed, so a line without one costs nothing (the
    request and metrics lines of a long run: benchmarks/diagnose_speed.py). A playbook with a pattern that has
    no literal is matched line by line.
    """
    wanted = state_literals(playbook)
    if wanted is None:
        return diagnose_lines(log_lines(data), playbook, source=source, server=server, context=context)
    sample = data[:1 << 20] + data[-(1 << 20):] if len(data) > 2 << 20 else data
    return _diagnose_pieces([data], sample, playbook, wanted, source=source, server=server, context=context)


def _diagnose_pieces(pieces: Iterable[bytes], sample: bytes, playbook: Playbook, wanted: tuple[str, ...] | None, *,
                     source: str, server: str, context: MatchContext | None) -> LogDiagnosis:
    """:func:`diagnose_bytes` of a log given as pieces that end at line ends (all but the last), ``sample`` its
    start and end (to choose the anchors), ``wanted`` the playbook's :func:`state_literals`."""
    m = playbook.matcher(server, context)
    base = 0  # lines before the piece
    last: tuple[int, str] | None = None
    if wanted is None:
        for piece in pieces:
            for i, line in enumerate(log_lines(piece), start=base + 1):
                m.feed(line, i)
            base += _line_count(piece)
        m.finish()
        return LogDiagnosis(source=source, lines=base, ready=m.ready_seen, phase=m.tracker.phase.key,
                            diagnoses=tuple(m.diagnoses))
    found = anchors(wanted, sample)
    for piece in pieces:
        for i, pos in sorted(lines_with(piece, found).items()):
            m.feed(_line_at(piece, pos), base + i + 1)  # a line with an anchor but none of the literals changes nothing
        count = _line_count(piece)
        in_piece = _last_nonblank(piece, count)
        if in_piece is not None:
            last = (base + in_piece[0], in_piece[1])
        base += count
    m.skipped(base, last)
    m.finish()
    return LogDiagnosis(source=source, lines=base, ready=m.ready_seen, phase=m.tracker.phase.key,
                        diagnoses=tuple(m.diagnoses))


def diagnose_file(path: Path, playbook: Playbook, *, server: str = "", context: MatchContext | None = None
                  ) -> LogDiagnosis:
    """:func:`diagnose_bytes` of a saved log file, read in pieces of :data:`PIECE_BYTES` (memory stays bounded
    whatever its size); a FIFO, a device or a folder is refused at once, a log past the log size limit too."""
    size = check_log(path)
    fd, _ = safeio.open_regular(path)
    try:
        if size <= PIECE_BYTES:  # one piece: the bytes as they are
            return diagnose_bytes(b"".join(_pieces(fd, size)), playbook, source=str(path), server=server,
                                  context=context)
        sample = os.pread(fd, 1 << 20, 0) + os.pread(fd, 1 << 20, max(size - (1 << 20), 0))
        return _diagnose_pieces(_pieces(fd, size), sample, playbook, state_literals(playbook), source=str(path),
                                server=server, context=context)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=path) from None
    finally:
        os.close(fd)
