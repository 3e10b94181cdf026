"""The layouts across hosts this console started: ``clusters.json`` in the state dir.

Each host keeps its own part's state file, supervisor and logs; this file keeps only what ties the parts
together: the topology and model, the one endpoint, each host's part (its address, what it runs, the ``up``
arguments it was given) and each host's fingerprint as it reported it at the start. ``bench`` benchmarks the
layout across hosts that is up when no layout is up here, and writes those fingerprints into the run, so a
result says it was measured over two hosts. The file is read as from outside (strict JSON, bounded, typed).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tui.core import paths, safeio, safewrite, typedread
from tui.core.errors import InputError

FILE_NAME = "clusters.json"
FORMAT = 1
#: layouts across hosts kept (the oldest stopped ones go first)
MAX_KEPT = 50


@dataclass(frozen=True, slots=True)
class HostPartRecord:
    name: str
    address: str
    does: str
    argv: list[str] = field(default_factory=list)
    fingerprint: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    id: str
    topology: str
    model: str
    endpoint: str
    hosts: list[HostPartRecord] = field(default_factory=list)
    status: str = "up"  # up | stopped | failed
    created: float = field(default_factory=time.time)
    simulated: bool = False
    #: every host's servers in one plan document (``combined_plan``): a run's plan, for its serve flags
    plan: dict[str, Any] | None = None
    #: who started it: "cli" (``up --hosts``) or "campaign NAME" (``run --hosts``: a run of it killed and run again
    #: stops what the first one left up)
    owner: str = "cli"

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def fingerprint(self) -> dict[str, Any]:
        """What a run measured on it keeps of its hosts (``fingerprint.hosts``)."""
        return {"hosts": [{"name": h.name, "address": h.address, "does": h.does, **h.fingerprint}
                          for h in self.hosts],
                "simulated": self.simulated, "cluster": self.id}


def _file() -> Path:
    return paths.state_dir() / FILE_NAME


def load_all(path: Path | None = None) -> list[ClusterRecord]:
    path = path or _file()
    if not path.exists() and not path.is_symlink():
        return []
    data = safeio.load_json(path, "state")
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("clusters"), list):
        raise InputError("not a clusters file of this version", file=path, field="format")
    out = []
    for i, item in enumerate(data["clusters"][:MAX_KEPT]):
        try:
            rec = typedread.read(ClusterRecord, item)
            _check_texts(rec)
        except typedread.FieldError as exc:
            where = f"clusters[{i}]" + (f".{exc.field}" if exc.field else "")
            _notes[where] = f"{path}: field '{where}': {exc.reason}: that layout across hosts is left out"
            continue
        out.append(rec)
    return out


_notes: dict[str, str] = {}
_URL = re.compile(r"https?://[A-Za-z0-9.:\[\]_-]{1,300}(/[A-Za-z0-9._~/-]{0,200})?\Z")


def _check_texts(rec: ClusterRecord) -> None:
    """The record's names and its endpoint as a layout across hosts this console started has them: printable
    words, an http URL (what a benchmark is sent to); FieldError naming the field otherwise."""
    for name in ("id", "topology", "model", "status", "owner"):
        _text(getattr(rec, name), (name,), 400)
    if not _URL.match(rec.endpoint):
        raise typedread.FieldError(f"not an http URL: '{safeio.shown(rec.endpoint, 80)}'", ("endpoint",))
    for k, h in enumerate(rec.hosts[:64]):
        for name in ("name", "address", "does"):
            _text(getattr(h, name), ("hosts", k, name), 400)
        for j, w in enumerate(h.argv[:4096]):
            _text(w, ("hosts", k, "argv", j), 4000)


def _text(value: str, path: tuple[str | int, ...], limit: int) -> None:
    try:
        typedread.check_text(value, path, limit=limit)
    except typedread.FieldError as exc:  # said with the text itself, escaped: what the operator looks for
        raise typedread.FieldError(f"{exc.reason}: '{safeio.shown(value, 80)}'", path) from None


def drain_notes() -> list[str]:
    """The warnings reading ``clusters.json`` gave (a record left out), each once: the CLI prints them."""
    out = list(_notes.values())
    _notes.clear()
    return out


def _save_all(records: list[ClusterRecord], path: Path | None = None) -> None:
    path = path or _file()
    kept = sorted(records, key=lambda r: (r.status == "up", r.created))[-MAX_KEPT:]
    safewrite.write_atomic(path, json.dumps({"format": FORMAT, "clusters": [asdict(r) for r in kept]}, indent=1),
                           root=paths.root_for(path))


def add(record: ClusterRecord) -> None:
    records = [r for r in load_all() if r.id != record.id]
    _save_all([*records, record])


def mark_stopped(names: list[str]) -> list[ClusterRecord]:
    """Every layout across hosts that is up on one of ``names`` is stopped now (``down --hosts``): the records."""
    records = load_all()
    stopped = [r for r in records if r.status == "up" and set(r.names) & set(names)]
    if stopped:
        ids = {r.id for r in stopped}
        _save_all([dataclasses.replace(r, status="stopped") if r.id in ids else r for r in records])
    return stopped


def active() -> ClusterRecord | None:
    """The newest layout across hosts that is up."""
    up = [r for r in load_all() if r.status == "up"]
    return max(up, key=lambda r: r.created) if up else None
