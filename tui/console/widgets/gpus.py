"""The GPU panel: two lines a GPU — utilisation, memory split by owning server, power against its limit,
temperature, clocks, a 60-second utilisation sparkline; then who owns the memory, with role and rank."""

from __future__ import annotations

import time

from rich.text import Text

from tui.console import fmt
from tui.console.remotes import RemoteView
from tui.console.state import ConsoleState, GpuView, owners_of
from tui.console.widgets.panel import TextPanel
from tui.core.printable import printable

#: owners by role; never green, yellow or red, which mean ok, warning and failure
ROLE_STYLES = {"prefill": "blue", "decode": "cyan", "single": "bright_blue", "proxy": "magenta"}
OTHER_STYLES = ("bright_cyan", "bright_magenta", "bright_blue", "white")


def owner_style(owner: str, role: str, index: int) -> str:
    base = role.split(" ", 1)[0] if role else ""
    return ROLE_STYLES.get(base, OTHER_STYLES[index % len(OTHER_STYLES)])


class GpuPanel(TextPanel):
    """Draws every GPU of the model; ``draw`` is called by the screen when GPUs changed (or to age them)."""

    DEFAULT_CSS = "GpuPanel { height: auto; }"

    def draw(self, model: ConsoleState) -> None:
        width = max(self.size.width or (self.app.size.width - 4), 40)
        self.set_text(render_gpus(model, width, short=hosts_too_tall(model, width, self.app.size.height)))


#: the share of the terminal's lines the GPU panel may take before each remote host's GPUs go on one line
SHARE_OF_HEIGHT = 0.35


def hosts_too_tall(model: ConsoleState, width: int, height: int) -> bool:
    """Every host's GPUs a line (two from 96 columns) and a header each would take more than
    :data:`SHARE_OF_HEIGHT` of the terminal: the servers and the log would not fit (80×24 with two remote hosts,
    160×48 with eight)."""
    if not model.remotes:
        return False
    per = 2 if width >= 96 else 1
    lines = 1 + per * len(model.gpus) + sum(1 + per * len(rv.gpus) for rv in model.remotes.values())
    return lines > SHARE_OF_HEIGHT * height


def render_gpus(model: ConsoleState, width: int, *, short: bool = False) -> Text:
    if model.remotes:
        return render_hosts(model, width, short=short)
    return _local_gpus(model, width)


def _local_gpus(model: ConsoleState, width: int) -> Text:
    out = Text()
    if model.gpu_error and not model.gpus:
        out.append(f"GPUs cannot be read: {model.gpu_error}", style=fmt.BAD)
        return out
    if not model.gpus:
        out.append("waiting for the first GPU sample…", style=fmt.DIM)
        return out
    for i, (_, view) in enumerate(sorted(model.gpus.items())):
        if i:
            out.append("\n")
        out.append_text(_gpu_lines(model, view, width))
    if model.gpu_error:
        out.append(f"\nlast sample failed: {model.gpu_error}", style=fmt.BAD)
    return out


def render_hosts(model: ConsoleState, width: int, *, short: bool = False) -> Text:
    """Several hosts: a header line a host (this one first, as the console's header names it; then each remote
    host in the order asked for), its GPUs under it; a host that cannot be reached says why and when it is tried
    again, its last figures greyed with their age. ``short``: a remote host's GPUs in one line (on its header's
    line while it is reachable)."""
    out = Text()
    out.append_text(_local_header(model, width))
    out.append("\n")
    out.append_text(_local_gpus(model, width))
    for rv in model.remotes.values():
        out.append("\n")
        head = _remote_header(model, rv, width)
        down = rv.down is not None
        if short:
            summary = _gpus_in_one_line(rv)
            if down:
                out.append_text(head)
                if summary.plain:
                    summary.stylize("dim")
                    line = Text("  ") + summary
                    line.truncate(width, overflow="ellipsis")
                    out.append("\n")
                    out.append_text(line)
            else:
                line = head + Text(" · ") + summary if summary.plain else head
                line.truncate(width, overflow="ellipsis")
                out.append_text(line)
            continue
        out.append_text(head)
        for _, view in sorted(rv.gpus.items()):
            out.append("\n")
            out.append_text(_gpu_lines(model, view, width, owners=owners_of(view.sample), dim=down))
    return out


def _gpus_in_one_line(rv: RemoteView) -> Text:
    """``util ▄▆ 55% · mem 326/358 GiB · prefill-0 decode-0``: a host's GPUs (one bar a GPU), their memory, who is
    on them."""
    views = [v for _, v in sorted(rv.gpus.items())]
    if not views:
        return Text()
    utils = [v.sample.util_gpu or 0.0 for v in views]
    used = sum(v.sample.mem_used or 0 for v in views)
    total = sum(v.sample.mem_total or 0 for v in views)
    owners = sorted({o for v in views for o, _, _ in owners_of(v.sample) if not o.startswith("pid")})
    t = Text("util ")
    t.append(fmt.sparkline(utils, len(utils)), style=fmt.BUSY)
    t.append(f" {sum(utils) / len(utils):.0f}% · mem {fmt.gib(used, 0)}/{fmt.gib(total, 0)} GiB")
    if owners:
        t.append(" · " + " ".join(owners), style=fmt.DIM)
    return t


def _local_header(model: ConsoleState, width: int) -> Text:
    t = Text()
    t.append("▌this host", style="bold")
    if model.simulated:
        t.append(" SIMULATED", style="bold yellow")
    t.append(f" · {len(model.gpus)} GPU{'' if len(model.gpus) == 1 else 's'}")
    label = printable(model.host_label.replace("SIMULATED ", "").replace("SIMULATED", "").strip(" ·"))
    if label and width >= 96:
        t.append(f" · {label}", style=fmt.DIM)
    t.truncate(width, overflow="ellipsis")
    return t


def _remote_header(model: ConsoleState, rv: RemoteView, width: int) -> Text:
    t = Text()
    tick = rv.tick
    t.append(f"▌{rv.name}", style="bold")
    if rv.simulated:
        t.append(" SIMULATED", style="bold yellow")
    if tick is not None:
        t.append(f" · {len(rv.gpus)} GPU{'' if len(rv.gpus) == 1 else 's'}")
    down = rv.down
    if down is not None:
        left = down.ts + down.retry_in_s - model.clock()
        t.append(f" · UNREACHABLE ({printable(down.reason, 40)})", style=fmt.BAD)
        if down.detail and width >= 96:  # what ssh or the remote host said: through the sink
            t.append(f": {printable(down.detail, 300)}", style=fmt.BAD)
        t.append(f" · retry in {left:.0f} s" if left >= 0.5 else " · retrying…", style=fmt.WARN)
        if rv.received:
            seen = time.strftime("%H:%M:%S", time.localtime(rv.received))
            t.append(f" · last tick {seen}, {fmt.duration(model.age(rv.received))} ago", style=fmt.DIM)
    elif tick is None:
        t.append(" · connecting…" if not rv.bad else "", style=fmt.DIM)
    else:
        if model.age(rv.received) > 4.0:
            t.append(f" · last tick {fmt.duration(model.age(rv.received))} ago", style=fmt.WARN)
        lay = tick.layout
        fl = rv.layout  # its follow stream's status comes as it changes (a tick's may be half a second old)
        if fl is not None and width >= 96:
            t.append(f" · {fl.topology} of {fl.profile_id} {fl.status}",
                     style=fmt.BAD if fl.status in ("failed", "degraded") else fmt.DIM)
        elif lay is not None and width >= 96:
            t.append(f" · {lay.topology} of {lay.profile} {lay.status}", style=fmt.DIM)
        elif tick.hostname and tick.hostname != rv.name and width >= 96:
            t.append(f" · {tick.hostname}", style=fmt.DIM)
    if rv.bad:
        t.append(f" · {rv.bad} bad tick{'' if rv.bad == 1 else 's'} skipped", style=fmt.WARN)
    t.truncate(width, overflow="ellipsis")
    return t


def _gpu_lines(model: ConsoleState, view: GpuView, width: int,
               owners: list[tuple[str, str, int]] | None = None, dim: bool = False) -> Text:
    g = view.sample
    old = model.gpu_stale(view)
    stale = old or dim  # greyed: old, or its host unreachable (its header says since when)
    wide = width >= 120
    medium = width >= 96
    name = printable(g.name.replace("NVIDIA ", "").split(" ")[0] if g.name else "?")
    line = Text()
    line.append(f"GPU{g.index} ", style="bold")
    line.append(f"{name:<6}", style="bold")
    util = (g.util_gpu or 0.0) / 100.0 if g.util_gpu is not None else None
    bar_w = 12 if wide else (10 if medium else 6)
    line.append(" util " if medium else " ")
    line.append_text(fmt.bar(util, bar_w, style=fmt.BUSY))
    line.append(f" {fmt.pct(util):>4}")
    owners = model.owners_on(g.index) if owners is None else owners
    line.append("  mem " if medium else " ")
    total = g.mem_total or 0
    parts = [(b / total if total else 0.0, owner_style(o, r, k)) for k, (o, r, b) in enumerate(owners)]
    known = sum(b for _, _, b in owners)
    if g.mem_used is not None and total and g.mem_used > known:
        parts.append(((g.mem_used - known) / total, "white"))
    line.append_text(fmt.split_bar(parts, bar_w))
    line.append(f" {fmt.gib(g.mem_used, 0 if not medium else 1)}/{fmt.gib(g.mem_total, 0)} GiB")
    if g.power_w is not None:
        limit = f"/{g.power_limit_w:.0f}" if (g.power_limit_w and medium) else ""
        line.append(f"  {g.power_w:.0f}{limit} W")
    if g.temp_c is not None:
        line.append(f"  {g.temp_c:.0f}°C")
    if wide and g.sm_clock_mhz is not None:
        line.append(f"  {g.sm_clock_mhz} MHz")
    if wide:
        line.append("  ")
        line.append(fmt.sparkline(list(view.util), 16), style=fmt.BUSY)
    if g.throttle and wide:
        reasons = [r for r in g.throttle if r != "gpu_idle"]  # idle is not a slowdown
        if reasons:
            line.append("  " + ",".join(reasons), style=fmt.WARN)
    if stale:
        line.stylize("dim")
    if old:
        line.append(f"  stale {fmt.duration(model.age(view.received))}", style=fmt.WARN)
    if not medium:  # 80 columns: one line a GPU, its owners at the end
        tail = " ".join(o for o, _, _ in owners) or "idle"
        line.append("  ")
        line.append(tail, style=owner_style(owners[0][0], owners[0][1], 0) if owners else fmt.DIM)
        line.truncate(width, overflow="ellipsis")
        return line
    second = Text("      ")
    if owners:
        for k, (o, r, b) in enumerate(owners):
            if k:
                second.append(" · ")
            second.append(o, style=owner_style(o, r, k))
            if r:
                second.append(f" ({r})")
            second.append(f" {fmt.gib(b)} GiB")
    else:
        second.append("no processes", style=fmt.DIM)
    if stale:
        second.stylize("dim")
    second.truncate(width, overflow="ellipsis")
    line.truncate(width, overflow="ellipsis")
    return line + Text("\n") + second
