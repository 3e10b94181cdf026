"""Tiny apps around the chart widgets with fixed data, for the chart tests and their snapshots."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from textual.app import App, ComposeResult

from tui.console.widgets.charts import TimeSeriesChart, XYChart

NOW = 185.0


def live_series(now: float = NOW, rate_hz: float = 4.0, window_s: float = 60.0) -> dict[str, list[tuple[float, float]]]:
    """Four bench series over the last ``window_s`` seconds at ``rate_hz``: fixed waves, nothing random."""
    n = int(window_s * rate_hz)
    ts = [now - window_s + (i + 1) / rate_hz for i in range(n)]
    return {
        "prefill": [(t, 1800 + 900 * math.sin(t / 7.0)) for t in ts],
        "decode": [(t, 1200 + 500 * math.sin(t / 11.0 + 1.0)) for t in ts],
        "1P1D": [(t, 2600 + 300 * math.sin(t / 5.0 + 2.0)) for t in ts],
        "TP2": [(t, 400 + 350 * (1 + math.sin(t / 3.0))) for t in ts],
    }


CURVES: dict[str, list[tuple[float, float]]] = {
    "TP2": [(800.0, 21.0), (2400.0, 24.0), (5200.0, 33.0), (7600.0, 52.0), (8900.0, 88.0)],
    "DP2": [(1000.0, 18.0), (3100.0, 20.0), (6400.0, 27.0), (9800.0, 41.0), (11900.0, 76.0)],
    "1P1D": [(700.0, 16.0), (2600.0, 17.0), (5900.0, 19.0), (8800.0, 24.0), (10400.0, 39.0)],
}


class TimeSeriesApp(App[None]):
    """One TimeSeriesChart filling the screen."""

    def __init__(self, series: Mapping[str, Sequence[tuple[float, float]]] | None = None,
                 now: float | None = NOW, *, title: str = "Throughput", unit: str = "tok/s",
                 window_s: float = 60.0) -> None:
        super().__init__()
        self._series = live_series() if series is None else series
        self._now = now
        self.chart = TimeSeriesChart(title, unit, window_s=window_s, id="chart")

    def compose(self) -> ComposeResult:
        yield self.chart

    def on_mount(self) -> None:
        self.chart.set_series(self._series, now=self._now)


class XYApp(App[None]):
    """One XYChart filling the screen."""

    def __init__(self, series: Mapping[str, Sequence[tuple[float, float]]] | None = None) -> None:
        super().__init__()
        self._series = CURVES if series is None else series
        self.chart = XYChart("Latency vs throughput", "output tok/s", "TPOT ms", id="chart")

    def compose(self) -> ComposeResult:
        yield self.chart

    def on_mount(self) -> None:
        self.chart.set_series(self._series)


if __name__ == "__main__":
    import sys

    (XYApp() if sys.argv[1:] == ["xy"] else TimeSeriesApp()).run()
