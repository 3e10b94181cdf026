"""Diagnosing saved logs: read a file as lines the way an editor numbers them, match it, judge how it ended."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core.errors import InputError
from tui.core.launch.phases import PHASES
from tui.core.playbook.book import Playbook
from tui.core.playbook.events import Diagnosis
from tui.core.playbook.model import MatchContext

_LABEL = {p.key: p.label for p in PHASES}


def read_log_lines(path: Path) -> list[str]:
    """The file's lines split on ``\\n`` only (tqdm's ``\\r`` stays inside its line), undecodable bytes replaced."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError("no such file", file=path) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a log file", file=path) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=path) from None
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


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


def diagnose_file(path: Path, playbook: Playbook, *, server: str = "", context: MatchContext | None = None
                  ) -> LogDiagnosis:
    return diagnose_lines(read_log_lines(path), playbook, source=str(path), server=server, context=context)
