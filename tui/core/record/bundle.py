"""Profile bundles: one YAML that hands a working setup to the next person.

A bundle carries the model profile, each layout's topology and exact plan (every argv and environment variable),
the fixes applied and why, the workloads, the versions and fingerprint of the host it ran on, and the results
summary with the recommendation. Secrets never leave: every value of a secret variable, ``--api-key``-style flag
or header is the marker ``<redacted>``, and ``secrets_needed`` names the variables to set before launching.

:func:`load_bundle` validates strictly: each error is one line naming the file, the line and the field
(``bundle.yaml:12: field 'layouts[0].plan.servers[1].port': expected an integer, got 'x'``).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tui import __version__
from tui.core import paths
from tui.core.errors import InputError
from tui.core.models import MAX_ID, ModelProfile, Workload, parse_model_profile, parse_workload
from tui.core.plan.allowlist import Allowlist, load_allowlist
from tui.core.plan.spec import LaunchPlan
from tui.core.redact import REDACTED, Redactor
from tui.core.safeio import guarded, shown
from tui.core.safewrite import write_atomic
from tui.core.topology import parse_topology
from tui.core.yamlio import Fields, LDict, LList, dump, load_file, plain

BUNDLE_FORMAT = "disagg-tui-bundle"
BUNDLE_VERSION = 1
SOURCES = ("layout", "run", "campaign")
_WORKLOAD_KEYS = ("input_len", "output_len", "num_prompts", "request_rate", "burstiness", "max_concurrency",
                  "range_ratio", "prefix_len", "ignore_eos", "seed", "description")


@dataclass
class BundleLayout:
    topology: str
    plan: LaunchPlan  # what the exporting host ran: shown and compared, never run as it is (bundle_plan.plan_here)
    plan_dict: dict[str, Any]
    index: int = 0
    line: int | None = None
    #: lines of its servers (``name``), their argv (``name.argv``) and env keys (``name.env.KEY``), and of the plan's
    #: own fields (``plan.knobs.NAME``, ``plan.fixes_applied[J]``, ``plan.proxy.host``)
    server_lines: dict[str, int] = field(default_factory=dict)


@dataclass
class Bundle:
    path: Path
    source: dict[str, str]
    created: str
    app_version: str
    profile: ModelProfile
    profile_data: dict[str, Any]
    layouts: list[BundleLayout]
    workloads: dict[str, Workload]
    workload_data: dict[str, dict[str, Any]]
    fingerprint: dict[str, Any]
    fixes: list[dict[str, str]] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    secrets_needed: list[str] = field(default_factory=list)
    #: the line of ``profile.vllm.trust_remote_code`` when the profile asks for it (accepted only on this host's say)
    trust_remote_code_line: int | None = None

    def layout(self, topology: str | None = None) -> BundleLayout:
        """The layout of ``topology``; without one, the one that won max throughput on most workloads (else the
        first)."""
        if topology is not None:
            for lay in self.layouts:
                if lay.topology == topology:
                    return lay
            raise InputError(f"the bundle has no {topology} layout (it has: "
                             f"{', '.join(x.topology for x in self.layouts)})", field="--topology")
        # the bundle's results are a teammate's file: each level is taken only where it is the mapping it should be
        rec = self.results.get("recommendation") if isinstance(self.results, dict) else None
        objectives = rec.get("objectives") if isinstance(rec, dict) else None
        verdicts = objectives.get("max_throughput") if isinstance(objectives, dict) else None
        wins: dict[str, int] = {}
        for v in verdicts if isinstance(verdicts, list) else []:
            if isinstance(v, dict) and v.get("winner"):
                wins[str(v["winner"])] = wins.get(str(v["winner"]), 0) + 1
        for topo in sorted(wins, key=lambda t: -wins[t]):
            for lay in self.layouts:
                if lay.topology == topo:
                    return lay
        return self.layouts[0]


# --- writing ---------------------------------------------------------------------------------------------------


def workload_to_dict(w: Workload) -> dict[str, Any]:
    d = asdict(w)
    out = {k: d[k] for k in _WORKLOAD_KEYS if d.get(k) not in (None, "")}
    out["request_rate"] = "inf" if math.isinf(w.request_rate) else w.request_rate
    return out


def profile_data(profile: ModelProfile) -> dict[str, Any]:
    """The profile as its file has it, with ``model`` as it was resolved here (a bundle never carries a
    ``${VAR}`` for the importing host to expand), else as the app holds it."""
    if profile.source and Path(profile.source).is_file():
        try:
            raw = load_file(Path(profile.source))
            if isinstance(raw, dict) and raw.get("id") == profile.id:
                out: dict[str, Any] = plain(raw)
                out["model"] = profile.model
                return out
        except InputError:
            pass
    out = _drop_none(profile.to_dict())
    return out


def plan_secret_names(plans: Sequence[Mapping[str, Any]], profile: Mapping[str, Any]) -> list[str]:
    """The environment variables of the plans (and the profile's env) whose value is redacted: what the importer
    must set. Only real variables of the plan, never names found in free text."""
    names: set[str] = set()
    envs: list[Any] = [((profile.get("vllm") or {}) if isinstance(profile.get("vllm"), dict) else {}).get("env")]
    for p in plans:
        envs += [srv.get("env") for srv in p.get("servers") or [] if isinstance(srv, dict)]
    for env in envs:
        if isinstance(env, dict):
            names.update(str(k) for k, v in env.items() if isinstance(v, str) and REDACTED in v)
    return sorted(names)


def fixes_of(plan: Mapping[str, Any], diagnoses: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, str]]:
    """The changes a plan carries and why: the planner's workarounds, the playbook fixes applied (with the
    diagnosis that called for each where it is known)."""
    out = [{"change": str(w.get("change", "")), "reason": str(w.get("reason", "")),
            "source": str(w.get("source", "host"))} for w in plan.get("workarounds") or []]
    why = {str(d.get("entry_id")): str(d.get("title", "")) for d in diagnoses}
    for entry in plan.get("fixes_applied") or []:
        out.append({"change": f"playbook fix {entry}", "reason": why.get(str(entry), "applied when the layout was "
                                                                                   "started"),
                    "source": f"fix:{entry}"})
    return out


def build_bundle(*, source: str, source_id: str, profile: ModelProfile,
                 layouts: Sequence[tuple[str, Mapping[str, Any]]], workloads: Mapping[str, Workload],
                 fingerprint: Mapping[str, Any],
                 results: Mapping[str, Any] | None = None, diagnoses: Sequence[Mapping[str, Any]] = (),
                 redactor: Redactor | None = None) -> dict[str, Any]:
    """The bundle as plain data, secrets redacted."""
    if source not in SOURCES:
        raise ValueError(source)
    red = redactor or Redactor()
    fixes: list[dict[str, str]] = []
    for _, plan in layouts:
        for f in fixes_of(plan, diagnoses):
            if f not in fixes:
                fixes.append(f)
    data: dict[str, Any] = {
        "bundle": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "app_version": __version__,
        "source": {"kind": source, "id": source_id},
        "profile": profile_data(profile),
        "layouts": [{"topology": t, "plan": plain(dict(p))} for t, p in layouts],
        "fixes": fixes,
        "workloads": {name: workload_to_dict(w) for name, w in workloads.items()},
        "fingerprint": plain(dict(fingerprint)),
        "results": plain(dict(results or {})),
    }
    data = red.value(data)
    data["secrets_needed"] = plan_secret_names([lay["plan"] for lay in data["layouts"]], data["profile"])
    return data


def write_bundle(path: Path, data: Mapping[str, Any]) -> None:
    text = ("# disagg-tui bundle: a working setup to hand on. 'disagg-tui import FILE' adds its profile and "
            "workloads;\n# 'disagg-tui up --bundle FILE' launches its plan. Secrets are <redacted>: see "
            "secrets_needed.\n") + dump(dict(data))
    # all or nothing, never through a symlink planted at -o (a teammate's bundle folder on a shared host); a
    # bundle is handed on, so it is readable as the umask allows (its secrets are <redacted>)
    write_atomic(path, text, mode=0o644, root=paths.root_for(path))


# --- reading ---------------------------------------------------------------------------------------------------


_SOURCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}\Z")
_WORKLOAD_NAME = re.compile(rf"[a-z0-9][a-z0-9._-]{{0,{MAX_ID - 1}}}\Z")


def _vet_profile(raw: Any, path: Path, rules: Allowlist, allow_env: Collection[str]) -> int | None:
    """Refuse a bundle profile's serve settings that the allowlist does not name (its ``vllm.args``/``env``, its
    overrides' ``args``/``env``, served name and load format), each naming its line and field; the line of its
    ``trust_remote_code: true``, if it asks for it."""
    blocks: list[tuple[str, Any]] = [("profile.vllm", raw.get("vllm"))]
    overrides = raw.get("overrides")
    if isinstance(overrides, dict):
        blocks += [(f"profile.overrides.{k}", v) for k, v in overrides.items()]
    trust_line = None
    for name, block in blocks:
        if not isinstance(block, dict):
            continue

        def line(key: str, b: Any = block) -> int | None:
            return b.line_of(key) if isinstance(b, LDict) else None

        def err(key: str, n: str = name) -> Any:
            return lambda m: InputError(m, file=path, line=line(key), field=f"{n}.{key}")

        args = block.get("args") or []
        rules.check_args([str(a) for a in args], error=err("args"))
        for k, v in (block.get("env") or {}).items():
            rules.check_env(str(k), str(v), allow_env=allow_env, error=err(f"env.{k}"))
        for key, flag in (("served_model_name", "--served-model-name"), ("load_format", "--load-format")):
            if block.get(key) is not None:
                rules.check_args([flag, str(block[key])], error=err(key))
        if block.get("trust_remote_code") is True:
            trust_line = line("trust_remote_code")
    return trust_line


def load_bundle(path: Path, *, allow_env: Collection[str] = (), allow: Allowlist | None = None) -> Bundle:
    """A bundle, validated strictly and vetted as data (see :mod:`tui.core.record.bundle_plan` for what its plans
    may add here): its profile's ``${VAR}`` never expanded, its serve settings checked against the allowlist."""
    data = load_file(path, "bundle")
    top = Fields(data, path)
    fmt = top.require("bundle", str)
    if fmt != BUNDLE_FORMAT:
        raise top.error("bundle", f"not a disagg-tui bundle (expected {BUNDLE_FORMAT!r}, got {fmt!r})")
    version = top.integer("version", required=True, lo=1)
    if version > BUNDLE_VERSION:
        raise top.error("version", f"bundle version {version} is newer than this disagg-tui reads "
                                   f"({BUNDLE_VERSION}): upgrade disagg-tui")
    created = str(top.get("created", str, ""))
    app_version = str(top.get("app_version", str, "?"))
    src = top.sub("source", required=True)
    assert src is not None
    source = {"kind": src.choice("kind", SOURCES, required=True), "id": str(src.require("id", str))}
    if not _SOURCE_ID.match(source["id"]):
        raise src.error("id", f"must be letters, digits and ._:/@+- (at most 200); got {shown(source['id'], 60)}")
    src.done()
    prof_raw = top.require("profile", dict)
    try:
        profile = parse_model_profile(prof_raw, path, expand_env=False)
    except InputError as exc:
        raise _prefixed(exc, "profile.") from None
    trust_line = _vet_profile(prof_raw, path, allow or load_allowlist(), allow_env)
    lays = top.get("layouts", list, None)
    if not lays:
        raise InputError("a bundle needs at least one layout", file=path, line=top.line_of("layouts"),
                         field="layouts")
    layouts = []
    for i, item in enumerate(lays):
        line = lays.line_of(i) if isinstance(lays, LList) else top.line_of("layouts")
        lf = Fields(item, path, f"layouts[{i}].", line=line)
        topo = str(lf.require("topology", str))
        try:
            parse_topology(topo)
        except InputError as exc:
            raise lf.error("topology", exc.message) from None
        plan_fields = lf.sub("plan", required=True)
        assert plan_fields is not None
        plan = _parse_plan(plan_fields)
        if plan.topology != topo:
            raise lf.error("topology", f"says {topo} but its plan is for {plan.topology}")
        if plan.profile_id != profile.id:
            raise plan_fields.error("profile_id", f"the plan is for profile {plan.profile_id!r}, the bundle's "
                                                  f"profile is {profile.id!r}")
        lf.done()
        lines: dict[str, int] = {}
        for j, x in enumerate(item["plan"].get("servers") or []):
            name = str(x.get("name"))
            if isinstance(x, LDict):
                lines[name] = item["plan"]["servers"].line_of(j)
                lines[f"{name}.argv"] = x.line_of("argv")
                env = x.get("env")
                lines.update({f"{name}.env.{k}": env.line_of(k) for k in env} if isinstance(env, LDict) else {})
                lines[f"{name}.host"] = x.line_of("host")
        raw_plan = item["plan"]
        if isinstance(raw_plan, LDict):
            knobs, fixes_raw, proxy = raw_plan.get("knobs"), raw_plan.get("fixes_applied"), raw_plan.get("proxy")
            lines.update({f"plan.knobs.{k}": knobs.line_of(k) for k in knobs} if isinstance(knobs, LDict) else {})
            lines.update({f"plan.fixes_applied[{j}]": fixes_raw.line_of(j) for j in range(len(fixes_raw))}
                         if isinstance(fixes_raw, LList) else {})
            if isinstance(proxy, LDict):
                lines["plan.proxy.host"] = proxy.line_of("host")
        layouts.append(BundleLayout(topo, plan, plain(item["plan"]), index=i, line=line, server_lines=lines))
    fixes = []
    fx = top.get("fixes", list, [])
    for i, item in enumerate(fx):
        ff = Fields(item, path, f"fixes[{i}].", line=fx.line_of(i) if isinstance(fx, LList) else None)
        fixes.append({"change": str(ff.require("change", str)), "reason": str(ff.get("reason", str, "")),
                      "source": str(ff.get("source", str, ""))})
        ff.done()
    workloads: dict[str, Workload] = {}
    wl_data: dict[str, dict[str, Any]] = {}
    wls = top.sub("workloads")
    if wls is not None:
        for name in list(wls.data):
            wls.get(name, dict)
            if not isinstance(name, str) or not _WORKLOAD_NAME.match(name):  # as the workloads file takes them
                raise wls.error(str(name), "workload names are lowercase letters, digits, '.', '-', '_' (at most "
                                           f"{MAX_ID}); got {shown(repr(name), 60)}")
            workloads[name] = parse_workload(name, wls.data[name], path, prefix=f"workloads.{name}.")
            wl_data[name] = plain(wls.data[name])
        wls.done()
    fingerprint = plain(top.get("fingerprint", dict, {}))
    results = plain(top.get("results", dict, {}))
    needed = top.str_list("secrets_needed")
    top.done()
    return Bundle(path=path, source=source, created=created, app_version=app_version, profile=profile,
                  profile_data=plain(prof_raw), layouts=layouts, workloads=workloads, workload_data=wl_data,
                  fingerprint=fingerprint, fixes=fixes, results=results, secrets_needed=needed,
                  trust_remote_code_line=trust_line)


def _parse_plan(f: Fields) -> LaunchPlan:
    f.require("profile_id", str)
    f.require("model", str)
    f.require("served_name", str)
    f.require("topology", str)
    _int_list(f, "gpus")
    f.get("simulated", bool, False)
    f.get("vllm_executable", str, "vllm")
    f.get("endpoint", str)
    f.get("host_label", str, "")
    f.get("shared_gpus", bool, False)
    f.str_list("warnings")
    f.str_list("fixes_applied")
    f.str_map("knobs")  # [ROLE.]NAME -> value: planned again from this host's catalogue (bundle_plan.plan_here)
    servers = f.get("servers", list, None)
    if not servers:
        raise InputError("a plan needs at least one server", file=f.source, line=f.line_of("servers"),
                         field=f.name("servers"))
    for i, s in enumerate(servers):
        sf = Fields(s, f.source, f"{f.name('servers')}[{i}].",
                    line=servers.line_of(i) if isinstance(servers, LList) else None)
        sf.require("name", str)
        sf.choice("role", ("single", "prefill", "decode"), required=True)
        if not sf.str_list("argv"):
            raise sf.error("argv", "a server needs its command line")
        sf.str_map("env")
        _int_list(sf, "gpus")
        sf.require("host", str)
        sf.integer("port", required=True, lo=1, hi=65535)
        sf.integer("tp", 1, lo=1)
        sf.integer("dp", 1, lo=1)
        sf.integer("side_channel_port", None, lo=1, hi=65535)
        sf.get("kv_role", str)
        sf.get("url", str)
        sf.get("shell", str)
        sf.str_list("unset_env")  # the exporting host's fix: this host's playbook applies its own
        sf.done()
    proxy = f.sub("proxy")
    if proxy is not None:
        proxy.require("host", str)
        proxy.integer("port", required=True, lo=1, hi=65535)
        proxy.str_list("prefill")
        proxy.str_list("decode")
        proxy.get("url", str)
        proxy.get("shell", str)
        proxy.done()
    ws = f.get("workarounds", list, [])
    for i, w in enumerate(ws):
        wf = Fields(w, f.source, f"{f.name('workarounds')}[{i}].",
                    line=ws.line_of(i) if isinstance(ws, LList) else None)
        wf.require("change", str)
        wf.require("reason", str)
        wf.get("source", str)
        wf.done()
    f.done()
    data = plain(f.data)
    for s in data["servers"]:  # as checked: a number among a server's words or values is its text (YAML's 8000)
        s["argv"] = [str(a) for a in s["argv"]]
        s["env"] = {str(k): str(v) for k, v in (s.get("env") or {}).items()}
    result: LaunchPlan = guarded(lambda: LaunchPlan.from_dict(data), f.source, "plan")
    return result


def _int_list(f: Fields, key: str) -> list[int]:
    value = f.get(key, list, [])
    out = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int):
            line = value.line_of(i) if isinstance(value, LList) else f.line_of(key)
            raise InputError(f"item {i + 1} must be an integer; got {item!r}", file=f.source, line=line,
                             field=f.name(key))
        out.append(item)
    return out


def _prefixed(exc: InputError, prefix: str) -> InputError:
    return InputError(exc.message, file=exc.file, line=exc.line,
                      field=f"{prefix}{exc.field}" if exc.field else prefix.rstrip("."), hint=exc.hint)


def _drop_none(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _drop_none(v) for k, v in data.items() if v is not None}
    return data


def check_trust(bundle: Bundle, models: Mapping[str, ModelProfile], accepted: bool) -> str | None:
    """A bundle whose profile asks for ``trust_remote_code`` makes vLLM run the Python code of the model's own
    repository: refused unless this host already trusts that model (a profile of its own serves the same model with
    it)
    or the operator accepts it here (``--trust-remote-code``). Returns a line saying which, or None."""
    if bundle.trust_remote_code_line is None:
        return None
    same = [m for m in models.values() if m.trust_remote_code and m.model == bundle.profile.model]
    if same:
        return f"trust_remote_code: this host's profile {same[0].id} already trusts {same[0].model}'s code"
    if accepted:
        return f"trust_remote_code: accepted here (--trust-remote-code): vLLM runs {bundle.profile.model}'s own code"
    raise InputError(f"the profile asks vLLM to run the Python code of {shown(bundle.profile.model, 80)}'s "
                     "repository (trust_remote_code: true); accept it on this host with --trust-remote-code",
                     file=bundle.path, line=bundle.trust_remote_code_line, field="profile.vllm.trust_remote_code")

