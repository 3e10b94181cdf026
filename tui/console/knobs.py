"""The serve knobs as the console's forms offer them (the launch screen's one value per knob, the campaign screen's
axes) and the results screen charts them, from the core's catalogue (``tui.core.plan.knobs``, ``profiles/knobs.yaml``)
and its reasons (:func:`~tui.core.plan.knobs.refusal`). No Textual: the screens draw what this computes, in their
workers (the catalogue is a file; refusals read the host's facts).

- :func:`knob_rows`: the knobs a topology may take, each value with why it does not fit this model, plan and host
  ("" where it fits); a P/D topology adds a row per role for the knobs whose value differs by role (the batch limits).
- :func:`parse_pairs` / :func:`pairs_text`: the launch form's text (``attn=triton decode.mnbt=2048``) and back;
  :func:`parse_axes` / :func:`axes_texts`: the campaign's (``attn=auto,triton mnbt=auto,2048``).
- :func:`campaign_shape`: the layouts (topology × configurations) and cells a campaign's axes make, each refused
  layout in one line (what ``disagg-tui run --knob`` refuses before anything starts).
- :func:`knob_groups`: one knob's values side by side, per topology, workload, rate and the other knobs' values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tui.core.bench.store import rate_label
from tui.core.errors import AppError
from tui.core.models import ModelProfile
from tui.core.plan.hostfacts import HostFacts
from tui.core.plan.knobs import (
    ROLE_PREFIXES,
    Knob,
    KnobCatalog,
    Setting,
    check_request_knobs,
    configurations,
    refusal,
)
from tui.core.plan.spec import LaunchPlan
from tui.core.topology import Topology, parse_topology

#: the numbers offered for an int knob besides vLLM's default (any other is typed in the form's text)
INT_PRESETS: dict[str, tuple[int, ...]] = {"mnbt": (2048, 4096, 8192, 16384), "seqs": (64, 128, 256, 512, 1024)}
#: the values a knob's effect is measured against, first in a chart (vLLM's own choice; "—": a run without it)
BASELINES = ("auto", "off", "—")
#: the figures a knob's chart shows: (the comparison's column, its name, higher is better)
FIGURES: tuple[tuple[str, str, bool], ...] = (("output_throughput", "output tok/s", True),
                                              ("mean_tpot_ms", "mean TPOT ms", False),
                                              ("mean_ttft_ms", "mean TTFT ms", False))


@dataclass(frozen=True, slots=True)
class ValueFit:
    """One value of a knob as a form offers it: canonical (``auto``, ``ngram:4``, ``2048``), and why it does not
    fit here ("" where it does)."""

    value: str
    refused: str = ""
    default: bool = False
    note: str = ""


@dataclass(frozen=True, slots=True)
class KnobRow:
    """A knob (for every server it may be set on, or for one role's: ``decode.mnbt``) and its values."""

    key: str
    knob: Knob
    role: str | None
    values: tuple[ValueFit, ...]

    @property
    def default(self) -> str:
        return next((v.value for v in self.values if v.default), self.values[0].value if self.values else "")

    def fit(self, value: str) -> ValueFit | None:
        return next((v for v in self.values if v.value == value), None)

    def fitting(self) -> list[str]:
        return [v.value for v in self.values if not v.refused]

    def step(self, current: str, delta: int) -> str:
        """The next (``delta`` 1) or previous (-1) value that fits, round the list; ``current`` when none other."""
        names = [v.value for v in self.values]
        if current not in names:
            return self.default
        i = names.index(current)
        for k in range(1, len(names) + 1):
            cand = self.values[(i + delta * k) % len(names)]
            if not cand.refused:
                return cand.value
        return current


def offered_values(knob: Knob) -> list[tuple[str, bool, str]]:
    """Each value a form offers for ``knob``: (canonical value, is the default, its note); a value taking a number
    with its default number (``ngram:4``), an int knob's presets after its named values."""
    out = [(v.name if v.param is None else f"{v.name}:{v.param.default}", v.default, v.note) for v in knob.values]
    if knob.kind == "int":
        out += [(str(n), False, "") for n in INT_PRESETS.get(knob.name, ()) if knob.lo <= n <= knob.hi]
    return out


def _servers(topo: Topology) -> tuple[str, ...]:
    return ("prefill", "decode") if topo.kind == "pd" else ("single",)


def row_keys(catalog: KnobCatalog, topology: str | None) -> list[tuple[str, Knob, str | None]]:
    """The rows a topology's form shows: each knob it has a server for; on a P/D topology, the int knobs that may
    be set for prefill and decode (the batch limits) once more per role."""
    try:
        topo = parse_topology(topology) if topology else None
    except AppError:
        topo = None
    have = _servers(topo) if topo is not None else ("single", "prefill", "decode")
    out: list[tuple[str, Knob, str | None]] = []
    for k in catalog.knobs.values():
        if not any(r in have for r in k.roles):
            continue
        out.append((k.name, k, None))
    if topo is not None and topo.kind == "pd":
        for k in catalog.knobs.values():
            if k.kind == "int" and all(r in k.roles for r in ROLE_PREFIXES):
                out += [(f"{r}.{k.name}", k, r) for r in ROLE_PREFIXES]
    return out


def _head_off(reason: str, setting: Setting) -> str:
    head = f"{setting.text}: "
    return reason[len(head):] if reason.startswith(head) else reason


def value_refusal(knob: Knob, role: str | None, value: str, profile: ModelProfile | None, plan: LaunchPlan | None,
                  facts: HostFacts | None) -> str:
    """Why ``value`` of ``knob`` (for ``role``'s servers) cannot work in ``plan`` on this host, without the
    ``key=value:`` the form shows beside it ("" where it can, or where nothing is known to judge by)."""
    try:
        setting = Setting(knob.choose(value), role)
    except AppError as err:
        return err.one_line()
    if profile is None or plan is None or facts is None or setting.choice.is_default:
        return ""
    why = refusal(setting, profile, plan, facts)
    return _head_off(why, setting) if why else ""


def knob_rows(catalog: KnobCatalog, topology: str | None, profile: ModelProfile | None = None,
              plan: LaunchPlan | None = None, facts: HostFacts | None = None,
              chosen: Mapping[str, str | Sequence[str]] | None = None) -> list[KnobRow]:
    """The knobs ``topology`` may take, every value with why it does not fit ``profile`` and ``plan`` on this host
    (the catalogue's reasons); a value ``chosen`` that the catalogue does not offer as such (``ngram:6``, a number)
    is offered too. A key of ``chosen`` that is no row of this topology (``decode.mnbt`` typed for ``tp2``) is a row
    of its own."""
    wanted = {k: [v] if isinstance(v, str) else list(v) for k, v in (chosen or {}).items()}
    keys = row_keys(catalog, topology)
    known = {k for k, _, _ in keys}
    for key in wanted:
        if key in known:
            continue
        prefix, _, name = key.rpartition(".")
        found = catalog.knobs.get(name)
        if found is not None and (not prefix or prefix in ROLE_PREFIXES):
            keys.append((key, found, prefix or None))
    rows = []
    for key, knob, role in keys:
        offered = offered_values(knob)
        for extra in wanted.get(key, []):
            if extra not in (v for v, _, _ in offered):
                offered.append((extra, False, ""))
        values = tuple(ValueFit(v, value_refusal(knob, role, v, profile, plan, facts), default, note)
                       for v, default, note in offered)
        rows.append(KnobRow(key, knob, role, values))
    return rows


# --- the forms' text ------------------------------------------------------------------------------------------


def parse_pairs(text: str) -> dict[str, str]:
    """``attn=triton decode.mnbt=2048`` → {attn: triton, decode.mnbt: 2048}, leniently (what the list shows; the
    request reads the text strictly and says what is wrong under the field)."""
    out: dict[str, str] = {}
    for word in text.split():
        key, eq, value = word.partition("=")
        if eq and key and value and "," not in value:
            out[key] = value
    return out


def pairs_text(chosen: Mapping[str, str], defaults: Mapping[str, str] | None = None) -> str:
    """The launch form's text of the values chosen (a knob at its default adds nothing: not written)."""
    defaults = defaults or {}
    return " ".join(f"{k}={v}" for k, v in chosen.items() if v and defaults.get(k) != v)


def set_pair(text: str, key: str, value: str, default: str = "") -> str:
    """The launch form's text with ``key`` at ``value`` (in the place it had; removed at its ``default``); the
    other words as they were, a wrong one too (the field says what is wrong with it)."""
    words = text.split()
    at = next((i for i, w in enumerate(words) if w.partition("=")[0] == key), None)
    return _put(words, at, f"{key}={value}" if value and value != default else None)


def _put(words: list[str], at: int | None, word: str | None) -> str:
    """``words`` with the word at ``at`` replaced by ``word`` (removed for None; appended where ``at`` is None)."""
    if at is None:
        return " ".join([*words, word] if word else words)
    if word is None:
        del words[at]
    else:
        words[at] = word
    return " ".join(words)


def set_axis_value(text: str, key: str, value: str, on: bool) -> str:
    """The campaign's axes text with ``value`` added to (``on``) or taken from ``key``'s axis, in the order the
    values were ticked; an axis left without a value goes; the other words as they were."""
    words = text.split()
    at = next((i for i, w in enumerate(words) if w.partition("=")[0] == key), None)
    values = [v for v in words[at].partition("=")[2].split(",") if v] if at is not None else []
    if on and value not in values:
        values.append(value)
    if not on:
        values = [v for v in values if v != value]
    return _put(words, at, f"{key}={','.join(values)}" if values else None)


def parse_axes(text: str) -> dict[str, list[str]]:
    """``attn=auto,triton mnbt=2048`` → {attn: [auto, triton], mnbt: [2048]}, leniently (see :func:`parse_pairs`)."""
    out: dict[str, list[str]] = {}
    for word in text.split():
        key, eq, values = word.partition("=")
        if eq and key and values:
            out[key] = list(dict.fromkeys(v for v in values.split(",") if v))
    return out


def axes_texts(axes: Mapping[str, Sequence[str]]) -> list[str]:
    """The ``--knob`` items of a campaign (``attn=auto,triton``), an axis without a value left out."""
    return [f"{k}={','.join(vs)}" for k, vs in axes.items() if vs]


# --- a campaign's layouts -------------------------------------------------------------------------------------


@dataclass
class CampaignShape:
    """What a campaign's topologies and knob axes make: its layouts per topology, the ones refused (one line
    each: the layout and why), the cells; ``error``: the axes do not read (nothing else is set then)."""

    layouts: dict[str, int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    error: str = ""
    axes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.layouts.values())


def campaign_shape(catalog: KnobCatalog, axes: Sequence[str], topologies: Sequence[str],
                   profile: ModelProfile | None, plans: Mapping[str, LaunchPlan | str],
                   facts: HostFacts | None) -> CampaignShape:
    """The layouts ``topologies`` × the configurations of ``axes`` make, each checked as ``run`` checks it before
    anything starts (``plans``: each topology's plan without knobs, or why the planner refused it)."""
    shape = CampaignShape(axes=list(axes))
    try:
        parsed = catalog.axes(list(axes))
    except AppError as err:
        shape.error = str(getattr(err, "message", err.title))
        return shape
    for topo in topologies:
        configs = configurations(parsed, topo)
        shape.layouts[topo] = len(configs)
        bare = plans.get(topo)
        for config in configs:
            name = f"{topo} [{config.label}]" if config.label else topo
            if isinstance(bare, str):
                shape.refused.append(f"{name}: {bare}")
                continue
            if bare is None or profile is None or facts is None or not config.settings:
                continue
            try:
                check_request_knobs(catalog, [(s.key, s.choice.value) for s in config.settings], profile, bare,
                                    facts)
            except AppError as err:
                shape.refused.append(f"{name}: {err.title}")
    return shape


@dataclass(frozen=True, slots=True)
class AxisValue:
    """One value a campaign's axis may take: where it does not fit (topology → why; every topology there: greyed)."""

    key: str
    knob: Knob
    role: str | None
    value: str
    default: bool = False
    note: str = ""
    refused: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.key}={self.value}"

    def everywhere(self, topologies: Sequence[str]) -> bool:
        """It fits none of ``topologies`` (the planner refused the others itself)."""
        return bool(self.refused) and all(t in self.refused for t in topologies)


def axis_values(catalog: KnobCatalog, topologies: Sequence[str], profile: ModelProfile | None,
                plans: Mapping[str, LaunchPlan | str], facts: HostFacts | None,
                axes: Mapping[str, Sequence[str]] | None = None) -> list[AxisValue]:
    """Every knob value a campaign of ``topologies`` may sweep (the knobs of each, a P/D topology's role rows too,
    the values ``axes`` names beyond the catalogue's), each with the topologies it does not fit and why."""
    rows: dict[str, KnobRow] = {}
    planned = [t for t in topologies if not isinstance(plans.get(t), str)]
    each: list[str | None] = [*topologies] or [None]
    for topo in each:
        for row in knob_rows(catalog, topo, chosen=axes):
            rows.setdefault(row.key, row)
    out = []
    for row in rows.values():
        for v in row.values:
            refused = topology_refusals(row.knob, row.role, v.value, profile,
                                        {t: plans[t] for t in planned if t in plans}, facts)
            out.append(AxisValue(row.key, row.knob, row.role, v.value, v.default, v.note, refused))
    return out


def topology_refusals(knob: Knob, role: str | None, value: str, profile: ModelProfile | None,
                      plans: Mapping[str, LaunchPlan | str], facts: HostFacts | None) -> dict[str, str]:
    """Why ``value`` cannot work on each topology of ``plans`` where it cannot (topology → reason)."""
    out = {}
    for topo, plan in plans.items():
        if isinstance(plan, str):
            continue
        why = value_refusal(knob, role, value, profile, plan, facts)
        if why:
            out[topo] = why
    return out


# --- one knob's effect ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bar:
    value: str  # the knob's value
    figure: float
    best: bool = False  # the best of its group
    flag: str = ""  # what the run was flagged with (sim-overloaded...): judge it with care


@dataclass(frozen=True, slots=True)
class BarGroup:
    """One knob's values side by side where nothing else differs: a topology, a workload (a rate), the others'."""

    label: str
    bars: tuple[Bar, ...]


def varying_keys(cells: Sequence[Any]) -> list[str]:
    """The knob keys the comparison's rows differ by (``Cell.knobs`` holds only those)."""
    return list(dict.fromkeys(k for c in cells for k in c.knobs))


def _value_order(values: Sequence[str]) -> list[str]:
    seen = list(dict.fromkeys(values))
    return [v for v in BASELINES if v in seen] + [v for v in seen if v not in BASELINES]


def knob_groups(cells: Sequence[Any], key: str, figure: str, higher: bool) -> list[BarGroup]:
    """``key``'s values side by side: per topology, workload, rate and the values of the other knobs, each value's
    mean ``figure`` over its good repeats (a row that measured nothing is in no group; a group of one value is
    left out: it shows no effect)."""
    groups: dict[tuple[str, str, str, str], dict[str, Bar]] = {}
    rank: dict[tuple[str, str, str, str], tuple[Any, ...]] = {}
    for c in cells:
        if c.left_out or c.outside or key not in c.knobs:
            continue
        iv = c.values.get(figure)
        if iv is None:
            continue
        others = " ".join(f"{k}={v}" for k, v in c.named_knobs().items() if k != key)
        g = (c.topology, c.workload, rate_label(c.rate), others)
        groups.setdefault(g, {})[c.knobs[key]] = Bar(c.knobs[key], float(iv.mean), flag=", ".join(c.flags))
        # the groups in the rows' order of layouts and workloads, the other knobs at vLLM's default first
        rank.setdefault(g, (len(rank), tuple((v not in BASELINES, v) for k, v in c.knobs.items() if k != key)))
    by_layout: dict[tuple[str, str, str], int] = {}
    for g in groups:
        by_layout.setdefault(g[:3], len(by_layout))
    out = []
    for (topo, wl, rate, others), bars in sorted(groups.items(), key=lambda kv: (by_layout[kv[0][:3]],
                                                                                 rank[kv[0]][1])):
        if len(bars) < 2:
            continue
        pick = (max if higher else min)(b.figure for b in bars.values())
        ordered = tuple(Bar(b.value, b.figure, b.figure == pick, b.flag)
                        for b in (bars[v] for v in _value_order(list(bars))))
        label = " · ".join(p for p in (topo, wl + (f" @{rate}" if rate not in ("inf", "") else ""), others) if p)
        out.append(BarGroup(label, ordered))
    return out
