"""Interim charts (the console's chart widgets land from the charts branch): the newest values as sparklines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text
from textual.widgets import Static

from tui.console import fmt


class TimeSeriesChart(Static):
    DEFAULT_CSS = "TimeSeriesChart { height: 1fr; border: round $panel; }"

    def __init__(self, title: str, unit: str, *, window_s: float = 60.0, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = title
        self.unit = unit
        self.window_s = window_s

    def set_series(self, series: Mapping[str, Sequence[tuple[float, float]]], now: float | None = None) -> None:
        width = max((self.size.width or 40) - 20, 8)
        t = Text()
        for name, pts in series.items():
            vals = [v for _, v in pts]
            if t:
                t.append("\n")
            t.append(f"{name:<4} ")
            if vals:
                t.append(fmt.sparkline(vals, width, top=max(vals) or 1.0), style=fmt.BUSY)
                t.append(f" {vals[-1]:,.1f} {self.unit}")
            else:
                t.append("no data yet", style=fmt.DIM)
        self.update(t)


class XYChart(Static):
    DEFAULT_CSS = "XYChart { height: 1fr; border: round $panel; }"

    def __init__(self, title: str, x_label: str, y_label: str, *, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = title
        self.x_label, self.y_label = x_label, y_label

    def set_series(self, series: Mapping[str, Sequence[tuple[float, float]]]) -> None:
        if not series:
            self.update(Text("no rate sweep stored (campaign with rates: auto)", style=fmt.DIM))
            return
        t = Text()
        for name, pts in series.items():
            t.append(f"{name}: " + "  ".join(f"{x:,.0f}→{y:.1f}" for x, y in pts) + "\n")
        self.update(t)
