"""The playbook's event: a known failure recognised in one server's log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from tui.core.events import Event
from tui.core.playbook.model import SEVERITY_RANK


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis(Event):
    """A playbook entry matched: where (the line, or the whole log for an end rule), what it means, the fix.

    ``captures`` holds the named groups of the matching pattern; ``Playbook.plan_fix(diagnosis)`` turns the
    entry's fix into a :class:`~tui.core.plan.planner.PlanFix` with them. ``is_failure`` is true for error-level
    entries: those are what make a start fail (warnings and info notes leave the server running).
    """

    kind: ClassVar[str] = "diagnosis"
    server: str
    entry_id: str
    title: str
    severity: str  # error | warning | info
    priority: int
    line_no: int | None  # 1-based line of the log; for an end rule, the last line seen
    line: str  # that line's text ("" when the log was empty)
    explanation: str
    fix: str  # one line: the changes and/or what to do instead
    changes: tuple[str, ...] = ()  # PlanFix.describe() of the entry's fix ("set X=1", "add --flag v")
    fixable: bool = False  # the entry carries a fix as data (``up --apply-fix ENTRY``)
    auto: bool = False  # safe to apply without asking (``up --apply-fix auto``)
    rule: str = "line"  # line | end (a whole-log rule, judged when the start ended)
    detail: str = ""  # for an end rule: how the start ended
    generic: bool = False
    captures: dict[str, str] = field(default_factory=dict)

    @property
    def is_failure(self) -> bool:
        return self.severity == "error"

    def sort_key(self) -> tuple[int, int, int]:
        return (SEVERITY_RANK.get(self.severity, 3), -self.priority, self.line_no or 0)

    def headline(self) -> str:
        where = f"line {self.line_no}" if self.rule == "line" and self.line_no else "whole log"
        who = f"{self.server}: " if self.server else ""
        return f"{who}{self.severity.upper()} [{self.entry_id}] {self.title} ({where})"
