"""``disagg-tui hosts list|check|watch|facts``: the other GPU hosts of the inventory (``hosts.yaml`` in the config
dir), reached over SSH."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tui import __version__
from tui.cli.context import CliContext, add_global_options
from tui.core import safeio
from tui.core.errors import EXIT_FAILED, EXIT_OK, InputError
from tui.core.plan.preflight import FAIL
from tui.core.remote import inventory
from tui.core.remote.check import Reference, check_host
from tui.core.remote.events import HostReconnected, HostUnreachable, RemoteTick
from tui.core.remote.host import FACTS_FORMAT
from tui.core.remote.ssh import SshTransport
from tui.core.telemetry.view import json_line


def register(sub: Any) -> None:
    p = sub.add_parser("hosts", help="the other GPU hosts (hosts.yaml): list them, check them over SSH",
                       description="The inventory of other hosts is hosts.yaml in the config dir. 'check' reaches "
                                   "each over SSH and says in one line each: reachable (or why not), the remote "
                                   "disagg-tui and vllm versions, what the host is, whether the clocks agree.")
    hs = p.add_subparsers(dest="hosts_command", metavar="ACTION", required=True)
    ls = hs.add_parser("list", help="the hosts of the inventory")
    ls.add_argument("--json", action="store_true")
    add_global_options(ls)
    ls.set_defaults(handler=run_list)
    ck = hs.add_parser("check", help="reach hosts over SSH: versions, host, clock (exit 1 when one fails)")
    ck.add_argument("names", nargs="*", metavar="NAME", help="hosts to check (default: all)")
    ck.add_argument("--timeout", type=float, default=20.0, metavar="S", help="seconds per remote command")
    ck.add_argument("--json", action="store_true")
    add_global_options(ck)
    ck.set_defaults(handler=run_check)
    wt = hs.add_parser("watch", help="follow a host's 'watch --json' over one SSH session (reconnects)")
    wt.add_argument("name", metavar="NAME")
    wt.add_argument("--seconds", type=float, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    wt.add_argument("--rate", type=float, default=2.0, metavar="HZ", help="ticks per second (default 2)")
    wt.add_argument("--json", action="store_true", help="JSON Lines: each tick and connection event")
    add_global_options(wt)
    wt.set_defaults(handler=run_watch)
    fc = hs.add_parser("facts", help="this host's facts as JSON (what another host's disagg-tui reads of it)")
    fc.add_argument("--json", action="store_true", help="(the only format)")
    add_global_options(fc)
    fc.set_defaults(handler=run_facts)


def _transport(inv: inventory.Inventory, entry: inventory.HostEntry) -> SshTransport:
    return SshTransport(entry, ssh_config=inv.ssh_config)


def run_list(args: argparse.Namespace, ctx: CliContext) -> int:
    inv = inventory.load()
    if args.json:
        ctx.print_json({"file": str(inv.source), "hosts": [dataclasses.asdict(h) for h in inv.hosts]})
        return EXIT_OK
    if not inv.hosts:
        ctx.print(f"no hosts: add them to {inv.source} (see 'disagg-tui hosts --help')")
        return EXIT_OK
    for h in inv.hosts:
        extra = [f"port {h.port}"] if h.port else []
        extra += [f"via {h.jump}"] if h.jump else []
        extra += [f"GPUs {','.join(map(str, h.gpus))}"] if h.gpus else ["all GPUs"]
        extra += ["simulated"] if h.sim else []
        ctx.print(f"{h.name:<16} {h.ssh}  {' '.join(h.disagg_tui)}  vllm {h.vllm}  {', '.join(extra)}")
    return EXIT_OK


def _reference(ctx: CliContext) -> Reference:
    try:
        v = ctx.host.facts.vllm
    except Exception:  # noqa: BLE001 - no local vllm to compare with: the remote versions are shown as they are
        v = None
    return Reference(disagg_tui=__version__, vllm=v.version if v is not None and v.found else None)


def run_check(args: argparse.Namespace, ctx: CliContext) -> int:
    if not 0 < args.timeout <= 600:
        raise InputError(f"must be within (0, 600] s, got {args.timeout:g}", field="--timeout")
    inv = inventory.load()
    entries = [inv.get(n) for n in dict.fromkeys(args.names)] if args.names else list(inv.hosts)
    if not entries:
        raise InputError(f"no hosts to check: {inv.source} names none", hint="add hosts under 'hosts:' there")
    ref = _reference(ctx)
    transports = [_transport(inv, e) for e in entries]
    with ThreadPoolExecutor(max_workers=min(8, len(transports))) as pool:
        results = list(pool.map(lambda t: check_host(t, ref, timeout_s=args.timeout), transports))
    failed = any(c.status == FAIL for checks in results for c in checks)
    if args.json:
        ctx.print_json({"hosts": [{"name": t.name, "checks": [c.to_dict() for c in checks]}
                                  for t, checks in zip(transports, results, strict=True)]})
    else:
        width = max(len(t.name) for t in transports)
        for t, checks in zip(transports, results, strict=True):
            for c in checks:
                ctx.print(f"{t.name:<{width}}  {c.line()}")
    return EXIT_FAILED if failed else EXIT_OK


def run_watch(args: argparse.Namespace, ctx: CliContext) -> int:
    if not 0 < args.rate <= 20:
        raise InputError(f"must be within (0, 20] Hz, got {args.rate:g}", field="--rate")
    if args.seconds is not None and args.seconds <= 0:
        raise InputError(f"must be > 0, got {args.seconds:g}", field="--seconds")
    inv = inventory.load()
    transport = _transport(inv, inv.get(args.name))
    from tui.console.remotetick import TickError, read_tick
    from tui.core.remote.stream import RemoteWatch

    async def follow() -> None:
        watch = RemoteWatch(transport, rate_hz=args.rate)
        async for ev in watch.events(args.seconds):
            if args.json:
                ctx.out.write(json_line(ev.to_dict()) + "\n")
            elif isinstance(ev, RemoteTick):
                try:  # checked as the console checks it: a tick of the wrong shape is one line, the next one shows
                    tick = read_tick(ev.tick, ev.host)
                except TickError as err:
                    ctx.out.write(f"{ev.host}: a tick refused: {err}\n")
                else:
                    ctx.out.write(f"{ev.host}: {len(tick.gpus)} GPUs, {len(tick.servers)} servers\n")
            elif isinstance(ev, HostUnreachable):
                ctx.out.write(f"{ev.host}: unreachable ({ev.reason}): {safeio.shown(ev.detail)}; again in "
                              f"{ev.retry_in_s:.1f} s\n")
            elif isinstance(ev, HostReconnected):
                ctx.out.write(f"{ev.host}: reconnected after {ev.down_s:.1f} s\n")
            ctx.out.flush()

    try:
        asyncio.run(follow())
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def run_facts(args: argparse.Namespace, ctx: CliContext) -> int:
    facts = ctx.host.facts
    ctx.print(safeio.dumps_strict({"format": FACTS_FORMAT, "facts": dataclasses.asdict(facts)},
                                  separators=(",", ":")))
    return EXIT_OK
