"""The campaigns stored on this host, read back: each campaign folder's spec, when it was made, and its runs.

A campaign folder may be a teammate's copy: its ``campaign.json`` is read with :func:`~tui.core.bench.campaign.
read_spec` and each run folder with :func:`~tui.core.bench.store.load_run` (a run whose process went away is
incomplete, as everywhere else); a run folder that does not read is kept apart with its one-line error, never a
traceback. The console's campaign screen draws from this; it names no file of a run folder itself.

While a campaign runs, :func:`eta` says when it should end, from what it has measured so far: the cells left times
the mean wall time of the cells measured (a run's start to its end), less what the cell being measured has already
taken, plus the layouts still to bring up times the mean time a layout took between the previous one's last cell
(or the campaign's start) and its own first cell (its bring-up, and the tear-down and GPU wait before it).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from tui.core import paths, safeio, typedread
from tui.core.bench.campaign import CAMPAIGN_FILE, CampaignSpec, read_spec
from tui.core.bench.store import Run, find_runs, load_run
from tui.core.errors import AppError, InputError
from tui.core.plan.knobs import KnobCatalog, configurations

#: run folders of one campaign read at most (a real one has a few dozen cells)
MAX_RUNS = 10_000
#: the states a run ends in (a cell in one of them is done)
ENDED = ("complete", "failed", "incomplete")


@dataclass(frozen=True, slots=True)
class StoredCampaign:
    """A campaign folder: its spec, when it was made (0 when its file does not say), its runs that read, and the
    run folders that do not, each with its error."""

    directory: Path
    spec: CampaignSpec
    created: float
    runs: tuple[Run, ...]
    damaged: tuple[tuple[Path, InputError], ...] = ()

    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def running(self) -> bool:
        """Some run of it is being measured now (its client's process is alive)."""
        return any(r.meta.status == "running" for r in self.runs)

    @property
    def done(self) -> int:
        return sum(1 for r in self.runs if r.meta.status in ENDED)

    @property
    def total(self) -> int:
        """The cells the spec makes (every rate of a list; ``auto`` counts as one until its rates are run), or as
        many as are stored when more are."""
        s = self.spec
        rates = len(s.rates) if isinstance(s.rates, list) else 1
        cells = _layouts(s) * len(s.workloads) * max(s.repeat, 1) * max(rates, 1)
        return max(cells, len(self.runs) + len(self.damaged))


def _layouts(spec: CampaignSpec) -> int:
    """The layouts a spec brings up: one per topology, or one per topology × knob configuration (an axis a
    topology has no server for drops out there); a catalogue that no longer reads the axes counts one each."""
    if not spec.knobs:
        return len(spec.topologies)
    try:
        axes = KnobCatalog.load().axes(spec.knobs)
        return sum(len(configurations(axes, t)) for t in spec.topologies)
    except AppError:
        return len(spec.topologies)


def _created(directory: Path) -> float:
    """When the campaign was made, as its file says (a bounded epoch time; 0 when it says nothing usable)."""
    try:
        raw = safeio.load_json(directory / CAMPAIGN_FILE, "run record")
    except InputError:
        return 0.0
    created = raw.get("created") if isinstance(raw, dict) else None
    if isinstance(created, bool) or not isinstance(created, int | float) or not 0 <= created <= typedread.TIME_MAX:
        return 0.0
    return float(created)


def read_campaign(directory: Path) -> StoredCampaign:
    """A campaign folder as stored (blocking: call it from a thread); InputError naming the file when its spec
    does not read."""
    spec = read_spec(directory / CAMPAIGN_FILE)
    try:
        run_dirs = find_runs([str(directory)])[:MAX_RUNS]
    except InputError:  # no run folder yet: a campaign just begun
        run_dirs = []
    runs: list[Run] = []
    damaged: list[tuple[Path, InputError]] = []
    for d in run_dirs:
        try:
            runs.append(load_run(d))
        except InputError as err:
            damaged.append((d, err))
    return StoredCampaign(directory=directory, spec=spec, created=_created(directory), runs=tuple(runs),
                          damaged=tuple(damaged))


def stored_campaigns(root: Path | None = None, limit: int = 20) -> list[StoredCampaign]:
    """The newest ``limit`` campaigns of the runs directory (by their spec file's time), newest first; one whose
    spec does not read is left out. Blocking: call it from a thread."""
    base = root or paths.runs_dir()
    if not os.path.isdir(base):
        return []
    names, _more = safeio.scan_dir(base)
    stamped = []
    for n in names:
        f = base / n / CAMPAIGN_FILE
        try:
            st = f.stat()
        except OSError:
            continue
        if f.is_file():
            stamped.append((st.st_mtime, base / n))
    stamped.sort(key=lambda t: t[0], reverse=True)
    out = []
    for _, d in stamped[:limit]:
        try:
            out.append(read_campaign(d))
        except InputError:
            continue
    return out


@dataclass(frozen=True, slots=True)
class Eta:
    """When a running campaign should end, and what that is computed from (see the module)."""

    seconds: float
    cells_left: int  # not counting the cell being measured
    per_cell_s: float  # the mean wall time of the cells measured
    measured: int  # how many cells that mean is of
    current_left_s: float  # what the cell being measured should still take
    layouts_left: int
    per_layout_s: float | None  # the mean time a layout took to come up (None: none timed yet)

    def how(self) -> str:
        """The computation in words: ``3 cells × 41 s (mean of 2 measured) + 1 layout × 35 s to bring up``."""
        parts = [f"{self.cells_left} cell(s) × {span(self.per_cell_s)} (mean of {self.measured} measured)"]
        if self.current_left_s > 0:
            parts.append(f"{span(self.current_left_s)} left of the current cell")
        if self.layouts_left:
            parts.append(f"{self.layouts_left} layout(s) × {span(self.per_layout_s)} to bring up"
                         if self.per_layout_s is not None else f"{self.layouts_left} layout(s) to bring up (not "
                                                                "timed yet)")
        return " + ".join(parts)


def span(seconds: float) -> str:
    """A duration as the campaign screen says it: 45s, 3m 05s, 1h 02m."""
    whole = max(round(seconds), 0)
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h {m:02d}m" if h else f"{m}m {s:02d}s" if m else f"{s}s"


def eta(stored: StoredCampaign, now: float | None = None) -> Eta | None:
    """When ``stored`` (running) should end, from the cells it measured (see the module); None when it is not
    running or has measured no cell yet to go by."""
    if not stored.running:
        return None
    now = time.time() if now is None else now
    timed = [r for r in stored.runs if r.meta.status == "complete" and r.meta.ended and r.meta.ended >= r.meta.started]
    if not timed:
        return None
    per_cell = sum((r.meta.ended or 0.0) - r.meta.started for r in timed) / len(timed)
    current = [r for r in stored.runs if r.meta.status == "running"]
    current_left = sum(max(per_cell - max(now - r.meta.started, 0.0), 0.0) for r in current)
    cells_left = max(stored.total - stored.done - len(current), 0)
    # each layout's time to come up: from the previous layout's last end (the campaign's start for the first) to
    # its own first start
    order: list[str] = []
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for r in sorted(stored.runs, key=lambda r: r.meta.started):
        t = r.meta.topology
        if t not in first:
            order.append(t)
            first[t] = r.meta.started
        last[t] = max(last.get(t, 0.0), r.meta.ended or r.meta.started)
    gaps = []
    for i, t in enumerate(order):
        before = last[order[i - 1]] if i else stored.created
        if before and first[t] >= before:
            gaps.append(first[t] - before)
    layouts_left = len([t for t in stored.spec.topologies if t not in first])
    per_layout = sum(gaps) / len(gaps) if gaps else None
    seconds = cells_left * per_cell + current_left + layouts_left * (per_layout or 0.0)
    return Eta(seconds=seconds, cells_left=cells_left, per_cell_s=per_cell, measured=len(timed),
               current_left_s=current_left, layouts_left=layouts_left, per_layout_s=per_layout)
