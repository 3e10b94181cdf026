"""The Hugging Face hub cache, read offline: where a repo id's files are on this host (nothing is ever downloaded).

The cache is ``$HF_HUB_CACHE``, else ``$HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, else
``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub`` (huggingface_hub's order). A model repo
``ORG/NAME`` lives in ``models--ORG--NAME/``: ``refs/<branch>`` holds a commit hash and ``snapshots/<commit>/``
the files (links into ``blobs/``). The snapshot used is the one ``refs/main`` names, else the newest one; a
revision can be asked for as ``ORG/NAME@REV`` (a branch in ``refs/`` or a commit or its prefix).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tui.core import safeio
from tui.core.errors import InputError

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9._/-]+)?\Z")


def hub_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The hub cache of ``env`` (default: this process's environment)."""
    e = os.environ if env is None else env
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        value = e.get(var)
        if value:
            return Path(value).expanduser()
    home = e.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = e.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


@dataclass(frozen=True, slots=True)
class CachedRepo:
    repo_id: str  # ORG/NAME
    snapshot: Path | None  # the folder of the revision used; None when the repo has no snapshot
    revision: str  # the commit hash (the snapshot folder's name), "" without one

    @property
    def folder(self) -> Path:
        """``models--ORG--NAME`` in the cache."""
        return hub_cache_dir() / ("models--" + self.repo_id.replace("/", "--"))


def looks_like_repo_id(ref: str) -> bool:
    return bool(REPO_ID.match(ref))


#: a commit hash or branch name as refs/<branch> may hold it (a path such as ../.. is refused)
_COMMIT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


def _ref_commit(ref_file: Path) -> str:
    """The commit a ref file names ("" when it is none: missing, not a regular file, not a commit)."""
    try:
        data = safeio.read_bytes(ref_file, "ref", limit=256)
    except InputError:
        return ""
    commit = data.decode("utf-8", errors="replace").strip()
    return commit if _COMMIT.match(commit) else ""


def _snapshot(repo_dir: Path, revision: str | None) -> tuple[Path | None, str]:
    snaps = repo_dir / "snapshots"
    wanted = revision or "main"
    ref_file = repo_dir / "refs" / wanted
    if ".." not in Path(wanted).parts and os.path.lexists(ref_file):
        commit = _ref_commit(ref_file)
        if commit and safeio.is_dir(snaps / commit):
            return snaps / commit, commit
    found = [snaps / n for n in safeio.dir_names(snaps) if safeio.is_dir(snaps / n)]
    if revision:
        matches = [p for p in found if p.name.startswith(revision)]
        if len(matches) == 1:
            return matches[0], matches[0].name
        return None, ""
    if not found:
        return None, ""
    newest = max(found, key=lambda p: (_mtime(p), p.name))
    return newest, newest.name


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def find_repo(ref: str) -> CachedRepo | None:
    """The cached snapshot of ``ORG/NAME[@REV]``, or None when the cache does not hold that repo."""
    repo_id, _, revision = ref.partition("@")
    repo_dir = hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    if not safeio.is_dir(repo_dir):
        # repo ids are case-sensitive on the hub, but an operator may type them in another case
        lowered = ("models--" + repo_id.replace("/", "--")).lower()
        same = [hub_cache_dir() / n for n in safeio.dir_names(hub_cache_dir()) if n.lower() == lowered]
        if len(same) != 1:
            return None
        repo_dir = same[0]
        repo_id = repo_dir.name[len("models--"):].replace("--", "/", 1)
    snapshot, commit = _snapshot(repo_dir, revision or None)
    if snapshot is None and revision:
        raise InputError(f"{repo_id}: revision {revision!r} is not in the Hugging Face cache ({repo_dir}); nothing "
                         "is downloaded", field="--model")
    return CachedRepo(repo_id=repo_id, snapshot=snapshot, revision=commit)


def scan_cached_repos() -> tuple[list[CachedRepo], bool]:
    """Every model repo of the cache (``models--*``), with the snapshot ``find_repo`` would use, and whether the
    cache holds more entries than :data:`safeio.MAX_DIR_ENTRIES` (the rest are not read)."""
    root = hub_cache_dir()
    try:
        names, more = safeio.scan_dir(root)
    except OSError:
        return [], False
    out = []
    for name in names:
        d = root / name
        if not name.startswith("models--") or not safeio.is_dir(d):
            continue
        repo_id = name[len("models--"):].replace("--", "/", 1)
        snapshot, commit = _snapshot(d, None)
        out.append(CachedRepo(repo_id=repo_id, snapshot=snapshot, revision=commit))
    return out, more


def cached_repos() -> list[CachedRepo]:
    """Every model repo of the cache (``models--*``), with the snapshot ``find_repo`` would use."""
    return scan_cached_repos()[0]


def repo_of_snapshot(folder: Path) -> tuple[str, str] | None:
    """(repo id, commit) when ``folder`` is ``.../models--ORG--NAME/snapshots/COMMIT``, else None."""
    parts = Path(os.path.abspath(folder)).parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3][len("models--"):].replace("--", "/", 1), parts[-1]
    return None
