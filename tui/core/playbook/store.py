"""Adding an entry to the operator's playbook file: built from a log line, validated, appended without
rewriting what the operator wrote (comments and order stay), written atomically."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tui.core import paths, safeio, safewrite
from tui.core.errors import InputError
from tui.core.playbook.generalize import check_pattern, pattern_for
from tui.core.playbook.loader import (
    FORMAT_VERSION,
    operator_playbook_path,
    parse_entry,
    parse_playbook_text,
    shipped_playbook_path,
)
from tui.core.playbook.model import Entry
from tui.core.yamlio import dump

_SLUG = re.compile(r"[^a-z0-9]+")
#: ``entries: []`` on a line of its own (an empty flow list), with what stands around it
_EMPTY_ENTRIES = re.compile(r"^entries:[ \t]*\[[ \t]*\]([ \t]*(?:#.*)?)$", re.MULTILINE)
#: the top-level ``entries:`` key of a block list (a comment may follow it)
_ENTRIES_KEY = re.compile(r"^entries:[ \t]*(?:#.*)?$", re.MULTILINE)
MAX_ID = 48


def slug(title: str) -> str:
    """An entry id from a title: ``Port 9000 held by nginx`` → ``port-9000-held-by-nginx``."""
    text = _SLUG.sub("-", title.lower()).strip("-")
    if len(text) > MAX_ID:
        text = text[:MAX_ID].rsplit("-", 1)[0] or text[:MAX_ID]
    if not text:
        raise InputError("the title gives no usable id; give --id", field="--title")
    return text


def header() -> str:
    return (
        "# Your additions to disagg-tui's troubleshooting playbook. An entry here adds to the shipped playbook, or\n"
        "# replaces the shipped entry with the same id ('- id: X' with 'disabled: true' switches one off).\n"
        f"# The format is documented at the top of the shipped file: {shipped_playbook_path()}\n"
        "# 'disagg-tui playbook add' appends here; edit freely (the file is checked strictly on every load).\n"
    )


def entry_from_line(
    line: str,
    *,
    title: str,
    entry_id: str | None = None,
    explain: str | None = None,
    severity: str = "error",
    set_env: Sequence[tuple[str, str]] = (),
    unset_env: Sequence[str] = (),
    add_args: Sequence[str] = (),
    remove_args: Sequence[str] = (),
    not_fixable: str | None = None,
    auto: bool = False,
    origin: str = "",
    pattern: str | None = None,
) -> dict[str, Any]:
    """A new entry (as file data) that recognises ``line`` with its numbers, paths, pids and prefixes generalised
    (or with ``pattern``, the operator's own: it must find the line).

    Raises InputError when the line leaves too little fixed text, or the entry would not validate.
    """
    pattern = check_pattern(pattern, line) if pattern is not None else pattern_for(line)
    data: dict[str, Any] = {
        "id": entry_id or slug(title),
        "title": title.strip(),
        "severity": severity,
        "match": {"lines": [pattern]},
        "explain": (explain or f"Recognised from {origin or 'a log line'} (added with disagg-tui playbook add)."
                    ).strip(),
    }
    fix: dict[str, Any] = {}
    if set_env:
        fix["set_env"] = dict(set_env)
    if unset_env:
        fix["unset_env"] = list(unset_env)
    if add_args:
        fix["add_args"] = list(add_args)
    if remove_args:
        fix["remove_args"] = list(remove_args)
    if fix:
        data["fix"] = fix
    if not_fixable:
        data["not_fixable"] = not_fixable.strip()
    data["auto"] = bool(auto)
    if origin:
        data["references"] = [origin]
    parse_entry(data, "new entry", "")  # validates (bad env names, flags, auto without a fix ...)
    return data


def _item_indent(text: str) -> str:
    """The indentation of the existing entries' list items (two spaces when there are none)."""
    after = text.split("\nentries:", 1)[-1] if "\nentries:" in text or text.startswith("entries:") else ""
    m = re.search(r"^( *)- ", after, re.MULTILINE)
    return m.group(1) if m else "  "


def append_entry(data: dict[str, Any], path: Path | None = None) -> tuple[Entry, Path]:
    """Append one entry to the operator's playbook (created with a header when missing); returns it as loaded.

    Refuses (InputError) when the id is already in that file, or when the file's layout does not allow a safe
    append (then it says so and shows the entry to paste by hand): the operator's text is never rewritten.
    """
    target = path or operator_playbook_path()
    old = ""
    if os.path.lexists(target):  # a FIFO, a folder or a broken link there is refused in one line
        old = safeio.read_text(target, "playbook")
    existing = parse_playbook_text(old, target) if old.strip() else []
    if not existing and _EMPTY_ENTRIES.search(old):  # ``entries: []``: the list the new item goes into
        old = _EMPTY_ENTRIES.sub(r"entries:\1", old, count=1)
    if any(e.id == data["id"] for e in existing):
        raise InputError(f"entry {data['id']!r} is already in this file; pick another --id or edit it there",
                         file=target)
    indent = _item_indent(old)
    item = "".join(indent + ln + "\n" if ln else "\n" for ln in dump([data]).splitlines())
    if not old.strip():
        new = header() + f"version: {FORMAT_VERSION}\nentries:\n" + item
    else:
        base = old if old.endswith("\n") else old + "\n"
        has_entries = _ENTRIES_KEY.search(old) is not None
        new = base + ("" if has_entries else "entries:\n") + item
    limit = safeio.LIMITS["playbook"]
    if len(new.encode("utf-8")) > limit:
        raise InputError(f"adding the entry would make the file {len(new.encode('utf-8')):,} bytes, more than a "
                         f"playbook may hold ({limit:,})", file=target)
    try:
        entries = parse_playbook_text(new, target)
    except InputError:
        entries = []
    if [e.id for e in entries] != [*(e.id for e in existing), data["id"]]:
        flow = yaml.safe_dump(data, default_flow_style=True, width=2**31, sort_keys=False).strip()
        raise InputError("cannot append safely to this file (its 'entries:' list is not the last block of the "
                         f"file); add this item to entries by hand: - {flow}", file=target)
    try:  # whole or not at all, never through a link in the config folder
        safewrite.write_atomic(target, new, root=paths.root_for(target))
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", file=target) from None
    return entries[-1], target
