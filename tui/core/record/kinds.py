"""Every event class of the core, registered (each module's import registers its classes with the bus)."""

from __future__ import annotations

import functools


@functools.cache
def load_event_kinds() -> None:
    """Import every module that defines events, so ``event_from_dict`` knows every kind a recording holds."""
    import tui.core.bench.events
    import tui.core.guided
    import tui.core.launch.events
    import tui.core.playbook.events
    import tui.core.remote.events  # another host's ticks, unreachable and reconnected (the console's --hosts)
    import tui.core.telemetry.events  # noqa: F401 - imported for their registrations
