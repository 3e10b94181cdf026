"""The campaigns of this host as the campaign screen draws them: one row per cell (its status and figures), from
the core's reading of each campaign folder (:mod:`tui.core.bench.campaigns`). No Textual, and no file of a run
folder named here: the core reads them, checked as every stored run is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core import safeio
from tui.core.bench.campaigns import StoredCampaign, stored_campaigns
from tui.core.bench.store import Run, rate_label


@dataclass(frozen=True, slots=True)
class CellState:
    topology: str
    workload: str
    rate: str
    repeat: int
    status: str  # complete | incomplete | failed | running | damaged
    run_dir: str = ""
    message: str = ""
    output_tps: float | None = None


@dataclass(frozen=True, slots=True)
class CampaignState:
    name: str
    directory: Path
    spec: dict[str, Any]
    cells: tuple[CellState, ...]
    created: float
    running: bool  # some run of it is being measured now (its client's process is alive)
    done: int
    total: int


def _figure(summary: dict[str, Any], key: str) -> float | None:
    v = summary.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _cell(run: Run) -> CellState:
    m = run.meta
    return CellState(topology=m.topology, workload=m.workload, rate=rate_label(m.request_rate), repeat=m.repeat,
                     status=m.status, run_dir=str(run.path), message=safeio.shown(m.message),
                     output_tps=_figure(run.summary, "output_throughput"))


def campaign_state(stored: StoredCampaign) -> CampaignState:
    """What the screen draws of a stored campaign: a damaged run folder is a ``damaged`` cell with its error."""
    cells = [_cell(r) for r in stored.runs]
    cells += [CellState(topology=safeio.shown(d.name, 80), workload="", rate="", repeat=1, status="damaged",
                        run_dir=str(d), message=err.one_line()) for d, err in stored.damaged]
    return CampaignState(name=stored.name, directory=stored.directory, spec=stored.spec.to_dict(),
                         cells=tuple(cells), created=stored.created, running=stored.running, done=stored.done,
                         total=stored.total)


def campaigns(root: Path | None = None, limit: int = 20) -> list[CampaignState]:
    """The newest campaigns of the runs directory, newest first (blocking: call it from a thread)."""
    return [campaign_state(c) for c in stored_campaigns(root, limit)]
