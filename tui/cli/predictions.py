"""Predicted next to measured: every stored run gets the simulator's prediction for its cell (``prediction.json``,
through the composition root), and the results show both with their ratio."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tui.cli.context import CliContext
from tui.core import safeio
from tui.core.bench.store import RUN_FILE, Run, write_json
from tui.core.errors import AppError, InputError
from tui.hosts import predictor, runpredict


def prediction_for(ctx: CliContext, run: Run) -> dict[str, Any]:
    """The run's stored prediction, else one made now (with this host's calibration for the run's GPU model) and
    stored with it. A run folder from elsewhere whose files do not make a prediction (a stored one of the wrong
    shape, a plan of the wrong types) gets ``{"unavailable": why}``, never a traceback."""
    found = runpredict.stored_prediction(run)
    if found is not None and _well_formed(found):
        return found
    try:
        facts = ctx.host.facts
    except AppError:
        facts = None
    try:
        made: dict[str, Any] = safeio.guarded(lambda: runpredict.attach_prediction(run, ctx.catalog, facts),
                                              run.path, "run folder for a prediction")
    except InputError as err:
        return {"unavailable": err.one_line()}
    return made


def _well_formed(p: dict[str, Any]) -> bool:
    """A stored prediction as :func:`render` reads it: ``values`` and ``ratio`` mappings of finite numbers."""
    if "unavailable" in p:
        return isinstance(p["unavailable"], str)
    for key in ("values", "ratio"):
        part = p.get(key)
        if part is None:
            continue
        if not isinstance(part, dict) or not all(
                v is None or (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v))
                for v in part.values()):
            return False
    return True


def attach_all(ctx: CliContext, runs: Sequence[Run]) -> None:
    """Store a prediction with every finished run (a failure to predict is a warning, never the run's failure). A
    simulated run whose figures departed from it is flagged ``sim-diverged`` (kept out of the recommendation). A run
    that measured nothing (failed, stopped, none completed: ``Run.unusable``) is compared with no prediction: its
    zeros depart from every one, and it is in no figure anyway."""
    for r in runs:
        if not r.summary or r.unusable:
            continue
        try:
            p = prediction_for(ctx, r)
        except AppError as err:
            ctx.warn(f"{r.id}: no prediction stored: {err.one_line()}")
            continue
        off = runpredict.divergence(p)
        if off and "sim-diverged" not in r.meta.flags:
            r.meta.flags.append("sim-diverged")
            r.meta.sim_pacing = {**(r.meta.sim_pacing or {}), "diverged": off}
            try:
                write_json(r.path / RUN_FILE, r.meta.to_dict())
            except OSError as exc:
                ctx.warn(f"{r.id}: cannot store the sim-diverged flag: {exc}")


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def render(ctx: CliContext, runs: Sequence[Run], *, markdown: bool = False) -> str:
    """One line per run: predicted, measured and measured/predicted for output tok/s, mean TPOT, mean TTFT."""
    heads = ["run", "simulated"] + [f"{predictor.METRIC_TITLES[k]} pred / meas (ratio)" for k in predictor.METRICS]
    rows: list[list[str]] = []
    notes: list[str] = []
    for r in runs:
        if not r.summary or r.unusable:  # a run that measured nothing has no figure to set beside a prediction
            continue
        p = prediction_for(ctx, r)
        if "unavailable" in p:
            notes.append(f"{r.id}: no prediction ({safeio.shown(p['unavailable'], 200)})")  # a copied folder's text
            continue
        cells = [r.id, "yes" if r.simulated else "no"]
        for k in predictor.METRICS:
            pv, mv = (p.get("values") or {}).get(k), r.summary.get(k)
            ratio = (p.get("ratio") or {}).get(k)
            cells.append(f"{_fmt(pv)} / {_fmt(float(mv))} ({ratio:.2f})" if pv and isinstance(mv, int | float)
                         and ratio is not None else "—")
        rows.append(cells)
        src = p.get("calibration_source", "none")
        if src != "none":
            notes.append(f"{r.id}: predicted with this host's calibration ({src})")
    if not rows and not notes:
        return ""
    title = "PREDICTED (the simulator's performance model) next to measured; ratio = measured / predicted"
    if markdown:
        lines = [f"_{title}_", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        lines += ["| " + " | ".join(c) + " |" for c in rows]
    else:
        widths = [max(len(h), *(len(c[i]) for c in rows)) if rows else len(h) for i, h in enumerate(heads)]
        lines = [title, "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) for cells in rows]
    return "\n".join(lines + notes)
