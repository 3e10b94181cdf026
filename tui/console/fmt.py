"""Numbers, bars and ages as the console prints them (plain Rich text; colour only says state)."""

from __future__ import annotations

import math

from rich.text import Text

GIB = 1024**3
BLOCKS = " ▏▎▍▌▋▊▉█"
SPARKS = "▁▂▃▄▅▆▇█"

# state styles (16-colour names: they read on a 16-colour terminal, and NO_COLOR keeps the words)
OK, WARN, BAD, DIM, BUSY = "green", "yellow", "bold red", "dim", "cyan"


def bar(fraction: float | None, width: int, style: str = "", empty_style: str = "dim") -> Text:
    """A horizontal bar of ``width`` cells with eighth-cell resolution."""
    t = Text()
    if width <= 0:
        return t
    if fraction is None or math.isnan(fraction):
        t.append("·" * width, style=empty_style)
        return t
    f = min(max(fraction, 0.0), 1.0)
    eighths = round(f * width * 8)
    full, part = divmod(eighths, 8)
    t.append("█" * full, style=style)
    if part and full < width:
        t.append(BLOCKS[part], style=style)
        full += 1
    t.append("░" * (width - full), style=empty_style)
    return t


def split_bar(parts: list[tuple[float, str]], width: int) -> Text:
    """A bar of several segments (fractions of the whole), each in its style; the rest empty."""
    t = Text()
    used = 0
    for frac, style in parts:
        n = min(round(max(frac, 0.0) * width), width - used)
        if n > 0:
            t.append("█" * n, style=style)
            used += n
    t.append("░" * (width - used), style="dim")
    return t


def sparkline(values: list[float], width: int, top: float = 100.0) -> str:
    """``values`` (oldest first) as ``width`` block characters, 0..``top``: each cell the mean of its share of the
    history, so the whole history shows, right-aligned while it is shorter than the width."""
    if width <= 0:
        return ""
    if len(values) > width:
        step = len(values) / width
        vals = [sum(values[int(i * step):max(int((i + 1) * step), int(i * step) + 1)])
                / max(int((i + 1) * step) - int(i * step), 1) for i in range(width)]
    else:
        vals = list(values)
    out = []
    for v in vals:
        f = min(max(v / top, 0.0), 1.0) if top > 0 else 0.0
        out.append(SPARKS[min(int(f * len(SPARKS)), len(SPARKS) - 1)])
    return "".join(out).rjust(width, " ")


def num(v: float | None, digits: int = 0, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:,.{digits}f}{unit}"


def ms(seconds: float | None) -> str:
    """Seconds as a latency: 8.9 ms, 312 ms, 3.2 s."""
    if seconds is None:
        return "—"
    if seconds >= 10:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    v = seconds * 1000
    return f"{v:.1f} ms" if v < 100 else f"{v:.0f} ms"


def ms_value(milliseconds: float | None) -> str:
    return "—" if milliseconds is None else ms(milliseconds / 1000.0)


def duration(seconds: float | None) -> str:
    """12 s, 3m05s, 1h02m."""
    if seconds is None or math.isinf(seconds):
        return "—"
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def gib(b: float | None, digits: int = 1) -> str:
    return "—" if b is None else f"{b / GIB:.{digits}f}"


def pct(fraction: float | None, digits: int = 0) -> str:
    return "—" if fraction is None else f"{fraction * 100:.{digits}f}%"


#: a startup phase (``tui.core.launch.phases``) in the operator's words, short enough for the servers table
PHASE_WORDS = {
    "launching": "Python start", "args": "argument parsing", "config": "model config", "engine_init": "engine start",
    "loading": "weight loading", "loaded": "weight loading", "compiling": "torch.compile",
    "compiled": "memory profiling", "kv_cache": "KV cache allocation", "warmup": "kernel warm-up",
    "cuda_graphs": "CUDA graph capture", "graphs_done": "warm-up", "engine_ready": "HTTP server start",
    "api_starting": "HTTP server start", "api_up": "HTTP server start", "ready": "serving", "serving": "serving",
}


def phase_words(key: str) -> str:
    """``compiled`` → ``memory profiling``; an unknown key as it is, its underscores as spaces."""
    return PHASE_WORDS.get(key, key.replace("_", " ") or "start")


#: the same, at most 10 characters (the 80-column table)
PHASE_SHORT = {
    "launching": "start", "args": "args", "config": "config", "engine_init": "engine", "loading": "loading",
    "loaded": "loading", "compiling": "compile", "compiled": "profiling", "kv_cache": "KV alloc",
    "warmup": "warm-up", "cuda_graphs": "graphs", "graphs_done": "warm-up", "engine_ready": "API start",
    "api_starting": "API start", "api_up": "API start", "ready": "serving", "serving": "serving",
}


def exit_words(returncode: int | None, during: str, *, short: bool = False) -> str:
    """How a server ended, in words: ``exited 1 during kernel warm-up``, ``killed (SIGKILL) while serving``,
    ``exited during engine start`` (its exit status is not known: it was not a child of the process that saw it
    end, which is how a console that did not launch the layout sees it)."""
    if returncode is None:
        what = "exited"
    elif returncode < 0:
        import signal

        try:
            what = f"killed ({signal.Signals(-returncode).name})"
        except ValueError:
            what = f"killed (signal {-returncode})"
    else:
        what = f"exited {returncode}"
    if short:
        return f"{what.replace('(', '').replace(')', '')} · {PHASE_SHORT.get(during, phase_words(during))}"
    return f"{what} while serving" if during in ("serving", "ready") else f"{what} during {phase_words(during)}"


def cut_words(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, cut after a whole word with an ellipsis (mid-word only when its first
    word alone is wider)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = text[: width - 1]
    space = head.rstrip().rfind(" ")
    if space > 0 and not text[width - 1].isspace():
        head = head[:space]
    return head.rstrip(" ;,:·-") + "…"


MIB = float(1 << 20)


def kv_rate(kv: object, *, long: bool = True) -> str:
    """A KV transfer rate in the core's one definition (``tui.core.telemetry.kvrate``), both figures labelled:
    ``448.2 MiB/s moved, 22.3 MiB/s per transfer`` (all transfers together per wall second, and one transfer's
    speed), or short, ``448 MiB/s moved · 22/xfer``. ``kv``: a ``KvTransferFigures`` (anything with ``rate``)."""
    rate = getattr(kv, "rate", None)
    if rate is None:
        return "—"
    moved, per = kv_moved_bps(kv), rate.per_transfer_bps
    parts = []
    if moved is not None:
        parts.append(f"{moved / MIB:,.{1 if long else 0}f} MiB/s moved")
    if per is not None:
        parts.append(f"{per / MIB:,.1f} MiB/s per transfer" if long else f"{per / MIB:,.0f}/xfer")
    return (", " if long else " · ").join(parts) or "no KV moved"


def kv_moved_bps(kv: object) -> float | None:
    """Bytes per wall second, every transfer together: the core's ``moved`` figure (an older recording's figures
    have no window: their ``bytes_per_s`` is the same figure)."""
    rate = getattr(kv, "rate", None)
    moved = rate.moved_bps if rate is not None else None
    return moved if moved is not None else getattr(kv, "bytes_per_s", None)


def short_notice(line: str, limit: int = 110) -> str:
    """A failed command's error line as a notification says it: without the program's prefix and the hint (the
    banner and its details have the fix), cut after a word at ``limit`` characters (a 12-line notice covered the
    banner at 80x24)."""
    text = line.strip()
    for prefix in ("disagg-tui: error: ", "error: "):
        text = text.removeprefix(prefix)
    text = text.split(" (hint: ", 1)[0]
    return cut_words(text, limit)
