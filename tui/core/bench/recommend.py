"""A recommendation per objective from a campaign's measurements, explained in the design note's four factors.

Objectives: maximum output throughput (at saturation), minimum mean TPOT (at saturation), and maximum goodput
under an SLO (the operator's ``--goodput``, or one derived from the measurements and said so). Each names the
winner per workload, by how much it beat the runner-up, and whether that margin is within run-to-run noise:
two runs of the same real server differ by about 2 % (fixtures ``bench/`` vs ``rerun/bench/``: 7,097 vs 6,965
output tok/s), so a smaller margin — or overlapping 95 % intervals when repeats exist — decides nothing.

The four factors (prefill:decode work ratio, SLO tightness, GPU count, KV-transfer cost vs what it saves) are
stated from this host's numbers, with the one that drove each verdict named. The evidence is called thin when it
is: saturation only, a single rate or workload, no repeats, failed cells, or flagged runs.

Only rows that measured something are judged (:attr:`Cell.ranked`): a run that failed, was stopped or completed no
request, and a run on a campaign's layout that is not part of the campaign, are named in the evidence and judged by
nobody. Rows of different measurements (another model, host, client or traffic: :attr:`Cell.unit`) are judged
apart; rows of one topology served differently compete as layouts of their own (``tp1 [--enforce-eager]``). With
one topology measured on a workload no winner is named: the verdict says what is missing, and
:attr:`Recommendation.to_compare` the command that would measure it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tui.core.bench.metrics import attainment, percentile_key
from tui.core.bench.missing import alternatives as alternatives
from tui.core.bench.missing import compare_command as compare_command
from tui.core.bench.missing import one_topology, unjudged
from tui.core.bench.table import Cell
from tui.core.models import Workload

#: relative difference between two runs of the same real server (fixtures: 1.9 % output throughput)
NOISE_FLOOR = 0.02
#: a rate "meets" an SLO when this share of its requests met every SLO (DistServe's attainment target)
ATTAINMENT = 0.9
#: without an operator SLO, goodput is judged against TPOT ≤ this × the best median TPOT measured
DERIVED_SLO_FACTOR = 1.5
#: flags that keep a cell out of the verdicts (its figures measure something else): a simulated server that fell
#: behind its clock paced the host's CPUs, not the simulated GPUs; a simulated run whose figures departed from the
#: simulator's own prediction measured the proxy, the client or a loaded host
EXCLUDING_FLAGS = ("sim-overloaded", "sim-diverged")
FACTORS = ("prefill:decode work ratio", "SLO tightness", "GPU count", "KV-transfer cost vs what it saves")
_DISAGG = re.compile(r"^\d+p\d+d")


def is_disaggregated(topology: str) -> bool:
    return bool(_DISAGG.match(topology))


@dataclass
class Verdict:
    objective: str
    workload: str
    metric: str
    winner: str | None = None
    value: float | None = None
    runner_up: str | None = None
    runner_up_value: float | None = None
    margin: float | None = None  # winner's advantage: (best − second)/second for max, (second − best)/best for min
    within_noise: bool = False
    driver: str = ""
    why: str = ""
    #: why no winner is named although the workload was measured (one topology only): "" otherwise
    missing: str = ""
    #: for a winner with knobs: what each of its knobs moved the figure by, against the same layout without it
    knob_effects: list[str] = field(default_factory=list)


@dataclass
class Recommendation:
    objectives: dict[str, list[Verdict]] = field(default_factory=dict)
    summary: dict[str, str] = field(default_factory=dict)  # objective -> one line
    factors: dict[str, list[str]] = field(default_factory=dict)  # workload -> the four factors stated
    slo: dict[str, dict[str, float]] = field(default_factory=dict)  # workload -> SLO used for goodput
    slo_derived: bool = False
    highest_rate_meeting_slo: dict[str, dict[str, float | None]] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)
    thin: bool = False
    #: cells left out of the verdicts and why (a run whose KV went over a slow path says nothing about the layout)
    excluded: list[str] = field(default_factory=list)
    #: workload → the command that measures what is missing to compare (one topology measured on it)
    to_compare: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["objectives"] = {k: [asdict(v) for v in vs] for k, vs in self.objectives.items()}
        return d


def _saturation(cells: Sequence[Cell], workload: str) -> list[Cell]:
    """The saturation rows of ``workload`` (a :attr:`Cell.unit`: the workload, and its measurement where several)."""
    return [c for c in cells if c.unit == workload and (c.rate is None or math.isinf(c.rate))]


def _overlap(a: Cell, b: Cell, key: str) -> bool:
    ia, ib = a.values.get(key), b.values.get(key)
    if ia is None or ib is None or ia.n < 2 or ib.n < 2:
        return False
    return ia.low <= ib.high and ib.low <= ia.high


def _verdict(objective: str, workload: str, metric: str, scored: list[tuple[float, Cell]], higher: bool
             ) -> Verdict:
    v = Verdict(objective, workload, metric)
    if not scored:
        v.why = "no measurement"
        return v
    scored = sorted(scored, key=lambda t: t[0], reverse=higher)
    v.value, best = scored[0]
    v.winner = best.layout
    if len(scored) > 1:
        v.runner_up_value, second = scored[1]
        v.runner_up = second.layout
        # how much better the winner is: higher by this share (max objectives), or the runner-up this share
        # higher (min objectives: 6.1 ms against 27.9 ms reads "by 4.6×", not "by 78 %")
        base = v.runner_up_value if higher else v.value
        if base:
            v.margin = abs(v.value - v.runner_up_value) / abs(base)
        v.within_noise = (v.margin is not None and v.margin < NOISE_FLOOR) or _overlap(best, second, metric)
    return v


#: the value a knob's effect is measured against, where the runs have it (vLLM's own choice)
BASELINE_VALUES = ("auto", "off", "—")
METRIC_NAMES = {"output_throughput": "output tok/s", "mean_tpot_ms": "mean TPOT", "request_goodput": "goodput"}


def knob_effects(v: Verdict, scored: Sequence[tuple[float, Cell]], higher: bool) -> list[str]:
    """Per knob of the winner: its figure against the same topology with that knob alone changed (to vLLM's default
    where measured, else the best other value), as ``attn=flashinfer: +12% output tok/s vs attn=auto``."""
    win = next((c for s, c in scored if c.layout == v.winner), None)
    if win is None or not win.knobs or v.value is None:
        return []
    out = []
    named = win.named_knobs()
    for key, value in named.items():
        others = [(s, c) for s, c in scored if c.topology == win.topology and c.knobs.get(key) != value
                  and all(c.knobs.get(k) == x for k, x in win.knobs.items() if k != key)]
        if not others:
            continue
        base = next(((s, c) for s, c in others if c.knobs.get(key) in BASELINE_VALUES), None)
        if base is None:
            base = sorted(others, key=lambda t: t[0], reverse=higher)[0]
        score, cell = base
        if not score:
            continue
        change = (v.value - score) / abs(score)
        name = METRIC_NAMES.get(v.metric, v.metric)
        what = f"{change:+.1%} {name}" if higher else f"{name} {change:+.1%}"
        rest = " ".join(f"{k}={x}" for k, x in named.items() if k != key)
        out.append(f"{key}={value}: {what} vs {key}={cell.knobs.get(key)} (same {win.topology}"
                   + (f", {rest}" if rest else "") + ")")
    return out


def derive_slo(cells: Sequence[Cell], workload: str) -> dict[str, float]:
    meds = [c.value("median_tpot_ms") for c in _saturation(cells, workload)]
    known = [m for m in meds if m]
    if not known:
        return {}
    return {"tpot": round(DERIVED_SLO_FACTOR * min(known), 1)}


def goodput_scores(cells: Sequence[Cell], workload: str, slo: Mapping[str, float]) -> list[tuple[float, Cell]]:
    """Per topology, the best goodput over its rates (computed again from the records under ``slo``)."""
    from tui.core.bench.metrics import goodput_of

    best: dict[str, tuple[float, Cell]] = {}
    for c in cells:
        if c.unit != workload:
            continue
        vals = []
        for r in c.runs:
            duration = float(r.summary.get("duration") or 0.0)
            records = r.records()
            if records and duration > 0:
                vals.append(goodput_of(records, duration, slo))
        if not vals:
            continue
        g = sum(vals) / len(vals)
        if c.layout not in best or g > best[c.layout][0]:
            best[c.layout] = (g, c)
    return list(best.values())


def highest_rates(cells: Sequence[Cell], slo_by_workload: Mapping[str, Mapping[str, float]]
                  ) -> dict[str, dict[str, float | None]]:
    """topology → workload → highest finite request rate whose runs met the SLO for ≥ 90 % of requests."""
    out: dict[str, dict[str, float | None]] = {}
    for c in cells:
        if c.rate is None or math.isinf(c.rate):
            continue
        slo = slo_by_workload.get(c.unit)
        if not slo:
            continue
        att = [attainment(r.records(), slo) for r in c.runs]
        ok = bool(att) and min(att) >= ATTAINMENT
        cur = out.setdefault(c.layout, {}).get(c.unit)
        if ok and (cur is None or c.rate > cur):
            out[c.layout][c.unit] = c.rate
        else:
            out[c.layout].setdefault(c.unit, None)
    return out


def _kv_line(cells: Sequence[Cell], workload: str) -> str:
    sat = _saturation(cells, workload)
    dis = [c for c in sat if is_disaggregated(c.topology)]
    col = [c for c in sat if not is_disaggregated(c.topology)]
    if not dis:
        return "no disaggregated layout was measured, so the KV transfer was not tried"
    d = dis[0]
    parts = []
    kv = [r.meta.kv_transfer for r in d.runs if r.meta.kv_transfer]
    if kv and "external" in kv[0]:
        ext = sum(float(k.get("external", 0.0)) for k in kv) / len(kv)
        n = d.value("completed") or 0
        parts.append(f"{d.layout} moved {ext / n:,.0f} prompt tokens per request over the KV connector"
                     if n else f"{d.layout} moved {ext:,.0f} prompt tokens over the KV connector")
        if any(k.get("recomputed") for k in kv):
            parts.append("but decode re-did the prefill for most requests (transfer failed)")
    if col:
        best_ttft = min(col, key=lambda c: c.value("mean_ttft_ms") or math.inf)
        ttft_d, tpot_d = d.value("mean_ttft_ms"), d.value("mean_tpot_ms")
        if best_ttft is not None and ttft_d is not None and best_ttft.value("mean_ttft_ms") is not None:
            delta = ttft_d - (best_ttft.value("mean_ttft_ms") or 0.0)
            parts.append(f"mean TTFT {'+' if delta >= 0 else ''}{delta:,.0f} ms vs {best_ttft.layout}")
        best_tpot = min(col, key=lambda c: c.value("mean_tpot_ms") or math.inf)
        tp = best_tpot.value("mean_tpot_ms")
        if tpot_d and tp:
            ratio = tp / tpot_d
            how = f"{ratio:.1f}× lower" if ratio >= 1.5 else f"{(tpot_d - tp) / tp:+.0%}"
            verdict = "what disaggregation saves" if tpot_d < tp else "the transfer does not pay here"
            parts.append(f"mean TPOT {tpot_d:.1f} ms vs {tp:.1f} ms for {best_tpot.layout} ({how}: {verdict})")
    return "; ".join(parts) if parts else f"{d.layout} measured, without KV-transfer counters"


def _driver(objective: str, winner: str, ratio: float, *, tps_winner: str | None = None,
            tpot_winner: str | None = None) -> tuple[str, str]:
    dis = is_disaggregated(winner)
    if objective == "max_goodput":
        if winner == tpot_winner and winner != tps_winner:
            return FACTORS[1], (f"the SLO is tight: {winner}'s evener decode keeps more requests within it than "
                                f"{tps_winner}'s higher throughput does")
        if winner == tps_winner:
            return FACTORS[1], "the SLO is loose enough that the layout serving the most requests also serves " \
                               "the most within it"
        return FACTORS[1], "neither the fastest nor the evenest layout: the SLO's mix of limits decides"
    if objective == "min_tpot":
        if dis and ratio >= 1:
            return FACTORS[0], ("prefill-heavy traffic: colocated decode is interrupted by every prefill, "
                                "disaggregated decode never is")
        if dis:
            return FACTORS[3], "the prefill interruptions it removes outweigh the KV transfer it adds"
        if ratio < 1:
            return FACTORS[0], "decode-dominated traffic: few prefills interrupt decode, so splitting roles buys little"
        return FACTORS[2], "with few GPUs, splitting roles leaves too little decode capacity"
    if dis:
        return FACTORS[0], "prefill and decode pools both stay busy with this mix"
    return FACTORS[2], ("with few GPUs, every GPU doing both prefill and decode keeps all of them busy; a "
                        "prefill pool and a decode pool cannot both stay busy")


#: flags whose runs measure something else than the layout (KV over TCP): left out unless asked for
EXCLUDED_FLAGS = ("kv-slow-path",)


def recommend(cells: Sequence[Cell], workloads: Mapping[str, Workload], *, gpus: int | None = None,
              slo: Mapping[str, float] | None = None, repeats: int = 1, failed: Sequence[str] = (),
              include_flagged: Sequence[str] = ()) -> Recommendation:
    """``include_flagged``: flags of ``EXCLUDED_FLAGS`` whose cells are judged anyway (``--include-kv-slow-path``).
    Only :attr:`Cell.ranked` rows are judged; the others are named in the evidence."""
    rec = Recommendation()
    left_apart = [c for c in cells if not c.ranked and (c.left_out or c.outside)]
    cells = [c for c in cells if c.ranked or not (c.left_out or c.outside)]
    excluded = [c for c in cells if any(f in EXCLUDING_FLAGS for f in c.flags)]
    every = cells
    cells = [c for c in cells if c not in excluded]
    left_out = [c for c in cells if any(f in c.flags for f in EXCLUDED_FLAGS if f not in include_flagged)]
    if left_out:
        cells = [c for c in cells if c not in left_out]
        rec.excluded = [f"{c.layout}/{c.workload}@{'sat' if c.rate is None else f'{c.rate:g}'}: "
                        + ", ".join(f for f in c.flags if f in EXCLUDED_FLAGS) for c in left_out]
    names = sorted({c.unit for c in every})  # a workload whose every cell is excluded: no winner
    workload_of = {c.unit: c.workload for c in every}
    rec.slo_derived = not slo
    for w in names:
        rec.slo[w] = dict(slo) if slo else derive_slo(cells, w)
    for w in names:
        sat = _saturation(cells, w)
        tps = [(c.value("output_throughput") or 0.0, c) for c in sat if c.value("output_throughput") is not None]
        tpot = [(c.value("mean_tpot_ms") or 0.0, c) for c in sat if c.value("mean_tpot_ms")]
        good = goodput_scores(cells, w, rec.slo[w]) if rec.slo[w] else []
        one = one_topology([c for _, c in tps] or sat, every, w) if sat else None
        for objective, metric, scored, higher in (("max_throughput", "output_throughput", tps, True),
                                                  ("min_tpot", "mean_tpot_ms", tpot, False),
                                                  ("max_goodput", "request_goodput", good, True)):
            if one is not None and scored:
                v = Verdict(objective, w, metric, missing=one[0], why="one topology measured")
            else:
                v = _verdict(objective, w, metric, scored, higher)
                v.knob_effects = knob_effects(v, scored, higher)
            rec.objectives.setdefault(objective, []).append(v)
        if one is not None:
            rec.to_compare[w] = one[1]
    rec.highest_rate_meeting_slo = highest_rates(cells, rec.slo)
    for w in names:
        wl = workloads.get(workload_of[w])
        ratio = wl.input_len / wl.output_len if wl else 1.0
        kind = "prefill-dominated" if ratio > 1 else "decode-dominated"
        lines = [
            f"{FACTORS[0]}: {wl.input_len if wl else '?'} prompt / {wl.output_len if wl else '?'} output tokens "
            f"per request ({ratio:.2g}:1, {kind})",
        ]
        tps_v = next(v for v in rec.objectives["max_throughput"] if v.workload == w)
        slo_w = rec.slo[w]
        if slo_w and tps_v.winner:
            win = next(c for c in _saturation(cells, w) if c.layout == tps_v.winner)
            p99 = win.value(percentile_key("tpot", 99))
            limit = slo_w.get("tpot")
            if p99 is not None and limit is not None:
                tight = p99 > limit
                lines.append(f"{FACTORS[1]}: TPOT ≤ {limit:g} ms{' (derived)' if rec.slo_derived else ''}; "
                             f"the throughput winner {tps_v.winner} has p99 TPOT {p99:.1f} ms at saturation: "
                             f"{'tight' if tight else 'loose'} for it")
            else:
                lines.append(f"{FACTORS[1]}: {', '.join(f'{k} ≤ {v:g} ms' for k, v in slo_w.items())}")
        elif slo_w:
            lines.append(f"{FACTORS[1]}: {', '.join(f'{k} ≤ {v:g} ms' for k, v in slo_w.items())}"
                         + (" (derived)" if rec.slo_derived else "") + "; no winner to judge it against")
        else:
            lines.append(f"{FACTORS[1]}: no SLO to judge against")
        lines.append(f"{FACTORS[2]}: {gpus if gpus is not None else '?'} GPU(s) per layout"
                     + (" — few: a disaggregated layout gives each role a fraction of them"
                        if gpus is not None and gpus <= 8 else ""))
        lines.append(f"{FACTORS[3]}: {_kv_line(cells, w)}")
        rec.factors[w] = lines
        tpot_v = next(v for v in rec.objectives["min_tpot"] if v.workload == w)
        for vs in rec.objectives.values():
            for v in vs:
                if v.workload == w and v.winner:
                    v.driver, v.why = _driver(v.objective, v.winner, ratio, tps_winner=tps_v.winner,
                                              tpot_winner=tpot_v.winner)
    for objective, vs in rec.objectives.items():
        winners = {v.winner for v in vs if v.winner}
        missing = [v.missing for v in vs if v.missing]
        if not winners and not missing:
            why = sorted({f for c in excluded for f in c.flags if f in EXCLUDING_FLAGS})
            rec.summary[objective] = (f"no usable measurement ({len(excluded)} cell(s) kept out: {', '.join(why)})"
                                      if excluded else "not measured")
            continue
        parts = []
        for v in vs:
            if v.missing:
                parts.append(v.missing)
            if not v.winner:
                continue
            margin = ""
            if v.margin is not None:
                margin = f" by {v.margin:.1%}" if v.margin < 1 else f" by {1 + v.margin:.1f}×"
            noise = " (within noise)" if v.within_noise else ""
            parts.append(f"{v.winner} on {v.workload}{margin}{noise}")
        if not winners:
            head = "not compared"
        elif len(winners) > 1:
            head = "depends on the workload"
        else:
            head = next(iter(winners)) + (" where compared" if missing else "")
        rec.summary[objective] = f"{head}: " + "; ".join(parts)
    rec.evidence = _evidence(every, sorted({c.workload for c in every}), repeats, failed, rec)
    for flag in EXCLUDING_FLAGS:
        out = sorted({f"{c.layout}/{c.workload}" for c in excluded if flag in c.flags})
        if out:
            rec.evidence.append(f"kept out of the recommendation ({flag}): {', '.join(out)}")
    rec.evidence += [f"left out: {x} (KV moved far below the GPU link; --include-kv-slow-path to judge it)"
                     for x in rec.excluded]
    rec.evidence += unjudged(left_apart)
    rec.thin = bool(rec.evidence)
    return rec


def _evidence(cells: Sequence[Cell], names: Sequence[str], repeats: int, failed: Sequence[str],
              rec: Recommendation) -> list[str]:
    notes = []
    rates = {c.rate for c in cells if c.rate is not None and not math.isinf(c.rate)}
    if not rates:
        notes.append("saturation only: every run sent all requests at once, which says nothing about latency at "
                     "a realistic load (add --rates auto for latency–throughput curves)")
    elif len(rates) == 1:
        notes.append("a single request rate besides saturation")
    if len(names) == 1:
        notes.append("one workload: the prefill:decode ratio was not varied")
    if repeats < 2:
        notes.append(f"no repeats: two runs of the same server differ by ~{NOISE_FLOOR:.0%}, so margins below "
                     f"that are within noise (add --repeat 3 for confidence intervals)")
    if any(v.within_noise for vs in rec.objectives.values() for v in vs):
        notes.append("some winners lead by less than run-to-run noise (marked 'within noise')")
    if rec.slo_derived:
        notes.append("no SLO given: goodput is judged against a TPOT limit derived from the measurements "
                     "(pass --goodput ttft:MS tpot:MS for yours)")
    if failed:
        notes.append("failed cells: " + ", ".join(failed))
    flagged: dict[str, list[str]] = {}
    for c in cells:
        for f in c.flags:
            flagged.setdefault(f, []).append(f"{c.topology}/{c.workload}")
    for f, where in flagged.items():
        notes.append(f"flag {f}: {', '.join(sorted(set(where)))}")
    return notes


def render(rec: Recommendation) -> str:
    titles = {"max_throughput": "max throughput", "min_tpot": "min TPOT", "max_goodput": "max goodput under SLO"}
    lines = ["Recommendation"]
    for objective, title in titles.items():
        lines.append(f"  {title}: {rec.summary.get(objective, 'not measured')}")
        for v in rec.objectives.get(objective, []):
            if v.winner and v.driver:
                lines.append(f"      {v.workload}: driven by {v.driver} — {v.why}")
            if v.winner and v.knob_effects:
                lines.append(f"      {v.workload}: knobs of the winner: " + "; ".join(v.knob_effects))
    for w, command in rec.to_compare.items():
        lines.append(f"  to compare on {w}, measure the other layouts: {command}")
    for w, factors in rec.factors.items():
        lines.append(f"  {w}:")
        lines += [f"    - {f}" for f in factors]
    if rec.highest_rate_meeting_slo:
        lines.append(f"  highest rate meeting the SLO (≥ {ATTAINMENT:.0%} of requests):")
        for topo, per in sorted(rec.highest_rate_meeting_slo.items()):
            items = ", ".join(f"{w}: {'none' if r is None else f'{r:g} req/s'}" for w, r in sorted(per.items()))
            lines.append(f"    {topo}: {items}")
    if rec.evidence:
        lines.append("  The evidence is thin:")
        lines += [f"    - {n}" for n in rec.evidence]
    return "\n".join(lines)
