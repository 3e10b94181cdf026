"""The state file of running layouts: what a later process (or a new console over SSH) needs to reattach.

``<state_dir>/layouts.json``, guarded by an ``fcntl`` lock on ``<state_dir>/layouts.lock`` so two operators (or two
commands) on one host never interleave. One record per layout: its plan (secrets redacted), and for every process
we launched its pid, process group, start time (so a reused pid is never taken for ours), log file, URL and role;
who started it (``started_by``: a console, a campaign or ``up`` from the CLI, with its process and the time), the
exact launch request it was started with (``request``: ``LaunchRequest.to_argv()``, the fixes it carries included),
and the benchmarks running against it (``users``). A layout that failed stays here only until it is dismissed or
another layout starts: then it moves to the history of failures (:mod:`tui.core.launch.failures`).

The file holds only what it can read back: one schema (:meth:`LayoutRecord.from_dict`) is applied to every record
before it is written (a record that would not read back is refused, naming the field) and when it is read. A record
that does not read (a hand edit, a file written by another version) is quarantined: moved whole to
``<state_dir>/quarantine/`` with a one-line warning naming the layout and the field (:func:`drain_notes`), and every
other layout stays listable and stoppable. The folder is checked and written through :mod:`tui.core.safewrite`.
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
from typing import TYPE_CHECKING, Any, BinaryIO

from tui.core import paths, safeio, safewrite, typedread
from tui.core.errors import InputError
from tui.core.redact import redact_data

if TYPE_CHECKING:
    from tui.core.plan.request import LaunchRequest

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
        """A process as the state file holds it, every field of its type and range (a pid a signal could go to,
        GPUs that exist): :class:`~tui.core.typedread.FieldError` naming the first that is not."""
        rec = typedread.read(cls, d, ranges=_PROCESS_RANGES)
        _check_gpus(rec.gpus, ("gpus",))
        for key in ("name", "role", "log", "url"):
            _check_text(getattr(rec, key), (key,))
        return rec


#: what a process record may say beyond its fields' types: pids and groups Linux can have, an exit status
_PROCESS_RANGES = {"pid": (0, typedread.PID_MAX), "pgid": (0, typedread.PID_MAX), "exited": (-255, 255)}
#: GPU indices at most
MAX_GPU_INDEX = 4095


#: characters of one text of the state file that is printed (an id, a URL, a log's path, a note, a diagnosis)
MAX_STATE_TEXT = 4096


def _check_text(value: Any, path: tuple[str | int, ...], *, lines: bool = False) -> None:
    typedread.check_text(value, path, limit=MAX_STATE_TEXT, lines=lines)


def _check_gpus(gpus: Any, path: tuple[str | int, ...]) -> None:
    if not isinstance(gpus, list | tuple):
        raise typedread.FieldError(f"expected a list of GPU indices, got {typedread.described(gpus)}", path)
    for i, g in enumerate(gpus):
        if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g <= MAX_GPU_INDEX:
            raise typedread.FieldError(f"expected a GPU index 0..{MAX_GPU_INDEX}, got {typedread.described(g)}",
                                       (*path, i))


#: what the state's readers take from a layout's plan (``LaunchPlan.to_dict``): the lifecycle, the follower and the
#: telemetry's process map rebuild servers from it, so each key it has must be of its type
_PLAN_TYPES: dict[str, Any] = {"profile_id": str, "model": str, "served_name": str, "topology": str,
                               "gpus": list[int], "simulated": bool, "vllm_executable": str, "endpoint": str,
                               "host_label": str, "servers": list[dict[str, Any]], "proxy": dict[str, Any] | None,
                               "workarounds": list[dict[str, str]], "warnings": list[str], "fixes_applied": list[str],
                               "shared_gpus": bool}
_SERVER_TYPES: dict[str, Any] = {"name": str, "role": str, "argv": list[str], "env": dict[str, str],
                                 "gpus": list[int], "host": str, "port": int, "tp": int, "dp": int,
                                 "side_channel_port": int | None, "kv_role": str | None, "url": str, "shell": str,
                                 "unset_env": list[str]}
_PROXY_TYPES: dict[str, Any] = {"host": str, "port": int, "prefill": list[str], "decode": list[str], "url": str,
                                "shell": str}
_PLAN_RANGES = {"port": (0, 65535), "side_channel_port": (0, 65535), "tp": (1, 4096), "dp": (1, 4096)}


def _no_nulls(part: Any, keys: tuple[str, ...]) -> None:
    """The lists and mappings the readers iterate: present means not null."""
    if isinstance(part, dict):
        for key in keys:
            if key in part and part[key] is None:
                raise typedread.FieldError("expected a list or a mapping, got null", (key,))


def _check_ranges(part: dict[str, Any], path: tuple[str | int, ...]) -> None:
    for key, (lo, hi) in _PLAN_RANGES.items():
        value = part.get(key)
        if value is not None and not lo <= value <= hi:
            raise typedread.FieldError(f"out of range: {typedread.described(value)} (within {lo}..{hi})",
                                       (*path, key))


def _check_plan(plan: dict[str, Any]) -> None:
    """A layout's plan as its readers take it: every key of :data:`_PLAN_TYPES` (and of each server's and the
    proxy's) of its type, GPU indices, ports and parallel sizes within range, the texts ``status`` prints
    printable."""
    try:
        _no_nulls(plan, ("servers", "gpus", "fixes_applied", "warnings", "workarounds"))
        typedread.check_keys(plan, _PLAN_TYPES)
        _check_gpus(plan.get("gpus", []), ("gpus",))
        for key in ("topology", "profile_id"):
            _check_text(plan.get(key), (key,))
        for i, fix in enumerate(plan.get("fixes_applied", [])):
            _check_text(fix, ("fixes_applied", i))
        for i, srv in enumerate(plan.get("servers", [])):
            try:
                _no_nulls(srv, ("argv", "env", "gpus"))
                typedread.check_keys(srv, _SERVER_TYPES)
                _check_gpus(srv.get("gpus", []), ("gpus",))
                _check_ranges(srv, ())
                _check_text(srv.get("name"), ("name",))
            except typedread.FieldError as exc:
                raise exc.inside(i).inside("servers") from None
        proxy = plan.get("proxy")
        if proxy is not None:
            try:
                typedread.check_keys(proxy, _PROXY_TYPES)
                _check_ranges(proxy, ())
            except typedread.FieldError as exc:
                raise exc.inside("proxy") from None
    except typedread.FieldError as exc:
        raise exc.inside("plan") from None


#: who may start a layout (``LayoutOwner.kind``)
OWNER_KINDS = ("cli", "console", "campaign")


@dataclass
class LayoutOwner:
    """Who started a layout: ``up`` from the CLI, a console (which starts ``up`` detached) or a campaign; its
    process (``pid`` with its start time, so a recycled pid is never taken for it) and when it started the layout."""

    kind: str = "cli"  # cli | console | campaign
    pid: int = 0
    create_time: float = 0.0
    since: float = 0.0
    name: str = ""  # a campaign's name
    user: str = ""


@dataclass
class LayoutUser:
    """A process that uses a layout it did not start: a benchmark against it (``disagg-tui bench``, the console's
    included), registered while it runs."""

    kind: str  # bench
    pid: int
    create_time: float = 0.0
    since: float = 0.0
    what: str = ""  # the workload, and where its runs are stored


#: arguments of a stored launch request at most, and users of one layout at most
MAX_REQUEST_ARGS = 512
MAX_USERS = 64


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
    #: who started it (None: a record of a disagg-tui before owners were recorded); ``owner_pid`` is the process that
    #: launched it (``up`` or ``run``), ``owner_create_time`` that process's start time
    started_by: LayoutOwner | None = None
    owner_create_time: float = 0.0
    #: the launch request it was started with, as ``disagg-tui up`` arguments (``LaunchRequest.to_argv()``, the fixes
    #: applied as ``--apply-fix``; secrets redacted): what a restart replays. None: not recorded (an older record)
    request: list[str] | None = None
    #: the diagnoses its fixes took their values from (a length from a failing line): a restart applies the same
    fix_basis: list[dict[str, Any]] = field(default_factory=list)
    #: the benchmarks running against it (each registers while it runs; a dead one is no user)
    users: list[LayoutUser] = field(default_factory=list)
    #: the start's deadline in seconds (0: not recorded): what a layout whose launcher is gone is held to
    ready_timeout_s: float = 0.0

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
        """A layout as the state file holds it, every field (and every process) of its type and range:
        :class:`~tui.core.typedread.FieldError` naming the first that is not (``processes[0].pid``)."""
        if not isinstance(d, dict):
            raise typedread.FieldError(f"expected a mapping, got {typedread.described(d)}")
        procs = d.get("processes", [])
        if not isinstance(procs, list):
            raise typedread.FieldError(f"expected a list, got {typedread.described(procs)}", ("processes",))
        made = []
        for i, p in enumerate(procs):
            try:
                made.append(ProcessRecord.from_dict(p))
            except typedread.FieldError as exc:
                raise exc.inside(i).inside("processes") from None
        rec = typedread.read(cls, {**d, "processes": made}, ranges={"owner_pid": (0, typedread.PID_MAX),
                                                                    "ready_timeout_s": (0, 1e9)})
        _check_plan(rec.plan)
        for key in ("id", "status", "owner_user", "endpoint"):
            _check_text(getattr(rec, key), (key,))
        _check_text(rec.note, ("note",), lines=True)
        for name in ("diagnoses", "fix_basis"):
            _check_diagnoses(getattr(rec, name), name)
        if rec.started_by is not None:
            _check_party(rec.started_by, ("started_by",), ("kind", "name", "user"))
        if len(rec.users) > MAX_USERS:
            raise typedread.FieldError(f"{len(rec.users):,} users (at most {MAX_USERS})", ("users",))
        for i, u in enumerate(rec.users):
            _check_party(u, ("users", i), ("kind", "what"))
        if rec.request is not None:
            if len(rec.request) > MAX_REQUEST_ARGS:
                raise typedread.FieldError(f"{len(rec.request):,} arguments (at most {MAX_REQUEST_ARGS})",
                                           ("request",))
            for i, arg in enumerate(rec.request):
                _check_text(arg, ("request", i), lines=True)
        return rec

    def launch_request(self) -> LaunchRequest | None:
        """The :class:`~tui.core.plan.request.LaunchRequest` it was started with, read back with the request's
        own parser (secrets stay redacted: :func:`tui.core.launch.ownership.stored_request` takes them from the
        environment); None when none was recorded; an InputError naming the field when it does not parse."""
        if self.request is None:
            return None
        from tui.core.plan.request import LaunchRequest  # the planner: only when a request is read back

        try:
            return LaunchRequest.from_argv(self.request)
        except InputError as exc:
            raise InputError(f"the stored launch request of layout {self.id} does not parse ({exc.title})",
                             field="request", hint="launch it again from the launch screen (l) or with up") from None


#: what ``status`` prints of a layout's saved diagnoses
_PRINTED_DIAGNOSIS = ("server", "entry_id", "title", "severity", "fix")


def _check_diagnoses(diagnoses: list[dict[str, Any]], name: str) -> None:
    for i, diag in enumerate(diagnoses):
        for key in _PRINTED_DIAGNOSIS:
            _check_text(diag.get(key), (name, i, key), lines=key in ("title", "fix"))
        line_no = diag.get("line_no")
        if line_no is not None and (isinstance(line_no, bool) or not isinstance(line_no, int) or line_no < 0):
            raise typedread.FieldError(f"expected a line number, got {typedread.described(line_no)}",
                                       (name, i, "line_no"))


def _check_party(party: LayoutOwner | LayoutUser, path: tuple[str | int, ...], texts: tuple[str, ...]) -> None:
    """An owner or a user as printed and signalled: a pid Linux can have, printable short texts."""
    if not 0 <= party.pid <= typedread.PID_MAX:
        raise typedread.FieldError(f"out of range: {typedread.described(party.pid)} (within 0..{typedread.PID_MAX})",
                                   (*path, "pid"))
    for key in texts:
        value = getattr(party, key)
        typedread.check_text(value, (*path, key), limit=200)


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


#: where records of the state file that did not read back are kept for the operator (one file per move)
QUARANTINE_DIR = "quarantine"
#: bytes of one layout's record as written at most (the whole file is read with safeio's "state" limit)
MAX_RECORD_BYTES = 1 * safeio.MiB

#: warnings for the operator not yet shown, by what they are about (a later one about the same record replaces
#: it: "moved to" says more than "left out"), and the last said of each (never said twice)
_notes: dict[str, str] = {}
_said: dict[str, str] = {}


def _note(about: str, text: str) -> None:
    if _said.get(about) != text:
        _notes[about] = text


def drain_notes() -> list[str]:
    """The one-line warnings the state file gave since the last call (a quarantined layout), each once per
    process: the CLI prints them as ``warning:`` lines, the console as notifications."""
    out = []
    for about in list(_notes):  # popped one by one: a note added meanwhile (a reader's thread) is never lost
        text = _notes.pop(about, None)
        if text is not None:
            _said[about] = text
            out.append(text)
    return out


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A record of the state file that does not read back: its key, the field and why, and the record as it was."""

    key: str
    field: str
    reason: str
    raw: Any

    @property
    def where(self) -> str:
        return f"layout {safeio.shown(self.key, 60)}" + (f", field '{self.field}'" if self.field else "")


def _record_json(key: str, rec: LayoutRecord) -> str:
    """One record as the state file holds it (redacted), checked to read back with the reader's own schema: an
    InputError naming the layout and the field before anything is written otherwise."""
    where = f"layouts.{safeio.shown(key, 60)}"
    try:
        typedread.check_text(key, (), limit=MAX_STATE_TEXT)
        text = json.dumps(redact_data(rec.to_dict()), indent=1, allow_nan=False)
        if len(text) > MAX_RECORD_BYTES:
            raise typedread.FieldError(f"a record of {len(text):,} bytes (at most {MAX_RECORD_BYTES:,})")
        LayoutRecord.from_dict(safeio.parse_json(text, "layout"))
    except typedread.FieldError as exc:
        raise InputError(f"layout {safeio.shown(key, 60)} would not read back ({exc.reason}); not written",
                         field=where + (f".{exc.field}" if exc.path else "")) from None
    except (ValueError, TypeError) as exc:  # a NaN, an object JSON has no form for
        raise InputError(f"layout {safeio.shown(key, 60)} would not read back ({safeio.shown(str(exc), 120)}); "
                         "not written", field=where) from None
    except InputError as exc:
        raise InputError(f"layout {safeio.shown(key, 60)} would not read back ({exc.message}); not written",
                         field=where) from None
    return text


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
        """Hold the lock; yields the layouts by id; whatever the block leaves in the dict is written back (a record
        that would not read back is refused, nothing written). A record that does not read is quarantined first."""
        safewrite.check_root(self.root, create=True)
        with self._open_lock() as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                layouts, bad = self._read_all()
                self._quarantine(bad)
                yield layouts
                self._write(layouts)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _open_lock(self) -> BinaryIO:
        """The lock file, a regular file of the state folder opened without following a link (anything else in its
        place is one line naming it, never a wait)."""
        try:
            return safewrite.open_append(self.lock_file, root=self.root)
        except safewrite.UnsafeDir as exc:
            raise InputError(f"the state's lock file {exc.why}; move it aside", file=self.lock_file) from None

    def _read(self) -> dict[str, LayoutRecord]:
        """The records that read back (one that does not is left out, with a warning: :meth:`_read_all`)."""
        layouts, bad = self._read_all()
        for u in bad:
            _note(f"{self.file}\0{u.key}", f"{self.file}: {u.where} does not read back ({u.reason}); left out "
                  f"until the next change of the state moves it to {self.root / QUARANTINE_DIR}")
        return layouts

    def _read_all(self) -> tuple[dict[str, LayoutRecord], list[Unreadable]]:
        """The state file as records, and the records that do not read back (each of its types and ranges, or
        :class:`Unreadable` naming its field). The file itself must be a regular file of a private state folder
        (:func:`tui.core.safewrite.check_root`), within its size limit, strict JSON of this version: one line naming
        the file and how to recover (move it aside) otherwise."""
        if os.path.isdir(self.root):  # a folder a teammate can write may hold a state file that names their pids
            safewrite.check_root(self.root)
        try:
            raw = safeio.read_text(self.file, "state")
        except InputError as exc:
            if exc.message == "no such file":
                return {}, []
            raise InputError(f"state file cannot be read ({exc.message}); move it aside to start afresh",
                             file=self.file) from None
        try:
            data = safeio.parse_json(raw, self.file)
            version = data.get("version") if isinstance(data, dict) else None
        except InputError as exc:
            raise InputError(f"state file is damaged ({exc.message}); move it aside to start afresh",
                             file=self.file, line=exc.line) from None
        if version != STATE_VERSION:
            raise InputError(f"state file is version {safeio.shown(repr(version), 40)}; this disagg-tui reads version "
                             f"{STATE_VERSION}",
                             file=self.file, field="version",
                             hint="stop its layouts with the disagg-tui that wrote it, or move the file aside")
        items = data.get("layouts")
        if not isinstance(items, dict):
            raise InputError(f"state file is damaged (expected a mapping of layouts, got "
                             f"{typedread.described(items)}); move it aside to start afresh", file=self.file,
                             field="layouts")
        out: dict[str, LayoutRecord] = {}
        bad: list[Unreadable] = []
        for key, value in items.items():
            try:
                typedread.check_text(key, (), limit=MAX_STATE_TEXT)
                out[key] = LayoutRecord.from_dict(value)
            except typedread.FieldError as exc:
                bad.append(Unreadable(key, exc.field, exc.reason, value))
            except (ValueError, TypeError) as exc:  # no reader's error may cost the other layouts theirs
                bad.append(Unreadable(key, "", safeio.shown(str(exc), 120), value))
        return out, bad

    def _quarantine(self, bad: list[Unreadable]) -> None:
        """Under the exclusive lock: move the records that do not read back out of the state file (the next write
        leaves them out) into a file of their own under ``<state>/quarantine/``, kept for the operator, with a
        one-line warning naming each."""
        if not bad:
            return
        name = f"layouts-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}.json"
        target = self.root / QUARANTINE_DIR / name
        data = {"version": STATE_VERSION, "from": str(self.file), "quarantined": time.time(),
                "layouts": {u.key: {"field": u.field, "reason": u.reason, "record": u.raw} for u in bad}}
        safewrite.write_atomic(target, json.dumps(data, indent=1), root=self.root)
        for u in bad:
            _note(f"{self.file}\0{u.key}", f"{self.file}: {u.where} does not read back ({u.reason}); moved to "
                  f"{target} (every other layout is kept; stop its processes by hand if any still run)")

    def _write(self, layouts: dict[str, LayoutRecord]) -> None:
        """Whole, and redacted whoever filled the records: a plan's secrets, a failure's log excerpt in a diagnosis
        never reach the file (a relaunch takes them from the environment: :func:`tui.core.redact.restore_env`).
        Every record is checked to read back before anything is written (an InputError naming the layout and the
        field otherwise), and the file is replaced whole, never through a link (:func:`safewrite.write_atomic`)."""
        parts = [f"{json.dumps(k)}: {_record_json(k, v)}" for k, v in layouts.items()]
        text = f'{{"version": {STATE_VERSION}, "layouts": {{' + ",\n".join(parts) + "}}"
        if len(text) > safeio.LIMITS["state"]:
            raise InputError(f"the state would be {len(text):,} bytes (at most {safeio.LIMITS['state']:,}); "
                             "not written", file=self.file, hint="stop or dismiss layouts (down --all)")
        safewrite.write_atomic(self.file, text, root=self.root)

    def read(self) -> dict[str, LayoutRecord]:
        """A snapshot under a shared lock (a writer's change is seen whole). Writes only to quarantine a record
        that does not read back (under the exclusive lock, then). A state folder that others can write is
        refused even while it holds no state file (``safewrite.UnsafeDir``)."""
        if os.path.isdir(self.root):
            safewrite.check_root(self.root)
        if not os.path.lexists(self.file):  # a broken link in its place is no missing file: _read says so
            return {}
        with self._open_lock() as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_SH)
            try:
                layouts, bad = self._read_all()
                if bad:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
                    layouts, bad = self._read_all()
                    if bad:
                        self._quarantine(bad)
                        self._write(layouts)
                return layouts
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def peek(self) -> dict[str, LayoutRecord]:
        """A snapshot without any lock, for readers polling many times a second: the file is only ever replaced
        whole (atomic rename), so a plain read always sees a complete one. Never writes (a record that does not
        read back is left out with a warning; the next locked read quarantines it)."""
        return self._read()

    def update(self, layout_id: str, **changes: Any) -> None:
        """Change fields of one layout record (if it is still recorded)."""
        with self.locked() as layouts:
            rec = layouts.get(layout_id)
            if rec is not None:
                for key, value in changes.items():
                    setattr(rec, key, value)

    def active(self) -> LayoutRecord | None:
        """The layout that is up (or starting) on this host, if any."""
        for rec in self.read().values():
            if rec.status in ("starting", "ready", "stopping"):
                return rec
        return None
