"""The log pane: the selected server's log as it arrives, with the lines a playbook entry matched highlighted.

Only lines new since the last draw are written; switching server redraws the last ones kept (the model keeps
1,000 per server). ``f`` toggles following the end.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

from tui.console.model import ConsoleModel, ServerView

SHOWN = 400
ERROR_WORDS = (" ERROR ", "Traceback", "Error:", "error:")
WARN_WORDS = (" WARNING ",)


def styled(line: str, entry: str | None) -> Text:
    t = Text(line.rstrip())
    if entry is not None:
        t.stylize("bold red")
        t.append(f"  ◀ {entry}", style="bold reverse red")
    elif any(w in line for w in ERROR_WORDS):
        t.stylize("red")
    elif any(w in line for w in WARN_WORDS):
        t.stylize("yellow")
    return t


class LogPane(RichLog):
    DEFAULT_CSS = "LogPane { height: 1fr; min-height: 3; }"

    def __init__(self, **kw: object) -> None:
        super().__init__(max_lines=SHOWN, wrap=False, markup=False, highlight=False, auto_scroll=True,
                         **kw)  # type: ignore[arg-type]
        self.server: str | None = None
        self._serial = -1
        self._marks = -1

    def show(self, model: ConsoleModel, server: str | None) -> None:
        """Follow ``server`` (None: the first that has lines)."""
        if server is None or server not in model.servers:
            server = next((n for n, v in model.servers.items() if v.logs and v.role != "proxy"), None) \
                or next(iter(model.servers), None)
        if server != self.server:
            self.server = server
            self._serial = -1
        view = model.servers.get(server) if server else None
        self.border_title = f"Log {server}" if server else "Log"
        if view is None:
            if self._serial != -2:
                self.clear()
                self.write(Text("no server yet", style="dim"))
                self._serial = -2
            return
        self._draw(view)

    def _draw(self, view: ServerView) -> None:
        if view.log_serial == self._serial and view.marks == self._marks:
            return
        new = view.log_serial - self._serial
        if self._serial < 0 or new > min(len(view.logs), SHOWN) or view.marks != self._marks:
            # a fresh pane, too many lines missed, or a mark placed on an earlier line: redraw what is kept
            self.clear()
            for _, line, entry in list(view.logs)[-SHOWN:]:
                self.write(styled(line, entry))
        else:
            for _, line, entry in list(view.logs)[-new:]:
                self.write(styled(line, entry))
        self._serial = view.log_serial
        self._marks = view.marks
