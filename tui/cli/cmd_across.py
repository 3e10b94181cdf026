"""``plan|up|down --hosts a,b``: a layout across inventory hosts, each part planned, checked, started and stopped by
that host's own ``disagg-tui`` over SSH (``tui.core.plan.cluster`` says what each part is,
``tui.core.remote.cluster`` carries it out)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
from typing import Any

from tui.cli.context import CliContext
from tui.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, AppError, InputError
from tui.core.plan.cluster import ClusterPlan, plan_across
from tui.core.plan.hostfacts import HostFacts
from tui.core.plan.request import LaunchRequest
from tui.core.record.fingerprint import host_fingerprint
from tui.core.remote import inventory, record
from tui.core.remote.cluster import (
    Hosts,
    RemotePlan,
    combined_plan,
    down_across,
    preflight_across,
    remote_plans,
    up_across,
)


def host_names(args: argparse.Namespace) -> list[str]:
    text = str(args.hosts or "")
    inv = inventory.load()
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        names = inv.names
    if not names:
        raise InputError("expected inventory host names, as in --hosts a,b", field="--hosts")
    for n in names:
        inv.get(n)  # an unknown name is one line naming hosts.yaml and the hosts it has
    return names


def _cluster(args: argparse.Namespace) -> tuple[Hosts, ClusterPlan]:
    request = LaunchRequest.from_args(args)
    hosts = Hosts(inventory.load(), host_names(args))
    return hosts, plan_across(request, hosts.cluster_hosts(), proxy_on=getattr(args, "proxy_on", None))


def _say(ctx: CliContext) -> Any:
    def on_line(host: str, line: str) -> None:
        print(f"[{host}] {line}", file=ctx.err, flush=True)
    return on_line


def _show(ctx: CliContext, plan: ClusterPlan, plans: dict[str, RemotePlan]) -> None:
    ctx.print(f"# {plan.topology} across {len(plan.parts)} hosts ({', '.join(plan.hosts)}); endpoint {plan.endpoint}"
              + (" (SIMULATED hosts)" if all(p.simulated for p in plans.values()) else ""))
    for part in plan.parts:
        rp = plans[part.host]
        ctx.print("")
        ctx.print(f"## on {part.host} ({part.address}): {part.does}")
        ctx.print(f"#  disagg-tui up {' '.join(part.request.to_argv())}")
        for s in rp.servers:
            ctx.print(f"# {s.name} ({s.role})" + ("" if s.role == "headless" else f" on {s.url}"))
            ctx.print(s.shell)
        if rp.proxy_shell:
            ctx.print(f"# proxy on {rp.proxy_url}")
            ctx.print(rp.proxy_shell)
        for w in rp.warnings:
            ctx.warn(f"{part.host}: {w}")


def _print_checks(ctx: CliContext, checks: list[tuple[str, str, str]]) -> None:
    print("preflight:", file=ctx.err)
    mark = {"pass": "ok  ", "warn": "WARN", "fail": "FAIL"}
    for name, status, reason in checks:
        print(f"  [{mark[status]}] {name}: {reason}", file=ctx.err)


def run_plan(args: argparse.Namespace, ctx: CliContext) -> int:
    hosts, plan = _cluster(args)
    try:
        plans = remote_plans(hosts, plan, preflight=not args.no_preflight)
        checks = [] if args.no_preflight else preflight_across(hosts, plan, plans)
        if args.json:
            ctx.print_json({"cluster": plan.to_dict(),
                            "hosts": {h: {"servers": [dataclasses.asdict(s) for s in p.servers],
                                          "proxy": p.proxy_shell} for h, p in plans.items()},
                            "preflight": [{"name": n, "status": st, "reason": r} for n, st, r in checks]})
        else:
            _show(ctx, plan, plans)
        if checks and not args.json:
            _print_checks(ctx, checks)
    finally:
        hosts.close()
    return EXIT_OK


def run_up(args: argparse.Namespace, ctx: CliContext) -> int:
    hosts, plan = _cluster(args)
    try:
        plans = remote_plans(hosts, plan)
        _show(ctx, plan, plans)
        facts = hosts.facts()
        checks = preflight_across(hosts, plan, plans, facts)
        _print_checks(ctx, checks)
        failed = [f"{n}: {r}" for n, st, r in checks if st == "fail"]
        if failed and not args.force:
            ctx.error(f"preflight failed: {failed[0]}" + (f" (and {len(failed) - 1} more)" if len(failed) > 1
                                                           else ""))
            return EXIT_BAD_INPUT
        extra = ["--logs"] if args.logs else []
        results = asyncio.run(up_across(hosts, plan, _say(ctx), extra=extra))
    finally:
        hosts.close()
    bad = [r for r in results if r.rc != 0]
    if bad:
        for r in bad:
            ctx.error(f"{r.host}: its part did not come up (exit {r.rc}): {r.last}")
        ctx.print("every host's part was stopped (disagg-tui down on each)")
        return EXIT_FAILED
    rec = _record(plan, facts, str(args.model), combined_plan(plan, plans))
    ctx.print("")
    ctx.print(f"{plan.topology} is up across {', '.join(plan.hosts)} (recorded as {rec.id})")
    ctx.print(f"endpoint: {plan.endpoint}")
    ctx.print(f"bench it with 'disagg-tui bench' here; stop it with 'disagg-tui down --hosts {','.join(plan.hosts)}'")
    return EXIT_OK


def _record(plan: ClusterPlan, facts: dict[str, HostFacts], model: str, served: dict[str, Any],
            *, owner: str = "cli") -> record.ClusterRecord:
    """The layout across hosts as this host keeps it: what ``bench`` finds and the fingerprint its runs keep."""
    sim = all(f.simulated for f in facts.values())
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rec = record.ClusterRecord(
        id=f"{stamp}-{model}-{plan.topology}-x{len(plan.parts)}"[:120], topology=plan.topology,
        model=model, endpoint=plan.endpoint, simulated=sim, plan=served, owner=owner,
        hosts=[record.HostPartRecord(name=p.host, address=p.address, does=p.does, argv=p.request.to_argv(),
                                     fingerprint=host_fingerprint(facts.get(p.host))) for p in plan.parts])
    record.add(rec)
    return rec


def run_down(args: argparse.Namespace, ctx: CliContext) -> int:
    hosts = Hosts(inventory.load(), host_names(args))
    extra = [*(["--all"] if args.all else []), *(["--force"] if args.force else [])]
    try:
        results = asyncio.run(down_across(hosts, hosts.names, _say(ctx), extra=extra))
    finally:
        hosts.close()
    code = EXIT_OK
    for r in results:
        if r.rc != 0:
            ctx.error(f"{r.host}: down failed (exit {r.rc}): {r.last}")
            code = EXIT_FAILED
    if code == EXIT_OK:
        for rec in record.mark_stopped(hosts.names):
            ctx.print(f"{rec.id} ({rec.topology} across {', '.join(rec.names)}) is stopped")
        ctx.print(f"stopped on {', '.join(hosts.names)}")
    return code


__all__ = ["run_down", "run_plan", "run_up"]


# --- campaigns across hosts (run --hosts) ------------------------------------------------------------------------


class AcrossCampaign:
    """What ``run --hosts`` gives the campaign runner: a planner whose plan of a topology is every host's servers
    (each host's own plan of its part, preflighted on every host and across them), and a lifecycle that brings the
    layout up and down with every host's own ``disagg-tui`` (``tui.core.bench.campaign.Lifecycle``)."""

    def __init__(self, args: argparse.Namespace, ctx: CliContext, request: LaunchRequest, campaign: str) -> None:
        self.ctx = ctx
        self.request = request
        self.owner = f"campaign {campaign}"
        self.hosts = Hosts(inventory.load(), host_names(args))
        self.proxy_on = getattr(args, "proxy_on", None)
        #: each (topology, knobs) planned: its parts, every host's plan of its part and every host's facts
        self._parts: dict[tuple[str, tuple[tuple[str, str], ...]],
                          tuple[ClusterPlan, dict[str, RemotePlan], dict[str, HostFacts]]] = {}

    @property
    def label(self) -> str:
        return f"{len(self.hosts.names)} hosts: {','.join(self.hosts.names)}"

    def plan(self, topology: str, knobs: tuple[tuple[str, str], ...] | None = None) -> tuple[Any, Any]:
        """(profile, plan) of ``topology`` across the hosts; AppError (one line) when a host refuses its part or a
        check fails: the campaign records the cells of that layout as failed with it and goes on."""
        from tui.core.errors import PlanRefused
        from tui.core.plan.spec import LaunchPlan, ProxySpec, ServerSpec

        request = dataclasses.replace(self.request, topology=topology,
                                      **({"knobs": knobs} if knobs is not None else {}))
        cplan = plan_across(request, self.hosts.cluster_hosts(), proxy_on=self.proxy_on)
        plans = remote_plans(self.hosts, cplan)
        facts = self.hosts.facts()
        failed = [f"{n}: {r}" for n, st, r in preflight_across(self.hosts, cplan, plans, facts) if st == "fail"]
        if failed:
            raise PlanRefused(f"preflight failed: {failed[0]}" + (f" (and {len(failed) - 1} more)" if len(failed) > 1
                                                                   else ""))
        self._parts[(topology, tuple(request.knobs))] = (cplan, plans, facts)
        profile = self.ctx.catalog.model(str(request.model))
        servers = []
        for h, rp in plans.items():
            for s in rp.servers:
                host, _, port = s.url.removeprefix("http://").rpartition(":")
                servers.append(ServerSpec(name=f"{h}/{s.name}", role=s.role, argv=s.argv, env=s.env, gpus=s.gpus,
                                          host=host.strip("[]"), port=int(port) if port.isdigit() else 0))
        proxy = None
        if cplan.proxy_on is not None:
            proxy_host, _, proxy_port = cplan.endpoint.removeprefix("http://").rpartition(":")
            proxy = ProxySpec(host=proxy_host.strip("[]"), port=int(proxy_port),
                              prefill=tuple(s.url for s in servers if s.role == "prefill"),
                              decode=tuple(s.url for s in servers if s.role == "decode"))
        launch = LaunchPlan(profile_id=profile.id, model=str(request.model), served_name=profile.served_name,
                            topology=topology, gpus=(), servers=tuple(servers), proxy=proxy,
                            simulated=all(f.simulated for f in facts.values()), vllm_executable="vllm",
                            host_label=self.label, knobs=request.knobs)
        return profile, launch

    def gpu_count(self, topology: str) -> int | None:
        """The GPUs one layout takes on all its hosts (what the recommendation's per-GPU figures divide by)."""
        try:
            _profile, launch = self.plan(topology)
        except AppError:
            return None
        return sum(len(s.gpus) for s in launch.servers) or None

    async def bring_up(self, profile: Any, plan: Any, host: Any, bus: Any) -> Any:
        from tui.core.launch.state import LayoutRecord, ProcessRecord

        cplan, plans, facts = self._parts[(plan.topology, tuple(plan.knobs))]
        for old in record.load_all():  # what a killed run of this campaign left up on these hosts
            if old.status == "up" and old.owner == self.owner and set(old.names) & set(cplan.hosts):
                await down_across(self.hosts, old.names, lambda h, line: None)
                record.mark_stopped(old.names)
        results = await up_across(self.hosts, cplan, lambda h, line: None)  # a failure's last line is in results
        bad = [r for r in results if r.rc != 0]
        if bad:
            raise AppError(f"{bad[0].host}: its part did not come up (exit {bad[0].rc}): {bad[0].last}",
                           "every host's part was stopped")
        rec = _record(cplan, facts, plan.profile_id, combined_plan(cplan, plans), owner=self.owner)
        procs = [ProcessRecord(name=s.name, role=s.role, pid=0, pgid=0, create_time=0.0, log="", url=s.url,
                               gpus=list(s.gpus)) for s in plan.servers]
        return LayoutRecord(id=rec.id, created=rec.created, simulated=rec.simulated, plan=plan.to_dict(),
                            processes=procs, status="ready", endpoint=cplan.endpoint)

    async def tear_down(self, layout: Any, bus: Any) -> None:
        names = [h.name for r in record.load_all() if r.id == layout.id for h in r.hosts] or self.hosts.names
        await down_across(self.hosts, names, lambda h, line: None)
        record.mark_stopped(names)

    def fingerprint(self, layout: Any) -> dict[str, Any]:
        rec = next((r for r in record.load_all() if r.id == layout.id), None)
        return rec.fingerprint() if rec is not None else {}

    def close(self) -> None:
        self.hosts.close()
