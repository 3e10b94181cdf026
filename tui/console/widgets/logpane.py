"""The log pane: the selected server's log as it arrives, with the lines a playbook entry matched highlighted.

It draws only what fits its viewport from the model's last 1,000 lines of that server (toolong's way: no growing
scroll area, so a busy log never lays the screen out again), following the end unless the operator scrolled back:
with the pane focused (Tab), ↑/↓, PgUp/PgDn, Home/End scroll; ``f`` on the dashboard follows the end again.
"""

from __future__ import annotations

from itertools import islice
from typing import ClassVar, Self

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding, BindingType
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from tui.console.model import ConsoleModel, ServerView

ERROR_WORDS = (" ERROR ", "Traceback", "Error:", "error:")
WARN_WORDS = (" WARNING ",)


_RED = Style(color="red")
_YELLOW = Style(color="yellow")
_MARK = Style(bold=True, reverse=True, color="red")
_MARKED = Style(bold=True, color="red")
_DIM = Style(dim=True)
_PLAIN = Style()


def line_strip(line: str, entry: str | None, width: int, base: Style) -> Strip:
    """One log line as one row of the pane: cut to ``width`` (an ellipsis where it was cut) before anything is laid
    out (a vLLM line can be thousands of characters), red for errors, yellow for warnings, a matched line marked
    with its playbook entry first (a long line is cut, the mark stays in view)."""
    line = line.rstrip()
    if entry is not None:
        segments = [Segment(f"✖ {entry} ", base + _MARK), Segment(" ", base),
                    Segment(line[: width + 1], base + _MARKED)]
    else:
        style = _RED if any(w in line for w in ERROR_WORDS) else _YELLOW if any(w in line for w in WARN_WORDS) \
            else _PLAIN
        segments = [Segment(line[: width + 1], base + style)]
    strip = Strip(segments)
    if strip.cell_length > width:
        strip = Strip.join([strip.crop(0, max(width - 1, 0)), Strip([Segment("…", segments[-1].style)])])
    return strip.extend_cell_length(width, base)


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
        self._seen: tuple[int, int] = (-1, -1)
        #: the rows shown, computed once per repaint; each row's strip made once while it stays in view
        self._rows: list[tuple[int, str, str | None]] | None = None
        self._strips: dict[tuple[int, str | None, int], Strip] = {}

    @property
    def following(self) -> bool:
        return self.back == 0

    def show(self, model: ConsoleModel, server: str | None) -> None:
        """Follow ``server`` (None: the first that has lines); repaint when its lines or marks changed."""
        if server is None or server not in model.servers:
            server = next((n for n, v in model.servers.items() if v.logs and v.role != "proxy"), None) \
                or next(iter(model.servers), None)
        view = model.servers.get(server) if server else None
        if server != self.server or view is not self.view:
            self.server, self.view, self.back = server, view, 0
            self._seen = (-1, -1)
            self._strips.clear()  # line numbers are the server's own
            self._title()
        seen = (view.log_serial, view.marks) if view is not None else (-2, -2)
        if seen != self._seen:
            self._seen = seen
            self.refresh()

    def _title(self) -> None:
        where = "" if self.following else f" · {self.back} lines back (End or f follows)"
        self.border_title = (f"Log {self.server}" if self.server else "Log") + where

    def action_scroll_back(self, lines: int) -> None:
        total = len(self.view.logs) if self.view is not None else 0
        self.back = max(0, min(self.back + lines, max(total - self.size.height, 0)))
        self._title()
        self.refresh()

    def action_follow(self) -> None:
        self.back = 0
        self._title()
        self.refresh()

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> Self:
        self._rows = None  # what is shown is worked out again at the next paint
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _visible(self) -> list[tuple[int, str, str | None]]:
        if self._rows is None:
            view = self.view
            height = max(self.size.height, 1)
            if view is None:
                self._rows = []
            else:
                logs = view.logs
                end = max(len(logs) - self.back, 0)
                self._rows = list(islice(logs, max(end - height, 0), end))
            keep = {(n, entry, self.size.width) for n, _, entry in self._rows}
            self._strips = {k: v for k, v in self._strips.items() if k in keep}
        return self._rows

    def render_line(self, y: int) -> Strip:
        """The Line API (toolong's way): each row is one strip of its own, made from the line cut to the pane's
        width; nothing but the rows in view is ever laid out."""
        width = self.size.width
        base = self.visual_style.rich_style
        rows = self._visible()
        if not rows:
            if y == 0:
                text = "no server yet" if self.view is None else "no log lines yet"
                return Strip([Segment(text, base + _DIM)]).extend_cell_length(width, base)
            return Strip.blank(width, base)
        if y >= len(rows):
            return Strip.blank(width, base)
        n, line, entry = rows[y]
        key = (n, entry, width)
        strip = self._strips.get(key)
        if strip is None:
            strip = self._strips[key] = line_strip(line, entry, width, base)
        return strip
