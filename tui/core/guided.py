"""A launch guided by the playbook: every server log line goes through the matcher, a failed start is explained,
and with ``apply_fix="auto"`` the fixes marked safe are applied to the plan and the layout relaunched.

``up``, campaigns and the console use this instead of bare :func:`tui.core.launch.lifecycle.bring_up`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import ClassVar

from tui.core.errors import RunFailed
from tui.core.events import Event, EventBus, Notice, event_from_dict
from tui.core.host.base import Host
from tui.core.launch import failures
from tui.core.launch.lifecycle import Launch, StartFailure, UpOptions
from tui.core.launch.state import LayoutRecord, StateStore
from tui.core.models import ModelProfile
from tui.core.plan.planner import LaunchPlan, apply_fix
from tui.core.playbook import Diagnosis, MatchContext, Matcher, Playbook

MAX_ATTEMPTS = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class FixApplied(Event):
    """A playbook fix changed the plan (before the launch, or before a relaunch)."""

    kind: ClassVar[str] = "fix_applied"
    entry_id: str
    changes: tuple[str, ...]
    attempt: int
    reason: str = ""  # "asked" (--apply-fix ID) or "auto" (diagnosed and safe)


class DiagnosedFailure(RunFailed):
    """A start failed; ``diagnoses`` says why where the playbook knows."""

    def __init__(self, cause: StartFailure, diagnoses: list[Diagnosis], plan: LaunchPlan) -> None:
        failures = [d for d in diagnoses if d.is_failure]
        self.cause = cause
        self.diagnoses = diagnoses
        self.plan = plan
        title = cause.title
        hint = cause.hint
        if failures:
            top = failures[0]
            title += f": known failure [{top.entry_id}] {top.title}"
            hint = f"fix: {top.fix}" + (f" (relaunch with --apply-fix {top.entry_id})" if top.fixable else "")
        else:
            title += ": no known failure matched"
        super().__init__(title, hint)


class GuidedLaunch:
    def __init__(self, profile: ModelProfile, plan: LaunchPlan, host: Host, bus: EventBus, book: Playbook, *,
                 options: UpOptions | None = None, apply: str | None = None, store: StateStore | None = None,
                 max_attempts: int = MAX_ATTEMPTS) -> None:
        self.profile = profile
        self.plan = plan
        self.host = host
        self.bus = bus
        self.book = book
        self.options = options or UpOptions()
        self.apply = apply
        self.store = store
        self.max_attempts = max_attempts
        self.diagnoses: list[Diagnosis] = []
        #: the playbook entries whose fixes this launch applied, in order (what the state file's request carries)
        self.applied: list[str] = []
        vllm = host.facts.vllm
        arches = {g.arch for i in plan.gpus if (g := host.facts.gpu(i)) is not None}
        self.arch = arches.pop() if len(arches) == 1 else None
        self.context = MatchContext.for_launch(profile, plan.topo, vllm.version if vllm else None, self.arch)

    def _apply(self, entry_id: str, plan: LaunchPlan, fix_plan: LaunchPlan, attempt: int, reason: str) -> None:
        changes = tuple(w.change for w in fix_plan.workarounds[len(plan.workarounds):])
        self.bus.publish(FixApplied(entry_id=entry_id, changes=changes, attempt=attempt, reason=reason))

    @property
    def asked(self) -> list[str]:
        """The entries ``--apply-fix`` names (``A,B``; none for ``auto``)."""
        if not self.apply or self.apply == "auto":
            return []
        return [i for i in self.apply.split(",") if i]

    def _previous_diagnoses(self) -> list[Diagnosis]:
        """What the playbook found when this profile last failed with each entry asked for (fills a fix's values
        from its line): the state file's failed layout, the history of failures, or the findings a running
        layout's fix came from (a restart applies the same fix)."""
        store = self.store or StateStore()
        out: list[Diagnosis] = []
        for entry_id in self.asked:
            for d in failures.fix_diagnoses(store, entry_id, self.profile.id):
                try:
                    ev = event_from_dict(d)
                except (ValueError, TypeError, KeyError):
                    continue
                if isinstance(ev, Diagnosis) and ev not in out:
                    out.append(ev)
        return out

    def asked_fixes(self, previous: list[Diagnosis] | None = None) -> LaunchPlan:
        """The plan with ``--apply-fix ID[,ID]`` applied (before anything runs). ``previous``: the last failed
        start's diagnoses, already read (``run`` reads them off the event loop); read here when not given."""
        plan = self.plan
        if self.asked:
            if previous is None:
                previous = self._previous_diagnoses()
            for which in self.asked:
                for entry_id, fix in self.book.fixes(previous, which, self.arch):
                    fixed = apply_fix(plan, fix, entry_id)
                    self._apply(entry_id, plan, fixed, 0, "asked")
                    plan = fixed
                    self.applied.append(entry_id)
        return plan

    def _basis(self, diagnoses: list[Diagnosis]) -> tuple[dict[str, object], ...]:
        """The findings of the fixes applied so far (what their values came from), as the state file keeps them."""
        return tuple(d.to_dict() for d in diagnoses if d.entry_id in self.applied)

    async def run(self) -> tuple[LayoutRecord, LaunchPlan]:
        # the state file is read under its lock: off the event loop (the fixes are applied on it: they publish)
        previous = await asyncio.to_thread(self._previous_diagnoses) if self.asked else []
        self.applied = []
        plan = self.asked_fixes(previous)
        applied = set(plan.fixes_applied)
        basis = list(previous)
        for attempt in range(1, self.max_attempts + 1):
            matchers: dict[str, Matcher] = {s.name: self.book.matcher(s.name, self.context) for s in plan.servers}

            def hook(name: str, lineno: int, text: str, matchers: dict[str, Matcher] = matchers) -> None:
                m = matchers.get(name)
                if m is not None:
                    for d in m.feed(text, lineno):
                        self.bus.publish_threadsafe(d)

            # the state file records the request with the fixes this attempt carries, and what their values came from
            opts = replace(self.options, line_hooks=(*self.options.line_hooks, hook), fixes=tuple(self.applied),
                           fix_basis=self._basis(basis))
            launch = Launch(self.host, plan, self.profile, self.bus, opts, self.store)
            try:
                record = await launch.run()
            except StartFailure as exc:
                matcher = matchers.get(exc.server)
                if matcher is not None:
                    for d in matcher.finish(exit_code=exc.returncode, ready=False,
                                            stalled_phase=exc.phase if exc.stalled else None):
                        self.bus.publish(d)
                    self.diagnoses = matcher.diagnoses
                await asyncio.to_thread(launch.store.update, launch.layout_id,
                                        diagnoses=[d.to_dict() for d in self.diagnoses])
                failed_now = [d for d in self.diagnoses if d.is_failure]
                fixes = [(e, f) for e, f in self.book.fixes(failed_now, "auto", self.arch) if e not in applied] \
                    if self.apply == "auto" else []
                if not fixes or attempt == self.max_attempts:
                    raise DiagnosedFailure(exc, self.diagnoses, plan) from None
                for entry_id, fix in fixes:
                    fixed = apply_fix(plan, fix, entry_id)
                    self._apply(entry_id, plan, fixed, attempt, "auto")
                    plan = fixed
                    applied.add(entry_id)
                    self.applied.append(entry_id)
                basis += failed_now
                self.bus.publish(Notice(level="info", source="up",
                                        message=f"relaunching with {', '.join(e for e, _ in fixes)} applied "
                                                f"(attempt {attempt + 1} of {self.max_attempts})"))
                continue
            self.diagnoses = [d for m in matchers.values() for d in m.diagnoses]
            return record, plan
        raise AssertionError("unreachable: the loop returns or raises")
