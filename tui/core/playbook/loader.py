"""Reading playbook files strictly: the shipped one, then the operator's, which adds entries or replaces by id.

The format is documented at the top of ``profiles/playbook.yaml``. Every mistake is one :class:`InputError` naming
``file:line: field``: unknown keys, wrong types, a regular expression that does not compile (with ``re``'s own
message) or that the linear-time engine cannot take (``linear``: a lookaround, a backreference), a
``{placeholder}`` in a fix that no pattern captures, ``auto: true`` without a fix.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tui.core import paths, safeio
from tui.core.errors import InputError
from tui.core.launch.phases import PHASE_INDEX
from tui.core.playbook.linear import Unsupported, compile_linear
from tui.core.playbook.literals import required_literals
from tui.core.playbook.model import (
    ARCHES,
    ATTENTIONS,
    BENCH_PHASES,
    FAMILIES,
    ROLES,
    SEVERITIES,
    TOPOLOGY_KINDS,
    EndRule,
    Entry,
    FixSpec,
    LineRule,
    Probe,
    When,
    version_spec_ok,
)
from tui.core.playbook.redos import explosive
from tui.core.safeio import shown
from tui.core.yamlio import Fields, LList, load_text

FORMAT_VERSION = 1
PLAYBOOK_FILE = "playbook.yaml"
#: bounds that keep the matcher's cost per log line (and a load) what the shipped playbook costs: its longest
#: pattern has 264 characters, its largest list 5 patterns, and it has 40 entries
MAX_PATTERN_CHARS = 1000
MAX_PATTERNS = 32  # in one list (lines, after, seen, not_seen)
MAX_ENTRIES = 500  # in one file
MAX_FILE_PATTERNS = 1000  # in one file, every list of every entry
MAX_FILE_PATTERN_CHARS = 100_000  # in one file: what compiling and indexing them costs (the shipped one: ~5,000)
#: a line of a playbook file: longer than any value it may hold, so a longer one is refused before YAML reads it
MAX_LINE_CHARS = 32_768
MAX_ID = 96
_ID = re.compile(rf"^[a-z0-9][a-z0-9._-]{{0,{MAX_ID - 1}}}\Z")


def is_entry_id(text: str) -> bool:
    """``text`` is what an entry's id may be (lowercase letters, digits, '.', '-', '_'; at most MAX_ID)."""
    return bool(_ID.match(text))
_ENV_NAME = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})\Z")
_END_PHASES = tuple(k for k in PHASE_INDEX if k != "ready")


def shipped_playbook_path() -> Path:
    return paths.shipped_profiles_dir() / PLAYBOOK_FILE


def operator_playbook_path() -> Path:
    return paths.config_dir() / PLAYBOOK_FILE


def compile_probe(text: str, f: Fields, key: str, index: int | None = None, line: int | None = None) -> Probe:
    """A pattern compiled for matching by RE2 (``linear``: time linear in the line, whoever wrote the pattern), read
    alike by ``re`` (its messages name the position of a mistake, and its parser finds the literals)."""
    where = f"{f.name(key)}[{index + 1}]" if index is not None else f.name(key)
    at = line or f.line_of(key)
    if len(text) > MAX_PATTERN_CHARS:
        raise InputError(f"a pattern is at most {MAX_PATTERN_CHARS:,} characters; this one has {len(text):,} "
                         f"({shown(text, 60)}): keep the part that states the error", file=f.source,
                         line=at, field=where)
    try:
        regex = compile_linear(text)
    except re.error as exc:
        raise InputError(f"bad regular expression {shown(repr(text), 120)}: {exc}", file=f.source,
                         line=at, field=where) from None
    except Unsupported as exc:
        raise InputError(f"{shown(repr(text), 120)}: {exc}", file=f.source, line=at, field=where) from None
    if explosive(text):
        raise InputError(f"{shown(repr(text), 120)} repeats a repeat whose rounds can meet anywhere (like (a+)+), "
                         "which costs a backtracking engine minutes on one log line; repeat it once, or start each "
                         "round with what no round ends with", file=f.source, line=at, field=where)
    if regex.search("") is not None:
        raise InputError(f"{shown(repr(text), 120)} matches an empty line, so it would match every line; make it "
                         "say what to look for", file=f.source, line=at, field=where)
    return Probe(text=text, regex=regex, literals=required_literals(text))


def _regex_list(f: Fields, key: str, *, required: bool = False) -> tuple[Probe, ...]:
    raw = f.data.get(key)
    items = f.str_list(key)
    if required and not items:
        raise f.error(key, "needs at least one regular expression")
    if len(items) > MAX_PATTERNS:
        raise f.error(key, f"at most {MAX_PATTERNS} regular expressions in one list; got {len(items):,}")
    out = []
    for i, text in enumerate(items):
        line = raw.line_of(i) if isinstance(raw, LList) else None
        out.append(compile_probe(text, f, key, i, line))
    return tuple(out)


def _choices(f: Fields, key: str, allowed: Sequence[str]) -> tuple[str, ...]:
    value = f.data.get(key)
    items = [value] if isinstance(value, str) else f.str_list(key)
    f.get(key, (str, list))
    for item in items:
        if item not in allowed:
            raise f.error(key, f"{item!r} is not one of {', '.join(allowed)}")
    return tuple(items)


def _parse_when(f: Fields) -> When:
    versions = f.data.get("vllm")
    vllm = (versions,) if isinstance(versions, str) else tuple(f.str_list("vllm"))
    f.get("vllm", (str, list))
    for spec in vllm:
        if not version_spec_ok(spec):
            raise f.error("vllm", f"bad version spec {spec!r} (write 0.24, >=0.13, <0.30, ==0.24.0 or !=0.23)")
    when = When(family=_choices(f, "family", FAMILIES), attention=_choices(f, "attention", ATTENTIONS),
                topology=_choices(f, "topology", TOPOLOGY_KINDS), vllm=vllm,
                bench=_choices(f, "bench", BENCH_PHASES))
    f.done()
    return when


def _parse_end(f: Fields) -> EndRule:
    stalled = f.get("stalled", bool, None)
    phases = _choices(f, "phases", _END_PHASES)
    codes_raw = f.get("exit_codes", list, [])
    codes: list[int] = []
    for i, c in enumerate(codes_raw):
        if isinstance(c, bool) or not isinstance(c, int):
            line = codes_raw.line_of(i) if isinstance(codes_raw, LList) else f.line_of("exit_codes")
            raise InputError(f"item {i + 1} must be an integer exit status; got {c!r}", file=f.source, line=line,
                             field=f.name("exit_codes"))
        codes.append(c)
    if stalled is True and codes:
        raise f.error("exit_codes", "a stalled start has no exit status; drop stalled: true or exit_codes")
    rule = EndRule(stalled=stalled, phases=phases, exit_codes=tuple(codes), seen=_regex_list(f, "seen"),
                   not_seen=_regex_list(f, "not_seen"))
    f.done()
    return rule


def _split(f: Fields, key: str, item: str) -> list[str]:
    try:
        return shlex.split(item)
    except ValueError as exc:
        raise f.error(key, f"cannot split {item!r}: {exc}") from None


def _parse_fix(f: Fields) -> FixSpec:
    set_env = f.str_map("set_env")
    unset_env = f.str_list("unset_env")
    for name in [*set_env, *unset_env]:
        if not _ENV_NAME.match(name):
            raise f.error("set_env" if name in set_env else "unset_env", f"bad environment variable name {name!r}")
        if name == "VLLM_ATTENTION_BACKEND" and name in set_env:
            raise f.error("set_env", "VLLM_ATTENTION_BACKEND is not read by vLLM 0.24 (it only warns); add "
                                     "'--attention-backend NAME' to add_args instead")
    add_args = f.str_list("add_args")
    remove_args = f.str_list("remove_args")
    for key, items in (("add_args", add_args), ("remove_args", remove_args)):
        for item in items:
            parts = _split(f, key, item)
            if not parts or not parts[0].startswith(("-", "{")):
                raise f.error(key, f"each item is one flag (with its value for add_args), like '--flag value'; "
                                   f"got {item!r}")
            if key == "remove_args" and len(parts) != 1:
                raise f.error(key, f"name only the flag to remove (its value goes with it); got {item!r}")
    roles = _choices(f, "roles", ROLES)
    arch_args: list[tuple[str, tuple[str, ...]]] = []
    per_arch = f.sub("arch_add_args")
    if per_arch is not None:
        for arch in list(per_arch.data):
            if arch not in ARCHES:
                raise per_arch.error(arch, f"GPU architecture must be one of {', '.join(ARCHES)}")
            items = per_arch.str_list(arch)
            for item in items:
                parts = _split(per_arch, arch, item)
                if not parts or not parts[0].startswith("-"):
                    raise per_arch.error(arch, f"each item is one flag with its value, like '--flag value'; "
                                               f"got {item!r}")
            arch_args.append((arch, tuple(items)))
        per_arch.done()
    fix = FixSpec(set_env=tuple(set_env.items()), unset_env=tuple(unset_env), add_args=tuple(add_args),
                  remove_args=tuple(remove_args), roles=roles, arch_add_args=tuple(arch_args))
    f.done()
    return fix


def parse_entry(data: Any, source: str | Path, prefix: str) -> Entry:
    f = Fields(data, source, prefix)
    eid = f.require("id", str)
    if len(eid) > MAX_ID:
        raise f.error("id", f"at most {MAX_ID} characters; got {len(eid):,}")
    if not _ID.match(eid):
        raise f.error("id", f"must be lowercase letters, digits, '.', '-' or '_'; got {shown(repr(eid), 60)}")
    if f.get("disabled", bool, False):
        f.done()
        return Entry(id=eid, title=eid, disabled=True, source=str(source), line=f.line or 0)
    title = f.require("title", str).strip()
    severity = f.choice("severity", SEVERITIES, "error")
    priority = f.integer("priority", 50, lo=0, hi=100)
    generic = f.get("generic", bool, False)
    m = f.sub("match", required=True)
    assert m is not None
    lines: LineRule | None = None
    if m.has("lines"):
        patterns = _regex_list(m, "lines", required=True)
        after = _regex_list(m, "after")
        within = m.integer("within", None, lo=1)
        if within is not None and not after:
            raise m.error("within", "within counts lines since one of 'after'; give after too")
        lines = LineRule(patterns=patterns, after=after, within=within)
    elif m.has("after") or m.has("within"):
        raise m.error("after" if m.has("after") else "within", "after/within qualify lines; give lines too")
    end_f = m.sub("end")
    end = _parse_end(end_f) if end_f is not None else None
    when_f = m.sub("when")
    when = _parse_when(when_f) if when_f is not None else When()
    m.done()
    if lines is None and end is None:
        raise InputError("match needs lines (patterns over log lines) or end (a whole-log rule)", file=source,
                         line=f.line_of("match"), field=f.name("match"))
    explain = " ".join(f.require("explain", str).split())
    fix_f = f.sub("fix")
    fix = _parse_fix(fix_f) if fix_f is not None else None
    if fix is not None and fix.empty:
        raise f.error("fix", "a fix needs set_env, unset_env, add_args, arch_add_args or remove_args")
    not_fixable = f.get("not_fixable", str, None)
    auto = f.get("auto", bool, False)
    references = tuple(f.str_list("references"))
    f.done()
    if fix is not None:
        names = fix.placeholders()
        if names:
            if lines is None or end is not None:
                raise f.error("fix", f"{{{sorted(names)[0]}}} takes a value from the matched line, which a whole-log "
                                     "rule (match.end) does not have; drop the placeholder or the end rule")
            for p in lines.patterns:
                missing = names - set(p.regex.groupindex)
                if missing:
                    raise f.error("fix", f"{{{sorted(missing)[0]}}} is not a named group (?P<{sorted(missing)[0]}>"
                                         f"...) of pattern {p.text!r}")
    if auto and (fix is None or fix.empty):
        raise f.error("auto", "auto: true needs a fix to apply")
    return Entry(
        id=eid, title=title, severity=severity, priority=priority, generic=bool(generic), lines=lines, end=end,
        when=when, explain=explain, fix=fix, not_fixable=" ".join(not_fixable.split()) if not_fixable else None,
        auto=bool(auto), references=references, source=str(source), line=f.line or 0,
    )


def parse_playbook(data: Any, source: str | Path) -> list[Entry]:
    """Every entry of one playbook file, in file order."""
    if data is None:
        return []
    top = Fields(data, source)
    version = top.integer("version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise top.error("version", f"this disagg-tui reads playbook format {FORMAT_VERSION}; got {version}")
    raw = top.get("entries", list, [])
    top.done()
    if len(raw) > MAX_ENTRIES:
        raise top.error("entries", f"at most {MAX_ENTRIES} entries in one file; got {len(raw):,}")
    seen: dict[str, int] = {}
    out: list[Entry] = []
    patterns = pattern_chars = 0
    for i, item in enumerate(raw):
        line = raw.line_of(i) if isinstance(raw, LList) else None
        if not isinstance(item, dict):
            raise InputError(f"each entry is a mapping; got {shown(repr(item), 80)}", file=source, line=line,
                             field=f"entries[{i + 1}]")
        entry = parse_entry(item, source, f"entries[{i + 1}].")
        count, chars = _pattern_size(entry)
        patterns += count
        pattern_chars += chars
        if patterns > MAX_FILE_PATTERNS or pattern_chars > MAX_FILE_PATTERN_CHARS:
            raise InputError(f"more than {MAX_FILE_PATTERNS:,} regular expressions or {MAX_FILE_PATTERN_CHARS:,} "
                             "characters of them in one file (each costs every log line a search)", file=source,
                             line=entry.line or line, field=f"entries[{i + 1}]")
        if entry.id in seen:
            raise InputError(f"id {entry.id!r} is used twice in this file (first at line {seen[entry.id]})",
                             file=source, line=entry.line or line, field=f"entries[{i + 1}].id")
        seen[entry.id] = entry.line
        out.append(entry)
    return out


def _pattern_size(entry: Entry) -> tuple[int, int]:
    """(regular expressions, their characters) of one entry."""
    probes = [*(entry.lines.patterns + entry.lines.after if entry.lines else ()),
              *(entry.end.seen + entry.end.not_seen if entry.end else ())]
    return len(probes), sum(len(p.text) for p in probes)


def check_line_lengths(text: str, source: str | Path) -> None:
    """InputError naming the first line longer than :data:`MAX_LINE_CHARS` (YAML would take seconds to read a
    4 MB line before any field could be refused)."""
    if len(text) <= MAX_LINE_CHARS:
        return
    start = 0
    number = 1
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end == -1 else end
        if end - start > MAX_LINE_CHARS:
            raise InputError(f"the line has {end - start:,} characters; a playbook line has at most "
                             f"{MAX_LINE_CHARS:,} (a pattern at most {MAX_PATTERN_CHARS:,})", file=source,
                             line=number)
        start = end + 1
        number += 1


def parse_playbook_text(text: str, source: str | Path) -> list[Entry]:
    check_line_lengths(text, source)
    return parse_playbook(load_text(text, source), source)


def parse_playbook_file(path: Path) -> list[Entry]:
    """A playbook file: a regular file within the playbook size limit, no line longer than MAX_LINE_CHARS."""
    data = safeio.read_bytes(path, "playbook")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read: not UTF-8 text (byte {exc.start})", file=path,
                         line=data.count(b"\n", 0, exc.start) + 1) from None
    return parse_playbook_text(text, path)


def merge(layers: Iterable[list[Entry]]) -> list[Entry]:
    """Later layers add entries or replace one with the same id; a ``disabled`` entry removes it."""
    by_id: dict[str, Entry] = {}
    for layer in layers:
        for e in layer:
            if e.disabled:
                by_id.pop(e.id, None)
            else:
                by_id.pop(e.id, None)  # a replacement goes to its layer's position
                by_id[e.id] = e
    return list(by_id.values())

