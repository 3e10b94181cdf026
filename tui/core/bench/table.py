"""The comparison table across runs: topology × workload (× rate), like the design note's table, in polars.

One row per (topology, workload, rate) and setup; repeats of a row are averaged and carry a 95 % confidence
interval. Only true repeats are averaged: runs measured differently (another model, client, host, vLLM) or served
differently (another vLLM flag or variable in their plans) are rows of their own, the ``setup`` column saying how
(:mod:`tui.core.bench.setupkey`). A run that failed, was stopped or completed no request is a row of its own too,
its status saying so and its figures left out: it never enters a mean, an interval, a best mark or a
recommendation, and never knocks out the good runs of its cell (:attr:`Run.unusable`). A run on a campaign's layout
that is not part of the campaign is a row apart, never ranked.
Columns: output TPS, TPOT mean and p99, TTFT mean, goodput. The best value of each column within a workload (and
rate) is marked among the rows of one measurement: highest TPS and goodput, lowest latencies. Printable as text,
Markdown, CSV or JSON.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tui.core.bench import report, stats
from tui.core.bench.metrics import goodput_of, percentile_key, summarize
from tui.core.bench.setupkey import NOT_TAKEN, run_labels, varying_knobs
from tui.core.bench.setupkey import SETUP_PARTS as SETUP_PARTS
from tui.core.bench.setupkey import like_for_like_note as like_for_like_note
from tui.core.bench.setupkey import run_setup as run_setup
from tui.core.bench.setupkey import setup_labels as setup_labels
from tui.core.bench.setupkey import unknown_flags_note as unknown_flags_note
from tui.core.bench.setupkey import workload_signature as workload_signature
from tui.core.bench.store import Run
from tui.core.bench.store import rate_label as rate_label
from tui.core.errors import InputError


@dataclass(frozen=True, slots=True)
class Column:
    key: str  # the summary key (vllm's name)
    title: str
    better: str  # max | min | "" (shown, not ranked)
    fmt: str


COLUMNS: tuple[Column, ...] = (
    Column("output_throughput", "TPS (tok/s)", "max", ",.0f"),
    Column("mean_tpot_ms", "TPOT mean (ms)", "min", ".1f"),
    Column("p99_tpot_ms", "TPOT p99 (ms)", "min", ".1f"),
    Column("mean_ttft_ms", "TTFT mean (ms)", "min", ",.0f"),
    Column("request_goodput", "goodput (req/s)", "max", ".2f"),
    # disaggregated runs: the share of the mean TTFT spent moving KV (from the run's TTFT breakdown); not ranked
    Column("kv_ttft_share_pct", "KV xfer % TTFT", "", ".0f"),
)


@dataclass
class Cell:
    """One (topology, workload, rate) and setup with the runs measured for it; or one run left out of every figure
    (``left_out`` says why), shown as a row of its own."""

    topology: str
    workload: str
    rate: float | None  # None = inf (saturation)
    setup: str = ""  # what sets these runs apart from others shown (setupkey.RunLabel.full); "" when nothing does
    runs: list[Run] = field(default_factory=list)
    values: dict[str, stats.Interval] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    group_setup: str = ""  # the measurement part of the setup: rows compare only within one
    serve: str = ""  # how its serve flags differ from the others' ("" when they do not)
    outside: str = ""  # the campaign whose layout it measured without being part of it
    left_out: str = ""  # why its run enters no figure (failed, stopped, no request completed); "" for a measured row
    knobs: dict[str, str] = field(default_factory=dict)  # the knobs that differ among the rows shown: key → value
    shown_setup: str = ""  # the setup column: ``setup`` less the knobs (their columns say them)
    # the knobs that differ among the measured rows: what a verdict names (ep=off is no name where only the
    # refused layouts had ep=on); None: every knob of ``knobs``
    named: tuple[str, ...] | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.setup, self.topology, self.workload, rate_label(self.rate))

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.group_setup, self.workload, rate_label(self.rate))

    @property
    def ranked(self) -> bool:
        """Its figures may be marked best and recommended: measured, and not a stray run on a campaign's layout."""
        return not self.left_out and not self.outside and bool(self.values)

    def named_knobs(self) -> dict[str, str]:
        """Its knobs that tell it apart: those that vary among the measured rows, less those its topology does
        not take (``—``: decode.mnbt on tp2)."""
        return {k: v for k, v in self.knobs.items() if v != NOT_TAKEN and (self.named is None or k in self.named)}

    @property
    def knob_label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.named_knobs().items())

    @property
    def layout(self) -> str:
        """The topology and, where runs were served differently (knobs, other flags), how this row was: what a
        verdict names (``tp1 [attn=triton]``)."""
        how = " · ".join(p for p in (self.knob_label, self.serve) if p)
        return f"{self.topology} [{how}]" if how else self.topology

    @property
    def unit(self) -> str:
        """The workload, and the measurement where rows of several are shown: what a recommendation judges."""
        return f"{self.workload} ({self.group_setup})" if self.group_setup else self.workload

    @property
    def status(self) -> str:
        return self.left_out or "complete"

    def value(self, key: str) -> float | None:
        iv = self.values.get(key)
        return iv.mean if iv is not None else None


def run_values(run: Run, slo_ms: Mapping[str, float] | None = None) -> dict[str, float]:
    """The figures of one run the table needs, from its summary (records fill what the summary lacks)."""
    s = run.summary
    out: dict[str, float] = {}
    for key in ("output_throughput", "total_token_throughput", "request_throughput", "mean_tpot_ms",
                "median_tpot_ms", "mean_ttft_ms", "median_ttft_ms", "mean_itl_ms", "mean_e2el_ms",
                percentile_key("tpot", 99), percentile_key("ttft", 99), "request_goodput", "duration", "completed",
                "failed"):
        v = s.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            out[key] = float(v)
    share = (run.meta.ttft_breakdown or {}).get("transfer_share")
    if isinstance(share, int | float) and math.isfinite(share):
        out["kv_ttft_share_pct"] = 100.0 * float(share)
    need_records = (percentile_key("tpot", 99) not in out) or bool(slo_ms)
    if need_records:
        try:
            records = run.records()
        except InputError:
            if slo_ms:  # goodput under an SLO needs the records: their damage is the answer
                raise
            records = []  # only a missing p99: the summary's figures stand alone
        duration = float(s.get("duration") or 0.0)
        if records and duration > 0:
            if percentile_key("tpot", 99) not in out:
                full = summarize(records, duration, percentiles=(99.0,), metrics=("tpot",))
                out[percentile_key("tpot", 99)] = float(full[percentile_key("tpot", 99)])
            if slo_ms:
                out["request_goodput"] = goodput_of(records, duration, slo_ms)
    return out


def build_cells(runs: Sequence[Run], slo_ms: Mapping[str, float] | None = None, *,
                slo_by_workload: Mapping[str, Mapping[str, float]] | None = None) -> list[Cell]:
    """Cells of the table; goodput is recomputed from the records under ``slo_ms`` (or each workload's SLO, keyed
    by its :attr:`Cell.unit` or its name). Every run is in one: the runs that measured something in the cell of
    their setup, each run left out (failed, stopped, none completed) in a row of its own."""
    cells: dict[tuple[str, str, str, str], Cell] = {}
    apart: list[Cell] = []
    knob_keys = varying_knobs(runs)  # a failed run's knobs too (a refused ep=on shows as such)
    named = tuple(varying_knobs([r for r in runs if not r.unusable]))  # what tells measured layouts apart
    for run, label in zip(runs, run_labels(runs), strict=True):
        m = run.meta
        cell = Cell(m.topology or "unknown", m.workload or "unknown", m.request_rate, label.full,
                    group_setup=label.group, serve=label.serve, outside=label.outside, left_out=run.unusable,
                    knobs={k: m.knobs.get(k, NOT_TAKEN) for k in knob_keys}, shown_setup=label.shown,
                    named=None if run.unusable else named)
        if cell.left_out:
            cell.runs.append(run)
            cell.flags = list(m.flags)
            apart.append(cell)
            continue
        cells.setdefault(cell.key, cell).runs.append(run)
    for cell in cells.values():
        slo = (slo_by_workload or {}).get(cell.unit) or (slo_by_workload or {}).get(cell.workload) or slo_ms
        per_run = [run_values(r, slo) for r in cell.runs]
        keys = {k for v in per_run for k in v}
        for k in keys:
            vals = [v[k] for v in per_run if k in v]
            if vals:
                cell.values[k] = stats.confidence_interval(vals)
        for r in cell.runs:
            for f in r.meta.flags:
                if f not in cell.flags:
                    cell.flags.append(f)
    return sorted([*cells.values(), *apart],
                  key=lambda c: (c.group_setup, c.workload, math.inf if c.rate is None else c.rate, c.topology,
                                 bool(c.left_out), c.setup, c.runs[0].meta.started if c.runs else 0.0))


def best_marks(cells: Sequence[Cell]) -> dict[tuple[tuple[str, str, str, str], str], bool]:
    """(cell key, column key) → is the best of its workload/rate group (within one setup)."""
    marks: dict[tuple[tuple[str, str, str, str], str], bool] = {}
    groups: dict[tuple[str, str, str], list[Cell]] = {}
    for c in cells:
        if c.ranked:
            groups.setdefault(c.group, []).append(c)
    for members in groups.values():
        for col in COLUMNS:
            if col.better not in ("max", "min"):
                continue
            vals = [(c.value(col.key), c) for c in members if c.value(col.key) is not None]
            if len(vals) < 2:
                continue
            best = max(v for v, _ in vals if v is not None) if col.better == "max" else \
                min(v for v, _ in vals if v is not None)
            for v, c in vals:
                if v == best:
                    marks[(c.key, col.key)] = True
    return marks


def comparison_frame(cells: Sequence[Cell]) -> Any:
    """A polars DataFrame: one row per cell, a value, a ±95 % half-width and a best flag per column."""
    import polars as pl

    marks = best_marks(cells)
    knob_keys = list(dict.fromkeys(k for c in cells for k in c.knobs))
    data: dict[str, list[Any]] = {"topology": [], **{knob_column(k): [] for k in knob_keys}, "setup": [],
                                  "workload": [], "rate": [], "runs": []}
    for col in COLUMNS:
        data[col.key] = []
        data[f"{col.key}_ci95"] = []
        data[f"{col.key}_best"] = []
    data["flags"] = []
    data["status"] = []
    for c in cells:
        data["topology"].append(c.topology)
        for k in knob_keys:
            data[knob_column(k)].append(c.knobs.get(k, "—"))
        data["setup"].append(c.shown_setup)
        data["workload"].append(c.workload)
        data["rate"].append(rate_label(c.rate))
        data["runs"].append(len(c.runs))
        for col in COLUMNS:
            iv = c.values.get(col.key)
            data[col.key].append(iv.mean if iv else None)
            data[f"{col.key}_ci95"].append(iv.half if iv and iv.n > 1 else None)
            data[f"{col.key}_best"].append(c.ranked and bool(marks.get((c.key, col.key))))
        data["flags"].append(",".join(c.flags))
        data["status"].append(c.status)
    if not any(data["setup"]):
        del data["setup"]  # every run measured alike: no column for it
    schema: dict[str, Any] = {"topology": pl.Utf8, "setup": pl.Utf8, "workload": pl.Utf8, "rate": pl.Utf8,
                              "runs": pl.Int64, "flags": pl.Utf8, "status": pl.Utf8,
                              **{knob_column(k): pl.Utf8 for k in knob_keys}}
    for col in COLUMNS:
        schema[col.key] = pl.Float64
        schema[f"{col.key}_ci95"] = pl.Float64
        schema[f"{col.key}_best"] = pl.Boolean
    return pl.DataFrame(data, schema={k: schema[k] for k in data}).select(list(data))


def cell_text(df_row: dict[str, Any], col: Column, *, markdown: bool) -> str:
    v = df_row[col.key]
    if v is None:
        return "—"
    text = format(v, col.fmt)
    ci = df_row[f"{col.key}_ci95"]
    if ci is not None:
        text += f" ±{format(ci, col.fmt)}"
    if df_row[f"{col.key}_best"]:
        text = f"**{text}**" if markdown else f"{text} *"
    return text


KNOB_PREFIX = "knob:"


def knob_column(key: str) -> str:
    """The frame's column of a knob (``knob:attn``; rendered as ``attn``)."""
    return KNOB_PREFIX + key


def knob_columns(df: Any) -> list[str]:
    return [c for c in df.columns if c.startswith(KNOB_PREFIX)]


def _lead(df: Any) -> list[str]:
    """The label columns of a rendered table (a column per knob that varies; ``setup`` only where runs were
    measured differently)."""
    return ["topology", *knob_columns(df), *(["setup"] if "setup" in df.columns else []), "workload", "rate"]


def _header(name: str) -> str:
    return name[len(KNOB_PREFIX):] if name.startswith(KNOB_PREFIX) else name


def _lead_cells(r: dict[str, Any], lead: list[str]) -> list[str]:
    n = f" (n={r['runs']})" if r["runs"] > 1 else ""
    return [str(r[k]) + (n if k == "topology" else "") for k in lead]


def _tail(df: Any) -> list[str]:
    """The columns after the figures: ``flags``, and ``status`` where some row is a run left out."""
    shown = "status" in df.columns and any(v != "complete" for v in df["status"])
    return ["flags", *(["status"] if shown else [])]


def render_text(df: Any) -> str:
    lead, tail = _lead(df), _tail(df)
    headers = [*map(_header, lead), *[c.title for c in COLUMNS], *tail]
    rows = []
    for r in df.iter_rows(named=True):
        rows.append([*_lead_cells(r, lead), *[cell_text(r, c, markdown=False) for c in COLUMNS],
                     *[r[k] or "" for k in tail]])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]
    numeric = set(range(len(lead), len(lead) + len(COLUMNS)))

    def fmt(row: list[str]) -> str:
        return "  ".join(cell.rjust(w) if i in numeric else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    lines = [fmt(headers), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in rows]
    lines.append("* best in its workload (and rate); ± is the 95% confidence interval over repeats"
                 + ("; a run whose status is not complete is in no figure" if len(tail) > 1 else ""))
    return "\n".join(lines)


def render_markdown(df: Any) -> str:
    lead, tail = _lead(df), _tail(df)
    headers = [*map(_header, lead), *[c.title for c in COLUMNS], *tail]
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "---|" * len(lead) + "---:|" * len(COLUMNS) + "---|" * len(tail)]
    for r in df.iter_rows(named=True):
        cells = [*_lead_cells(r, lead), *[cell_text(r, c, markdown=True) for c in COLUMNS],
                 *[(r[k] or "").replace("|", "\\|") for k in tail]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_csv(df: Any) -> str:
    text: str = df.write_csv()
    return text.rstrip("\n")


def spec_decode_lines(cells: Sequence[Cell]) -> list[str]:
    """One line per row whose runs decoded speculatively: vLLM's acceptance figures over its runs."""
    out = []
    for c in cells:
        specs = [r.meta.spec_decode for r in c.runs if r.meta.spec_decode]
        if not specs or c.left_out:
            continue
        drafts = sum(float(s.get("drafts") or 0) for s in specs)
        draft_tokens = sum(float(s.get("draft_tokens") or 0) for s in specs)
        accepted = sum(float(s.get("accepted_tokens") or 0) for s in specs)
        if drafts <= 0:
            out.append(f"  {c.layout} / {c.workload}: no draft proposed (the drafter found nothing to propose)")
            continue
        rate = accepted / draft_tokens if draft_tokens else 0.0
        out.append(f"  {c.layout} / {c.workload}: acceptance {rate:.1%} of {draft_tokens:,.0f} draft tokens "
                   f"({drafts:,.0f} drafts), mean acceptance length {1 + accepted / drafts:.2f} tokens per step")
    return ["speculative decoding (vLLM's spec_decode counters over each run):", *out] if out else []


def simulated_note(runs: Sequence[Run]) -> str:
    """The line that labels simulated figures ("" when no run was simulated)."""
    sim = sum(1 for r in runs if r.simulated)
    if not sim:
        return ""
    which = "every run" if sim == len(runs) else f"{sim} of {len(runs)} runs"
    return (f"SIMULATED: {which} measured on the simulated host (figures from the simulator's performance model, "
            "not from GPUs)")


def cell_rows(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """One object per (topology, workload[, rate]): the vllm summary keys (averaged over repeats, with
    ``ci95_<key>`` and ``repeats`` when there are several), plus ``runs`` (their ids) and ``flags``; a run left out
    is an object of its counts, its ``status`` and why (``left_out``), ``outside_campaign`` naming the campaign whose
    layout a run measured without being part of it."""
    out = []
    for c in cells:
        row: dict[str, Any] = {"topology": c.topology, "workload": c.workload}
        if c.knobs:
            row["knobs"] = dict(c.knobs)
        if c.shown_setup:
            row["setup"] = c.shown_setup
        if c.rate is not None:
            row["rate"] = c.rate
        if c.left_out:  # its counts only: no figure of it may pass for a measurement
            run = c.runs[0]
            row.update({k: run.summary[k] for k in ("num_prompts", "completed", "failed") if k in run.summary})
            row["status"], row["left_out"] = run.meta.status, c.left_out
        else:
            summaries = [r.summary for r in c.runs if r.summary]
            agg = report.aggregate(summaries) if len(summaries) > 1 else dict(summaries[0]) if summaries else {}
            row.update({k: v for k, v in agg.items() if k not in ("topology", "workload")})
            row["status"] = "complete"
        if c.outside:
            row["outside_campaign"] = c.outside
        spec = [r.meta.spec_decode for r in c.runs if r.meta.spec_decode]
        if spec:
            row["spec_decode"] = spec[0] if len(spec) == 1 else spec
        if all(r.simulated for r in c.runs):
            row["simulated"] = True
        row["runs"] = [r.id for r in c.runs]
        row["flags"] = list(c.flags)
        if c.value("kv_ttft_share_pct") is not None:
            row["kv_ttft_share_pct"] = c.value("kv_ttft_share_pct")
        out.append(row)
    return out
