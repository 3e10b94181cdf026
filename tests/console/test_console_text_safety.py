"""What the console draws from events (a live server's log, a teammate's recording) never carries a control
character to the terminal: an escape sequence in a log line or a diagnosis is shown escaped."""

from __future__ import annotations

from tui.console.state import ConsoleState
from tui.core.launch.events import LogLine
from tui.core.playbook import Diagnosis

EVIL = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\ttab\r"


def test_log_lines_and_diagnoses_are_escaped_before_they_are_drawn() -> None:
    m = ConsoleState()
    m.apply(LogLine(server="decode-0", lineno=1, text=f"INFO {EVIL} done"))
    m.apply(Diagnosis(server="decode-0", entry_id="x", title=f"t{EVIL}", severity="error", priority=1, line_no=1,
                      line=f"ERROR {EVIL}", explanation=f"first\nsecond {EVIL}", fix=f"do {EVIL}"))
    v = m.servers["decode-0"]
    texts = [t for _, t, _ in v.logs] + [v.last_line or ""]
    d = m.diagnoses[0]
    texts += [d.line, d.title, d.fix, *d.explanation.split("\n")]
    assert texts and all(t.isprintable() for t in texts), texts
    assert "\\x1b[31mred" in v.logs[0][1] and "tab" in v.logs[0][1]
    assert d.explanation.split("\n")[0] == "first"
