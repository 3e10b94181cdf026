"""Serve knobs: the vllm serve flags and variables a campaign crosses with topologies (``run --knob``), ``predict``
maps, and the launch screen offers, from the catalogue ``profiles/knobs.yaml`` (an operator's ``knobs.yaml`` in
their profiles folder adds or replaces knobs).

- :class:`Knob`: one knob of the catalogue (its values, the roles it may be set for, the vLLM versions it exists
  in, what each value requires); :class:`KnobCatalog` all of them.
- :class:`Setting`: one knob at one value, for every server it may be set on or for one role (``decode.mnbt=2048``);
  :class:`KnobAxis`: a knob with the values a campaign sweeps (``--knob spec=off,ngram:4``).
- :func:`configurations`: the settings a topology runs, axis by axis crossed (an axis for a role the topology has
  not, ``decode.*`` on ``tp2``, drops out there).
- :func:`refusals`: why a setting cannot work on this model, topology, GPU, toolchain and vLLM (EP on a dense
  model, MTP without an MTP head, a backend the GPU lacks, a knob the installed vLLM does not have), before anything
  starts; :func:`apply_settings`: the plan with each setting's flags and variables on the servers it is for.

Values come from the catalogue, never from the command line: ``--knob`` chooses among them (``ngram:4`` fills the
one number the value takes), so a knob adds only what the catalogue names, and the catalogue's flags are checked
when it is read (no flag the planner places, no secret, only ``VLLM_*`` variables).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tui.core import paths, vllmargv
from tui.core.errors import InputError, PlanRefused
from tui.core.models import ModelProfile
from tui.core.plan.argtext import check_json_flags
from tui.core.plan.hostfacts import HostFacts
from tui.core.plan.spec import LaunchPlan, ServerSpec, Workaround
from tui.core.redact import is_secret_env, is_secret_flag, redact_text
from tui.core.topology import Topology, parse_topology
from tui.core.yamlio import Fields, load_file

KNOBS_FILE = "knobs.yaml"
ROLES = ("single", "prefill", "decode")
#: role prefixes an axis may carry (``decode.mnbt``); a plain name is every server the knob may be set on
ROLE_PREFIXES = ("prefill", "decode")
REQUIREMENTS = ("moe", "mtp_head", "nvcc", "min_compute_capability", "server_gpus")
KINDS = ("choice", "int")
#: bounds on what a command line or a catalogue may ask for
MAX_AXES = 6
MAX_VALUES = 16
MAX_CONFIGURATIONS = 256
MAX_KNOBS = 128
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}\Z")
_VALUE = re.compile(r"[A-Za-z0-9_.-]{1,32}\Z")
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def version_tuple(text: str | None) -> tuple[int, int, int] | None:
    m = _VERSION.match(text or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


@dataclass(frozen=True, slots=True)
class Param:
    lo: int
    hi: int
    default: int


@dataclass(frozen=True, slots=True)
class KnobValue:
    """One value of a choice knob (or the default of an int knob): what it adds and what it needs."""

    name: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    requires: tuple[tuple[str, Any], ...] = ()
    default: bool = False
    param: Param | None = None
    note: str = ""


@dataclass(frozen=True, slots=True)
class Knob:
    name: str
    title: str
    description: str
    kind: str  # choice | int
    roles: tuple[str, ...]
    since: str
    until: str | None
    values: tuple[KnobValue, ...]
    lo: int = 0  # int knobs
    hi: int = 0
    args: tuple[str, ...] = ()  # int knobs: the words a number adds ({n})
    source: str = ""

    @property
    def default(self) -> KnobValue:
        return next(v for v in self.values if v.default)

    def value_of(self, name: str) -> KnobValue | None:
        return next((v for v in self.values if v.name == name), None)

    def choose(self, text: str, *, where: str = "--knob") -> Choice:
        """The value ``text`` names (``ngram``, ``ngram:4``, ``2048``, ``auto``); InputError naming the knob."""
        t = text.strip()
        if not _VALUE.match(t.replace(":", "", 1)):
            raise InputError(f"{self.name}: {t[:40]!r} is not a value (letters, digits, '.', '_', '-')", field=where)
        base, _, num = t.partition(":")
        v = self.value_of(base)
        if v is not None:
            if v.param is None:
                if num:
                    raise InputError(f"{self.name}={base} takes no number", field=where)
                return Choice(self, v.name, v, None)
            n = v.param.default if not num else _int(num, f"{self.name}={base}", where)
            if not v.param.lo <= n <= v.param.hi:
                raise InputError(f"{self.name}={base}:{n}: the number must be {v.param.lo}..{v.param.hi}",
                                 field=where)
            return Choice(self, f"{v.name}:{n}", v, n)
        if self.kind == "int" and not num:
            n = _int(base, self.name, where)
            if not self.lo <= n <= self.hi:
                raise InputError(f"{self.name}={n}: must be {self.lo}..{self.hi}", field=where)
            return Choice(self, str(n), None, n)
        known = ", ".join(v.name + (":N" if v.param else "") for v in self.values)
        extra = f" or a number {self.lo}..{self.hi}" if self.kind == "int" else ""
        raise InputError(f"{self.name}: unknown value {t[:40]!r} (known: {known}{extra})", field=where)

    def roles_text(self) -> str:
        return ", ".join(self.roles)


def _int(text: str, what: str, where: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise InputError(f"{what}: expected a whole number, got {text[:40]!r}", field=where)
    return int(text)


@dataclass(frozen=True, slots=True)
class Choice:
    """A knob at one value: the catalogue's value (None for a number of an int knob) and its number."""

    knob: Knob
    value: str  # canonical: "ngram:4", "2048", "auto"
    spec: KnobValue | None
    n: int | None

    @property
    def is_default(self) -> bool:
        return self.spec is not None and self.spec.default

    def words(self) -> tuple[str, ...]:
        template = self.spec.args if self.spec is not None else self.knob.args
        return tuple(w.replace("{n}", str(self.n)) if self.n is not None else w for w in template)

    def env(self) -> tuple[tuple[str, str], ...]:
        return self.spec.env if self.spec is not None else ()

    def requires(self) -> tuple[tuple[str, Any], ...]:
        return self.spec.requires if self.spec is not None else ()


@dataclass(frozen=True, slots=True)
class Setting:
    """One knob at one value, for every server it may be set on (``role`` None) or for one role's servers."""

    choice: Choice
    role: str | None = None

    @property
    def key(self) -> str:
        return f"{self.role}.{self.choice.knob.name}" if self.role else self.choice.knob.name

    @property
    def text(self) -> str:
        return f"{self.key}={self.choice.value}"

    def roles(self) -> tuple[str, ...]:
        """The server roles it is set on."""
        return (self.role,) if self.role else self.choice.knob.roles

    def applies(self, topo: Topology) -> bool:
        """Whether the topology has a server it is set on (``decode.*`` on ``tp2``: no)."""
        have = ("prefill", "decode") if topo.kind == "pd" else ("single",)
        return any(r in have for r in self.roles())


@dataclass(frozen=True, slots=True)
class KnobAxis:
    knob: Knob
    role: str | None
    choices: tuple[Choice, ...]

    @property
    def key(self) -> str:
        return f"{self.role}.{self.knob.name}" if self.role else self.knob.name

    @property
    def text(self) -> str:
        return f"{self.key}={','.join(c.value for c in self.choices)}"

    def settings(self) -> list[Setting]:
        return [Setting(c, self.role) for c in self.choices]


@dataclass(frozen=True, slots=True)
class Configuration:
    """The settings one layout of a campaign runs with (one per axis that applies to its topology)."""

    settings: tuple[Setting, ...] = ()

    @property
    def label(self) -> str:
        """``attn=triton spec=ngram:4`` (every axis, its default values too); "" without knobs."""
        return " ".join(s.text for s in self.settings)

    def values(self) -> dict[str, str]:
        """axis key → value (what a run stores)."""
        return {s.key: s.choice.value for s in self.settings}

    @property
    def slug(self) -> str:
        """The label as a folder-name part (``attn-triton_spec-ngram4``)."""
        return slug_of(self.label)


def _stamp(f: Path) -> tuple[int, int, int] | None:
    try:
        st = f.lstat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@dataclass
class KnobCatalog:
    knobs: dict[str, Knob] = field(default_factory=dict)

    def load_file(self, path: Path) -> None:
        for k in parse_knobs(load_file(path, "knob catalogue"), path):
            self.knobs[k.name] = k
        if len(self.knobs) > MAX_KNOBS:
            raise InputError(f"more than {MAX_KNOBS} knobs", file=path, field="knobs")

    @classmethod
    def load(cls, extra_dirs: Sequence[Path] = ()) -> KnobCatalog:
        """The shipped catalogue, then the operator's (``knobs.yaml`` in their profiles folder), whose knobs win.
        Read again only when one of the files changed (a form plans on every key typed)."""
        bases = (paths.shipped_profiles_dir(), paths.user_profiles_dir(), *extra_dirs)
        key = tuple((str(f), _stamp(f)) for f in (b / KNOBS_FILE for b in bases))
        cached = _CACHE.get(key)
        if cached is not None:
            return cached
        cat = cls()
        for base in bases:
            cat.load_dir(base)
        _CACHE.clear()
        _CACHE[key] = cat
        return cat

    def load_dir(self, base: Path) -> None:
        f = base / KNOBS_FILE
        if os.path.lexists(f):  # a FIFO, a folder or a broken link there is refused in one line
            self.load_file(f)

    def knob(self, name: str, *, where: str = "--knob") -> Knob:
        k = self.knobs.get(name)
        if k is None:
            known = ", ".join(sorted(self.knobs)) or "none"
            raise InputError(f"unknown knob {name[:40]!r} (known: {known}; 'disagg-tui knobs' lists them)",
                             field=where)
        return k

    def _role_name(self, key: str, where: str) -> tuple[str | None, Knob]:
        role, dot, name = key.strip().rpartition(".")
        if not dot:
            role, name = "", key.strip()
        if role and role not in ROLE_PREFIXES:
            raise InputError(f"{key[:40]!r}: a knob's role is {' or '.join(ROLE_PREFIXES)} (as in decode.mnbt)",
                             field=where)
        knob = self.knob(name, where=where)
        if role and role not in knob.roles:
            raise InputError(f"{name} may not be set for {role} servers (only {knob.roles_text()})"
                             + (": speculative decoding belongs to decode" if name == "spec" else ""), field=where)
        return role or None, knob

    def axis(self, text: str, *, where: str = "--knob") -> KnobAxis:
        """``[ROLE.]NAME=V1,V2`` (``--knob``)."""
        key, eq, values = text.partition("=")
        if not eq or not key.strip() or not values.strip():
            raise InputError(f"expected [ROLE.]NAME=V1,V2 (as in attn=auto,triton), got {text[:60]!r}", field=where)
        role, knob = self._role_name(key, where)
        parts = [p.strip() for p in values.split(",")]
        if any(not p for p in parts):
            raise InputError(f"{key.strip()}: an empty value in {values[:60]!r}", field=where)
        if len(parts) > MAX_VALUES:
            raise InputError(f"{key.strip()}: at most {MAX_VALUES} values, got {len(parts)}", field=where)
        choices = [knob.choose(p, where=where) for p in parts]
        seen: set[str] = set()
        for c in choices:
            if c.value in seen:
                raise InputError(f"{key.strip()}: {c.value} given twice", field=where)
            seen.add(c.value)
        return KnobAxis(knob, role, tuple(choices))

    def axes(self, texts: Sequence[str], *, where: str = "--knob") -> list[KnobAxis]:
        if len(texts) > MAX_AXES:
            raise InputError(f"at most {MAX_AXES} knob axes, got {len(texts)}", field=where)
        out = [self.axis(t, where=where) for t in texts]
        keys = [a.key for a in out]
        for k in keys:
            if keys.count(k) > 1:
                raise InputError(f"{k} given as two axes: list its values in one (--knob {k}=A,B)", field=where)
        total = 1
        for a in out:
            total *= len(a.choices)
        if total > MAX_CONFIGURATIONS:
            raise InputError(f"{total} knob configurations: at most {MAX_CONFIGURATIONS}", field=where)
        return out

    def settings(self, pairs: Iterable[tuple[str, str]], *, where: str = "--knob") -> tuple[Setting, ...]:
        """One value per knob (``up --knob attn=triton``): each pair (``[ROLE.]NAME``, value)."""
        out: list[Setting] = []
        for key, value in pairs:
            role, knob = self._role_name(key, where)
            s = Setting(knob.choose(value, where=where), role)
            if any(o.key == s.key for o in out):
                raise InputError(f"{s.key} given twice", field=where)
            out.append(s)
        return tuple(out)


_CACHE: dict[tuple[tuple[str, tuple[int, int, int] | None], ...], KnobCatalog] = {}


def configurations(axes: Sequence[KnobAxis], topology: Topology | str) -> list[Configuration]:
    """Every configuration a topology runs: the axes that apply to it, crossed (none: one, without knobs)."""
    topo = parse_topology(topology) if isinstance(topology, str) else topology
    live = [a for a in axes if a.settings() and a.settings()[0].applies(topo)]
    if not live:
        return [Configuration()]
    return [Configuration(tuple(combo)) for combo in itertools.product(*(a.settings() for a in live))]


# --- will it work here ----------------------------------------------------------------------------------------


def _servers_for(setting: Setting, plan: LaunchPlan) -> list[ServerSpec]:
    return [s for s in plan.servers if s.role in setting.roles()]


def refusal(setting: Setting, profile: ModelProfile, plan: LaunchPlan, facts: HostFacts) -> str | None:
    """Why ``setting`` cannot work in ``plan`` on this host ("" / None when it can): one line naming the knob."""
    knob, choice = setting.choice.knob, setting.choice
    head = setting.text
    version = facts.vllm.version if facts.vllm is not None else None
    have = version_tuple(version)
    if have is not None and not choice.is_default:
        since = version_tuple(knob.since)
        if since is not None and have < since:
            return f"{head}: {knob.title} needs vLLM ≥ {knob.since}; this host has {version}"
        until = version_tuple(knob.until)
        if until is not None and have >= until:
            return f"{head}: {knob.title} is not in vLLM {knob.until} and later; this host has {version}"
    servers = _servers_for(setting, plan)
    for name, want in choice.requires():
        if name == "moe" and want and not profile.is_moe:
            return f"{head}: {knob.title} needs a mixture-of-experts model; {profile.id} is dense"
        if name == "mtp_head" and want and not profile.has_mtp_head:
            return (f"{head}: MTP drafts with the checkpoint's multi-token-prediction layers; {profile.id} has none "
                    "(config.json num_nextn_predict_layers / mtp_* keys)")
        if name == "nvcc" and want and not facts.toolchain.nvcc_usable:
            return (f"{head}: needs a usable nvcc (FlashInfer JIT-compiles its kernels); this host has none on PATH, "
                    "CUDA_HOME or /usr/local/cuda")
        if name == "min_compute_capability":
            for g in plan.gpus:
                gf = facts.gpu(g)
                if gf is not None and gf.compute_capability < float(want):
                    return (f"{head}: needs compute capability {float(want):.1f}; GPU {g} is {gf.name} "
                            f"({gf.compute_capability:.1f})")
        if name == "server_gpus":
            small = [s for s in servers if s.tp * s.dp < int(want)]
            if small:
                return (f"{head}: {knob.title} splits a server's experts over its GPUs: needs ≥ {int(want)} per "
                        f"server; {plan.topology}'s {small[0].name} has {small[0].tp * small[0].dp} "
                        "(use tp2, dp2 or a -tp2 layout)")
    return None


def refusals(settings: Sequence[Setting], profile: ModelProfile, plan: LaunchPlan, facts: HostFacts) -> list[str]:
    return [why for s in settings if (why := refusal(s, profile, plan, facts))]


def _remove(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` in any spelling vLLM reads as it (``-cc``, ``--compilation_config=...``) and its
    values, and without its ``--no-``/positive twin; the executable, ``serve`` and the model are never touched."""
    base = vllmargv.flag_of(flag)
    twins = {base, base.replace("--no-", "--", 1) if base.startswith("--no-") else "--no-" + base[2:]}
    return vllmargv.without_flags(argv, twins)


def _flag_groups(words: Sequence[str]) -> list[list[str]]:
    groups: list[list[str]] = []
    for w in words:
        if w.startswith("-") or not groups:
            groups.append([w])
        else:
            groups[-1].append(w)
    return groups


def apply_settings(plan: LaunchPlan, settings: Sequence[Setting]) -> LaunchPlan:
    """The plan with each setting's flags (replacing the same flag set before: a host workaround, a profile's, an
    ``--arg``) and variables on the servers it is for; a workaround line per setting says so."""
    if not settings:
        return plan
    servers = []
    for s in plan.servers:
        argv = list(s.argv)
        env = dict(s.env)
        for setting in settings:
            if s.role not in setting.roles():
                continue
            for group in _flag_groups(setting.choice.words()):
                argv = _remove(argv, group[0]) + group
            env.update(dict(setting.choice.env()))
        servers.append(replace(s, argv=tuple(argv), env=tuple(env.items())))
    notes = []
    overridden: set[str] = set()
    for setting in settings:
        if setting.choice.is_default:
            continue
        what = shlex.join(setting.choice.words()) or " ".join(f"{k}={v}" for k, v in setting.choice.env())
        roles = [r for r in ROLES if r in setting.roles() and any(s.role == r for s in plan.servers)]
        if not roles:  # a part of a layout across hosts (--roles prefill) without the servers it is for
            wanted = "/".join(r for r in ROLES if r in setting.roles() and r != "single")
            where = f"no server of this plan: it is for the {wanted} servers"
        else:
            where = "on the server" if roles == ["single"] else (
                "on every server" if len(roles) > 1 else f"on the {roles[0]} servers")
        notes.append(Workaround(what, f"knob {setting.text} ({setting.choice.knob.title}, {where})", "knob"))
        overridden.update(g[0] for g in _flag_groups(setting.choice.words()))
        overridden.update(k for k, _ in setting.choice.env())
    kept = tuple(w for w in plan.workarounds if w.change.split(" ", 1)[0].split("=", 1)[0] not in overridden)
    return replace(plan, servers=tuple(servers), workarounds=(*kept, *notes),
                   knobs=tuple((s.key, s.choice.value) for s in settings))


# --- the catalogue file -----------------------------------------------------------------------------------------


def _check_words(words: list[str], f: Fields, key: str) -> tuple[str, ...]:
    if len(words) > 8:
        raise f.error(key, "at most 8 words")
    if words and not words[0].startswith("-"):
        raise f.error(key, f"must start with a flag, got {words[0][:40]!r}")
    for w in words:
        if "\0" in w or "\n" in w:
            raise f.error(key, "a NUL or a newline cannot be on a command line")
        if w.startswith("-") and is_secret_flag(w.split("=", 1)[0]):
            raise f.error(key, f"{w.split('=', 1)[0]} would put a secret on vLLM's command line")
    for w in words:
        if redact_text(w) != w:
            raise f.error(key, "a secret is never a knob's value (it would be on vLLM's command line, which vLLM "
                               "logs)")
    try:
        vllmargv.check_tail([w.replace("{n}", "1") for w in words], vllmargv.Source.KNOB, field=f.name(key))
    except InputError as err:
        raise f.error(key, err.message) from None
    try:
        check_json_flags([w.replace("{n}", "1") for w in words], flag=f.name(key))
    except InputError as err:
        raise f.error(key, err.message) from None
    return tuple(words)


def _check_env(env: dict[str, str], f: Fields, key: str) -> tuple[tuple[str, str], ...]:
    for k, v in env.items():
        if not re.fullmatch(r"VLLM_[A-Z0-9_]{1,64}", k):
            raise f.error(key, f"{k[:40]!r}: a knob sets vLLM's own variables only (VLLM_*)")
        if is_secret_env(k) or redact_text(v) != v:
            raise f.error(key, f"{k}: a secret is never a knob's value (set it in this host's environment)")
        if "\0" in v or len(v) > 256:
            raise f.error(key, f"{k}: a value of at most 256 characters, no NUL")
        try:
            vllmargv.check_env(k, v, vllmargv.Source.KNOB, field=f"{f.name(key)}.{k}")
        except InputError as err:
            raise f.error(key, err.message) from None
    return tuple(env.items())


def _requires(f: Fields | None) -> tuple[tuple[str, Any], ...]:
    if f is None:
        return ()
    out: list[tuple[str, Any]] = []
    for key in list(f.data):
        if key not in REQUIREMENTS:
            raise f.error(key, f"unknown requirement (known: {', '.join(REQUIREMENTS)})")
        if key == "min_compute_capability":
            out.append((key, f.number(key, lo=1.0, hi=99.0)))
        elif key == "server_gpus":
            out.append((key, f.integer(key, lo=1, hi=1024)))
        else:
            out.append((key, f.get(key, bool, False)))
    f.done()
    return tuple(out)


def _value(name: str, raw: Any, f: Fields, kind: str) -> KnobValue:
    v = Fields(raw, f.source, f"{f.name(name)}.", line=f.line_of(name))
    p = v.sub("param")
    param = None
    if p is not None:
        lo = p.integer("min", required=True, lo=0, hi=10**9)
        hi = p.integer("max", required=True, lo=lo, hi=10**9)
        param = Param(lo, hi, p.integer("default", required=True, lo=lo, hi=hi))
        p.done()
    out = KnobValue(
        name=name,
        args=_check_words(v.str_list("args"), v, "args"),
        env=_check_env(v.str_map("env"), v, "env"),
        requires=_requires(v.sub("requires")),
        default=bool(v.get("default", bool, False)),
        param=param,
        note=v.get("note", str, ""),
    )
    v.done()
    if out.default and (out.args or out.env or out.param or out.requires):
        raise f.error(name, "the default value adds nothing (vLLM's own choice): no args, env, param or requires")
    if param is not None and not any("{n}" in w for w in out.args):
        raise f.error(name, "a value with a param uses {n} in its args")
    if param is None and any("{n}" in w for w in out.args):
        raise f.error(name, "{n} in args needs a param (min, max, default)")
    if not out.default and not (out.args or out.env):
        raise f.error(name, "a value other than the default adds args or env")
    return out


def parse_knob(name: str, raw: Any, source: str | Path, line: int | None) -> Knob:
    f = Fields(raw, source, f"knobs.{name}.", line=line)
    if not _NAME.match(name):
        raise InputError("a knob's name is lower-case letters, digits, '_' or '-' (at most 32)", file=source,
                         line=line, field=f"knobs.{name[:40]}")
    kind = f.choice("kind", KINDS, "choice")
    roles = f.str_list("roles", list(ROLES))
    for r in roles:
        if r not in ROLES:
            raise f.error("roles", f"{r[:40]!r} is not a role ({', '.join(ROLES)})")
    if not roles:
        raise f.error("roles", "at least one role")
    ver = f.sub("vllm", required=True)
    assert ver is not None
    since = ver.require("since", str)
    until = ver.get("until", str, None)
    for key, text in (("since", since), ("until", until)):
        if text is not None and version_tuple(text) is None:
            raise ver.error(key, f"expected a version like 0.24.0, got {text[:40]!r}")
    ver.done()
    lo = hi = 0
    args: tuple[str, ...] = ()
    if kind == "int":
        lo = f.integer("min", required=True, lo=0, hi=10**9)
        hi = f.integer("max", required=True, lo=lo, hi=10**9)
        args = _check_words(f.str_list("args"), f, "args")
        if not any("{n}" in w for w in args):
            raise f.error("args", "an int knob's args use {n}")
    vals = f.sub("values", required=True)
    assert vals is not None
    values = []
    for vname in list(vals.data):
        vname_s = str(vname)
        if not _VALUE.match(vname_s) or ":" in vname_s:
            raise vals.error(vname_s, "a value's name is letters, digits, '.', '_' or '-' (at most 32)")
        if kind == "int" and vname_s.isdigit():
            raise vals.error(vname_s, "an int knob's named values are words (a number is given as itself)")
        vals._seen.add(vname_s)
        values.append(_value(vname_s, vals.data[vname_s], vals, kind))
    if len(values) > MAX_VALUES:
        raise f.error("values", f"at most {MAX_VALUES} values")
    defaults = [v for v in values if v.default]
    if len(defaults) != 1:
        raise f.error("values", "exactly one value is the default (default: true)")
    knob = Knob(name=name, title=f.require("title", str), description=" ".join(f.get("description", str, "").split()),
                kind=kind, roles=tuple(roles), since=since, until=until, values=tuple(values), lo=lo, hi=hi,
                args=args, source=str(source))
    f.done()
    return knob


def parse_knobs(data: Any, source: str | Path) -> list[Knob]:
    top = Fields(data, source)
    knobs = top.sub("knobs", required=True)
    assert knobs is not None
    out = []
    for name in list(knobs.data):
        knobs._seen.add(str(name))
        out.append(parse_knob(str(name), knobs.data[name], source, knobs.line_of(str(name))))
    top.done()
    return out


def check_request_knobs(catalog: KnobCatalog, pairs: Sequence[tuple[str, str]], profile: ModelProfile,
                        plan: LaunchPlan, facts: HostFacts) -> LaunchPlan:
    """The plan of a request with ``--knob`` settings applied; PlanRefused (one line naming the knob and why)
    where one cannot work here."""
    settings = catalog.settings(pairs)
    topo = parse_topology(plan.topology)
    skipped = [s for s in settings if not s.applies(topo)]
    if skipped:
        raise PlanRefused(f"{skipped[0].text}: {plan.topology} has no {'/'.join(skipped[0].roles())} server to set "
                          "it on")
    why = refusals(settings, profile, plan, facts)
    if why:
        raise PlanRefused(why[0])
    return apply_settings(plan, settings)


def knob_lines(catalog: KnobCatalog, profile: ModelProfile | None = None, facts: HostFacts | None = None,
               plan: LaunchPlan | None = None) -> list[dict[str, Any]]:
    """The catalogue as rows (``disagg-tui knobs``, the console's knob lists): each knob's values and, given a
    model, a plan and a host, why a value does not fit here."""
    rows = []
    for k in catalog.knobs.values():
        vals = []
        for v in k.values:
            why = None
            if profile is not None and facts is not None and plan is not None and not v.default:
                n = v.param.default if v.param else None
                why = refusal(Setting(Choice(k, v.name if n is None else f"{v.name}:{n}", v, n)), profile, plan,
                              facts)
            vals.append({"value": v.name + (f":N ({v.param.lo}..{v.param.hi}, default {v.param.default})"
                                            if v.param else ""),
                         "adds": _shown(v.args) or " ".join(f"{a}={b}" for a, b in v.env) or "nothing",
                         "default": v.default, "note": v.note, "refused": why or ""})
        if k.kind == "int":
            vals.append({"value": f"N ({k.lo}..{k.hi})", "adds": _shown(k.args), "default": False, "note": "",
                         "refused": ""})
        rows.append({"name": k.name, "title": k.title, "description": k.description, "roles": list(k.roles),
                     "vllm": {"since": k.since, "until": k.until}, "values": vals})
    return rows


def _shown(words: Sequence[str]) -> str:
    """A value's words as shell, its number written N."""
    return " ".join(shlex.quote(w).replace("{n}", "N") for w in words)


def request_knobs(argv: Sequence[str]) -> dict[str, str]:
    """The knobs a stored launch request (``LaunchRequest.to_argv()``: ``--knob=NAME=VALUE``) carries."""
    out: dict[str, str] = {}
    words = list(argv)
    for i, w in enumerate(words):
        item = w[len("--knob="):] if w.startswith("--knob=") else (
            words[i + 1] if w == "--knob" and i + 1 < len(words) else None)
        if item is None:
            continue
        key, eq, value = item.partition("=")
        if eq and key and value and len(out) < MAX_KNOBS:
            out[key[:40]] = value[:40]
    return out


def slug_of(label: str) -> str:
    """A configuration's label as a folder-name part (``attn=triton spec=ngram:4`` → ``attn-triton_spec-ngram4``)."""
    return "_".join(part.replace("=", "-").replace(":", "").replace(".", "-") for part in label.split())
