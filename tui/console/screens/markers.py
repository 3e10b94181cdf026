"""A replay's markers (phase changes, diagnoses, finished runs, failures, the operator's actions), one a line:
Enter jumps the replay to the one highlighted (the dialog answers its time; the replay console seeks)."""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from tui.console.screens.base import ConsoleModal
from tui.core.printable import printable
from tui.core.record.markers import Marker

#: markers listed at most (a day's recording has a few thousand)
MAX_LISTED = 5000


class MarkersModal(ConsoleModal[float | None]):
    """The markers of a recording; dismissed with the time of the one chosen (None: cancelled)."""

    DEFAULT_CSS = """
    MarkersModal { align: center middle; }
    MarkersModal #markers-dialog { height: 90%; }
    MarkersModal #markers { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,m", "close", "close")]

    def __init__(self, title: str, markers: list[Marker], now: float) -> None:
        super().__init__()
        self.title_text = title
        self.markers = markers[:MAX_LISTED]
        self.now = now

    def compose(self) -> ComposeResult:
        with Vertical(id="markers-dialog", classes="dialog"):
            yield Label(Text(self.title_text, style="bold"))
            options = []
            for i, m in enumerate(self.markers):
                line = Text(time.strftime("%H:%M:%S ", time.localtime(m.ts)), style="dim")
                line.append(f"{m.kind:<10}", style="bold red" if m.kind in ("failure", "diagnosis") else "bold")
                line.append(f" {printable(m.label, 300)}")
                options.append(Option(line, id=str(i)))
            yield OptionList(*options, id="markers")
            yield Label(Text("enter jumps there · esc closes", style="dim"))

    def on_mount(self) -> None:
        ol = self.query_one("#markers", OptionList)
        ol.focus()
        # the highlight starts on the first marker after the moment replayed (the last one at the end)
        after = next((i for i, m in enumerate(self.markers) if m.ts > self.now), len(self.markers) - 1)
        if self.markers:
            ol.highlighted = max(after, 0)

    @on(OptionList.OptionSelected, "#markers")
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.markers[int(event.option.id or 0)].ts)

    def action_close(self) -> None:
        self.dismiss(None)
