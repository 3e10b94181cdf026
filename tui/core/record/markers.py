"""Markers: the moments of a recording a replay jumps to (phase changes, diagnoses, finished runs, failures).

The recorder finds them while it writes (from each event's plain form, so it needs no event class) and keeps them
in the chunk headers, so a replay lists every marker of an hour-long recording without decoding its events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PHASE = "phase"  # a server entered another startup phase, became ready; a layout changed status
DIAGNOSIS = "diagnosis"  # the playbook recognised a known failure (or warning) in a log
RUN = "run"  # a benchmark run finished (any status)
FAILURE = "failure"  # a server exited or stalled, a run or a campaign cell failed, an error notice
OPERATOR = "operator"  # the operator did something (an OperatorAction), a plan was launched
MARKER_KINDS = (PHASE, DIAGNOSIS, RUN, FAILURE, OPERATOR)


@dataclass(frozen=True, slots=True)
class Marker:
    ts: float  # epoch seconds (recording time)
    kind: str  # one of MARKER_KINDS
    label: str  # one line for a timeline

    def to_list(self) -> list[Any]:
        return [self.ts, self.kind, self.label]


class MarkerFinder:
    """Turns event dicts into markers; remembers each server's phase so progress within a phase is no marker."""

    def __init__(self) -> None:
        self._phase: dict[str, str] = {}
        self._down: set[str] = set()  # remote hosts unreachable now

    def __call__(self, d: dict[str, Any]) -> Marker | None:
        kind = d.get("kind")
        ts = float(d.get("ts") or 0.0)
        if kind == "server_phase":
            server, phase = str(d.get("server", "")), str(d.get("phase", ""))
            if self._phase.get(server) == phase:
                return None
            self._phase[server] = phase
            return Marker(ts, PHASE, f"{server}: {d.get('label') or phase}")
        if kind == "server_ready":
            return Marker(ts, PHASE, f"{d.get('server')}: ready after {float(d.get('startup_s') or 0):.1f} s")
        if kind == "layout_changed":
            status = d.get("status")
            label = f"layout {d.get('topology') or d.get('layout_id')}: {status}"
            return Marker(ts, FAILURE if status == "failed" else PHASE, label)
        if kind == "diagnosis":
            return Marker(ts, DIAGNOSIS, f"{d.get('server')}: {str(d.get('severity', '')).upper()} "
                                         f"[{d.get('entry_id')}] {d.get('title')}")
        if kind == "bench_done":
            status = d.get("status")
            return Marker(ts, RUN if status == "complete" else FAILURE, f"run {d.get('run_id')}: {status}")
        if kind == "server_exited":
            return Marker(ts, FAILURE, f"{d.get('server')}: exited ({d.get('returncode')}) during {d.get('during')}")
        if kind == "server_stalled":
            return Marker(ts, FAILURE, f"{d.get('server')}: stalled in {d.get('phase')}")
        if kind == "campaign_step" and d.get("step") in ("cell_failed", "layout_failed"):
            return Marker(ts, FAILURE, str(d.get("text", ""))[:200])
        if kind == "notice" and d.get("level") == "error":
            return Marker(ts, FAILURE, str(d.get("message", ""))[:200])
        if kind == "host_unreachable":  # another host's stream (the console's --hosts): once per outage
            host = str(d.get("host", ""))
            if host in self._down:
                return None
            self._down.add(host)
            return Marker(ts, FAILURE, f"host {host}: unreachable ({d.get('reason')})")
        if kind == "host_reconnected":
            host = str(d.get("host", ""))
            self._down.discard(host)
            return Marker(ts, PHASE, f"host {host}: reconnected after {float(d.get('down_s') or 0):.1f} s")
        if kind == "operator_action":
            detail = d.get("detail")
            servers = detail.get("servers") if isinstance(detail, dict) else None  # a quit: what became of them
            return Marker(ts, OPERATOR, f"{d.get('action')} {d.get('target') or ''}".strip()
                          + (f" (servers {servers})" if isinstance(servers, str) and servers else ""))
        if kind == "plan_launched":
            plan = d.get("plan") or {}
            return Marker(ts, OPERATOR, f"plan launched: {plan.get('topology', '?')} of {plan.get('profile_id', '?')}")
        return None
