"""The top line: the host (SIMULATED where it is, so it cannot be missed), the layout and its state, the clock."""

from __future__ import annotations

import time

from rich.text import Text

from tui.console import fmt
from tui.console.state import ConsoleState
from tui.console.widgets.panel import TextPanel
from tui.core.printable import printable

STATUS_STYLE = {"ready": fmt.OK, "starting": fmt.BUSY, "failed": fmt.BAD, "degraded": fmt.BAD, "stopping": fmt.WARN}


class HeaderBar(TextPanel):
    DEFAULT_CSS = "HeaderBar { height: 1; }"

    def draw(self, model: ConsoleState, *, screen: str = "") -> None:
        """The header of ``screen`` from the console's state (its replay words and recording set by the app)."""
        width = self.size.width or self.app.size.width
        self.set_text(render_header(model, width, replay=model.replay_label, screen=screen,
                                    recording=model.recording))


def render_header(model: ConsoleState, width: int, *, replay: str | None = None, screen: str = "",
                  recording: bool = False) -> Text:
    t = Text()
    t.append(" disagg-tui ", style="bold reverse")
    if replay:
        t.append(" REPLAY ", style="bold reverse magenta")
        t.append(f" {printable(replay)}")
    if model.simulated:
        t.append(" SIMULATED ", style="bold reverse yellow")
    label = printable(model.host_label.replace("SIMULATED ", "").replace("SIMULATED", "").strip(" ·"))
    if label and not (replay and width < 100):  # 80 columns of a replay: its position, the layout and the clock
        t.append(f" {label}" if width >= 100 else f" {label[:28]}")
    if screen:
        t.append(f" │ {screen}", style="bold")
    lay = model.layout
    t.append(" │ ")
    if lay is None:
        t.append("no layout", style=fmt.DIM)
    else:
        t.append(printable(f"{lay.topology} {lay.profile_id if width >= 100 else ''}".rstrip()) + " · ")
        t.append(printable(lay.status), style=STATUS_STYLE.get(lay.status, ""))
        since = layout_since(model)
        if width >= 120 and since:
            t.append(" since " + time.strftime("%H:%M:%S", time.localtime(since)), style=fmt.DIM)
    clock = time.strftime("%H:%M:%S", time.localtime(model.clock()))
    if recording:
        clock = "⏺ rec  " + clock
    pad = width - len(t.plain) - len(clock) - 1
    if pad > 0:
        t.append(" " * pad)
        t.append(clock, style=fmt.DIM)
    t.truncate(width, overflow="ellipsis")
    return t


def layout_since(model: ConsoleState) -> float:
    """Since when the layout shown is in its state: ready since its last server became ready (each server's start
    plus its startup time, which the state file holds: a console opened later shows when that was, not when it
    opened), starting since its first server started; otherwise since the console saw it change."""
    lay = model.layout
    if lay is None:
        return 0.0
    servers = model.servers.values()
    if lay.status == "ready":
        ready = [v.started + v.ready_s for v in servers if v.ready_s is not None and v.started]
        if ready:
            return max(ready)
    if lay.status == "starting":
        started = [v.started for v in servers if v.started]
        if started:
            return min(started)
    return lay.since
