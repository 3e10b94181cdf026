"""The log pane: the selected server's log as it arrives, with the lines a playbook entry matched highlighted.

It draws only what fits its viewport from the model's last 1,000 lines of that server (toolong's way: no growing
scroll area, so a busy log never lays the screen out again), following the end unless the operator scrolled back:
with the pane focused (Tab), ↑/↓, PgUp/PgDn, Home/End scroll; ``f`` on the dashboard follows the end again.

What it shows of the log:
- the console's own polls (``GET /health``, ``GET /metrics`` answered 200) are hidden, and counted in the title;
  ``o`` shows them (``loglines.is_own_poll``; the same in a replay, whose lines are sorted as they are read);
- ``/`` opens a filter under the pane: only the lines containing its text (any case) are shown while it is set;
  Enter keeps it and goes back to the log, Esc clears it;
- ``w`` wraps every line; without it a line is cut at the pane's edge with an ellipsis, except a traceback, an
  error and a line the playbook marked, which are always wrapped (their cause is at their end);
- the log file's path is under the pane (its bottom border).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import ClassVar, Self

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input

from tui.console import loglines
from tui.console.safetext import plain
from tui.console.state import ConsoleState, ServerView

# kept here too: what was imported from this module before the words moved to ``loglines``
ERROR_WORDS = loglines.ERROR_WORDS
WARN_WORDS = loglines.WARN_WORDS

Line = tuple[int, str, str | None]

_RED = Style(color="red")
_YELLOW = Style(color="yellow")
_MARK = Style(bold=True, reverse=True, color="red")
_MARKED = Style(bold=True, color="red")
_DIM = Style(dim=True)
_PLAIN = Style()


def _style(line: str) -> Style:
    if loglines.is_error(line) or loglines.in_traceback(line):
        return _RED
    return _YELLOW if loglines.is_warning(line) else _PLAIN


def line_strip(line: str, entry: str | None, width: int, base: Style) -> Strip:
    """One log line as one row of the pane: cut to ``width`` (an ellipsis where it was cut) before anything is laid
    out (a vLLM line can be thousands of characters), red for errors, yellow for warnings, a matched line marked
    with its playbook entry first (a long line is cut, the mark stays in view)."""
    line = line.rstrip()
    if entry is not None:
        segments = [Segment(f"✖ {entry} ", base + _MARK), Segment(" ", base),
                    Segment(line[: width + 1], base + _MARKED)]
    else:
        segments = [Segment(line[: width + 1], base + _style(line))]
    strip = Strip(segments)
    if strip.cell_length > width:
        strip = Strip.join([strip.crop(0, max(width - 1, 0)), Strip([Segment("…", segments[-1].style)])])
    return strip.extend_cell_length(width, base)


def wrapped_strips(line: str, entry: str | None, width: int, base: Style, max_rows: int) -> list[Strip]:
    """One log line as the rows it takes wrapped at ``width`` (at most ``max_rows``; the last one ends with an
    ellipsis when more was left)."""
    width = max(width, 1)
    line = line.rstrip()
    keep = line[: width * max_rows + 1]  # what can show, and one more character to know it was cut
    if entry is not None:
        segments = [Segment(f"✖ {entry} ", base + _MARK), Segment(" ", base), Segment(keep, base + _MARKED)]
    else:
        segments = [Segment(keep, base + _style(line))]
    strip = Strip(segments)
    total = strip.cell_length
    rows = list(strip.divide([*range(width, total, width), total])) if total > width else [strip]
    if len(rows) > max_rows:
        rows = rows[:max_rows]
        last = rows[-1]
        rows[-1] = Strip.join([last.crop(0, max(width - 1, 0)), Strip([Segment("…", segments[-1].style)])])
    return [r.extend_cell_length(width, base) for r in rows]


def _cells(line: str, entry: str | None) -> int:
    text = line.rstrip()
    n = len(text) if text.isascii() else cell_len(text)
    return n + (len(entry) + 3 if entry is not None else 0)


class LogPane(Widget, can_focus=True):
    DEFAULT_CSS = "LogPane { height: 1fr; min-height: 3; }"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "scroll_back(1)", "back", show=False),
        Binding("down", "scroll_back(-1)", "on", show=False),
        Binding("pageup", "scroll_back(20)", "page back", show=False),
        Binding("pagedown", "scroll_back(-20)", "page on", show=False),
        Binding("home", "scroll_back(100000)", "first", show=False),
        Binding("end", "follow", "follow", show=False),
    ]

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.server: str | None = None
        self.view: ServerView | None = None
        self.back = 0  # lines scrolled back from the end (0: following)
        #: show the console's own polls (hidden by default)
        self.show_polls = False
        #: wrap every line (else only tracebacks, errors and marked lines)
        self.wrap = False
        #: what the pane says while it has no lines of a remote server (its host unreachable, no follow stream yet)
        self.note = ""
        #: only the lines containing this (any case); "" shows every line
        self.query_text = ""
        self._seen: tuple[int, int] = (-1, -1)
        #: the rows shown, computed once per repaint; each row's strip made once while it stays in view
        self._rows: list[tuple[Line, int]] | None = None
        self._strips: dict[tuple[int, str | None, int, int], Strip] = {}
        self._filtered: tuple[tuple[object, ...], list[Line]] | None = None

    @property
    def following(self) -> bool:
        return self.back == 0

    def show(self, model: ConsoleState, server: str | None) -> None:
        """Follow ``server`` (None: the first that has lines); repaint when its lines or marks changed. A server of
        another host (``host/name``) shows the lines its host's follow stream sent."""
        view = model.server_at(server) if server is not None else None
        if view is None:
            server = next((n for n, v in model.servers.items() if v.logs and v.role != "proxy"), None) \
                or next(iter(model.servers), None) \
                or next((k for k, v in model.server_rows() if v.logs and v.role != "proxy"), None)
            view = model.server_at(server) if server else None
        note = _remote_note(model, view)
        if server != self.server or view is not self.view or note != self.note:
            if server != self.server or view is not self.view:
                self.server, self.view, self.back = server, view, 0
                self._seen = (-1, -1)
                self._strips.clear()  # line numbers are the server's own
            self.note = note
            self._title()
            self.refresh()
        seen = self._serial()
        if seen != self._seen:
            self._seen = seen
            self._title()  # the count of polls hidden
            self.refresh()

    def _serial(self) -> tuple[int, int]:
        view = self.view
        if view is None:
            return (-2, -2)
        return (view.log_serial if self.show_polls else view.quiet_serial, view.marks)

    # --- what is shown ---------------------------------------------------------------------------------------
    def lines(self) -> Sequence[Line]:
        """The lines the pane shows from (oldest first): polls hidden or not, the filter applied."""
        view = self.view
        if view is None:
            return []
        source = view.logs if self.show_polls else view.quiet
        if not self.query_text:
            return source
        key = (id(view), self.show_polls, self.query_text, self._serial(), len(source))
        if self._filtered is None or self._filtered[0] != key:
            q = self.query_text.lower()
            self._filtered = (key, [ln for ln in source if q in ln[1].lower()])
        return self._filtered[1]

    def _title(self) -> None:
        shown = self.server
        view = self.view
        if shown and view is not None and view.host:  # a remote one: host/name
            shown = f"{view.name} on {view.host}"
        parts = [f"Log {shown}" if shown else "Log"]
        if self.query_text:
            parts.append(f"/{self.query_text}: {len(self.lines()):,} lines")
        if view is not None and view.polls and not self.show_polls:
            parts.append(f"{view.polls:,} polls hidden (o shows)")
        elif view is not None and self.show_polls:
            parts.append("polls shown (o hides)")
        if self.wrap:
            parts.append("wrapped (w)")
        if not self.following:
            parts.append(f"{self.back} lines back (End or f follows)")
        # a border title is markup: a server's, a host's or a path's name (and a search for "[rank0]") as written
        self.border_title = plain(" · ".join(parts), 300)
        path = view.log_path if view is not None else ""
        self.border_subtitle = plain(f"{view.host}:{path}" if path and view is not None and view.host else path, 300)

    # --- the operator's controls ---------------------------------------------------------------------------
    def action_scroll_back(self, lines: int) -> None:
        total = len(self.lines())
        self.back = max(0, min(self.back + lines, max(total - self.size.height, 0)))
        self._title()
        self.refresh()

    def action_follow(self) -> None:
        self.back = 0
        self._title()
        self.refresh()

    def toggle_polls(self) -> None:
        self.show_polls = not self.show_polls
        self.back = 0
        self._seen = (-1, -1)
        self._title()
        self.refresh()

    def toggle_wrap(self) -> None:
        self.wrap = not self.wrap
        self._strips.clear()
        self._title()
        self.refresh()

    def set_query(self, text: str) -> None:
        if text != self.query_text:
            self.query_text = text
            self.back = 0
            self._title()
            self.refresh()

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> Self:
        self._rows = None  # what is shown is worked out again at the next paint
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    # --- drawing ---------------------------------------------------------------------------------------------
    def _wraps(self, line: Line) -> bool:
        return self.wrap or line[2] is not None or loglines.is_error(line[1]) or loglines.in_traceback(line[1])

    def _visible(self) -> list[tuple[Line, int]]:
        """The rows in view, top to bottom: (line, row of it; -1 for a line cut to one row)."""
        if self._rows is None:
            height = max(self.size.height, 1)
            width = max(self.size.width, 1)
            lines = self.lines()
            end = max(len(lines) - self.back, 0)
            rows: list[tuple[Line, int]] = []
            # from the newest line in view upward, until the pane is full (at most `height` lines are looked at)
            for ln in reversed(list(islice(lines, max(end - height, 0), end))):
                if len(rows) >= height:
                    break
                if self._wraps(ln):
                    n = min(max(1, -(-_cells(*ln[1:]) // width)), height)
                    rows[:0] = [(ln, k) for k in range(n)]
                else:
                    rows.insert(0, (ln, -1))
            self._rows = rows[-height:] if len(rows) > height else rows
            keep = {(ln[0], ln[2], width, k) for ln, k in self._rows}
            self._strips = {k: v for k, v in self._strips.items() if k in keep}
        return self._rows

    def render_line(self, y: int) -> Strip:
        """The Line API (toolong's way): each row is one strip of its own, made from the line cut (or wrapped) to
        the pane's width; nothing but the rows in view is ever laid out."""
        width = self.size.width
        base = self.visual_style.rich_style
        rows = self._visible()
        if not rows:
            if y == 0:
                if self.note:
                    text = self.note
                elif self.view is None:
                    text = "no server yet"
                elif self.query_text:
                    text = f"no line contains {self.query_text!r} (Esc in the filter clears it)"
                else:
                    text = "no log lines yet"
                    if self.view.polls and not self.show_polls:
                        text += f" but {self.view.polls:,} polls (o shows them)"
                return Strip([Segment(text, base + _DIM)]).extend_cell_length(width, base)
            return Strip.blank(width, base)
        if y >= len(rows):
            return Strip.blank(width, base)
        (n, line, entry), k = rows[y]
        key = (n, entry, width, k)
        strip = self._strips.get(key)
        if strip is None:
            if k < 0:
                strip = self._strips[key] = line_strip(line, entry, width, base)
            else:
                parts = wrapped_strips(line, entry, width, base, max(self.size.height, 1))
                for i, part in enumerate(parts):
                    self._strips[(n, entry, width, i)] = part
                strip = parts[k] if k < len(parts) else Strip.blank(width, base)
        return strip


def _remote_note(model: ConsoleState, view: ServerView | None) -> str:
    """For a remote server with no lines yet: why (its host unreachable), else "" (the usual words)."""
    if view is None or not view.host or view.logs:
        return ""
    rv = model.remotes.get(view.host)
    if rv is not None and rv.down is not None:
        return f"{view.host} is unreachable ({rv.down.reason}): its log comes once it is reached again"
    return f"no log lines of {view.name} from {view.host} yet (its follow stream sends them as they are written)"


class LogFilter(Input):
    """The log pane's filter (``/``): shown under the pane while it is set; Enter (or ↓) goes back to the log with
    the filter kept, Esc clears it."""

    DEFAULT_CSS = "LogFilter { height: 1; margin: 0; }"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "clear_filter", "clear filter", show=False),
        Binding("down", "leave", "to the log", show=False),
    ]

    def __init__(self, **kw: object) -> None:
        super().__init__(placeholder="show only the log lines containing… (Enter: keep, Esc: clear)", compact=True,
                         **kw)  # type: ignore[arg-type]
        self.cursor_blink = False
        self.display = False

    def action_clear_filter(self) -> None:
        self.value = ""
        self._close()
        self._pane().focus()

    def action_leave(self) -> None:
        if not self.value:
            self._close()
        self._pane().focus()

    def _close(self) -> None:
        self.remove_class("-open")
        self.display = False

    def _pane(self) -> LogPane:
        assert self.parent is not None
        return self.parent.query_one(LogPane)


class LogView(Vertical):
    """The log pane and its filter line."""

    DEFAULT_CSS = "LogView { height: 1fr; min-height: 4; }"

    def compose(self) -> ComposeResult:
        log = LogPane(id="log")
        log.border_title = "Log"
        yield log
        yield LogFilter(id="log-filter")

    @property
    def pane(self) -> LogPane:
        return self.query_one(LogPane)

    def open_filter(self) -> None:
        f = self.query_one(LogFilter)
        f.add_class("-open")
        f.display = True  # at once (a class is applied at the next style update), so the focus can move now
        # focused now, not at the next message (``focus()``): keys typed right after the ``/`` go into the filter
        self.screen.set_focus(f)

    @on(Input.Changed, "#log-filter")
    def _changed(self, event: Input.Changed) -> None:
        self.pane.set_query(event.value.strip())

    @on(Input.Submitted, "#log-filter")
    def _submitted(self, event: Input.Submitted) -> None:
        self.query_one(LogFilter).action_leave()
