"""One registry of the console's actions: the command palette (ctrl+p) lists it, ``?``/F1 shows the keys.

A command is listed where it can run now: on the mode it belongs to (``where``), when its target (the app or the
screen) has the action, and when the target's ``check_action`` allows it (a replay offers no launch, stop or
measurement; "stop the layout" only with one up). The footer shows the same bindings, filtered the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from rich.text import Text
from textual.actions import parse
from textual.app import App
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.screen import Screen


@dataclass(frozen=True, slots=True)
class Command:
    title: str
    action: str  # a Textual action string run on the app ("app.mode('launch')") or the screen ("screen.stop")
    help: str
    key: str = ""
    #: the mode whose screen has the action ("": any)
    where: str = ""


COMMANDS: tuple[Command, ...] = (
    Command("Dashboard", "app.mode('dashboard')", "GPUs, servers, the current start or run, the log", "escape"),
    Command("Launch a layout", "app.mode('launch')", "pick a model and a topology, see the plan, launch it", "l"),
    Command("Benchmark", "app.mode('bench')", "run a workload against what is up, with live figures", "b"),
    Command("Campaign", "app.mode('campaign')", "a bake-off: topologies × workloads × rates × repeats", "c"),
    Command("Results", "app.mode('results')", "stored runs compared, the recommendation, export", "r"),
    Command("Playbook", "app.mode('playbook')", "known failures, the diagnoses of this host's layouts", "p"),
    # the dashboard's
    Command("Stop the layout", "screen.stop", "stop every server of the layout that is up (down)", "s", "dashboard"),
    Command("Restart the layout", "screen.restart", "launch the layout shown again with the request it was started "
            "with (asks first)", "R", "dashboard"),
    Command("Apply the fix and relaunch", "screen.apply_fix", "the diagnosis shown: up --apply-fix ENTRY", "a",
            "dashboard"),
    Command("Diagnosis details", "screen.details", "the diagnosis shown in full: the line, why, the fix", "d",
            "dashboard"),
    Command("Dismiss the diagnosis", "screen.dismiss", "put the diagnosis shown away; a failed layout goes at once "
            "(into the playbook screen's failures)", "x", "dashboard"),
    Command("Add a playbook entry from the log", "screen.add_entry", "learn a known failure from a log line", "A",
            "dashboard"),
    Command("Follow the log", "screen.follow", "the log pane goes back to following the newest line", "f",
            "dashboard"),
    # the other screens'
    Command("Launch the plan shown", "screen.launch", "up, detached: the dashboard follows it", "ctrl+l", "launch"),
    Command("Copy the plan as shell", "screen.copy_plan", "the plan's commands on the clipboard", "ctrl+y",
            "launch"),
    Command("Start the benchmark", "screen.start", "the workload as edited, against what is up", "ctrl+s", "bench"),
    Command("Stop the benchmark", "screen.stop", "what was measured is kept", "ctrl+x", "bench"),
    Command("Start the campaign", "screen.start", "the topologies and workloads chosen, detached", "ctrl+s",
            "campaign"),
    Command("Resume the campaign", "screen.resume", "the one selected: its complete cells are skipped", "ctrl+r",
            "campaign"),
    Command("Reload the results", "screen.reload", "read the stored runs again", "ctrl+r", "results"),
    Command("Scope of the results", "screen.next_scope", "every run, then each campaign's: the table and its "
            "exports", "s", "results"),
    Command("Export the results as CSV", "screen.export('csv')", "to the data directory's exports/", "ctrl+e",
            "results"),
    Command("Export the results as Markdown", "screen.export('md')", "with the recommendation", "ctrl+k",
            "results"),
    Command("A run's details", "screen.details", "plan, fingerprint, per-request figures", "enter", "results"),
    Command("Knob chart: next knob", "screen.next_knob", "the next serve knob the runs differ by, its values side "
            "by side", "k", "results"),
    Command("Knob chart: next figure", "screen.next_figure", "output tok/s, mean TPOT, mean TTFT", "f", "results"),
    Command("Search the playbook", "screen.search", "by id, title or pattern", "/", "playbook"),
    # the app's
    Command("Recording on/off", "app.toggle_recording", "record this session (on by default)", "ctrl+t"),
    Command("Pause or play the replay", "app.toggle_pause", "the recording's clock stands still", "space"),
    Command("Replay faster", "app.speed(1)", "up to 100×", "+"),
    Command("Replay slower", "app.speed(-1)", "down to 0.5×", "-"),
    Command("Seek forward 30 s", "app.seek(30)", "shift+→: 5 minutes", "→"),
    Command("Seek back 30 s", "app.seek(-30)", "shift+←: 5 minutes", "←"),
    Command("Next marker", "app.next_marker('')", "the next phase, diagnosis, run or failure", "n"),
    Command("Next phase", "app.next_marker('phase')", "the next startup phase", "1"),
    Command("Next diagnosis", "app.next_marker('diagnosis')", "the next known failure recognised", "2"),
    Command("Next run", "app.next_marker('run')", "the next finished benchmark run", "3"),
    Command("Markers", "app.markers", "every marker of the recording; enter jumps to one", "m"),
    Command("Help: the keys", "app.help", "every key this screen offers now", "?"),
    Command("Quit", "app.quit_console", "leave the servers running (default) or stop them", "q"),
)


def offered(app: App[Any], screen: Screen[Any], command: Command) -> bool:
    """``command`` can run now on ``screen`` (the one shown, under the palette): on its mode, its target has the
    action, and the target allows it."""
    if command.where and command.where != app.current_mode:
        return False
    namespace, name, params = parse(command.action)
    target: Any = screen if namespace == "screen" else app
    if not hasattr(target, f"action_{name}"):
        return False
    return target.check_action(name, params) is True


def available(app: App[Any], screen: Screen[Any]) -> Iterator[Command]:
    return (c for c in COMMANDS if offered(app, screen, c))


#: the actions a key runs that are the same as another's (a mode's letter is the mode, q the quit dialog)
SAME_ACTION = {"go": "mode", "ask_quit": "quit_console"}


def _bare(action: str) -> str:
    """An action string without its namespace (``app.mode('bench')``, ``mode('bench')`` and ``go('bench')`` are
    one action)."""
    bare = action.split(".", 1)[1] if action.startswith(("app.", "screen.")) else action
    name, paren, rest = bare.partition("(")
    return SAME_ACTION.get(name, name) + paren + rest


def help_text(app: App[Any]) -> Text:
    """The keys offered now (the screen's and the app's bindings, each action once with all its keys; a widget's
    own cursor keys left out), then what else the palette offers here."""
    keys: dict[str, list[str]] = {}
    described: dict[str, str] = {}
    for active in app.active_bindings.values():
        b = active.binding
        if not active.enabled or b.system or not b.description or not isinstance(active.node, Screen | App):
            continue
        action = _bare(b.action)
        keys.setdefault(action, []).append(app.get_key_display(b))
        described.setdefault(action, b.description)
    t = Text()
    t.append("Keys here\n", style="bold")
    for action, shown in keys.items():
        t.append(f"  {', '.join(dict.fromkeys(shown)):<16}", style="bold cyan")
        t.append(f" {described[action]}\n")
    more = [c for c in available(app, app.screen) if _bare(c.action) not in keys]
    if more:
        t.append("\nAlso (ctrl+p)\n", style="bold")
        for c in more:
            t.append(f"  {c.key:<16}", style="bold cyan")
            t.append(f" {c.title}: {c.help}\n")
    t.append("\nctrl+p lists every action; esc goes back to the dashboard.\n", style="dim")
    return t


class ConsoleCommands(Provider):
    async def discover(self) -> Hits:
        for c in available(self.app, self.screen):
            yield DiscoveryHit(c.title, partial(self.app.run_action, c.action), help=self._help(c))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for c in available(self.app, self.screen):
            score = max(matcher.match(c.title), matcher.match(c.help) * 0.5)
            if score > 0:
                yield Hit(score, matcher.highlight(c.title), partial(self.app.run_action, c.action),
                          help=self._help(c))

    @staticmethod
    def _help(c: Command) -> str:
        return f"{c.help} ({c.key})" if c.key else c.help
