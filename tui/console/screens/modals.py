"""Modal dialogs: quitting (it always asks: leave the servers running, the default, or stop them when a layout
is up), a confirmation (a restart, or acting on a layout a running campaign or benchmark holds: ``y`` goes on,
anything else does not), and a text viewer for details (a diagnosis in full, a plan as shell) that copies its
text with ``c``."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from tui.console.safetext import text
from tui.console.state import ConsoleState
from tui.core.printable import printable


def as_text(body: str | Text) -> Text:
    """A dialog's body: a string (a diagnosis, a plan, what a file said) is plain text through the sink, its line
    breaks kept, never markup; a ``Text`` the console built is drawn as it is."""
    return body if isinstance(body, Text) else text(body, keep="\n")


class QuitModal(ModalScreen[str | None]):
    """Quit the console? With a layout of this host up (``offer_stop``), or one across inventory hosts
    (``across``: their names): leave it running (``l``, ``q`` again, the default) or stop its servers (``s``:
    this host's and every part across hosts); otherwise (nothing up, or a replay) ``q`` again quits."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "choose(None)", "cancel"),
        Binding("q", "choose('leave')", "quit"),
        Binding("l", "choose('leave')", "leave running"),
        Binding("s", "choose('stop')", "stop servers"),
    ]

    def __init__(self, state: ConsoleState, *, offer_stop: bool = True, replay: bool = False,
                 across: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.state = state
        self.offer_stop = offer_stop
        self.replay = replay
        self.across = across

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Stopping the servers is offered only when a layout of this host is up."""
        return self.offer_stop or not (action == "choose" and parameters == ("stop",))

    def compose(self) -> ComposeResult:
        if not self.offer_stop:
            with Vertical(id="quit-dialog", classes="dialog"):
                yield Label(Text.assemble(("Quit the replay?" if self.replay else "Quit the console?", "bold")))
                yield Static("The recording is left as it is." if self.replay else
                             "No layout of this host is up; whatever runs detached (a campaign, a benchmark) "
                             "goes on, and a console opened later finds it.")
                with Horizontal(classes="buttons"):
                    yield Button("Quit (q)", id="leave", variant="primary")
                    yield Button("Cancel (esc)", id="cancel")
            return
        lay = self.state.layout
        with Vertical(id="quit-dialog", classes="dialog"):
            yield Label(Text.assemble(("Quit the console?", "bold")))
            # Static, not Label: a long line wraps in the dialog's width (80 columns) instead of being cut
            if lay is not None:  # names from the state file: plain text, never markup
                yield Static(text(f"{lay.topology} of {lay.profile_id} ({lay.status}) is running on this host"
                                  + (f", {lay.started_by}." if lay.started_by else ".")))
            if self.across:
                yield Static(text(f"A layout across {', '.join(self.across)} is up (stopping it runs disagg-tui down "
                                  f"--hosts {','.join(self.across)}: each host stops its own part)."), id="quit-across")
            yield Static("Its servers keep running unless you stop them; a console opened later reattaches.")
            if lay is not None and lay.held_by:
                yield Static(Text(f"It is in use by {lay.held_by}: stopping its servers stops the layout under "
                                  "it.", style="bold yellow"), id="quit-held")
            if self.state.bench.running:
                yield Static("A benchmark runs against it: left running, it goes on (its results are stored); "
                             "stopping the servers stops it first, keeping what it measured.")
            with Horizontal(classes="buttons"):
                yield Button("Leave running (l, q)", id="leave", variant="primary")
                yield Button("Stop servers anyway (s)" if lay is not None and lay.held_by else "Stop servers (s)",
                             id="stop", variant="error")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#leave", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)


class ConfirmModal(ModalScreen[bool]):
    """Go on with something that needs saying first (a restart: what it runs and the fixes it carries; a
    benchmark, a stop or a restart of a layout someone else holds): ``y`` (or its button) goes on; ``n``, Esc or
    Enter on the focused Cancel do not. The key that asked (``R``) never answers it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "choose(True)", "yes"),
        Binding("n,escape", "choose(False)", "cancel"),
    ]

    def __init__(self, title: str, body: str | Text, yes: str) -> None:
        super().__init__()
        self.title_text = printable(title)
        self.body = as_text(body)
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog", classes="dialog"):
            yield Label(Text(self.title_text, style="bold"))
            with VerticalScroll(id="confirm-scroll"):
                yield Static(self.body, id="confirm-body")
            with Horizontal(classes="buttons"):
                yield Button(f"{self.yes} (y)", id="yes", variant="warning")
                yield Button("Cancel (n, esc)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # Enter alone never goes on
        self.query_one("#confirm-scroll").styles.max_height = max(int(self.app.size.height * 0.9) - 8, 3)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_choose(self, choice: bool) -> None:
        self.dismiss(choice)


class TextModal(ModalScreen[None]):
    """A titled, scrolling text that fits the terminal (its keys always in view): ↑/↓, PgUp/PgDn, Home/End scroll
    it, ``c`` copies it (OSC 52), Esc, q or Enter close it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,enter", "close", "close"),
        Binding("c", "copy", "copy"),
        Binding("up", "scroll('up')", "up", show=False),
        Binding("down", "scroll('down')", "down", show=False),
        Binding("pageup", "scroll('page_up')", "page up", show=False),
        Binding("pagedown,space", "scroll('page_down')", "page down", show=False),
        Binding("home", "scroll('home')", "top", show=False),
        Binding("end", "scroll('end')", "end", show=False),
    ]

    def __init__(self, title: str, body: str | Text) -> None:
        super().__init__()
        self.title_text = printable(title)
        self.body = as_text(body)

    def compose(self) -> ComposeResult:
        with Vertical(id="text-dialog", classes="dialog"):
            yield Static(Text(self.title_text, style="bold"), id="text-title")
            with VerticalScroll(id="text-scroll"):
                yield Static(self.body, id="text-body")
            yield Label(Text("↑↓ PgUp PgDn Home End scroll · c copy · esc close", style="dim"), id="text-keys")

    def on_mount(self) -> None:
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """The text scrolls in what the terminal leaves (the dialog is at most 90% of its height), so the keys'
        line stays in view at 80x24."""
        dialog = self.query_one("#text-dialog")
        width = max(dialog.size.width - dialog.styles.gutter.width, 20)
        title_rows = max(1, -(-len(self.title_text) // width))
        # 90% of the terminal, less the dialog's border and padding, the title's rows and the keys' line
        rows = int(self.app.size.height * 0.9) - dialog.styles.gutter.height - title_rows - 1
        self.query_one("#text-scroll").styles.max_height = max(rows, 3)

    def action_scroll(self, where: str) -> None:
        scroll = self.query_one("#text-scroll", VerticalScroll)
        {"up": scroll.scroll_up, "down": scroll.scroll_down, "page_up": scroll.scroll_page_up,
         "page_down": scroll.scroll_page_down, "home": scroll.scroll_home, "end": scroll.scroll_end}[where](
            animate=False)

    def action_close(self) -> None:
        self.dismiss(None)

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.body.plain)
        self.app.notify("copied to the clipboard (OSC 52)", timeout=2)
