"""What a recommendation cannot judge, and says instead: with one topology measured on a workload, which one and the
``disagg-tui run`` that measures the others (no winner is named from one); the runs no verdict judged (left out of
every figure, or measured on a campaign's layout without being part of it)."""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence

from tui.core.bench.table import Cell
from tui.core.errors import InputError
from tui.core.topology import parse_topology


def alternatives(topology: str) -> list[str]:
    """The usual other layouts on as many GPUs as ``topology`` takes (on one GPU there are none: those of two)."""
    try:
        gpus = max(parse_topology(topology).gpus_needed, 2)
    except InputError:
        gpus = 2
    return [f"dp{gpus}", f"tp{gpus}", "1p1d" if gpus == 2 else f"1p{gpus - 1}d"]


def compare_command(cell: Cell, measured: Sequence[str]) -> str:
    """The campaign that measures the other layouts of ``cell``'s workload as its runs were measured (the model of
    their plan, the simulator when they were simulated, as many prompts)."""
    run = cell.runs[0] if cell.runs else None
    others = [t for t in alternatives(cell.topology) if t not in measured]
    words = ["disagg-tui", "run"]
    if run is not None and run.simulated:
        words.append("--sim")
    model = (run.served.profile or run.meta.model) if run is not None else ""
    if model:
        words += ["--model", shlex.quote(model)]
    words += ["--topology", ",".join(others), "--workload", shlex.quote(cell.workload)]
    prompts = run.summary.get("num_prompts") if run is not None else None
    if isinstance(prompts, int) and not isinstance(prompts, bool) and prompts > 0:
        words += ["--num-prompts", str(prompts)]
    return " ".join(words)


def one_topology(sat: Sequence[Cell], every: Sequence[Cell], unit: str) -> tuple[str, str] | None:
    """When ``unit``'s judged saturation rows are of one topology only: why no winner is named, and the command
    that measures the others; None when two or more topologies were measured."""
    topologies = sorted({c.topology for c in sat})
    if len(topologies) != 1:
        return None
    topo = topologies[0]
    variants = len({c.layout for c in sat})
    if variants > 1 and any(c.knobs for c in sat):  # a knob sweep on one topology: its configurations compete
        return None
    apart = sorted({c.topology for c in every if c.unit == unit and c.topology != topo
                    and (c.rate is None or math.isinf(c.rate))})
    why = f"only {topo} measured on {unit}"
    if apart:
        why = f"only {topo} usable on {unit} ({', '.join(apart)} left out: see the evidence)"
    if variants > 1:
        why += f"; its {variants} serve configurations are compared in the table"
    return why, compare_command(sat[0], [topo])


def unjudged(cells: Sequence[Cell]) -> list[str]:
    """The runs no verdict judged: left out of every figure (failed, stopped, none completed), or measured on a
    campaign's layout without being part of it."""
    lines = []
    gone = [c for c in cells if c.left_out]
    if gone:
        lines.append(f"{len(gone)} run(s) in no figure: " + "; ".join(
            f"{r.id} ({c.left_out}{f'; not part of campaign {c.outside}' if c.outside else ''})"
            for c in gone for r in c.runs[:1]))
    apart = [c for c in cells if c.outside and not c.left_out]
    if apart:
        lines.append(f"{len(apart)} run(s) judged by nobody (measured on a campaign's layout, not part of it: it "
                     "may have shared the layout with the campaign's load): "
                     + "; ".join(f"{r.id} (campaign {c.outside})" for c in apart for r in c.runs[:1]))
    return lines
