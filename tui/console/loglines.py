"""What a server's log line is, for the log pane: the console's own polling, part of a traceback, an error.

No Textual here: the console's state sorts each line as it arrives (``ConsoleState``), so a replayed recording is
sorted the same way as a live log.

- **Our own polls**: the console's poller asks every server for ``/health`` (twice a second), ``/metrics`` (once a
  second), ``/version`` and ``/v1/models``; the proxy asks its servers for ``/health``. vLLM's access log writes a
  line for each (``INFO:     127.0.0.1:50458 - "GET /health HTTP/1.1" 200 OK``), and on a ready layout they were
  nearly every line of the pane. A *successful* GET of those paths is a poll; any other request, and a poll that
  failed (a 500 from ``/health`` is news), is kept in view.
- **Tracebacks**: Python prints a traceback as one line per frame; vLLM prefixes each with its process and level.
  A line that is part of one (its message starts a traceback, names a frame's file, is a frame's source line or
  the exception) is drawn whole (wrapped), never cut at the pane's edge: the cause is at the end.
"""

from __future__ import annotations

import re

#: the paths the console's poller and the proxy's health check ask for, answered 2xx
_POLL = re.compile(r'"(?:GET|HEAD) /(?:health|metrics|version|v1/models|ping|load)/? HTTP/[\d.]+" 2\d\d\b')
#: vLLM's prefix: ``(EngineCore pid=4001) ERROR 12-01 11:59:58 [core.py:1231] `` (each part optional)
_PREFIX = re.compile(r"^(?:\([\w. -]+ pid=\d+\) ?)?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
                     r"(?:\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? )?(?:\[[^\]]*\] ?)?)?")
_TRACE = re.compile(r"^(?:Traceback \(most recent call last\)|During handling of the above exception|"
                    r"The above exception was the direct cause|\s+File \"|\s{2,}\S|"
                    r"[\w.]*(?:Error|Exception|Exit|Interrupt|Warning)(?::|$))")
ERROR_WORDS = (" ERROR ", "Traceback", "Error:", "error:")
WARN_WORDS = (" WARNING ",)


def is_own_poll(line: str) -> bool:
    """True for an access-log line of a successful poll of a health or metrics path (ours, or the proxy's)."""
    return '" 2' in line and _POLL.search(line) is not None


def message(line: str) -> str:
    """The line without vLLM's process, level, time and source prefix."""
    m = _PREFIX.match(line)
    return line[m.end():] if m else line


def in_traceback(line: str) -> bool:
    """True when the line is part of a Python traceback (its start, a frame, a frame's source, the exception)."""
    return _TRACE.match(message(line)) is not None


def is_error(line: str) -> bool:
    return any(w in line for w in ERROR_WORDS)


def is_warning(line: str) -> bool:
    return any(w in line for w in WARN_WORDS)
