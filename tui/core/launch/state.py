"""The state file of running layouts: what a later process (or a new console over SSH) needs to reattach.

``<state_dir>/layouts.json``, guarded by an ``fcntl`` lock on ``<state_dir>/layouts.lock`` so two operators (or two
commands) on one host never interleave. One record per layout: its plan (secrets redacted), and for every process
we launched its pid, process group, start time (so a reused pid is never taken for ours), log file, URL and role.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tui.core import paths
from tui.core.errors import InputError
from tui.core.redact import redact_data

STATE_VERSION = 1


@dataclass
class ProcessRecord:
    name: str  # server name (prefill-0, decode-0, server) or "proxy"
    role: str  # single | prefill | decode | proxy
    pid: int
    pgid: int
    create_time: float  # psutil create_time of the process, to detect pid reuse
    log: str  # log file path
    url: str
    gpus: list[int] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)  # redacted
    started: float = 0.0
    ready_at: float | None = None
    exited: int | None = None  # exit code once seen dead (None while alive or unknown)
    api_key: bool = False  # started requiring vLLM's API key (a flag: the key itself is never stored)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProcessRecord:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class LayoutRecord:
    id: str
    created: float
    simulated: bool
    plan: dict[str, Any]  # LaunchPlan.redacted_dict()
    processes: list[ProcessRecord]
    status: str = "starting"  # starting | ready | failed | stopping | stopped (what is shown: layout_health)
    owner_pid: int = 0
    owner_user: str = ""
    sim: dict[str, Any] = field(default_factory=dict)  # the simulated host's settings when simulated
    endpoint: str = ""
    note: str = ""
    diagnoses: list[dict[str, Any]] = field(default_factory=list)  # playbook findings (Diagnosis.to_dict())

    @property
    def gpus(self) -> list[int]:
        return [int(g) for g in self.plan.get("gpus", [])]

    @property
    def topology(self) -> str:
        return str(self.plan.get("topology", ""))

    @property
    def profile_id(self) -> str:
        return str(self.plan.get("profile_id", ""))

    def process(self, name: str) -> ProcessRecord | None:
        return next((p for p in self.processes if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["processes"] = [asdict(p) for p in self.processes]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LayoutRecord:
        procs = [ProcessRecord.from_dict(p) for p in d.get("processes", [])]
        known = set(cls.__dataclass_fields__) - {"processes"}
        return cls(processes=procs, **{k: v for k, v in d.items() if k in known})


#: the recorded statuses under which every process of the layout is meant to be running
RUNNING_STATUSES = ("starting", "ready")


@dataclass(frozen=True, slots=True)
class LayoutHealth:
    """What a layout is, given which of its processes still run: the recorded status, unless a process the layout
    needs has exited while it was meant to run (``degraded`` while some still run, ``failed`` once none does).
    ``exited`` names the processes that are gone (servers and the proxy alike)."""

    status: str
    recorded: str
    exited: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """``ready``, ``degraded (exited: decode-0, proxy)``."""
        return self.status + (f" (exited: {', '.join(self.exited)})" if self.exited else "")


def layout_health(record: LayoutRecord, alive: dict[str, bool]) -> LayoutHealth:
    """The layout's status from its recorded one and ``alive`` (process name -> running), as
    ``lifecycle.process_states`` gives it. Only a layout meant to be running can be degraded: a stopping or
    stopped one's processes are meant to go, a failed one stays failed."""
    if record.status not in RUNNING_STATUSES:
        return LayoutHealth(status=record.status, recorded=record.status)
    exited = tuple(p.name for p in record.processes if not alive.get(p.name, False))
    if not exited:
        return LayoutHealth(status=record.status, recorded=record.status)
    status = "failed" if len(exited) == len(record.processes) else "degraded"
    return LayoutHealth(status=status, recorded=record.status, exited=exited)


def new_layout_id(topology: str, profile_id: str) -> str:
    """Sortable by time, readable, and unique even for two launches in the same second."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{profile_id}-{topology}-{secrets.token_hex(2)}"


class StateStore:
    """Read-modify-write of the layouts file under an exclusive lock."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or paths.state_dir()
        self.file = self.root / "layouts.json"
        self.lock_file = self.root / "layouts.lock"

    def logs_dir(self, layout_id: str) -> Path:
        return self.root / "layouts" / layout_id

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, LayoutRecord]]:
        """Hold the lock; yields the layouts by id; whatever the block leaves in the dict is written back."""
        paths.make_dirs(self.root)
        with open(self.lock_file, "a+", encoding="utf-8") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                layouts = self._read()
                yield layouts
                self._write(layouts)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _read(self) -> dict[str, LayoutRecord]:
        try:
            raw = self.file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:  # not UTF-8 (ValueError), a folder in its place, unreadable
            raise InputError(f"state file cannot be read ({exc}); move it aside to start afresh",
                             file=self.file) from None
        try:
            data = json.loads(raw)
            version = data.get("version") if isinstance(data, dict) else None
        except ValueError as exc:
            raise InputError(f"state file is damaged ({exc}); move it aside to start afresh",
                             file=self.file) from None
        if version != STATE_VERSION:
            raise InputError(f"state file is version {version!r}; this disagg-tui reads version {STATE_VERSION}",
                             file=self.file, field="version",
                             hint="stop its layouts with the disagg-tui that wrote it, or move the file aside")
        try:
            items = data["layouts"]
            return {str(k): LayoutRecord.from_dict(v) for k, v in items.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"state file is damaged ({type(exc).__name__}: {exc}); move it aside to start afresh",
                             file=self.file) from None

    def _write(self, layouts: dict[str, LayoutRecord]) -> None:
        """Whole, and redacted whoever filled the records: a plan's secrets, a failure's log excerpt in a diagnosis
        never reach the file (a relaunch takes them from the environment: :func:`tui.core.redact.restore_env`)."""
        tmp = self.file.with_name(f".layouts.{os.getpid()}.tmp")
        data = {"version": STATE_VERSION, "layouts": {k: redact_data(v.to_dict()) for k, v in layouts.items()}}
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, self.file)

    def read(self) -> dict[str, LayoutRecord]:
        """A snapshot under a shared lock (a writer's change is seen whole); never writes the file."""
        if not self.file.exists():
            return {}
        with open(self.lock_file, "a+", encoding="utf-8") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_SH)
            try:
                return self._read()
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def peek(self) -> dict[str, LayoutRecord]:
        """A snapshot without any lock, for readers polling many times a second: the file is only ever replaced
        whole (atomic rename), so a plain read always sees a complete one."""
        return self._read()

    def update(self, layout_id: str, **changes: Any) -> None:
        """Change fields of one layout record (if it is still recorded)."""
        with self.locked() as layouts:
            rec = layouts.get(layout_id)
            if rec is not None:
                for key, value in changes.items():
                    setattr(rec, key, value)

    def failed_diagnoses(self, entry_id: str, profile_id: str | None = None) -> list[dict[str, Any]]:
        """The playbook findings of the most recent failed start (of ``profile_id``) that reported ``entry_id``:
        ``up --apply-fix ID`` fills a fix's values (a length, a memory figure) from that failure's log line."""
        failed = sorted((r for r in self.read().values() if r.status == "failed"
                         and (profile_id is None or r.profile_id == profile_id)),
                        key=lambda r: r.created, reverse=True)
        for rec in failed:
            if any(d.get("entry_id") == entry_id for d in rec.diagnoses):
                return rec.diagnoses
        return []

    def active(self) -> LayoutRecord | None:
        """The layout that is up (or starting) on this host, if any."""
        for rec in self.read().values():
            if rec.status in ("starting", "ready", "stopping"):
                return rec
        return None
