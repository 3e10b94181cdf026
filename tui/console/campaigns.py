"""The campaigns of this host as the campaign screen draws them: one row per cell (its status and figures), the best
of each objective marked, the recommendation once the campaign has ended and, while it runs, when it should end;
from the core's reading of each campaign folder (:mod:`tui.core.bench.campaigns`) and the same comparison and
recommendation the results show (:mod:`tui.core.bench.table`, :mod:`tui.core.bench.recommend`). No Textual, and no
file of a run folder named here: the core reads them, checked as every stored run is.

A campaign with knob axes (``run --knob``) has a layout per topology and knob configuration: a cell says its
configuration (``attn=triton mnbt=2048``, the run's stored knobs) and the grid a row per layout, the ones not run yet
from the campaign's axes (the catalogue's configurations of each topology)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.core import safeio
from tui.core.bench import recommend as rec_mod
from tui.core.bench import table
from tui.core.bench.campaigns import Eta, StoredCampaign, eta, stored_campaigns
from tui.core.bench.store import Run, rate_label, run_workloads
from tui.core.errors import AppError
from tui.core.plan.knobs import KnobCatalog, configurations

#: the objectives a grid marks: (column of the comparison, what the mark says)
OBJECTIVES = (("output_throughput", "most output tok/s"), ("mean_tpot_ms", "lowest mean TPOT"),
              ("request_goodput", "most goodput"))


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
    #: why this run is in no figure ("": it measured something): a complete run that completed no request too
    left_out: str = ""
    #: its knob configuration (``attn=triton mnbt=2048``); "" without knobs
    config: str = ""

    @property
    def layout(self) -> str:
        """Its topology and knob configuration (``tp1 [attn=triton]``): a row of the grid."""
        return layout_name(self.topology, self.config)


def layout_name(topology: str, config: str) -> str:
    return f"{topology} [{config}]" if config else topology


def config_label(knobs: dict[str, str]) -> str:
    """A run's stored knobs as its configuration's label (``attn=triton mnbt=2048``)."""
    return " ".join(f"{k}={v}" for k, v in knobs.items())


@dataclass(frozen=True, slots=True)
class Figures:
    """A (topology, workload, rate) of the grid as the comparison has it: means over its good repeats, and the
    objectives it is best at among the campaign's layouts."""

    values: dict[str, float] = field(default_factory=dict)
    repeats: int = 0
    best: frozenset[str] = frozenset()  # keys of OBJECTIVES


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
    figures: dict[tuple[str, str, str], Figures] = field(default_factory=dict)  # (layout, workload, rate)
    #: the recommendation's lines once the campaign has ended (every cell done, nothing running)
    recommendation: tuple[str, ...] = ()
    eta: Eta | None = None
    #: the knob configurations of each topology (its axes crossed, as ``run`` crosses them); {} without knobs
    configs: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def layouts(self) -> list[tuple[str, str]]:
        """Every (topology, configuration) of the campaign, in the order it runs them; those of cells only the
        folder has (axes since edited) after them."""
        topos = list(self.spec.get("topologies", [])) or sorted({c.topology for c in self.cells})
        out = [(t, cfg) for t in topos for cfg in (self.configs.get(t) or ("",))]
        for c in self.cells:
            if c.status != "damaged" and (c.topology, c.config) not in out:
                out.append((c.topology, c.config))
        return out

    @property
    def finished(self) -> bool:
        return not self.running and self.total > 0 and self.done >= self.total


def _figure(summary: dict[str, Any], key: str) -> float | None:
    v = summary.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _cell(run: Run) -> CellState:
    m = run.meta
    return CellState(topology=m.topology, workload=m.workload, rate=rate_label(m.request_rate), repeat=m.repeat,
                     status=m.status, run_dir=str(run.path), message=safeio.shown(m.message),
                     output_tps=_figure(run.summary, "output_throughput"),
                     left_out="" if m.status == "running" else run.unusable, config=config_label(m.knobs))


def _figures(cells: list[table.Cell]) -> dict[tuple[str, str, str], Figures]:
    marks = table.best_marks(cells)
    out: dict[tuple[str, str, str], Figures] = {}
    for c in cells:
        if not c.ranked:
            continue
        layout = layout_name(c.topology, config_label(c.runs[0].meta.knobs) if c.runs else "")
        out[(layout, c.workload, rate_label(c.rate))] = Figures(
            values={k: iv.mean for k, iv in c.values.items()}, repeats=len(c.runs),
            best=frozenset(k for k, _ in OBJECTIVES if marks.get((c.key, k))))
    return out


def _summary_lines(rec: rec_mod.Recommendation) -> tuple[str, ...]:
    titles = {"max_throughput": "max throughput", "min_tpot": "min TPOT", "max_goodput": "max goodput"}
    lines = [f"{title}: {rec.summary.get(key, 'not measured')}" for key, title in titles.items()]
    lines += [f"to compare on {w}: {command}" for w, command in rec.to_compare.items()]
    return tuple(lines)


#: a finished campaign's figures and recommendation, by its folder and the state of its runs (read again only when
#: a run changed: goodput is computed from every run's records)
_JUDGED: dict[tuple[str, tuple[tuple[str, str, float], ...]], tuple[dict[tuple[str, str, str], Figures],
                                                                   tuple[str, ...]]] = {}


def _judge(stored: StoredCampaign, gpus: int | None, finished: bool
           ) -> tuple[dict[tuple[str, str, str], Figures], tuple[str, ...]]:
    """The grid's figures and best marks, and, once ``finished``, the recommendation (the results' own)."""
    stamp = tuple(sorted((r.id, r.meta.status, r.meta.ended or 0.0) for r in stored.runs))
    key = (str(stored.directory), stamp)
    if finished and key in _JUDGED:
        return _JUDGED[key]
    slo = stored.spec.goodput or None
    cells = table.build_cells(list(stored.runs), slo)
    if not finished:
        return _figures(cells), ()
    failed = [f"{r.meta.topology}/{r.meta.workload}@{rate_label(r.meta.request_rate)}: {r.unusable}"
              for r in stored.runs if r.unusable]
    try:
        rec = rec_mod.recommend(cells, run_workloads(stored.runs), gpus=gpus, slo=slo, repeats=stored.spec.repeat,
                                failed=failed)
        if rec.slo_derived:  # goodput under the SLO the recommendation judged by, as the results show it
            cells = table.build_cells(list(stored.runs), slo_by_workload=rec.slo)
        lines = _summary_lines(rec)
    except (AppError, KeyError, ValueError) as err:  # as the results screen: a run that does not judge
        lines = (f"no recommendation: {err.one_line() if isinstance(err, AppError) else err}",)
    judged = (_figures(cells), lines)
    if len(_JUDGED) > 64:
        _JUDGED.clear()
    _JUDGED[key] = judged
    return judged


def campaign_state(stored: StoredCampaign, gpus: int | None = None, now: float | None = None) -> CampaignState:
    """What the screen draws of a stored campaign: a damaged run folder is a ``damaged`` cell with its error."""
    cells = [_cell(r) for r in stored.runs]
    cells += [CellState(topology=safeio.shown(d.name, 80), workload="", rate="", repeat=1, status="damaged",
                        run_dir=str(d), message=err.one_line()) for d, err in stored.damaged]
    configs = _configs(stored.spec.knobs, stored.spec.topologies) if stored.spec.knobs else {}
    total = stored.total  # topology × knob configuration layouts, as the core counts them
    finished = not stored.running and total > 0 and stored.done >= total
    figures, recommendation = _judge(stored, gpus, finished)
    return CampaignState(name=stored.name, directory=stored.directory, spec=stored.spec.to_dict(),
                         cells=tuple(cells), created=stored.created, running=stored.running, done=stored.done,
                         total=total, figures=figures, recommendation=recommendation,
                         eta=eta(stored, time.time() if now is None else now), configs=configs)


def _configs(axes: list[str], topologies: list[str]) -> dict[str, tuple[str, ...]]:
    """Each topology's knob configurations (labels) from the campaign's axes; {} where the catalogue no longer
    reads them (the grid then has the layouts its cells name)."""
    try:
        parsed = KnobCatalog.load().axes(list(axes), where="the campaign's knobs")
        return {t: tuple(c.label for c in configurations(parsed, t)) for t in topologies}
    except AppError:
        return {}


def campaigns(root: Path | None = None, limit: int = 20, gpus: int | None = None) -> list[CampaignState]:
    """The newest campaigns of the runs directory, newest first (blocking: call it from a thread)."""
    return [campaign_state(c, gpus) for c in stored_campaigns(root, limit)]
