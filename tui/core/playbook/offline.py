"""Diagnosing saved logs: read a file as lines the way an editor numbers them, match it, judge how it ended."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core.errors import InputError
from tui.core.launch.phases import BAR_MARK, PHASE_PATTERNS, PHASES
from tui.core.playbook.book import Playbook
from tui.core.playbook.events import Diagnosis
from tui.core.playbook.literals import required_literals
from tui.core.playbook.matcher import LEARN_MARKS, READY_MARK, SHUTDOWN
from tui.core.playbook.model import MatchContext

_LABEL = {p.key: p.label for p in PHASES}


def read_log_bytes(path: Path) -> bytes:
    """A saved log's bytes; one clear error naming the file when it cannot be read."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError("no such file", file=path) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a log file", file=path) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=path) from None


def log_lines(data: bytes) -> list[str]:
    """A log's lines split on ``\\n`` only (tqdm's ``\\r`` stays inside its line), undecodable bytes replaced."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_log_lines(path: Path) -> list[str]:
    """The file's lines split on ``\\n`` only (tqdm's ``\\r`` stays inside its line), undecodable bytes replaced."""
    return log_lines(read_log_bytes(path))


def read_log_line(path: Path, lineno: int) -> str:
    lines = read_log_lines(path)
    if not 1 <= lineno <= len(lines):
        raise InputError(f"has {len(lines)} lines; there is no line {lineno}", file=path)
    line = lines[lineno - 1].rstrip("\r")
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
    return tuple(sorted(lit for lit in found if not any(other != lit and other in lit for other in found)))


#: anchors for the whole-file search: substrings this long shared by several literals are searched once for all
ANCHOR_LEN = 8
#: an anchor more frequent than this in a sample of the file (per byte) is replaced by its literals: its lines
#: would all be fed (harmless, a line without a literal changes nothing) but they would cost more than the search
ANCHOR_MAX_RATE = 1 / 20_000


def anchors(literals: Iterable[str], sample: bytes = b"") -> tuple[str, ...]:
    """Fewer strings to search a file for than ``literals``: every literal contains one of them. Greedy: the
    ``ANCHOR_LEN``-long substring that most literals share, while one is shared by two or more; the rest stand
    for themselves. An anchor frequent in ``sample`` is dropped for its literals."""
    left = set(literals)
    out: list[str] = []
    while left:
        counts: dict[str, int] = {}
        for lit in left:
            for sub in {lit[i:i + ANCHOR_LEN] for i in range(len(lit) - ANCHOR_LEN + 1)}:
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
    m = playbook.matcher(server, context)
    sample = data[:1 << 20] + data[-(1 << 20):] if len(data) > 2 << 20 else data
    for i, pos in sorted(lines_with(data, anchors(wanted, sample)).items()):
        m.feed(_line_at(data, pos), i + 1)  # a line with an anchor but none of the literals changes nothing
    total = _line_count(data)
    m.skipped(total, _last_nonblank(data, total))
    m.finish()
    return LogDiagnosis(source=source, lines=total, ready=m.ready_seen, phase=m.tracker.phase.key,
                        diagnoses=tuple(m.diagnoses))


def diagnose_file(path: Path, playbook: Playbook, *, server: str = "", context: MatchContext | None = None
                  ) -> LogDiagnosis:
    return diagnose_bytes(read_log_bytes(path), playbook, source=str(path), server=server, context=context)
