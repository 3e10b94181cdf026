"""The comparison table across runs: topology × workload (× rate), like the design note's table, in polars.

One row per (topology, workload, rate); repeats of a cell are averaged and carry a 95 % confidence interval. Runs
that were not measured alike (another model, the other client, another host or the simulator) are never averaged
together: where the runs shown differ in one of those, each row says which in a ``setup`` column.
Columns: output TPS, TPOT mean and p99, TTFT mean, goodput. The best value of each column within a workload (and
rate) is marked: highest TPS and goodput, lowest latencies. Printable as text, Markdown, CSV or JSON.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tui.core.bench import report, stats
from tui.core.bench.metrics import goodput_of, percentile_key, summarize
from tui.core.bench.store import Run, rate_label
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
    """One (topology, workload, rate) with the runs measured for it."""

    topology: str
    workload: str
    rate: float | None  # None = inf (saturation)
    setup: str = ""  # what sets these runs apart from others shown (model, client, host); "" when nothing does
    runs: list[Run] = field(default_factory=list)
    values: dict[str, stats.Interval] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.setup, self.topology, self.workload, rate_label(self.rate))

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.setup, self.workload, rate_label(self.rate))

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
    """Cells of the table; goodput is recomputed from the records under ``slo_ms`` (or each workload's SLO)."""
    cells: dict[tuple[str, str, str, str], Cell] = {}
    measured = [run for run in runs if run.summary]
    setups = setup_labels(measured)
    for run, setup in zip(measured, setups, strict=True):
        m = run.meta
        cell = Cell(m.topology or "unknown", m.workload or "unknown", m.request_rate, setup)
        cells.setdefault(cell.key, cell).runs.append(run)
    for cell in cells.values():
        slo = (slo_by_workload or {}).get(cell.workload) or slo_ms
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
    return sorted(cells.values(),
                  key=lambda c: (c.setup, c.workload, math.inf if c.rate is None else c.rate, c.topology))


_CLIENTS = {"disagg-tui": "ours", "vllm-bench": "vllm bench", "imported": "imported"}


SETUP_PARTS = ("model", "client", "host", "vLLM")


def run_setup(run: Run) -> tuple[str, str, str, str]:
    """What a run was measured with, beyond its cell: the model, the client, the host (or "simulated"), the
    server's vLLM version."""
    fp = run.meta.fingerprint or {}
    host = "simulated" if fp.get("simulated") else str(fp.get("hostname") or "")
    server = fp.get("server") if isinstance(fp.get("server"), dict) else {}
    version = str((server or {}).get("server_version") or "")
    return (run.meta.model or "", _CLIENTS.get(run.meta.runner, run.meta.runner), host,
            f"vLLM {version}" if version else "")


def workload_signature(run: Run) -> str:
    """The traffic a run sent, from its summary: prompts, mean tokens in and out, arrivals (two runs of one
    workload name with different signatures are not like for like)."""
    s = run.summary
    done = s.get("completed") or 0
    parts = [f"{s.get('num_prompts', '?')} prompts"]
    if s.get("random_input_len") is not None:
        parts.append(f"{s.get('random_input_len')}/{s.get('random_output_len')} tok")
        if s.get("random_range_ratio"):
            parts.append(f"range {s.get('random_range_ratio')}")
        if s.get("random_prefix_len"):
            parts.append(f"prefix {s.get('random_prefix_len')}")
    elif done:  # a result without its definition (imported): the mean lengths it sent, to two digits
        mean_in = float(s.get("total_input_tokens") or 0) / done
        mean_out = float(s.get("total_output_tokens") or 0) / done
        parts.append(f"{float(f'{mean_in:.2g}'):g}/{float(f'{mean_out:.2g}'):g} tok")
    if s.get("burstiness") not in (None, 1, 1.0):
        parts.append(f"burstiness {s.get('burstiness')}")
    if s.get("max_concurrency") is not None:
        parts.append(f"≤{s.get('max_concurrency')} in flight")
    return ", ".join(parts)


def _workload_sigs(runs: Sequence[Run]) -> dict[str, set[str]]:
    sigs: dict[str, set[str]] = {}
    for r in runs:
        sigs.setdefault(r.meta.workload, set()).add(workload_signature(r))
    return sigs


def setup_labels(runs: Sequence[Run]) -> list[str]:
    """Per run, the parts of its setup that differ among ``runs`` (model · client · host · vLLM, and the traffic
    where runs of one workload name sent different traffic), "" where none do."""
    setups = [run_setup(r) for r in runs]
    varying = [i for i in range(len(SETUP_PARTS)) if len({s[i] for s in setups}) > 1]
    sigs = _workload_sigs(runs)
    out = []
    for r, s in zip(runs, setups, strict=True):
        parts = [s[i] or "?" for i in varying]
        if len(sigs.get(r.meta.workload, ())) > 1:
            parts.append(workload_signature(r))
        out.append(" · ".join(parts))
    return out


def like_for_like_note(runs: Sequence[Run]) -> str:
    """"" when every run shown was measured alike; else one line naming what differs (rows of different setups
    are never averaged together, and the best marks compare rows of one setup only)."""
    measured = [r for r in runs if r.summary]
    setups = [run_setup(r) for r in measured]
    diffs = []
    for i, part in enumerate(SETUP_PARTS):
        values = sorted({s[i] or "?" for s in setups})
        if len(values) > 1:
            diffs.append(f"{part} ({' vs '.join(values)})")
    for name, sigs in sorted(_workload_sigs(measured).items()):
        if len(sigs) > 1:
            diffs.append(f"workload {name} ({' vs '.join(sorted(sigs))})")
    if not diffs:
        return ""
    return "NOT LIKE-FOR-LIKE: these runs differ in " + "; ".join(diffs) + " (the setup column tells them apart)"


def best_marks(cells: Sequence[Cell]) -> dict[tuple[tuple[str, str, str, str], str], bool]:
    """(cell key, column key) → is the best of its workload/rate group (within one setup)."""
    marks: dict[tuple[tuple[str, str, str, str], str], bool] = {}
    groups: dict[tuple[str, str, str], list[Cell]] = {}
    for c in cells:
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
    data: dict[str, list[Any]] = {"topology": [], "setup": [], "workload": [], "rate": [], "runs": []}
    for col in COLUMNS:
        data[col.key] = []
        data[f"{col.key}_ci95"] = []
        data[f"{col.key}_best"] = []
    data["flags"] = []
    for c in cells:
        data["topology"].append(c.topology)
        data["setup"].append(c.setup)
        data["workload"].append(c.workload)
        data["rate"].append(rate_label(c.rate))
        data["runs"].append(len(c.runs))
        for col in COLUMNS:
            iv = c.values.get(col.key)
            data[col.key].append(iv.mean if iv else None)
            data[f"{col.key}_ci95"].append(iv.half if iv and iv.n > 1 else None)
            data[f"{col.key}_best"].append(bool(marks.get((c.key, col.key))))
        data["flags"].append(",".join(c.flags))
    if not any(data["setup"]):
        del data["setup"]  # every run measured alike: no column for it
    schema: dict[str, Any] = {"topology": pl.Utf8, "setup": pl.Utf8, "workload": pl.Utf8, "rate": pl.Utf8,
                              "runs": pl.Int64, "flags": pl.Utf8}
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


def _lead(df: Any) -> list[str]:
    """The label columns of a rendered table (``setup`` only where runs were measured differently)."""
    return ["topology", *(["setup"] if "setup" in df.columns else []), "workload", "rate"]


def _lead_cells(r: dict[str, Any], lead: list[str]) -> list[str]:
    n = f" (n={r['runs']})" if r["runs"] > 1 else ""
    return [str(r[k]) + (n if k == "topology" else "") for k in lead]


def render_text(df: Any) -> str:
    lead = _lead(df)
    headers = [*lead, *[c.title for c in COLUMNS], "flags"]
    rows = []
    for r in df.iter_rows(named=True):
        rows.append([*_lead_cells(r, lead), *[cell_text(r, c, markdown=False) for c in COLUMNS], r["flags"] or ""])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]
    numeric = set(range(len(lead), len(lead) + len(COLUMNS)))

    def fmt(row: list[str]) -> str:
        return "  ".join(cell.rjust(w) if i in numeric else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    lines = [fmt(headers), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in rows]
    lines.append("* best in its workload (and rate); ± is the 95% confidence interval over repeats")
    return "\n".join(lines)


def render_markdown(df: Any) -> str:
    lead = _lead(df)
    headers = [*lead, *[c.title for c in COLUMNS], "flags"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(lead) + "---:|" * len(COLUMNS) + "---|"]
    for r in df.iter_rows(named=True):
        cells = [*_lead_cells(r, lead), *[cell_text(r, c, markdown=True) for c in COLUMNS], r["flags"] or ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_csv(df: Any) -> str:
    text: str = df.write_csv()
    return text.rstrip("\n")


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
    ``ci95_<key>`` and ``repeats`` when there are several), plus ``runs`` (their ids) and ``flags``."""
    out = []
    for c in cells:
        row: dict[str, Any] = {"topology": c.topology, "workload": c.workload}
        if c.setup:
            row["setup"] = c.setup
        if c.rate is not None:
            row["rate"] = c.rate
        summaries = [r.summary for r in c.runs if r.summary]
        agg = report.aggregate(summaries) if len(summaries) > 1 else dict(summaries[0]) if summaries else {}
        row.update({k: v for k, v in agg.items() if k not in ("topology", "workload")})
        if all(r.simulated for r in c.runs):
            row["simulated"] = True
        row["status"] = "complete"
        row["runs"] = [r.id for r in c.runs]
        row["flags"] = list(c.flags)
        if c.value("kv_ttft_share_pct") is not None:
            row["kv_ttft_share_pct"] = c.value("kv_ttft_share_pct")
        out.append(row)
    return out
