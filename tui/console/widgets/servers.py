"""The servers table: one row per server and the proxy — role, GPUs, port, phase or health, requests
running/waiting, KV-cache use, prompt and generation tokens/s, and for a disaggregated decode server the KV
that arrived by transfer. Rows are keyed by server name and only a row whose cells changed is drawn again."""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from tui.console import fmt
from tui.console.state import SERVER_PERIOD_S, STALE_PERIODS, ConsoleState, ServerView
from tui.core.printable import printable

WIDE = (("server", 10), ("role", 7), ("GPU", 4), ("port", 5), ("state", 20), ("run/wait", 9), ("KV %", 6),
        ("prompt tok/s", 12), ("gen tok/s", 10), ("KV in (moved)", 22))
#: 150 columns and more: the state column has room for why a scrape fails, KV in for both rates
ROOMY = (("server", 11), ("role", 8), *WIDE[2:4], ("state", 31), *WIDE[5:9], ("KV in", 39))
#: narrower than this, the compact table (the wide one would run past the edge)
WIDE_FROM = 118


def fitted(schema: tuple[tuple[str, int], ...], width: int) -> tuple[tuple[str, int], ...]:
    """The last column (KV in) takes what the others leave of ``width`` (each column has a space either side, the
    table a border), at most its own width, at least 13: at 120 columns the table ran past the edge."""
    name, most = schema[-1]
    left = width - 2 - sum(w + 2 for _, w in schema[:-1]) - 2
    return (*schema[:-1], (name, max(13, min(most, left))))
COMPACT = (("server", 10), ("GPU", 3), ("state", 20), ("r/w", 7), ("KV%", 5), ("gen t/s", 8))
#: the host column (only with more than one host shown), after the server's name
HOST_COLUMN = ("host", 9)
#: "this host" in the host column
HERE = "this host"


def with_host(schema: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    return (schema[0], HOST_COLUMN, *schema[1:])


def metrics_reason(error: str) -> str:
    """The poller's error for a failed ``/metrics`` scrape, short: ``HTTP 500``, ``no answer``, ``ConnectError``."""
    e = error.removeprefix("/metrics").lstrip(": ").removeprefix("answered ")
    if e.startswith("no answer"):
        return "no answer"
    if e.startswith("is ") and "bytes" in e:
        return "too large"
    return e.split(": ", 1)[0] if ": " in e else e


def state_cell(model: ConsoleState, v: ServerView, width: int = 22) -> Text:
    """What the server is doing, in words that fit ``width``: its start's phase, its health, why its figures are
    old or missing (a failing ``/metrics`` scrape, with its reason when there is room, and its age), how it ended."""
    t = _state(model, v, width)
    return Text(fmt.cut_words(t.plain, width), style=t.style)


def _state(model: ConsoleState, v: ServerView, width: int) -> Text:
    if v.exited is not None:
        return Text(fmt.exit_words(v.exited.returncode, v.exited.during, short=width < 30), style=fmt.BAD)
    if v.stalled is not None and v.phase != "ready":
        return Text(f"stalled {fmt.duration(v.stalled.silent_s)}", style=fmt.BAD)
    if v.waits_for and not v.started:
        return Text(f"held for {','.join(v.waits_for)}", style=fmt.DIM)
    if v.host:  # another host's: starting while its layout stream says so (its follow --json)
        rv = model.remotes.get(v.host)
        lay = rv.layout if rv is not None else None
        starting = lay is not None and lay.status == "starting" and bool(v.started) and v.phase != "ready" \
            and v.role != "proxy"
    else:
        starting = model.layout is not None and model.layout.status == "starting" and v.phase != "ready" \
            and v.role != "proxy"
    if starting:
        pct = fmt.pct(v.progress)
        label = fmt.cut_words(v.phase_label or "launching", width - len(pct) - 1)  # the share done stays in view
        return Text(f"{label} {pct}", style=fmt.BUSY)
    h = v.health
    if h is None:
        return Text("—", style=fmt.DIM)
    # the proxy answers 503 while a server behind it is not healthy
    if v.role == "proxy" and h.state == "dead" and not v.host:
        return Text("waiting for servers" if model.starting() else "a server is down", style=fmt.WARN)
    style = {"up": fmt.OK, "starting": fmt.BUSY, "dead": fmt.BAD, "down": fmt.BAD, "error": fmt.BAD,
             "unresponsive": fmt.WARN}.get(h.state, "")
    # the health latency only when it says something (a slow /health is the first sign of an overloaded server):
    # a figure that changes every poll would repaint the table every second for nothing
    slow = h.latency_ms is not None and h.latency_ms >= 100 and h.state == "up"
    text = h.state + (f" (/health {h.latency_ms:.0f} ms)" if slow else "")
    if model.server_stale(v):
        return Text(f"{text} · {fmt.duration(model.age(v.health_at))} old", style="dim")
    if h.state == "up" and v.metrics_error:
        age = fmt.duration(model.age(v.figures.ts if v.figures is not None else v.metrics_failing_since))
        why = f"/metrics {metrics_reason(v.metrics_error)} · {age}" if width >= 30 else f"no metrics {age}"
        return Text(f"{text} · {why}", style=fmt.WARN)
    if h.state == "up" and figures_stale(model, v):
        assert v.figures is not None
        return Text(f"{text} · figures {fmt.duration(model.age(v.figures.ts))} old", style=fmt.WARN)
    return Text(text, style=style)


def figures_stale(model: ConsoleState, v: ServerView) -> bool:
    """The figures shown are not the newest: the last scrapes failed, or none came for four periods."""
    if v.figures is None:
        return False
    return bool(v.metrics_error) or model.age(v.figures.ts) > STALE_PERIODS * SERVER_PERIOD_S


def _prompt_split(v: ServerView) -> tuple[float, float] | None:
    """A decode server's prompt tokens/s as (computed here, arrived by KV transfer): the core's figures by source
    (``prompt_computed_tps``, ``prompt_transferred_tps``), else (an older recording's) the window's token counts
    by source; None where the server does not say (not a decode server, or no traffic yet)."""
    f = v.figures
    if f is None or v.role != "decode":
        return None
    if f.prompt_transferred_tps is not None:
        return f.prompt_computed_tps or 0.0, f.prompt_transferred_tps
    if f.disagg is None or f.prompt_tps is None:
        return None
    d = f.disagg
    total = d.external_tokens + d.local_compute_tokens + d.cache_hit_tokens
    if total <= 0:
        return None
    return f.prompt_tps * d.local_compute_tokens / total, f.prompt_tps * d.external_tokens / total


def prompt_cell(v: ServerView) -> str:
    """Prompt tokens/s this server computed: a decode server's are only those it did not receive by KV transfer
    (``12 computed``; those it received are in the KV in column)."""
    f = v.figures
    if f is None:
        return "—"
    split = _prompt_split(v)
    return fmt.num(f.prompt_tps) if split is None else f"{fmt.num(split[0])} computed"


def kv_in_cell(v: ServerView, width: int = 22) -> str:
    """What arrived by KV transfer: prompt tokens/s, and the bytes moved (the core's definition, labelled: per
    wall second all transfers together, and per transfer where there is room)."""
    f = v.figures
    if f is None or v.role != "decode":
        return ""
    parts = []
    split = _prompt_split(v)
    if split is not None:
        parts.append(f"{fmt.num(split[1])} tok/s")
    elif f.disagg is not None and f.disagg.external_share is not None:
        parts.append(f"{f.disagg.external_share * 100:.0f}% xfer")
    kv = f.kv_transfer
    moved = fmt.kv_moved_bps(kv) if kv is not None else None
    if kv is not None and moved is not None:
        parts.append(fmt.kv_rate(kv, long=False) if width >= 36 else f"{moved / fmt.MIB:,.0f} MiB/s")
    text = " · ".join(parts)
    return text if len(text) <= width or not parts else parts[-1]  # no room for both: the rate


def row_for(model: ConsoleState, v: ServerView, compact: bool, state_w: int = 22, kv_w: int = 22) -> list[object]:
    name = Text(printable(v.name), style="bold" if not model.server_stale(v) else "dim")
    gpus = ",".join(str(g) for g in v.gpus) or ("—" if v.role != "proxy" else "")
    state = state_cell(model, v, state_w)
    f = v.figures if v.exited is None else None  # a server that has ended has no figures now
    old = "dim" if f is not None and figures_stale(model, v) else ""
    rw = "—" if f is None or f.running is None else f"{f.running:.0f} / {f.waiting or 0:.0f}"
    kv = "—" if f is None or f.kv_cache_usage is None else f"{f.kv_cache_usage * 100:.1f}"
    gen = fmt.num(f.generation_tps) if f is not None else "—"
    if compact:
        return [name, gpus, state, Text(rw, style=old), Text(kv, style=old), Text(gen, style=old)]
    prompt = prompt_cell(v) if f is not None else "—"
    kv_in = kv_in_cell(v, kv_w) if f is not None else ""
    return [name, v.role or "—", gpus, v.port or "—", state, Text(rw, style=old), Text(kv, style=old),
            Text(prompt, style=old), Text(gen, style=old), Text(kv_in, style=old)]


def _cell_strip(value: object, width: int, base: Style, styles: dict[str, Style]) -> list[Segment]:
    """One cell: its text cut to the column (an ellipsis where cut) and padded, one space either side."""
    if isinstance(value, Text):
        text, style = value.plain, value.style
    else:
        text, style = str(value), ""
    if isinstance(style, str):
        found = styles.get(style)
        if found is None:
            found = styles[style] = Style.parse(style) if style else Style()
        style = found
    if cell_len(text) > width:
        text = set_cell_size(text, max(width - 1, 0)) + "…"
    return [Segment(" ", base), Segment(set_cell_size(text, width), base + style), Segment(" ", base)]


class ServerTable(Widget, can_focus=True):
    """The servers, a row each, drawn with the Line API: each row is one strip made from its cells' text, remade
    only when a cell of it changed (a DataTable re-renders every cell of the table, through Rich, for any one that
    changes: under load the figures change every second and that was most of the dashboard's drawing). ↑/↓ (or a
    click) move the cursor, which picks the server the log pane shows. It does not scroll: it is as tall as its rows
    (a dp8 layout's nine included), the log pane below gives way."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"servertable--header", "servertable--cursor"}
    DEFAULT_CSS = """
    ServerTable {
        height: auto;
        background: $surface;
        color: $foreground;
        & > .servertable--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .servertable--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .servertable--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus {
            background-tint: $foreground 5%;
            & > .servertable--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
        }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "up", show=False),
        Binding("down", "cursor(1)", "down", show=False),
        Binding("home", "cursor(-1000)", "first", show=False),
        Binding("end", "cursor(1000)", "last", show=False),
    ]

    class Highlighted(Message):
        """The cursor moved to server ``name`` (None: the table is empty)."""

        def __init__(self, table: ServerTable, name: str | None) -> None:
            super().__init__()
            self.table = table
            self.name = name

        @property
        def control(self) -> ServerTable:
            return self.table

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self._schema: tuple[tuple[str, int], ...] = WIDE
        self._names: list[str] = []
        self._rows: dict[str, list[object]] = {}
        self.cursor_row = 0
        self._strips: dict[tuple[object, ...], Strip] = {}
        self._styles: dict[str, Style] = {}

    # --- the rows ----------------------------------------------------------------------------------------------
    def draw(self, model: ConsoleState) -> None:
        width = self.size.width or self.app.size.width
        hosts = bool(model.remotes)  # more than one host shown: a host column
        narrow = width < WIDE_FROM + (HOST_COLUMN[1] + 2 if hosts else 0)
        schema = COMPACT if narrow else ROOMY if width >= 150 else WIDE
        compact = schema is COMPACT
        if hosts:
            schema = with_host(schema)
        if not compact:
            schema = fitted(schema, width)
        state_w = dict(schema)["state"]
        kv_w = schema[-1][1]
        if schema != self._schema:
            self._schema, self._rows, self._strips = schema, {}, {}
            self.refresh()
        rows = model.server_rows()
        views = dict(rows)
        names = [k for k, _ in rows]
        if names != self._names:
            before = self.selected
            self._names = names
            self._rows = {n: r for n, r in self._rows.items() if n in views}
            self.refresh(layout=True)  # a row more or less: the table's height changes
            self.cursor_row = names.index(before) if before in names else min(self.cursor_row,
                                                                               max(len(names) - 1, 0))
            if self.selected != before:
                self.post_message(self.Highlighted(self, self.selected))
        changed = False
        for name in names:
            v = views[name]
            row = row_for(model, v, compact, state_w, kv_w)
            if hosts:
                down = v.host and model.remotes[v.host].down is not None
                row.insert(1, Text(v.host or HERE, style="dim" if down else ""))
            if _key(row) != _key(self._rows.get(name)):
                self._rows[name] = row
                changed = True
        if changed:  # the rows that did not change come from their cached strips
            self.refresh()

    @property
    def row_count(self) -> int:
        return len(self._names)

    def get_row_at(self, index: int) -> list[object]:
        return list(self._rows.get(self._names[index], ()))

    def get_row_index(self, name: str) -> int:
        return self._names.index(name)

    @property
    def selected(self) -> str | None:
        if not self._names:
            return None
        return self._names[min(max(self.cursor_row, 0), len(self._names) - 1)]

    def move_cursor(self, *, row: int) -> None:
        row = min(max(row, 0), max(len(self._names) - 1, 0))
        if row == self.cursor_row:
            return
        self.cursor_row = row
        self.refresh()
        self.post_message(self.Highlighted(self, self.selected))

    def action_cursor(self, step: int) -> None:
        self.move_cursor(row=self.cursor_row + step)

    def on_click(self, event: events.Click) -> None:
        at = event.get_content_offset(self)  # under the border: line 0 is the header
        if at is not None and at.y >= 1:
            self.move_cursor(row=at.y - 1)

    # --- drawing -----------------------------------------------------------------------------------------------
    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._names) + 1

    def on_focus(self) -> None:
        self._strips.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._strips.clear()
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.visual_style.rich_style
        if y == 0:
            key: tuple[object, ...] = ("header", width, self._schema)
            strip = self._strips.get(key)
            if strip is None:
                head = self.get_component_rich_style("servertable--header")
                segs = [seg for label, w in self._schema for seg in _cell_strip(label, w, head, self._styles)]
                strip = self._strips[key] = Strip(segs).extend_cell_length(width, head).crop(0, width)
            return strip
        i = y - 1
        if i >= len(self._names):
            return Strip.blank(width, base)
        row = self._rows.get(self._names[i])
        if row is None:
            return Strip.blank(width, base)
        cursor = i == self.cursor_row
        key = (self._names[i], _key(row), width, cursor)
        strip = self._strips.get(key)
        if strip is None:
            style = base + self.get_component_rich_style("servertable--cursor") if cursor else base
            segs = [seg for (_, w), cell in zip(self._schema, row, strict=True)
                    for seg in _cell_strip(cell, w, style, self._styles)]
            strip = Strip(segs).extend_cell_length(width, style).crop(0, width)
            if len(self._strips) > 64:  # rows of values no longer shown
                self._strips.clear()
            self._strips[key] = strip
        return strip


def _key(row: list[object] | None) -> tuple[object, ...] | None:
    """What a row shows (each cell's text and style): equal keys draw the same strip."""
    if row is None:
        return None
    return tuple((c.plain, str(c.style)) if isinstance(c, Text) else str(c) for c in row)
