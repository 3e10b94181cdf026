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

from textual.screen import ModalScreen, Screen
from textual.worker import Worker, WorkerState

from tui.console.context import ConsoleContext
from tui.console.messages import WorkerFailed
from tui.console.model import ConsoleModel

T = TypeVar("T")


def forward_failure(node: Screen[Any], event: Worker.StateChanged) -> None:
    """A worker of ``node`` that ended in an error, posted upward as ``WorkerFailed``."""
    if event.state == WorkerState.ERROR and event.worker.error is not None:
        node.post_message(WorkerFailed(event.worker.description or event.worker.group, event.worker.error))


class ConsoleScreen(Screen[None]):
    """A mode of the console (dashboard, launch, bench, results, campaign, playbook)."""

    def __init__(self, ctx: ConsoleContext, state: ConsoleModel) -> None:
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

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        forward_failure(self, event)


class ConsoleModal(ModalScreen[T], Generic[T]):
    """A dialog of the console: its workers' failures reach the operator like a screen's."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        forward_failure(self, event)
