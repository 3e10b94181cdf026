"""The log pane: the selected server's log as it arrives, with the lines a playbook entry matched highlighted.

It draws only what fits its viewport from the model's last 1,000 lines of that server (toolong's way: no growing
scroll area, so a busy log never lays the screen out again), following the end unless the operator scrolled back:
with the pane focused (Tab), ↑/↓, PgUp/PgDn, Home/End scroll; ``f`` on the dashboard follows the end again.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widget import Widget

from tui.console.model import ConsoleModel, ServerView

ERROR_WORDS = (" ERROR ", "Traceback", "Error:", "error:")
WARN_WORDS = (" WARNING ",)


def styled(line: str, entry: str | None) -> Text:
    t = Text(line.rstrip())
    if entry is not None:  # the mark first: a long line is cut at the pane's width, the mark stays in view
        t.stylize("bold red")
        return Text.assemble((f"✖ {entry} ", "bold reverse red"), " ", t)
    elif any(w in line for w in ERROR_WORDS):
        t.stylize("red")
    elif any(w in line for w in WARN_WORDS):
        t.stylize("yellow")
    return t


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

    def render(self) -> Text:
        view = self.view
        if view is None:
            return Text("no server yet", style="dim")
        height = max(self.size.height, 1)
        lines = list(view.logs)
        end = max(len(lines) - self.back, 0)
        shown = lines[max(end - height, 0):end]
        if not shown:
            return Text("no log lines yet", style="dim")
        t = Text("\n").join(styled(line, entry) for _, line, entry in shown)
        t.no_wrap = True
        t.overflow = "ellipsis"
        return t
