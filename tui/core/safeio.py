"""Bounded reading of the files the project takes from outside: hostile until checked.

Bundles, recordings, results, model folders and their ``config.json``, the Hugging Face cache, profiles,
workloads and the playbook may come from a teammate, a download or a hand edit. Every one of them is read here:

- **regular files only**: the file is opened with ``O_NONBLOCK`` (a FIFO with no writer does not block the open)
  and checked with ``fstat`` on the open descriptor (no race with a rename); a FIFO, a device, a socket or a
  directory is refused at once with one line;
- **a size limit per kind** (:data:`LIMITS`), checked before reading and again while reading (a file that grows);
- **strict JSON** (:func:`parse_json`): no ``NaN``/``Infinity``, no number that overflows to infinity, integers of
  at most :data:`MAX_INT_DIGITS` digits, nesting at most :data:`MAX_DEPTH` deep, each error one line with its line;
- :func:`shown` caps a string from such a file before it is printed or stored (control characters escaped).

Each error is an :class:`~tui.core.errors.InputError` naming the file (and line and field where known): exit 2 in
the CLI, a notification in the console.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tui.core.errors import InputError
from tui.core.printable import printable

KiB = 1024
MiB = 1024 * KiB

#: the most bytes read of each kind of file (a bigger one is a one-line error, never read)
LIMITS: dict[str, int] = {
    "profile": 1 * MiB,  # a model profile, a workloads file
    "playbook": 4 * MiB,  # the shipped playbook is ~60 kB; the operator's entries add to it
    "bundle": 16 * MiB,  # profile, plans, workloads and a results table
    "config.json": 4 * MiB,  # Hugging Face configs are a few kB
    "index.json": 64 * MiB,  # model.safetensors.index.json: one line per tensor
    "safetensors header": 100 * MiB,  # the safetensors format's own bound on its header
    "results": 256 * MiB,  # a vllm bench result with per-request arrays for 100k requests
    "run record": 64 * MiB,  # a stored run's run.json, summary.json, plan.json, workload.json
    "state": 16 * MiB,  # the layouts state file
    "log": 8 * 1024 * MiB,  # a server log given to diagnose (read in pieces)
    "recording": 4 * 1024 * MiB,  # a .dtrec (memory-mapped, decompressed in bounded pieces): ~4 MB an hour
    "text": 16 * MiB,  # anything else read whole
}
#: nesting of mappings and lists in any structured file (no real one nests past ~10)
MAX_DEPTH = 64
#: digits of an integer in JSON (a 400-digit number is no size, count or time)
MAX_INT_DIGITS = 30
#: characters of one string from a file, as :func:`shown` prints it
SHOWN_CHARS = 200


def _kind_limit(kind: str) -> int:
    return LIMITS.get(kind, LIMITS["text"])


def _special(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: str | Path, *, field: str | None = None) -> tuple[int, os.stat_result]:
    """An open descriptor of ``path`` (read-only, never blocking on a FIFO) and its ``fstat``; InputError for a
    missing file or anything but a regular file. The caller closes the descriptor."""
    p = Path(path)
    try:  # a device is never opened at all (a tape rewinds, a terminal is claimed): said from its stat first
        pre = _special(os.stat(p).st_mode)
    except OSError:
        pre = None  # missing, a loop, no permission: said by the open below
    if pre is not None and pre != "a directory":
        raise InputError(f"not a regular file: {pre}" if pre != "not a regular file" else pre, file=p, field=field)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        what = "a broken link" if p.is_symlink() else "no such file"
        raise InputError(what, file=p, field=field) from None
    except IsADirectoryError:
        raise InputError("not a regular file: a directory", file=p, field=field) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=p, field=field) from None
    try:
        st = os.fstat(fd)
        special = _special(st.st_mode)
        if special is not None:
            raise InputError(f"not a regular file: {special}" if special != "not a regular file" else special,
                             file=p, field=field)
        # back to blocking reads for a regular file (O_NONBLOCK only mattered for the open)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def open_append(path: str | Path, mode: int = 0o600, *, field: str | None = None) -> int:
    """A descriptor to append to ``path`` (created ``mode`` if absent), refusing at once anything that is not a
    regular file: a FIFO would block the open until a reader came, a device would take what is written."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:  # ENXIO: a FIFO nobody reads; EISDIR: a directory
        what = "a FIFO (named pipe)" if p.is_fifo() else "a directory" if p.is_dir() else exc.strerror or str(exc)
        raise InputError(f"cannot write: {what}", file=p, field=field) from None
    try:
        special = _special(os.fstat(fd).st_mode)
        if special is not None:
            raise InputError(f"cannot write: not a regular file ({special})", file=p, field=field)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_regular(path: str | Path, *, field: str | None = None) -> os.stat_result:
    """The ``stat`` of a regular file (InputError for a FIFO, device, socket, directory or missing file)."""
    fd, st = open_regular(path, field=field)
    os.close(fd)
    return st


def too_large(path: str | Path, size: int, limit: int, kind: str, *, field: str | None = None) -> InputError:
    return InputError(f"too large for a {kind}: {size:,} bytes (at most {limit:,})", file=path, field=field)


def read_bytes(path: str | Path, kind: str = "text", *, limit: int | None = None, field: str | None = None) -> bytes:
    """The whole content of a regular file of at most ``limit`` bytes (the kind's limit by default)."""
    cap = _kind_limit(kind) if limit is None else limit
    fd, st = open_regular(path, field=field)
    try:
        if st.st_size > cap:
            raise too_large(path, st.st_size, cap, kind, field=field)
        chunks: list[bytes] = []
        got = 0
        while True:
            piece = os.read(fd, min(max(cap + 1 - got, 1), 4 * MiB))
            if not piece:
                break
            chunks.append(piece)
            got += len(piece)
            if got > cap:
                raise too_large(path, got, cap, kind, field=field)
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=path, field=field) from None
    finally:
        os.close(fd)


def decode_utf8(data: bytes, path: str | Path, *, field: str | None = None) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"not UTF-8 text (byte {exc.start})", file=path, line=line, field=field) from None


def read_text(path: str | Path, kind: str = "text", *, limit: int | None = None, field: str | None = None) -> str:
    """A regular UTF-8 text file of at most the kind's limit (``\\r\\n`` kept as is)."""
    return decode_utf8(read_bytes(path, kind, limit=limit, field=field), path, field=field)


# --- strict JSON ------------------------------------------------------------------------------------------------


class _JsonRefused(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _JsonRefused(f"{name} is not a number this file may hold")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _JsonRefused(f"{text[:40]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _JsonRefused(f"an integer of {len(text.lstrip('-'))} digits is out of range")
    return int(text)


def json_depth_exceeded(text: str | bytes, limit: int = MAX_DEPTH) -> int | None:
    """The 1-based line where ``text``'s brackets first nest deeper than ``limit`` (strings skipped), else
    None. A linear scan done before parsing, so a hostile nesting never reaches the recursive decoder."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") <= limit:
        return None
    depth = 0
    line = 1
    in_str = False
    escaped = False
    for b in data:
        if in_str:
            if escaped:
                escaped = False
            elif b == 0x5C:  # backslash
                escaped = True
            elif b == 0x22:
                in_str = False
            elif b == 0x0A:
                line += 1
            continue
        if b == 0x22:
            in_str = True
        elif b in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return line
        elif b in (0x5D, 0x7D):
            depth -= 1
        elif b == 0x0A:
            line += 1
    return None


def parse_json(text: str | bytes, source: str | Path, *, field: str | None = None,
               max_depth: int = MAX_DEPTH) -> Any:
    """JSON as :func:`json.loads` reads it, without what no file of ours may hold: ``NaN``, ``Infinity``, a float
    that overflows to infinity, an integer of more than :data:`MAX_INT_DIGITS` digits, nesting deeper than
    ``max_depth``. One-line InputErrors with the line."""
    deep = json_depth_exceeded(text, max_depth)
    if deep is not None:
        raise InputError(f"not accepted JSON: nested deeper than {max_depth} levels", file=source, line=deep,
                         field=field)
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except _JsonRefused as exc:
        raise InputError(f"not accepted JSON: {exc}", file=source, field=field) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg} (column {exc.colno})", file=source, line=exc.lineno,
                         field=field) from None
    except (ValueError, RecursionError) as exc:  # bytes that are not UTF-8, a nesting the scan missed
        raise InputError(f"not valid JSON: {str(exc)[:120]}", file=source, field=field) from None


def load_json(path: str | Path, kind: str = "text", *, field: str | None = None) -> Any:
    """A JSON file from outside: a regular file within the kind's size limit, parsed by :func:`parse_json`."""
    return parse_json(read_text(path, kind, field=field), path, field=field)


def nonfinite_at(data: Any) -> tuple[str, float] | None:
    """The path (``ttfts[3]``, ``a.b``) and value of the first NaN or infinity in ``data``, else None."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        obj, at = stack.pop()
        if isinstance(obj, float):
            if not math.isfinite(obj):
                return at, obj
        elif isinstance(obj, dict):
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in reversed(list(obj.items())))
        elif isinstance(obj, list):
            stack.extend((v, f"{at}[{i}]") for i, v in reversed(list(enumerate(obj))))
    return None


def dumps_strict(data: Any, **kwargs: Any) -> str:
    """JSON for what we write or print: a NaN or an infinity is ``null`` (never invalid JSON)."""
    return json.dumps(finite_or_none(data), allow_nan=False, **kwargs)


def finite_or_none(data: Any) -> Any:
    """``data`` with every non-finite float replaced by None (for JSON output that must stay valid)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite_or_none(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite_or_none(v) for v in data]
    return data


# --- walking what was read --------------------------------------------------------------------------------------


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """A string from a file as it may be printed or stored in one line: the sink's (:func:`tui.core.printable.
    printable`) with a cap of ``limit`` characters."""
    return printable(value, limit)


def finite(value: Any, source: str | Path, field: str, *, lo: float | None = None, hi: float | None = None,
           line: int | None = None) -> float:
    """A finite number within ``lo..hi`` (InputError naming the field otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"expected a number, got {shown(repr(value), 60)}", file=source, line=line, field=field)
    if isinstance(value, int) and len(str(abs(value))) > MAX_INT_DIGITS:
        raise InputError(f"an integer of {len(str(abs(value)))} digits is out of range", file=source, line=line,
                         field=field)
    x = float(value)
    if not math.isfinite(x):
        raise InputError(f"must be a finite number, got {value!r}", file=source, line=line, field=field)
    if lo is not None and x < lo:
        raise InputError(f"must be ≥ {lo:g}; got {x:g}", file=source, line=line, field=field)
    if hi is not None and x > hi:
        raise InputError(f"must be ≤ {hi:g}; got {x:g}", file=source, line=line, field=field)
    return x


def guarded(fn: Callable[[], Any], source: str | Path, what: str) -> Any:
    """``fn()``, with a wrong shape deep inside a checked file (a missing key, a wrong type a validator did not
    reach) turned into one line naming the file instead of a traceback."""
    try:
        return fn()
    except InputError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError, RecursionError) as exc:
        detail = f"missing {exc.args[0]!r}" if isinstance(exc, KeyError) and exc.args else shown(str(exc), 120)
        raise InputError(f"not a valid {what}: {detail}", file=source) from None


# --- folders from outside ---------------------------------------------------------------------------------------

#: entries read of one folder from outside (the Hugging Face cache, a models directory, a model folder): a real one
#: holds hundreds at most; a hostile tree of millions would otherwise make a listing take minutes
MAX_DIR_ENTRIES = 10_000


def scan_dir(folder: str | Path, limit: int | None = None) -> tuple[list[str], bool]:
    """The names in ``folder``, sorted: at most ``limit`` (default :data:`MAX_DIR_ENTRIES`) of them, in the order
    the system lists them, and whether there were more. Raises OSError as ``os.scandir`` does (a missing or
    unreadable folder)."""
    limit = MAX_DIR_ENTRIES if limit is None else limit
    names: list[str] = []
    more = False
    with os.scandir(folder) as it:
        for entry in it:
            if len(names) >= limit:
                more = True
                break
            names.append(entry.name)
    return sorted(names), more


def dir_names(folder: str | Path) -> list[str]:
    """At most :data:`MAX_DIR_ENTRIES` names of ``folder``, sorted (none when it cannot be read)."""
    try:
        return scan_dir(folder)[0]
    except OSError:
        return []


def is_dir(path: Path) -> bool:
    """``path`` is a folder (False, not an error, when a folder on the way cannot be read)."""
    try:
        return path.is_dir()
    except OSError:
        return False
