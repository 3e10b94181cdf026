"""What a run was measured with, beyond its cell (topology, workload, rate): the setup that decides which runs are
repeats of one another, which may be compared, and what the setup column says.

Three parts, each shown only where the runs compared differ in it:

- **the measurement** (:data:`SETUP_PARTS`: the model, the client, the host or the simulator, the server's vLLM
  version; and the traffic, where runs of one workload name sent different traffic): rows that differ in it are
  never compared (best marks and the recommendation stay within one measurement);
- **what was served** (every vLLM flag and variable of the run's plan, normalised: :mod:`tui.core.bench.served`):
  rows that differ in it are compared (which configuration serves best is the question) but never averaged, and
  the column names the difference: the settings that set runs apart, as each run has them
  (``--attention-backend TRITON_ATTN`` against ``--attention-backend FLASHINFER``; a run that has none of them
  ``no --attention-backend``);
- **the campaign**: a run measured on a campaign's layout but not stored in the campaign's folder (a second
  console's benchmark on the layout a campaign brought up) is ``not part of campaign NAME``: a row of its own,
  never averaged with the campaign's runs, ranked or recommended (it shared the layout with the campaign's load).

The parts are found among the runs that measured something (:attr:`Run.unusable` is ""): a failed run is labelled
with them, but does not add a column of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tui.core.bench import served
from tui.core.bench.store import Run

_CLIENTS = {"disagg-tui": "ours", "vllm-bench": "vllm bench", "imported": "imported"}

SETUP_PARTS = ("model", "client", "host", "vLLM")
#: what a run whose plan was not kept says in the setup column (where others' flags are known)
UNKNOWN_FLAGS = "serve flags unknown"
NOT_TAKEN = "—"  # a knob's value for a run whose topology does not take it (decode.mnbt on tp2), or a run without it


def run_setup(run: Run) -> tuple[str, str, str, str]:
    """What a run was measured with, beyond its cell: the model, the client, the host (or "simulated"), the
    server's vLLM version."""
    fp = run.meta.fingerprint or {}
    host = "simulated" if fp.get("simulated") else str(fp.get("hostname") or "")
    hosts = fp.get("hosts")
    if isinstance(hosts, list) and len(hosts) > 1:  # a layout across hosts: never like for like with one host's
        names = ", ".join(str(h.get("name") or "?") for h in hosts if isinstance(h, dict))
        host = f"{'simulated ' if fp.get('simulated') else ''}{len(hosts)} hosts ({names})"
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


@dataclass(frozen=True, slots=True)
class RunLabel:
    """A run's setup as the table shows it: ``group`` (what it was measured with, where runs differ: rows of
    different groups are never compared), ``knobs`` (its serve knobs that differ from the others', as
    ``attn=triton mnbt=2048``), ``serve`` (how its other flags differ from the others'), ``outside`` (the
    campaign whose layout it measured without being part of it)."""

    group: str = ""
    serve: str = ""
    outside: str = ""
    knobs: str = ""

    @property
    def full(self) -> str:
        """Everything that sets it apart (what decides which runs are repeats)."""
        return " · ".join(p for p in (self.knobs, self.shown) if p)

    @property
    def shown(self) -> str:
        """The setup column: what sets it apart beyond its knobs (which have columns of their own)."""
        out = f"not part of campaign {self.outside}" if self.outside else ""
        return " · ".join(p for p in (self.group, self.serve, out) if p)


def campaign_layouts(runs: Sequence[Run]) -> dict[str, Path]:
    """Layout id → the campaign folder whose runs measured it (a campaign brings its layouts up itself; the first
    campaign to measure a layout owns it)."""
    out: dict[str, Path] = {}
    for r in sorted(runs, key=lambda r: r.meta.started):
        folder = r.campaign_folder
        if folder is not None and r.meta.layout_id:
            out.setdefault(r.meta.layout_id, folder)
    return out


def outside_campaign(run: Run, layouts: dict[str, Path]) -> str:
    """The campaign (its folder's name) whose layout ``run`` measured without being stored in its folder; ""."""
    folder = layouts.get(run.meta.layout_id) if run.meta.layout_id else None
    if folder is None or run.path.parent == folder:
        return ""
    return folder.name


def _group_labels(runs: Sequence[Run], judged: Sequence[Run]) -> list[str]:
    varying = [i for i in range(len(SETUP_PARTS)) if len({run_setup(r)[i] for r in judged}) > 1]
    sigs = _workload_sigs(judged)
    out = []
    for r in runs:
        s = run_setup(r)
        # a run that measured nothing (a plan refused before it started) has no model, host or traffic to tell:
        # "—", not "? · ? prompts"
        parts = [s[i] or ("—" if r.unusable else "?") for i in varying]
        if len(sigs.get(r.meta.workload, ())) > 1 and not r.unusable:
            parts.append(workload_signature(r))
        out.append(" · ".join(parts))
    return out


def varying_settings(judged: Sequence[Run]) -> dict[str, set[str] | None]:
    """The served settings that differ among ``judged`` (the runs with known flags): name → None where they differ
    across all of them, or the topologies within which a topology-bound one differs."""
    known = [r for r in judged if r.served.known]
    out: dict[str, set[str] | None] = {}
    for name in sorted({n for r in known for n in r.served.names}):
        if served.topology_bound(name):
            within = {t for t in {r.meta.topology for r in known}
                      if len({r.served.get(name) for r in known if r.meta.topology == t}) > 1}
            if within:
                out[name] = within
        elif len({r.served.get(name) for r in known}) > 1:
            out[name] = None
    return out


def varying_knobs(judged: Sequence[Run]) -> list[str]:
    """The knob keys whose values differ among ``judged`` (a run without a key counts as its own value), in the
    order the runs first name them."""
    keys = list(dict.fromkeys(k for r in judged for k in r.meta.knobs))
    return [k for k in keys if len({r.meta.knobs.get(k, "") for r in judged}) > 1]


def knob_label(run: Run, keys: Sequence[str]) -> str:
    """``attn=triton mnbt=2048``: the run's values of ``keys`` (``—`` where it has none)."""
    return " ".join(f"{k}={run.meta.knobs.get(k, NOT_TAKEN)}" for k in keys)


def _serve_labels(runs: Sequence[Run], judged: Sequence[Run]) -> list[str]:
    varying = varying_settings(judged)
    mixed = any(r.served.known for r in judged) and not all(r.served.known for r in judged)
    # what the knobs swept here set: their columns say it (also for a run whose topology does not take one of
    # them: tp2 beside 1p1d's decode.mnbt is "—" in that column, not "no --max-num-batched-tokens" here)
    covered = knob_flags({k: "" for r in judged for k in r.meta.knobs})
    out = []
    for r in runs:
        if not r.served.known:
            out.append(UNKNOWN_FLAGS if mixed else "")
            continue
        mine = [name for name, where in varying.items() if (where is None or r.meta.topology in where)
                and name not in covered]
        parts = [served.shown(name, r.served.get(name)) for name in mine if r.served.get(name) is not None]
        if mine and not parts:  # sets none of the flags that set the others apart
            parts = ["no " + "/".join(mine)]
        out.append(" · ".join(parts))
    return out


def run_labels(runs: Sequence[Run]) -> list[RunLabel]:
    """Per run, its setup: the parts that differ among the runs that measured something (see the module)."""
    judged = [r for r in runs if not r.unusable]
    layouts = campaign_layouts(runs)
    groups, serves = _group_labels(runs, judged), _serve_labels(runs, judged)
    keys = varying_knobs(judged)
    return [RunLabel(g, s, outside_campaign(r, layouts), knob_label(r, keys) if keys else "")
            for r, g, s in zip(runs, groups, serves, strict=True)]


def knob_flags(knobs: Mapping[str, str]) -> frozenset[str]:
    """The served names (flags as :mod:`served` normalises them, variables) the knobs of ``knobs`` set, from the
    catalogue (every value of each knob: a default value sets none, yet the knob's flag is the knob's)."""
    if not knobs:
        return frozenset()
    return _knob_flag_names().get_many(k.rpartition(".")[2] for k in knobs)


class _KnobFlags:
    def __init__(self, by_knob: dict[str, frozenset[str]]) -> None:
        self.by_knob = by_knob

    def get_many(self, names: Iterable[str]) -> frozenset[str]:
        out: set[str] = set()
        for n in names:
            out |= self.by_knob.get(n, frozenset())
        return frozenset(out)


@functools.lru_cache(maxsize=1)
def _knob_flag_names() -> _KnobFlags:
    from tui.core.errors import InputError
    from tui.core.plan.knobs import KnobCatalog

    try:
        catalog = KnobCatalog.load()
    except InputError:  # a damaged catalogue of the operator's: the flags stay in the setup column
        return _KnobFlags({})
    out: dict[str, frozenset[str]] = {}
    for k in catalog.knobs.values():
        names: set[str] = set()
        for words in [k.args, *(v.args for v in k.values)]:
            for w in words:
                if w.startswith("-"):
                    name = "--" + w.split("=", 1)[0].lstrip("-").replace("_", "-")
                    names.add("--" + name[5:] if name.startswith("--no-") else name)
        names |= {e for v in k.values for e, _ in v.env}
        out[k.name] = frozenset(names)
    return _KnobFlags(out)


def setup_labels(runs: Sequence[Run]) -> list[str]:
    """Per run, the parts of its setup that differ among ``runs`` (model · client · host · vLLM, the traffic, the
    serve flags, the campaign it is not part of), "" where none do."""
    return [label.full for label in run_labels(runs)]


def like_for_like_note(runs: Sequence[Run]) -> str:
    """"" when every run that measured something was measured and served alike; else one line naming what differs
    (rows of different setups are never averaged together; the best marks compare rows of one measurement only)."""
    judged = [r for r in runs if r.summary and not r.unusable]
    setups = [run_setup(r) for r in judged]
    diffs = []
    for i, part in enumerate(SETUP_PARTS):
        values = sorted({s[i] or "?" for s in setups})
        if len(values) > 1:
            diffs.append(f"{part} ({' vs '.join(values)})")
    for name, sigs in sorted(_workload_sigs(judged).items()):
        if len(sigs) > 1:
            diffs.append(f"workload {name} ({' vs '.join(sorted(sigs))})")
    swept = knob_flags({k: "" for r in judged for k in r.meta.knobs})  # a knob sweep differs on purpose
    for name, where in varying_settings(judged).items():
        if name in swept:
            continue
        runs_of = [r for r in judged if r.served.known and (where is None or r.meta.topology in where)]
        values = sorted({served.shown(name, r.served.get(name)) for r in runs_of})
        diffs.append(f"serve flag {name} ({' vs '.join(values)}"
                     + (f", within {', '.join(sorted(where))}" if where is not None else "") + ")")
    unknown = [r for r in judged if not r.served.known]
    if unknown and len(unknown) < len(judged):
        diffs.append(f"serve flags ({len(unknown)} of {len(judged)} runs stored without their plan: unknown)")
    if not diffs:
        return ""
    return "NOT LIKE-FOR-LIKE: these runs differ in " + "; ".join(diffs) + " (the setup column tells them apart)"


def unknown_flags_note(runs: Sequence[Run]) -> str:
    """The line that says repeats were averaged without knowing their flags: no run compared kept its plan."""
    judged = [r for r in runs if r.summary and not r.unusable]
    if not judged or any(r.served.known for r in judged):
        return ""
    return ("SERVE FLAGS UNKNOWN: no run compared kept its plan (stored before plans were, or imported): repeats of "
            "a cell are averaged without knowing they were served alike")
