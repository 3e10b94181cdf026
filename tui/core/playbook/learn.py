"""An operator's entry learned from one log line: the ``playbook add`` path, shared by the CLI and the console.

The line is generalised into a pattern (``store.entry_from_line``), given a priority above any entry that would
claim it now, appended to the operator's playbook, and checked: the reloaded playbook must recognise the line
with the new entry, or the add is refused in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tui.core.errors import InputError
from tui.core.playbook.book import load_playbook
from tui.core.playbook.generalize import MAX_MESSAGE_CHARS, cut_message, message_of
from tui.core.playbook.loader import shipped_playbook_path
from tui.core.playbook.model import Entry
from tui.core.playbook.store import append_entry, entry_from_line


@dataclass(frozen=True, slots=True)
class Learned:
    entry: Entry
    path: Path
    claimer: Entry | None  # the entry that claimed the line before (the new one outranks it)
    warnings: tuple[str, ...] = field(default=())


def learn_line(line: str, *, title: str, entry_id: str | None = None, explain: str | None = None,
               severity: str = "error", set_env: Sequence[tuple[str, str]] = (), unset_env: Sequence[str] = (),
               add_args: Sequence[str] = (), remove_args: Sequence[str] = (), not_fixable: str | None = None,
               auto: bool = False, origin: str = "", priority: int | None = None,
               pattern: str | None = None) -> Learned:
    """Add an entry recognising ``line`` to the operator's playbook (with ``pattern``, the operator's own, instead
    of the line generalised: it must find the line). Blocking (files): call from a thread."""
    book = load_playbook()
    claimer = book.claim(line)
    data = entry_from_line(line, title=title, entry_id=entry_id, explain=explain, severity=severity,
                           set_env=set_env, unset_env=unset_env, add_args=add_args, remove_args=remove_args,
                           not_fixable=not_fixable, auto=auto, origin=origin, pattern=pattern)
    if priority is None and claimer is not None and claimer.id != data["id"]:
        priority = min(100, claimer.priority + 1)
    if priority is not None:
        if not 0 <= priority <= 100:
            raise InputError(f"must be 0..100, got {priority}", field="--priority")
        data = {**{k: v for k, v in data.items() if k in ("id", "title", "severity")}, "priority": priority,
                **{k: v for k, v in data.items() if k not in ("id", "title", "severity")}}
    warnings = []
    msg = message_of(line)
    if len(msg) > MAX_MESSAGE_CHARS:
        warnings.append(f"the line is long ({len(line):,} characters read): the pattern is made from the start "
                        f"of its message ({len(cut_message(msg)):,} characters)")
    same = book.get(data["id"])
    if same is not None and same.source == str(shipped_playbook_path()):
        warnings.append(f"your entry {data['id']!r} replaces the shipped entry with that id")
    entry, target = append_entry(data)
    check = load_playbook().matcher().feed(line, 1)
    if not any(d.entry_id == entry.id for d in check):
        raise InputError(f"saved to {target}, but the reloaded playbook does not recognise the line with it "
                         "(another entry claims it first): give --priority", field="--priority")
    return Learned(entry=entry, path=target, claimer=claimer if claimer is not None and claimer.id != entry.id
                   else None, warnings=tuple(warnings))
