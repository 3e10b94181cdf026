"""The launch screen's serve knobs: one row per knob with the value chosen (``attn  triton``); ←/→ (or space and
enter) step to the previous or next value that fits this model, GPU and topology, skipping the ones that do not
(the screen shows those greyed with their reason under the list). Each step posts :class:`KnobList.Changed`; the
screen writes it into the launch request. Attributes down: the screen hands the rows and the values chosen in
:meth:`KnobList.show`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from tui.console import fmt
from tui.console.knobs import KnobRow

#: the width of a row's key column when there is no row to measure
KEY_W = 8


def key_width(rows: Sequence[KnobRow]) -> int:
    """The key column of the plain knobs: the longest key and a space (a role's row, ``decode.mnbt`` on a P/D
    topology, takes its own: at 80 columns the list is 26 wide)."""
    return max((len(r.key) for r in rows if r.role is None), default=KEY_W - 1) + 1


def row_prompt(row: KnobRow, value: str, width: int = KEY_W) -> Text:
    """``attn        triton``: the value bold where it is not vLLM's default, red with ✖ where it does not fit."""
    t = Text(f"{row.key:<{width if row.role is None else len(row.key) + 1}}",
             style="bold" if value != row.default else "")
    fit = row.fit(value)
    if fit is not None and fit.refused:
        t.append(f"✖ {value}", style=fmt.BAD)
    elif value == row.default:
        t.append(value, style=fmt.DIM)
    else:
        t.append(value, style="bold cyan")
    if len(row.fitting()) < 2:
        t.append("  (only)", style=fmt.DIM)  # the others do not fit here: the screen says why
    t.no_wrap = True
    t.overflow = "ellipsis"
    return t


class KnobList(OptionList):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right,space,enter", "step(1)", "next value", show=False),
        Binding("left", "step(-1)", "previous value", show=False),
    ]

    class Changed(Message):
        """The operator stepped a knob to ``value`` (its default: the knob adds nothing)."""

        def __init__(self, key: str, value: str) -> None:
            self.key = key
            self.value = value
            super().__init__()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[KnobRow] = []
        self.chosen: dict[str, str] = {}
        self.key_w = KEY_W

    def show(self, rows: Sequence[KnobRow], chosen: Mapping[str, str]) -> None:
        """The rows and the values chosen (the highlighted row stays where it was)."""
        keep = self.highlighted_row.key if self.highlighted_row is not None else None
        self.rows, self.chosen = list(rows), dict(chosen)
        self.clear_options()
        self.key_w = key_width(self.rows)
        self.add_options([Option(row_prompt(r, self.value_of(r), self.key_w), id=r.key) for r in self.rows])
        keys = [r.key for r in self.rows]
        if keys:
            self.highlighted = keys.index(keep) if keep in keys else 0

    def value_of(self, row: KnobRow) -> str:
        return self.chosen.get(row.key, row.default)

    @property
    def highlighted_row(self) -> KnobRow | None:
        if self.highlighted is None or not 0 <= self.highlighted < len(self.rows):
            return None
        return self.rows[self.highlighted]

    def action_step(self, delta: int) -> None:
        row = self.highlighted_row
        if row is None:
            return
        value = row.step(self.value_of(row), delta)
        if value == self.value_of(row):
            return
        self.chosen[row.key] = value
        assert self.highlighted is not None
        self.replace_option_prompt_at_index(self.highlighted, row_prompt(row, value, self.key_w))
        self.post_message(self.Changed(row.key, value))
