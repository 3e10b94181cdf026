"""Installing a bundle's profile and workloads into the operator's profiles: what would change, then the change.

``import`` shows :func:`install_changes` first (added, already there, or differs, with the fields that differ);
:func:`prepare_install` makes every check before anything is written (nothing replaced without ``replace``, no
symlink or special file at a target, every file as written loads back within its size limit), and
:func:`write_all` writes the profile and the workloads file all or nothing (staged, then renamed), so an import
that fails leaves no file of it and an installed file never breaks the catalogue that every later command reads.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core import paths
from tui.core.errors import InputError
from tui.core.models import ModelProfile, Workload, parse_model_profile, parse_workloads_file
from tui.core.record.bundle import Bundle, workload_to_dict
from tui.core.safeio import LIMITS, shown
from tui.core.safewrite import ensure_dir
from tui.core.yamlio import dump, load_file, load_text, plain


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


# --- all or nothing ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _File:
    """One file an import writes: where, what, and the check its text passed (loaded back as every later command
    reads it)."""

    target: Path
    text: str


@dataclass(frozen=True, slots=True)
class Installation:
    """What an import writes, every check already passed (:func:`prepare_install`); :meth:`commit` writes it all or
    nothing."""

    root: Path
    files: tuple[_File, ...]
    lines: tuple[str, ...]  # one per change, as the operator reads them

    def commit(self) -> list[str]:
        """Write every file (:func:`write_all`); the lines saying what changed."""
        write_all(self.root, [(f.target, f.text) for f in self.files])
        return list(self.lines)


def _check_place(root: Path, target: Path) -> None:
    """InputError (nothing written) unless every component from ``root`` down to ``target`` is absent or what it
    should be: folders that are folders (never a symlink), and a target that is a regular file (never a symlink,
    a FIFO or a folder)."""
    p = root
    parts = target.relative_to(root).parts
    for i, name in enumerate(parts):
        p = p / name
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise InputError(f"cannot be checked ({exc.strerror or exc}); nothing written", file=p) from None
        last = i == len(parts) - 1
        if stat.S_ISLNK(st.st_mode):
            raise InputError(f"is a symlink (to {shown(os.readlink(p), 120)}); an import never writes through one; "
                             "nothing written", file=p)
        if not last and not stat.S_ISDIR(st.st_mode):
            raise InputError("is not a folder; nothing written", file=p)
        if last and not stat.S_ISREG(st.st_mode):
            raise InputError("is not a regular file (a folder, a FIFO or a device); nothing written", file=p)


def _checked_text(target: Path, text: str, check: Callable[[Any, Path], object]) -> str:
    """``text`` if it loads back as every later command reads ``target`` (within its size limit, parsed, valid);
    InputError (nothing written) otherwise."""
    size = len(text.encode("utf-8"))
    if size > LIMITS["profile"]:
        raise InputError(f"would be {size:,} bytes, over the {LIMITS['profile']:,} every later command reads; "
                         "nothing written", file=target)
    try:
        check(load_text(text, target), target)
    except InputError as exc:
        raise InputError(f"would not load back ({exc.message}); nothing written", file=target) from None
    return text


def write_all(root: Path, files: Sequence[tuple[Path, str]]) -> None:
    """Write ``files`` (target, text) under ``root`` all or nothing: each folder made without following a link
    (:func:`tui.core.safewrite.ensure_dir`); each text staged in a temporary file of its folder
    (``O_CREAT|O_EXCL|O_NOFOLLOW``, 0600, fsynced); then, once every one is staged, each renamed over its target,
    an existing target kept aside (a hard link) until all are in place. On any failure the staged files are
    removed and the targets already replaced put back: nothing is half-written, no earlier file is left changed.
    A symlink or a special file at a target is refused (InputError), never written through."""
    dirs: dict[Path, int] = {}
    staged: list[tuple[int, str, str]] = []  # (folder fd, temporary name, target name)
    kept: list[tuple[int, str, str | None]] = []  # (folder fd, target name, its old file's link name or None)
    current = root
    try:
        for target, _ in files:
            _check_place(root, target)
        for target, text in files:
            current = target
            folder = target.parent
            if folder not in dirs:
                ensure_dir(folder, root=root)
                dirs[folder] = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            fd = dirs[folder]
            tmp = f".{target.name[:100]}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
            staged.append((fd, tmp, target.name))
            with os.fdopen(out, "wb") as fh:
                fh.write(text.encode("utf-8"))
                fh.flush()
                os.fsync(fh.fileno())
        for target, _ in files:  # again, just before: a link planted while staging is refused too
            _check_place(root, target)
        for (fd, tmp, name), (target, _) in zip(staged, files, strict=True):
            current = target
            backup = f".{name[:100]}.{os.getpid()}.{secrets.token_hex(4)}.old"
            try:
                os.link(name, backup, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                backup_name: str | None = None
            else:
                backup_name = backup
            kept.append((fd, name, backup_name))
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException as exc:
        for fd, name, backup_name in reversed(kept):  # put back what was replaced, remove what was added
            with contextlib.suppress(OSError):
                if backup_name is None:
                    os.unlink(name, dir_fd=fd)
                else:
                    os.replace(backup_name, name, src_dir_fd=fd, dst_dir_fd=fd)
        for fd, tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
        if isinstance(exc, OSError):
            raise InputError(f"cannot be written ({exc.strerror or exc}); nothing written", file=current) from None
        raise
    else:
        for fd, _, backup_name in kept:
            if backup_name is not None:
                with contextlib.suppress(OSError):
                    os.unlink(backup_name, dir_fd=fd)
        for fd in dirs.values():
            with contextlib.suppress(OSError):
                os.fsync(fd)
    finally:
        for fd in dirs.values():
            os.close(fd)


def prepare_install(bundle: Bundle, models: Mapping[str, ModelProfile], workloads: Mapping[str, Workload], *,
                    replace: bool = False, config: Path | None = None) -> Installation:
    """Every check an import makes before it writes anything: what differs (refused without ``replace``), where
    each file goes (no symlink, FIFO or folder in a file's place), and that each file, as it would be written,
    loads back within its size limit (the operator's workloads file too, which it extends)."""
    changes = install_changes(bundle, models, workloads)
    check_replace(bundle, changes, replace)
    base = Path(os.path.abspath(config or paths.user_profiles_dir()))
    root = paths.root_for(base) or base
    files: list[_File] = []
    out: list[str] = []
    target = base / "models" / f"{bundle.profile.id}.yaml"
    old = models.get(bundle.profile.id)
    if old is not None and old.source and Path(os.path.abspath(old.source)).parent == base / "models":
        target = Path(os.path.abspath(old.source))  # the operator's own file of that id: replaced, not shadowed
    prof = changes[0]
    if prof.state == "already there":
        out.append(f"profile {bundle.profile.id}: already there ({prof.where})")
    else:
        _check_place(root, target)
        header = f"# imported from {shown(bundle.path.name, 80)} ({bundle.source['kind']} " \
                 f"{shown(bundle.source['id'], 80)})\n"
        text = _checked_text(target, header + dump(bundle.profile_data),
                             lambda raw, p: parse_model_profile(raw, p, expand_env=False))
        files.append(_File(target, text))
        out.append(f"profile {bundle.profile.id}: {'replaced' if prof.state == 'differs' else 'added'} ({target})"
                   + (f", which now overrides the {prof.where}" if prof.where.startswith("shipped") else ""))
    wl_changes = [c for c in changes[1:] if c.state != "already there"]
    for c in changes[1:]:
        if c.state == "already there":
            out.append(f"{c.what}: already there ({c.where})")
    if wl_changes:
        wl_file = base / "workloads.yaml"
        _check_place(root, wl_file)
        existing: dict[str, Any] = {}
        if os.path.lexists(wl_file):
            raw = load_file(wl_file)
            parse_workloads_file(raw, wl_file)  # refuse to extend a file that is already broken
            if isinstance(raw, dict) and isinstance(raw.get("workloads"), dict):
                existing = plain(raw["workloads"])
        for c in wl_changes:
            name = c.what.split(" ", 1)[1]
            existing[name] = bundle.workload_data[name]
            out.append(f"{c.what}: {'replaced' if c.state == 'differs' else 'added'} ({wl_file})")
        files.append(_File(wl_file, _checked_text(wl_file, dump({"workloads": existing}), parse_workloads_file)))
    return Installation(root, tuple(files), tuple(out))


def install(bundle: Bundle, models: Mapping[str, ModelProfile], workloads: Mapping[str, Workload], *,
            replace: bool = False, config: Path | None = None) -> list[str]:
    """Add the bundle's profile and workloads to the operator's profiles; one line per change made. A profile or
    workload that exists (shipped or the operator's) and differs is replaced only with ``replace``; every check is
    made before anything is written (:func:`prepare_install`), and the files are written all or nothing
    (:func:`write_all`)."""
    return prepare_install(bundle, models, workloads, replace=replace, config=config).commit()
