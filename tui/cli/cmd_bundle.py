"""``disagg-tui export`` and ``disagg-tui import``: profile bundles, a working setup in one YAML for the next person."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tui.cli.context import CliContext, add_global_options
from tui.core import paths, safeio
from tui.core.bench import recommend as rec_mod
from tui.core.bench import table
from tui.core.bench.campaign import CAMPAIGN_FILE, campaign_runs, read_spec
from tui.core.bench.store import Run, find_runs, load_run, read_run_workload
from tui.core.errors import EXIT_OK, InputError, PlanRefused
from tui.core.launch.state import StateStore
from tui.core.models import ModelProfile, Workload
from tui.core.plan.planner import PlanOptions
from tui.core.plan.preflight import preflight
from tui.core.plan.request import LaunchRequest, add_bundle_arguments
from tui.core.plan.spec import LaunchPlan
from tui.core.playbook.book import load_playbook
from tui.core.record.bundle import Bundle, build_bundle, check_trust, load_bundle, write_bundle
from tui.core.record.bundle_install import install_changes, missing_secrets, prepare_install
from tui.core.record.bundle_plan import BundlePlan, plan_here, require_secrets
from tui.core.record.fingerprint import fingerprint_diff, host_fingerprint
from tui.core.safeio import guarded, shown
from tui.hosts import host_for_layout


def register(sub: Any) -> None:
    ex = sub.add_parser("export", help="write a bundle: profile, plan, fixes, workloads, fingerprint, results",
                        description="One YAML with everything the next person needs to run the same setup: the "
                                    "model profile, each layout's exact plan (every argv and env), the fixes "
                                    "applied and why, the workloads, the versions and fingerprint of this host, "
                                    "and the results with the recommendation. Secrets are replaced by <redacted>.")
    src = ex.add_mutually_exclusive_group(required=True)
    src.add_argument("--layout", metavar="ID", help="a layout this host knows (see 'disagg-tui status')")
    src.add_argument("--run", metavar="ID", help="a stored run (CAMPAIGN/RUN or its directory)")
    src.add_argument("--campaign", metavar="ID", help="a stored campaign (its name or directory)")
    ex.add_argument("-o", "--output", required=True, metavar="FILE.yaml", help="where to write the bundle")
    add_global_options(ex)
    ex.set_defaults(handler=run_export)

    im = sub.add_parser("import", help="check a bundle, show what it would run here, add its profile and workloads",
                        description="Validate a bundle strictly (file:line: field errors) and as data: its plans "
                                    "are planned afresh on this host (host, ports, GPUs and the vllm executable "
                                    "come from here), and the vLLM flags and environment variables it adds must be "
                                    "ones the shipped allowlist names. Prints every command that would run here, "
                                    "what the exporting host used instead, and what differs from the profiles and "
                                    "workloads this host has; then adds them (asks first; --yes for scripts). "
                                    "'disagg-tui up --bundle FILE' launches its plan.")
    im.add_argument("file", metavar="FILE", help="a bundle written by 'disagg-tui export'")
    im.add_argument("--yes", "-y", action="store_true", help="add without asking")
    im.add_argument("--replace", action="store_true",
                    help="replace a profile or workload of the same name that differs (shipped or yours)")
    add_bundle_arguments(im)
    add_global_options(im)
    im.set_defaults(handler=run_import)


# --- export ----------------------------------------------------------------------------------------------------


def _read_object(path: Path) -> dict[str, Any] | None:
    """A JSON object of a run folder, bounded and strict; None when the file is absent; a one-line error naming the
    file when it is there but no regular file, not strict JSON, or not an object."""
    if not os.path.lexists(path):
        return None
    data = safeio.load_json(path, "run record")
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, got {type(data).__name__}", file=path)
    return data


#: a profile id or a topology as a run's plan.json may name it
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _read_plan(path: Path) -> dict[str, Any]:
    """A run's plan.json as the plan it describes (a damaged one is a one-line error naming it)."""
    data = _read_object(path)
    if data is None:
        return {}
    plan: dict[str, Any] = guarded(lambda: LaunchPlan.from_dict(data).to_dict(), path, "plan")
    for key in ("profile_id", "topology"):
        if not isinstance(plan.get(key), str) or not _NAME.fullmatch(plan[key]):
            raise InputError(f"expected a name (letters, digits, '.', '_', '-'; at most 128), got "
                             f"{shown(repr(plan.get(key)), 60)}", file=path, field=key)
    return plan


def _workload_of(run: Run) -> Workload | None:
    """The workload a run ran, from its workload.json (a damaged one is a one-line error naming it)."""
    path = run.path / "workload.json"
    if _read_object(path) is None:
        return None
    w = read_run_workload(run.path)
    if w is None:
        raise InputError("not a workload this version reads (a field of the wrong type or range)", file=path)
    return w


def _results(runs: list[Run], workloads: dict[str, Workload], gpus: int | None,
             goodput: dict[str, float] | None = None, repeats: int = 1) -> dict[str, Any]:
    done = [r for r in runs if r.meta.status == "complete" and r.summary]
    if not done:
        return {}
    cells = table.build_cells(done, goodput or None)
    rec = rec_mod.recommend(cells, workloads, gpus=gpus, slo=goodput or None, repeats=repeats)
    if rec.slo_derived:
        cells = table.build_cells(done, slo_by_workload=rec.slo)
    text = table.render_text(table.comparison_frame(cells))
    note = table.simulated_note(done)
    unlike = table.like_for_like_note(done)
    return {"simulated": any(r.simulated for r in done),
            "table": (note + "\n" if note else "") + text + ("\n" + unlike if unlike else ""),
            "rows": table.cell_rows(cells), "recommendation": rec.to_dict(),
            "runs": [r.id for r in done]}


def _profile(ctx: CliContext, profile_id: str) -> ModelProfile:
    try:
        return ctx.catalog.model(profile_id)
    except InputError:
        raise InputError(f"the profile {shown(profile_id, 80)!r} it used is no longer in your profiles",
                         hint="add the profile file back, then export again") from None


def run_export(args: argparse.Namespace, ctx: CliContext) -> int:
    layouts: list[tuple[str, dict[str, Any]]] = []
    workloads: dict[str, Workload] = {}
    diagnoses: list[dict[str, Any]] = []
    simulated = False
    for flag, value in (("--layout", args.layout), ("--run", args.run), ("--campaign", args.campaign)):
        if value is not None and not value.strip():  # '' is given, not absent: it names nothing
            raise InputError("empty: give a layout id, a run or a campaign name", field=flag)
    if args.layout is not None:
        rec = StateStore().read().get(args.layout)
        if rec is None:
            raise InputError(f"no layout {args.layout!r} on this host (see 'disagg-tui status')", field="--layout")
        profile = _profile(ctx, rec.profile_id)
        layouts.append((rec.topology, rec.plan))
        diagnoses = list(rec.diagnoses)
        simulated = rec.simulated
        runs = [r for r in (load_run(p) for p in find_runs()) if r.meta.layout_id == rec.id]
        source, source_id = "layout", rec.id
    else:
        if args.run is not None:
            dirs = find_runs([args.run])
            if len(dirs) != 1:
                raise InputError(f"{args.run!r} names {len(dirs)} runs: give one (CAMPAIGN/RUN), or --campaign",
                                 field="--run")
            runs = [load_run(dirs[0])]
            source, source_id = "run", runs[0].id
        else:
            d = Path(args.campaign)
            d = d if (d / CAMPAIGN_FILE).is_file() else paths.runs_dir() / args.campaign
            if not (d / CAMPAIGN_FILE).is_file():
                raise InputError(f"no campaign {args.campaign!r} (looked in {paths.runs_dir()})", field="--campaign")
            runs = campaign_runs(d)
            source, source_id = "campaign", d.name
        plans: dict[str, dict[str, Any]] = {}
        for r in runs:
            plan = _read_plan(r.path / "plan.json")
            if plan and r.meta.topology not in plans:
                plans[r.meta.topology or str(plan.get("topology"))] = plan
            simulated = simulated or r.simulated
        if not plans:
            raise InputError("its runs kept no plan (plan.json): nothing to launch from", field="--" + source)
        ids = {str(p.get("profile_id")) for p in plans.values()}
        if len(ids) != 1:
            raise InputError(f"its runs used several profiles ({', '.join(sorted(ids))})", field="--" + source)
        profile = _profile(ctx, ids.pop())
        layouts = list(plans.items())
    for r in runs:
        w = _workload_of(r)
        if w is not None:
            workloads.setdefault(w.name, w)
    spec = read_spec(runs[0].path.parent / CAMPAIGN_FILE) if runs and \
        os.path.lexists(runs[0].path.parent / CAMPAIGN_FILE) else None
    gpus = len(layouts[0][1].get("gpus") or []) or None
    results = _results(runs, workloads, gpus, spec.goodput if spec else None, spec.repeat if spec else 1)
    host = host_for_layout(ctx.host_options(), simulated, ctx.host)
    fp = host_fingerprint(host.facts)
    measured = [r.meta.fingerprint for r in runs if r.meta.fingerprint]
    if measured:
        server = measured[0].get("server") or {}
        fp["server_version"] = server.get("server_version") if isinstance(server, dict) else None
    data = build_bundle(source=source, source_id=source_id, profile=profile, layouts=layouts,
                        workloads=workloads, fingerprint=fp, results=results, diagnoses=diagnoses)
    out = Path(args.output)
    write_bundle(out, data)
    ctx.print(f"wrote {out}: profile {profile.id}, {len(layouts)} layout(s) "
              f"({', '.join(t for t, _ in layouts)}), {len(workloads)} workload(s), "
              f"{len(results.get('runs') or [])} run(s) in the results")
    if data["secrets_needed"]:
        ctx.print(f"secrets left out (the importer sets them): {', '.join(data['secrets_needed'])}")
    return EXIT_OK


def up_plan(request: LaunchRequest, ctx: CliContext) -> tuple[ModelProfile, LaunchPlan]:
    """``up --bundle``: the bundle's layout planned on this host (its flags and defaults: host, ports, GPUs, vllm),
    with what the allowlist lets the bundle add; says what the exporting host used instead and how this host
    differs."""
    assert request.bundle is not None
    bundle = load_bundle(Path(request.bundle), allow_env=request.allow_env)
    trust = check_trust(bundle, ctx.catalog.models, request.trust_remote_code)
    layout = bundle.layout(request.topology)
    # the whole bundle is checked, not only the layout launched: every layout's flags, knobs and fixes
    planned = {t: bp for t, bp, _ in bundle_plans(bundle, ctx, request.plan_options(), request.allow_env,
                                                  request.explicit_memory)}
    bp = planned.get(layout.topology) or plan_here(bundle, layout, ctx.host.facts, request.plan_options(),
                                                   allow_env=request.allow_env, explicit=request.explicit_memory)
    require_secrets(bp)
    for line in bp.warnings:
        ctx.warn(line)
    print_bundle_plan(bp, lambda line: print(line, file=ctx.err))
    if trust:
        print(trust, file=ctx.err)
    diff = fingerprint_diff(bundle.fingerprint, host_fingerprint(ctx.host.facts))
    if diff:
        ctx.warn("not like-for-like: this host differs from the bundle's (" + "; ".join(diff) + ")")
    else:
        print("this host matches the bundle's fingerprint", file=ctx.err)
    checks = preflight(bp.plan, ctx.host.facts, ctx.nvml_or_none())
    print("preflight on this host:", file=ctx.err)
    for c in checks:
        print("  " + c.line(), file=ctx.err)
    return bundle.profile, bp.plan


# --- import ----------------------------------------------------------------------------------------------------


_RESULT_LINES = 80


def _lines_of(text: Any, limit: int = _RESULT_LINES) -> list[str]:
    """Free text from a bundle as lines safe to print: control characters escaped, each line capped, at most
    ``limit`` lines (how many more were left out said)."""
    lines = str(text).splitlines()
    out = [shown(line, 240) for line in lines[:limit]]
    if len(lines) > limit:
        out.append(f"… {len(lines) - limit} more line(s) not shown")
    return out


def bundle_plans(bundle: Bundle, ctx: CliContext, options: PlanOptions, allow_env: Sequence[str],
                 explicit: Sequence[str] = ()) -> list[tuple[str, BundlePlan | None, str]]:
    """Each layout of the bundle planned on this host, or why it cannot be (PlanRefused: not enough GPUs here);
    an InputError (a flag, a variable, a knob or a fix this host does not take) refuses the whole bundle."""
    out: list[tuple[str, BundlePlan | None, str]] = []
    book = load_playbook()
    for lay in bundle.layouts:
        try:
            out.append((lay.topology, plan_here(bundle, lay, ctx.host.facts, options, allow_env=allow_env,
                                                explicit=explicit, book=book), ""))
        except PlanRefused as exc:
            out.append((lay.topology, None, exc.one_line()))
    return out


def print_bundle_plan(bp: BundlePlan, say: Any) -> None:
    if bp.exporter:
        say("# the exporting host used (this host decides these itself):")
        for line in bp.exporter:
            say(f"#   {line}")
    if bp.carried:
        say("# carried from the bundle (allowlisted flags and variables):")
        for line in bp.carried:
            say(f"#   {line}")


def describe(bundle: Bundle, ctx: CliContext, plans: list[tuple[str, BundlePlan | None, str]]) -> None:
    """What the bundle would run here, and how this host differs from the one it came from."""
    ctx.print(f"bundle {shown(bundle.path, 120)}: {bundle.source['kind']} {shown(bundle.source['id'], 80)}, made "
              f"{shown(bundle.created, 40)} by disagg-tui {shown(bundle.app_version, 40)}")
    ctx.print(f"profile {bundle.profile.id}: {shown(bundle.profile.title, 120)} ({shown(bundle.profile.model, 120)})")
    for topology, bp, why in plans:
        ctx.print("")
        if bp is None:
            ctx.print(f"# {topology}: cannot be planned on this host: {why}")
            continue
        for line in bp.warnings:
            ctx.warn(line)
        ctx.print(bp.plan.shell())
        print_bundle_plan(bp, ctx.print)
    if bundle.fixes:
        # a playbook fix is applied here only by this host's own entry (bundle_plan.plan_here): one the bundle lists
        # that no plan here applied is said to be only the exporting host's
        applied = {fix for _, bp, _ in plans if bp is not None for fix in bp.plan.fixes_applied}
        ctx.print("")
        ctx.print("fixes it carries:")
        for f in bundle.fixes:
            fix = f["source"].removeprefix("fix:") if f["source"].startswith("fix:") else None
            ctx.print(f"  {shown(f['change'], 120)}: {shown(f['reason'], 200)}"
                      + (" (not applied here)" if fix is not None and fix not in applied else ""))
    if bundle.workloads:
        ctx.print("")
        ctx.print("workloads: " + ", ".join(
            f"{w.name} ({w.input_len} in / {w.output_len} out, {w.num_prompts} prompts)"
            for w in bundle.workloads.values()))
    table_text = bundle.results.get("table")
    if table_text:
        ctx.print("")
        ctx.print("results it reports (measured on the bundle's host):")
        for line in _lines_of(table_text):
            ctx.print(line)
    diff = fingerprint_diff(bundle.fingerprint, host_fingerprint(ctx.host.facts))
    ctx.print("")
    if diff:
        ctx.print("NOT LIKE-FOR-LIKE: this host differs from the bundle's; its results may not hold here:")
        for line in diff[:40]:
            ctx.print(f"  {shown(line, 200)}")
    else:
        ctx.print("this host matches the bundle's fingerprint")
    missing = missing_secrets(bundle, os.environ)
    if bundle.secrets_needed:
        ctx.print(f"secrets it needs: {', '.join(shown(n, 60) for n in bundle.secrets_needed)}"
                  + (f" (not set here: {', '.join(shown(n, 60) for n in missing)})" if missing else " (set here)"))


def run_import(args: argparse.Namespace, ctx: CliContext) -> int:
    bundle = load_bundle(Path(args.file), allow_env=args.allow_env)
    catalog = ctx.catalog
    trust = check_trust(bundle, catalog.models, args.trust_remote_code)
    options = PlanOptions(vllm_executable=getattr(args, "vllm", None) or "vllm")
    describe(bundle, ctx, bundle_plans(bundle, ctx, options, args.allow_env))
    if trust:
        ctx.print(trust)
    changes = install_changes(bundle, catalog.models, catalog.workloads)
    ctx.print("")
    for c in changes:
        ctx.print(f"{c.what}: {'new here' if c.state == 'added' else c.state}"
                  + (f" ({c.where})" if c.where else ""))
        for line in c.diff[:60]:
            ctx.print(f"    {line}")
    # every check before anything is written (or asked): then the files are written all or nothing
    installation = prepare_install(bundle, catalog.models, catalog.workloads, replace=args.replace)
    if all(c.state == "already there" for c in changes):
        ctx.print("nothing to add: the profile and workloads are already here")
        _launch_hint(bundle, args, ctx)
        return EXIT_OK
    if not args.yes:
        if not sys.stdin.isatty():
            raise InputError("not a terminal: confirm with --yes to add the profile and workloads (nothing "
                             "written)", field="--yes")
        answer = input(f"add profile {bundle.profile.id} and {len(bundle.workloads)} workload(s) to "
                       f"{paths.user_profiles_dir()}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            ctx.print("nothing added")
            return EXIT_OK
    for line in installation.commit():
        ctx.print(line)
    _launch_hint(bundle, args, ctx)
    return EXIT_OK


def _launch_hint(bundle: Bundle, args: argparse.Namespace, ctx: CliContext) -> None:
    first = bundle.layout()
    ctx.print(f"launch it with: disagg-tui up --bundle {shlex.quote(args.file)} (or plan it afresh on this host: "
              f"disagg-tui plan --model {bundle.profile.id} --topology {first.topology})")
