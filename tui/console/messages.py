"""What the console's screens and dialogs say upward: the operator's intents (``…Requested``) and facts (past tense).

Attributes down, messages up: a screen gets what it draws from the app as attributes set on it (the console's
state, its context), and it never calls into the app; what the operator asks for is posted as one of these
messages, which bubble from the screen to ``ConsoleApp``. The app owns the jobs (``up``, ``down``, ``bench``,
``run`` started detached), the benchmark it follows, the recording and the state, and it handles every message
here: it refuses what a replay cannot do, and every refusal and failure reaches the operator as a notification.
No message holds a widget; each carries plain data (a request, a workload, names).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from tui.core.models import Workload
from tui.core.plan.request import LaunchRequest
from tui.core.playbook import Playbook


class LaunchRequested(Message):
    """Launch the plan a request describes (``disagg-tui up`` with ``request.to_argv()``), started detached.

    Posted by the launch screen (ctrl+l); the app refuses it in a replay or while a layout is up, remembers it as
    the last launch (what restart and apply-fix repeat), starts ``up`` and shows the dashboard. ``hosts``: a layout
    across these inventory hosts (``up --hosts A,B``), the console then following each of them."""

    def __init__(self, request: LaunchRequest, hosts: tuple[str, ...] = ()) -> None:
        self.request = request
        self.hosts = hosts
        super().__init__()


class StopRequested(Message):
    """Stop every server of the layout that is up (``disagg-tui down``): the dashboard's ``s``, the palette.
    ``host``: the remote host of the server selected (its layout across hosts is the one stopped)."""

    def __init__(self, host: str = "") -> None:
        self.host = host
        super().__init__()


class RestartRequested(Message):
    """Launch the layout shown again, as it was last launched (``R``)."""


class FixRequested(Message):
    """Apply the fix of the diagnosis shown and relaunch (``up --apply-fix ENTRY``): the dashboard's ``a``;
    ``host``: the diagnosis is that host's, of a server of the layout across hosts (``up --hosts … --apply-fix``)."""

    def __init__(self, entry_id: str, host: str = "") -> None:
        self.entry_id = entry_id
        self.host = host
        super().__init__()


class DismissRequested(Message):
    """Put the diagnosis shown away (or, with none, the failed layout it was about): the dashboard's ``x``."""


class BenchRequested(Message):
    """Benchmark what is up with ``workload`` (``disagg-tui bench`` detached, followed): the bench screen's ctrl+s.

    ``slo`` is the goodput objective (``{"ttft": ms, "tpot": ms}``), ``runner`` ``ours`` or ``vllm``."""

    def __init__(self, workload: Workload, slo: dict[str, float], runner: str) -> None:
        self.workload = workload
        self.slo = slo
        self.runner = runner
        super().__init__()


class BenchStopRequested(Message):
    """Stop the benchmark the console follows (what was measured is kept): the bench screen's ctrl+x."""


@dataclass(frozen=True, slots=True)
class CampaignChoice:
    """A campaign as the campaign screen's form describes it (the ``run`` command's flags)."""

    model: str
    topologies: tuple[str, ...]
    workloads: tuple[str, ...]
    rates: str | None = None
    repeat: int = 1
    num_prompts: int | None = None
    runner: str = "ours"
    #: the knob axes (``[ROLE.]NAME=V1,V2``, each a ``run --knob``); () for none
    knobs: tuple[str, ...] = ()


class CampaignRequested(Message):
    """Start a campaign (``disagg-tui run`` detached): the campaign screen's ctrl+s."""

    def __init__(self, choice: CampaignChoice) -> None:
        self.choice = choice
        super().__init__()


class CampaignResumeRequested(Message):
    """Run a stored campaign again under its own name (``run`` skips the cells already complete): ctrl+r."""

    def __init__(self, name: str, choice: CampaignChoice) -> None:
        self.name = name
        self.choice = choice
        super().__init__()


class PlaybookChanged(Message):
    """The operator's playbook was written (an entry added): ``book`` is it read back, with the new entry. The app
    hands it to the layout follower (the starts to come are matched against it) and to the screens."""

    def __init__(self, book: Playbook) -> None:
        self.book = book
        super().__init__()


class WorkerFailed(Message):
    """A screen's or dialog's worker ended with an error (``Worker.StateChanged`` does not bubble, so a screen
    forwards it): the app tells the operator the way it tells its own workers' failures."""

    def __init__(self, what: str, error: BaseException) -> None:
        self.what = what
        self.error = error
        super().__init__()
