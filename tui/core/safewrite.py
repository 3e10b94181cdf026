"""One write sink for the project's own folders: private roots, never a symlink below them, all or nothing.

The state, data and config folders (:mod:`tui.core.paths`) hold what a later process trusts: the state file's pids
(``down`` signals them), results, the operator's profiles and playbook. On a shared host a folder that a teammate
can write, or a symlink planted in one, would let them steer those writes (a server log written through a link
into ``~/.bashrc``, a state file that names someone else's pids). So, as OpenSSH does for ``~/.ssh``:

- :func:`check_dir`: a project root must be a directory owned by this user and writable by nobody else; every
  folder above it must be owned by this user or root and not writable by others unless sticky (``/tmp`` is fine);
- below a root every component is opened from its parent's descriptor with ``O_NOFOLLOW|O_DIRECTORY``
  (:func:`ensure_dir`), so a symlink anywhere below the root is refused, not just the last one, and a folder there
  writable by others or owned by another user is refused too;
- :func:`write_atomic` writes a temporary file (``O_CREAT|O_EXCL|O_NOFOLLOW``) in the same folder, fsyncs it and
  renames it over the target (``os.replace`` with the folder's descriptor): readers see the old file or the new,
  never half of one, and never a file reached through a link;
- :func:`open_append` opens a log or a journal ``O_APPEND|O_CREAT|O_NOFOLLOW``, a regular file only;
  :func:`open_new` creates a file that must be new (a recording) ``O_CREAT|O_EXCL|O_NOFOLLOW``.

Every refusal is an :class:`UnsafeDir`: one line naming the path and why, exit 2 in the CLI.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from pathlib import Path
from typing import BinaryIO

from tui.core.errors import EXIT_BAD_INPUT, AppError

#: a fresh folder below a root: this user's alone
DIR_MODE = 0o700
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_MOVE_ASIDE = "move it aside, then run again"


class UnsafeDir(AppError):
    """A folder (or a file in one) that the project refuses to write in or read its state from: group- or
    world-writable, owned by another user, a symlink, not a directory. One line naming the path and why."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, path: Path | str, why: str, hint: str | None = _MOVE_ASIDE) -> None:
        self.path = str(path)
        self.why = why
        super().__init__(f"{path}: {why}; refused", hint)


def _hint(why: str, path: Path) -> str:
    """What the operator can do about a folder refused for ``why``."""
    if "writable" in why:
        return f"chmod go-w {path}"
    if "owned by" in why:
        return "use a folder of your own (DISAGG_TUI_STATE_DIR, DISAGG_TUI_DATA_DIR, DISAGG_TUI_CONFIG_DIR)"
    return _MOVE_ASIDE


def _owner_problem(st: os.stat_result, *, strict: bool) -> str | None:
    """Why a folder with ``st`` is unsafe (None when it is not). ``strict``: a project root or a folder below one
    (this user's, writable by nobody else); otherwise a folder above a root (this user's or root's, not writable
    by others unless sticky, like ``/tmp``)."""
    uid = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != uid and (strict or st.st_uid != 0):
        return f"owned by uid {st.st_uid}, not by this user (uid {uid})"
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and (strict or not st.st_mode & stat.S_ISVTX):
        who = "world" if st.st_mode & stat.S_IWOTH else "group"
        return f"{who}-writable (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _ancestors(path: Path) -> list[Path]:
    return list(reversed(path.parents))


def check_dir(path: Path, *, above_only: bool = False, made: Path | None = None) -> None:
    """Refuse ``path`` as a project root unless it is a directory of this user's that nobody else can write, and
    every folder above it (as written and once symlinks are resolved) is this user's or root's and not writable by
    others unless sticky: :class:`UnsafeDir` naming the first folder that is not. ``above_only``: ``path`` is
    checked as a folder above a root is (the nearest existing folder above ``made``, a root about to be made)."""
    lexical = Path(os.path.abspath(path))
    try:
        real = Path(os.path.realpath(lexical, strict=True))
    except OSError as exc:
        raise UnsafeDir(lexical, f"cannot be checked ({exc.strerror or exc})", None) from None
    above: list[Path] = []
    for d in (*_ancestors(lexical), *_ancestors(real), *((lexical, real) if above_only else ())):
        if d not in above:
            above.append(d)
    for d in above:
        try:
            st = os.stat(d)
        except OSError as exc:
            raise UnsafeDir(d, f"cannot be checked ({exc.strerror or exc})", None) from None
        why = _owner_problem(st, strict=False)
        if why is not None:
            raise UnsafeDir(d, f"{why}, above {made or lexical}", _hint(why, d))
    for d in dict.fromkeys(() if above_only else (lexical, real)):
        st = os.stat(d)
        why = _owner_problem(st, strict=True)
        if why is not None:
            raise UnsafeDir(d, why, _hint(why, d))


def check_root(root: Path, *, create: bool = False) -> Path:
    """:func:`check_dir` of a project root, each time it is used (a dozen ``stat`` calls: a folder made shared
    since the last write is seen); ``create``: make it first (``mkdir -p``, mode 0700, following links above it)
    when missing, once the folders above it are checked (nothing is made inside a shared folder)."""
    root = Path(os.path.abspath(root))
    if create and not os.path.isdir(root):
        existing = next(p for p in root.parents if os.path.isdir(p))
        check_dir(existing, above_only=True, made=root)
        _make_above(root)
    check_dir(root)
    return root


def _make_above(root: Path) -> None:
    """``mkdir -p root`` with mode 0700 for what it creates (the folders at and above a project root)."""
    missing: list[Path] = []
    p = root
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            pass
        except OSError as exc:
            raise UnsafeDir(d, f"cannot be created ({exc.strerror or exc})", None) from None


def _parts_below(path: Path, root: Path) -> tuple[str, ...]:
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise UnsafeDir(path, f"is not inside {root}", None) from None
    if any(p in ("..", ".") for p in parts):
        raise UnsafeDir(path, "has '..' in it", None)
    return parts


def _refusal(dir_fd: int, name: str, shown: Path, exc: OSError) -> UnsafeDir:
    """Why opening ``name`` in ``dir_fd`` failed, said of ``shown``."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return UnsafeDir(shown, f"cannot be opened ({exc.strerror or exc})", None)
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            target = "?"
        return UnsafeDir(shown, f"is a symlink (to {target}), never followed here")
    if stat.S_ISDIR(st.st_mode):
        return UnsafeDir(shown, "is a directory")
    if not stat.S_ISREG(st.st_mode):
        return UnsafeDir(shown, "is not a regular file (a FIFO, a device or a socket)")
    if isinstance(exc, FileExistsError):
        return UnsafeDir(shown, "exists already", "choose another name, or move it aside")
    return UnsafeDir(shown, f"cannot be opened ({exc.strerror or exc})", None)


def _open_dir(root: Path | None, path: Path) -> int:
    """A descriptor of folder ``path``, made (0700) where missing. Below ``root`` (checked once per process with
    :func:`check_root`), every component is opened from its parent's descriptor without following a link and
    must be this user's and writable by nobody else; without a root, ``path`` itself is the root (trusted as is)."""
    path = Path(os.path.abspath(path))
    parts: tuple[str, ...] = ()
    if root is None:
        root = path
        if not os.path.isdir(path):
            _make_above(path)
    else:
        root = Path(os.path.abspath(root))
        parts = _parts_below(path, root)
        check_root(root, create=True)
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise UnsafeDir(root, f"cannot be opened ({exc.strerror or exc})", None) from None
    shown = root
    try:
        for name in parts:
            shown = shown / name
            try:
                nxt = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, DIR_MODE, dir_fd=fd)
                try:
                    nxt = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as exc:
                    raise _refusal(fd, name, shown, exc) from None
            except OSError as exc:
                raise _refusal(fd, name, shown, exc) from None
            os.close(fd)
            fd = nxt
            why = _owner_problem(os.fstat(fd), strict=True)
            if why is not None:
                raise UnsafeDir(shown, why, _hint(why, shown))
    except BaseException:
        os.close(fd)
        raise
    return fd


def ensure_dir(path: Path, *, root: Path | None = None) -> Path:
    """``mkdir -p path`` (mode 0700) below ``root`` without following a symlink in any component below it; each
    folder there must be this user's and writable by nobody else. Returns ``path``."""
    os.close(_open_dir(root, path))
    return Path(path)


def _target(path: Path) -> tuple[Path, str]:
    path = Path(os.path.abspath(path))
    if path.name in ("", ".", ".."):
        raise UnsafeDir(path, "is no file name", None)
    return path.parent, path.name


def write_atomic(path: Path, data: bytes | str, *, mode: int = 0o600, root: Path | None = None) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` all or nothing: a temporary file created ``O_EXCL|O_NOFOLLOW`` in
    the same folder (opened as :func:`ensure_dir` does), fsynced, then renamed over ``path``. A symlink, a folder
    or a special file in ``path``'s place is refused, never written through or replaced."""
    parent, name = _target(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    dir_fd = _open_dir(root, parent)
    tmp = f".{name[:100]}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISREG(st.st_mode):
                raise _refusal(dir_fd, name, parent / name, OSError("not a regular file"))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=dir_fd)
        except OSError as exc:
            raise UnsafeDir(parent, f"cannot be written ({exc.strerror or exc})", None) from None
        try:
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(raw)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except OSError as exc:
                raise UnsafeDir(parent / name, f"cannot be written ({exc.strerror or exc})", None) from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        with contextlib.suppress(OSError):
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def open_append(path: Path, *, root: Path | None = None, buffering: int = 0) -> BinaryIO:
    """``path`` opened for appending (created 0600 when missing), ``O_NOFOLLOW``: a regular file only (a symlink,
    a FIFO or a device in its place is refused at once, never waited on). Unbuffered unless ``buffering``."""
    parent, name = _target(path)
    dir_fd = _open_dir(root, parent)
    try:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            raise _refusal(dir_fd, name, parent / name, exc) from None
        st = os.fstat(fd)
        why = ("is not a regular file (a FIFO, a device or a socket)" if not stat.S_ISREG(st.st_mode)
               else f"is owned by uid {st.st_uid}, not by this user" if st.st_uid != os.geteuid()
               else f"has {st.st_nlink} hard links (a file of ours has one)" if st.st_nlink > 1 else None)
        if why is not None:
            os.close(fd)
            raise UnsafeDir(parent / name, why)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    finally:
        os.close(dir_fd)
    return os.fdopen(fd, "ab", buffering=buffering)


def open_new(path: Path, *, root: Path | None = None, mode: int = 0o600) -> BinaryIO:
    """``path`` created for writing, never an existing file (``O_CREAT|O_EXCL|O_NOFOLLOW``: a link in its place is
    refused too), in a folder opened as :func:`ensure_dir` does: a recording, a journal that must be new."""
    parent, name = _target(path)
    dir_fd = _open_dir(root, parent)
    try:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=dir_fd)
        except FileExistsError:
            raise _refusal(dir_fd, name, parent / name, FileExistsError(errno.EEXIST, "exists already")) from None
        except OSError as exc:
            raise UnsafeDir(parent / name, f"cannot be created ({exc.strerror or exc})", None) from None
    finally:
        os.close(dir_fd)
    return os.fdopen(fd, "wb")
