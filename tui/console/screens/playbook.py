"""Playbook: the known failures (search, show; the operator's own marked, the shipped ones they switched off
listed), the diagnoses of the current and failed layouts, and the operator's changes: an entry edited (a
shipped one: their copy takes its place), deleted, a shipped one switched off and on (``tui.core.playbook.edit``),
a new one learned from a log line (``entryform.AddEntryModal``)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from tui.console import fmt
from tui.console.context import ConsoleContext
from tui.console.messages import PlaybookChanged
from tui.console.screens.base import ConsoleScreen
from tui.console.screens.entryform import AddEntryModal
from tui.console.state import BAND, ConsoleState
from tui.console.widgets.header import HeaderBar
from tui.core.errors import AppError
from tui.core.playbook import Entry, load_playbook
from tui.core.playbook.edit import Listed, delete_entry, disable_entry, enable_entry, listing
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
        Binding("down", "to_list", "to the list", show=False),  # from the search box (the list takes its own)
        Binding("ctrl+e", "edit", "edit"),
        Binding("ctrl+d", "toggle", "switch off/on"),
        Binding("delete", "delete", "delete yours"),
        Binding("escape", "app.mode('dashboard')", "dashboard"),
    ]

    #: what is typed on the entry list searches the entries; Enter in the search box goes to the list
    TYPE_TO_SEARCH = ("#pb-entries", "#pb-search", "#pb-entries")
    #: a replay shows; it changes no playbook
    LIVE_ACTIONS: ClassVar[frozenset[str]] = frozenset({"edit", "toggle", "delete"})

    def __init__(self, ctx: ConsoleContext, state: ConsoleState) -> None:
        super().__init__(ctx, state)
        self.rows: list[Listed] = []
        self._delete_armed: tuple[str, float] | None = None

    @property
    def entries(self) -> list[Entry]:
        return [r.entry for r in self.rows]

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        with Horizontal(id="playbook-body"):
            with Vertical(id="playbook-left"):
                yield Input(placeholder="/ search: id, title, pattern", id="pb-search", compact=True)
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

    def on_resize(self) -> None:
        if self.rows:  # each entry's two rows are cut to the list's width
            self._filter(self.query_one("#pb-search", Input).value)

    @work(exclusive=True, group="playbook", thread=True, exit_on_error=False, description="reading the playbook")
    def _load(self) -> None:
        try:
            rows = listing()  # the files: where each entry comes from, the shipped ones switched off
        except AppError as err:  # the operator's file does not load: what the console runs with, and why
            self.app.call_from_thread(self.notify, err.hint or "", title=err.one_line(), severity="error",
                                      timeout=8)
            rows = [Listed(e) for e in (self.ctx.book or load_playbook(operator=False)).entries]
        self.app.call_from_thread(self._show, rows)

    def _show(self, rows: list[Listed]) -> None:
        self.rows = rows
        self._filter(self.query_one("#pb-search", Input).value)

    def _filter(self, query: str) -> None:
        q = query.strip().lower()
        ol = self.query_one("#pb-entries", OptionList)
        keep = self._current()
        ol.clear_options()
        width = max(ol.size.width - 7, 12)  # less its border, the option's padding and a scrollbar
        shown: list[str] = []
        for r in self.rows:
            e = r.entry
            hay = " ".join([e.id, e.title, *(p.text for p in (e.lines.patterns if e.lines else ()))]).lower()
            if q and q not in hay:
                continue
            ol.add_option(Option(_prompt(r, width), id=e.id))
            shown.append(e.id)
        if shown:
            ol.highlighted = shown.index(keep.entry.id) if keep is not None and keep.entry.id in shown else 0
        else:  # nothing matches: the entry shown before is not left in view
            self.query_one("#pb-entry", Static).update(
                Text(f"No entry matches {query.strip()!r}." if q else "No entries.", style="dim"))

    def _current(self) -> Listed | None:
        ol = self.query_one("#pb-entries", OptionList)
        if ol.highlighted is None or not ol.option_count:
            return None
        oid = ol.get_option_at_index(ol.highlighted).id
        return next((r for r in self.rows if r.entry.id == oid), None)

    @on(Input.Changed, "#pb-search")
    def _search(self, event: Input.Changed) -> None:
        self._filter(event.value)

    @on(OptionList.OptionHighlighted, "#pb-entries")
    def _pick(self, event: OptionList.OptionHighlighted) -> None:
        r = next((x for x in self.rows if x.entry.id == event.option.id), None)
        if r is not None:
            self.query_one("#pb-entry", Static).update(listed_text(r))

    def action_search(self) -> None:
        self.query_one("#pb-search", Input).focus()

    def action_to_list(self) -> None:
        if self.focused is self.query_one("#pb-search", Input):
            self.set_focus(self.query_one("#pb-entries"))

    # --- changing the operator's playbook ----------------------------------------------------------------------
    def action_edit(self) -> None:
        r = self._current()
        if r is None:
            return
        if r.disabled:
            self.notify(f"{r.entry.id} is switched off: ctrl+d switches it on", timeout=4)
            return
        self.app.push_screen(AddEntryModal(entry=r.entry, shipped=not r.own), lambda _: self._load())

    def action_toggle(self) -> None:
        r = self._current()
        if r is None:
            return
        if r.own:
            self.notify(f"{r.entry.id} is yours: Delete deletes it (a shipped entry it replaced comes back), ctrl+e "
                        "edits it", timeout=6)
            return
        self._change("enable" if r.disabled else "disable", r.entry.id)

    def action_delete(self) -> None:
        import time

        r = self._current()
        if r is None:
            return
        if not r.own:
            self.notify(f"{r.entry.id} is shipped: ctrl+d switches it off", timeout=4)
            return
        now = time.monotonic()
        if self._delete_armed is None or self._delete_armed[0] != r.entry.id or now - self._delete_armed[1] > 5:
            self._delete_armed = (r.entry.id, now)
            self.notify(f"Delete again to delete your entry {r.entry.id}", title="delete?", timeout=5)
            return
        self._delete_armed = None
        self._change("delete", r.entry.id)

    @work(exclusive=True, group="playbook-edit", thread=True, exit_on_error=False,
          description="changing the playbook")
    def _change(self, what: str, entry_id: str) -> None:
        do = {"enable": enable_entry, "disable": disable_entry, "delete": delete_entry}[what]
        try:
            path = do(entry_id)
        except AppError as err:
            self.app.call_from_thread(self.notify, err.hint or "", title=err.one_line(), severity="error",
                                      timeout=8)
            return
        self.post_message(PlaybookChanged(load_playbook()))  # the follower and the screens use it
        done = {"enable": "switched on", "disable": "switched off", "delete": "deleted"}[what]
        self.app.call_from_thread(self.notify, f"{entry_id} {done} ({path})", title="playbook", timeout=5)
        self.app.call_from_thread(self._load)

    def draw(self, model: ConsoleState, *, full: bool = False) -> None:
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


def _tag(r: Listed) -> str:
    if r.disabled:
        return "off"
    if r.own:
        return "yours, replaces shipped" if r.replaces else "yours"
    return ""


def _prompt(r: Listed, width: int) -> Text:
    """An entry as two rows of the list, each cut to its width (an option wraps its prompt: ids and titles ran
    into each other): its id, then whose it is and its title."""
    e = r.entry
    tag = _tag(r)
    t = Text()
    t.append(fmt.cut_words(e.id, width), style="dim strike" if r.disabled else SEVERITY_STYLE.get(e.severity, ""))
    t.append("\n  ")
    if tag:
        t.append(f"{tag} · "[: max(width - 2, 0)], style="bold cyan" if r.own else "bold")
    t.append(fmt.cut_words(e.title, max(width - 2 - (len(tag) + 3 if tag else 0), 1)), style="dim")
    return t


def listed_text(r: Listed) -> Text:
    """An entry in full, with where it comes from and what can be done with it."""
    t = Text()
    if r.disabled:
        t.append("Switched off by your playbook: ctrl+d switches it on.\n\n", style="bold yellow")
    elif r.own:
        t.append("Yours" + (", in place of the shipped entry with this id" if r.replaces else "")
                 + ": ctrl+e edits it, Delete deletes it.\n\n", style="bold cyan")
    else:
        t.append("Shipped: ctrl+e edits a copy of it (yours takes its place), ctrl+d switches it off.\n\n",
                 style="dim")
    t.append_text(entry_text(r.entry))
    return t


# the dialog that adds (and edits) an entry: tui/console/screens/entryform.py
__all__ = ["AddEntryModal", "PlaybookScreen", "entry_text"]
