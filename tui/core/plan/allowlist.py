"""The vLLM flags and environment variables a file from another host may carry into a plan here.

A bundle is data: what it may make this host run is the planner's own output for its profile and topology, plus
the flags and variables that the shipped ``profiles/bundle-allowlist.yaml`` names, each with a value of the shape
it lists. :class:`Allowlist` checks one flag (:meth:`Allowlist.check_args` walks a whole argv tail, read as vLLM
reads it by :mod:`tui.core.vllmargv`) or one variable (:meth:`Allowlist.check_env`) and raises the project's
:class:`InputError` naming what was refused and why. The rules every source shares (placement, secrets, what is
never taken) are :mod:`tui.core.vllmargv`'s; this list only narrows them for files from another host.
A variable the list does not name is accepted only where the operator passed ``--allow-env NAME`` and
:func:`tui.core.vllmargv.liftable` says ``--allow-env`` may lift it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from tui.core import paths, vllmargv
from tui.core.errors import InputError
from tui.core.redact import REDACTED, is_secret_env
from tui.core.safeio import shown
from tui.core.yamlio import Fields, LDict, load_file

ALLOWLIST_FILE = "bundle-allowlist.yaml"
SHAPES = ("switch", "name", "secret", "bool", "int", "float", "choice", "pattern", "int_list", "json")
#: flags the planner sets from this host's own flags and facts: a bundle's values are shown, never used
PLACEMENT_FLAGS = frozenset(f for f, r in vllmargv.FLAG_RULES.items() if r.kind is vllmargv.Kind.PLACEMENT)
#: variables the planner sets from this host (GPU choice, side-channel ports)
PLACEMENT_ENV = frozenset(p for p, r in vllmargv.ENV_RULES if r.kind is vllmargv.Kind.PLACEMENT and "*" not in p)
_NAME_MAX = 256
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


@dataclass(frozen=True, slots=True)
class Shape:
    """What one value may be."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    keys: tuple[tuple[str, Shape], ...] = ()

    def check(self, value: Any) -> str | None:
        """None when ``value`` (a string, or a JSON value inside a json shape) fits; else why not."""
        k = self.kind
        if k == "switch":
            return None if value is None else "takes no value"
        if value is None:
            return "needs a value"
        if k == "secret":
            return None if value == REDACTED else "is a secret: a bundle never carries its value (it comes from " \
                                                  "this host's environment)"
        if k == "json":
            return self._check_json(value)
        text = value if isinstance(value, str) else json.dumps(value)
        if k == "name":
            if not text or len(text) > _NAME_MAX or not text.isprintable() or text.startswith("-"):
                return "must be printable text of at most 256 characters, not starting with '-'"
            return None
        if k == "bool":
            return None if isinstance(value, bool) or text.lower() in ("true", "false") else "must be true or false"
        if k == "choice":
            return None if text in self.choices or text.upper() in self.choices or text.lower() in self.choices \
                else f"must be one of {', '.join(self.choices)}"
        if k == "pattern":
            assert self.pattern is not None
            return None if self.pattern.fullmatch(text) else f"must match {self.pattern.pattern}"
        if k == "int_list":
            items = value if isinstance(value, list) else text.replace(",", " ").split()
            if not items or len(items) > 1024:
                return "must be a list of 1 to 1024 integers"
            for item in items:
                why = Shape("int", self.lo, self.hi).check(item)
                if why:
                    return f"item {shown(item, 20)} {why}"
            return None
        if k in ("int", "float"):
            return self._check_number(value, text)
        return f"has an unknown shape {k}"

    def _check_number(self, value: Any, text: str) -> str | None:
        if isinstance(value, bool):
            return "must be a number"
        try:
            x: float = int(text) if self.kind == "int" else float(text)
        except ValueError:
            return "must be an integer" if self.kind == "int" else "must be a number"
        if len(text) > 40 or not math.isfinite(x):
            return "is out of range"
        if (self.lo is not None and x < self.lo) or (self.hi is not None and x > self.hi):
            return f"must be within {self.lo:g}..{self.hi:g}"
        return None

    def _check_json(self, value: Any) -> str | None:
        if isinstance(value, str):
            if len(value) > 4096:
                return "is longer than 4096 characters"
            try:
                value = json.loads(value, parse_constant=_no_constant)
            except ValueError:
                return "must be a JSON object (it does not parse as JSON)"
        if not isinstance(value, dict):
            return "must be a JSON object"
        allowed = dict(self.keys)
        for key, item in value.items():
            sub = allowed.get(key)
            if sub is None:
                return f"key {shown(key, 40)!r} is not one a bundle may set (allowed: {', '.join(allowed)})"
            if isinstance(item, dict | list) and sub.kind not in ("int_list", "json"):
                return f"key {key!r} must be a single value"
            why = sub.check(item if not isinstance(item, bool) or sub.kind == "bool" else str(item).lower())
            if why:
                return f"key {key!r} {why}"
        return None


def _no_constant(name: str) -> Any:
    raise ValueError(name)


@dataclass(frozen=True, slots=True)
class Allowlist:
    flags: dict[str, Shape]
    env: dict[str, Shape]
    source: str = ""
    _lines: dict[str, int] = field(default_factory=dict)

    def flag(self, flag: str) -> Shape | None:
        return self.flags.get(canonical_flag(flag))

    def check_env(self, name: str, value: str, *, allow_env: Collection[str] = (),
                  error: Callable[[str], InputError]) -> None:
        """Refuse ``name=value`` unless the allowlist names it with a value of its shape, or the operator passed
        ``--allow-env NAME`` for a variable :func:`vllmargv.liftable` names (never one that loads code or moves
        files or traffic). ``error`` makes the InputError with the file's place."""
        if not _ENV_NAME.match(name):
            raise error(f"{shown(name, 60)!r} is not an environment variable name")
        rule = vllmargv.env_rule(name)
        if rule is not None and rule.kind is not vllmargv.Kind.SECRET:
            raise error(f"{name} is never taken from a bundle, even with --allow-env ({rule.why}): set it in your "
                        "own environment if you mean it")
        shape = self.env.get(name)
        if shape is None and value == REDACTED and is_secret_env(name):
            return  # a secret the plan needs by name: its value comes from this host's environment
        if shape is None:
            if name in allow_env and not vllmargv.liftable(name):
                raise error(f"{name} is not one --allow-env can lift (it lifts tuning variables of vLLM and the "
                            "libraries under it: VLLM_*, NCCL_*, UCX_*, CUDA_*, TORCH_*, OMP_* ...): set it in your "
                            "own environment if you mean it")
            if name in allow_env:
                if is_secret_env(name) and value != REDACTED:
                    raise error(f"{name} is a secret: a bundle never carries its value (set it in this host's "
                                "environment)")
                if "\n" in value or len(value) > 4096:
                    raise error(f"{name}: a value accepted with --allow-env must be one line of at most 4096 "
                                "characters")
                return
            if vllmargv.liftable(name):
                raise error(f"{name} is not an environment variable a bundle may set (accept it on this host with "
                            f"--allow-env {name})")
            raise error(f"{name} is not an environment variable a bundle may set")
        why = shape.check(value)
        if why:
            raise error(f"{name} {why}" if shape.kind == "secret" or is_secret_env(name)
                        else f"{name}={shown(value, 60)}: {why}")

    def check_args(self, args: Sequence[str], *, error: Callable[[str], InputError]) -> list[tuple[str, str | None]]:
        """The flags of a ``vllm serve`` argv tail (after the model) as ``(canonical flag, value)``, each one the
        allowlist names with a value of its shape; InputError for anything else (an unknown or code-loading flag,
        a bare word, a short or dotted form)."""
        out: list[tuple[str, str | None]] = []
        for flag, value in split_flags(args, self, error=error):
            shape = self.flags.get(flag)
            if shape is None:
                raise error(f"{flag} is not a vLLM flag a bundle may carry (see {ALLOWLIST_FILE}: flags that load "
                            "code or files, open routes or name hosts are never carried)")
            why = shape.check(value)
            if why:
                raise error(f"{flag} {shown(value, 60) if value is not None else ''}: {why}".replace("  ", " "))
            out.append((flag, value))
        return out


def canonical_flag(flag: str) -> str:
    """The long name vLLM reads ``flag`` as (``--max_num_seqs``, ``--max-num-s`` → ``--max-num-seqs``)."""
    return vllmargv.flag_of(flag)


def split_flags(args: Sequence[str], allow: Allowlist, *, error: Callable[[str], InputError]
                ) -> list[tuple[str, str | None]]:
    """``[--a, 1, --b=2, --switch]`` → ``[(--a, 1), (--b, 2), (--switch, None)]``, each flag under the long name
    vLLM reads it as (:func:`vllmargv.read_words`: ``-tp``, ``--tensor_parallel``, a unique prefix). Refuses bare
    words, ambiguous abbreviations, flags vLLM does not know and dotted or appending forms (``--x.y``)."""
    out: list[tuple[str, str | None]] = []
    for word in vllmargv.read_words(args):
        first = word.written[0]
        if word.problem is not None and word.problem != "unknown":
            raise error(f"{shown(' '.join(word.written), 60)}: {word.problem}")
        if word.flag is None:
            raise error(f"{shown(first, 60)!r} is not a vLLM flag (a bundle's arguments are '--flag value' items)")
        name = first.split("=", 1)[0]
        if "." in name or "+" in name:
            raise error(f"{shown(name, 60)}: dotted or appending forms are not taken from a bundle (write the whole "
                        "JSON value)")
        out.append((word.flag, word.value))
    return out


def _parse_shape(raw: Any, f: Fields, key: str) -> Shape:
    if isinstance(raw, str):
        if raw not in ("switch", "name", "secret", "bool"):
            raise f.error(key, f"unknown value shape {raw!r} (one of {', '.join(SHAPES)})")
        return Shape(raw)
    sf = Fields(raw, f.source, f"{f.name(key)}.", line=f.line_of(key))
    kinds = [k for k in raw if k in SHAPES]
    if len(kinds) != 1:
        raise f.error(key, f"give exactly one value shape ({', '.join(SHAPES)})")
    kind = kinds[0]
    if kind in ("int", "float", "int_list"):
        bounds = sf.get(kind, list, None)
        if not bounds or len(bounds) != 2 or not all(isinstance(b, int | float) and not isinstance(b, bool)
                                                     for b in bounds):
            raise sf.error(kind, "expected [lo, hi]")
        shape = Shape(kind, float(bounds[0]), float(bounds[1]))
    elif kind == "choice":
        shape = Shape(kind, choices=tuple(sf.str_list("choice")))
    elif kind == "pattern":
        text = sf.get("pattern", str, "")
        try:
            shape = Shape(kind, pattern=re.compile(text))
        except re.error as exc:
            raise sf.error("pattern", f"not a regular expression: {exc}") from None
    else:  # json
        sub = sf.sub("json", required=True)
        assert sub is not None
        keys = tuple((k, _parse_shape(sub.get(k, (str, dict)), sub, k)) for k in list(sub.data))
        sub.done()
        shape = Shape(kind, keys=keys)
    sf.done()
    return shape


def parse_allowlist(data: Any, source: str | Path) -> Allowlist:
    top = Fields(data, source)
    flags: dict[str, Shape] = {}
    fl = top.sub("flags", required=True)
    assert fl is not None
    for key in list(fl.data):
        if not key.startswith("--") or canonical_flag(key) != key:
            raise fl.error(key, "flags are written in their long form with dashes (--max-num-seqs)")
        flags[key] = _parse_shape(fl.get(key, (str, dict)), fl, key)
    fl.done()
    env: dict[str, Shape] = {}
    ev = top.sub("env", required=True)
    assert ev is not None
    for key in list(ev.data):
        if not _ENV_NAME.match(key):
            raise ev.error(key, "not an environment variable name")
        env[key] = _parse_shape(ev.get(key, (str, dict)), ev, key)
    ev.done()
    top.done()
    lines = {k: data.line_of(k) for k in data} if isinstance(data, LDict) else {}
    return Allowlist(flags=flags, env=env, source=str(source), _lines=lines)


@cache
def _load(path: Path) -> Allowlist:
    return parse_allowlist(load_file(path), path)


def load_allowlist(path: Path | None = None) -> Allowlist:
    """The shipped allowlist (or the one at ``path``), read once per process."""
    return _load(path or paths.shipped_profiles_dir() / ALLOWLIST_FILE)
