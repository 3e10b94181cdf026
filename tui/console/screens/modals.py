"""Modal dialogs: quitting (it always asks: leave the servers running, the default, or stop them when a layout
is up), and a text viewer for details (a diagnosis in full, a plan as shell) that copies its text with ``c``."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from tui.console.model import ConsoleModel


class QuitModal(ModalScreen[str | None]):
    """Quit the console? With a layout of this host up (``offer_stop``): leave it running (``l``, ``q`` again,
    the default) or stop its servers (``s``); otherwise (nothing up, or a replay) ``q`` again quits."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "choose(None)", "cancel"),
        Binding("q", "choose('leave')", "quit"),
        Binding("l", "choose('leave')", "leave running"),
        Binding("s", "choose('stop')", "stop servers"),
    ]

    def __init__(self, model: ConsoleModel, *, offer_stop: bool = True, replay: bool = False) -> None:
        super().__init__()
        self.model = model
        self.offer_stop = offer_stop
        self.replay = replay

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
        lay = self.model.layout
        what = f"{lay.topology} of {lay.profile_id} ({lay.status})" if lay else "the layout"
        with Vertical(id="quit-dialog", classes="dialog"):
            yield Label(Text.assemble(("Quit the console?", "bold")))
            # Static, not Label: a long line wraps in the dialog's width (80 columns) instead of being cut
            yield Static(f"{what} is running on this host.")
            yield Static("Its servers keep running unless you stop them; a console opened later reattaches.")
            if self.model.bench.running:
                yield Static("A benchmark runs against it: left running, it goes on (its results are stored); "
                             "stopping the servers stops it first, keeping what it measured.")
            with Horizontal(classes="buttons"):
                yield Button("Leave running (l, q)", id="leave", variant="primary")
                yield Button("Stop servers (s)", id="stop", variant="error")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#leave", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)


class TextModal(ModalScreen[None]):
    """A titled, scrolling text; ``c`` copies it (OSC 52), any other key or a click outside closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,enter", "close", "close"),
        Binding("c", "copy", "copy"),
    ]

    def __init__(self, title: str, body: str | Text) -> None:
        super().__init__()
        self.title_text = title
        self.body = body

    def compose(self) -> ComposeResult:
        with Vertical(id="text-dialog", classes="dialog"):
            yield Label(Text(self.title_text, style="bold"))
            with VerticalScroll():
                yield Static(self.body, id="text-body")
            yield Label(Text("c copy · esc close", style="dim"))

    def action_close(self) -> None:
        self.dismiss(None)

    def action_copy(self) -> None:
        plain = self.body.plain if isinstance(self.body, Text) else str(self.body)
        self.app.copy_to_clipboard(plain)
        self.app.notify("copied to the clipboard (OSC 52)", timeout=2)
