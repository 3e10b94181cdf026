"""The troubleshooting playbook: known failures recognised in server logs, explained, and fixed as plan changes.

- :func:`load_playbook` reads ``profiles/playbook.yaml`` and the operator's ``playbook.yaml`` (strictly);
- :meth:`Playbook.matcher` gives one server's :class:`Matcher`: ``feed(line, lineno)`` as lines arrive,
  ``finish(exit_code, ready, stalled_phase)`` when the start ended; both return :class:`Diagnosis` events;
- :meth:`Playbook.fixes` turns diagnoses into the planner's ``PlanFix`` values for ``up --apply-fix``;
- :func:`diagnose_file` matches a saved log; ``tui.core.playbook.doctor`` checks a host before a launch.
"""

from tui.core.playbook.book import Playbook, load_playbook
from tui.core.playbook.events import Diagnosis
from tui.core.playbook.loader import operator_playbook_path, parse_playbook_file, shipped_playbook_path
from tui.core.playbook.matcher import Matcher
from tui.core.playbook.model import Entry, MatchContext
from tui.core.playbook.offline import LogDiagnosis, diagnose_bytes, diagnose_file, diagnose_lines, read_log_lines

__all__ = [
    "Diagnosis", "Entry", "LogDiagnosis", "MatchContext", "Matcher", "Playbook", "diagnose_bytes", "diagnose_file",
    "diagnose_lines", "load_playbook", "operator_playbook_path", "parse_playbook_file", "read_log_lines",
    "shipped_playbook_path",
]
