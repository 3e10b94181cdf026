"""Playbook: the known failures (search, show; the operator's own marked, the shipped ones they switched off
listed), the failures on this host (the layout shown now with its diagnoses, then the failed layouts of the
history, newest first: ``tui.core.launch.failures``; Enter opens one in full), and the operator's changes: an
entry edited (a shipped one: their copy takes its place), deleted, a shipped one switched off and on
(``tui.core.playbook.edit``), a new one learned from a log line (``entryform.AddEntryModal``)."""

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
from tui.console.screens.modals import TextModal
from tui.console.state import BAND, ConsoleState
from tui.console.widgets.header import HeaderBar
from tui.core.errors import AppError
from tui.core.launch.failures import PastFailure, past_failures
from tui.core.playbook import Diagnosis, Entry, load_playbook
from tui.core.playbook.edit import Listed, delete_entry, disable_entry, enable_entry, listing
from tui.core.playbook.loader import shipped_playbook_path
from tui.core.printable import printable

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
        Binding("ctrl+f", "failures", "failures"),
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
        #: the failures listed (the history read last), and the layout shown when it was read
        self.failures: list[PastFailure] = []
        self._failures_of: tuple[str, str] | None = None
        self._diagnoses_listed = -1

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
                diag = OptionList(id="pb-failures")
                diag.border_title = "Failures on this host (^f, enter opens)"
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
        self._failures_of = None  # read the history again
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
        if self.refuse_watch_only():
            return
        r = self._current()
        if r is None:
            return
        if r.disabled:
            self.notify(f"{r.entry.id} is switched off: ctrl+d switches it on", timeout=4)
            return
        self.app.push_screen(AddEntryModal(entry=r.entry, shipped=not r.own), lambda _: self._load())

    def action_toggle(self) -> None:
        if self.refuse_watch_only():
            return
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

        if self.refuse_watch_only():
            return
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
        lay = model.layout
        shown = (lay.id, lay.status) if lay is not None else ("", "")
        if shown != self._failures_of or full:  # the history changes when a layout fails, starts or is dismissed
            self._failures_of = shown
            self._read_failures()
        elif len(model.diagnoses) != self._diagnoses_listed:
            self._list_failures()

    # --- the failures on this host -----------------------------------------------------------------------------
    @work(exclusive=True, group="playbook-failures", thread=True, exit_on_error=False,
          description="reading the failures on this host")
    def _read_failures(self) -> None:
        found = past_failures(self.ctx.store)
        self.app.call_from_thread(self._show_failures, found)

    def _show_failures(self, found: list[PastFailure]) -> None:
        self.failures = found
        self._list_failures()

    def _list_failures(self) -> None:
        ol = self.query_one("#pb-failures", OptionList)
        keep = ol.highlighted
        ol.clear_options()
        self._diagnoses_listed = len(self.state.diagnoses)
        lay = self.state.layout
        width = max(ol.size.width - 6, 20)
        listed = {f.layout_id for f in self.failures}
        if self.state.diagnoses and (lay is None or lay.id not in listed):
            top = sorted(self.state.diagnoses, key=lambda d: d.sort_key())[0]
            what = printable(f"{lay.topology} of {lay.profile_id}") if lay is not None else "the layout shown"
            ol.add_option(Option(Text(fmt.cut_words(f"now · {what}: {top.headline()}"
                                                    + (f" (+{len(self.state.diagnoses) - 1})"
                                                       if len(self.state.diagnoses) > 1 else ""), width),
                                      style=SEVERITY_STYLE.get(top.severity, "")), id="now"))
        for i, f in enumerate(self.failures):
            ol.add_option(Option(_failure_row(f, width), id=f"f{i}"))
        if not ol.option_count:
            ol.add_option(Option(Text("No failure on this host.", style="dim"), id="none", disabled=True))
        elif keep is not None:
            ol.highlighted = min(keep, ol.option_count - 1)

    def action_failures(self) -> None:
        self.set_focus(self.query_one("#pb-failures"))

    @on(OptionList.OptionSelected, "#pb-failures")
    def _open_failure(self, event: OptionList.OptionSelected) -> None:
        oid = event.option.id or ""
        if oid == "now":
            lay = self.state.layout
            title = f"{lay.topology} of {lay.profile_id}: diagnoses" if lay is not None else "Diagnoses"
            self.app.push_screen(TextModal(title, diagnoses_text(self.state.diagnoses)))
        elif oid.startswith("f") and oid[1:].isdigit() and int(oid[1:]) < len(self.failures):
            f = self.failures[int(oid[1:])]
            self.app.push_screen(TextModal(f"Failed layout {f.layout_id}", failure_text(f)))


def _when(at: float) -> str:
    import time

    return time.strftime("%m-%d %H:%M", time.localtime(at)) if at else "?"


def _first_error(diagnoses: list[dict[str, object]]) -> dict[str, object] | None:
    errors = [d for d in diagnoses if d.get("severity") == "error"]
    found = errors or diagnoses
    return found[0] if found else None


def _failure_row(f: PastFailure, width: int) -> Text:
    """A failure as one row: when, what, the root cause the playbook named (or the note)."""
    if f.record is None:
        return Text(fmt.cut_words(f"{f.layout_id}: cannot be read: {f.error}", width), style="red")
    r = f.record
    d = _first_error(r.diagnoses)
    why = f"[{d.get('entry_id')}] {d.get('title')}" if d is not None else (r.note or "failed")
    t = Text()
    t.append(f"{_when(r.created)} ", style="dim")
    t.append(f"{r.topology} of {r.profile_id}", style="bold")
    if f.current:
        t.append(" (shown now)", style="dim")
    t.append(" · ")
    t.append(fmt.cut_words(why, max(width - len(t.plain), 10)), style="red")
    return t


def diagnoses_text(diagnoses: list[Diagnosis]) -> Text:
    t = Text()
    if not diagnoses:
        t.append("No diagnosis.", style="dim")
    for d in sorted(diagnoses, key=lambda d: d.sort_key()):
        t.append(f"{d.headline()}\n", style=SEVERITY_STYLE.get(d.severity, ""))
        if d.line:
            t.append(f"  > {d.line.strip()[:300]}\n", style="dim")
        t.append(f"  fix: {d.fix}\n\n")
    return t


def failure_text(f: PastFailure) -> Text:
    """A failed layout in full: when and what, who started it and with which request, why it failed (each
    diagnosis: its line and its fix), and each process with its exit and its log."""
    import shlex

    from tui.core.launch.ownership import started_by_text

    t = Text()
    r = f.record
    if r is None:
        t.append(f"This record cannot be read: {f.error}\n", style="red")
        return t
    t.append(f"{r.topology} of {r.profile_id}", style="bold")
    t.append(f" failed · {_when(r.created)} · layout {r.id}" + (" (simulated)" if r.simulated else "") + "\n")
    if r.note:
        t.append(f"{r.note}\n", style="red")
    who = started_by_text(r)
    if who:
        t.append(f"{who[:1].upper()}{who[1:]}.\n", style="dim")
    if r.request is not None:
        t.append("Request: ", style="bold")
        t.append(f"disagg-tui up {shlex.join(r.request)}\n")
    fixes = r.plan.get("fixes_applied") or []
    if fixes:
        t.append(f"Fixes it carried: {', '.join(map(str, fixes))}\n")
    t.append("\nWhy\n", style="bold")
    if not r.diagnoses:
        t.append("  no known failure matched (the logs below say what happened)\n", style="dim")
    for d in r.diagnoses:
        sev = str(d.get("severity", ""))
        t.append(f"  {sev}: {d.get('server', '')} [{d.get('entry_id', '')}] {d.get('title', '')}\n",
                 style=SEVERITY_STYLE.get(sev, ""))
        line = d.get("line")
        if isinstance(line, str) and line.strip():
            t.append(f"    > {line.strip()[:300]}\n", style="dim")
        t.append(f"    fix: {d.get('fix', '')}\n")
    t.append("\nProcesses\n", style="bold")
    for p in r.processes:
        exit_ = "exit ?" if p.exited is None else f"exit {p.exited}"
        t.append(f"  {p.name:<10} {p.role:<8} pid {p.pid:<8} {exit_:<8} log {p.log}\n")
    if f.current:
        t.append("\nx on the dashboard dismisses it (it then stays here, in the history).", style="dim")
    return t


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
