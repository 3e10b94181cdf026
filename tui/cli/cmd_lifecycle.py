"""``up``, ``status`` and ``down``: the headless lifecycle of a layout."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shlex
import time
from typing import Any

from tui.cli.argtypes import positive_int
from tui.cli.common import add_force_option, launch_request, make_plan
from tui.cli.context import CliContext, add_global_options
from tui.cli.recording import SessionRecording, add_record_options
from tui.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from tui.core.events import Event, EventBus, Notice
from tui.core.guided import FixApplied, GuidedLaunch
from tui.core.launch import failures, ownership
from tui.core.launch.adopt import follow_orphans
from tui.core.launch.events import (
    ServerDeferred,
    ServerExited,
    ServerLaunched,
    ServerPhase,
    ServerReady,
    ServerStalled,
    ServerSubPhase,
    StartupExpected,
)
from tui.core.launch.lifecycle import UpOptions, assess_layout, process_states, tear_down, timeouts_for
from tui.core.launch.state import OWNER_KINDS, LayoutRecord, StateStore
from tui.core.plan.launchargs import add_hosts_arguments
from tui.core.plan.request import add_plan_arguments, add_up_arguments
from tui.core.playbook import Diagnosis, load_playbook


def register(sub: Any) -> None:
    up = sub.add_parser("up", help="launch a layout, follow its startup, wait until ready (servers stay up)",
                        description="Plan, preflight, launch every server (and the proxy) in its own session, "
                                    "follow startup phases, and wait until each answers /health. The servers keep "
                                    "running after this command returns; 'disagg-tui down' stops them.")
    add_plan_arguments(up, required=False)  # --bundle carries them
    add_up_arguments(up)
    up.add_argument("--logs", action="store_true", help="print every server log line while starting")
    add_hosts_arguments(up)
    add_force_option(up, "with --replace: replace a layout a running campaign or benchmark holds")
    # who starts the layout, as the state file records it (the console starts up detached: --started-by console)
    up.add_argument("--started-by", choices=[k for k in OWNER_KINDS if k != "campaign"], default="cli",
                    help=argparse.SUPPRESS)
    up.add_argument("--owner-pid", type=positive_int, default=None, help=argparse.SUPPRESS)
    add_record_options(up, default_on=False)
    add_global_options(up)
    up.set_defaults(handler=run_up)

    st = sub.add_parser("status", help="the layouts this host runs, their processes and health")
    st.add_argument("--json", action="store_true")
    st.add_argument("--failed", action="store_true",
                    help="the history of failed layouts on this host (the newest first), not the layouts up")
    add_global_options(st)
    st.set_defaults(handler=run_status)

    down = sub.add_parser("down", help="stop the active layout (SIGINT, then SIGTERM, then SIGKILL)")
    down.add_argument("--all", action="store_true", help="every layout this host knows, failed ones too")
    add_force_option(down, "stop a layout a running campaign or benchmark holds")
    add_hosts_arguments(down, proxy=False)
    add_global_options(down)
    down.set_defaults(handler=run_down)


class ProgressPrinter:
    """Prints a layout's startup as lines: one per phase change, ready, exit or stall (to stderr)."""

    def __init__(self, ctx: CliContext, *, show_logs: bool = False) -> None:
        self.ctx = ctx
        self.show_logs = show_logs
        self.t0 = time.monotonic()
        self._last: dict[str, tuple[str, int]] = {}
        self._sub: dict[tuple[str, str], tuple[str, int]] = {}

    def __call__(self, ev: Event) -> None:
        t = time.monotonic() - self.t0
        out = self.ctx.err
        if isinstance(ev, ServerLaunched):
            print(f"[{t:6.1f}s] {ev.server:<10} launched pid {ev.pid}, log {ev.log}", file=out, flush=True)
        elif isinstance(ev, ServerPhase):
            pct = int(ev.progress * 100)
            key = (ev.phase, pct // 10)
            if self._last.get(ev.server) == key:
                return
            self._last[ev.server] = key
            detail = f" ({ev.detail})" if ev.detail else ""
            print(f"[{t:6.1f}s] {ev.server:<10} {_bar(ev.progress)} {pct:3d}% {ev.label}{detail}", file=out,
                  flush=True)
        elif isinstance(ev, ServerDeferred):
            print(f"[{t:6.1f}s] {ev.server:<10} waits: shares GPU {','.join(map(str, ev.gpus))} with "
                  f"{', '.join(ev.waits_for)}; starts once {'they have' if len(ev.waits_for) > 1 else 'it has'} "
                  "allocated the KV cache (a shared GPU's memory profiling would halve both caches)", file=out,
                  flush=True)
        elif isinstance(ev, ServerSubPhase):
            key = (f"sub:{ev.key}:{ev.state}", int(ev.elapsed_s // 10))
            if self._sub.get((ev.server, ev.key)) == key:
                return
            self._sub[(ev.server, ev.key)] = key
            print(f"[{t:6.1f}s] {ev.server:<10}   ↳ {ev.label}", file=out, flush=True)
        elif isinstance(ev, StartupExpected):
            if ev.seconds is not None:
                print(f"[{t:6.1f}s] {ev.server:<10} expected start-up ~{ev.seconds:.0f} s ({ev.cache_state or '?'} "
                      f"cache; {ev.source}{f', {ev.samples} earlier start(s)' if ev.samples else ''})", file=out,
                      flush=True)
            if ev.cold_hint:
                print(f"[{t:6.1f}s] {ev.server:<10} {ev.cold_hint}", file=out, flush=True)
        elif isinstance(ev, ServerReady):
            print(f"[{t:6.1f}s] {ev.server:<10} ready on {ev.url} after {ev.startup_s:.1f} s", file=out, flush=True)
        elif isinstance(ev, ServerExited):
            print(f"[{t:6.1f}s] {ev.server:<10} EXITED with code {ev.returncode} during {ev.during}; last log lines:",
                  file=out, flush=True)
            for line in ev.last_lines:
                print(f"    | {line}", file=out)
        elif isinstance(ev, ServerStalled):
            print(f"[{t:6.1f}s] {ev.server:<10} STALLED in {ev.phase}: no output for {ev.silent_s:.0f} s; last log "
                  "lines:", file=out, flush=True)
            for line in ev.last_lines:
                print(f"    | {line}", file=out)
        elif isinstance(ev, Notice):
            print(f"[{t:6.1f}s] {ev.level}: {ev.message}", file=out, flush=True)
        elif isinstance(ev, Diagnosis):
            print(f"[{t:6.1f}s] {ev.headline()}", file=out, flush=True)
            if ev.line:
                print(f"    > {ev.line.strip()[:200]}", file=out)
            print(f"    {ev.explanation.strip().splitlines()[0] if ev.explanation.strip() else ''}", file=out)
            print(f"    fix: {ev.fix}", file=out, flush=True)
        elif isinstance(ev, FixApplied):
            what = "applying" if ev.reason == "asked" else "auto-fix"
            print(f"[{t:6.1f}s] {what} [{ev.entry_id}]: {'; '.join(ev.changes) or 'no change'}", file=out,
                  flush=True)
        elif self.show_logs and ev.kind == "log_line":
            print(f"    {getattr(ev, 'server', '')}| {getattr(ev, 'text', '')}", file=out)


def _bar(progress: float, width: int = 20) -> str:
    filled = round(progress * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def run_up(args: argparse.Namespace, ctx: CliContext) -> int:
    if args.hosts:
        from tui.cli.cmd_across import run_up as up_across

        return up_across(args, ctx)
    request = launch_request(args, ctx)
    if request.bundle is not None:
        from tui.cli.cmd_bundle import up_plan

        profile, launch_plan = up_plan(request, ctx)
    else:
        profile, launch_plan = make_plan(request, ctx)
    host = ctx.host
    for w in launch_plan.warnings:
        ctx.warn(w)
    ctx.print(launch_plan.shell())
    ready_default, stall_default = timeouts_for(host)
    options = UpOptions(
        ready_timeout_s=request.ready_timeout_s or ready_default,
        stall_timeout_s=request.stall_timeout_s or stall_default,
        replace=request.replace,
        stagger_shared_gpus=request.stagger,
        started_by=ownership.owner(args.started_by, pid=args.owner_pid),
        request=request,
        force=args.force,
    )
    bus = EventBus()
    bus.subscribe(ProgressPrinter(ctx, show_logs=args.logs))
    with SessionRecording(ctx, args, "up", bus) as session:
        guided = GuidedLaunch(profile, launch_plan, host, bus, load_playbook(), options=options,
                              apply=request.apply_fix)
        record, final_plan = asyncio.run(session.around(guided.run()))
    if final_plan.fixes_applied:
        ctx.print(f"fixes applied: {', '.join(final_plan.fixes_applied)} (recorded with the layout)")
    ctx.print("")
    ctx.print(f"layout {record.id} is up" + (" (SIMULATED host)" if record.simulated else ""))
    ctx.print(f"endpoint: {record.endpoint}")
    for p in record.processes:
        ctx.print(f"  {p.name:<10} {p.role:<8} {p.url:<24} pid {p.pid:<8} log {p.log}")
    return EXIT_OK


def layout_status(rec: LayoutRecord) -> dict[str, Any]:
    alive = process_states(rec)
    health = assess_layout(rec, alive)
    # "status" is what the layout is (degraded/failed once a process it needs has exited); "recorded_status" is
    # what the state file says, "exited" which processes are gone; "started_by" who started it, "held_by" who
    # holds it now (a running campaign, a benchmark: stopping, restarting or benchmarking it asks for --force);
    # "request" the up arguments it was started with (what a restart replays)
    held = ownership.holders(rec) if rec.status in ("starting", "ready", "stopping") else []
    return {"id": rec.id, "status": health.status, "recorded_status": health.recorded, "exited": list(health.exited),
            "simulated": rec.simulated, "profile": rec.profile_id,
            "topology": rec.topology, "endpoint": rec.endpoint, "gpus": rec.gpus, "note": rec.note,
            "created": rec.created, "fixes_applied": rec.plan.get("fixes_applied", []),
            "started_by": ownership.started_by_dict(rec),
            "held_by": [{"kind": h.kind, "pid": h.pid, "text": h.text} for h in held],
            "request": rec.request,
            "diagnoses": [{k: d.get(k) for k in ("server", "entry_id", "title", "severity", "fix", "line_no")}
                          for d in rec.diagnoses],
            "processes": [{"name": p.name, "role": p.role, "pid": p.pid, "alive": alive.get(p.name, False),
                           "url": p.url, "gpus": p.gpus, "log": p.log} for p in rec.processes]}


def run_status(args: argparse.Namespace, ctx: CliContext) -> int:
    """Every layout this host knows, and one telemetry reading (GPUs, health, metrics) of the active one."""
    from tui.core.telemetry import collect_snapshot_sync
    from tui.core.telemetry.view import tick_lines
    from tui.hosts import host_for_layout

    store = StateStore()
    if args.failed:
        return _print_failures(ctx, store, args.json)
    follow_orphans(store)  # a start whose launcher was killed: its servers' /health says how it went
    layouts = store.read()
    report = [layout_status(rec) for rec in layouts.values()]
    active = store.active()
    host = host_for_layout(ctx.host_options(), active is not None and active.simulated, ctx.host)
    snapshot = collect_snapshot_sync(host, store, api_key=ctx.api_key)
    from tui.core.remote import record

    across = [r for r in record.load_all() if r.status == "up"]
    if args.json:
        ctx.print_json({"layouts": report, "snapshot": snapshot,
                        **({"across_hosts": [dataclasses.asdict(r) for r in across]} if across else {})})
        return EXIT_OK
    for r in across:  # layouts across hosts started from here: each host's own 'status' has its part
        ctx.print(f"{r.id}: {r.topology} of {r.model} across {', '.join(r.names)}"
                  + (" SIMULATED" if r.simulated else "") + f", endpoint {r.endpoint}")
        for h in r.hosts:
            ctx.print(f"  {h.name:<10} {h.address:<16} {h.does}")
    if not report:
        ctx.print("no layout is up on this host")
    for lay in report:
        label = " SIMULATED" if lay["simulated"] else ""
        exited = f" (exited: {', '.join(lay['exited'])})" if lay["exited"] else ""
        ctx.print(f"{lay['id']}: {lay['status']}{exited}{label} — {lay['topology']} of {lay['profile']} on GPU "
                  f"{','.join(map(str, lay['gpus']))}, endpoint {lay['endpoint']}"
                  + (f" ({lay['note']})" if lay["note"] else "")
                  + (f"; fixes applied: {', '.join(lay['fixes_applied'])}" if lay["fixes_applied"] else ""))
        for line in _owner_lines(lay):
            ctx.print(line)
        if lay["request"] is not None:
            ctx.print(f"  request: disagg-tui up {shlex.join(lay['request'])}")
        for p in lay["processes"]:
            ctx.print(f"  {p['name']:<10} {p['role']:<8} pid {p['pid']:<8} {'running' if p['alive'] else 'EXITED':<8}"
                      f" {p['url']}  log {p['log']}")
        for d in lay["diagnoses"]:
            ctx.print(f"  {d['severity']}: {d['server']} [{d['entry_id']}] {d['title']} — fix: {d['fix']}")
        if lay["recorded_status"] == "failed":
            ctx.print("  (the last failure: x in the console or 'disagg-tui down --all' dismisses it; earlier ones: "
                      "'disagg-tui status --failed')")
    for line in tick_lines(snapshot, show_layout=False):
        ctx.print(line)
    return EXIT_OK


def _owner_lines(lay: dict[str, Any]) -> list[str]:
    """Who started a layout and who holds it now, as ``status`` prints them (the campaign that started it and
    still runs is said once)."""
    who = lay["started_by"] or {}
    lines = []
    others = [h for h in lay["held_by"] if not (h["kind"] == "campaign" and h["pid"] == who.get("pid"))]
    if who:
        held = len(others) < len(lay["held_by"])
        lines.append(f"  {who['text']}" + (" — still running: it holds the layout (down, up --replace and bench "
                                           "refuse it without --force)" if held else ""))
    if others:
        lines.append("  in use by " + "; ".join(h["text"] for h in others))
    return lines


def _print_failures(ctx: CliContext, store: StateStore, as_json: bool) -> int:
    """``status --failed``: the failures this host keeps (the failed layout of the state file, then the history)."""
    found = failures.past_failures(store)
    if as_json:
        ctx.print_json({"failures": [{"id": f.layout_id, "current": f.current, "error": f.error or None,
                                      **({"layout": layout_status(f.record)} if f.record is not None else {})}
                                     for f in found]})
        return EXIT_OK
    if not found:
        ctx.print("no failed layout on this host")
    for f in found:
        if f.record is None:
            ctx.print(f"{f.layout_id}: cannot be read: {f.error}")
            continue
        r = f.record
        first = next((d for d in r.diagnoses if d.get("severity") == "error"), r.diagnoses[0] if r.diagnoses else None)
        why = f" [{first.get('entry_id')}] {first.get('title')}" if first else ""
        ctx.print(f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(r.created))}  {r.id}: {r.topology} of "
                  f"{r.profile_id}{' (shown now)' if f.current else ''} — {r.note or 'failed'}{why}")
    return EXIT_OK


def run_down(args: argparse.Namespace, ctx: CliContext) -> int:
    if args.hosts:
        from tui.cli.cmd_across import run_down as down_across

        return down_across(args, ctx)
    store = StateStore()
    layouts = list(store.read().values())
    if not args.all:
        layouts = [r for r in layouts if r.status in ("starting", "ready", "stopping")]
    if not layouts:
        ctx.print("no layout is up on this host" + ("" if args.all else " (--all: failed ones too)"))
        return EXIT_OK
    bus = EventBus()
    code = EXIT_OK
    for rec in layouts:
        if rec.status in ("starting", "ready", "stopping"):
            try:  # a layout a running campaign or benchmark holds is stopped only when told to
                ownership.check_free(rec, "stop it", force=args.force)
            except ownership.LayoutInUse as err:
                ctx.error(err.one_line())
                code = EXIT_BAD_INPUT
                continue
        ctx.print(f"stopping {rec.id} ({rec.topology} of {rec.profile_id}) ...")
        asyncio.run(tear_down(rec, bus, store=store))
        left = [n for n, alive in process_states(rec).items() if alive]
        if left:
            ctx.error(f"still running after SIGKILL: {', '.join(left)}")
            code = max(code, EXIT_FAILED)
        else:
            ctx.print(f"stopped {rec.id}: {len(rec.processes)} process group(s), nothing left running")
    return code

