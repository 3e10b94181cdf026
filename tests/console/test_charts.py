"""The console's charts: what they draw (legend, where points land), resizing, bad and scarce data, snapshots."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.console.chart_apps import NOW, TimeSeriesApp, XYApp, live_series
from tui.console.widgets.charts import (
    EMPTY_TEXT,
    compact,
    even_ticks,
    nice_ceil,
    spaced_ticks,
    stepped_max,
)

APPS = Path(__file__).parent / "chart_apps.py"


def screen_text(app: TimeSeriesApp | XYApp) -> list[str]:
    """The screen as the terminal would show it, one string per row."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def is_braille(ch: str) -> bool:
    return 0x2801 <= ord(ch) <= 0x28FF


def frame_rows(lines: list[str]) -> tuple[int, int]:
    """The rows of the plot frame's top and bottom borders."""
    rows = [i for i, line in enumerate(lines) if "━" in line]
    return rows[0], rows[-1]


def steady(value: float, now: float = NOW, window_s: float = 60.0) -> list[tuple[float, float]]:
    return [(now - window_s + i / 4, value) for i in range(1, int(window_s * 4) + 1)]


# --- the numbers behind the axes -----------------------------------------------------------------------------


def test_axis_maxima_are_round_and_step() -> None:
    assert [nice_ceil(v) for v in (0, -3, 0.7, 1, 1.01, 2.9, 7, 88, 1190, math.nan)] == [
        1, 1, 0.8, 1, 1.5, 3, 8, 100, 1500, 1]
    assert stepped_max(None, 88) == 100
    assert stepped_max(100, 95) == 100  # no jump while the data moves about under the maximum
    assert stepped_max(100, 45) == 100  # nor when it falls, until it is under 40 % of it
    assert stepped_max(100, 39) == 40
    assert stepped_max(100, 101) == 150  # and at once when it rises over it


def test_ticks_are_round_and_fit() -> None:
    assert even_ticks(100, 12) == [0, 25, 50, 75, 100]
    assert even_ticks(3000, 12) == [0, 1000, 2000, 3000]
    assert even_ticks(100, 6) == [0, 50, 100]
    assert even_ticks(100, 3) == [0, 100]
    assert spaced_ticks(125, 185, 72, 5, (5, 10, 15, 20, 30, 60)) == [130, 140, 150, 160, 170, 180]
    assert spaced_ticks(125, 185, 30, 5, (5, 10, 15, 20, 30, 60)) == [140, 160, 180]
    assert [compact(v) for v in (0, 0.25, 1.5, 12.34, 850, 1234, 12_500, 3_400_000)] == [
        "0", "0.25", "1.5", "12.3", "850", "1.2k", "12k", "3.4M"]


# --- TimeSeriesChart -----------------------------------------------------------------------------------------


async def test_time_series_legend_has_newest_values_and_unit() -> None:
    series = {"prefill": [*steady(1000.0)[:-1], (NOW, 1234.0)], "decode": steady(40.0)}
    app = TimeSeriesApp(series)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = "\n".join(screen_text(app))
        assert "Throughput (tok/s)" in text
        assert "prefill 1.2k tok/s" in text
        assert "decode 40 tok/s" in text
        assert EMPTY_TEXT not in text


async def test_a_series_at_the_maximum_draws_in_the_top_row_and_zero_in_the_bottom_row() -> None:
    app = TimeSeriesApp({"top": steady(100.0)})
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        lines = screen_text(app)
        top, bottom = frame_rows(lines)
        assert app.chart.y_max == 100
        assert lines[top + 1].lstrip().startswith("100 ")  # the maximum's tick is the first row inside
        inside = lines[top + 1:bottom]
        assert sum(is_braille(c) for c in inside[0]) >= 70  # the whole width, in the top row only
        assert not any(is_braille(c) for line in inside[1:] for c in line)

        app.chart.set_series({"zero": steady(0.0)})
        await pilot.pause()
        lines = screen_text(app)
        top, bottom = frame_rows(lines)
        inside = lines[top + 1:bottom]
        assert sum(is_braille(c) for c in inside[-1]) >= 70  # 0 is drawn above the axis, not under it
        assert not any(is_braille(c) for line in inside[:-1] for c in line)


async def test_the_x_axis_is_the_window_ending_at_now() -> None:
    # a point before the window is not drawn; one at the window's start is in the first column, now in the last
    series = {"s": [(NOW - 120.0, 50.0), (NOW - 60.0, 100.0), (NOW - 59.9, 100.0), (NOW, 100.0)]}
    app = TimeSeriesApp(series)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        lines = screen_text(app)
        top, _ = frame_rows(lines)
        row = lines[top + 1]
        left = row.index("┫") + 1 if "┫" in row else row.index("┃") + 1
        assert is_braille(row[left])
        assert is_braille(row[row.rindex("┣") - 1])
        assert "2:10" in lines[-1] and "3:00" in lines[-1]


async def test_each_series_has_its_own_texture_for_no_color_terminals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    series = {"a": steady(90.0), "b": steady(60.0), "c": steady(30.0), "d": steady(5.0)}
    app = TimeSeriesApp(series)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        lines = screen_text(app)
        top, bottom = frame_rows(lines)
        inside = "".join(lines[top + 1:bottom])
        assert any(is_braille(c) for c in inside)  # a: braille line
        assert "+" in inside  # b: + marks
        assert "▀" in inside or "▄" in inside  # c: half-block line
        assert "x" in inside  # d: x marks
        legend = "\n".join(lines[:top])
        for glyph, name in (("⠤", "a"), ("+", "b"), ("▀", "c"), ("x", "d")):
            assert f"{glyph} {name} " in legend or f"{glyph}{glyph} {name} " in legend


async def test_empty_none_nan_and_a_single_point() -> None:
    app = TimeSeriesApp({}, now=None)
    async with app.run_test(size=(60, 16)) as pilot:
        await pilot.pause()
        assert any(EMPTY_TEXT in line for line in screen_text(app))

        app.chart.set_series({"gaps": [(NOW - 2, None), (NOW - 1, math.nan), (None, 3.0), (NOW, math.inf)]}, now=NOW)
        await pilot.pause()
        text = "\n".join(screen_text(app))
        assert EMPTY_TEXT in text and "gaps -" in text

        app.chart.set_series({"one": [(NOW, 42.0)]}, now=NOW)
        await pilot.pause()
        lines = screen_text(app)
        assert EMPTY_TEXT not in "\n".join(lines)
        assert "one 42 tok/s" in "\n".join(lines)
        top, bottom = frame_rows(lines)
        assert sum(is_braille(c) for line in lines[top + 1:bottom] for c in line) == 1

        app.chart.set_series({"none": []})  # now=None and no point: the window ends at window_s
        await pilot.pause()
        assert any(EMPTY_TEXT in line for line in screen_text(app))


async def test_resizes_and_stays_readable_at_38_by_8() -> None:
    app = TimeSeriesApp()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        for size in ((38, 8), (80, 24), (20, 6), (160, 48)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            lines = screen_text(app)
            assert len(lines) == size[1] and all(len(line) == size[0] for line in lines)
        await pilot.resize_terminal(38, 8)
        await pilot.pause()
        lines = screen_text(app)
        top, bottom = frame_rows(lines)
        assert bottom - top - 1 >= 3  # three rows of plot (twelve braille dots) under a two-line header
        assert "prefill" in lines[0] + lines[1] and "TP2" in lines[0] + lines[1]
        assert "3:00" in lines[-1]


async def test_redraw_is_coalesced_to_one_draw_per_frame() -> None:
    app = TimeSeriesApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        draws = 0
        plot = app.chart.plot
        original = plot._render_plot

        def counting() -> None:
            nonlocal draws
            draws += 1
            original()

        plot._render_plot = counting  # type: ignore[method-assign]
        for k in range(20):  # the same series (so the legend keeps its height), 20 updates in one frame
            series = live_series(NOW + k)
            series["TP2"][-1] = (NOW + k, 10.0 + k)
            app.chart.set_series(series, now=NOW + k)
        assert draws == 0  # set_series stores and asks for a refresh; it draws nothing itself
        await pilot.pause()
        assert draws == 1
        assert "TP2 29 tok/s" in "\n".join(screen_text(app))


async def test_same_data_same_screen() -> None:
    screens = []
    for _ in range(2):
        app = TimeSeriesApp()
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            screens.append(screen_text(app))
    assert screens[0] == screens[1]


# --- XYChart -------------------------------------------------------------------------------------------------


async def test_xy_joins_points_in_x_order_with_a_mark_at_each() -> None:
    # given out of order: the line still runs left to right, through the marks
    app = XYApp({"TP2": [(10_000.0, 100.0), (0.0, 0.0), (5000.0, 50.0)]})
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        lines = screen_text(app)
        top, bottom = frame_rows(lines)
        inside = lines[top + 1:bottom]
        assert app.chart.x_max == 10_000 and app.chart.y_max == 100
        assert inside[0].rstrip()[-2] == "o"  # (10k, 100): last column inside, top row
        assert inside[-1][7] == "o"  # (0, 0): first column inside, bottom row
        assert sum(row.count("o") for row in inside) == 3
        mid = [r for r, row in enumerate(inside) if "o" in row[8:-2]]
        assert len(mid) == 1 and abs(mid[0] - (len(inside) - 1) / 2) <= 1
        assert sum(is_braille(c) for row in inside for c in row) >= 60  # the joining line: nearly every column
        assert "─o─ TP2" in lines[0]
        assert "output tok/s" in "\n".join(lines) and "TPOT ms" in "\n".join(lines)


async def test_xy_handles_empty_bad_and_single_points_and_resizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")  # every resize has a frame with stale canvases: they must filter cleanly
    app = XYApp({})
    async with app.run_test(size=(38, 8)) as pilot:
        await pilot.pause()
        assert any(EMPTY_TEXT in line for line in screen_text(app))
        app.chart.set_series({"DP2": [(None, 1.0), (math.nan, 2.0), (3000.0, 20.0)], "bad": [(1.0, math.inf)]})
        await pilot.pause()
        lines = screen_text(app)
        assert EMPTY_TEXT not in "\n".join(lines)
        assert sum(line.count("o") for line in lines[2:]) == 1  # DP2's one good point
        for size in ((80, 24), (160, 48), (38, 8)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            assert len(screen_text(app)) == size[1]
        assert "DP2" in "\n".join(screen_text(app)[:2])


async def test_xy_y_title_longer_than_the_tick_column_is_drawn_whole() -> None:
    """textual-plot centres its y label on the tick labels' column: "mean TPOT ms" lost its start ("ean TPOT ms",
    the results screen at 160x48). The title starts at the chart's left edge, above the axis."""
    app = XYApp()
    app.chart.y_label = "mean TPOT ms"
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        lines = screen_text(app)
        top, _ = frame_rows(lines)
        assert lines[top - 1].startswith("mean TPOT ms"), lines[top - 1]


# --- snapshots -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_time_series_snapshot(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(TimeSeriesApp(), terminal_size=size)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_xy_snapshot(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(XYApp(), terminal_size=size)
