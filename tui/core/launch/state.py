"""The state file of running layouts: what a later process (or a new console over SSH) needs to reattach.

``<state_dir>/layouts.json``, guarded by an ``fcntl`` lock on ``<state_dir>/layouts.lock`` so two operators (or two
commands) on one host never interleave. One record per layout: its plan (secrets redacted), and for every process
we launched its pid, process group, start time (so a reused pid is never taken for ours), log file, URL and role;
who started it (``started_by``: a console, a campaign or ``up`` from the CLI, with its process and the time), the
exact launch request it was started with (``request``: ``LaunchRequest.to_argv()``, the fixes it carries included),
and the benchmarks running against it (``users``). A layout that failed stays here only until it is dismissed or
another layout starts: then it moves to the history of failures (:mod:`tui.core.launch.failures`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tui.core import paths, safeio, typedread
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
                                 "side_channel_port": int | None, "kv_role": str | None, "url": str, "shell": str}
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
        with self._open_lock() as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                layouts = self._read()
                yield layouts
                self._write(layouts)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _open_lock(self) -> IO[str]:
        """The lock file, a regular file (anything else in its place is one line naming it, never a wait)."""
        try:
            fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o600)
        except OSError as exc:
            raise InputError(f"the state's lock file cannot be opened ({exc.strerror or exc}); move it aside",
                             file=self.lock_file) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InputError("the state's lock file is not a regular file; move it aside", file=self.lock_file)
        return os.fdopen(fd, "a+", encoding="utf-8")

    def _read(self) -> dict[str, LayoutRecord]:
        """The state file as records: a regular file (a FIFO or a folder in its place is refused at once) within
        its size limit, strict JSON, every record of its types and ranges; one line naming the file, the field
        and how to recover (move the file aside) otherwise."""
        try:
            raw = safeio.read_text(self.file, "state")
        except InputError as exc:
            if exc.message == "no such file":
                return {}
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
        for key, value in items.items():
            try:
                out[key] = LayoutRecord.from_dict(value)
            except typedread.FieldError as exc:
                where = f"layouts.{safeio.shown(key, 60)}" + (f".{exc.field}" if exc.path else "")
                raise InputError(f"state file is damaged ({exc.reason}); move it aside to start afresh",
                                 file=self.file, field=where) from None
        return out

    def _write(self, layouts: dict[str, LayoutRecord]) -> None:
        """Whole, and redacted whoever filled the records: a plan's secrets, a failure's log excerpt in a diagnosis
        never reach the file (a relaunch takes them from the environment: :func:`tui.core.redact.restore_env`)."""
        tmp = self.file.with_name(f".layouts.{os.getpid()}.tmp")
        data = {"version": STATE_VERSION, "layouts": {k: redact_data(v.to_dict()) for k, v in layouts.items()}}
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, self.file)

    def read(self) -> dict[str, LayoutRecord]:
        """A snapshot under a shared lock (a writer's change is seen whole); never writes the file."""
        if not os.path.lexists(self.file):  # a broken link in its place is no missing file: _read says so
            return {}
        with self._open_lock() as lock:
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

    def active(self) -> LayoutRecord | None:
        """The layout that is up (or starting) on this host, if any."""
        for rec in self.read().values():
            if rec.status in ("starting", "ready", "stopping"):
                return rec
        return None
