"""What the console draws of text from outside: the core's sink, plus what Textual adds to it.

Textual (8.x) draws a control character as it is: an ESC, a C1 control or a bidi override in a ``Static``, a
``DataTable`` cell or a notification reaches the terminal raw (only BEL is dropped), so an OSC 52 in a knob's title
would write the operator's clipboard. And a string given to a widget that parses markup (``Static``, ``Label``, a
``DataTable`` cell, an ``OptionList`` option, a border title, ``notify``) is Textual markup: ``[@click=app.quit]``
in a teammate's playbook title becomes a click that runs an action, ``[link=...]`` a link.

- :func:`plain`: text from outside for a place that parses markup: the sink's
  (:func:`tui.core.printable.printable`), then its markup escaped, so it shows as written.
- :func:`text`: the same as a Rich ``Text`` (never parsed as markup), for a widget or a cell.
- :class:`UnprintableFilter`: the net under both, a line filter on every widget of the console
  (``ConsoleApp.get_line_filters``): a character a terminal would obey rather than draw that reached a line anyway
  is replaced, cell for cell, before the line is written; what fed it is a bug this makes harmless.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.text import Text
from textual.color import Color
from textual.filter import LineFilter
from textual.markup import escape

from tui.core.printable import printable

#: what stands for a character of width 1 or more that the net replaced (the sink shows it as ``\\x1b`` instead)
REPLACEMENT = "\ufffd"


def plain(value: Any, limit: int | None = None, *, keep: str = "") -> str:
    """``value`` (text from outside) for a place that reads markup: printable (the core's sink, cut to ``limit``;
    ``keep="\\n"``: a text of several lines), its markup escaped (``[b]`` shows as ``[b]``, never bold; an action
    or a link never made)."""
    return escape(printable(value, limit, keep=keep))


def text(value: Any, limit: int | None = None, *, style: str = "", keep: str = "") -> Text:
    """``value`` (text from outside) as a Rich ``Text``: printable, and never read as markup."""
    return Text(printable(value, limit, keep=keep), style=style)


def _replaced(segment_text: str) -> str:
    out = []
    for ch in segment_text:
        if ch.isprintable() or ch == "\n":
            out.append(ch)
        else:
            out.append(REPLACEMENT * cell_len(ch))  # as many cells as the layout gave it: usually none
    return "".join(out)


class UnprintableFilter(LineFilter):
    """Every unprintable character of a drawn line (C0 and C1 controls, DEL, bidi and zero-width format
    characters) replaced by as many cells of U+FFFD as it was given (none, for most): nothing a widget was handed
    reaches the terminal as a control sequence, and no line changes its width."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        if all(seg.text.isprintable() for seg in segments):
            return segments
        return [seg if seg.text.isprintable() else Segment(_replaced(seg.text), seg.style, seg.control)
                for seg in segments]
