"""Installing a bundle's profile and workloads into the operator's profiles: what would change, then the change.

``import`` shows :func:`install_changes` first (added, already there, or differs, with the fields that differ);
:func:`install` never replaces an existing profile or workload (shipped or the operator's) without ``replace``, and
writes each file through a temporary one that must load back, so an installed file never breaks the catalogue
that every later command reads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core import paths
from tui.core.errors import InputError
from tui.core.models import ModelProfile, Workload, parse_model_profile, parse_workloads_file
from tui.core.record.bundle import Bundle, workload_to_dict
from tui.core.safeio import shown
from tui.core.yamlio import dump, load_file, plain


def missing_secrets(bundle: Bundle, environ: Mapping[str, str]) -> list[str]:
    return [name for name in bundle.secrets_needed if not environ.get(name)]


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): data}


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """One line per field that differs between two plain mappings: ``vllm.env.X: 1 (here) → 2 (bundle)``."""
    a, b = _flatten(dict(old)), _flatten(dict(new))
    return [f"{k}: {shown(a.get(k, '—'), 60)} (here) → {shown(b.get(k, '—'), 60)} (bundle)"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


@dataclass(frozen=True, slots=True)
class Change:
    """What ``import`` would do with one profile or workload: added, already there, or replacing one that differs
    (``diff`` says how)."""

    what: str  # "profile qwen3.6-27b-nvfp4", "workload decode-heavy"
    state: str  # added | already there | differs
    where: str  # the existing one's file ("shipped" ones say so)
    diff: tuple[str, ...] = ()


def _origin(source: str) -> str:
    shipped = str(paths.shipped_profiles_dir())
    return f"shipped, {source}" if source.startswith(shipped) else source or "?"


def install_changes(bundle: Bundle, models: Mapping[str, ModelProfile], workloads: Mapping[str, Workload]
                    ) -> list[Change]:
    """What installing the bundle would change, against the profiles and workloads this host knows now."""
    out: list[Change] = []
    old = models.get(bundle.profile.id)
    what = f"profile {bundle.profile.id}"
    if old is None:
        out.append(Change(what, "added", ""))
    else:
        diff = differences(old.to_dict(), bundle.profile.to_dict())
        out.append(Change(what, "differs" if diff else "already there", _origin(old.source), tuple(diff)))
    for name, w in bundle.workloads.items():
        ow = workloads.get(name)
        what = f"workload {name}"
        if ow is None:
            out.append(Change(what, "added", ""))
        else:
            diff = differences(workload_to_dict(ow), workload_to_dict(w))
            out.append(Change(what, "differs" if diff else "already there", _origin(ow.source), tuple(diff)))
    return out


def check_replace(bundle: Bundle, changes: list[Change], replace: bool) -> None:
    """InputError (nothing is written) when a profile or workload of the bundle exists here and differs, unless
    ``replace``."""
    differing = [c for c in changes if c.state == "differs"]
    if differing and not replace:
        first = differing[0]
        raise InputError(f"{first.what} exists ({first.where}) and differs from the bundle's in "
                         f"{len(first.diff)} field(s); nothing written: import with --replace to replace "
                         + ("it" if len(differing) == 1 else f"the {len(differing)} that differ"),
                         file=bundle.path, field="--replace")


def _write_checked(target: Path, text: str, check: Any) -> None:
    """Write ``text`` to ``target`` through a temporary file that must load back (``check(path)``) first: an
    installed file never breaks the catalogue every later command reads."""
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    try:
        check(tmp)
    except InputError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"would not load back ({exc.message}); nothing written", file=target) from None
    os.replace(tmp, target)


def install(bundle: Bundle, models: Mapping[str, ModelProfile], workloads: Mapping[str, Workload], *,
            replace: bool = False, config: Path | None = None) -> list[str]:
    """Add the bundle's profile and workloads to the operator's profiles; one line per change made. A profile or
    workload that exists (shipped or the operator's) and differs is replaced only with ``replace``; otherwise
    nothing at all is written (InputError naming the first that differs)."""
    changes = install_changes(bundle, models, workloads)
    check_replace(bundle, changes, replace)
    base = config or paths.user_profiles_dir()
    out = []
    models_dir = base / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    target = models_dir / f"{bundle.profile.id}.yaml"
    prof = changes[0]
    if prof.state == "already there":
        out.append(f"profile {bundle.profile.id}: already there ({prof.where})")
    else:
        header = f"# imported from {shown(bundle.path.name, 80)} ({bundle.source['kind']} " \
                 f"{shown(bundle.source['id'], 80)})\n"
        _write_checked(target, header + dump(bundle.profile_data),
                       lambda p: parse_model_profile(load_file(p), p, expand_env=False))
        out.append(f"profile {bundle.profile.id}: {'replaced' if prof.state == 'differs' else 'added'} ({target})"
                   + (f", which now overrides the {prof.where}" if prof.where.startswith("shipped") else ""))
    wl_changes = [c for c in changes[1:] if c.state != "already there"]
    for c in changes[1:]:
        if c.state == "already there":
            out.append(f"{c.what}: already there ({c.where})")
    if wl_changes:
        wl_file = base / "workloads.yaml"
        existing: dict[str, Any] = {}
        if wl_file.exists():
            raw = load_file(wl_file)
            parse_workloads_file(raw, wl_file)  # refuse to extend a file that is already broken
            if isinstance(raw, dict) and isinstance(raw.get("workloads"), dict):
                existing = plain(raw["workloads"])
        for c in wl_changes:
            name = c.what.split(" ", 1)[1]
            existing[name] = bundle.workload_data[name]
            out.append(f"{c.what}: {'replaced' if c.state == 'differs' else 'added'} ({wl_file})")
        _write_checked(wl_file, dump({"workloads": existing}), lambda p: parse_workloads_file(load_file(p), p))
    return out
