"""Where a model's files are on this machine: a local folder, or the Hugging Face cache (never the network)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tui.core import safeio
from tui.core.models.hfcache import hub_cache_dir

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
_HF_ID = re.compile(r"^[\w.-]+/[\w.-]+\Z")
#: stop counting after this many files and folders (a size is then a lower bound); a model folder holds far fewer
MAX_FILES = 20_000
#: folders looked into below the model folder (a real one nests two or three)
MAX_DIR_DEPTH = 8


@dataclass(frozen=True, slots=True)
class ModelFiles:
    model: str
    kind: str  # local | hf
    where: Path  # the folder looked at (a snapshot folder for the HF cache)
    found: bool
    size_bytes: int = 0
    files: int = 0
    has_config: bool = False
    has_weights: bool = False
    has_tokenizer: bool = False
    capped: bool = False


def is_local(model: str) -> bool:
    return model.startswith(("/", "~", ".")) or not _HF_ID.match(model) or Path(model).exists()


def hf_home(env: Mapping[str, str]) -> Path:
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "huggingface"


def hf_hub_cache(env: Mapping[str, str]) -> Path:
    """The hub cache ``profile new`` and ``--model REPO`` read (``tui.core.models.hfcache``): ``doctor`` looks in
    the same."""
    return hub_cache_dir(env)


def hf_token_source(env: Mapping[str, str]) -> str | None:
    """Where a Hugging Face token would come from (the name of the variable or file), never the token."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if env.get(name):
            return name
    path = Path(env["HF_TOKEN_PATH"]).expanduser() if env.get("HF_TOKEN_PATH") else hf_home(env) / "token"
    try:
        if path.is_file() and path.stat().st_size > 0:
            return f"token file {path}"
    except OSError:
        return None
    return None


def _scan(folder: Path) -> tuple[int, int, bool, bool, bool, bool]:
    """(bytes, files, has config.json, has weights, has a tokenizer, capped) of the files under ``folder``: at most
    MAX_FILES entries and MAX_DIR_DEPTH folders deep are looked at (a hostile tree of a million folders, or of
    folders nested thousands deep, made os.walk run out of time or recursion)."""
    size = files = entries = 0
    config = weights = tokenizer = capped = False
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[Path, int]] = [(folder, 0)]
    while stack and not capped:
        where, depth = stack.pop()
        try:
            it = os.scandir(where)
        except OSError:
            continue
        with it:
            for entry in it:
                entries += 1
                if entries > MAX_FILES:
                    capped = True
                    break
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if depth + 1 < MAX_DIR_DEPTH:
                            stack.append((Path(entry.path), depth + 1))
                        else:
                            capped = True
                        continue
                    st = os.stat(entry.path)  # follows the HF cache's symlinks into blobs/
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
                files += 1
                size += st.st_size
                name = entry.name
                config = config or name == "config.json"
                weights = weights or name.endswith(WEIGHT_SUFFIXES)
                tokenizer = tokenizer or name in TOKENIZER_FILES
    return size, files, config, weights, tokenizer, capped


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def locate_model(model: str, env: Mapping[str, str]) -> ModelFiles:
    """The model's files as present now: the folder itself, or the newest snapshot in the HF cache."""
    if is_local(model):
        folder = Path(model).expanduser()
        if not folder.is_dir():
            return ModelFiles(model, "local", folder, found=False)
        size, files, config, weights, tok, capped = _scan(folder)
        return ModelFiles(model, "local", folder, True, size, files, config, weights, tok, capped)
    org, name = model.split("/", 1)
    repo = hf_hub_cache(env) / f"models--{org}--{name}"
    snapshots = repo / "snapshots"
    revs = sorted((p for p in (snapshots / n for n in safeio.dir_names(snapshots)) if safeio.is_dir(p)), key=_mtime)
    if not revs:
        return ModelFiles(model, "hf", repo, found=False)
    folder = revs[-1]
    size, files, config, weights, tok, capped = _scan(folder)
    return ModelFiles(model, "hf", folder, True, size, files, config, weights, tok, capped)
