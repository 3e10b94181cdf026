"""Changing the operator's playbook entry by entry: edit one (or make an edited copy of a shipped one), delete one,
switch a shipped one off and on again; and the list of every entry with where it comes from.

The operator's file is theirs: only the item changed is rewritten (its own comments go with it; every other line,
comment and the order stay), the file is checked by loading it back before it replaces the old one (atomically),
and a layout this cannot rewrite safely (a flow-style list, an item that does not start its own line) is refused
in one line that says to edit it by hand. ``store.append_entry`` adds a new entry.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core import paths, safeio, safewrite
from tui.core.errors import InputError
from tui.core.playbook.loader import (
    operator_playbook_path,
    parse_entry,
    parse_playbook_file,
    parse_playbook_text,
    shipped_playbook_path,
)
from tui.core.playbook.model import Entry
from tui.core.playbook.store import append_entry
from tui.core.yamlio import dump

_ITEM = re.compile(r"^( *)- ")
_ENTRIES_KEY = re.compile(r"^entries:[ \t]*((?:#.*)?)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Listed:
    """One entry as the playbook screen lists it."""

    entry: Entry  # the entry in effect; for one switched off, the shipped entry it switches off
    own: bool = False  # it comes from the operator's playbook
    replaces: bool = False  # an entry of the operator's with the id of a shipped one (it takes its place)
    disabled: bool = False  # a shipped entry the operator's playbook switches off


def _own(target: Path) -> list[Entry]:
    return parse_playbook_file(target) if os.path.lexists(target) else []


def listing(target: Path | None = None) -> list[Listed]:
    """Every entry of the shipped and the operator's playbooks as they merge, and the shipped ones switched off
    (after the rest). Blocking (files)."""
    target = target or operator_playbook_path()
    shipped = parse_playbook_file(shipped_playbook_path())
    own = _own(target)
    shipped_ids = {e.id: e for e in shipped}
    own_ids = {e.id: e for e in own}
    out: list[Listed] = []
    for e in shipped:
        mine = own_ids.get(e.id)
        if mine is None:
            out.append(Listed(e))
        elif not mine.disabled:
            out.append(Listed(mine, own=True, replaces=True))
    out += [Listed(e, own=True) for e in own if not e.disabled and e.id not in shipped_ids]
    out += [Listed(shipped_ids[e.id], disabled=True) for e in own if e.disabled and e.id in shipped_ids]
    return out


def save_entry(data: dict[str, Any], target: Path | None = None) -> tuple[Entry, Path]:
    """The entry ``data`` (playbook file data) in the operator's playbook: its item rewritten when the file has
    that id, else appended (a shipped entry's id: the operator's copy takes its place)."""
    target = target or operator_playbook_path()
    parse_entry(data, "the entry", "")  # validated before anything is touched
    own = _own(target)
    if not any(e.id == data["id"] for e in own):
        return append_entry(data, target)
    entries = _rewrite(target, data["id"], data)
    return next(e for e in entries if e.id == data["id"]), target


def delete_entry(entry_id: str, target: Path | None = None) -> Path:
    """The operator's entry ``entry_id`` removed from their playbook (a shipped entry it replaced is back)."""
    target = target or operator_playbook_path()
    if not any(e.id == entry_id for e in _own(target)):
        raise InputError(f"entry {entry_id!r} is not in your playbook (a shipped entry can be switched off)",
                         file=target)
    _rewrite(target, entry_id, None)
    return target


def disable_entry(entry_id: str, target: Path | None = None) -> Path:
    """Switch the shipped entry ``entry_id`` off (``- id: X`` with ``disabled: true`` in the operator's file)."""
    target = target or operator_playbook_path()
    if not any(e.id == entry_id for e in parse_playbook_file(shipped_playbook_path())):
        raise InputError(f"{entry_id!r} is no shipped entry: an entry of yours is deleted, not switched off",
                         file=target)
    if any(e.id == entry_id for e in _own(target)):
        raise InputError(f"your playbook has an entry {entry_id!r}: delete it first", file=target)
    append_entry({"id": entry_id, "disabled": True}, target)
    return target


def enable_entry(entry_id: str, target: Path | None = None) -> Path:
    """Switch the shipped entry ``entry_id`` on again (its ``disabled`` item removed from the operator's file)."""
    target = target or operator_playbook_path()
    if not any(e.id == entry_id and e.disabled for e in _own(target)):
        raise InputError(f"{entry_id!r} is not switched off in your playbook", file=target)
    _rewrite(target, entry_id, None)
    return target


def _item_span(lines: list[str], start: int) -> tuple[int, int, str]:
    """The lines [start, end) of the block list item starting at ``start``, and its indentation; trailing blank
    and comment lines belong to what follows."""
    m = _ITEM.match(lines[start]) if 0 <= start < len(lines) else None
    if m is None:
        raise ValueError("the item does not start its own line")
    indent = m.group(1)
    end = start + 1
    while end < len(lines):
        stripped = lines[end].strip()
        if stripped and not stripped.startswith("#") and len(lines[end]) - len(lines[end].lstrip(" ")) <= len(indent):
            break  # the next item, or a key of the file
        end += 1
    while end - 1 > start and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return start, end, indent


def _rewrite(target: Path, entry_id: str, data: dict[str, Any] | None) -> list[Entry]:
    """The operator's file with the item of ``entry_id`` replaced by ``data`` (None: removed), checked by
    loading it back, written atomically. Returns its entries."""
    old = safeio.read_text(target, "playbook")
    before = parse_playbook_text(old, target)
    entry = next(e for e in before if e.id == entry_id)
    lines = old.splitlines(keepends=True)
    try:
        start, end, indent = _item_span(lines, entry.line - 1)
    except ValueError:
        raise InputError(f"cannot rewrite entry {entry_id!r} safely (its item does not start a line of its own): "
                         "edit it by hand", file=target, line=entry.line) from None
    item = [] if data is None else [indent + ln + "\n" if ln else "\n" for ln in dump([data]).splitlines()]
    new = "".join(lines[:start] + item + lines[end:])
    want = [e.id for e in before if e.id != entry_id or data is not None]
    if not want:  # the last one gone: an empty list, not a null
        new = _ENTRIES_KEY.sub(lambda m: "entries: []" + (f" {m.group(1)}" if m.group(1) else ""), new, count=1)
    limit = safeio.LIMITS["playbook"]
    if len(new.encode("utf-8")) > limit:
        raise InputError(f"the file would be {len(new.encode('utf-8')):,} bytes, more than a playbook may hold "
                         f"({limit:,})", file=target)
    try:
        after = parse_playbook_text(new, target)
    except InputError:
        after = []
    if [e.id for e in after] != want:
        raise InputError(f"cannot rewrite entry {entry_id!r} safely in this file's layout: edit it by hand",
                         file=target, line=entry.line)
    try:  # whole or not at all, never through a link in the config folder
        safewrite.write_atomic(target, new, root=paths.root_for(target))
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", file=target) from None
    return after
