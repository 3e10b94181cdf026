"""What a playbook entry is: how it recognises a failure, what it says, and the fix it carries as data.

Entries come from YAML (``loader``), are compiled once (every regular expression with a cheap literal prefilter,
``literals``) and are matched by ``matcher``. A fix becomes the planner's :class:`PlanFix`, with ``{name}``
placeholders filled from the named groups of the line that matched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tui.core.plan.planner import PlanFix

SEVERITIES = ("error", "warning", "info")
SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
TOPOLOGY_KINDS = ("tp", "dp", "pd")
FAMILIES = ("dense", "moe")
ATTENTIONS = ("full", "hybrid")
ROLES = ("single", "prefill", "decode")
ARCHES = ("blackwell", "hopper", "ampere-or-older")  # GPU architectures a fix can single out
#: what a benchmark is doing when a line is logged: none runs, it sets up, it warms the servers up, it measures
BENCH_PHASES = ("none", "setup", "warmup", "run")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class RegexMatch(Protocol):
    """What the matcher reads of a match (``re.Match`` and ``linear.LinearMatch`` are ones)."""

    def groupdict(self) -> dict[str, str | Any]: ...


class Regex(Protocol):
    """A compiled pattern as the matcher uses it. The loader compiles every playbook pattern with
    ``linear.compile_linear`` (RE2: time linear in the line); ``re.Pattern`` is one too (tests, benchmarks)."""

    @property
    def pattern(self) -> str: ...

    @property
    def groupindex(self) -> Mapping[str, int]: ...

    def search(self, string: str, /) -> RegexMatch | None: ...


@dataclass(frozen=True, slots=True)
class Probe:
    """One compiled regular expression. ``literals``: one of them must occur in a line for it to match."""

    text: str
    regex: Regex
    literals: tuple[str, ...] = ()

    def search(self, line: str) -> RegexMatch | None:
        if self.literals and not any(lit in line for lit in self.literals):
            return None
        return self.regex.search(line)


@dataclass(frozen=True, slots=True)
class LineRule:
    """Fires on a line that one of ``patterns`` matches (after one of ``after`` appeared, within ``within`` lines)."""

    patterns: tuple[Probe, ...]
    after: tuple[Probe, ...] = ()
    within: int | None = None


@dataclass(frozen=True, slots=True)
class EndRule:
    """Judges a whole start that ended without readiness: how it ended, in which phase, what the log held."""

    stalled: bool | None = None  # True: given up while still running; False: the process exited; None: either
    phases: tuple[str, ...] = ()
    exit_codes: tuple[int, ...] = ()
    seen: tuple[Probe, ...] = ()
    not_seen: tuple[Probe, ...] = ()


@dataclass(frozen=True, slots=True)
class MatchContext:
    """What is known about the server a log comes from. ``None``: unknown (it excludes no entry)."""

    family: str | None = None  # dense | moe
    attention: str | None = None  # full | hybrid
    topology: str | None = None  # tp | dp | pd
    vllm_version: str | None = None
    gpu_arch: str | None = None  # blackwell | hopper | ... (the plan's GPUs): picks a fix's arch_add_args
    #: what a benchmark on this server was doing when the line was logged (BENCH_PHASES; None: not known)
    bench_phase: str | None = None

    @classmethod
    def for_launch(cls, profile: Any = None, topology: Any = None, vllm_version: str | None = None,
                   gpu_arch: str | None = None) -> MatchContext:
        """From a model profile (``family``, ``attention``) and a topology (its ``kind``) or topology name."""
        kind = None
        if topology is not None:
            kind = str(getattr(topology, "kind", "") or "")
            if not kind:
                from tui.core.topology import parse_topology

                kind = parse_topology(str(topology)).kind
        return cls(family=getattr(profile, "family", None), attention=getattr(profile, "attention", None),
                   topology=kind, vllm_version=vllm_version, gpu_arch=gpu_arch)


def version_tuple(text: str) -> tuple[int, ...]:
    """``0.24.0+cu130`` → (0, 24, 0); stops at the first part that is not a number."""
    out: list[int] = []
    for part in re.split(r"[.+-]", text.strip().lstrip("v")):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


_SPEC = re.compile(r"^(==|!=|>=|<=|>|<)?\s*(\d+(?:\.\d+)*)\Z")


def version_spec_ok(spec: str) -> bool:
    return _SPEC.match(spec.strip()) is not None


def version_matches(version: str, spec: str) -> bool:
    """``0.24`` (that series), or a comparison ``>=0.13``, ``<0.30``, ``==0.24.0``, ``!=0.23``."""
    m = _SPEC.match(spec.strip())
    if m is None:
        return False
    op, want_text = m.group(1), m.group(2)
    have = version_tuple(version)
    want = version_tuple(want_text)
    if op is None:
        return have[:len(want)] == want
    width = max(len(have), len(want))
    h = have + (0,) * (width - len(have))
    w = want + (0,) * (width - len(want))
    return {"==": h == w, "!=": h != w, ">=": h >= w, "<=": h <= w, ">": h > w, "<": h < w}[op]


@dataclass(frozen=True, slots=True)
class When:
    family: tuple[str, ...] = ()
    attention: tuple[str, ...] = ()
    topology: tuple[str, ...] = ()
    vllm: tuple[str, ...] = ()
    #: the benchmark phases the entry holds in (``[none, run]``: a line logged during a benchmark's warm-up says
    #: nothing of serving: the warm-up is there to take such compiles)
    bench: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.family or self.attention or self.topology or self.vllm or self.bench)

    def admits(self, ctx: MatchContext, *, strict: bool = False) -> bool:
        """Whether the conditions hold. A fact the context does not know excludes nothing, unless ``strict``
        (whole-log rules: they judge without a line of evidence, so their conditions must be known to hold)."""
        checks = ((self.family, ctx.family), (self.attention, ctx.attention), (self.topology, ctx.topology),
                  (self.bench, ctx.bench_phase))
        for wanted, have in checks:
            if wanted and (have not in wanted if have is not None else strict):
                return False
        if self.vllm:
            if ctx.vllm_version is None:
                return not strict
            return all(version_matches(ctx.vllm_version, s) for s in self.vllm)
        return True


def fill(template: str, captures: Mapping[str, str | None]) -> str:
    return PLACEHOLDER.sub(lambda m: captures.get(m.group(1)) or "", template)


@dataclass(frozen=True, slots=True)
class FixSpec:
    """A fix as the playbook file writes it; ``render`` makes the planner's PlanFix."""

    set_env: tuple[tuple[str, str], ...] = ()
    unset_env: tuple[str, ...] = ()
    add_args: tuple[str, ...] = ()
    remove_args: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    #: flags added only on GPUs of one architecture, e.g. Triton attention where FlashInfer attention would be
    #: chosen (Blackwell): on Hopper vLLM picks FlashAttention 3, and forcing Triton would skew a comparison
    arch_add_args: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.set_env or self.unset_env or self.add_args or self.remove_args or self.arch_add_args)

    def placeholders(self) -> set[str]:
        texts = [v for _, v in self.set_env] + list(self.unset_env) + list(self.add_args) + list(self.remove_args)
        texts += [v for _, items in self.arch_add_args for v in items]
        return {m.group(1) for t in texts for m in PLACEHOLDER.finditer(t)}

    def render(self, captures: Mapping[str, str | None] | None = None, arch: str | None = None) -> PlanFix:
        """The PlanFix; ``arch`` (the plan's GPU architecture) decides which ``arch_add_args`` apply."""
        c = captures or {}
        extra = [v for a, items in self.arch_add_args if a == arch for v in items]
        return PlanFix(
            set_env=tuple((k, fill(v, c)) for k, v in self.set_env),
            unset_env=tuple(fill(v, c) for v in self.unset_env),
            add_args=tuple(fill(v, c) for v in (*self.add_args, *extra)),
            remove_args=tuple(fill(v, c) for v in self.remove_args),
            roles=self.roles,
        )

    def arch_notes(self, arch: str | None) -> list[str]:
        """What the fix adds on other architectures than ``arch`` (for a description when arch is unknown)."""
        return [f"add {v} (on {a} only)" for a, items in self.arch_add_args if a != arch for v in items]

    def to_data(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.set_env:
            out["set_env"] = dict(self.set_env)
        if self.unset_env:
            out["unset_env"] = list(self.unset_env)
        if self.add_args:
            out["add_args"] = list(self.add_args)
        if self.remove_args:
            out["remove_args"] = list(self.remove_args)
        if self.roles:
            out["roles"] = list(self.roles)
        if self.arch_add_args:
            out["arch_add_args"] = {a: list(items) for a, items in self.arch_add_args}
        return out


@dataclass(frozen=True, slots=True)
class Entry:
    id: str
    title: str
    severity: str = "error"
    priority: int = 50
    generic: bool = False
    lines: LineRule | None = None
    end: EndRule | None = None
    when: When = field(default_factory=When)
    explain: str = ""
    fix: FixSpec | None = None
    not_fixable: str | None = None
    auto: bool = False
    references: tuple[str, ...] = ()
    disabled: bool = False
    source: str = ""  # the file it came from
    line: int = 0  # where its "- id:" item starts

    @property
    def fixable(self) -> bool:
        return self.fix is not None and not self.fix.empty

    def plan_fix(self, captures: Mapping[str, str | None] | None = None, arch: str | None = None
                 ) -> PlanFix | None:
        """The change this entry's fix makes to a launch plan on GPUs of ``arch``, or None when it has none."""
        if self.fix is None or self.fix.empty:
            return None
        return self.fix.render(captures, arch)

    def fix_text(self, captures: Mapping[str, str | None] | None = None, arch: str | None = None) -> str:
        """One line: the changes (``set X=1; add --flag v``) and/or what to do instead."""
        parts: list[str] = []
        pf = self.plan_fix(captures, arch)
        if pf is not None:
            described = pf.describe() + (self.fix.arch_notes(arch) if self.fix is not None else [])
            changes = "; ".join(described)
            if pf.roles:
                changes += f" (on {', '.join(pf.roles)} servers)"
            # not auto: `up --apply-fix auto` leaves it; the operator's own request (the console's `a`, `up
            # --apply-fix ENTRY`) applies it, so "not applied automatically" above "a apply the fix" read wrong
            parts.append(changes + ("" if self.auto else " (applied only when asked for)"))
        if self.not_fixable:
            parts.append(self.not_fixable)
        return " — ".join(parts) if parts else "no fix recorded"

    def to_data(self) -> dict[str, Any]:
        """The entry in the playbook file's format (what ``playbook show`` prints and ``playbook add`` writes)."""
        out: dict[str, Any] = {"id": self.id, "title": self.title, "severity": self.severity}
        if self.priority != 50:
            out["priority"] = self.priority
        if self.generic:
            out["generic"] = True
        match: dict[str, Any] = {}
        if self.lines is not None:
            match["lines"] = [p.text for p in self.lines.patterns]
            if self.lines.after:
                match["after"] = [p.text for p in self.lines.after]
            if self.lines.within is not None:
                match["within"] = self.lines.within
        if self.end is not None:
            end: dict[str, Any] = {}
            if self.end.stalled is not None:
                end["stalled"] = self.end.stalled
            if self.end.phases:
                end["phases"] = list(self.end.phases)
            if self.end.exit_codes:
                end["exit_codes"] = list(self.end.exit_codes)
            if self.end.seen:
                end["seen"] = [p.text for p in self.end.seen]
            if self.end.not_seen:
                end["not_seen"] = [p.text for p in self.end.not_seen]
            match["end"] = end
        if not self.when.empty:
            match["when"] = {k: list(getattr(self.when, k)) for k in ("family", "attention", "topology", "vllm")
                             if getattr(self.when, k)}
        out["match"] = match
        out["explain"] = self.explain
        if self.fix is not None and not self.fix.empty:
            out["fix"] = self.fix.to_data()
        if self.not_fixable:
            out["not_fixable"] = self.not_fixable
        out["auto"] = self.auto
        if self.references:
            out["references"] = list(self.references)
        return out
