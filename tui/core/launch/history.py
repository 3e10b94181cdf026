"""How long earlier starts of a plan took on this host: the ETA of the next one.

Every server that reaches ready appends one line to ``<state_dir>/startups.jsonl``: the plan's key (topology,
profile and a digest of every server's argv and environment, so a changed flag is a different plan), the server,
its start-up seconds and when each phase began. :func:`expected_startup` gives the median of the last starts of the
same plan and server, or nothing when this host has never started it. Appends are single ``write`` calls of one
line, so concurrent starts (two operators) never interleave; a damaged line is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.core import paths, safeio, safewrite, typedread
from tui.core.errors import InputError
from tui.core.plan.spec import LaunchPlan
from tui.core.redact import redact_argv, redact_env

HISTORY_FILE = "startups.jsonl"
#: starts that make the estimate (the newest ones: a warm compile cache makes later starts faster)
KEEP_LAST = 5
#: sub-phases a warm cache skips (a warm start's estimate from cold ones leaves them out)
WARM_SKIPS = ("flashinfer_jit",)
#: the file is rewritten with only recent lines when it grows past this many bytes
MAX_BYTES = 1 << 20
#: bytes of the file read at most (its end: the newest starts)
READ_BYTES = 4 * MAX_BYTES
#: seconds a start (or a phase of it) may have taken: a week
MAX_STARTUP_S = 7 * 86400.0
_RANGES = {"startup_s": (0.0, MAX_STARTUP_S)}
_FIELDS = ("key", "server", "startup_s", "ts", "simulated", "phases", "cache_state", "subphases")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a start may hold")


def plan_key(plan: LaunchPlan) -> str:
    """``topology/profile/digest``: the same plan on this host gives the same key in every process, whether it
    comes from the planner or from a layout's record (whose secrets are redacted: so is what the key digests)."""
    h = hashlib.sha256()
    for s in plan.servers:
        env = sorted(redact_env(s.env_dict()).items())
        h.update(json.dumps([s.name, redact_argv(list(s.argv)), env, list(s.gpus)]).encode())
    return f"{plan.topology}/{plan.profile_id}/{h.hexdigest()[:12]}"


@dataclass(frozen=True, slots=True)
class StartupRecord:
    key: str
    server: str
    startup_s: float
    ts: float = field(default_factory=time.time)
    simulated: bool = False
    #: phase key -> seconds after the start when the server entered it
    phases: tuple[tuple[str, float], ...] = ()
    #: what the start found in its compile caches, from its own evidence: cold (it compiled: torch.compile's
    #: "Compiling a graph", a JIT compiler, compiled output written) | warm (it loaded its compiled graphs and
    #: compiled nothing) | "" (not known: older records)
    cache_state: str = ""
    #: silent sub-phases seen (``flashinfer_jit``, ``triton_ptxas`` ...) and how long each lasted, seconds
    subphases: tuple[tuple[str, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "server": self.server, "startup_s": round(self.startup_s, 3), "ts": self.ts,
                "simulated": self.simulated, "phases": [[k, round(v, 3)] for k, v in self.phases],
                "cache_state": self.cache_state, "subphases": [[k, round(v, 3)] for k, v in self.subphases]}


@dataclass(frozen=True, slots=True)
class Expected:
    """What the next start should take: ``seconds`` (median), from ``samples`` earlier starts, per phase too."""

    seconds: float
    samples: int
    source: str  # "history" (this host) | "simulated" (the simulated host's compressed start)
    phases: tuple[tuple[str, float], ...] = ()
    cache_state: str = ""  # the cache state the estimate is for ("" = any)

    def describe(self) -> str:
        if self.source == "history":
            return f"~{self.seconds:.0f} s (median of {self.samples} earlier start{'s' * (self.samples != 1)} here)"
        return f"~{self.seconds:.0f} s ({self.source})"


class StartupHistory:
    def __init__(self, directory: Path | None = None) -> None:
        self.path = (directory or paths.state_dir()) / HISTORY_FILE
        self.skipped = 0  # lines the last read of the file left out (damaged, foreign, of the wrong types)

    def append(self, record: StartupRecord) -> None:
        """One line, one ``write`` (O_APPEND): safe with concurrent writers. Blocking: call from a thread. The
        folder must be private (``safewrite.UnsafeDir`` otherwise); a link, a FIFO or a folder in the file's place
        is never written through or waited on: no history kept (the ETA falls back to none)."""
        root = paths.root_for(self.path)
        paths.make_dirs(self.path.parent)
        line = (json.dumps(record.to_dict(), separators=(",", ":")) + "\n").encode()
        try:
            fh = safewrite.open_append(self.path, root=root)
        except safewrite.UnsafeDir:
            return
        with fh:
            fh.write(line)
        self._trim()

    def records(self) -> list[StartupRecord]:
        """The starts recorded, oldest first: at most the last :data:`READ_BYTES` of the file (it is trimmed to
        :data:`MAX_BYTES`; a bigger one was not written by us), a line of the wrong types or ranges skipped and
        counted in :attr:`skipped`. A FIFO or a folder in the file's place is no history (never waited on)."""
        self.skipped = 0
        try:
            fd, st = safeio.open_regular(self.path)
        except InputError:
            return []
        try:
            with os.fdopen(fd, "rb") as fh:
                if st.st_size > READ_BYTES:
                    fh.seek(st.st_size - READ_BYTES)
                    fh.readline()  # the line cut by the seek
                data = fh.read(READ_BYTES)
        except OSError:
            return []
        out: list[StartupRecord] = []
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                d = json.loads(line, parse_constant=_no_constant)
                if not isinstance(d, dict):
                    raise ValueError("not an object")
                rec = typedread.read(StartupRecord, {k: d[k] for k in _FIELDS if k in d}, ranges=_RANGES)
                if not all(0 <= v <= MAX_STARTUP_S for _k, v in (*rec.phases, *rec.subphases)):
                    raise ValueError("a phase's seconds out of range")
            except (ValueError, TypeError, RecursionError):
                self.skipped += 1  # a damaged or foreign line: skipped, never fatal
                continue
            out.append(rec)
        return out

    def started_before(self, key: str, server: str) -> bool:
        """Whether this host has started the plan's server before (its compile caches then hold its own keys)."""
        return any(r.key == key and r.server == server for r in self.records())

    def expected(self, key: str, server: str, cache_state: str | None = None) -> Expected | None:
        """The median of the last starts of the plan's server; with ``cache_state``, of starts in that state only
        (a warm start is not judged by cold ones, nor the reverse; records without a state count for both)."""
        mine = [r for r in self.records() if r.key == key and r.server == server
                and (cache_state is None or r.cache_state in (cache_state, ""))][-KEEP_LAST:]
        if not mine and cache_state == "warm":
            return self._warm_from_cold(key, server)
        if not mine:
            return None
        per_phase: dict[str, list[float]] = {}
        for r in mine:
            for k, v in r.phases:
                per_phase.setdefault(k, []).append(v)
        phases = tuple(sorted(((k, statistics.median(v)) for k, v in per_phase.items()), key=lambda kv: kv[1]))
        return Expected(seconds=statistics.median(r.startup_s for r in mine), samples=len(mine), source="history",
                        phases=phases, cache_state=cache_state or "")

    def _warm_from_cold(self, key: str, server: str) -> Expected | None:
        """No warm start yet: the cold starts less what they spent compiling into the caches now warm (their
        FlashInfer JIT and cache-writing sub-phases)."""
        cold = [r for r in self.records() if r.key == key and r.server == server and r.cache_state == "cold"
                and r.subphases][-KEEP_LAST:]
        if not cold:
            return None
        secs = [max(r.startup_s - sum(v for k, v in r.subphases if k in WARM_SKIPS), 0.0) for r in cold]
        return Expected(seconds=statistics.median(secs), samples=len(cold),
                        source="history (cold starts less their JIT compiles)", cache_state="warm")

    def cold_hint(self, key: str, server: str) -> str:
        """What the last cold start of the plan's server compiled and for how long ("" when none is known)."""
        cold = [r for r in self.records() if r.key == key and r.server == server and r.cache_state == "cold"]
        if not cold:
            return ""
        last = cold[-1]
        subs = dict(last.subphases)
        parts = [f"the last cold start took {last.startup_s:.0f} s"]
        if "flashinfer_jit" in subs:
            parts.append(f"{subs['flashinfer_jit']:.0f} s of it JIT-compiling FlashInfer kernels")
        return "cold cache: " + ", ".join(parts)

    def _trim(self) -> None:
        try:
            if self.path.stat().st_size <= MAX_BYTES:
                return
        except OSError:
            return
        keep: dict[tuple[str, str], list[StartupRecord]] = {}
        for r in self.records():
            keep.setdefault((r.key, r.server), []).append(r)
        lines = [json.dumps(r.to_dict(), separators=(",", ":"))
                 for rs in keep.values() for r in rs[-KEEP_LAST:]]
        safewrite.write_atomic(self.path, "\n".join(lines) + "\n", root=paths.root_for(self.path))


def expected_startup(history: StartupHistory, plan: LaunchPlan, server: str, *,
                     sim_startup_s: float | None = None, cache_state: str | None = None) -> Expected | None:
    """The ETA of ``server``'s start: this host's earlier starts of the same plan (in the same cache state when
    given), else the simulated host's compressed start (a known length), else nothing (a first start: elapsed
    time only)."""
    found = history.expected(plan_key(plan), server, cache_state)
    if found is not None:
        return found
    if sim_startup_s:
        return Expected(seconds=sim_startup_s, samples=0, source="simulated start")
    return None
