"""One registry of the console's actions: the command palette (ctrl+p) lists it, the footer shows the keys."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


@dataclass(frozen=True, slots=True)
class Command:
    title: str
    action: str  # a Textual action string run on the app ("mode('launch')") or the screen ("screen.stop")
    help: str
    key: str = ""


COMMANDS: tuple[Command, ...] = (
    Command("Dashboard", "app.mode('dashboard')", "GPUs, servers, the current start or run, the log", "escape"),
    Command("Launch a layout", "app.mode('launch')", "pick a model and a topology, see the plan, launch it", "l"),
    Command("Benchmark", "app.mode('bench')", "run a workload against what is up, with live figures", "b"),
    Command("Campaign", "app.mode('campaign')", "a bake-off: topologies × workloads × rates × repeats", "c"),
    Command("Results", "app.mode('results')", "stored runs compared, the recommendation, export", "r"),
    Command("Playbook", "app.mode('playbook')", "known failures, the diagnoses of this host's layouts", "p"),
    Command("Stop the layout", "app.stop_layout", "stop every server of the layout that is up (down)", "s"),
    Command("Quit", "app.quit_console", "leave the servers running (default) or stop them", "q"),
)


class ConsoleCommands(Provider):
    async def discover(self) -> Hits:
        for c in COMMANDS:
            yield DiscoveryHit(c.title, partial(self.app.run_action, c.action), help=self._help(c))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for c in COMMANDS:
            score = max(matcher.match(c.title), matcher.match(c.help) * 0.5)
            if score > 0:
                yield Hit(score, matcher.highlight(c.title), partial(self.app.run_action, c.action),
                          help=self._help(c))

    @staticmethod
    def _help(c: Command) -> str:
        return f"{c.help} ({c.key})" if c.key else c.help
