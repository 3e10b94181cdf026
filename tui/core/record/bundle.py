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
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tui import __version__
from tui.core import paths
from tui.core.errors import InputError
from tui.core.plan.spec import LaunchPlan
from tui.core.profiles import ModelProfile, Workload, parse_model_profile, parse_workload, parse_workloads_file
from tui.core.redact import REDACTED, Redactor, secret_names_in
from tui.core.yamlio import Fields, LDict, LList, dump, load_file

BUNDLE_FORMAT = "disagg-tui-bundle"
BUNDLE_VERSION = 1
SOURCES = ("layout", "run", "campaign")
_WORKLOAD_KEYS = ("input_len", "output_len", "num_prompts", "request_rate", "burstiness", "max_concurrency",
                  "range_ratio", "prefix_len", "ignore_eos", "seed", "description")


@dataclass
class BundleLayout:
    topology: str
    plan: LaunchPlan
    plan_dict: dict[str, Any]


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

    def layout(self, topology: str | None = None) -> BundleLayout:
        """The layout of ``topology``; without one, the one that won max throughput on most workloads (else the
        first)."""
        if topology is not None:
            for lay in self.layouts:
                if lay.topology == topology:
                    return lay
            raise InputError(f"the bundle has no {topology} layout (it has: "
                             f"{', '.join(x.topology for x in self.layouts)})", field="--topology")
        verdicts = ((self.results.get("recommendation") or {}).get("objectives") or {}).get("max_throughput")
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
    """The profile as its file has it (``${VAR:-default}`` references kept), else as the app holds it."""
    if profile.source and Path(profile.source).is_file():
        try:
            raw = load_file(Path(profile.source))
            if isinstance(raw, dict) and raw.get("id") == profile.id:
                plain: dict[str, Any] = _plain(raw)
                return plain
        except InputError:
            pass
    out: dict[str, Any] = _drop_none(profile.to_dict())
    return out


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
        "layouts": [{"topology": t, "plan": _plain(dict(p))} for t, p in layouts],
        "fixes": fixes,
        "workloads": {name: workload_to_dict(w) for name, w in workloads.items()},
        "fingerprint": _plain(dict(fingerprint)),
        "results": _plain(dict(results or {})),
    }
    data = red.value(data)
    data["secrets_needed"] = secret_names_in(data)
    return data


def write_bundle(path: Path, data: Mapping[str, Any]) -> None:
    text = ("# disagg-tui bundle: a working setup to hand on. 'disagg-tui import FILE' adds its profile and "
            "workloads;\n# 'disagg-tui up --bundle FILE' launches its plan. Secrets are <redacted>: see "
            "secrets_needed.\n") + dump(dict(data))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", file=path, field="-o") from None


# --- reading ---------------------------------------------------------------------------------------------------


def load_bundle(path: Path) -> Bundle:
    data = load_file(path)
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
    src.done()
    prof_raw = top.require("profile", dict)
    try:
        profile = parse_model_profile(prof_raw, path)
    except InputError as exc:
        raise _prefixed(exc, "profile.") from None
    lays = top.get("layouts", list, None)
    if not lays:
        raise InputError("a bundle needs at least one layout", file=path, line=top.line_of("layouts"),
                         field="layouts")
    layouts = []
    for i, item in enumerate(lays):
        line = lays.line_of(i) if isinstance(lays, LList) else top.line_of("layouts")
        lf = Fields(item, path, f"layouts[{i}].", line=line)
        topo = str(lf.require("topology", str))
        plan_fields = lf.sub("plan", required=True)
        assert plan_fields is not None
        plan = _parse_plan(plan_fields)
        if plan.topology != topo:
            raise lf.error("topology", f"says {topo} but its plan is for {plan.topology}")
        if plan.profile_id != profile.id:
            raise plan_fields.error("profile_id", f"the plan is for profile {plan.profile_id!r}, the bundle's "
                                                  f"profile is {profile.id!r}")
        lf.done()
        layouts.append(BundleLayout(topo, plan, _plain(item["plan"])))
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
            workloads[name] = parse_workload(name, wls.data[name], path, prefix=f"workloads.{name}.")
            wl_data[name] = _plain(wls.data[name])
        wls.done()
    fingerprint = _plain(top.get("fingerprint", dict, {}))
    results = _plain(top.get("results", dict, {}))
    needed = top.str_list("secrets_needed")
    top.done()
    return Bundle(path=path, source=source, created=created, app_version=app_version, profile=profile,
                  profile_data=_plain(prof_raw), layouts=layouts, workloads=workloads, workload_data=wl_data,
                  fingerprint=fingerprint, fixes=fixes, results=results, secrets_needed=needed)


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
    return LaunchPlan.from_dict(_plain(f.data))


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


def _plain(data: Any) -> Any:
    if isinstance(data, dict | LDict):
        return {str(k): _plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple | LList):
        return [_plain(v) for v in data]
    return data


def _drop_none(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _drop_none(v) for k, v in data.items() if v is not None}
    return data


# --- installing ------------------------------------------------------------------------------------------------


def missing_secrets(bundle: Bundle, environ: Mapping[str, str]) -> list[str]:
    return [name for name in bundle.secrets_needed if not environ.get(name)]


def restore_secrets(plan: LaunchPlan, environ: Mapping[str, str]) -> LaunchPlan:
    """The plan with each redacted environment value taken from ``environ`` (InputError naming the variables
    that are not set)."""
    missing = sorted({k for s in plan.servers for k, v in s.env if v == REDACTED and not environ.get(k)})
    if missing:
        raise InputError(f"the bundle's plan needs {', '.join(missing)}: set {'it' if len(missing) == 1 else 'them'}"
                         " in the environment (secrets are never carried in a bundle)", field="--bundle")
    if any(REDACTED in a for s in plan.servers for a in s.argv):
        raise InputError("the bundle's plan has a redacted command-line secret (e.g. --api-key): pass it again "
                         "through the environment and edit the plan", field="--bundle")
    d = plan.to_dict()
    for s in d["servers"]:
        s["env"] = {k: (environ[k] if v == REDACTED else v) for k, v in s["env"].items()}
    return LaunchPlan.from_dict(d)


def install(bundle: Bundle, config: Path | None = None) -> list[str]:
    """Add the bundle's profile and workloads to the operator's profiles; one line per change made."""
    base = config or paths.user_profiles_dir()
    out = []
    models = base / "models"
    models.mkdir(parents=True, exist_ok=True)
    target = models / f"{bundle.profile.id}.yaml"
    text = f"# imported from {bundle.path.name} ({bundle.source['kind']} {bundle.source['id']})\n" + \
        dump(bundle.profile_data)
    if target.exists() and target.read_text(encoding="utf-8").split("\n", 1)[-1] == text.split("\n", 1)[-1]:
        out.append(f"profile {bundle.profile.id}: already there ({target})")
    else:
        out.append(f"profile {bundle.profile.id}: {'replaced' if target.exists() else 'added'} ({target})")
        target.write_text(text, encoding="utf-8")
    if bundle.workload_data:
        wl_file = base / "workloads.yaml"
        existing: dict[str, Any] = {}
        if wl_file.exists():
            raw = load_file(wl_file)
            parse_workloads_file(raw, wl_file)  # refuse to extend a file that is already broken
            if isinstance(raw, dict) and isinstance(raw.get("workloads"), dict):
                existing = _plain(raw["workloads"])
        for name, wd in bundle.workload_data.items():
            state = "already there" if existing.get(name) == wd else "replaced" if name in existing else "added"
            existing[name] = wd
            out.append(f"workload {name}: {state} ({wl_file})")
        wl_file.write_text(dump({"workloads": existing}), encoding="utf-8")
    return out
