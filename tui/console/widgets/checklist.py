"""A list of choices to tick: ``[x] dp2`` / ``[ ] tp1``.

Textual's SelectionList draws every box as the same ``▐X▌`` and tells ticked from not only by colour (unreadable
on a 16-colour terminal, under NO_COLOR, or to a colour-blind operator), and it starts with no option highlighted,
so the first Space does nothing and the first ↓ lands on the first option. Here the box says its state in
characters, the first option is highlighted as soon as there is one (↓ Space unticks the second), and Space
toggles at once (a key typed after it sees the box as it then is).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Self

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widgets import OptionList, SelectionList
from textual.widgets.option_list import OptionDoesNotExist
from textual.widgets.selection_list import Selection

TICKED, UNTICKED = "[x]", "[ ]"
_TICKED_STYLE = Style(bold=True, color="green")
_UNTICKED_STYLE = Style(dim=True)


class CheckList(SelectionList[str]):
    def _get_left_gutter_width(self) -> int:
        return len(TICKED) + 1

    def add_options(self, items: Iterable[object]) -> Self:  # type: ignore[override]
        super().add_options(items)  # type: ignore[arg-type]
        if self.highlighted is None and self.option_count:
            self.highlighted = 0
        return self

    def action_select(self) -> None:
        """Space (Enter, a click) toggles the highlighted box at once: SelectionList toggles when the message an
        OptionList posts for it comes back, after a ctrl+s typed in the same burst has started what the boxes
        said before (the README's "Down Space C-s" started tp2 too)."""
        highlighted = self.highlighted
        if highlighted is not None and not self.get_option_at_index(highlighted).disabled:
            self._toggle_highlighted_selection()

    def render_line(self, y: int) -> Strip:
        line = OptionList.render_line(self, y)  # the prompt, without SelectionList's button
        _, scroll_y = self.scroll_offset
        index = scroll_y + y
        try:
            selection: Selection[str] = self.get_option_at_index(index)
        except OptionDoesNotExist:
            return line
        ticked = selection.value in self.selected
        base = next(iter(line)).style or self.rich_style
        meta = Style(meta={"option": index})  # a click on the box toggles it, as on the prompt
        box = Segment(TICKED if ticked else UNTICKED, base + (_TICKED_STYLE if ticked else _UNTICKED_STYLE) + meta)
        return Strip([box, Segment(" ", base + meta), *line])
