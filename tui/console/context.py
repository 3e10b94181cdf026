"""What the console drives (the host, the profiles, the state file, the playbook, the bus) and how it was opened.

The app owns it; the screens get it as an attribute set on them when the app makes them (attributes down) and read
it, never write it: what changes it (a new playbook) reaches the app as a message. No Textual here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tui.core.events import EventBus
from tui.core.host.base import Host, HostOptions
from tui.core.launch.state import StateStore
from tui.core.models import Catalog
from tui.core.playbook import Playbook


@dataclass
class ConsoleContext:
    """What the console drives: the host (real or simulated), profiles, the state file, the playbook."""

    options: HostOptions
    host: Host | None
    catalog: Catalog
    store: StateStore
    book: Playbook | None
    bus: EventBus = field(default_factory=EventBus)
    live: bool = True
    #: label of a replayed recording (None: live)
    replay: str | None = None
    #: ports for the layouts this console launches (endpoint, first server, first side channel); None: defaults
    ports: tuple[int, int, int] | None = None
    #: record the session (a live console does by default)
    record: bool = True
    #: why this console only watches (a browser's, served by ``disagg-tui web`` without ``--operator``): it shows
    #: everything and launches, stops, measures, applies and edits nothing; None: it acts
    watch_only: str | None = None
    #: the other hosts shown (``--hosts``), in order; their streams are the app's (``make_console(remotes=...)``)
    remote_hosts: tuple[str, ...] = ()
    #: the hosts of the layout across hosts this console started (or found up in ``clusters.json``): what ``s``
    #: stops with ``down --hosts`` when no layout of this host is up, or a server of one of them is selected
    across: tuple[str, ...] = ()

    def watch_only_refusal(self) -> str | None:
        """What a watch-only console says when it is asked to act (None: it acts)."""
        if self.watch_only is None:
            return None
        return f"{self.watch_only}: this console shows; it launches, stops, measures and edits nothing"
