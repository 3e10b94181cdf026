"""The console's charts, on textual-plot (PlotWidget over a textual-hires-canvas Canvas).

- ``TimeSeriesChart``: live series over the last ``window_s`` seconds (the bench screen's 4 Hz charts);
- ``XYChart``: one latency-throughput curve per topology, points joined in x order, a marker at each point;
- ``BarChart``: groups of horizontal bars (a knob's values side by side per topology and workload: the results).

Both are built for a live monitor: ``set_series`` only stores the data and asks for a refresh, and the drawing
happens once per frame, however often it is called (textual-plot draws in ``render``; each canvas is drawn inside
its ``batch_refresh()``, so a frame is one refresh per canvas rather than one per changed cell: about a third less
CPU per frame at 120x20, see benchmarks/chart_redraw.py). Each series has its own colour *and* its own texture
(braille line, ``+`` marks, half-block line, ``x`` marks, …), so they stay apart on a 16-colour terminal and under
NO_COLOR. The y axis starts at 0 and ends at a rounded maximum (1, 1.5, 2, 3, 4, 5, 6 or 8 x 10^n) that grows at
once and shrinks only when the data falls below 40 % of it, so it does not jump every frame. Same data, same
size: same screen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.containers import Grid, VerticalScroll
from textual.events import Resize
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static
from textual_hires_canvas import Canvas, HiResMode, TextAlign
from textual_plot import PlotWidget
from textual_plot.axis_formatter import NumericAxisFormatter
from textual_plot.plot_widget import Legend

Point = tuple[float, float]

EMPTY_TEXT = "no data yet"


@dataclass(frozen=True)
class SeriesStyle:
    """How one series is drawn: a colour from the 16-colour palette and a texture that reads without it."""

    color: str
    hires: HiResMode | None  # a line in this mode, or None: a mark at each point
    mark: str  # the mark (when hires is None) and the legend's glyph


#: the time-series styles, in series order (they repeat after the last)
LINE_STYLES: tuple[SeriesStyle, ...] = (
    SeriesStyle("cyan", HiResMode.BRAILLE, "⠤"),
    SeriesStyle("magenta", None, "+"),
    SeriesStyle("yellow", HiResMode.HALFBLOCK, "▀"),
    SeriesStyle("green", None, "x"),
    SeriesStyle("bright_blue", HiResMode.QUADRANT, "▚"),
    SeriesStyle("bright_red", None, "o"),
)

#: the XY styles: a braille line through the points, a distinct mark at each
XY_STYLES: tuple[SeriesStyle, ...] = (
    SeriesStyle("cyan", HiResMode.BRAILLE, "o"),
    SeriesStyle("magenta", HiResMode.BRAILLE, "+"),
    SeriesStyle("yellow", HiResMode.BRAILLE, "x"),
    SeriesStyle("green", HiResMode.BRAILLE, "*"),
    SeriesStyle("bright_blue", HiResMode.BRAILLE, "#"),
    SeriesStyle("bright_red", HiResMode.BRAILLE, "@"),
)


# --- numbers --------------------------------------------------------------------------------------------------


#: the axis maxima, times a power of ten: each divides into 2, 3 or 4 round ticks (see ``even_ticks``)
_MANTISSAS = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
_ROUND_STEPS = (1.0, 2.0, 2.5, 5.0)


def nice_ceil(value: float) -> float:
    """The smallest 1, 1.5, 2, 3, 4, 5, 6 or 8 x 10^n at or above ``value`` (1.0 for nothing above 0)."""
    if not math.isfinite(value) or value <= 0:
        return 1.0
    exp = math.floor(math.log10(value))
    for mantissa in _MANTISSAS:
        candidate = mantissa * 10.0**exp
        if candidate >= value * (1 - 1e-9):
            return candidate
    return 10.0 ** (exp + 1)  # pragma: no cover - the loop always returns


def stepped_max(current: float | None, data_max: float) -> float:
    """The axis maximum for ``data_max`` given the one shown now: grows at once, shrinks below 40 % only."""
    target = nice_ceil(data_max)
    if current is None or target > current or data_max < 0.4 * current:
        return target
    return current


def compact(value: float) -> str:
    """A number in at most 5 characters: 0.25, 1.5, 12.5, 40, 850, 1.2k, 12k, 3.4M (no trailing ".0")."""
    if not math.isfinite(value):
        return "-"
    a = abs(value)
    suffix = ""
    for limit, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= limit:
            value, a, suffix = value / limit, a / limit, suf
            break
    if a >= 100 or (suffix and a >= 10) or a == 0:
        text = f"{value:.0f}"
    elif a >= 10 or suffix:
        text = f"{value:.1f}"
    elif a >= 1:
        text = f"{value:.2f}".rstrip("0")
    else:
        text = f"{value:.2f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".") if a >= 1 else text
    return (text if text != "-0" else "0") + suffix


def clean(points: Sequence[tuple[float | None, float | None]]) -> list[Point]:
    """The points with a finite x and y, as floats (None, NaN and inf dropped)."""
    out: list[Point] = []
    for x, y in points:
        if x is None or y is None:
            continue
        fx, fy = float(x), float(y)
        if math.isfinite(fx) and math.isfinite(fy):
            out.append((fx, fy))
    return out


class CompactFormatter(NumericAxisFormatter):
    """Numeric ticks with labels of at most 5 characters (``compact``)."""

    def get_labels_for_ticks(self, ticks: Sequence[float]) -> list[str]:
        return [compact(t) for t in ticks]


class ClockFormatter(NumericAxisFormatter):
    """Seconds since the run began as m:ss (h:mm:ss past an hour)."""

    def get_labels_for_ticks(self, ticks: Sequence[float]) -> list[str]:
        out = []
        for t in ticks:
            s = max(0, round(t))
            h, rest = divmod(s, 3600)
            m, sec = divmod(rest, 60)
            out.append(f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}")
        return out


def _is_round(step: float) -> bool:
    mantissa = step / 10.0 ** math.floor(math.log10(step))
    return any(abs(mantissa - r) < 1e-6 for r in _ROUND_STEPS)


def even_ticks(top: float, rows: int) -> list[float]:
    """0 .. top in as many even, round steps (1, 2, 2.5 or 5 x 10^n) as the rows inside the plot allow."""
    if top <= 0:
        return [0.0]
    divisions = (4, 3, 2) if rows >= 10 else ((2, 3) if rows >= 5 else ())
    n = next((d for d in divisions if _is_round(top / d)), 1)
    return [top * i / n for i in range(n + 1)]


def spaced_ticks(lo: float, hi: float, width: int, label_w: int, steps: Sequence[float]) -> list[float]:
    """Ticks at multiples of the smallest step that leaves room for the labels across ``width`` cells."""
    span = hi - lo
    if span <= 0 or width <= 0:
        return []
    room = max(1, width // (label_w + 3))
    step = next((s for s in steps if span / s <= room), None)
    if step is None:
        step = steps[-1]
        while span / step > room:
            step *= 2
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    ticks = [round(k * step, 9) for k in range(first, last + 1)]
    # a label is centred on its tick: one within half a label of the right end would be cut off
    return [t for t in ticks if (hi - t) / span * width >= label_w / 2]


_TIME_STEPS = (1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600)


def _value_steps(span: float) -> list[float]:
    base = 10.0 ** math.floor(math.log10(span)) if span > 0 else 1.0
    return [base * m for m in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10)]


# --- the parts ------------------------------------------------------------------------------------------------


class _Canvas(Canvas):
    """A Canvas whose rows outside its buffer are blank in the widget's style.

    For one frame after a resize, textual-plot's canvases still hold their old (at first 1x1) buffers, and
    ``Canvas.render_line`` answers rows past it with an unstyled empty segment, on which Textual's NO_COLOR
    filter (``Monochrome``) raises. Blank rows in the widget's own style read the same and filter cleanly.
    """

    def render_line(self, y: int) -> Strip:
        if y >= self._canvas_size.height or not self._canvas_size.area:
            return Strip.blank(self.size.width, self.rich_style)
        return super().render_line(y)


class ChartPlot(PlotWidget, can_focus=False):
    """PlotWidget drawn inside its canvases' ``batch_refresh()``, with a "no data yet" for an empty chart."""

    DEFAULT_CSS = """
    ChartPlot { height: 1fr; }
    """

    def __init__(self, on_size: Callable[[], None]) -> None:
        super().__init__(allow_pan_and_zoom=False)
        self.empty = True
        self._on_size = on_size
        #: the y axis's title, written from the left edge of the top margin (textual-plot centres its y label on
        #: the tick labels' column, so a title longer than the left margin lost its start: "ean TPOT ms")
        self.y_title = ""

    def compose(self) -> ComposeResult:
        # PlotWidget.compose (textual-plot 0.10), with the canvases above
        with Grid():
            for canvas_id in ("margin-top", "margin-left", "plot", "margin-bottom"):
                yield _Canvas(1, 1, id=canvas_id)
        yield Legend(id="legend")

    def on_resize(self, event: Resize) -> None:
        self._on_size()  # the ticks and the tick count depend on the size

    def render(self) -> RenderResult:
        with ExitStack() as stack:
            for canvas in self.query(Canvas):
                stack.enter_context(canvas.batch_refresh())
            result = super().render()
            if self.y_title and self.margin_top > 0:
                top = self.query_one("#margin-top", Canvas)
                if top.size.width:
                    top.write_text(0, 0, f"[{self.get_component_rich_style('plot--label')}]{self.y_title}",
                                   TextAlign.LEFT)
            if self.empty:
                plot = self.query_one("#plot", Canvas)
                w, h = plot.size
                if w and h:
                    plot.write_text(w // 2, h // 2, f"[dim]{EMPTY_TEXT}", TextAlign.CENTER)
        return result


class ChartHeader(Widget):
    """The title and the legend, packed into as few lines as the width allows (the height changes only then)."""

    DEFAULT_CSS = """
    ChartHeader { height: 1; width: 1fr; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self) -> None:
        super().__init__()
        self._head: Text = Text()
        self._legends: list[list[Text]] = []
        self._lines: list[Text] = [Text()]
        self.max_lines = 2

    def show(self, head: Text, legends: list[list[Text]]) -> None:
        """The title, and the legend in forms from the fullest to the most compact: the first that fits in
        ``max_lines`` lines is shown (else the most compact, cut at the edge)."""
        self._head, self._legends = head, legends
        self._pack()
        self.refresh()

    def _pack(self) -> None:
        width = self.size.width or 80
        lines: list[Text] = [self._head]
        for items in self._legends or [[]]:
            lines = _pack(self._head, items, width)
            if len(lines) <= self.max_lines:
                break
        self._lines = lines[: self.max_lines]
        if self.styles.height is None or self.styles.height.value != len(self._lines):
            self.styles.height = len(self._lines)

    def on_resize(self, event: Resize) -> None:
        self._pack()

    def render(self) -> RenderResult:
        out = Text(no_wrap=True, overflow="ellipsis", end="")
        for i, line in enumerate(self._lines):
            if i:
                out.append("\n")
            out.append_text(line)
        return out


def _pack(head: Text, items: list[Text], width: int) -> list[Text]:
    lines: list[Text] = [head.copy()]
    for item in items:
        line = lines[-1]
        gap = 2 if line.cell_len else 0
        if line.cell_len and line.cell_len + gap + item.cell_len > width:
            lines.append(item.copy())
        else:
            line.append(" " * gap)
            line.append_text(item)
    return lines


def _legend_item(style: SeriesStyle, name: str, tail: str, *, glyph: str | None = None) -> Text:
    item = Text()
    item.append(glyph if glyph is not None else style.mark * 2, style=style.color)
    item.append(f" {name}")
    if tail:
        item.append(f" {tail}", style="bold")
    return item


class _Chart(Widget):
    """A header (title, legend) over a ChartPlot; subclasses turn their data into datasets in ``_push``."""

    def __init__(self, title: str, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.chart_title = title
        self.header = ChartHeader()
        self.plot = ChartPlot(on_size=self._push_if_mounted)

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.plot

    def on_mount(self) -> None:
        self._set_margins(0, 1)
        self.plot.margin_left = 6
        self._push()

    def _set_margins(self, top: int, bottom: int) -> None:
        plot = self.plot
        if (plot.margin_top, plot.margin_bottom) != (top, bottom):
            plot.margin_top, plot.margin_bottom = top, bottom
            plot.refresh(layout=True)  # textual-plot resizes its canvases only on a layout refresh

    def _fit_header(self) -> None:
        height = self.size.height
        self.header.max_lines = 1 if height < 8 else (2 if height < 20 else 3)

    def _push_if_mounted(self) -> None:
        if self.is_mounted:
            self._push()

    def _push(self) -> None:  # pragma: no cover - every chart defines it
        raise NotImplementedError

    def _plot_rows(self) -> int:
        """Rows inside the plot's frame (the plot less its tick row and its two border rows)."""
        return max(1, self.plot.size.height - self.plot.margin_top - self.plot.margin_bottom - 2)

    def _plot_cols(self) -> int:
        return max(1, self.plot.size.width - self.plot.margin_left - 2)

    def _set_limits(self, x_lo: float, x_hi: float, y_top: float) -> None:
        """x from ``x_lo`` to ``x_hi``, y from 0 to ``y_top``, with the ends *inside* the frame.

        textual-plot maps an axis's upper x and lower y onto the frame's border cells, where the frame then
        covers them: a value of 0 or the newest point would vanish. Widening the limits by a quarter cell (a
        braille dot) on those sides puts them on the last row and column inside; the ticks stay where they are.
        """
        cols, rows = self._plot_cols(), self._plot_rows()
        span = x_hi - x_lo
        self.plot.set_xlimits(x_lo, x_hi + span / (4 * cols - 1))
        self.plot.set_ylimits(-y_top / (8 * rows - 1), y_top * (1 + 1e-6))


class TimeSeriesChart(_Chart):
    """Live series over the last ``window_s`` seconds ending at ``now``; a legend with each newest value."""

    DEFAULT_CSS = """
    TimeSeriesChart { layout: vertical; height: 1fr; min-height: 6; }
    """

    def __init__(self, title: str, unit: str, *, window_s: float = 60.0, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(title, id=id, classes=classes)
        if not window_s > 0:
            raise ValueError(f"window_s must be above 0, got {window_s!r}")
        self.unit = unit
        self.window_s = float(window_s)
        self._series: dict[str, list[Point]] = {}
        self._now: float | None = None
        self.y_max: float | None = None

    def set_series(self, series: Mapping[str, Sequence[tuple[float, float]]], now: float | None = None) -> None:
        """Replace every series: points are (seconds since the run began, value); x ends at ``now`` (default:
        the newest point). Stores the data and asks for a refresh; the chart is drawn once per frame."""
        self._series = {name: sorted(clean(points)) for name, points in series.items()}
        self._now = now
        if self.is_mounted:
            self._push()

    def _push(self) -> None:
        plot = self.plot
        now = self._now
        if now is None:
            now = max((pts[-1][0] for pts in self._series.values() if pts), default=self.window_s)
        # a run younger than the window fills it from the left (no negative times); then the window slides
        lo, hi = (0.0, self.window_s) if now < self.window_s else (now - self.window_s, now)
        shown: list[tuple[str, SeriesStyle, list[Point]]] = []
        for i, (name, pts) in enumerate(self._series.items()):
            # the window, plus the last point before it so the line enters from the left edge
            start = next((k for k, p in enumerate(pts) if p[0] >= lo), len(pts))
            window = [p for p in pts[max(0, start - 1):] if p[0] <= now]
            shown.append((name, LINE_STYLES[i % len(LINE_STYLES)], window))
        in_view = [y for _, _, w in shown for x, y in w if x >= lo]
        self.y_max = stepped_max(self.y_max, max(in_view, default=0.0))

        plot.clear()
        for _, style, window in shown:
            _draw_series(plot, style, window)
        plot.empty = not in_view
        self._set_limits(lo, hi, self.y_max)
        plot.set_x_formatter(ClockFormatter())
        plot.set_xticks(spaced_ticks(lo, hi, self._plot_cols(), 5, _TIME_STEPS))
        plot.set_y_formatter(CompactFormatter())
        plot.set_yticks(even_ticks(self.y_max, self._plot_rows()))

        head = Text(self.chart_title, style="bold")
        head.append(f" ({self.unit})" if self.unit else "")
        full, short = [], []
        for name, style, _ in shown:
            last = self._series[name][-1][1] if self._series[name] else None
            value = "-" if last is None else compact(last)
            full.append(_legend_item(style, name, f"{value} {self.unit}".strip() if last is not None else value))
            short.append(_legend_item(style, name, value, glyph=style.mark))
        self._fit_header()
        self.header.show(head, [full, short])


class XYChart(_Chart):
    """One curve per series (a topology): points joined in x order, a mark at each; axes from 0."""

    DEFAULT_CSS = """
    XYChart { layout: vertical; height: 1fr; min-height: 6; }
    """

    def __init__(self, title: str, x_label: str, y_label: str, *, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(title, id=id, classes=classes)
        self.x_label = x_label
        self.y_label = y_label
        self._series: dict[str, list[Point]] = {}
        self.x_max: float | None = None
        self.y_max: float | None = None

    def set_series(self, series: Mapping[str, Sequence[tuple[float, float]]]) -> None:
        """Replace every curve; stores the data and asks for a refresh (drawn once per frame)."""
        self._series = {name: sorted(clean(points)) for name, points in series.items()}
        if self.is_mounted:
            self._push()

    def _push(self) -> None:
        plot = self.plot
        xs = [x for pts in self._series.values() for x, _ in pts]
        ys = [y for pts in self._series.values() for _, y in pts]
        self.x_max = stepped_max(self.x_max, max(xs, default=0.0))
        self.y_max = stepped_max(self.y_max, max(ys, default=0.0))
        plot.clear()
        items: list[Text] = []
        short: list[Text] = []
        styled = [(name, XY_STYLES[i % len(XY_STYLES)], pts) for i, (name, pts) in enumerate(self._series.items())]
        for _, style, pts in styled:  # every line first, then every mark: no curve hides another's points
            if len(pts) > 1:
                _line(plot, style, pts)
        for name, style, pts in styled:
            if pts:
                plot.scatter([p[0] for p in pts], [p[1] for p in pts], marker=style.mark, marker_style=style.color)
            items.append(_legend_item(style, name, "", glyph=f"─{style.mark}─"))
            short.append(_legend_item(style, name, "", glyph=style.mark))
        plot.empty = not xs
        roomy = self.plot.size.height >= 14
        self._set_margins(1 if roomy else 0, 3 if roomy else 1)
        plot.set_xlabel(self.x_label if roomy else "")
        plot.y_title = self.y_label if roomy else ""
        self._set_limits(0.0, self.x_max, self.y_max)
        plot.set_x_formatter(CompactFormatter())
        plot.set_xticks(spaced_ticks(0.0, self.x_max, self._plot_cols(), 5, _value_steps(self.x_max)))
        plot.set_y_formatter(CompactFormatter())
        plot.set_yticks(even_ticks(self.y_max, self._plot_rows()))
        head = Text(self.chart_title, style="bold")
        if not roomy:  # no room for the axis labels: they follow the legend
            axes = Text(f"{self.y_label} vs {self.x_label}", style="dim")
            items.append(axes)
            short.append(axes)
        self._fit_header()
        self.header.show(head, [items, short])


def _line(plot: PlotWidget, style: SeriesStyle, pts: list[Point]) -> None:
    plot.plot([p[0] for p in pts], [p[1] for p in pts], line_style=style.color, hires_mode=style.hires)


def _draw_series(plot: PlotWidget, style: SeriesStyle, pts: list[Point]) -> None:
    if not pts:
        return
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    if style.hires is None:
        plot.scatter(xs, ys, marker=style.mark, marker_style=style.color)
    elif len(pts) == 1:
        plot.scatter(xs, ys, marker_style=style.color, hires_mode=style.hires)
    else:
        plot.plot(xs, ys, line_style=style.color, hires_mode=style.hires)


# --- bars -----------------------------------------------------------------------------------------------------

#: a bar's end in eighths of a cell
_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar_text(value: float, top: float, width: int) -> str:
    """``value`` of ``top`` as a bar ``width`` cells long at most, to an eighth of a cell."""
    if not (math.isfinite(value) and top > 0 and width > 0) or value <= 0:
        return ""
    eighths = min(width * 8, round(value / top * width * 8))
    full, part = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[part] if part else "")


def figure_text(value: float) -> str:
    """A bar's figure: 13,391 · 65.2 · 1.24 · 0.25."""
    if not math.isfinite(value):
        return "-"
    a = abs(value)
    return f"{value:,.0f}" if a >= 100 else (f"{value:.1f}" if a >= 10 else f"{value:.2f}")


class BarChart(Widget):
    """Groups of horizontal bars, one per value (a knob's values side by side, per topology and workload): each
    bar's value named at its left and its figure at its right, ★ the best of its group; every group on one scale
    from 0 (a rounded maximum, as the other charts' y axes). The value names label the bars, so colour (the same
    colour for a value in every group) only helps: it reads on a 16-colour terminal and under NO_COLOR.

    Horizontal bars in text rather than textual-plot's vertical ``bar``: a group's label (``tp1 · decode-heavy ·
    mnbt=2048``) is longer than the few cells a vertical bar's tick has, and a name beside each bar needs no
    legend. ``set_groups`` stores the data and asks for a refresh; the lines are made for the width at render."""

    DEFAULT_CSS = """
    BarChart { layout: vertical; height: 1fr; min-height: 4; }
    BarChart > .bars { height: 1fr; scrollbar-size-vertical: 1; }
    BarChart > .bars > Static { width: 1fr; height: auto; }
    """

    def __init__(self, title: str, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.chart_title = title
        self.header = ChartHeader()
        self._head: Text = Text(title, style="bold")
        self._legend: list[Text] = []
        self._groups: list[tuple[str, list[tuple[str, float, bool, str]]]] = []
        self._unit = ""
        self.top: float | None = None

    def compose(self) -> ComposeResult:
        yield self.header
        with VerticalScroll(classes="bars", can_focus=False):
            yield Static(id="bars-text")

    def on_mount(self) -> None:
        self._push()

    def on_resize(self, event: Resize) -> None:
        self._push()

    def set_groups(self, head: Text, groups: Sequence[tuple[str, Sequence[tuple[str, float, bool, str]]]],
                   unit: str = "", legend: Sequence[Text] = ()) -> None:
        """``groups``: (label, bars) where a bar is (its name, its figure, the best of its group, a flag shown
        beside it); ``head`` the title line, ``legend`` what follows it (the keys that change the chart)."""
        self._head = head
        self._legend = list(legend)
        self._groups = [(label, list(bars)) for label, bars in groups]
        self._unit = unit
        if self.is_mounted:
            self._push()

    def lines(self, width: int) -> Text:
        """The chart's lines for ``width`` cells (what is drawn)."""
        out = Text(no_wrap=True, overflow="ellipsis", end="")
        if not self._groups:
            out.append(EMPTY_TEXT, style="dim")
            return out
        names = list(dict.fromkeys(n for _, bars in self._groups for n, _, _, _ in bars))
        colour = {n: XY_STYLES[i % len(XY_STYLES)].color for i, n in enumerate(names)}
        name_w = min(max(len(n) for n in names), 16)
        self.top = nice_ceil(max((v for _, bars in self._groups for _, v, _, _ in bars), default=0.0))
        figure_w = max(len(figure_text(v)) for _, bars in self._groups for _, v, _, _ in bars)
        flags = list(dict.fromkeys(f for _, bars in self._groups for _, _, _, f in bars if f))
        flag_w = max((len(f) + 4 for f in flags), default=0)
        room = width - 2 - name_w - 1 - 1 - figure_w - 2
        short = bool(flags) and room - flag_w < 12  # no room for a flag's words: ▲ beside the bar, words below
        room = max(4, room - (3 if short else flag_w))
        for i, (label, bars) in enumerate(self._groups):
            if i:
                out.append("\n")
            out.append(label, style="bold")
            for name, value, best, flag in bars:
                out.append("\n  ")
                out.append(f"{name[:name_w]:<{name_w}} ", style="bold" if best else "")
                bar = bar_text(value, self.top, room)
                out.append(bar, style=colour[name])
                out.append(" " * (room - len(bar) + 1))
                out.append(f"{figure_text(value):>{figure_w}}", style="bold green" if best else "")
                out.append(" ★" if best else "  ", style="bold green")
                if flag:
                    out.append(" ▲" if short else f"  ▲ {flag}", style="yellow")
        if short:
            out.append(f"\n▲ {', '.join(flags)} (the table's flags)", style="yellow")
        return out

    def _push(self) -> None:
        width = self.size.width or 80
        self.query_one("#bars-text", Static).update(self.lines(width - 1))
        self.header.max_lines = 2
        self.header.show(self._head, [self._legend, self._legend[-1:]])
