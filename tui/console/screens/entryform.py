"""The playbook entry dialog: a new entry learned from a log line the operator picks, or an entry edited.

Adding (``A`` on the dashboard): the candidate lines of the log shown (the console's own polls never among them),
the one a playbook entry marked as the root cause first picked, else the last error that is not a generic
consequence ("Engine core initialization failed. See root cause above."); the pattern generalised from the
picked line is shown and may be edited (checked as it is typed: it must find the line, keep enough fixed text,
and not take exponential time); a fix as data (variables to set, flags to add) or what to do instead. Saved
through ``learn_line`` (the ``playbook add`` path). Editing (ctrl+e on the playbook screen): the same fields from
the entry, saved through ``playbook.edit.save_entry`` (a shipped entry: the operator's copy takes its place).
Either way the playbook is read back and handed to the app (``PlaybookChanged``).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option

from tui.console import loglines
from tui.console.messages import PlaybookChanged
from tui.console.screens.base import ConsoleModal
from tui.core.errors import AppError, printable
from tui.core.playbook import Entry, Playbook, load_playbook
from tui.core.playbook.edit import save_entry
from tui.core.playbook.generalize import check_pattern, pattern_for
from tui.core.playbook.learn import learn_line

#: candidate lines offered (the newest of them)
MAX_CANDIDATES = 40
_SEVERITIES = (("error", "error"), ("warning", "warning"), ("info", "info"))


def candidate_lines(logs: Sequence[tuple[int, str, str | None]], book: Playbook | None,
                    limit: int = MAX_CANDIDATES) -> tuple[list[str], int]:
    """The lines worth learning from a server's log (oldest first) and the one to pick first: the lines marked
    by a playbook entry and the errors (and tracebacks' last lines), with the newest lines after them; never the
    console's own polls. First pick: the newest marked line of an entry that names a root cause, else the newest
    error the playbook does not call a generic consequence, else the newest line."""
    lines = [(n, text.strip(), entry) for n, text, entry in logs if text.strip() and not loglines.is_own_poll(text)]
    if not lines:
        return [], 0
    picked: dict[int, tuple[str, str | None]] = {}
    for n, text, entry in lines:
        if entry is not None or loglines.is_error(text) or loglines.in_traceback(text):
            picked[n] = (text, entry)
    for n, text, entry in lines[-10:]:
        picked[n] = (text, entry)
    rows = sorted(picked.items())[-limit:]
    texts = [text for _, (text, _) in rows]

    def generic(text: str, entry: str | None) -> bool:
        e = book.get(entry) if book is not None and entry is not None else \
            book.claim(text) if book is not None else None
        if e is not None:
            return e.generic
        return "See root cause above" in text

    marked = [i for i, (_, (text, entry)) in enumerate(rows) if entry is not None and not generic(text, entry)]
    if marked:
        return texts, marked[-1]
    errors = [i for i, (_, (text, _)) in enumerate(rows)
              if (loglines.is_error(text) or loglines.in_traceback(text)) and not generic(text, None)
              and "Traceback (most recent call last)" not in text]
    return texts, errors[-1] if errors else len(texts) - 1


def _one_row(text: str, width: int) -> Text:
    """A log line on one row of the list (an option prompt wraps: cut it to the row, with an ellipsis)."""
    text = printable(text)
    return Text(text if len(text) <= width else text[: max(width - 1, 1)] + "…")


def _why(err: AppError) -> str:
    """What is wrong, without the file and field an InputError names (the form shows where)."""
    return str(getattr(err, "message", err.title))


def parse_env(text: str) -> list[tuple[str, str]]:
    """``A=1 B=two`` → [(A, 1), (B, two)]; a word without ``=`` is an error (ValueError naming it)."""
    out = []
    for word in shlex.split(text):
        name, eq, value = word.partition("=")
        if not eq or not name:
            raise ValueError(f"{word!r} is not NAME=value")
        out.append((name, value))
    return out


def parse_args(text: str) -> list[str]:
    """``--max-model-len 16384; --enforce-eager`` → one item per flag with its value."""
    return [part.strip() for part in text.split(";") if part.strip()]


class AddEntryModal(ConsoleModal[None]):
    """A new playbook entry from a log line the operator picks (``lines``; ``pick``: the one picked first), or
    ``entry`` edited (``lines`` empty). Saved to the operator's playbook."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "cancel"),
        Binding("ctrl+s", "save", "save"),  # not priority: the title typed just before it is in the form
    ]

    def __init__(self, lines: str | Sequence[str] = (), pick: int | None = None, *, entry: Entry | None = None,
                 shipped: bool = False) -> None:
        super().__init__()
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        self.pick = (len(self.lines) - 1 if pick is None else pick) if self.lines else None
        self.entry = entry
        self.shipped = shipped
        #: the pattern as generalised from the line picked (an edit of it is the operator's own)
        self._generated = ""

    @property
    def line(self) -> str | None:
        return self.lines[self.pick] if self.pick is not None else None

    def compose(self) -> ComposeResult:
        e = self.entry
        fix = e.fix if e is not None else None
        with Vertical(id="add-dialog", classes="dialog"):
            if e is None:
                heading = "Add a playbook entry from a log line"
            elif self.shipped:
                heading = f"Edit {e.id}: your copy takes the shipped entry's place"
            else:
                heading = f"Edit your entry {e.id}"
            yield Label(Text(heading, style="bold"))
            with VerticalScroll(id="add-scroll"):
                if self.lines:
                    yield Label("the line (↑↓ picks another)")
                    yield OptionList(id="add-lines")
                yield Label("pattern: searched in each log line (edit it)")
                first = e.lines.patterns[0].text if e is not None and e.lines is not None else ""
                yield Input(value=first, id="add-pattern", compact=True)
                yield Static(id="add-check")
                yield Label("title")
                yield Input(value=e.title if e is not None else "", id="add-title",
                            placeholder="what went wrong, in a few words", compact=True)
                yield Label("explanation")
                yield Input(value=e.explain.strip() if e is not None else "", id="add-explain",
                            placeholder="what happened and why (optional)", compact=True)
                yield Label("severity")
                yield Select(_SEVERITIES, value=e.severity if e is not None else "error", allow_blank=False,
                             id="add-severity")
                yield Label("fix: variables to set (NAME=value …)")
                yield Input(value=" ".join(shlex.quote(f"{k}={v}") for k, v in fix.set_env) if fix else "",
                            id="add-env", placeholder="e.g. VLLM_USE_FLASHINFER_SAMPLER=0", compact=True)
                yield Label("fix: flags to add (--flag value; …)")
                yield Input(value="; ".join(fix.add_args) if fix else "", id="add-args",
                            placeholder="e.g. --max-model-len 16384; --enforce-eager", compact=True)
                yield Label("or what to do instead")
                yield Input(value=(e.not_fixable or "") if e is not None else "", id="add-not-fixable",
                            placeholder="when no variable or flag fixes it (optional)", compact=True)
            with Horizontal(classes="buttons"):
                yield Button("Save (ctrl+s)", id="add-ok", variant="primary")
                yield Button("Cancel (esc)", id="add-cancel")

    def on_mount(self) -> None:
        for i in self.query(Input):
            i.cursor_blink = False
        self._fit()
        if self.lines:
            self._use_line()
            self.call_after_refresh(self._fill_lines)  # once laid out: each line is cut to the list's width
        else:
            self._check(self.query_one("#add-pattern", Input).value)
        self.query_one("#add-title", Input).focus()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """The fields scroll in what the terminal leaves (the dialog is at most 90% of its height): the buttons
        stay in view at 80x24."""
        dialog = self.query_one("#add-dialog")
        rows = int(self.app.size.height * 0.9) - dialog.styles.gutter.height - 1 - 4  # the heading, the buttons
        self.query_one("#add-scroll").styles.max_height = max(rows, 4)

    def _fill_lines(self) -> None:
        ol = self.query_one("#add-lines", OptionList)
        width = max(ol.scrollable_content_region.width - 4, 20)  # less the option's padding and the scrollbar
        ol.clear_options()
        for k, text in enumerate(self.lines):  # each line's message (the process, level and time are alike)
            ol.add_option(Option(_one_row(loglines.message(text) or text, width), id=str(k)))
        ol.highlighted = self.pick
        ol.call_after_refresh(lambda: ol.scroll_to_highlight(top=False))

    # --- the line and its pattern ------------------------------------------------------------------------------
    @on(OptionList.OptionHighlighted, "#add-lines")
    def _picked(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id is not None and int(event.option.id) != self.pick:
            self.pick = int(event.option.id)
            self._use_line()

    def _use_line(self) -> None:
        """The pattern generalised from the line picked (unless the operator wrote their own)."""
        line = self.line
        box = self.query_one("#add-pattern", Input)
        if line is None or (box.value and box.value != self._generated):
            self._check(box.value)
            return
        try:
            self._generated = pattern_for(line)
        except AppError as err:
            self._generated = ""
            self._show_check(False, f"no pattern from this line: {_why(err)}; write one, or pick another line")
        box.value = self._generated
        if self._generated:
            self._check(self._generated)

    @on(Input.Changed, "#add-pattern")
    def _pattern_changed(self, event: Input.Changed) -> None:
        self._check(event.value)

    @work(exclusive=True, thread=True, exit_on_error=False, group="pattern-check", description="checking the pattern")
    def _check(self, pattern: str) -> None:
        try:
            check_pattern(pattern, self.line)
        except AppError as err:
            self.app.call_from_thread(self._show_check, False, _why(err))
            return
        self.app.call_from_thread(self._show_check, True, "finds the line" if self.line is not None else "valid")

    def _show_check(self, ok: bool, message: str) -> None:
        self.query_one("#add-check", Static).update(
            Text(("✓ " if ok else "✖ ") + message, style="green" if ok else "bold red"))

    # --- saving ------------------------------------------------------------------------------------------------
    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#add-cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#add-ok")
    @on(Input.Submitted, "#add-title")
    def _ok(self) -> None:
        self.action_save()

    def action_save(self) -> None:
        title = self.query_one("#add-title", Input).value.strip()
        if not title:
            self.notify("give the entry a title", severity="warning", timeout=3)
            return
        try:
            env = parse_env(self.query_one("#add-env", Input).value)
        except ValueError as exc:
            self.notify(f"variables to set: {exc}", severity="error", timeout=5)
            return
        form = {
            "title": title,
            "explain": self.query_one("#add-explain", Input).value.strip() or None,
            "severity": str(self.query_one("#add-severity", Select).value),
            "pattern": self.query_one("#add-pattern", Input).value.strip(),
            "set_env": env,
            "add_args": parse_args(self.query_one("#add-args", Input).value),
            "not_fixable": self.query_one("#add-not-fixable", Input).value.strip() or None,
        }
        self._save(form)

    @work(exclusive=True, thread=True, exit_on_error=False, group="add-entry", description="saving the entry")
    def _save(self, form: dict[str, Any]) -> None:
        try:
            if self.entry is None:
                line = self.line
                assert line is not None
                learned = learn_line(line, title=form["title"], explain=form["explain"], severity=form["severity"],
                                     set_env=form["set_env"], add_args=form["add_args"],
                                     not_fixable=form["not_fixable"], origin="the console",
                                     pattern=form["pattern"] if form["pattern"] != self._generated else None)
                note = f"{learned.entry.id} saved to {learned.path}"
                if learned.claimer is not None:
                    note += f" (takes the line from {learned.claimer.id})"
                for w in learned.warnings:
                    note += f"; {w}"
            else:
                entry, path = save_entry(edited(self.entry, form))
                note = f"{entry.id} saved to {path}"
        except AppError as err:
            self.app.call_from_thread(self.notify, err.hint or "", title=err.one_line(), severity="error",
                                      timeout=8)
            return
        book = load_playbook()  # with the entry: the playbook screen, and the matchers of the starts to come
        self.app.post_message(PlaybookChanged(book))  # the app, not this dialog: it closes below
        self.app.call_from_thread(self.notify, note, title="playbook entry saved", timeout=6)
        self.app.call_from_thread(self.dismiss, None)


def edited(entry: Entry, form: dict[str, Any]) -> dict[str, Any]:
    """``entry`` as file data with the form's fields: title, explanation, severity, its first pattern, the
    variables and flags of its fix (what the form does not show, such as an end rule or conditions, is kept)."""
    data = entry.to_data()
    data["title"] = form["title"]
    data["explain"] = form["explain"] or entry.explain or "Edited in the console."
    data["severity"] = form["severity"]
    if form["pattern"]:
        match = dict(data.get("match") or {})
        lines = list(match.get("lines") or [])
        match["lines"] = [check_pattern(form["pattern"], None), *lines[1:]]
        data["match"] = match
    fix = dict(data.get("fix") or {})
    fix.pop("set_env", None)
    fix.pop("add_args", None)
    if form["set_env"]:
        fix["set_env"] = dict(form["set_env"])
    if form["add_args"]:
        fix["add_args"] = list(form["add_args"])
    if fix:
        data["fix"] = fix
    else:
        data.pop("fix", None)
        data["auto"] = False  # auto needs a fix
    if form["not_fixable"]:
        data["not_fixable"] = form["not_fixable"]
    else:
        data.pop("not_fixable", None)
    return data
