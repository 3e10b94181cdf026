"""What a restart (``R``) or an applied fix (``a``) launches, and what the console says before it does: the request
the layout was started with, as the state file keeps it (a layout started from the CLI, by a campaign or by an
earlier console restarts with its own request, fixes and all), and who holds the layout now.

No Textual here: the app calls :func:`prepare` from a worker (it reads the state file and looks at processes) and
shows :func:`dialog_text` in a confirmation dialog.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass

from rich.text import Text

from tui.console.argv import again_request
from tui.console.state import LayoutView
from tui.core.errors import InputError
from tui.core.launch import ownership
from tui.core.launch.state import StateStore
from tui.core.plan.request import LaunchRequest
from tui.core.redact import redact_argv

#: the statuses of a layout whose servers serve (or are starting): a restart replaces it
SERVING = ("starting", "ready", "degraded")


@dataclass(frozen=True, slots=True)
class Relaunch:
    """A launch again of the layout shown: the request (``replace`` set when the layout is up), whether it is the
    stored one, the fixes it carries (entry id, the changes its fix makes where known), who started the layout and
    who holds it now."""

    request: LaunchRequest
    stored: bool
    fixes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    started_by: str = ""
    holders: tuple[ownership.Holder, ...] = ()
    layout: str = ""  # "dp2 of qwen3.6-27b-nvfp4 (ready)"

    @property
    def command(self) -> str:
        """``disagg-tui up ...`` as shown (secrets redacted; the console's host flags left out)."""
        return " ".join(shlex.quote(a) for a in redact_argv(["disagg-tui", "up", *self.request.to_argv()]))

    @property
    def serving(self) -> bool:
        return self.request.replace


def prepare(store: StateStore, lay: LayoutView | None, last: LaunchRequest | None, *,
            ports: tuple[int, int, int] | None, apply_fix: str | None = None) -> Relaunch | None:
    """The launch again of ``lay`` (the layout shown): its stored request when the state file has one (``apply_fix``
    added to the fixes it carries), else this console's last launch of it or its profile's defaults (an older
    record, a layout no longer in the state file); None when there is nothing to launch again. Blocking (the state
    file, psutil); an InputError when the stored request cannot be launched (a secret not set here)."""
    record = None
    if lay is not None:
        try:
            record = store.read().get(lay.id)
        except InputError:
            record = None
    serving = lay is not None and lay.status in SERVING
    stored = ownership.stored_request(record) if record is not None else None
    if stored is not None:
        request = ownership.with_fix(stored, apply_fix) if apply_fix else stored
        request = dataclasses.replace(request, replace=serving)
    else:
        fallback = again_request(last, lay.profile_id if lay else None, lay.topology if lay else None, ports=ports,
                                 apply_fix=apply_fix, replace=serving)
        if fallback is None:
            return None
        request = fallback
    known = dict(lay.fixes) if lay is not None else {}
    fixes = tuple((i, known.get(i, ())) for i in ownership.fix_ids(request))
    held = tuple(ownership.holders(record)) if record is not None and serving else ()
    return Relaunch(request=request, stored=stored is not None, fixes=fixes,
                    started_by=ownership.started_by_text(record) if record is not None else "", holders=held,
                    layout=f"{lay.topology} of {lay.profile_id} ({lay.status})" if lay is not None else "")


def dialog_text(r: Relaunch, *, fix: str | None = None) -> Text:
    """What a restart (or an applied fix, ``fix``) will run, the fixes it carries, and who it acts under."""
    t = Text()
    if r.layout:
        t.append(f"{r.layout}" + (f", {r.started_by}" if r.started_by else "") + ".\n")
    if fix:
        t.append("Its fix applied, it is launched again" if not r.serving else
                 "Its servers stop, then it is launched again with the fix")
    else:
        t.append("Its servers stop, then it is launched again" if r.serving else "It is launched again")
    t.append(" with the request it was started with:\n\n" if r.stored else
             ": no request was recorded with it, so it is launched from this console's last launch of it, or "
             "its profile's defaults:\n\n")
    t.append(f"  {r.command}\n\n", style="bold")
    if r.fixes:
        t.append("Fixes it carries: " if len(r.fixes) > 1 else "Fix it carries: ", style="bold")
        t.append(", ".join(f"{i}" + (f" ({'; '.join(c)})" if c else "") for i, c in r.fixes) + "\n")
    else:
        t.append("It carries no playbook fix.\n", style="dim")
    for h in r.holders:
        t.append(f"\n⚠ In use by {h.text}: this stops the layout under it.", style="bold yellow")
    return t


__all__ = ["SERVING", "Relaunch", "dialog_text", "prepare"]
