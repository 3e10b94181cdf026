"""Which stored runs a view compares: every run, or one campaign's (the CLI's ``results --campaign NAME``, the
results screen's scope, their exports).

A campaign's runs are the ones stored in its folder (beside its ``campaign.json``). A run measured on one of its
layouts but stored elsewhere (a second console's benchmark on the layout the campaign brought up) is not part of
it: a campaign's scope leaves it out and says so, and the scope of every run labels it (``not part of campaign
NAME``: :mod:`tui.core.bench.setupkey`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tui.core import safeio
from tui.core.bench.store import Run
from tui.core.errors import InputError

#: the scope of every stored run
ALL_RUNS = ""


@dataclass(frozen=True, slots=True)
class Scoped:
    """The runs of a scope; ``apart``: those measured on the campaign's layouts that are not part of it."""

    campaign: str
    runs: list[Run] = field(default_factory=list)
    apart: list[Run] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"campaign {self.campaign}" if self.campaign else "all runs"


def campaign_names(runs: Sequence[Run]) -> list[str]:
    """The campaigns the runs are stored in (folders with a ``campaign.json``), the newest first."""
    first: dict[str, float] = {}
    for r in runs:
        folder = r.campaign_folder
        if folder is not None:
            first[folder.name] = min(first.get(folder.name, r.meta.started), r.meta.started)
    return sorted(first, key=lambda n: (-first[n], n))


def scope_runs(runs: Sequence[Run], campaign: str = ALL_RUNS) -> Scoped:
    """The runs of ``campaign`` (every run for :data:`ALL_RUNS`); InputError naming the campaigns there are when no
    run is stored in a campaign of that name."""
    if not campaign:
        return Scoped(ALL_RUNS, list(runs))
    mine = [r for r in runs if (f := r.campaign_folder) is not None and f.name == campaign]
    if not mine:
        known = campaign_names(runs)
        raise InputError(f"no campaign {safeio.shown(campaign, 80)!r} among the stored runs", field="--campaign",
                         hint=("campaigns: " + ", ".join(known[:12]) + (" ..." if len(known) > 12 else ""))
                         if known else "no campaign is stored yet ('disagg-tui run' makes one)")
    layouts = {r.meta.layout_id for r in mine if r.meta.layout_id}
    chosen = {id(r) for r in mine}
    apart = [r for r in runs if id(r) not in chosen and r.meta.layout_id and r.meta.layout_id in layouts]
    return Scoped(campaign, mine, apart)


def apart_note(scoped: Scoped) -> str:
    """The line that names the runs a campaign's scope left out ("" when none)."""
    if not scoped.apart:
        return ""
    return (f"NOT PART OF CAMPAIGN {scoped.campaign} (left out): " + "; ".join(
        f"{r.id} on its {r.meta.topology or '?'} layout" + (f" ({r.unusable})" if r.unusable else "")
        for r in scoped.apart))
