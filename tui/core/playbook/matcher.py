"""Matching one server's log against the playbook, line by line as it arrives, then as a whole when it ends.

``feed(line, lineno)`` returns the diagnoses a line produces at once: the highest-priority entry whose pattern
matches claims the line, and each entry is reported once per server (or once per distinct value of its named
groups). Generic entries (consequence lines such as ``EngineCore failed to start``) are held back. ``finish``
is called when the start ended (the process exited, the app gave up, or a saved log ends): it judges the
whole-log rules (a start that never became ready, in which phase, with what in the log) when no error-level line
entry explained the failure, and releases held generic diagnoses unless a higher-priority error explains it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Protocol

from tui.core.launch.phases import PHASES, PhaseTracker
from tui.core.playbook.events import Diagnosis
from tui.core.playbook.model import EndRule, Entry, MatchContext, Probe


class Rules(Protocol):
    """What a matcher reads of a playbook (``tui.core.playbook.book.Playbook`` is one): its rules, indexed."""

    line_rules: tuple[tuple[Entry, Probe], ...]
    end_entries: tuple[Entry, ...]
    context_probes: tuple[Probe, ...]
    context_index: dict[str, int]

    def candidates(self, text: str) -> tuple[list[int], list[int]]: ...


READY_MARK = "Application startup complete."
#: a server's shutdown began: vLLM's own ``[shutdown]`` lines (0.24), uvicorn's, or the supervisor's stop marker.
#: What it prints after that (0.24's abort-mode stop prints an ``EngineDeadError`` traceback) is no crash.
SHUTDOWN = re.compile(r"\[shutdown\] |Shutting down FastAPI HTTP server|Waiting for application shutdown|"
                      r"\[disagg-tui\] stopping this server")

#: what a line must have for the matcher to learn from it (``_learn``)
LEARN_MARKS = ("version", "V1 LLM engine", "non-default args:")
MAX_LINE_CHARS = 2000
#: characters of a line the patterns are matched against: its first and last halves of this. Patterns run on RE2
#: (``linear``: time linear in what they search), so a line of any length costs each pattern at most this many
#: characters' search: a 10 MiB line is diagnosed as fast as a 16 KiB one (``re`` took minutes on a 4 MB line for
#: ``A: .*B`` where A repeats, and on this cut for ``\s*\s*\s*x``; tests/hardening/test_trust2_playbook.py)
MAX_MATCH_CHARS = 16_384
_ARGS_MARK = "non-default args: {"
_DP_SIZE = re.compile(r"'data_parallel_size': (\d+)")
_VERSION = re.compile(r"(?:█\s+version|vLLM server version|Initializing a V1 LLM engine \(v)\s*(\d+\.\d+[\w.+-]*)")
_PHASE_LABEL = {p.key: p.label for p in PHASES}


def clean_line(line: str) -> str:
    """A log line for display: no line end, tqdm's carriage returns as spaces, at most MAX_LINE_CHARS."""
    text = line.rstrip("\r\n").replace("\r", " ")
    return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS] + "…"


class Matcher:
    """The matching state of one server's log. Build it with ``Playbook.matcher(server, context)``."""

    def __init__(self, playbook: Rules, server: str = "", context: MatchContext | None = None) -> None:
        self.playbook = playbook
        self.server = server
        self.context = context or MatchContext()
        self._given = self.context
        self.tracker = PhaseTracker()
        self.ready_seen = False
        self.lines_seen = 0
        self._last_lineno = 0
        self._last_text = ""
        self._probe_last: dict[int, int] = {}  # context probe index -> last line number it matched
        self._reported: list[Diagnosis] = []
        self._keys: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        self._deferred: list[Diagnosis] = []
        self._finished = False
        self.shutting_down = False  # a shutdown line was seen: error entries no longer match
        self._refilter()

    # --- context ------------------------------------------------------------------------------------------

    def _refilter(self) -> None:
        ctx = self.context
        self._admitted = [e.when.admits(ctx) for e, _ in self.playbook.line_rules]

    def set_bench_phase(self, phase: str | None) -> None:
        """What a benchmark on this server is doing as the next lines were logged (``model.BENCH_PHASES``; None:
        not known): an entry held to some phases (``when: bench``) matches only in them. Cheap when unchanged."""
        if phase != self.context.bench_phase:
            self.context = replace(self.context, bench_phase=phase)
            self._refilter()

    def _learn(self, text: str) -> None:
        """Fill what the caller did not say from the log itself: the vLLM version, the kind of topology."""
        ctx = self.context
        changed = False
        if ctx.vllm_version is None and (LEARN_MARKS[0] in text or LEARN_MARKS[1] in text):
            m = _VERSION.search(text)
            if m:
                ctx = replace(ctx, vllm_version=m.group(1))
                changed = True
        if ctx.topology is None and LEARN_MARKS[2] in text:
            start, end = text.find(_ARGS_MARK), text.rfind("}")  # what 'non-default args: \{(.*)\}' matched,
            if start != -1 and end >= start + len(_ARGS_MARK):  # found without its backtracking
                body = text[start + len(_ARGS_MARK):end]
                dp = _DP_SIZE.search(body)
                if "kv_transfer_config" in body:
                    kind = "pd"
                elif dp and dp.group(1).lstrip("0") not in ("", "1"):  # > 1 (and no int() of 5,000 digits)
                    kind = "dp"
                else:
                    kind = "tp"
                ctx = replace(ctx, topology=kind)
                changed = True
        if changed:
            self.context = ctx
            self._refilter()

    # --- lines -------------------------------------------------------------------------------------------

    def feed(self, line: str, lineno: int | None = None) -> list[Diagnosis]:
        """Match one log line; returns the diagnoses it produces now (usually none)."""
        text = line.rstrip("\r\n")
        if len(text) > MAX_MATCH_CHARS:  # its start (what failed) and its end (a progress bar's last state)
            text = text[:MAX_MATCH_CHARS // 2] + " … " + text[-(MAX_MATCH_CHARS // 2):]
        self.lines_seen += 1
        n = lineno if lineno is not None else self.lines_seen
        self.tracker.feed(text)
        if not self.ready_seen and READY_MARK in text:
            self.ready_seen = True
        if self.context.vllm_version is None or self.context.topology is None:
            self._learn(text)
        if not self.shutting_down and ("hut" in text or "[disagg-tui]" in text) and SHUTDOWN.search(text):
            self.shutting_down = True  # (every alternative of SHUTDOWN has one of the two: no regex on most lines)
        out: list[Diagnosis] = []
        book = self.playbook
        rule_ids, probe_ids = book.candidates(text)
        for i in rule_ids:
            if not self._admitted[i]:
                continue
            entry, probe = book.line_rules[i]
            if self.shutting_down and entry.severity == "error":
                continue  # the stop's own tracebacks: a clean stop is not a crash
            m = probe.regex.search(text)
            if m is None or not self._after_ok(entry, n):
                continue
            captures = {k: v for k, v in m.groupdict().items() if v is not None}
            key = (entry.id, tuple(sorted(captures.items())))
            if key not in self._keys:  # else the line is explained by a diagnosis already made
                self._keys.add(key)
                diag = self._diagnosis(entry, n, text, captures)
                if entry.generic:
                    self._deferred.append(diag)
                else:
                    self._reported.append(diag)
                    out.append(diag)
            break
        for i in probe_ids:
            if book.context_probes[i].regex.search(text) is not None:
                self._probe_last[i] = n
        if text.strip():
            self._last_lineno, self._last_text = n, text
        return out

    def skipped(self, total: int, last: tuple[int, str] | None) -> None:
        """A reader that fed only the lines that can change this matcher (``offline.diagnose_bytes``: the lines
        with one of ``offline.state_literals``) says how many lines the log has and which is its last non-blank
        one (line number, text): the rest of the state is what feeding every line would have made it."""
        self.lines_seen = self.tracker.lines_seen = total
        if last is not None and last[0] > self._last_lineno:
            self._last_lineno, self._last_text = last[0], last[1].rstrip("\r\n")

    def _after_ok(self, entry: Entry, lineno: int) -> bool:
        rule = entry.lines
        if rule is None or not rule.after:
            return True
        for probe in rule.after:
            seen = self._probe_last.get(self.playbook.context_index[probe.text])
            if seen is not None and seen < lineno and (rule.within is None or lineno - seen <= rule.within):
                return True
        return False

    def _seen(self, probes: tuple[Probe, ...]) -> bool:
        return any(self.playbook.context_index[p.text] in self._probe_last for p in probes)

    def _diagnosis(self, entry: Entry, lineno: int | None, text: str, captures: dict[str, str], *,
                   rule: str = "line", detail: str = "") -> Diagnosis:
        arch = self.context.gpu_arch
        pf = entry.plan_fix(captures, arch)
        return Diagnosis(
            server=self.server, entry_id=entry.id, title=entry.title, severity=entry.severity,
            priority=entry.priority, line_no=lineno, line=clean_line(text), explanation=entry.explain,
            fix=entry.fix_text(captures, arch), changes=tuple(pf.describe()) if pf else (), fixable=pf is not None,
            auto=entry.auto, rule=rule, detail=detail, generic=entry.generic, captures=captures,
        )

    # --- the end -----------------------------------------------------------------------------------------

    def finish(self, exit_code: int | None = None, ready: bool | None = None, stalled_phase: str | None = None
               ) -> list[Diagnosis]:
        """Judge the whole log once the start ended; returns the diagnoses this adds (report order).

        ``exit_code``: the process's exit status (negative: the signal that killed it), None while it still runs
        or when unknown. ``ready``: whether it became ready (None: judged from the log's ``Application startup
        complete.``). ``stalled_phase``: the phase the app gave up in while it still ran (None: the phase the log
        reached); give it even when the app then killed the process, whose exit status then does not make it an
        exit. A saved log that ends without readiness and without an exit status counts as stalled there.
        Calling it again returns nothing new.
        """
        if self._finished:
            return []
        self._finished = True
        is_ready = self.ready_seen if ready is None else ready
        phase = stalled_phase or self.tracker.phase.key
        stalled = stalled_phase is not None or (not is_ready and exit_code is None)
        candidates = list(self._deferred)
        explained = any(d.is_failure and not d.generic for d in self._reported)
        if not is_ready and not explained:
            reported_ids = {d.entry_id for d in self._reported}
            for entry in self.playbook.end_entries:
                end = entry.end
                if end is None or entry.id in reported_ids or not entry.when.admits(self.context, strict=True):
                    continue
                if self._end_ok(end, exit_code, stalled, phase):
                    detail = self._how_it_ended(exit_code, stalled_phase, phase)
                    candidates.append(self._diagnosis(entry, self._last_lineno or None, self._last_text, {},
                                                      rule="end", detail=detail))
        kept: list[Diagnosis] = []
        errors = [d for d in self._reported if d.is_failure]
        for d in sorted(candidates, key=lambda d: -d.priority):
            if any(e.priority > d.priority for e in errors):
                continue
            kept.append(d)
            if d.is_failure:
                errors.append(d)
        self._reported += kept
        return sorted(kept, key=Diagnosis.sort_key)

    def _end_ok(self, end: EndRule, exit_code: int | None, stalled: bool, phase: str) -> bool:
        if end.stalled is True and not stalled:
            return False
        if end.stalled is False and (stalled or exit_code is None):
            return False
        if end.exit_codes and exit_code not in end.exit_codes:
            return False
        if end.phases and phase not in end.phases:
            return False
        if end.seen and not self._seen(end.seen):
            return False
        return not (end.not_seen and self._seen(end.not_seen))

    def _how_it_ended(self, exit_code: int | None, stalled_phase: str | None, phase: str) -> str:
        where = f"in phase '{_PHASE_LABEL.get(phase, phase)}'"
        if stalled_phase is not None:
            how = "given up while still running"
        elif exit_code is not None:
            how = f"the process exited with status {exit_code}"
        else:
            how = "the log ends there"
        since = f"; nothing after line {self._last_lineno}" if self._last_lineno else ""
        return f"the start ended without '{READY_MARK}' {where} ({how}{since})"

    # --- results -----------------------------------------------------------------------------------------

    @property
    def diagnoses(self) -> list[Diagnosis]:
        """Everything reported so far, most important first (errors, then by priority, then by line)."""
        return sorted(self._reported, key=Diagnosis.sort_key)

    @property
    def failures(self) -> list[Diagnosis]:
        return [d for d in self.diagnoses if d.is_failure]
