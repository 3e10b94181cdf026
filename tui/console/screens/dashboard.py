"""The dashboard (home): GPUs and servers on top, the one thing going on in the middle, the log at the bottom."""

from __future__ import annotations

import contextlib
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer

from tui.console.context import ConsoleContext
from tui.console.fixview import shown_fix
from tui.console.messages import DismissRequested, FixRequested, RestartRequested, StopRequested
from tui.console.screens.base import ConsoleScreen
from tui.console.state import BAND, GPUS, HEADER, LOG, SERVERS, ConsoleState
from tui.console.widgets.band import Band
from tui.console.widgets.gpus import GpuPanel
from tui.console.widgets.header import HeaderBar
from tui.console.widgets.logpane import LogPane, LogView
from tui.console.widgets.servers import ServerTable
from tui.core.printable import printable


class DashboardScreen(ConsoleScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        # first in the footer (the screen's keys come before the app's): at 80 columns the app's keys after
        # "p playbook" were cut off, quitting among them; a replay shows the app's own q after its keys
        Binding("q", "quit_console", "quit"),
        Binding("s", "stop", "stop layout"),
        Binding("a", "apply_fix", "apply fix", show=False),
        Binding("d", "details", "details", show=False),
        Binding("x", "dismiss", "dismiss", show=False),
        Binding("R", "restart", "restart", show=False),
        Binding("f", "follow", "follow log", show=False),
        Binding("A", "add_entry", "add to playbook", show=False),
        Binding("slash", "log_filter", "find in log", show=False),
        Binding("w", "log_wrap", "wrap log", show=False),
        Binding("o", "log_polls", "show polls", show=False),
    ]

    #: what a replay does not offer (it launches and stops nothing)
    LIVE_ACTIONS: ClassVar[frozenset[str]] = frozenset({"stop", "apply_fix", "restart"})

    def __init__(self, ctx: ConsoleContext, state: ConsoleState) -> None:
        super().__init__(ctx, state)
        self._tick = 0
        self._diag_key: tuple[str, str] | None = None
        self._layout_status: tuple[str | None, tuple[str, ...]] | None = None

    async def action_quit_console(self) -> None:
        await self.app.run_action("quit_console")  # the app's: it asks first

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "quit_console" and self.replaying:
            return False
        if action == "stop":  # offered only when there is a layout to stop (here, or across hosts)
            lay = self.state.layout
            if (lay is None or lay.status == "stopping") and not self.ctx.across:
                return False
        return super().check_action(action, parameters)

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        gpus = GpuPanel(id="gpus")
        gpus.border_title = "GPUs"
        yield gpus
        servers = ServerTable(id="servers")
        servers.border_title = "Servers"
        yield servers
        yield Band(id="band")
        yield LogView(id="log-view")
        yield Footer()

    def on_mount(self) -> None:
        self.draw(self.state, full=True)

    def on_screen_resume(self) -> None:
        self.draw(self.state, full=True)

    def draw(self, model: ConsoleState, *, full: bool = False) -> None:
        """Called by the app's 4 Hz flush; ages and clocks move once a second even when nothing changed."""
        self._tick += 1
        second = self._tick % 4 == 0
        dirty = model.dirty
        status = (model.layout.status if model.layout is not None else None, self.ctx.across)
        if status != self._layout_status:  # what the footer offers follows the layout (s only with one up)
            self._layout_status = status
            self.refresh_bindings()
        if full or second or HEADER in dirty:
            self.query_one(HeaderBar).draw(model)
        if full or second or (GPUS in dirty and self._tick % 2 == 0):  # 2 Hz: the newest of the 4 Hz samples
            self.query_one(GpuPanel).draw(model)
        table = self.query_one(ServerTable)
        if full or second or SERVERS in dirty:
            table.draw(model)
        d = model.active_diagnosis()
        key = (d.server, d.entry_id) if d is not None else None
        if key != self._diag_key:  # a new diagnosis: its server's log, with the line marked, comes to the pane
            self._diag_key = key
            if d is not None and d.server in model.servers:
                with contextlib.suppress(Exception):
                    table.move_cursor(row=table.get_row_index(d.server))
                self.query_one(LogPane).show(model, d.server)
        if full or second or BAND in dirty:
            band = self.query_one(Band)
            band.book = self.ctx.book  # a diagnosis's fix is described from it for these GPUs
            band.selected = table.selected  # a remote host's server is followed there
            band.draw(model)
        if full or LOG in dirty:
            self.query_one(LogPane).show(model, table.selected)

    # --- selection ---------------------------------------------------------------------------------------------
    def on_server_table_highlighted(self, event: ServerTable.Highlighted) -> None:
        self.query_one(LogPane).show(self.state, event.name)
        band = self.query_one(Band)
        if band.selected != event.name:
            band.selected = event.name
            band.draw(self.state)

    # --- actions -----------------------------------------------------------------------------------------------
    def action_stop(self) -> None:
        view = self.state.server_at(self.query_one(ServerTable).selected)
        self.post_message(StopRequested(view.host if view is not None else ""))

    def action_apply_fix(self) -> None:
        from tui.console.remotes import diagnosis_of

        selected = self.query_one(Band).selected  # a remote host's server: the band shows its host's diagnosis
        v = self.state.server_at(selected) if selected and selected not in self.state.servers else None
        if v is not None and v.host and v.host in self.state.remotes:
            rd = diagnosis_of(self.state.remotes[v.host], v.name)
            if rd is not None:
                self.post_message(FixRequested(rd.entry_id, host=v.host))
                return
        d = self.state.active_diagnosis()
        if d is None:
            self.notify("no diagnosis to fix", timeout=3)
            return
        self.post_message(FixRequested(d.entry_id))

    def action_restart(self) -> None:
        self.post_message(RestartRequested())

    def action_dismiss(self) -> None:
        self.post_message(DismissRequested())

    def action_details(self) -> None:
        from tui.console.screens.modals import TextModal

        d = self.state.active_diagnosis()
        if d is None:
            self.notify("no diagnosis", timeout=3)
            return
        body = Text()
        body.append(printable(d.headline()) + "\n\n", style="bold")
        if d.line:
            body.append("The line:\n", style="bold")
            body.append(d.line.strip() + "\n\n", style="red")
        body.append(d.explanation.strip() + "\n\n")
        fix = shown_fix(d, self.ctx.book, self.state)  # what `a` applies on these GPUs
        body.append("Fix: ", style="bold")
        body.append(fix.text + "\n")
        if fix.changes:
            body.append("a applies:\n" if d.fixable else "", style="bold")
        for c in fix.changes:
            body.append(f"  · {c}\n")
        if d.fixable:
            body.append("\nPress a on the dashboard to apply it and relaunch (up --apply-fix "
                        f"{d.entry_id}).\n", style="dim")
        self.app.push_screen(TextModal(f"{d.entry_id}: {d.title}", body))

    def action_follow(self) -> None:
        self.query_one(LogPane).action_follow()

    def action_log_filter(self) -> None:
        self.query_one(LogView).open_filter()

    def action_log_wrap(self) -> None:
        self.query_one(LogPane).toggle_wrap()

    def action_log_polls(self) -> None:
        self.query_one(LogPane).toggle_polls()

    def action_add_entry(self) -> None:
        """A playbook entry from a line of the log shown: the operator picks the line (the marked root cause, or
        the last error that is not a generic consequence, first), sees and edits the pattern, gives a fix."""
        from tui.console.screens.entryform import AddEntryModal, candidate_lines

        if self.refuse_watch_only():
            return
        name = self.query_one(LogPane).server
        view = self.state.server_at(name) if name else None  # another host's server: the lines its host sent
        lines, pick = candidate_lines(view.logs, self.ctx.book) if view is not None else ([], 0)
        if not lines:
            self.notify("no log line to learn from (the console's own polls are not offered)", timeout=4)
            return
        self.app.push_screen(AddEntryModal(lines, pick))
