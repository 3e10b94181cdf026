"""Predictions next to measurements: the simulator's prediction for a stored run (``prediction.json`` in the run's
directory), and a host's calibration (``<data dir>/calibration/<host>.json``).

A run's prediction comes from what the run recorded: the plan (topology, the stack's flags and env, the GPU memory
share), the workload, the GPUs' name in its fingerprint, its flags (a Triton JIT compile the servers logged). It is
made with the host's calibration when one exists, and says which.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core import paths, safeio
from tui.core.bench.store import Run
from tui.core.errors import InputError
from tui.core.models import Catalog, ModelProfile
from tui.core.plan.gpuspecs import PRESETS, GpuSpec, spec_for_name
from tui.core.plan.hostfacts import HostFacts
from tui.sim.perfmodel import CORRECTION_BOUNDS, Correction
from tui.sim.predict import METRICS, FitResult, FitRun, predict_facts, ratios, run_facts

PREDICTION_FILE = "prediction.json"
#: a simulated run's throughput or TPOT this far from its prediction measured something other than the model (the
#: proxy, the client or the CPUs of a loaded host): the simulated servers pace exactly what the model predicts
SIM_DIVERGENCE_BOUND = 0.15
DIVERGENCE_METRICS = ("output_throughput", "mean_tpot_ms")


def divergence(prediction: dict[str, Any]) -> str:
    """For a simulated run: which figures departed from the prediction beyond the bound ("" when none did)."""
    if not prediction.get("simulated_run"):
        return ""
    ratio = prediction.get("ratio") or {}
    off = [f"{k} {ratio[k]:.2f}×" for k in DIVERGENCE_METRICS
           if isinstance(ratio.get(k), int | float) and abs(float(ratio[k]) - 1.0) > SIM_DIVERGENCE_BOUND]
    return ", ".join(off)


def host_key(facts: HostFacts) -> str:
    """The host fingerprint a calibration is stored under: host name, GPU model and count."""
    names = sorted({g.name for g in facts.gpus}) or ["no-gpu"]
    raw = f"{facts.hostname or 'host'}-{len(facts.gpus)}x-{'+'.join(names)}"
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", raw).strip("-")


def calibration_path(facts: HostFacts) -> Path:
    return paths.data_dir() / "calibration" / f"{host_key(facts)}.json"


def calibration_gpu(facts: HostFacts) -> str:
    """The GPU model this host's calibration was fitted on ("" when there is none)."""
    data = _read(calibration_path(facts))
    return _gpu_name(data.get("gpu")) if isinstance(data, dict) else ""


def _gpu_name(value: Any) -> str:
    """A calibration's GPU model as it may be compared and printed ("" when it is no short printable text)."""
    return value if isinstance(value, str) and len(value) <= 200 and value.isprintable() else ""


def load_calibration(facts: HostFacts, gpu: str | None = None) -> tuple[Correction | None, str]:
    """This host's correction factors and where they came from (None, "none" when not calibrated); with ``gpu``,
    only a calibration fitted on runs of that GPU model (a host's factors say nothing about another one)."""
    path = calibration_path(facts)
    if not os.path.lexists(path):
        return None, "none"
    try:  # a regular file within a run record's size, strict JSON (a FIFO or a device in its place: refused)
        data = safeio.load_json(path, "run record")
    except InputError as exc:
        raise InputError(f"not a calibration file: {exc.message}", file=path, line=exc.line) from None
    try:
        f = data["factors"]
        lo, hi = CORRECTION_BOUNDS
        corr = Correction(**{k: min(hi, max(lo, safeio.finite(f[k], path, f"factors.{k}")))
                             for k in ("decode", "prefill", "kv_transfer")})
    except (KeyError, TypeError) as exc:
        raise InputError(f"not a calibration file: {safeio.shown(str(exc), 80)}", file=path) from None
    fitted = _gpu_name(data.get("gpu"))
    if gpu is not None and fitted and fitted != gpu:
        return None, f"none (this host's calibration was fitted on {fitted})"
    return corr, str(path)


def save_calibration(facts: HostFacts, fit: FitResult, runs: Sequence[str], gpu: str = "") -> Path:
    path = calibration_path(facts)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"host": host_key(facts), "gpu": gpu, "created": time.time(), "factors": fit.correction.to_dict(),
            "bounds": list(CORRECTION_BOUNDS), "rms_log_residual_before": fit.before,
            "rms_log_residual_after": fit.after, "runs": list(runs), "residuals": fit.residuals}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)
    return path


def _read(path: Path) -> Any:
    """A JSON file of a run folder (which may have been copied from elsewhere): a regular file within the size of a
    run record, strict JSON; None when it is absent or is not (a FIFO in its place is never waited on)."""
    try:
        return safeio.load_json(path, "run record")
    except InputError:
        return None


@dataclass
class RunContext:
    """A stored run's facts, resolved against the catalog and the GPU presets (or why they cannot be)."""

    run: Run
    profile: ModelProfile | None
    spec: GpuSpec | None
    why_not: str


def resolve(run: Run, catalog: Catalog, gpu: GpuSpec | None = None) -> tuple[Any, RunContext]:
    meta = run.meta.to_dict()
    plan = _read(run.path / "plan.json")
    workload = _read(run.path / "workload.json")
    facts = run_facts(meta, plan if isinstance(plan, dict) else None,
                      workload if isinstance(workload, dict) else None, run.summary)
    profile = None
    why = ""
    for ref in (facts.profile_id, run.meta.model):
        if not ref:
            continue
        try:
            profile = catalog.model(ref)
            break
        except InputError:
            continue
    if profile is None:
        why = f"no model profile for {safeio.shown(facts.profile_id or run.meta.model or '?', 80)}"
    spec = spec_for_name(facts.gpu) if facts.gpu else gpu
    if spec is None and not why:
        why = f"unknown GPU {facts.gpu!r} (known: {', '.join(PRESETS)})" if facts.gpu else "no GPU recorded"
    if not why and (not facts.topology or facts.topology in ("endpoint", "unknown")):
        why = "topology not recorded (a bench against a bare endpoint)"
    if not why and (facts.input_len <= 0 or facts.output_len <= 0):
        why = "workload lengths not recorded"
    return facts, RunContext(run, profile, spec, why)


def predict_run(run: Run, catalog: Catalog, correction: Correction | None = None, source: str = "none",
                gpu: GpuSpec | None = None) -> dict[str, Any]:
    """``{"label": "PREDICTED", "values": ..., "ratio": measured/predicted, ...}`` or ``{"unavailable": why}``."""
    facts, ctx = resolve(run, catalog, gpu)
    if ctx.why_not or ctx.profile is None or ctx.spec is None:
        return {"unavailable": ctx.why_not}
    p = predict_facts(facts, ctx.profile, ctx.spec, correction)
    if p.refused:
        return {"unavailable": p.refused}
    return {"label": "PREDICTED", "model": ctx.profile.id, "gpu": ctx.spec.name, "topology": p.topology,
            "input_len": p.input_len, "output_len": p.output_len, "num_prompts": p.num_prompts,
            "request_rate": "inf" if p.rate is None else p.rate, "values": p.values,
            "ratio": ratios(p.values, run.summary), "notes": p.notes,
            "calibration": (correction or Correction()).to_dict(), "calibration_source": source,
            "simulated_run": run.simulated}


def attach_prediction(run: Run, catalog: Catalog, facts: HostFacts | None = None) -> dict[str, Any]:
    """Compute the run's prediction (with this host's calibration for the run's GPU) and store it next to its
    results."""
    _, ctx = resolve(run, catalog)
    gpu = ctx.spec.name if ctx.spec is not None else ""
    corr, source = load_calibration(facts, gpu) if facts is not None else (None, "none")
    data = predict_run(run, catalog, corr, source)
    tmp = run.path / f".{PREDICTION_FILE}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, run.path / PREDICTION_FILE)
    except OSError:
        pass  # a read-only results folder keeps its measurements; the prediction is shown, not stored
    return data


def stored_prediction(run: Run) -> dict[str, Any] | None:
    data = _read(run.path / PREDICTION_FILE)
    return data if isinstance(data, dict) else None


def fit_runs(runs: Sequence[Run], catalog: Catalog, gpu: GpuSpec | None = None
             ) -> tuple[list[FitRun], list[tuple[str, str]]]:
    """The measured runs a calibration can use, and the skipped ones with why (simulated, incomplete, servers
    sharing a GPU, facts missing)."""
    used: list[FitRun] = []
    skipped: list[tuple[str, str]] = []
    for r in runs:
        if r.simulated:
            skipped.append((r.id, "simulated: its figures are the model's own"))
            continue
        if r.meta.status != "complete":
            skipped.append((r.id, r.meta.status))
            continue
        facts, ctx = resolve(r, catalog, gpu)
        if ctx.why_not or ctx.profile is None or ctx.spec is None:
            skipped.append((r.id, ctx.why_not))
            continue
        if facts.shared_gpus:
            skipped.append((r.id, "its servers shared a GPU, which the model does not time-share"))
            continue
        measured = {k: float(r.summary[k]) for k in METRICS if isinstance(r.summary.get(k), int | float)}
        used.append(FitRun(r.id, facts, ctx.profile, ctx.spec, measured))
    return used, skipped
