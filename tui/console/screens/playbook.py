"""Playbook: the known failures (search, show), the diagnoses of the current and failed layouts, and a new entry
learned from a log line (the ``playbook add`` path: the line generalised, checked against the reloaded book)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Footer, Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option

from tui.console.context import ConsoleContext
from tui.console.messages import PlaybookChanged
from tui.console.model import BAND, ConsoleModel
from tui.console.screens.base import ConsoleModal, ConsoleScreen
from tui.console.widgets.header import HeaderBar
from tui.core.errors import AppError
from tui.core.playbook import Entry, load_playbook
from tui.core.playbook.learn import learn_line
from tui.core.playbook.loader import shipped_playbook_path

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def entry_text(e: Entry) -> Text:
    t = Text()
    t.append(f"{e.id}\n", style="bold")
    t.append(f"{e.title}\n", style=SEVERITY_STYLE.get(e.severity, ""))
    t.append(f"severity {e.severity} · priority {e.priority}" + (" · auto-fix" if e.auto else "") + "\n\n",
             style="dim")
    if e.lines is not None:
        t.append("Recognised by\n", style="bold")
        for p in e.lines.patterns:
            t.append(f"  {p.text}\n", style="cyan")
    t.append("\n" + e.explain.strip() + "\n\n")
    t.append("Fix: ", style="bold")
    t.append(e.fix_text() + "\n")
    if e.references:
        t.append("\nReferences\n", style="bold")
        for r in e.references:
            t.append(f"  {r}\n", style="dim")
    t.append(f"\nfrom {_source(e.source)}:{e.line}\n", style="dim")
    return t


def _source(path: str) -> str:
    """The shipped playbook by name (the same wherever the app is installed), the operator's by its path."""
    p = Path(path)
    try:
        return f"shipped {p.relative_to(shipped_playbook_path().parent)}"
    except ValueError:
        return path


class PlaybookScreen(ConsoleScreen):
    AUTO_FOCUS = "#pb-entries"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "search", "search"),
        Binding("escape", "app.mode('dashboard')", "dashboard"),
    ]

    #: what is typed on the entry list searches the entries
    TYPE_TO_SEARCH = ("#pb-entries", "#pb-search", "")

    def __init__(self, ctx: ConsoleContext, state: ConsoleModel) -> None:
        super().__init__(ctx, state)
        self.entries: list[Entry] = []

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        with Horizontal(id="playbook-body"):
            with Vertical(id="playbook-left"):
                yield Input(placeholder="search entries (id, title, pattern)", id="pb-search", compact=True)
                ol = OptionList(id="pb-entries")
                ol.border_title = "Entries"
                yield ol
            with Vertical(id="playbook-right"):
                diag = Static(id="pb-diagnoses")
                diag.border_title = "Diagnoses on this host"
                yield diag
                with VerticalScroll(id="pb-entry-view"):
                    yield Static(id="pb-entry")
        yield Footer()

    def on_mount(self) -> None:
        for i in self.query(Input):  # no blinking cursor: no repaint twice a second over SSH
            i.cursor_blink = False
        self.query_one("#pb-entry-view").border_title = "Entry"
        self._load()

    def on_screen_resume(self) -> None:
        self._load()
        self.draw(self.state, full=True)

    @work(exclusive=True, group="playbook", thread=True, exit_on_error=False, description="reading the playbook")
    def _load(self) -> None:
        book = self.ctx.book or load_playbook()
        self.app.call_from_thread(self._show, list(book.entries))

    def _show(self, entries: list[Entry]) -> None:
        self.entries = entries
        self._filter(self.query_one("#pb-search", Input).value)

    def _filter(self, query: str) -> None:
        q = query.strip().lower()
        ol = self.query_one("#pb-entries", OptionList)
        ol.clear_options()
        for e in self.entries:
            hay = " ".join([e.id, e.title, *(p.text for p in (e.lines.patterns if e.lines else ()))]).lower()
            if q and q not in hay:
                continue
            ol.add_option(Option(Text.assemble((f"{e.id:<34}", SEVERITY_STYLE.get(e.severity, "")),
                                               f" {e.title}"[:70]), id=e.id))
        if ol.option_count:
            ol.highlighted = 0

    @on(Input.Changed, "#pb-search")
    def _search(self, event: Input.Changed) -> None:
        self._filter(event.value)

    @on(OptionList.OptionHighlighted, "#pb-entries")
    def _pick(self, event: OptionList.OptionHighlighted) -> None:
        e = next((x for x in self.entries if x.id == event.option.id), None)
        if e is not None:
            self.query_one("#pb-entry", Static).update(entry_text(e))

    def action_search(self) -> None:
        self.query_one("#pb-search", Input).focus()

    def draw(self, model: ConsoleModel, *, full: bool = False) -> None:
        self.query_one(HeaderBar).draw(model, screen="playbook")
        if not (full or BAND in model.dirty):
            return
        t = Text()
        if not model.diagnoses:
            t.append("No diagnosis on the layout shown now.", style="dim")
        for d in sorted(model.diagnoses, key=lambda d: d.sort_key()):
            t.append(f"{d.headline()}\n", style=SEVERITY_STYLE.get(d.severity, ""))
            if d.line:
                t.append(f"  > {d.line.strip()[:150]}\n", style="dim")
            t.append(f"  fix: {d.fix}\n")
        self.query_one("#pb-diagnoses", Static).update(t)


class AddEntryModal(ConsoleModal[None]):
    """A new playbook entry from one log line: a title, what it means, how severe; saved to the operator's book."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line

    def compose(self) -> ComposeResult:
        with Vertical(id="add-dialog", classes="dialog"):
            yield Label(Text("Add a playbook entry from this line", style="bold"))
            yield Static(Text(self.line.strip()[:300], style="red"))
            yield Label("title")
            yield Input(id="add-title", placeholder="what went wrong, in a few words", compact=True)
            yield Label("explanation (optional)")
            yield Input(id="add-explain", compact=True)
            yield Label("severity")
            yield Select((("error", "error"), ("warning", "warning"), ("info", "info")), value="error",
                         allow_blank=False, id="add-severity")
            with Horizontal(classes="buttons"):
                yield Button("Add", id="add-ok", variant="primary")
                yield Button("Cancel", id="add-cancel")

    def on_mount(self) -> None:
        self.query_one("#add-title", Input).focus()

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#add-cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#add-ok")
    @on(Input.Submitted, "#add-title")
    def _ok(self) -> None:
        title = self.query_one("#add-title", Input).value.strip()
        if not title:
            self.notify("give the entry a title", severity="warning", timeout=3)
            return
        explain = self.query_one("#add-explain", Input).value.strip() or None
        severity = str(self.query_one("#add-severity", Select).value)
        self._add(title, explain, severity)

    @work(exclusive=True, thread=True, exit_on_error=False, group="add-entry", description="adding an entry")
    def _add(self, title: str, explain: str | None, severity: str) -> None:
        try:
            learned = learn_line(self.line, title=title, explain=explain, severity=severity, origin="the console")
        except AppError as err:
            self.app.call_from_thread(self.notify, err.hint or "", title=err.one_line(), severity="error",
                                      timeout=8)
            return
        note = f"{learned.entry.id} saved to {learned.path}"
        if learned.claimer is not None:
            note += f" (takes the line from {learned.claimer.id})"
        for w in learned.warnings:
            note += f"; {w}"
        book = load_playbook()  # with the new entry: the playbook screen, and the matchers of the starts to come
        self.app.post_message(PlaybookChanged(book))  # the app, not this dialog: it closes below
        self.app.call_from_thread(self.notify, note, title="playbook entry added", timeout=6)
        self.app.call_from_thread(self.dismiss, None)
