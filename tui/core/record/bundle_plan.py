"""A bundle's layout planned on this host: the planner's own output, plus what the allowlist lets the bundle add.

A bundle carries the plan its exporting host ran (every argv and environment variable). None of it is run as it
is. :func:`plan_here` plans the bundle's profile and topology with this host's planner, flags and defaults (host,
ports, GPUs, the vllm executable), then compares each server of the bundle's plan with the server of the same
name here:

- what this host decides (placement flags and variables, the executable, the model folder, the exporting host's
  own workarounds such as ``VLLM_USE_FLASHINFER_SAMPLER=0`` for a host without nvcc) is shown as
  "the exporting host used …" and not carried;
- every other flag or variable the bundle's server has and this one lacks (or has with another value) is carried
  only if :mod:`tui.core.plan.allowlist` names it with a value of its shape, or, for a variable, the operator
  passed ``--allow-env NAME``; anything else is an InputError naming the bundle's line and field;
- a secret's value is never in a bundle (``<redacted>``): the server takes it from this host's environment, and a
  missing one is an InputError naming the variable;
- its knobs (``plan.knobs``) are planned again from this host's knob catalogue, as ``up --knob`` does (a knob or
  value this host does not know is an InputError naming ``plan.knobs.NAME``);
- its fixes (``plan.fixes_applied``) are applied again from this host's playbook, as ``up --apply-fix`` does, and
  only then recorded as applied: an id this host's playbook does not have is an InputError naming
  ``plan.fixes_applied[J]``; a fix whose values came from the exporting host's log (``{estimated}``) is not
  applied here (a note says so), its flags reach the plan only as the allowlist lets them;
- an address that binds every interface (``0.0.0.0``, ``::``, ``0``... :func:`tui.core.netaddr.is_wildcard`) is
  a warning naming the field: this host binds its own ``--host`` (127.0.0.1 by default).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace

from tui.core.errors import InputError
from tui.core.netaddr import is_wildcard
from tui.core.plan.allowlist import PLACEMENT_ENV, PLACEMENT_FLAGS, Allowlist, load_allowlist, split_flags
from tui.core.plan.hostfacts import HostFacts
from tui.core.plan.knobs import KnobCatalog, check_request_knobs
from tui.core.plan.planner import PlanOptions, apply_fix, check_plan, plan
from tui.core.plan.ports import DEFAULT_HOST
from tui.core.plan.spec import LaunchPlan, ServerSpec
from tui.core.playbook.book import Playbook, load_playbook
from tui.core.playbook.loader import is_entry_id
from tui.core.record.bundle import Bundle, BundleLayout
from tui.core.redact import REDACTED, is_secret_env
from tui.core.safeio import shown

#: memory flags whose bundle value is planned here (so the fit check sees it) when every server has the same one
_PLANNED_FLAGS = {"--gpu-memory-utilization": "gpu_memory_utilization", "--max-model-len": "max_model_len"}


@dataclass(frozen=True, slots=True)
class BundlePlan:
    """The plan this host runs for a bundle's layout, and how it came to be."""

    plan: LaunchPlan
    carried: tuple[str, ...]  # what the bundle adds to this host's plan ("decode-0: --max-num-seqs 64")
    exporter: tuple[str, ...]  # what the exporting host used that this host decides itself
    secrets: tuple[str, ...]  # variables the servers take from this host's environment
    #: what the operator must know before it runs here: a wildcard address the bundle bound, a fix not applied
    warnings: tuple[str, ...] = ()


def _flag_map(argv: tuple[str, ...], allow: Allowlist, err: InputError) -> dict[str, str | None]:
    def error(message: str) -> InputError:
        return InputError(message, file=err.file, line=err.line, field=err.field)

    return dict(split_flags(argv[3:], allow, error=error))


def _shown_flag(flag: str, value: str | None) -> str:
    return flag if value is None else f"{flag} {shlex.quote(value)}"


def plan_here(bundle: Bundle, layout: BundleLayout, facts: HostFacts, options: PlanOptions, *,
              allow_env: Collection[str] = (), allow: Allowlist | None = None,
              explicit: Collection[str] = (), book: Playbook | None = None,
              knobs: KnobCatalog | None = None) -> BundlePlan:
    """Plan ``layout`` of ``bundle`` on this host (see the module's docstring). ``explicit``: the PlanOptions
    fields the operator set on this host's command line (those win over the bundle's values); ``book`` and
    ``knobs``: this host's playbook and knob catalogue (read from their files when not given)."""
    rules = allow or load_allowlist()
    theirs = layout.plan
    exporter: list[str] = []
    carried: list[str] = []

    def where(server: str, key: str) -> InputError:
        line = layout.server_lines.get(f"{server}.{key}", layout.server_lines.get(server, layout.line))
        index = next((i for i, s in enumerate(theirs.servers) if s.name == server), 0)
        return InputError("", file=bundle.path, line=line, field=f"layouts[{layout.index}].plan.servers[{index}]."
                                                                  f"{key}")

    def refuse(server: str, key: str, message: str) -> InputError:
        base = where(server, key)
        return InputError(message, file=base.file, line=base.line, field=base.field)

    def refuser(server: str, key: str) -> Callable[[str], InputError]:
        return lambda message: refuse(server, key, message)

    # the memory figures the bundle ran with, planned here when they are uniform (the fit check sees them)
    opts = options
    for flag, attr in _PLANNED_FLAGS.items():
        values = {_flag_map(s.argv, rules, where(s.name, "argv")).get(flag) for s in theirs.servers}
        if len(values) == 1 and attr not in explicit and (value := values.pop()) is not None:
            if rules.flags[flag].check(value) is not None:
                raise refuse(theirs.servers[0].name, "argv", f"{flag} {shown(value, 40)}: "
                             f"{rules.flags[flag].check(value)}")
            opts = replace(opts, gpu_memory_utilization=float(value)) if attr == "gpu_memory_utilization" else \
                replace(opts, max_model_len=int(value))
    ours = plan(bundle.profile, layout.topology, facts, opts)
    ours, by_knob = _knobs_here(bundle, layout, ours, facts, knobs, rules)
    ours, notes = _fixes_here(bundle, layout, ours, facts, book)

    mine = {s.name: s for s in ours.servers}
    if [s.name for s in theirs.servers] != [s.name for s in ours.servers]:
        raise InputError(f"its {layout.topology} plan has servers {', '.join(s.name for s in theirs.servers)}; "
                         f"{layout.topology} here has {', '.join(mine)}", file=bundle.path, line=layout.line,
                         field=f"layouts[{layout.index}].plan.servers")
    host_made = {w.change for w in theirs.workarounds if w.source == "host"}
    secrets: set[str] = set()
    servers: list[ServerSpec] = []
    for s in theirs.servers:
        here = mine[s.name]
        if len(s.argv) < 3 or s.argv[1] != "serve":
            raise refuse(s.name, "argv", "a server's command line is 'vllm serve MODEL [flags]': a bundle carries "
                                         "no program or argv of its own")
        if s.argv[0] != "vllm" and s.argv[0] != ours.vllm_executable:
            exporter.append(f"{s.name}: ran {shown(s.argv[0], 80)} (here: {ours.vllm_executable})")
        if s.argv[2] != here.argv[2]:
            exporter.append(f"{s.name}: served {shown(s.argv[2], 80)} (here: {here.argv[2]}; --model-path DIR "
                            "serves a folder of this host)")
        if (s.host, s.port) != (here.host, here.port):
            exporter.append(f"{s.name}: bound {s.host}:{s.port} (here: {here.host}:{here.port})")
        if s.gpus != here.gpus:
            exporter.append(f"{s.name}: GPU {','.join(map(str, s.gpus))} (here: {','.join(map(str, here.gpus))})")
        their_flags = _flag_map(s.argv, rules, where(s.name, "argv"))
        my_flags = _flag_map(here.argv, rules, where(s.name, "argv"))
        add: list[tuple[str, str | None]] = []
        for flag, value in their_flags.items():
            if flag in my_flags and my_flags[flag] == value:
                continue
            text = _shown_flag(flag, value)
            if flag in PLACEMENT_FLAGS or (flag in _PLANNED_FLAGS and flag in my_flags and \
                    _PLANNED_FLAGS[flag] in explicit):
                if flag not in ("--host", "--port"):  # host and port are said once per server above
                    exporter.append(f"{s.name}: {text} (here: {_shown_flag(flag, my_flags.get(flag))})")
                continue
            if text in host_made or flag in host_made:
                exporter.append(f"{s.name}: {text} (a workaround the exporting host needed; this host's planner "
                                "decides its own)")
                continue
            if (s.role, flag) in by_knob:
                exporter.append(f"{s.name}: {text} (here: {_shown_flag(flag, my_flags.get(flag))}, knob "
                                f"{by_knob[s.role, flag]} from this host's catalogue)")
                continue
            rules.check_args([flag] if value is None else [flag, value],
                             error=refuser(s.name, "argv"))
            add.append((flag, value))
        env = dict(here.env)
        for key, value in s.env:
            if env.get(key) == value:
                continue
            if key in PLACEMENT_ENV:
                exporter.append(f"{s.name}: {key}={shown(value, 40)} (here: {env.get(key, 'unset')})")
                continue
            if (s.role, key) in by_knob:
                exporter.append(f"{s.name}: {key}={shown(value, 40)} (here: {env.get(key, 'unset')}, knob "
                                f"{by_knob[s.role, key]} from this host's catalogue)")
                continue
            if f"{key}={value}" in host_made:
                exporter.append(f"{s.name}: {key}={value} (a workaround the exporting host needed; this host's "
                                "planner decides its own)")
                continue
            rules.check_env(key, value, allow_env=allow_env, error=refuser(s.name, f"env.{key}"))
            if REDACTED in value or is_secret_env(key):
                secrets.add(key)  # from this host's environment: never written into the plan
                continue
            env[key] = value
            carried.append(f"{s.name}: {key}={value}")
        argv = list(here.argv)
        for flag, value in add:
            argv = _without(argv, flag)
            argv += [flag] if value is None else [flag, value]
            carried.append(f"{s.name}: {_shown_flag(flag, value)}")
        servers.append(replace(here, argv=tuple(argv), env=tuple(env.items())))
    result = replace(ours, servers=tuple(servers))  # its knobs and fixes: those this host planned and applied
    check_plan(result)
    warnings = [*_wildcards(bundle, layout, options, rules), *notes]
    return BundlePlan(plan=result, carried=tuple(carried), exporter=tuple(dict.fromkeys(exporter)),
                      secrets=tuple(sorted(secrets)), warnings=tuple(warnings))


def _at(bundle: Bundle, layout: BundleLayout, key: str, field: str) -> tuple[int | None, str]:
    """The line (``server_lines[key]``, else the layout's) and the full field name of a field of ``layout``."""
    return layout.server_lines.get(key, layout.line), f"layouts[{layout.index}].plan.{field}"


def _knobs_here(bundle: Bundle, layout: BundleLayout, ours: LaunchPlan, facts: HostFacts,
                catalog: KnobCatalog | None, rules: Allowlist) -> tuple[LaunchPlan, dict[tuple[str, str], str]]:
    """``ours`` with the bundle layout's knobs applied from this host's catalogue (as ``up --knob`` applies them),
    and what they decide: (role, flag or variable) → the knob (``attn=triton``). What a knob adds is this host's
    catalogue's word, never the bundle's argv."""
    pairs = layout.plan.knobs
    if not pairs:
        return ours, {}
    cat = catalog or KnobCatalog.load()
    decided: dict[tuple[str, str], str] = {}
    for key, value in pairs:
        line, field = _at(bundle, layout, f"plan.knobs.{key}", f"knobs.{key}")
        try:
            (setting,) = cat.settings([(key, value)], where=field)
            names = [f for f, _ in split_flags(setting.choice.words(), rules, error=InputError)]
        except InputError as exc:
            raise InputError(f"{exc.message} (this host's knob catalogue)", file=bundle.path, line=line,
                             field=field) from None
        names += [k for k, _ in setting.choice.env()]
        decided.update({(role, n): f"{key}={value}" for role in setting.roles() for n in names})
    return check_request_knobs(cat, pairs, bundle.profile, ours, facts), decided


def _fixes_here(bundle: Bundle, layout: BundleLayout, ours: LaunchPlan, facts: HostFacts,
                book: Playbook | None) -> tuple[LaunchPlan, list[str]]:
    """``ours`` with the bundle layout's fixes applied from this host's playbook (as ``up --apply-fix ID`` applies
    them), and a note for each fix not applied here. Only a fix this host applied is recorded as applied (the
    state file, ``status``, a restart's ``--apply-fix``)."""
    ids = layout.plan.fixes_applied
    if not ids:
        return ours, []
    pb = book or load_playbook()
    arches = {g.arch for i in ours.gpus if (g := facts.gpu(i)) is not None}
    arch = arches.pop() if len(arches) == 1 else None
    notes: list[str] = []
    for j, fix_id in enumerate(ids):
        line, field = _at(bundle, layout, f"plan.fixes_applied[{j}]", f"fixes_applied[{j}]")

        def refuse(message: str, line: int | None = line, field: str = field) -> InputError:
            return InputError(message, file=bundle.path, line=line, field=field)

        if not is_entry_id(fix_id):
            raise refuse(f"{shown(fix_id, 60)!r} is not a playbook entry id (lowercase letters, digits, '.', '-', "
                         "'_')")
        if fix_id in ids[:j]:
            raise refuse(f"{fix_id} is listed twice")
        entry = pb.get(fix_id)
        if entry is None:
            raise refuse(f"fix {fix_id} is not in this host's playbook: a fix is recorded as applied only where "
                         "this host's own entry applies it (add the entry to your playbook.yaml, or remove the "
                         "fix from the bundle)")
        if entry.fix is None or not entry.fixable:
            raise refuse(f"playbook entry {fix_id} has no fix on this host: it cannot have been applied")
        if entry.fix.placeholders():
            notes.append(f"{field}: {fix_id} is not applied here: its values ("
                         f"{', '.join(sorted(entry.fix.placeholders()))}) came from the exporting host's log; the "
                         "flags it set are carried only as the allowlist lets them")
            continue
        pf = entry.plan_fix(None, arch)
        assert pf is not None  # fixable
        ours = apply_fix(ours, pf, fix_id)
    return ours, notes


def _wildcards(bundle: Bundle, layout: BundleLayout, options: PlanOptions, rules: Allowlist) -> list[str]:
    """One warning per layout whose plan binds every interface (a server's or the proxy's host, a ``--host`` in
    an argv, a NIXL side-channel host): named by its field; this host binds its own address."""
    theirs = layout.plan
    found: list[tuple[str, str, int | None]] = []
    for j, s in enumerate(theirs.servers):
        flags = _flag_map(s.argv, rules, InputError(""))
        for key, value in ((f"{s.name}.host", s.host), (f"{s.name}.argv", flags.get("--host")),
                           (f"{s.name}.env.VLLM_NIXL_SIDE_CHANNEL_HOST", dict(s.env).get(
                               "VLLM_NIXL_SIDE_CHANNEL_HOST"))):
            if value is not None and is_wildcard(value):
                field = key.replace(s.name, f"servers[{j}]", 1)
                found.append((field, value, layout.server_lines.get(key, layout.server_lines.get(s.name))))
    if theirs.proxy is not None and is_wildcard(theirs.proxy.host):
        found.append(("proxy.host", theirs.proxy.host, layout.server_lines.get("plan.proxy.host")))
    if not found:
        return []
    field, value, line = found[0]
    here = options.host if options.host != DEFAULT_HOST else f"{DEFAULT_HOST} unless you pass --host"
    where = f"{bundle.path}" + (f":{line or layout.line}" if (line or layout.line) else "")
    more = f" (and {len(found) - 1} more field(s))" if len(found) > 1 else ""
    return [f"{shown(where, 200)}: field 'layouts[{layout.index}].plan.{field}': the bundle binds "
            f"{shown(value or '', 60) or 'the empty address'}, every interface{more}; this host binds {here}"]


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` and its value (never the executable, ``serve`` or the model)."""
    out = argv[:3]
    i = 3
    while i < len(argv):
        name = argv[i].split("=", 1)[0]
        if name.startswith("--") and "--" + name[2:].replace("_", "-") == flag:
            i += 1 if "=" in argv[i] or i + 1 >= len(argv) or argv[i + 1].startswith("--") else 2
            continue
        out.append(argv[i])
        i += 1
    return out


def require_secrets(bp: BundlePlan, environ: Mapping[str, str] | None = None) -> None:
    """InputError naming the secrets the plan takes from this host's environment that are not set there."""
    env = os.environ if environ is None else environ
    missing = [k for k in bp.secrets if not env.get(k)]
    if missing:
        raise InputError(f"the bundle's plan needs {', '.join(missing)}: set {'it' if len(missing) == 1 else 'them'}"
                         " in the environment (secrets are never carried in a bundle)", field="--bundle")
