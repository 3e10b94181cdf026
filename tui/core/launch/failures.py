"""Failed layouts are history, not state: the layout that failed last stays in the state file (the dashboard shows
its diagnosis, ``status`` lists it) until the operator dismisses it or another layout starts; then its record moves
beside its logs, ``<state>/layouts/<id>/failed.json``, into the history of failures this host keeps (the newest
:data:`KEEP`). The console's playbook screen lists that history; ``up --apply-fix ID`` finds a fix's values there
(the line a failure matched) as it does in the state file.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core import safeio, safewrite, typedread
from tui.core.errors import InputError
from tui.core.launch.state import STATE_VERSION, LayoutRecord, StateStore
from tui.core.launch.supervisor import process_alive
from tui.core.redact import redact_data

FAILED_FILE = "failed.json"
#: failures kept in the history (older ones' records go; their logs stay)
KEEP = 200
#: layout folders looked at for the history at most (the newest first)
SCAN = 2000


def failed_file(store: StateStore, layout_id: str) -> Path:
    return store.logs_dir(layout_id) / FAILED_FILE


def archive(store: StateStore, rec: LayoutRecord) -> None:
    """Write a failed layout's record into the history (redacted, as the state file is); blocking. A history that
    cannot be written loses the record, never the state file's write."""
    path = failed_file(store, rec.id)
    with contextlib.suppress(OSError, safewrite.UnsafeDir):
        safewrite.write_atomic(path, json.dumps({"version": STATE_VERSION, "layout": redact_data(rec.to_dict())},
                                                indent=1), root=store.root)


def _alive(rec: LayoutRecord) -> bool:
    return any(process_alive(p.pid, p.create_time) for p in rec.processes)


def retire_failed(store: StateStore, layouts: dict[str, LayoutRecord], *, keep: str = "") -> list[str]:
    """Under the state's lock (``layouts`` is what ``StateStore.locked`` yields): every failed layout whose
    processes have all ended moves into the history (``keep``: an id left where it is). What a new start does."""
    moved = []
    for lid, rec in list(layouts.items()):
        if lid != keep and rec.status == "failed" and not _alive(rec):
            archive(store, rec)
            del layouts[lid]
            moved.append(lid)
    if moved:
        _prune(store)
    return moved


def dismiss(store: StateStore, layout_id: str) -> bool:
    """The operator dismissed a failed layout (``x`` in the console): out of the state file into the history, so
    ``status`` no longer lists it. False when it is not a failed layout of the state file, or a process of it still
    runs (``down --all`` stops it). Blocking."""
    with store.locked() as layouts:
        rec = layouts.get(layout_id)
        if rec is None or rec.status != "failed" or _alive(rec):
            return False
        archive(store, rec)
        del layouts[layout_id]
    _prune(store)
    return True


@dataclass(frozen=True, slots=True)
class PastFailure:
    """A failure of this host's history (``record``), or a history file that does not read (``error``)."""

    layout_id: str
    record: LayoutRecord | None = None
    error: str = ""
    current: bool = False  # still in the state file (the failure shown now)

    @property
    def created(self) -> float:
        return self.record.created if self.record is not None else 0.0


def read_failure(path: Path) -> LayoutRecord:
    """One history file: a regular file within the state file's size, strict JSON, a layout record of the state
    file's types; InputError naming the file otherwise."""
    data = safeio.load_json(path, "state")
    layout = data.get("layout") if isinstance(data, dict) and data.get("version") == STATE_VERSION else None
    if not isinstance(layout, dict):
        raise InputError(f"not a failed layout's record of version {STATE_VERSION}", file=path)
    try:
        return LayoutRecord.from_dict(layout)
    except typedread.FieldError as exc:
        raise InputError(f"damaged record ({exc.reason})", file=path, field=exc.field or None) from None


def _history_ids(store: StateStore) -> list[str]:
    folder = store.root / "layouts"
    if not os.path.isdir(folder):
        return []
    try:
        names, _more = safeio.scan_dir(folder)
    except InputError:
        return []
    return sorted(names, reverse=True)[:SCAN]  # ids begin with their time: the newest first


def past_failures(store: StateStore | None = None, limit: int = 50) -> list[PastFailure]:
    """The failures of this host, the newest first: the failed layout of the state file (if any), then the
    history. A file that does not read is listed with its one-line error. Blocking."""
    store = store or StateStore()
    out: list[PastFailure] = []
    try:
        current = [r for r in store.read().values() if r.status == "failed"]
    except InputError as err:
        out.append(PastFailure("layouts.json", error=err.one_line(), current=True))
        current = []
    out += [PastFailure(r.id, r, current=True) for r in current]
    seen = {r.id for r in current}
    for lid in _history_ids(store):
        if len(out) >= limit:
            break
        path = failed_file(store, lid)
        if lid in seen or not os.path.lexists(path):
            continue
        try:
            out.append(PastFailure(lid, read_failure(path)))
        except InputError as err:
            out.append(PastFailure(lid, error=err.one_line()))
    out.sort(key=lambda f: (f.created or 0.0, f.layout_id), reverse=True)
    return out[:limit]


def _prune(store: StateStore) -> None:
    kept = 0
    for lid in _history_ids(store):
        path = failed_file(store, lid)
        if not os.path.lexists(path):
            continue
        kept += 1
        if kept > KEEP:
            with contextlib.suppress(OSError):
                path.unlink()


def fix_diagnoses(store: StateStore, entry_id: str, profile_id: str | None = None) -> list[dict[str, Any]]:
    """The playbook findings a fix of ``entry_id`` takes its values from (a length, a memory figure from the failing
    line): of the newest failed start of ``profile_id`` that reported it (the state file's failed layout, or the
    history), or the findings a running layout's fix took them from (so a restart applies the same fix). Empty when
    none is known. Blocking."""
    found: list[tuple[float, list[dict[str, Any]]]] = []

    def consider(rec: LayoutRecord, diagnoses: list[dict[str, Any]]) -> None:
        if (profile_id is None or rec.profile_id == profile_id) and \
                any(d.get("entry_id") == entry_id for d in diagnoses):
            found.append((rec.created, diagnoses))

    with contextlib.suppress(InputError):
        for rec in store.read().values():
            if rec.status == "failed":
                consider(rec, rec.diagnoses)
            consider(rec, rec.fix_basis)
    for f in past_failures(store, limit=KEEP):
        if f.record is not None and not f.current:
            consider(f.record, f.record.diagnoses)
            consider(f.record, f.record.fix_basis)
    if not found:
        return []
    return max(found, key=lambda t: t[0])[1]


__all__ = ["FAILED_FILE", "KEEP", "PastFailure", "archive", "dismiss", "failed_file", "fix_diagnoses",
           "past_failures", "read_failure", "retire_failed"]
