"""Every model this host can launch, and where each comes from.

Four sources, in this order:

- ``shipped``: the profiles of ``profiles/models/`` (shipped with the package);
- ``operator``: the operator's profiles (``$DISAGG_TUI_CONFIG_DIR/profiles/models/``), which win over shipped ones
  of the same id;
- ``hf-cache``: the model repos of the Hugging Face cache (:mod:`tui.core.models.hfcache`), each derived from its
  snapshot (:mod:`tui.core.models.modeldir`);
- ``folder``: model folders under the directories of ``$DISAGG_TUI_MODEL_DIRS`` (``os.pathsep``-separated; a
  directory that is itself a model folder counts too).

:func:`list_models` is what the console's launch screen and ``disagg-tui profile list`` show;
:func:`resolve_model` is what ``--model`` falls back on when the reference is no profile id or file. A discovered
model's id is its folder or repo name in lowercase (``Qwen/Qwen3-8B`` → ``qwen3-8b``); where that is taken (by a
profile or an earlier discovered model) the organisation or the parent folder is put in front
(``qwen-qwen3-8b``). Nothing here downloads anything.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tui.core import paths, safeio
from tui.core.errors import InputError
from tui.core.models.hfcache import CachedRepo, find_repo, hub_cache_dir, looks_like_repo_id, scan_cached_repos
from tui.core.models.modeldir import DerivedModel, derive, slug
from tui.core.models.profiles import ModelProfile

SOURCES = ("shipped", "operator", "hf-cache", "folder")
MODEL_DIRS_ENV = "DISAGG_TUI_MODEL_DIRS"


class KnownModels(Protocol):
    """What derivation needs of the catalogue (:class:`tui.core.models.catalog.Catalog`): the ids already taken."""

    @property
    def models(self) -> Mapping[str, ModelProfile]: ...


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One launchable model.

    ``id``: what ``--model`` takes (a profile id, or the discovered id); ``title``: a display name; ``source``: one
    of :data:`SOURCES`; ``path``: the profile file, the model folder or the HF-cache snapshot; ``ref``: the most
    explicit reference to give ``--model`` (the profile id, the folder, or the repo id); ``problem``: None when it
    can be launched as it is, else one line saying what is missing (a field that cannot be derived, a broken or
    partial folder, a model folder that is not on this host).
    """

    id: str
    title: str
    source: str
    path: str
    ref: str
    problem: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"id": self.id, "title": self.title, "source": self.source, "path": self.path, "ref": self.ref,
                "problem": self.problem}


def model_dirs() -> list[Path]:
    raw = os.environ.get(MODEL_DIRS_ENV, "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


@dataclass(frozen=True, slots=True)
class _Found:
    """A discovered model before derivation: its source, folder, repo id and the two candidate ids."""

    source: str
    folder: Path | None
    repo: CachedRepo | None
    name: str
    prefix: str

    @property
    def ref(self) -> str:
        return self.repo.repo_id if self.repo is not None else str(self.folder)


def _has_config(folder: Path) -> bool:
    try:
        return os.path.lexists(folder / "config.json") and folder.is_dir()
    except OSError:  # an unreadable folder: not listed
        return False


def _folders(extra_dirs: list[Path] | None, cut: list[Path] | None = None) -> Iterator[Path]:
    """The model folders under the model directories: each directory itself when it is one, else its entries that
    are (one level down, at most :data:`safeio.MAX_DIR_ENTRIES` entries read of each; a directory with more is
    added to ``cut``)."""
    seen: set[Path] = set()
    for root in [*model_dirs(), *(extra_dirs or [])]:
        if _has_config(root):
            candidates = [root]
        else:
            try:
                names, more = safeio.scan_dir(root)
            except OSError:
                continue
            if more and cut is not None:
                cut.append(root)
            candidates = [root / n for n in names if _has_config(root / n)]
        for c in candidates:
            key = c.absolute()
            if key not in seen:
                seen.add(key)
                yield c


def _discovered(extra_dirs: list[Path] | None = None, cut: list[Path] | None = None) -> list[_Found]:
    found: list[_Found] = []
    repos, more = scan_cached_repos()
    if more and cut is not None:
        cut.append(hub_cache_dir())
    for repo in repos:
        org, _, name = repo.repo_id.partition("/")
        found.append(_Found("hf-cache", repo.snapshot, repo, name or org, org))
    for folder in _folders(extra_dirs, cut):
        found.append(_Found("folder", folder, None, folder.name, folder.absolute().parent.name))
    return found


def _assign_ids(found: list[_Found], taken: set[str]) -> list[tuple[str, _Found]]:
    out = []
    used = set(taken)
    for f in found:
        pid = slug(f.name)
        if pid in used:
            pid = slug(f"{f.prefix}-{f.name}")
        n = 2
        base = pid
        while pid in used:
            pid = f"{base}-{n}"
            n += 1
        used.add(pid)
        out.append((pid, f))
    return out


def _derive_found(pid: str, f: _Found) -> DerivedModel:
    if f.folder is None:
        assert f.repo is not None
        raise InputError(f"{f.repo.repo_id}: no snapshot in the Hugging Face cache ({f.repo.folder}): an "
                         "unfinished download?", field="--model")
    repo_id = f.repo.repo_id if f.repo is not None else None
    revision = f.repo.revision if f.repo is not None else ""
    try:
        return derive(f.folder, repo_id=repo_id, revision=revision, profile_id=pid)
    except OSError as exc:  # a folder that changed or became unreadable while it was read
        raise InputError(f"cannot read: {exc.strerror or exc}", file=f.folder) from None


def list_models(catalog: KnownModels, extra_dirs: list[Path] | None = None) -> list[ModelEntry]:
    """Every launchable model with its source: the catalogue's profiles (shipped, then the operator's), then the
    models of the Hugging Face cache and of ``$DISAGG_TUI_MODEL_DIRS`` (and ``extra_dirs``), derived on the spot.

    It reads files only (config.json, the safetensors index or headers): call it off the event loop. It never
    raises for one broken model: that entry carries the one-line ``problem`` instead."""
    shipped_dir = paths.shipped_profiles_dir().resolve()
    entries: list[ModelEntry] = []
    for pid in sorted(catalog.models):
        prof = catalog.models[pid]
        src = Path(prof.source)
        source = "shipped" if src.resolve().is_relative_to(shipped_dir) else "operator"
        entries.append(ModelEntry(id=pid, title=prof.title, source=source, path=prof.source, ref=pid,
                                  problem=_profile_problem(prof)))
    cut: list[Path] = []
    for pid, f in _assign_ids(_discovered(extra_dirs, cut), set(catalog.models)):
        path = str(f.folder) if f.folder is not None else str(f.repo.folder if f.repo else "")
        try:
            derived = _derive_found(pid, f)
        except InputError as err:
            entries.append(ModelEntry(id=pid, title=f.ref, source=f.source, path=path, ref=f.ref,
                                      problem=err.one_line()))
            continue
        entries.append(ModelEntry(id=pid, title=str(derived.data["title"]), source=f.source, path=path, ref=f.ref,
                                  problem=derived.problem()))
    for folder in cut:
        source = "hf-cache" if folder == hub_cache_dir() else "folder"
        entries.append(ModelEntry(id="(more)", title=f"more entries in {folder}", source=source, path=str(folder),
                                  ref=str(folder), problem=f"{folder}: holds more than {safeio.MAX_DIR_ENTRIES:,} "
                                                           "entries; only that many were read"))
    return entries


def _profile_problem(prof: ModelProfile) -> str | None:
    model = prof.model
    if model.startswith(("/", "~", ".")) and not Path(model).expanduser().is_dir():
        if prof.load_format == "dummy":
            return f"model folder {model} (config.json and tokenizer for --load-format dummy) is not on this host"
        return f"model folder {model} is not on this host"
    return None


def derive_ref(ref: str, catalog: KnownModels | None = None) -> DerivedModel | None:
    """The derivation behind ``ref``: a model folder (or its config.json), a repo id of the HF cache, or the id of
    a discovered model. None when ``ref`` is none of those (an unknown name); InputError (one line) for a repo id
    that is not cached, a broken folder or a cached repo without a snapshot."""
    taken = set(catalog.models) if catalog is not None else set()
    path = Path(ref).expanduser()
    if path.name == "config.json" and os.path.lexists(path):
        path = path.parent  # (read, and refused when it is no regular file, by derive)
    if path.is_dir():
        path = path.absolute()
        return derive(path, profile_id=_id_for_folder(path, taken))
    if looks_like_repo_id(ref):
        repo = find_repo(ref)
        if repo is None:
            raise not_cached_error(ref)
        org, _, name = repo.repo_id.partition("/")
        ids = {f.repo.repo_id: pid for pid, f in _assign_ids(_discovered(), taken) if f.repo is not None}
        pid = ids.get(repo.repo_id) or (slug(name) if slug(name) not in taken else slug(f"{org}-{name}"))
        if repo.snapshot is None:
            raise InputError(f"{repo.repo_id}: no snapshot in the Hugging Face cache ({repo.folder}): an unfinished "
                             "download?", field="--model")
        return derive(repo.snapshot, repo_id=repo.repo_id, revision=repo.revision, profile_id=pid)
    if os.sep in ref:
        return None
    for pid, f in _assign_ids(_discovered(), taken):
        if pid == ref:
            return _derive_found(pid, f)
    return None


def _id_for_folder(folder: Path, taken: set[str]) -> str:
    for pid, f in _assign_ids(_discovered(), taken):
        if f.folder is not None and f.folder.absolute() == folder.absolute():
            return pid
    snap = _snapshot_repo_name(folder)
    name = snap or folder.name
    pid = slug(name)
    return pid if pid not in taken else slug(f"{folder.absolute().parent.name}-{name}")


def _snapshot_repo_name(folder: Path) -> str | None:
    from tui.core.models.hfcache import repo_of_snapshot

    found = repo_of_snapshot(folder)
    return found[0].split("/", 1)[-1] if found else None


def resolve_model(ref: str, catalog: KnownModels | None = None) -> ModelProfile | None:
    """The profile derived from ``ref`` (see :func:`derive_ref`), or None when ``ref`` names no model. A model
    with fields that cannot be derived raises one InputError line naming them (and the field to set)."""
    derived = derive_ref(ref, catalog)
    return derived.profile() if derived is not None else None


def not_cached_error(ref: str) -> InputError:
    repo_id = ref.partition("@")[0]
    return InputError(f"{repo_id}: not a model folder here and not in the Hugging Face cache ({hub_cache_dir()}); "
                      "nothing is downloaded", field="--model",
                      hint=f"download it first (huggingface-cli download {repo_id}), set HF_HUB_CACHE or HF_HOME "
                           "to the cache that holds it, or give the model folder")
