"""The servers table: one row per server and the proxy — role, GPUs, port, phase or health, requests
running/waiting, KV-cache use, prompt and generation tokens/s, and for a disaggregated decode server the KV
that arrived by transfer. Rows are keyed by server name and only changed cells are updated."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from tui.console import fmt
from tui.console.model import ConsoleModel, ServerView

WIDE = (("server", 11), ("role", 8), ("GPU", 4), ("port", 5), ("state", 22), ("run/wait", 9), ("KV %", 6),
        ("prompt tok/s", 12), ("gen tok/s", 10), ("KV in", 22))
COMPACT = (("server", 10), ("GPU", 3), ("state", 20), ("r/w", 7), ("KV%", 5), ("gen t/s", 8))


def state_cell(model: ConsoleModel, v: ServerView) -> Text:
    if v.exited is not None:
        code = v.exited.returncode
        return Text(f"exited {code if code is not None else '?'} ({v.exited.during})", style=fmt.BAD)
    if v.stalled is not None and v.phase != "ready":
        return Text(f"stalled {fmt.duration(v.stalled.silent_s)}", style=fmt.BAD)
    if v.waits_for and not v.started:
        return Text(f"held for {','.join(v.waits_for)}", style=fmt.DIM)
    starting = model.layout is not None and model.layout.status == "starting" and v.phase != "ready" \
        and v.role != "proxy"
    if starting:
        label = v.phase_label or "launching"
        return Text(f"{label} {fmt.pct(v.progress)}", style=fmt.BUSY)
    h = v.health
    if h is None:
        return Text("—", style=fmt.DIM)
    if v.role == "proxy" and h.state == "dead":  # the proxy answers 503 while a server behind it is not healthy
        return Text("waiting for servers" if model.starting() else "a server is down", style=fmt.WARN)
    style = {"up": fmt.OK, "starting": fmt.BUSY, "dead": fmt.BAD, "down": fmt.BAD, "error": fmt.BAD,
             "unresponsive": fmt.WARN}.get(h.state, "")
    # the health latency only when it says something (a slow /health is the first sign of an overloaded server):
    # a figure that changes every poll would repaint the table every second for nothing
    slow = h.latency_ms is not None and h.latency_ms >= 100 and h.state == "up"
    text = h.state + (f" (/health {h.latency_ms:.0f} ms)" if slow else "")
    t = Text(text, style=style)
    if model.server_stale(v):
        t = Text(f"{text} · {fmt.duration(model.age(v.health_at))} old", style="dim")
    return t


def kv_in_cell(v: ServerView) -> str:
    f = v.figures
    if f is None or v.role != "decode":
        return ""
    parts = []
    if f.disagg is not None and f.disagg.external_share is not None:
        parts.append(f"{f.disagg.external_share * 100:.0f}% xfer")
    if f.kv_transfer is not None and f.kv_transfer.bytes_per_s is not None:
        parts.append(fmt.rate_bps(f.kv_transfer.bytes_per_s))
    return " · ".join(parts)


def row_for(model: ConsoleModel, v: ServerView, compact: bool) -> list[object]:
    f = v.figures
    stale = model.server_stale(v)
    name = Text(v.name, style="bold" if not stale else "dim")
    gpus = ",".join(str(g) for g in v.gpus) or ("—" if v.role != "proxy" else "")
    rw = "—" if f is None or f.running is None else f"{f.running:.0f} / {f.waiting or 0:.0f}"
    kv = "—" if f is None or f.kv_cache_usage is None else f"{f.kv_cache_usage * 100:.1f}"
    gen = fmt.num(f.generation_tps) if f is not None else "—"
    if compact:
        return [name, gpus, state_cell(model, v), rw, kv, gen]
    prompt = fmt.num(f.prompt_tps) if f is not None else "—"
    return [name, v.role or "—", gpus, v.port or "—", state_cell(model, v), rw, kv, prompt, gen, kv_in_cell(v)]


class ServerTable(DataTable[object]):
    DEFAULT_CSS = "ServerTable { height: auto; max-height: 12; }"

    def __init__(self, **kw: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, show_cursor=True, **kw)  # type: ignore[arg-type]
        self._schema: tuple[tuple[str, int], ...] | None = None
        self._rows: dict[str, list[object]] = {}

    def draw(self, model: ConsoleModel) -> None:
        width = self.size.width or self.app.size.width
        schema = COMPACT if width < 100 else WIDE
        if schema is not self._schema:
            self.clear(columns=True)
            for label, w in schema:
                self.add_column(label, width=w, key=label)
            self._schema = schema
            self._rows = {}
        compact = schema is COMPACT
        names = list(model.servers)
        for gone in [k for k in self._rows if k not in model.servers]:
            self.remove_row(gone)
            del self._rows[gone]
        for name in names:
            row = row_for(model, model.servers[name], compact)
            old = self._rows.get(name)
            if old is None:
                self.add_row(*row, key=name)
            else:
                for (label, _), new, prev in zip(schema, row, old, strict=True):
                    if str(new) != str(prev) or getattr(new, "style", None) != getattr(prev, "style", None):
                        self.update_cell(name, label, new)
            self._rows[name] = row

    @property
    def selected(self) -> str | None:
        if not self._rows or self.cursor_row < 0:
            return None
        try:
            return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)
        except Exception:  # noqa: BLE001 - an empty table has no cell under the cursor
            return None
