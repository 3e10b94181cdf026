"""The headless summary of a recording (``disagg-tui replay FILE --headless``): what was recorded, the layouts and
their startup timings, the diagnoses and failures, the runs, and the results table exactly as it was printed.

The table: a session that printed one (``run``, ``bench``) recorded it as a ``ResultsReported`` event with the
exact text, which is printed again byte for byte. A session that ended before printing it (killed, or ``up``
followed by runs from elsewhere) gets the table rebuilt from its finished runs' records (``BenchDone`` carries
each run's record and summary) with the same code that ``results`` uses (:mod:`tui.core.bench.table`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.core.bench import table
from tui.core.bench.events import BenchDone, ResultsReported
from tui.core.bench.store import Run, RunMeta
from tui.core.events import Event, Notice
from tui.core.guided import FixApplied
from tui.core.launch.events import LayoutChanged, PlanLaunched, ServerExited, ServerReady, ServerStalled
from tui.core.playbook.events import Diagnosis
from tui.core.record.reader import Recording
from tui.core.record.recorder import TOPICS


@dataclass
class LayoutStory:
    layout_id: str
    topology: str = ""
    profile: str = ""
    simulated: bool = False
    starting: float | None = None
    ready: float | None = None
    final: str = ""
    note: str = ""
    servers: dict[str, float] = field(default_factory=dict)  # startup seconds per server
    fixes: list[str] = field(default_factory=list)

    @property
    def ready_s(self) -> float | None:
        return None if self.starting is None or self.ready is None else self.ready - self.starting


@dataclass
class SessionSummary:
    recording: Recording
    layouts: list[LayoutStory] = field(default_factory=list)
    diagnoses: list[Diagnosis] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    runs: list[BenchDone] = field(default_factory=list)
    results: ResultsReported | None = None
    last_ts: float | None = None
    events: int = 0
    topics: list[str] = field(default_factory=list)  # what the events cover (gpu, servers, startup, logs, ...)


def summarize(recording: Recording) -> SessionSummary:
    s = SessionSummary(recording)
    by_id: dict[str, LayoutStory] = {}
    current: LayoutStory | None = None
    kinds: set[str] = set()
    for ev in recording.events():
        s.events += 1
        kinds.add(ev.kind)
        s.last_ts = ev.ts if s.last_ts is None else max(s.last_ts, ev.ts)
        current = _fold(s, by_id, current, ev)
    s.layouts = list(by_id.values())
    s.topics = sorted({TOPICS.get(k, k) for k in kinds})
    return s


def _fold(s: SessionSummary, by_id: dict[str, LayoutStory], current: LayoutStory | None, ev: Event
          ) -> LayoutStory | None:
    if isinstance(ev, PlanLaunched):
        story = by_id.setdefault(ev.layout_id, LayoutStory(ev.layout_id))
        story.topology = str(ev.plan.get("topology", story.topology))
        story.profile = str(ev.plan.get("profile_id", story.profile))
        story.fixes = [str(f) for f in ev.plan.get("fixes_applied") or []]
        return story
    if isinstance(ev, LayoutChanged):
        story = by_id.setdefault(ev.layout_id, LayoutStory(ev.layout_id))
        story.topology = ev.topology or story.topology
        story.profile = ev.profile_id or story.profile
        story.simulated = ev.simulated
        if ev.status == "starting" and story.starting is None:
            story.starting = ev.ts
        elif ev.status == "ready":
            story.ready = ev.ts
        story.final = ev.status
        if ev.note:
            story.note = ev.note
        return story if ev.status in ("starting", "ready") else current
    if isinstance(ev, ServerReady) and current is not None:
        current.servers[ev.server] = ev.startup_s
    elif isinstance(ev, Diagnosis):
        s.diagnoses.append(ev)
    elif isinstance(ev, FixApplied):
        s.failures.append(f"{_clock(ev.ts)}  fix applied [{ev.entry_id}]: {'; '.join(ev.changes) or 'no change'}")
    elif isinstance(ev, ServerExited):
        s.failures.append(f"{_clock(ev.ts)}  {ev.server} exited with code {ev.returncode} during {ev.during}")
    elif isinstance(ev, ServerStalled):
        s.failures.append(f"{_clock(ev.ts)}  {ev.server} stalled in {ev.phase} ({ev.silent_s:.0f} s silent)")
    elif isinstance(ev, Notice) and ev.level == "error":
        s.failures.append(f"{_clock(ev.ts)}  {ev.message}")
    elif isinstance(ev, BenchDone):
        s.runs.append(ev)
        if ev.status != "complete":
            s.failures.append(f"{_clock(ev.ts)}  run {ev.run_id} {ev.status}: {ev.message}")
    elif isinstance(ev, ResultsReported):
        s.results = ev
    return current


def _clock(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M:%S")


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _span(seconds: float) -> str:
    whole = round(seconds)
    h, rest = divmod(whole, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}h {m:02d}m {sec:02d}s" if h else f"{m}m {sec:02d}s" if m else f"{sec}s"


def rebuilt_table(runs: list[BenchDone]) -> str:
    """The comparison table of the recorded finished runs (no per-request records: goodput as measured)."""
    rebuilt = [Run(Path(r.run_dir or "."), RunMeta.from_dict(r.meta), dict(r.summary))
               for r in runs if r.status == "complete" and r.meta and r.summary]
    if not rebuilt:
        return ""
    text = table.render_text(table.comparison_frame(table.build_cells(rebuilt)))
    unlike = table.like_for_like_note(rebuilt)
    note = table.simulated_note(rebuilt)
    return (f"{note}\n" if note else "") + text + (f"\n{unlike}" if unlike else "")


def render(s: SessionSummary) -> str:
    """The summary as text (ends with a newline)."""
    rec = s.recording
    h = rec.header
    host = h.host or {}
    gpus = host.get("gpus") or []
    where = ("SIMULATED host" if h.simulated else "host") + f" {host.get('hostname', '?')}" + (
        f": {len(gpus)}× {', '.join(sorted(set(map(str, gpus))))}" if gpus else "")
    lines = [f"recording: {rec.path}",
             f"  recorded {_when(h.started)} by disagg-tui {h.app_version} ({where})",
             f"  command: {h.command}",
             f"  {_span(rec.duration_s)} of events, {s.events:,} events; recorded: {', '.join(h.recorded)}"
             + (f" ({', '.join(s.topics)})" if s.topics else "")]
    if rec.damage is not None:
        at = f"last event at {_clock(s.last_ts)}, {_span(s.last_ts - rec.start)} in" if s.last_ts else "no event"
        lines.append(f"  STOPPED EARLY: the recording is {rec.damage}; replayed up to there ({at})")
    elif not rec.ended_cleanly:
        lines.append("  the session did not close the recording (killed?): replayed to its last flush")
    if rec.skipped:
        lines.append(f"  {rec.skipped} events of kinds this version does not know were left out")
    lines.append("")
    lines.append("layouts:")
    if not s.layouts:
        lines.append("  none")
    for lay in s.layouts:
        ready = f"ready after {lay.ready_s:.1f} s" if lay.ready_s is not None else "never ready"
        servers = ", ".join(f"{n} {v:.1f} s" for n, v in lay.servers.items())
        lines.append(f"  {lay.topology or '?'} of {lay.profile or '?'}: {ready}"
                     + (f" ({servers})" if servers else "") + f"; last {lay.final or '?'}"
                     + (f" ({lay.note})" if lay.note else "")
                     + (f"; fixes applied: {', '.join(lay.fixes)}" if lay.fixes else ""))
    lines.append("")
    lines.append("diagnoses:")
    if not s.diagnoses:
        lines.append("  none")
    for d in s.diagnoses:
        lines.append(f"  {_clock(d.ts)}  {d.headline()}")
        lines.append(f"            fix: {d.fix}")
    if s.failures:
        lines.append("")
        lines.append("failures and fixes:")
        lines += [f"  {f}" for f in s.failures]
    lines.append("")
    done = sum(1 for r in s.runs if r.status == "complete")
    lines.append(f"runs: {len(s.runs)} finished ({done} complete)")
    lines.append("")
    out = "\n".join(lines) + "\n"
    if s.results is not None:
        return out + f"results (as `{s.results.command}` printed them):\n" + s.results.text
    rebuilt = rebuilt_table(s.runs)
    if rebuilt:
        return out + "results (rebuilt from the recorded runs; the session printed no table):\n" + rebuilt + "\n"
    return out + "results: none recorded\n"


def summary_dict(s: SessionSummary) -> dict[str, Any]:
    rec = s.recording
    return {"path": str(rec.path), "header": {"app_version": rec.header.app_version, "started": rec.header.started,
                                              "command": rec.header.command, "host": rec.header.host},
            "damage": rec.damage, "ended_cleanly": rec.ended_cleanly, "events": s.events, "topics": s.topics,
            "layouts": [{"id": lay.layout_id, "topology": lay.topology, "profile": lay.profile,
                         "ready_s": lay.ready_s, "servers": lay.servers, "final": lay.final} for lay in s.layouts],
            "diagnoses": [d.to_dict() for d in s.diagnoses], "failures": s.failures,
            "runs": [{"run": r.run_id, "status": r.status} for r in s.runs],
            "results": s.results.to_dict() if s.results else None}
