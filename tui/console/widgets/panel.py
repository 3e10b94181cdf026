"""A panel of Rich text that repaints only itself when its text changes and its line count does not.

``Static.update`` lays the whole screen out again on every call; the dashboard's panels change several times a
second (every GPU sample), so they keep their text here: an unchanged text costs nothing, a changed one repaints
this widget only, and only a change in the number of lines asks for a layout.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget


class TextPanel(Widget):
    DEFAULT_CSS = "TextPanel { height: auto; }"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._text = Text()
        self._lines = 1

    def set_text(self, text: Text) -> None:
        text.no_wrap = True
        text.overflow = "ellipsis"
        if text == self._text:
            return
        lines = text.plain.count("\n") + 1
        self._text = text
        self.refresh(layout=lines != self._lines)
        self._lines = lines

    @property
    def text(self) -> Text:
        return self._text

    def render(self) -> Text:
        return self._text
