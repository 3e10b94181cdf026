"""The campaigns stored on this host, read back: each campaign folder's spec, when it was made, and its runs.

A campaign folder may be a teammate's copy: its ``campaign.json`` is read with :func:`~tui.core.bench.campaign.
read_spec` and each run folder with :func:`~tui.core.bench.store.load_run` (a run whose process went away is
incomplete, as everywhere else); a run folder that does not read is kept apart with its one-line error, never a
traceback. The console's campaign screen draws from this; it names no file of a run folder itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tui.core import paths, safeio, typedread
from tui.core.bench.campaign import CAMPAIGN_FILE, CampaignSpec, read_spec
from tui.core.bench.store import Run, find_runs, load_run
from tui.core.errors import InputError

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
        cells = len(s.topologies) * len(s.workloads) * max(s.repeat, 1) * max(rates, 1)
        return max(cells, len(self.runs) + len(self.damaged))


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
