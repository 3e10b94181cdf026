"""Running the console in the foreground: the app on the host the options select, its exit code."""

from __future__ import annotations

from collections.abc import Mapping

from tui.console.app import make_console
from tui.console.remotes import RemoteSource
from tui.core.host.base import Host, HostOptions


def run_console(options: HostOptions, *, host: Host | None = None,
                remotes: Mapping[str, RemoteSource] | None = None) -> int | None:
    app = make_console(options, host=host, remotes=remotes)
    return app.run()
