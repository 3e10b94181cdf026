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

from tui.core import safeio
from tui.core.bench import table
from tui.core.bench.events import BenchDone, ResultsReported
from tui.core.bench.store import Run, check_summary, read_meta_dict
from tui.core.errors import InputError
from tui.core.events import Event, Notice
from tui.core.guided import FixApplied
from tui.core.launch.events import LayoutChanged, PlanLaunched, ServerExited, ServerReady, ServerStalled
from tui.core.playbook.events import Diagnosis
from tui.core.record.reader import Recording
from tui.core.record.recorder import TOPICS

#: items of each list the summary keeps (failures, diagnoses, runs, layouts): a recording that repeats an event
#: a million times holds the first ones and a count of the rest
MAX_LISTED = 1_000
#: characters of the results table printed again (a real one is a few kB)
MAX_TABLE = 1 << 20


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
    left_out: dict[str, int] = field(default_factory=dict)  # past MAX_LISTED, per list


def _keep(s: SessionSummary, items: list[Any], item: Any, what: str) -> None:
    if len(items) < MAX_LISTED:
        items.append(item)
    else:
        s.left_out[what] = s.left_out.get(what, 0) + 1


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
        story = _story(s, by_id, ev.layout_id)
        if story is None:
            return current
        story.topology = _text(ev.plan.get("topology"), story.topology)
        story.profile = _text(ev.plan.get("profile_id"), story.profile)
        fixes = ev.plan.get("fixes_applied")
        story.fixes = [safeio.shown(f, 80) for f in fixes[:MAX_LISTED]] if isinstance(fixes, list) else []
        return story
    if isinstance(ev, LayoutChanged):
        story = _story(s, by_id, ev.layout_id)
        if story is None:
            return current
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
        if ev.server in current.servers or len(current.servers) < MAX_LISTED:
            current.servers[ev.server] = ev.startup_s
    elif isinstance(ev, Diagnosis):
        _keep(s, s.diagnoses, ev, "diagnoses")
    elif isinstance(ev, FixApplied):
        changes = safeio.shown("; ".join(ev.changes[:20]) or "no change")
        _keep(s, s.failures, f"{_clock(ev.ts)}  fix applied [{safeio.shown(ev.entry_id, 80)}]: {changes}",
              "failures")
    elif isinstance(ev, ServerExited):
        _keep(s, s.failures, f"{_clock(ev.ts)}  {safeio.shown(ev.server, 80)} exited with code {ev.returncode} "
                             f"during {safeio.shown(ev.during, 80)}", "failures")
    elif isinstance(ev, ServerStalled):
        _keep(s, s.failures, f"{_clock(ev.ts)}  {safeio.shown(ev.server, 80)} stalled in "
                             f"{safeio.shown(ev.phase, 80)} ({ev.silent_s:.0f} s silent)", "failures")
    elif isinstance(ev, Notice) and ev.level == "error":
        _keep(s, s.failures, f"{_clock(ev.ts)}  {safeio.shown(ev.message)}", "failures")
    elif isinstance(ev, BenchDone):
        _keep(s, s.runs, ev, "runs")
        if ev.status != "complete":
            _keep(s, s.failures, f"{_clock(ev.ts)}  run {safeio.shown(ev.run_id, 120)} {safeio.shown(ev.status, 40)}: "
                                 f"{safeio.shown(ev.message)}", "failures")
    elif isinstance(ev, ResultsReported):
        s.results = ev
    return current


def _story(s: SessionSummary, by_id: dict[str, LayoutStory], layout_id: str) -> LayoutStory | None:
    story = by_id.get(layout_id)
    if story is None:
        if len(by_id) >= MAX_LISTED:
            s.left_out["layouts"] = s.left_out.get("layouts", 0) + 1
            return None
        story = by_id[layout_id] = LayoutStory(safeio.shown(layout_id, 120))
    return story


def _text(value: Any, default: str) -> str:
    """A string of a recorded plan as it may be printed (anything else: the default)."""
    return safeio.shown(value, 120) if isinstance(value, str) else default


def _block(text: str) -> str:
    """A recorded block of text (the results table) as it may be printed: its lines kept, control characters
    escaped (an escape sequence never reaches the terminal), at most MAX_TABLE characters."""
    cut = text[:MAX_TABLE]
    out = "\n".join(safeio.shown(line, MAX_TABLE) for line in cut.split("\n"))
    return out + (f"\n…(+{len(text) - MAX_TABLE:,} characters)" if len(text) > MAX_TABLE else "")


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
    """The comparison table of the recorded finished runs (no per-request records: goodput as measured). A run
    whose recorded record or summary does not read (a field of the wrong type) is left out."""
    rebuilt = []
    for r in runs:
        if r.status != "complete" or not r.meta or not r.summary:
            continue
        try:
            rebuilt.append(Run(Path(r.run_dir or "."), read_meta_dict(r.meta, "the recorded run"),
                               check_summary(dict(r.summary), "the recorded run")))
        except InputError:
            continue
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
    gpus = host.get("gpus")
    gpus = gpus[:MAX_LISTED] if isinstance(gpus, list) else []
    hostname = host.get("hostname")
    where = ("SIMULATED host" if h.simulated else "host") + f" {_text(hostname, '?')}" + (
        f": {len(gpus)}× {safeio.shown(', '.join(sorted({safeio.shown(g, 60) for g in gpus})))}" if gpus else "")
    lines = [f"recording: {rec.path}",
             f"  recorded {_when(h.started)} by disagg-tui {safeio.shown(h.app_version, 60)} ({where})",
             f"  command: {safeio.shown(h.command, 400)}",
             f"  {_span(rec.duration_s)} of events, {s.events:,} events; recorded: "
             f"{safeio.shown(', '.join(h.recorded[:100]), 200)}"
             + (f" ({safeio.shown(', '.join(s.topics))})" if s.topics else "")]
    if rec.damage is not None:
        at = f"last event at {_clock(s.last_ts)}, {_span(s.last_ts - rec.start)} in" if s.last_ts else "no event"
        lines.append(f"  STOPPED EARLY: the recording is {rec.damage}; replayed up to there ({at})")
    elif not rec.ended_cleanly:
        lines.append("  the session did not close the recording (killed?): replayed to its last flush")
    if rec.skipped:
        lines.append(f"  {rec.skipped} events of kinds this version does not know were left out")
    if rec.bad_events:
        lines.append(f"  {rec.bad_events} damaged events were left out (a field of the wrong type or range; the "
                     f"first {rec.first_bad})")
    if rec.markers_left_out:
        lines.append(f"  {rec.markers_left_out} markers were left out (of the wrong shape, or past "
                     f"{len(rec.markers):,})")
    for what, n in sorted(s.left_out.items()):
        lines.append(f"  {n:,} more {what} than the {MAX_LISTED:,} listed were left out")
    lines.append("")
    lines.append("layouts:")
    if not s.layouts:
        lines.append("  none")
    for lay in s.layouts:
        ready = (f"ready after {lay.ready_s:.1f} s" if lay.ready_s is not None
                 else "ready (started before the recording)" if lay.ready is not None else "never ready")
        servers = ", ".join(f"{n} {v:.1f} s" for n, v in lay.servers.items())
        lines.append(f"  {safeio.shown(lay.topology or '?', 120)} of {safeio.shown(lay.profile or '?', 120)}: "
                     f"{ready}" + (f" ({safeio.shown(servers, 400)})" if servers else "")
                     + f"; last {safeio.shown(lay.final or '?', 40)}"
                     + (f" ({safeio.shown(lay.note)})" if lay.note else "")
                     + (f"; fixes applied: {', '.join(lay.fixes)}" if lay.fixes else ""))
    lines.append("")
    lines.append("diagnoses:")
    if not s.diagnoses:
        lines.append("  none")
    for d in s.diagnoses:
        lines.append(f"  {_clock(d.ts)}  {safeio.shown(d.headline(), 400)}")
        lines.append(f"            fix: {safeio.shown(d.fix, 400)}")
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
        return out + f"results (as `{safeio.shown(s.results.command, 60)}` printed them):\n" + _block(s.results.text)
    rebuilt = rebuilt_table(s.runs)
    if rebuilt:
        return out + "results (rebuilt from the recorded runs; the session printed no table):\n" + rebuilt + "\n"
    return out + "results: none recorded\n"


def summary_dict(s: SessionSummary) -> dict[str, Any]:
    rec = s.recording
    return {"path": str(rec.path), "header": {"app_version": rec.header.app_version, "started": rec.header.started,
                                              "command": rec.header.command, "host": rec.header.host},
            "damage": rec.damage, "ended_cleanly": rec.ended_cleanly, "events": s.events, "topics": s.topics,
            "skipped": rec.skipped, "bad_events": rec.bad_events, "first_bad": rec.first_bad,
            "markers_left_out": rec.markers_left_out, "left_out": dict(s.left_out),
            "layouts": [{"id": lay.layout_id, "topology": lay.topology, "profile": lay.profile,
                         "ready_s": lay.ready_s, "servers": lay.servers, "final": lay.final} for lay in s.layouts],
            "diagnoses": [d.to_dict() for d in s.diagnoses], "failures": s.failures,
            "runs": [{"run": r.run_id, "status": r.status} for r in s.runs],
            "results": s.results.to_dict() if s.results else None}
