"""Changing the operator's playbook entry by entry (issue 22, finding 22): edit one in place, an edited copy of a
shipped one, delete one, switch a shipped one off and on, a listing that says where each comes from; the rest of
the operator's file (comments, order) stays as they wrote it. And an operator's own pattern for a learned line
(finding 18): checked against the line."""

from __future__ import annotations

import pytest

from tui.core.errors import InputError
from tui.core.playbook import load_playbook
from tui.core.playbook.edit import delete_entry, disable_entry, enable_entry, listing, save_entry
from tui.core.playbook.generalize import check_pattern
from tui.core.playbook.learn import learn_line
from tui.core.playbook.loader import operator_playbook_path

MINE = """\
# my entries: keep this comment
version: 1
entries:
  # the frobnicator
  - id: frob-hot
    title: the frobnicator overheated
    severity: error
    match:
      lines: ['frobnicator \\d+ overheated']
    explain: It does that.
    auto: false

  # the widget, below
  - id: widget-gone
    title: the widget is gone
    severity: warning
    match:
      lines: ['widget went away']
    explain: Look for it.
"""


def _write(text: str = MINE) -> None:
    path = operator_playbook_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_editing_an_entry_rewrites_only_its_item() -> None:
    _write()
    book = load_playbook()
    data = book.entry("frob-hot").to_data()
    data["title"] = "the frobnicator runs hot"
    data["fix"] = {"set_env": {"FROB_COOLING": "1"}}
    entry, path = save_entry(data)
    assert entry.title == "the frobnicator runs hot" and entry.fixable
    text = path.read_text()
    head = "# my entries: keep this comment\nversion: 1\nentries:\n  # the frobnicator\n  - id: frob-hot"
    assert text.startswith(head)
    assert "  # the widget, below\n  - id: widget-gone" in text and text.endswith("explain: Look for it.\n")
    assert [e.id for e in load_playbook().entries if e.source == str(path)] == ["frob-hot", "widget-gone"]
    assert load_playbook().entry("frob-hot").fix_text() == "set FROB_COOLING=1 (applied only when asked for)"


def test_an_edited_shipped_entry_is_the_operators_copy_that_takes_its_place() -> None:
    shipped = load_playbook().entry("port-in-use")
    data = shipped.to_data()
    data["title"] = "my words for a taken port"
    save_entry(data)
    rows = {r.entry.id: r for r in listing()}
    assert rows["port-in-use"].own and rows["port-in-use"].replaces
    assert rows["port-in-use"].entry.title == "my words for a taken port"
    assert not rows["flashinfer-no-nvcc"].own
    delete_entry("port-in-use")  # the shipped one is back
    rows = {r.entry.id: r for r in listing()}
    assert not rows["port-in-use"].own and rows["port-in-use"].entry.title == shipped.title


def test_deleting_an_entry_keeps_the_rest_and_the_last_one_leaves_an_empty_list() -> None:
    _write()
    delete_entry("frob-hot")
    text = operator_playbook_path().read_text()
    assert "frob-hot" not in text and "# my entries: keep this comment" in text and "widget-gone" in text
    delete_entry("widget-gone")
    assert [r for r in listing() if r.own] == []
    assert "entries: []" in operator_playbook_path().read_text()
    with pytest.raises(InputError, match="not in your playbook"):
        delete_entry("flashinfer-no-nvcc")


def test_a_shipped_entry_is_switched_off_and_on() -> None:
    disable_entry("triton-jit-during-inference")
    assert load_playbook().get("triton-jit-during-inference") is None
    row = next(r for r in listing() if r.entry.id == "triton-jit-during-inference")
    assert row.disabled and not row.own and row.entry.title  # listed (to switch on again), with its title
    enable_entry("triton-jit-during-inference")
    assert load_playbook().get("triton-jit-during-inference") is not None
    assert not any(r.disabled for r in listing())
    _write()
    with pytest.raises(InputError, match="no shipped entry"):
        disable_entry("frob-hot")


def test_a_flow_style_file_is_refused_in_one_line() -> None:
    _write("version: 1\nentries: [{id: frob-hot, title: t, match: {lines: ['frobnicator overheated']}, "
           "explain: e}]\n")
    data = load_playbook().entry("frob-hot").to_data()
    with pytest.raises(InputError, match="edit it by hand"):
        save_entry(data)


LINE = ("(EngineCore pid=9) ERROR 12-01 10:00:00 [core.py:1] RuntimeError: the frobnicator 42 overheated at "
        "/opt/frob/bin/frobd")


def test_an_operators_own_pattern_is_checked_against_the_line() -> None:
    assert check_pattern(r" frobnicator \d+ overheated ", LINE) == r"frobnicator \d+ overheated"
    with pytest.raises(InputError, match="does not find the line"):
        check_pattern("frobnicator overheated", LINE)
    with pytest.raises(InputError, match="too little fixed text"):
        check_pattern(r"\d+", LINE)
    with pytest.raises(InputError, match="not a regular expression"):
        check_pattern("frobnicator (", LINE)
    learned = learn_line(LINE, title="frobnicator hot", pattern=r"frobnicator \d+ overheated",
                         set_env=[("FROB_COOLING", "1")], add_args=["--frob-limit 40"], origin="the console")
    entry = load_playbook().entry(learned.entry.id)
    assert [p.text for p in entry.lines.patterns] == [r"frobnicator \d+ overheated"]  # type: ignore[union-attr]
    assert entry.fix_text() == "set FROB_COOLING=1; add --frob-limit 40 (applied only when asked for)"
