"""A layout whose launcher is gone: the ``up`` that was starting it was killed (SIGKILL, a closed terminal) while
its servers, each in a session of its own, went on starting. Nobody probes them any more, so the state file would
say ``starting`` for ever. :func:`follow_orphans` does what the launcher would have: it probes each server's
``/health`` and records it ready when it answers, and the layout ready once every process of its plan is; a
server that exits makes it degraded or failed as always (``layout_health``). ``status``, ``watch`` and the
console call it as they read the state file.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from tui.core.errors import InputError
from tui.core.launch.state import LayoutRecord, StateStore
from tui.core.launch.supervisor import process_alive

Probe = Callable[[str], bool]


def launcher_gone(rec: LayoutRecord) -> bool:
    """The process that launched a starting layout (``up``, ``run``) has ended (its recorded start time tells a
    recycled pid apart)."""
    return rec.status == "starting" and rec.owner_pid > 0 and not process_alive(rec.owner_pid, rec.owner_create_time)


def _never_started(rec: LayoutRecord) -> list[str]:
    """Servers of the plan the launcher never started (held back behind a GPU neighbour when it died)."""
    have = {p.name for p in rec.processes}
    names = [str(s.get("name", "")) for s in rec.plan.get("servers", []) if isinstance(s, dict)]
    if rec.plan.get("proxy"):
        names.append("proxy")
    return [n for n in names if n and n not in have]


def http_probe(timeout_s: float = 1.0) -> Probe:
    client = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=timeout_s), trust_env=False)

    def probe(url: str) -> bool:
        try:
            return client.get(url.rstrip("/") + "/health").status_code == 200
        except httpx.HTTPError:
            return False

    return probe


def follow_orphans(store: StateStore | None = None, *, probe: Probe | None = None,
                   now: Callable[[], float] = time.time) -> list[str]:
    """Bring the state file up to date with the servers of every starting layout whose launcher is gone: a server
    alive that answers ``/health`` is recorded ready, and the layout ready once every process of its plan is; when
    every process has exited it is recorded failed. The ids of the layouts changed. Blocking (HTTP probes of a
    second at most each, outside the lock); a damaged state file changes nothing."""
    store = store or StateStore()
    try:
        orphans = [r for r in store.peek().values() if launcher_gone(r)]
    except InputError:
        return []
    if not orphans:
        return []
    probe = probe or http_probe()
    answered: dict[str, set[str]] = {}
    for rec in orphans:
        answered[rec.id] = {p.name for p in rec.processes if p.ready_at is None and p.url
                            and process_alive(p.pid, p.create_time) and probe(p.url)}
    changed = []
    with store.locked() as layouts:
        for rec in orphans:
            cur = layouts.get(rec.id)
            if cur is None or cur.status != "starting" or not launcher_gone(cur):
                continue
            at = now()
            for p in cur.processes:
                if p.name in answered[rec.id] and p.ready_at is None:
                    p.ready_at = at
            alive = [p for p in cur.processes if process_alive(p.pid, p.create_time)]
            missing = _never_started(cur)
            gone = f"its launcher (pid {cur.owner_pid}) is gone"
            if cur.processes and not alive:
                cur.status, cur.note = "failed", f"{gone} and every process has exited"
            elif cur.processes and len(alive) == len(cur.processes) and not missing \
                    and all(p.ready_at is not None for p in cur.processes):
                cur.status, cur.note = "ready", f"{gone}; ready: every server answers /health"
            elif missing:
                cur.note = f"{gone} before it started {', '.join(missing)}: stop what is left (disagg-tui down)"
            else:
                cur.note = f"{gone}; its servers are followed until they answer /health"
            changed.append(cur.id)
    return changed


__all__ = ["follow_orphans", "http_probe", "launcher_gone"]
