"""The catalogue: every model profile and workload this host knows (shipped ones, then the operator's, which
win), and the lookup behind ``--model`` and ``--workload``: an id, a profile or workload file, or a model derived
from a local folder or the Hugging Face cache (:mod:`tui.core.models.modelsrc`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tui.core import paths
from tui.core.errors import InputError
from tui.core.models import ranges
from tui.core.models.profiles import (
    RANDOM_CELL,
    ModelProfile,
    Workload,
    parse_model_profile,
    parse_workloads_file,
)
from tui.core.yamlio import load_file


@dataclass
class Catalog:
    """Every model profile and workload the app knows: shipped ones, then the operator's (which win)."""

    models: dict[str, ModelProfile] = field(default_factory=dict)
    workloads: dict[str, Workload] = field(default_factory=dict)

    @classmethod
    def load(cls, extra_dirs: list[Path] | None = None) -> Catalog:
        cat = cls()
        for base in [paths.shipped_profiles_dir(), paths.user_profiles_dir(), *(extra_dirs or [])]:
            cat._load_dir(base)
        return cat

    def _load_dir(self, base: Path) -> None:
        models_dir = base / "models"
        if models_dir.is_dir():
            for path in sorted(models_dir.glob("*.y*ml")):
                prof = parse_model_profile(load_file(path), path)
                self.models[prof.id] = prof
        wl = base / "workloads.yaml"
        if os.path.lexists(wl):  # a FIFO, a folder or a broken link there is refused in one line
            self.workloads.update(parse_workloads_file(load_file(wl), wl))

    def model(self, ref: str) -> ModelProfile:
        """A profile by id, by path to a profile file, or derived from a model: a local model folder (or its
        ``config.json``), a repo id ``ORG/NAME`` found in the Hugging Face cache (never downloaded), or the id
        ``disagg-tui profile list`` shows for a discovered model (see :mod:`tui.core.models.modelsrc`)."""
        if ref in self.models:
            return self.models[ref]
        if len(ref) > 4096 or any(len(part) > 255 for part in ref.split(os.sep)):  # stat() would raise ENAMETOOLONG
            raise InputError(f"not a profile id, a profile file or a model folder: a name of {len(ref):,} "
                             "characters", field="--model")
        path = Path(ref).expanduser()
        if path.suffix in (".yaml", ".yml") or (path.is_file() and path.name != "config.json"):
            return parse_model_profile(load_file(path), path)
        from tui.core.models.modelsrc import resolve_model  # derivation costs imports a plain id never needs

        derived = resolve_model(ref, self)
        if derived is not None:
            return derived
        if os.sep in ref:
            raise InputError("no such profile file or model folder", file=path, field="--model")
        known = ", ".join(sorted(self.models)) or "none"
        raise InputError(f"unknown model {ref!r} (known profiles: {known}; or give a profile file, a model folder "
                         "or a repo id ORG/NAME of the Hugging Face cache; 'disagg-tui profile list' shows them "
                         "all)", field="--model")

    def workload(self, ref: str) -> Workload:
        if ref in self.workloads:
            return self.workloads[ref]
        cell = RANDOM_CELL.fullmatch(ref)
        if cell and self.workloads:  # ``random-<in>x<out>``: what bench names a run and predict suggests
            base = self.workloads.get("decode-heavy") or next(iter(self.workloads.values()))
            for key, digits in (("input_len", cell.group(1)), ("output_len", cell.group(2))):
                if len(digits) > 12:
                    raise InputError(f"{digits[:20]}… is out of range", field=f"--workload ({key})")
                ranges.check(ranges.WORKLOAD, key, int(digits), field=f"--workload ({key})")
            return base.with_overrides(name=ref, input_len=int(cell.group(1)), output_len=int(cell.group(2)),
                                       description=f"random prompts, {cell.group(1)} in / {cell.group(2)} out")
        path = Path(ref).expanduser()
        if path.suffix in (".yaml", ".yml") or os.sep in ref or path.is_file():
            found = parse_workloads_file(load_file(path), path)
            if len(found) != 1:
                raise InputError(f"holds {len(found)} workloads; name one of {', '.join(found)} after adding "
                                 f"the file to {paths.user_profiles_dir() / 'workloads.yaml'}", file=path)
            return next(iter(found.values()))
        known = ", ".join(sorted(self.workloads)) or "none"
        raise InputError(f"unknown workload {ref!r} (known: {known}; or give a path to a workload file)",
                         field="--workload")
