"""The playbook: every entry compiled once, ordered for matching, and the bridge from a diagnosis to a plan fix."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from tui.core.errors import InputError
from tui.core.plan.planner import PlanFix
from tui.core.playbook.events import Diagnosis
from tui.core.playbook.loader import merge, operator_playbook_path, parse_playbook_file, shipped_playbook_path
from tui.core.playbook.matcher import Matcher
from tui.core.playbook.model import Entry, MatchContext, Probe


class Playbook:
    """Known failures, ready to match. Entries are kept highest priority first (file order among equals)."""

    def __init__(self, entries: Sequence[Entry], sources: Sequence[str] = ()) -> None:
        order = {e.id: i for i, e in enumerate(entries)}
        self.entries: tuple[Entry, ...] = tuple(sorted(entries, key=lambda e: (-e.priority, order[e.id])))
        self.sources: tuple[str, ...] = tuple(sources)
        self._by_id = {e.id: e for e in self.entries}
        self.line_rules: tuple[tuple[Entry, Probe], ...] = tuple(
            (e, p) for e in self.entries if e.lines is not None for p in e.lines.patterns)
        self.end_entries: tuple[Entry, ...] = tuple(e for e in self.entries if e.end is not None)
        probes: dict[str, Probe] = {}
        for e in self.entries:
            for p in (*(e.lines.after if e.lines else ()), *(e.end.seen if e.end else ()),
                      *(e.end.not_seen if e.end else ())):
                probes.setdefault(p.text, p)
        self.context_probes: tuple[Probe, ...] = tuple(probes.values())
        self.context_index: dict[str, int] = {p.text: i for i, p in enumerate(self.context_probes)}
        # literal -> (line rules, context probes) it may let through; probes without literals always run
        index: dict[str, tuple[list[int], list[int]]] = {}
        self.rules_always: tuple[int, ...] = tuple(i for i, (_, p) in enumerate(self.line_rules) if not p.literals)
        self.context_always: tuple[int, ...] = tuple(i for i, p in enumerate(self.context_probes) if not p.literals)
        for i, (_, p) in enumerate(self.line_rules):
            for lit in p.literals:
                index.setdefault(lit, ([], []))[0].append(i)
        for i, p in enumerate(self.context_probes):
            for lit in p.literals:
                index.setdefault(lit, ([], []))[1].append(i)
        self.literals: tuple[str, ...] = tuple(index)
        self.literal_index: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
            k: (tuple(r), tuple(c)) for k, (r, c) in index.items()}

    def candidates(self, text: str) -> tuple[list[int], list[int]]:
        """The line rules and context probes worth running on ``text`` (their literal occurs), in priority order.

        One substring search per distinct literal of the whole playbook, instead of one per pattern: most log
        lines contain none of them and cost no regular expression at all.
        """
        present = [lit for lit in self.literals if lit in text]
        if not present:
            return list(self.rules_always), list(self.context_always)
        rules: set[int] = set(self.rules_always)
        ctx: set[int] = set(self.context_always)
        for lit in present:
            r, c = self.literal_index[lit]
            rules.update(r)
            ctx.update(c)
        return sorted(rules), sorted(ctx)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, entry_id: str) -> Entry | None:
        return self._by_id.get(entry_id)

    def entry(self, entry_id: str) -> Entry:
        found = self._by_id.get(entry_id)
        if found is None:
            raise InputError(f"no playbook entry {entry_id!r} (known: {', '.join(sorted(self._by_id))})")
        return found

    def matcher(self, server: str = "", context: MatchContext | None = None) -> Matcher:
        """A fresh matcher for one server's log (compiled patterns are shared)."""
        return Matcher(self, server, context)

    def claim(self, line: str, context: MatchContext | None = None) -> Entry | None:
        """The entry that would claim this line on its own (ignoring ``after`` context), or None."""
        ctx = context or MatchContext()
        text = line.rstrip("\r\n")
        for entry, probe in self.line_rules:
            if entry.when.admits(ctx) and probe.search(text) is not None:
                return entry
        return None

    def plan_fix(self, diagnosis: Diagnosis, arch: str | None = None) -> PlanFix | None:
        """The diagnosis's entry's fix as a PlanFix (placeholders filled from the matched line), or None."""
        entry = self._by_id.get(diagnosis.entry_id)
        return entry.plan_fix(diagnosis.captures, arch) if entry is not None else None

    def fixes(self, diagnoses: Iterable[Diagnosis], which: str, arch: str | None = None
              ) -> list[tuple[str, PlanFix]]:
        """The fixes ``up --apply-fix WHICH`` applies: ``auto`` (every auto entry diagnosed) or one entry id.

        Returns ``(entry_id, PlanFix)`` pairs in report order, one per entry; give each to
        ``planner.apply_fix(plan, fix, entry_id)``. An id that was not diagnosed still gives its fix (the operator
        asked for it) unless the fix needs values from a matched line. ``arch`` is the plan's GPU architecture
        (it picks a fix's ``arch_add_args``). Raises InputError for an unknown id or an entry with no fix.
        """
        ordered = sorted(diagnoses, key=Diagnosis.sort_key)
        out: list[tuple[str, PlanFix]] = []
        if which == "auto":
            seen: set[str] = set()
            for d in ordered:
                entry = self._by_id.get(d.entry_id)
                if entry is None or not entry.auto or d.entry_id in seen:
                    continue
                pf = entry.plan_fix(d.captures, arch)
                if pf is not None:
                    seen.add(d.entry_id)
                    out.append((d.entry_id, pf))
            return out
        entry = self.entry(which)
        if not entry.fixable:
            raise InputError(f"playbook entry {which!r} has no fix to apply"
                             + (f": {entry.not_fixable}" if entry.not_fixable else ""), field="--apply-fix")
        diag = next((d for d in ordered if d.entry_id == which), None)
        if diag is None and entry.fix is not None and entry.fix.placeholders():
            raise InputError(f"the fix of {which!r} takes values from the failing log line "
                             f"({', '.join(sorted(entry.fix.placeholders()))}); it was not diagnosed here",
                             field="--apply-fix")
        pf = entry.plan_fix(diag.captures if diag else None, arch)
        assert pf is not None
        return [(which, pf)]


def load_playbook(*, operator: bool = True, extra: Sequence[Path] = ()) -> Playbook:
    """The shipped playbook, then the operator's ``playbook.yaml`` (if present), then ``extra`` files."""
    files = [shipped_playbook_path()]
    user = operator_playbook_path()
    if operator and os.path.lexists(user):  # a FIFO, a folder or a broken link there is refused in one line
        files.append(user)
    files += list(extra)
    return Playbook(merge(parse_playbook_file(p) for p in files), [str(p) for p in files])
