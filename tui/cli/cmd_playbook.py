"""``disagg-tui diagnose``, ``disagg-tui playbook add|list|show`` and ``disagg-tui doctor``."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import Any

from tui.cli.common import launch_request, make_plan
from tui.cli.context import CliContext, add_global_options
from tui.core.errors import EXIT_FAILED, EXIT_OK, InputError, PlanRefused
from tui.core.plan.argtext import parse_gpu_list, parse_pairs
from tui.core.plan.preflight import FAIL, WARN
from tui.core.plan.request import add_plan_arguments
from tui.core.playbook import MatchContext, load_playbook
from tui.core.playbook.events import Diagnosis
from tui.core.playbook.learn import learn_line
from tui.core.playbook.loader import parse_playbook_file, shipped_playbook_path
from tui.core.playbook.model import SEVERITIES
from tui.core.playbook.offline import LogDiagnosis, check_log, diagnose_file, read_log_line
from tui.core.safeio import shown
from tui.core.topology import parse_topology
from tui.core.yamlio import dump

WRAP = 110
#: characters of a log line printed with its diagnosis (control characters escaped: a log's bytes never reach the
#: terminal as they are)
SHOWN_LINE = 1000


def register(sub: Any) -> None:
    _register_diagnose(sub)
    _register_playbook(sub)
    _register_doctor(sub)


# --- diagnose ------------------------------------------------------------------------------------------------


def _register_diagnose(sub: Any) -> None:
    p = sub.add_parser("diagnose", help="match saved server logs against the troubleshooting playbook",
                       description="Match saved vLLM server logs against the playbook: per match the entry, the line "
                                   "(number and text), the explanation and the fix; 'no known failure' when nothing "
                                   "of error or warning level matches. Exit 0 either way; 2 for unreadable input.")
    p.add_argument("files", nargs="+", metavar="LOG", type=Path, help="server log file(s)")
    p.add_argument("--json", action="store_true", help="print the diagnoses as JSON")
    p.add_argument("--model", "-m", metavar="M", help="the model profile the log is from (enables its conditions)")
    p.add_argument("--topology", "-t", metavar="T", help="the topology the log is from (tp2, dp2, 1p1d ...)")
    p.add_argument("--playbook", action="append", default=[], type=Path, metavar="FILE",
                   help="an extra playbook file on top of the shipped and your own (repeatable)")
    add_global_options(p)
    p.set_defaults(handler=run_diagnose)


def _context(args: argparse.Namespace, ctx: CliContext) -> MatchContext | None:
    if not args.model and args.topology is None:
        return None
    profile = ctx.catalog.model(args.model) if args.model else None
    topo = parse_topology(args.topology) if args.topology is not None else None
    return MatchContext.for_launch(profile, topo)


def run_diagnose(args: argparse.Namespace, ctx: CliContext) -> int:
    book = load_playbook(extra=args.playbook)
    context = _context(args, ctx)
    for path in args.files:  # every file a readable log, or exit 2 naming it (a FIFO or a folder at once)
        check_log(path)
    results = [diagnose_file(path, book, context=context) for path in args.files]  # read in pieces
    if args.json:
        ctx.print_json({"files": [r.to_dict() for r in results]})
        return EXIT_OK
    for r in results:
        _print_result(ctx, r)
    return EXIT_OK


def _wrap(label: str, text: str) -> str:
    return textwrap.fill(text, WRAP, initial_indent=f"  {label:<5} ", subsequent_indent=" " * 8)


def _print_result(ctx: CliContext, r: LogDiagnosis) -> None:
    state = "became ready" if r.ready else f"never became ready (last phase: {r.phase})"
    problems = r.problems
    verdict = (f"{len(problems)} known problem{'s' if len(problems) != 1 else ''}" if problems
               else "no known failure")
    ctx.print(f"== {r.source}: {verdict} ({r.lines} lines; {state})")
    for d in r.diagnoses:
        _print_diagnosis(ctx, d)


def _print_diagnosis(ctx: CliContext, d: Diagnosis) -> None:
    label = {"error": "ERROR", "warning": "WARN", "info": "note"}.get(d.severity, d.severity)
    ctx.print(f"{label} {d.entry_id}: {shown(d.title)}")
    if d.rule == "end":
        ctx.print(_wrap("when", d.detail))
        if d.line_no:
            ctx.print(f"  last  line {d.line_no}: {shown(d.line, SHOWN_LINE)}")
    else:
        ctx.print(f"  line  {d.line_no}: {shown(d.line, SHOWN_LINE)}")
    ctx.print(_wrap("why", shown(d.explanation, SHOWN_STRING)))
    ctx.print(_wrap("fix", shown(d.fix, SHOWN_STRING)))
    if d.fixable:
        ctx.print(f"        apply: disagg-tui up --model M --topology T --apply-fix {d.entry_id}"
                  + (" (or --apply-fix auto)" if d.auto else ""))


# --- playbook add | list | show ------------------------------------------------------------------------------


def _register_playbook(sub: Any) -> None:
    p = sub.add_parser("playbook", help="list, show and add troubleshooting playbook entries",
                       description="The troubleshooting playbook: the shipped entries plus your own "
                                   "(playbook.yaml in the config directory).")
    psub = p.add_subparsers(dest="playbook_command", metavar="ACTION", parser_class=type(p))
    psub.required = True

    ls = psub.add_parser("list", help="every entry: id, severity, fix, origin, title")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--playbook", action="append", default=[], type=Path, metavar="FILE",
                    help="an extra playbook file (repeatable)")
    add_global_options(ls)
    ls.set_defaults(handler=run_list)

    show = psub.add_parser("show", help="one entry in full")
    show.add_argument("entry_id", metavar="ID")
    show.add_argument("--json", action="store_true")
    show.add_argument("--playbook", action="append", default=[], type=Path, metavar="FILE",
                      help="an extra playbook file (repeatable)")
    add_global_options(show)
    show.set_defaults(handler=run_show)

    add = psub.add_parser(
        "add", help="turn a log line into a new entry of your playbook",
        description="Turn a log line into a playbook entry: numbers, hex ids, paths, pids, ports, timestamps and "
                    "the vLLM prefix are generalised, the rest is kept literally. It is saved to your playbook "
                    "(created with a header when missing) and recognised from the next start on. Flag values that "
                    "start with '-' need '=': --add-arg='--enforce-eager', --remove-arg=--foo.")
    src = add.add_mutually_exclusive_group(required=True)
    src.add_argument("--from", dest="from_ref", metavar="LOG:LINE", help="the line LINE (1-based) of the log LOG")
    src.add_argument("--text", metavar="TEXT", help="the log line itself")
    add.add_argument("--title", required=True, metavar="T", help="one line naming the failure")
    add.add_argument("--id", dest="entry_id", metavar="ID", help="entry id (default: from the title)")
    add.add_argument("--explain", metavar="TEXT", help="what happened and why, in plain words")
    add.add_argument("--severity", choices=SEVERITIES, default="error")
    add.add_argument("--priority", type=int, metavar="N",
                     help="0-100 (default: 50, or just above an entry that already claims the line)")
    add.add_argument("--set-env", action="append", default=[], metavar="K=V", help="fix: set a variable")
    add.add_argument("--unset-env", action="append", default=[], metavar="K", help="fix: unset a variable")
    add.add_argument("--add-arg", action="append", default=[], metavar="ARG",
                     help="fix: add a flag with its value, e.g. --add-arg='--max-num-seqs 256'")
    add.add_argument("--remove-arg", action="append", default=[], metavar="ARG",
                     help="fix: remove a flag (and its value), e.g. --remove-arg=--enforce-eager")
    add.add_argument("--not-fixable", metavar="TEXT", help="what to do when no flag or variable fixes it")
    add.add_argument("--auto", action="store_true", help="the fix is safe to apply automatically")
    add_global_options(add)
    add.set_defaults(handler=run_add)


def _origin(entry_source: str, entry_id: str, shipped_ids: set[str]) -> str:
    if entry_source == str(shipped_playbook_path()):
        return "shipped"
    return "yours, replaces shipped" if entry_id in shipped_ids else "yours"


def run_list(args: argparse.Namespace, ctx: CliContext) -> int:
    book = load_playbook(extra=args.playbook)
    shipped_ids = {e.id for e in parse_playbook_file(shipped_playbook_path())}
    rows: list[dict[str, Any]] = []
    for e in sorted(book.entries, key=lambda e: e.id):
        fix = "auto" if e.auto else "yes" if e.fixable else "advice" if e.not_fixable else "-"
        rows.append({"id": e.id, "severity": e.severity, "priority": e.priority, "fix": fix,
                     "origin": _origin(e.source, e.id, shipped_ids), "title": e.title, "source": e.source,
                     "line": e.line})
    if args.json:
        ctx.print_json({"sources": list(book.sources), "entries": rows})
        return EXIT_OK
    width = max(len(r["id"]) for r in rows) if rows else 2
    ctx.print(f"{'ID':<{width}}  {'SEVERITY':<8} {'FIX':<6} {'ORIGIN':<8} TITLE")
    for r in rows:
        ctx.print(f"{r['id']:<{width}}  {r['severity']:<8} {r['fix']:<6} {r['origin'].split(',')[0]:<8} "
                  f"{shown(r['title'])}")
    ctx.print(f"{len(rows)} entries from {', '.join(book.sources)}")
    return EXIT_OK


def run_show(args: argparse.Namespace, ctx: CliContext) -> int:
    book = load_playbook(extra=args.playbook)
    entry = book.entry(args.entry_id)
    data = entry.to_data()
    if args.json:
        ctx.print_json({**data, "source": entry.source, "line": entry.line})
        return EXIT_OK
    ctx.print(f"# {entry.source}:{entry.line}")
    ctx.print(dump(_capped(data)).rstrip())
    return EXIT_OK


def _capped(data: Any) -> Any:
    """An entry's data with every string as :func:`shown` prints it (at most SHOWN_STRING characters, control
    characters escaped), for the text of ``playbook show``."""
    if isinstance(data, str):
        return shown(data, SHOWN_STRING)
    if isinstance(data, dict):
        return {k: _capped(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_capped(v) for v in data]
    return data


#: characters of one string ``playbook show`` prints (a pattern has at most 1,000; an explanation may be longer)
SHOWN_STRING = 2000


def run_add(args: argparse.Namespace, ctx: CliContext) -> int:
    if args.from_ref:
        path_text, sep, num = args.from_ref.rpartition(":")
        if not sep or not path_text or not num.isdigit() or len(num) > 12:
            raise InputError(f"expected LOG:LINE, got {shown(repr(args.from_ref), 120)}", field="--from")
        line = read_log_line(Path(path_text), int(num))
        origin = f"{path_text}:{num}"
        if not line.strip():
            raise InputError("the line is blank: give the number of a line that states the error", file=path_text,
                             line=int(num), field="--from")
    else:
        line = args.text
        origin = ""
    try:
        learned = learn_line(
            line, title=args.title, entry_id=args.entry_id, explain=args.explain, severity=args.severity,
            set_env=parse_pairs(args.set_env, "--set-env"), unset_env=args.unset_env, add_args=args.add_arg,
            remove_args=args.remove_arg, not_fixable=args.not_fixable, auto=args.auto, origin=origin,
            priority=args.priority)
    except InputError as err:
        if not args.from_ref or err.file is not None or err.field not in ("--text", None):
            raise
        # the line came from a log: the error names that log and line, not the --text it stands for
        raise InputError(err.message, file=path_text, line=int(num), field="--from", hint=err.hint) from None
    for w in learned.warnings:
        ctx.warn(w)
    entry, target, claimer = learned.entry, learned.path, learned.claimer
    ctx.print(f"added {entry.id} to {target}")
    ctx.print(f"  pattern: {entry.lines.patterns[0].text if entry.lines else ''}")
    if claimer is not None:
        ctx.print(f"  it takes this line from {claimer.id} (priority {entry.priority} > {claimer.priority})")
    ctx.print(f"  fix: {entry.fix_text()}")
    return EXIT_OK


# --- doctor --------------------------------------------------------------------------------------------------


def _register_doctor(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check this host before launching: driver, GPUs, toolchain, vLLM, ports, "
                                      "caches, model files, known issues",
                       description="Check the host (and optionally a model and topology) before a launch. Each "
                                   "check passes, warns or fails with a one-line reason; exit 1 when one fails.")
    add_plan_arguments(p, required=False, model_help="profile id or path: adds model files and known issues",
                       topology_help="tp<N>, dp<N>, <X>p<Y>d ...: checks that layout's GPUs, links, NIXL and ports "
                                     "(with --model: its full plan, with the plan options as for 'up')")
    p.add_argument("--json", action="store_true")
    add_global_options(p)
    p.set_defaults(handler=run_doctor)


def run_doctor(args: argparse.Namespace, ctx: CliContext) -> int:
    from tui.core.playbook.doctor import doctor

    parse_gpu_list(args.gpus)  # a bad list is refused even when no layout is checked
    host = ctx.host
    facts = host.facts
    profile = ctx.catalog.model(args.model) if args.model else None
    topo = parse_topology(args.topology) if args.topology is not None else None
    reason = host.notes[0] if host.simulated and not getattr(args, "sim", False) and host.notes else None
    launch = None
    refused = None
    if profile is not None and topo is not None:
        try:
            launch = make_plan(launch_request(args, ctx), ctx)[1]
        except PlanRefused as exc:
            refused = exc.one_line()
    from tui.core.launch.history import StartupHistory

    checks = doctor(facts, ctx.nvml_or_none(), profile=profile, topology=topo, plan=launch, plan_refused=refused,
                    simulated_reason=reason, history=StartupHistory())
    failed = [c for c in checks if c.status == FAIL]
    warned = [c for c in checks if c.status == WARN]
    if args.json:
        ctx.print_json({"host": facts.label, "simulated": facts.simulated, "checks": [c.to_dict() for c in checks],
                        "summary": {"pass": len(checks) - len(failed) - len(warned), "warn": len(warned),
                                    "fail": len(failed)}})
    else:
        ctx.print(f"doctor: {facts.label}")
        for c in checks:
            ctx.print(c.line())
        ctx.print(f"{len(checks)} checks: {len(checks) - len(failed) - len(warned)} ok, {len(warned)} warnings, "
                  f"{len(failed)} failed")
    return EXIT_FAILED if failed else EXIT_OK
