"""The base of the console's mode screens: what the app hands down to each, and the one way up for failures.

The app makes each mode's screen with the console's context and state (attributes down: a screen reads them, it
never reaches into the app), replaces ``state`` when a replay's seek rebuilds it, and hears the screen through
messages (:mod:`tui.console.messages`). Textual's ``Worker.StateChanged`` does not bubble: a failure of a screen's
own worker (reading results, planning, exporting) would stop at the screen. Every screen and dialog of the console
forwards it as :class:`~tui.console.messages.WorkerFailed`, so the app tells the operator of it in the one way it
tells its own workers' failures.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

from textual import events
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Input, Select
from textual.worker import Worker, WorkerState

from tui.console.context import ConsoleContext
from tui.console.messages import WorkerFailed
from tui.console.state import ConsoleState

T = TypeVar("T")


def forward_failure(node: Screen[Any], event: Worker.StateChanged) -> None:
    """A worker of ``node`` that ended in an error, posted upward as ``WorkerFailed``."""
    if event.state == WorkerState.ERROR and event.worker.error is not None:
        node.post_message(WorkerFailed(event.worker.description or event.worker.group, event.worker.error))


class ConsoleScreen(Screen[None]):
    """A mode of the console (dashboard, launch, bench, results, campaign, playbook).

    A printable key typed where the operator types never leaves the screen or the app: an Input takes its own; on
    one of the lists of ``TYPE_TO_SEARCH`` it starts a search in that Input (the launch screen's models and
    topologies, the playbook's entries: "qwen3.6" typed on the topology list filters the models, its ``q`` never
    quits); on a drop-down (Select) it does nothing. The screen's own keys (``/`` on the playbook) keep working.
    """

    #: (the lists where typing searches, the Input the typed text goes to, where Enter in that Input goes or ""),
    #: as CSS selectors
    TYPE_TO_SEARCH: ClassVar[tuple[str, str, str] | None] = None

    def __init__(self, ctx: ConsoleContext, state: ConsoleState) -> None:
        super().__init__()
        #: what the console drives (the host, profiles, the playbook): read here, changed only by the app
        self.ctx = ctx
        #: the console's state, folded from the events (the app sets a new one when a replay seeks)
        self.state = state

    #: the screen's actions that launch, stop or measure: a replay does not offer them (hidden from the footer and
    #: the palette, and their keys do nothing)
    LIVE_ACTIONS: ClassVar[frozenset[str]] = frozenset()

    @property
    def replaying(self) -> bool:
        """This console replays a recording: it shows it, and offers nothing that launches, stops or measures."""
        return self.ctx.replay is not None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (self.replaying and action in self.LIVE_ACTIONS)

    def refuse_watch_only(self) -> bool:
        """True (and a notification saying why) when this console only watches: what a screen changes itself (the
        playbook) goes through here; what it asks the app for goes through the app's own gate."""
        refusal = self.ctx.watch_only_refusal()
        if refusal is not None:
            self.notify(refusal, title="watch-only", severity="warning", timeout=8)
            return True
        return False

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        forward_failure(self, event)

    # --- typing ------------------------------------------------------------------------------------------------
    def _own_keys(self) -> set[str]:
        keys: set[str] = set()
        for b in self.BINDINGS:
            if isinstance(b, Binding):
                keys.update(k.strip() for k in b.key.split(","))
        return keys

    def _in(self, widget: Widget | None, selector: str) -> bool:
        return widget is not None and any(widget is w for w in self.query(selector))

    def take_typed_key(self, event: events.Key) -> bool:
        """Called by the app for each key before it goes anywhere: a printable key typed on a searchable list
        begins a search (the search box, emptied, takes the focus at once, so this key and the ones typed after it
        in the same burst reach it), and Enter in the search box moves the focus on at once (the keys after it in
        the burst, ``Up`` in "qwen3.6 Enter Up", reach the list); typed on a drop-down a key is dropped. True: the
        key is taken (not delivered)."""
        focused = self.focused
        search = self.TYPE_TO_SEARCH
        if search is not None and event.key == "enter" and search[2] and self._in(focused, search[1]):
            self.set_focus(self.query_one(search[2]))
            return True
        if not event.is_printable or event.character is None or event.key in self._own_keys():
            return False
        if search is not None and self._in(focused, search[0]):
            box = self.query_one(search[1], Input)
            box.value = ""
            self.set_focus(box)
            return False  # delivered to the focused widget: now the search box
        return isinstance(focused, Select)


class ConsoleModal(ModalScreen[T], Generic[T]):
    """A dialog of the console: its workers' failures reach the operator like a screen's."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        forward_failure(self, event)
