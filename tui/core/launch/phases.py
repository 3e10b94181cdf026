"""vLLM 0.24 log lines: the prefix, and the startup phases a server goes through.

A line looks like ``(EngineCore pid=880) INFO 11-29 07:27:22 [model_runner.py:302] Model loading took 15.27 GiB
and 2.55 seconds``, possibly behind a log collector's own prefix (timestamps), with tqdm bars as ``\\r``-separated
segments. Patterns here use ``search`` on the message templates of ``../shared/VLLM-0.24.md`` §5, never one
captured instance, so other numbers, paths, process names and pids match too.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

_PREFIX = re.compile(
    r"\((?P<proc>[A-Za-z_][\w:]*) pid=(?P<pid>\d+)\)\s+"
)
_LEVEL = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?P<date>\d\d-\d\d \d\d:\d\d:\d\d)\s+"
    r"\[(?P<file>[^\]:]+):(?P<line>\d+)\]\s?"
)
_TQDM = re.compile(r"(?P<label>[A-Za-z][^:\r|]{2,80}):\s+(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)")


#: characters of a log line the phase patterns look at (its head and tail)
MAX_PHASE_LINE = 8192


@dataclass(frozen=True, slots=True)
class LogRecord:
    proc: str | None  # APIServer, EngineCore, Worker_TP0, EngineCore_DP1 ...
    pid: int | None
    level: str | None
    source: str | None  # file.py:line
    message: str


def parse_line(line: str) -> LogRecord:
    """Split a vLLM log line into its prefix fields and message (tolerates any leading collector prefix)."""
    text = line.rstrip("\r\n")
    proc = pid = None
    m = _PREFIX.search(text)
    rest = text
    if m:
        proc, pid = m.group("proc"), int(m.group("pid"))
        rest = text[m.end():]
    lm = _LEVEL.search(rest)
    if lm and lm.start() <= 2:
        return LogRecord(proc, pid, lm.group("level"), f"{lm.group('file')}:{lm.group('line')}", rest[lm.end():])
    if m is None:
        lm = _LEVEL.search(text)
        if lm:
            return LogRecord(None, None, lm.group("level"), f"{lm.group('file')}:{lm.group('line')}",
                             text[lm.end():])
    return LogRecord(proc, pid, None, None, rest)


def logged_at(line: str, now: float, *, tolerance_s: float = 120.0) -> float | None:
    """When vLLM logged ``line``, from its ``MM-DD HH:MM:SS`` stamp (local time, no year: the year that puts it
    nearest ``now``), as epoch seconds at the start of that second; None when the line has no stamp or the stamp is
    more than ``tolerance_s`` from ``now`` (another clock, an old log)."""
    lm = _LEVEL.search(line[:400])
    if lm is None:
        return None
    try:
        month, day = int(lm.group("date")[0:2]), int(lm.group("date")[3:5])
        hh, mm, ss = (int(x) for x in lm.group("date")[6:].split(":"))
        year = time.localtime(now).tm_year
        best: float | None = None
        for y in (year - 1, year, year + 1):
            t = time.mktime((y, month, day, hh, mm, ss, 0, 0, -1))
            if best is None or abs(t - now) < abs(best - now):
                best = t
    except (ValueError, OverflowError):
        return None
    return best if best is not None and abs(best - now) <= tolerance_s else None


def last_tqdm(line: str) -> tuple[str, int, int] | None:
    """The last progress-bar state on a line of ``\\r``-separated tqdm segments: (label, n, total)."""
    found = None
    for m in _TQDM.finditer(line):
        found = (m.group("label").strip(), int(m.group("n")), int(m.group("total")))
    return found


@dataclass(frozen=True, slots=True)
class Phase:
    key: str
    label: str
    progress: float  # rough share of a cold start done when the phase begins (0..1)


# In order. A server never goes back to an earlier phase.
PHASES: tuple[Phase, ...] = (
    Phase("launching", "starting Python, importing vLLM", 0.0),
    Phase("args", "parsing arguments", 0.06),
    Phase("config", "resolving model config", 0.12),
    Phase("engine_init", "starting the engine", 0.2),
    Phase("loading", "loading weights", 0.25),
    Phase("loaded", "weights loaded", 0.35),
    Phase("compiling", "torch.compile", 0.4),
    Phase("compiled", "compiled; profiling memory", 0.6),
    Phase("kv_cache", "allocating KV cache", 0.7),
    Phase("warmup", "kernel warm-up", 0.72),
    Phase("cuda_graphs", "capturing CUDA graphs", 0.75),
    Phase("graphs_done", "CUDA graphs captured; warming up", 0.85),
    Phase("engine_ready", "engine ready", 0.92),
    Phase("api_starting", "starting the HTTP server", 0.96),
    Phase("api_up", "HTTP server up", 0.99),
    Phase("ready", "ready (/health 200)", 1.0),
)
PHASE_INDEX = {p.key: i for i, p in enumerate(PHASES)}

_PHASE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("args", re.compile(r"non-default args: \{|█\s+█\s+█▄\s+▄█|vLLM server version \S+, serving model")),
    ("config", re.compile(r"Resolved architecture: \S+|Using max model len \d+|Started \d+ API server processes")),
    ("engine_init", re.compile(r"Initializing a V1 LLM engine \(v[^)]{0,64}\) with config")),
    ("loading", re.compile(r"Loading model from scratch\.\.\.|Starting to load model \S+\.\.\.|"
                           r"Loading safetensors checkpoint shards:")),
    ("loaded", re.compile(r"Model loading took [\d.]+ GiB")),
    ("compiling", re.compile(r"Using cache directory: .* for vLLM's torch\.compile|Dynamo bytecode transform time|"
                             r"Compiling a graph for compile range|Directly load (?:the compiled graph|AOT compil)")),
    ("compiled", re.compile(r"torch\.compile (?:and initial profiling/warmup run together )?took [\d.]+ s in total|"
                            r"Initial profiling/warmup run took")),
    ("kv_cache", re.compile(r"Available KV cache memory: [\d.]+ GiB|GPU KV cache size: [\d,]+ tokens")),
    ("warmup", re.compile(r"Warming up FlashInfer")),
    ("cuda_graphs", re.compile(r"Capturing CUDA graphs")),
    ("graphs_done", re.compile(r"Graph capturing finished in \d+ secs")),
    ("engine_ready", re.compile(r"init engine \(profile, create kv cache, warmup model\) took [\d.]+ s")),
    ("api_starting", re.compile(r"Starting vLLM server on \S+|Supported tasks: \[")),
    ("api_up", re.compile(r"Application startup complete\.")),
)


#: every pattern that can move a tracker to a phase (a bar needs ``%|`` in its line besides): what a reader that
#: skips lines must look for
PHASE_PATTERNS: tuple[re.Pattern[str], ...] = tuple(p for _, p in _PHASE_PATTERNS)
BAR_MARK = "%|"
_LATEST_FIRST: tuple[tuple[int, re.Pattern[str]], ...] = tuple(
    sorted(((PHASE_INDEX[key], pattern) for key, pattern in _PHASE_PATTERNS), key=lambda ip: -ip[0]))


@dataclass(frozen=True, slots=True)
class PhaseUpdate:
    phase: Phase
    progress: float  # overall 0..1, including progress inside the phase (bars)
    detail: str  # e.g. "Capturing CUDA graphs (FULL) 34/51"


class PhaseTracker:
    """Feeds log lines, reports when a server moves to a later phase or advances inside one."""

    def __init__(self) -> None:
        self.index = 0
        self.progress = 0.0
        self.detail = ""
        self.lines_seen = 0

    @property
    def phase(self) -> Phase:
        return PHASES[self.index]

    def mark_ready(self) -> PhaseUpdate:
        self.index = PHASE_INDEX["ready"]
        self.progress = 1.0
        self.detail = ""
        return PhaseUpdate(self.phase, 1.0, "")

    def feed(self, line: str) -> PhaseUpdate | None:
        self.lines_seen += 1
        if len(line) > MAX_PHASE_LINE:  # every phase line is short; a huge one is matched on its head and tail
            line = line[:MAX_PHASE_LINE // 2] + " " + line[-MAX_PHASE_LINE // 2:]
        best: int | None = None
        # the latest phase whose pattern matches, among this one and the later ones: tried latest first, so the
        # first match is the one; a server past a phase never searches for it again (most lines of a long log
        # come after the last phase and cost one search, or none)
        for i, pattern in _LATEST_FIRST:
            if i < self.index:
                break
            if pattern.search(line):
                best = i
                break
        detail = ""
        inner = 0.0
        bar = last_tqdm(line) if (BAR_MARK in line) else None
        if bar is not None:
            label, n, total = bar
            detail = f"{label} {n}/{total}"
            inner = n / total if total else 0.0
        if best is None and bar is None:
            return None
        new_index = best if best is not None else self.index
        if new_index < self.index:
            return None
        phase = PHASES[new_index]
        nxt = PHASES[new_index + 1].progress if new_index + 1 < len(PHASES) else 1.0
        progress = phase.progress + (nxt - phase.progress) * inner * 0.95
        if new_index == self.index and progress <= self.progress and not detail:
            return None
        self.index = new_index
        self.progress = max(self.progress, progress)
        self.detail = detail
        return PhaseUpdate(phase, self.progress, detail)
