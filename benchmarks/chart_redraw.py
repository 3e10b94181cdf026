"""Redraw cost of one frame of the bench screen's chart, per chart library.

The chart: 4 series x 240 points (a 60 s window at 4 Hz), all replaced every frame (the window slides by one
sample), drawn at 120x20 and 60x10 cells. Candidates:

- ``braille`` (reference): a small in-house braille line renderer on Textual's line API (what we would write
  ourselves: dots in a bytearray per cell, Bresenham between samples, one Strip per row, a y/x tick margin);
- ``textual-plot``: ``PlotWidget`` (textual-plot on textual-hires-canvas), BRAILLE lines, fixed limits;
- ``textual-plot+batch``: the same, drawn inside each canvas's ``batch_refresh()`` (one refresh per canvas per
  frame instead of one per changed cell);
- ``textual-plotext``: ``PlotextPlot`` (plotext), braille markers, fixed limits;
- ``TimeSeriesChart``: the console's chart as built on the pick (tui/console/widgets/charts.py), legend included.

Each candidate runs alone in a headless Textual app (``App.run_test(size=...)``) with the chart filling the
screen. One frame is what the terminal would cost: give the widget the new data through its own API (which
stores it and calls ``refresh()``), then do what the screen's update timer does (compositor ``render_update``,
which calls the widgets' ``render``/``render_line`` and builds the Strips), then turn the update into the ANSI
text the driver would write (``render_segments``; the headless driver skips that step, so it is done here).
That is a full-screen update; the chart covers the whole screen, so a partial update would be the same.

Time is this thread's CPU time (``time.thread_time()``), not wall time: the machine is shared, and another
process's turn on the core is no cost of ours.

Memory growth: RSS and ``sys.getallocatedblocks()`` after the warm-up versus after the last of ``--frames``
frames at 120x20 (a leak of the per-frame objects would show in both).

    python benchmarks/chart_redraw.py [--frames 2000] [--small-frames 500] [--only braille,textual-plot]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import statistics
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from rich.segment import Segment
from rich.style import Style
from textual.app import App, ComposeResult
from textual.strip import Strip
from textual.widget import Widget

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SERIES = 4
POINTS = 240
RATE_HZ = 4.0
WINDOW_S = POINTS / RATE_HZ
Y_MAX = 100.0
STYLES = ("cyan", "magenta", "yellow", "green")
SIZES = ((120, 20), (60, 10))

Points = list[tuple[list[float], list[float]]]


def make_frames(count: int) -> list[tuple[float, Points]]:
    """Deterministic data for ``count`` frames: each frame is the newest 240 samples of 4 slow waves."""
    total = count + POINTS
    t = [i / RATE_HZ for i in range(total)]
    values = [[50 + 40 * math.sin(0.05 * i * (k + 1) + k) + 5 * math.sin(1.3 * i + k) for i in range(total)]
              for k in range(SERIES)]
    frames: list[tuple[float, Points]] = []
    for f in range(count):
        window = [(t[f:f + POINTS], values[k][f:f + POINTS]) for k in range(SERIES)]
        frames.append((t[f + POINTS - 1], window))
    return frames


# --- the reference: a small in-house braille renderer -----------------------------------------------------------

_DOT_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))  # [row in cell][column in cell]


class BrailleLines(Widget):
    """Braille lines on the line API: dots per cell in a bytearray, one Strip per row, a small tick margin."""

    DEFAULT_CSS = "BrailleLines { width: 1fr; height: 1fr; }"
    LEFT = 6

    def __init__(self) -> None:
        super().__init__()
        self._series: Points = []
        self._x_range = (0.0, 1.0)
        self._y_max = 1.0
        self._rows: list[Strip] = []
        self._drawn_for: tuple[int, int, int] | None = None
        self._version = 0
        self._styles = [Style.parse(s) for s in STYLES]
        self._axis = Style.parse("bright_black")

    def set_data(self, series: Points, x_range: tuple[float, float], y_max: float) -> None:
        self._series = series
        self._x_range = x_range
        self._y_max = y_max
        self._version += 1
        self.refresh()

    def _draw(self) -> None:
        width, height = self.size
        plot_w, plot_h = max(1, width - self.LEFT), max(1, height - 1)
        dots_w, dots_h = plot_w * 2, plot_h * 4
        bits = bytearray(plot_w * plot_h)
        owner = bytearray(plot_w * plot_h)
        x0, x1 = self._x_range
        sx = (dots_w - 1) / (x1 - x0)
        sy = (dots_h - 1) / self._y_max
        for k, (xs, ys) in enumerate(self._series):
            prev: tuple[int, int] | None = None
            for x, y in zip(xs, ys, strict=True):
                px = round((x - x0) * sx)
                py = dots_h - 1 - round(min(max(y, 0.0), self._y_max) * sy)
                pts = [(px, py)] if prev is None else _line(prev[0], prev[1], px, py)
                for dx, dy in pts:
                    if 0 <= dx < dots_w and 0 <= dy < dots_h:
                        cell = (dy >> 2) * plot_w + (dx >> 1)
                        bits[cell] |= _DOT_BITS[dy & 3][dx & 1]
                        owner[cell] = k
                prev = (px, py)
        rows: list[Strip] = []
        top = f"{self._y_max:>{self.LEFT - 1}.0f}┤"
        blank_margin = " " * (self.LEFT - 1) + "│"
        for r in range(plot_h):
            margin = top if r == 0 else (f"{0:>{self.LEFT - 1}}┤" if r == plot_h - 1 else blank_margin)
            segments = [Segment(margin, self._axis)]
            run: list[str] = []
            run_style: Style | None = None
            base = r * plot_w
            for c in range(plot_w):
                b = bits[base + c]
                style = self._styles[owner[base + c]] if b else None
                if style is not run_style and run:
                    segments.append(Segment("".join(run), run_style))
                    run = []
                run_style = style
                run.append(chr(0x2800 + b) if b else " ")
            if run:
                segments.append(Segment("".join(run), run_style))
            rows.append(Strip(segments, width))
        ticks = f"{'':{self.LEFT}}{x0:<10.0f}{x1:>{max(0, plot_w - 10)}.0f}"
        rows.append(Strip([Segment(ticks[:width].ljust(width), self._axis)], width))
        self._rows = rows

    def render_line(self, y: int) -> Strip:
        key = (self.size.width, self.size.height, self._version)
        if key != self._drawn_for:
            self._draw()
            self._drawn_for = key
        return self._rows[y] if y < len(self._rows) else Strip.blank(self.size.width)


def _line(x0: int, y0: int, x1: int, y1: int) -> list[tuple[int, int]]:
    """Bresenham from (x0, y0) to (x1, y1), excluding the start (drawn by the previous segment)."""
    dx, dy = abs(x1 - x0), -abs(y1 - y0)
    step_x, step_y = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
    err = dx + dy
    out = []
    while (x0, y0) != (x1, y1):
        e2 = 2 * err
        if e2 >= dy:
            err += dy
            x0 += step_x
        if e2 <= dx:
            err += dx
            y0 += step_y
        out.append((x0, y0))
    return out


# --- the candidates: how each is built and given one frame's data ----------------------------------------------

Candidate = tuple[Callable[[], Widget], Callable[[Widget, float, Points], None]]


def _braille() -> Candidate:
    def feed(w: Widget, now: float, data: Points) -> None:
        assert isinstance(w, BrailleLines)
        w.set_data(data, (now - WINDOW_S, now), Y_MAX)

    return BrailleLines, feed


def _textual_plot() -> Candidate:
    from textual_plot import HiResMode, PlotWidget

    def make() -> Widget:
        return PlotWidget(allow_pan_and_zoom=False)

    def feed(w: Widget, now: float, data: Points) -> None:
        assert isinstance(w, PlotWidget)
        w.clear()
        for k, (xs, ys) in enumerate(data):
            w.plot(xs, ys, line_style=STYLES[k], hires_mode=HiResMode.BRAILLE, label=f"s{k}")
        w.set_xlimits(now - WINDOW_S, now)
        w.set_ylimits(0.0, Y_MAX)

    return make, feed


def _textual_plot_batched() -> Candidate:
    """textual-plot drawing inside the canvases' ``batch_refresh()``: one ``refresh()`` per canvas per frame
    instead of one per changed cell (how the console's chart widgets use it)."""
    from contextlib import ExitStack

    from textual.app import RenderResult
    from textual_hires_canvas import Canvas
    from textual_plot import PlotWidget

    class BatchedPlot(PlotWidget):
        def render(self) -> RenderResult:
            with ExitStack() as stack:
                for canvas in self.query(Canvas):
                    stack.enter_context(canvas.batch_refresh())
                return super().render()

    _, feed = _textual_plot()
    return (lambda: BatchedPlot(allow_pan_and_zoom=False)), feed


def _console_chart() -> Candidate:
    """The console's TimeSeriesChart (tui/console/widgets/charts.py: textual-plot, batched, with its legend)."""
    from tui.console.widgets.charts import TimeSeriesChart

    def feed(w: Widget, now: float, data: Points) -> None:
        assert isinstance(w, TimeSeriesChart)
        w.set_series({f"s{k}": list(zip(xs, ys, strict=True)) for k, (xs, ys) in enumerate(data)}, now=now)

    return (lambda: TimeSeriesChart("bench", "tok/s", window_s=WINDOW_S)), feed


def _textual_plotext() -> Candidate:
    from textual_plotext import PlotextPlot

    def feed(w: Widget, now: float, data: Points) -> None:
        assert isinstance(w, PlotextPlot)
        plt = w.plt
        plt.clear_data()
        for k, (xs, ys) in enumerate(data):
            plt.plot(xs, ys, marker="braille", color=STYLES[k], label=f"s{k}")
        plt.xlim(now - WINDOW_S, now)
        plt.ylim(0.0, Y_MAX)
        w.refresh()

    return PlotextPlot, feed


CANDIDATES: dict[str, Callable[[], Candidate]] = {
    "braille": _braille,
    "textual-plot": _textual_plot,
    "textual-plot+batch": _textual_plot_batched,
    "textual-plotext": _textual_plotext,
    "TimeSeriesChart": _console_chart,
}


class ChartApp(App[None]):
    CSS = "Screen { layout: vertical; }"

    def __init__(self, make: Callable[[], Widget]) -> None:
        super().__init__()
        self._make = make
        self.chart: Widget | None = None

    def compose(self) -> ComposeResult:
        self.chart = self._make()
        yield self.chart


def frame_cost(app: ChartApp) -> Callable[[], int]:
    """One terminal frame of the current screen, as the screen's update timer does it, plus the ANSI text."""
    screen = app.screen
    console = app.console

    def frame() -> int:
        update = screen._compositor.render_update(full=True, screen_stack=app._background_screens)
        return len(update.render_segments(console))

    return frame


async def measure(name: str, size: tuple[int, int], frames: list[tuple[float, Points]],
                  warmup: int) -> dict[str, Any]:
    make, feed = CANDIDATES[name]()
    app = ChartApp(make)
    proc = psutil.Process()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        chart = app.chart
        assert chart is not None
        frame = frame_cost(app)
        times = array("d", bytes(8 * len(frames)))  # preallocated: the harness itself allocates nothing per frame
        out_chars = 0
        rss0 = blocks0 = 0
        gc.collect()
        for i, (now, data) in enumerate(frames):
            if i == warmup:
                gc.collect()
                rss0, blocks0 = proc.memory_info().rss, sys.getallocatedblocks()
            t0 = time.thread_time()
            feed(chart, now, data)
            out_chars = frame()
            times[i] = time.thread_time() - t0
            if i % 50 == 0:
                await asyncio.sleep(0)  # let the app's own messages (refresh bookkeeping) run, off the clock
        gc.collect()
        rss1, blocks1 = proc.memory_info().rss, sys.getallocatedblocks()
        await pilot.pause()
    timed = sorted(times[warmup:])
    return {
        "p50": statistics.median(timed) * 1e3,
        "p99": timed[min(len(timed) - 1, int(len(timed) * 0.99))] * 1e3,
        "rss_kib": (rss1 - rss0) / 1024,
        "blocks": blocks1 - blocks0,
        "frames": len(timed),
        "chars": out_chars,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=2000, help="frames at 120x20 (memory growth is over these)")
    parser.add_argument("--small-frames", type=int, default=500, help="frames at 60x10")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--only", default=",".join(CANDIDATES), help="comma-separated candidates")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    counts = {SIZES[0]: args.frames + args.warmup, SIZES[1]: args.small_frames + args.warmup}
    data = make_frames(max(counts.values()))
    results: dict[tuple[str, tuple[int, int]], dict[str, Any]] = {}
    for size in SIZES:
        for name in names:
            results[name, size] = await measure(name, size, data[:counts[size]], args.warmup)
            r = results[name, size]
            print(f"  {name:<18} {size[0]}x{size[1]}: p50 {r['p50']:.2f} ms over {r['frames']} frames",
                  file=sys.stderr)

    ref = "braille"
    print(f"\nCPU ms per frame = new data for {SERIES} series x {POINTS} points + compositor update + ANSI text "
          f"(Python {sys.version.split()[0]}, {psutil.cpu_count()} CPUs)\n")
    head = (f"{'candidate':<18} {'120x20 p50':>10} {'p99':>7} {'ratio':>6}   {'60x10 p50':>9} {'p99':>7} "
            f"{'ratio':>6}   {'RSS growth':>10} {'blocks':>8}  (over {args.frames} frames at 120x20)")
    print(head)
    print("-" * len(head))
    for name in names:
        big, small = results[name, SIZES[0]], results[name, SIZES[1]]
        cells = []
        for r, size in ((big, SIZES[0]), (small, SIZES[1])):
            base = results.get((ref, size))
            ratio = f"{r['p50'] / base['p50']:.1f}x" if base else "-"
            cells.append(f"{r['p50']:>9.2f}ms {r['p99']:>5.2f}ms {ratio:>6}")
        print(f"{name:<18} {cells[0]}   {cells[1]}   {big['rss_kib']:>7.0f}KiB {big['blocks']:>+8d}")
    print("\nratio: p50 against the in-house braille renderer at the same size; budget: 10 ms per frame at 4 Hz")


if __name__ == "__main__":
    asyncio.run(main())
