"""One launch request for both front ends: what ``disagg-tui plan``/``up`` take and the console's launch form holds.

A :class:`LaunchRequest` is frozen and valid: constructing one runs the one validation, which raises
:class:`RequestInvalid` (the project's ``InputError``, naming the first flag) with every problem at once, each an
``InputError`` naming its flag (``--port``, ``--env``, ``--arg``...). The CLI builds it from argparse
(:meth:`LaunchRequest.from_args`), the console from its form (:meth:`LaunchRequest.from_text`, the same
conversions); :meth:`LaunchRequest.plan_options` is what the planner takes, :func:`plan_request` the plan, and
:meth:`LaunchRequest.to_argv` the arguments after ``disagg-tui up`` that give back the same request.

The arguments are defined once (``launchargs``, re-exported here): :func:`add_plan_arguments` and
:func:`add_up_arguments` add them to an argparse parser (the CLI registers ``plan``, ``up``, ``run`` and ``doctor``
with them; :meth:`LaunchRequest.from_argv` parses with the same definitions). argparse takes every value as text;
the request converts it, so a form field and a flag are read by the same code.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NoReturn

from tui.core import netaddr, vllmargv
from tui.core.errors import AppError, InputError
from tui.core.models import Catalog, ModelProfile
from tui.core.models.ranges import MODEL
from tui.core.plan.argtext import ENV_NAME, check_json_flags, parse_env, parse_gpu_list, quote_words, split_args
from tui.core.plan.hostfacts import HostFacts
from tui.core.plan.launchargs import add_bundle_arguments, add_plan_arguments, add_up_arguments, add_vllm_argument
from tui.core.plan.planner import PlanOptions, plan
from tui.core.plan.ports import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DP_RPC_PORT,
    SERVER_BASE_PORT,
    SIDE_CHANNEL_BASE,
    is_loopback,
)
from tui.core.plan.spec import LaunchPlan
from tui.core.topology import parse_topology

#: each field's flag (what an error names, what ``to_argv`` writes)
FLAGS: dict[str, str] = {
    "model": "--model", "topology": "--topology", "gpus": "--gpus", "host": "--host", "port": "--port",
    "server_port": "--server-port", "side_channel_port": "--side-channel-port", "model_path": "--model-path",
    "extra_args": "--arg", "extra_env": "--env", "gpu_memory_utilization": "--gpu-memory-utilization",
    "max_model_len": "--max-model-len", "allow_shared_gpus": "--allow-shared-gpus", "vllm": "--vllm",
    "bundle": "--bundle", "allow_env": "--allow-env", "trust_remote_code": "--trust-remote-code",
    "apply_fix": "--apply-fix", "replace": "--replace", "stagger": "--no-stagger",
    "ready_timeout_s": "--ready-timeout", "stall_timeout_s": "--stall-timeout", "knobs": "--knob",
    "dp_local": "--dp-local", "dp_start_rank": "--dp-start-rank", "dp_address": "--dp-address",
    "dp_rpc_port": "--dp-rpc-port", "roles": "--roles", "advertise": "--advertise", "peers": "--peer",
}
__all__ = ["FLAGS", "LaunchRequest", "RequestInvalid", "add_bundle_arguments", "add_plan_arguments",
           "add_up_arguments", "add_vllm_argument", "plan_request"]
_KNOB_KEY = re.compile(r"(?:(?:prefill|decode)\.)?[a-z][a-z0-9_-]{0,31}\Z")
_KNOB_VALUE = re.compile(r"[A-Za-z0-9_.-]{1,32}(?::\d{1,9})?\Z")
#: a peer server of a layout across hosts: scheme, address (IPv4, [IPv6] or a host name) and port, nothing more
_PEER_URL = re.compile(r"http://(?:\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9.-]{1,253}):[0-9]{1,5}\Z")
_HOST_NAME = re.compile(r"^(?=.{1,253}\Z)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                        r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\Z")


class RequestInvalid(InputError):
    """Every problem of a launch request (``problems``, each naming its flag); it reads as the first one, the
    others in its hint."""

    def __init__(self, problems: Sequence[InputError]) -> None:
        self.problems = tuple(problems)
        first = self.problems[0]
        rest = "; ".join(p.title for p in self.problems[1:])
        hint = "; ".join(h for h in (first.hint, f"also {rest}" if rest else None) if h) or None
        super().__init__(first.message, field=first.field, hint=hint)

    def by_flag(self) -> dict[str, list[str]]:
        """The problems' messages by the flag each names (what a form shows next to each field)."""
        out: dict[str, list[str]] = {}
        for p in self.problems:
            out.setdefault(p.field or "", []).append(p.message)
        return out


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """What to launch: the model and topology, every plan option, and what ``up`` adds (a fix, replacing the
    layout that is up, staggering, timeouts, a bundle). Constructing one validates it (:class:`RequestInvalid`)."""

    model: str | None = None  # a profile id, a profile file, a model folder or an ORG/NAME in the HF cache
    topology: str | None = None  # tp<N>, dp<N>, <X>p<Y>d, <X>p<Y>d-tp<K>
    gpus: tuple[int, ...] | None = None  # None: the first ones
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    server_port: int = SERVER_BASE_PORT
    side_channel_port: int = SIDE_CHANNEL_BASE
    model_path: str | None = None
    extra_args: tuple[str, ...] = ()  # words added to each vllm serve command line
    extra_env: tuple[tuple[str, str], ...] = ()
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    allow_shared_gpus: bool = False
    vllm: str | None = None  # the vllm executable (None: found on PATH)
    #: serve knobs from the catalogue (``profiles/knobs.yaml``), one value each: (``[ROLE.]NAME``, value)
    knobs: tuple[tuple[str, str], ...] = ()
    # this host's part of a layout across hosts (``plan --hosts`` writes them for each host's own ``up``)
    dp_local: int | None = None  # DP across hosts: the ranks on this host
    dp_start_rank: int = 0  # the first one's global rank (> 0: engines only, --headless)
    dp_address: str | None = None  # the head's address
    dp_rpc_port: int = DP_RPC_PORT
    roles: tuple[str, ...] = ()  # P/D across hosts: the roles this host runs
    advertise: str | None = None  # the address other hosts reach this one's NIXL side channel at
    peers: tuple[tuple[str, str], ...] = ()  # (role, URL) of the other hosts' servers, for the proxy here
    # what ``up`` adds
    bundle: str | None = None
    allow_env: tuple[str, ...] = ()
    trust_remote_code: bool = False
    apply_fix: str | None = None  # playbook entry ids (comma-separated, applied in order), or "auto"
    replace: bool = False
    stagger: bool = True
    ready_timeout_s: float | None = None
    stall_timeout_s: float | None = None

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise RequestInvalid(problems)

    # --- the one validation --------------------------------------------------------------------------------------
    def problems(self) -> list[InputError]:
        """Every reason this request cannot be launched as written, each naming its flag."""
        out: list[InputError] = []

        def bad(name: str, message: str, hint: str | None = None) -> None:
            out.append(InputError(message, field=FLAGS[name], hint=hint))

        def guard(fn: Any, *args: Any, **kwargs: Any) -> None:
            try:
                fn(*args, **kwargs)
            except InputError as err:
                out.append(err)

        if self.bundle is not None:
            if not self.bundle.strip():
                bad("bundle", "empty; expected a bundle file")
            if self.model is not None:
                bad("model", "--bundle carries the model profile: drop --model")
            if self.knobs:
                bad("knobs", "--bundle carries its layout's flags: drop --knob")
        else:
            for name in ("model", "topology"):
                if getattr(self, name) is None:
                    bad(name, "required (or give --bundle FILE)")
            for name in ("allow_env", "trust_remote_code"):
                if getattr(self, name):
                    bad(name, "only with --bundle FILE (what a bundle may carry here)")
        if self.model is not None and not self.model.strip():
            bad("model", "empty; expected a profile id, a profile file or a model folder")
        if self.topology is not None:
            guard(parse_topology, self.topology)
        if self.gpus is not None:
            if not self.gpus:
                bad("gpus", "no GPU given")
            elif any(isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in self.gpus):
                bad("gpus", f"expected GPU indices like 0,1; got {self.gpus!r}")
        guard(_check_host, self.host)
        for name in ("dp_address", "advertise"):
            value = getattr(self, name)
            if value is not None:
                guard(_check_host, value, FLAGS[name])
        if self.advertise is not None and is_loopback(self.advertise.strip()):
            bad("advertise", f"{self.advertise} is this host's loopback: other hosts cannot reach it; give its "
                             "address on the network the hosts share")
        for name in ("advertise", "dp_address"):  # addresses other hosts are told: never the wildcard
            value = getattr(self, name)
            if value is not None and netaddr.is_wildcard(value):
                bad(name, f"{netaddr.wildcard_why(value)}: other hosts cannot reach it; give this host's address "
                          "on the network the hosts share")
        if self.dp_local is not None and (isinstance(self.dp_local, bool) or not 1 <= self.dp_local <= 4096):
            bad("dp_local", f"expected 1 or more ranks, got {self.dp_local}")
        if isinstance(self.dp_start_rank, bool) or not 0 <= self.dp_start_rank <= 4096:
            bad("dp_start_rank", f"expected a rank 0 or above, got {self.dp_start_rank}")
        for role in self.roles:
            if role not in ("prefill", "decode"):
                bad("roles", f"expected prefill, decode or prefill,decode; got {role[:40]!r}")
        for role, url in self.peers:
            if role not in ("prefill", "decode") or not _PEER_URL.match(url):
                bad("peers", f"expected ROLE=http://ADDRESS:PORT (ROLE prefill or decode), got "
                             f"{(role + '=' + url)[:80]!r}")
            elif netaddr.is_wildcard(netaddr.url_host(url) or ""):
                bad("peers", f"{role}={url[:80]}: {netaddr.wildcard_why(netaddr.url_host(url) or '')}, never a "
                             "peer's address")
        for name in ("port", "server_port", "side_channel_port", "dp_rpc_port"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
                bad(name, f"port must be 1..65535, got {value}")
        for name in ("model_path", "vllm", "apply_fix"):
            value = getattr(self, name)
            if value is not None and not value.strip():
                bad(name, "empty")
        if self.apply_fix and self.apply_fix.strip():
            ids = self.apply_fix.split(",")
            if any(not i.strip() for i in ids):
                bad("apply_fix", f"an empty entry id in {self.apply_fix!r}; expected ID[,ID...] or auto")
            elif "auto" in ids and len(ids) > 1:
                bad("apply_fix", "auto applies every safe fix a failure needs: give it alone, or entry ids")
        for name, words in (("extra_args", self.extra_args), ("allow_env", self.allow_env)):
            if any("\0" in w for w in words):
                bad(name, "a NUL character cannot be passed on a command line")
        guard(check_json_flags, self.extra_args)
        if not any("\0" in w for w in self.extra_args):
            guard(vllmargv.check_tail, self.extra_args, vllmargv.Source.OPERATOR, field=FLAGS["extra_args"])
        for k, v in self.extra_env:
            if ENV_NAME.match(k) and "\0" not in v:
                guard(vllmargv.check_env, k, v, vllmargv.Source.OPERATOR, field=FLAGS["extra_env"])
        if self.model_path is not None and self.model_path.strip():
            guard(vllmargv.check_model, self.model_path, field=FLAGS["model_path"])
        for key, value in self.knobs:
            if not _KNOB_KEY.match(key) or not _KNOB_VALUE.match(value):
                bad("knobs", f"expected [ROLE.]NAME=VALUE with one value (as in attn=triton), got "
                             f"{(key + '=' + value)[:60]!r}")
        if len({k for k, _ in self.knobs}) != len(self.knobs):
            bad("knobs", "a knob given twice")
        for k, v in self.extra_env:
            if not ENV_NAME.match(k):
                bad("extra_env", f"{k!r} is not an environment variable name (letters, digits and _)")
            if "\0" in v:
                bad("extra_env", f"{k}: a NUL character cannot be in the environment")
        for name in ("gpu_memory_utilization", "max_model_len"):
            value = getattr(self, name)
            if value is None:
                continue
            why = "must be a finite number" if not math.isfinite(value) else MODEL[name].message(value)
            if why is not None:
                bad(name, f"{name} {why}")
        for name in ("ready_timeout_s", "stall_timeout_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                bad(name, f"must be > 0 seconds, got {value}")
        return out

    def warnings(self) -> list[str]:
        """What the front end should say before launching (the request is valid as it is)."""
        out: list[str] = []
        host = self.host.strip()
        if not is_loopback(host):
            out.append(f"--host {host}: the servers and the proxy will accept connections from other machines "
                       "(their API has no authentication unless --api-key); the default 127.0.0.1 keeps them local")
        return out

    # --- what the planner takes --------------------------------------------------------------------------------
    def plan_options(self) -> PlanOptions:
        return PlanOptions(
            gpus=self.gpus, host=self.host.strip(), port=self.port, server_base_port=self.server_port,
            side_channel_base=self.side_channel_port, vllm_executable=self.vllm or "vllm",
            extra_args=self.extra_args, extra_env=self.extra_env, model_path=self.model_path,
            gpu_memory_utilization=self.gpu_memory_utilization, max_model_len=self.max_model_len,
            allow_shared_gpus=self.allow_shared_gpus, dp_local=self.dp_local, dp_start_rank=self.dp_start_rank,
            dp_address=self.dp_address.strip() if self.dp_address else None, dp_rpc_port=self.dp_rpc_port,
            roles=self.roles, advertise=self.advertise.strip() if self.advertise else None, peers=self.peers,
        )

    # --- as a command line ---------------------------------------------------------------------------------------
    def to_argv(self) -> list[str]:
        """The arguments after ``disagg-tui up`` (only what differs from the defaults) that parse back into this
        request (:meth:`from_argv`, or the CLI's ``up`` parser)."""
        out: list[str] = []

        def opt(name: str, value: str) -> None:
            flag = FLAGS[name]
            out.extend([f"{flag}={value}"] if value.startswith("-") or not value else [flag, value])

        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            name = f.name
            if name == "gpus":
                opt(name, ",".join(map(str, value)))
            elif name == "extra_args":
                out.append(f"--arg={quote_words(value)}")
            elif name == "extra_env":
                out.extend(f"--env={k}={v}" for k, v in value)
            elif name == "knobs":
                out.extend(f"--knob={k}={v}" for k, v in value)
            elif name == "peers":
                out.extend(f"--peer={k}={v}" for k, v in value)
            elif name == "roles":
                opt(name, ",".join(value))
            elif name == "allow_env":
                out.extend(f"--allow-env={v}" for v in value)
            elif isinstance(value, bool):
                out.append(FLAGS[name])  # the flags that switch a default (stagger's is --no-stagger)
            elif isinstance(value, float):
                opt(name, repr(value))
            else:
                opt(name, str(value))
        return out

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> LaunchRequest:
        """The request ``disagg-tui up ARGV`` makes (the arguments :meth:`to_argv` writes); a mistake is an
        InputError."""
        parser = _RaisingParser(prog="disagg-tui up", allow_abbrev=False, add_help=False)
        add_plan_arguments(parser, required=False)
        add_up_arguments(parser)
        add_vllm_argument(parser)
        return cls.from_args(parser.parse_args(list(argv)))

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, topology: str | None = None) -> LaunchRequest:
        """The request of a parsed ``plan``/``up``/``run`` command line (``topology``: one of ``run``'s list)."""
        values = {k: v for k, v in vars(args).items() if k in _DESTS}
        if topology is not None:
            values["topology"] = topology
        return cls.from_text(values)

    @classmethod
    def from_text(cls, values: Mapping[str, Any]) -> LaunchRequest:
        """A request from the flags' values as text, keyed by their argparse names (``model``, ``gpus``, ``port``,
        ``arg``, ``env``, ``gpu_memory_utilization``, ``no_stagger``...): what argparse gives, or a form. ``arg``
        and ``env`` are lists of items (``--arg '--a 1'``, ``--env K=V``) or one text of several (a form field:
        ``A=1 B='x y'``). A value left out or None is the default (a blank one is refused where a value is needed: a
        form passes None for a field left empty). Every problem at once: RequestInvalid."""
        problems: list[InputError] = []
        kw: dict[str, Any] = {}

        def text(dest: str) -> str | None:
            value = values.get(dest)
            return None if value is None else str(value)

        def convert(dest: str, name: str, fn: Any) -> None:
            raw = text(dest)
            if raw is None:
                return
            try:
                kw[name] = fn(raw, FLAGS[name])
            except InputError as err:
                problems.append(err)

        for dest in ("model", "topology", "host", "model_path", "vllm", "bundle", "apply_fix", "dp_address",
                     "advertise"):
            raw = text(dest)
            if raw is not None:
                kw[dest] = raw
        convert("gpus", "gpus", parse_gpu_list)
        for dest, name in (("port", "port"), ("server_port", "server_port"),
                           ("side_channel_port", "side_channel_port"), ("max_model_len", "max_model_len"),
                           ("dp_local", "dp_local"), ("dp_start_rank", "dp_start_rank"),
                           ("dp_rpc_port", "dp_rpc_port")):
            convert(dest, name, _whole)
        for dest, name in (("gpu_memory_utilization", "gpu_memory_utilization"), ("ready_timeout", "ready_timeout_s"),
                           ("stall_timeout", "stall_timeout_s")):
            convert(dest, name, _number)
        for dest, name, fn in (("arg", "extra_args", split_args), ("env", "extra_env", parse_env)):
            items = values.get(dest)
            if not items:
                continue
            try:
                got = fn([items] if isinstance(items, str) and dest == "arg" else items, FLAGS[name])
                kw[name] = tuple(got)
            except InputError as err:
                problems.append(err)
        knob_items = values.get("knob")
        if knob_items:
            try:
                kw["knobs"] = _knob_pairs([knob_items] if isinstance(knob_items, str) else knob_items)
            except InputError as err:
                problems.append(err)
        roles = text("roles")
        if roles is not None:
            kw["roles"] = tuple(r.strip() for r in roles.split(",") if r.strip()) or (roles,)
        peer_items = values.get("peer")
        if peer_items:
            try:
                kw["peers"] = _peer_pairs([peer_items] if isinstance(peer_items, str) else peer_items)
            except InputError as err:
                problems.append(err)
        if values.get("allow_env"):
            kw["allow_env"] = tuple(values["allow_env"])
        for dest in ("allow_shared_gpus", "trust_remote_code", "replace"):
            if values.get(dest):
                kw[dest] = True
        if values.get("no_stagger"):
            kw["stagger"] = False
        try:
            request = cls(**kw)
        except RequestInvalid as err:
            raise RequestInvalid([*problems, *err.problems]) from None
        if problems:
            raise RequestInvalid(problems)
        return request

    @property
    def explicit_memory(self) -> tuple[str, ...]:
        """The memory settings this request gives itself (a bundle's values do not override them)."""
        return tuple(n for n in ("gpu_memory_utilization", "max_model_len") if getattr(self, n) is not None)


def plan_request(request: LaunchRequest, catalog: Catalog, facts: HostFacts, *,
                 topology: str | None = None) -> tuple[ModelProfile, LaunchPlan]:
    """The plan ``up`` makes of ``request`` on a host of these facts (the model found in ``catalog``)."""
    if request.model is None or request.bundle is not None:
        raise AppError("a bundle's layout is planned from the bundle (disagg-tui up --bundle FILE)")
    profile = catalog.model(request.model)
    topo = parse_topology(topology or request.topology or "")
    result = plan(profile, topo, facts, request.plan_options())
    if request.knobs:
        from tui.core.plan.knobs import KnobCatalog, check_request_knobs

        result = check_request_knobs(KnobCatalog.load(), request.knobs, profile, result, facts)
    return profile, result


def _knob_pairs(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--knob NAME=VALUE`` items (a form's text may hold several, split by spaces) as pairs."""
    out: list[tuple[str, str]] = []
    for item in items:
        for word in str(item).split():
            key, eq, value = word.partition("=")
            if not eq or not key or not value:
                raise InputError(f"expected [ROLE.]NAME=VALUE (as in attn=triton), got {word[:60]!r}", field="--knob")
            if "," in value:
                raise InputError(f"{key}: one value here ({value[:40]!r} lists several: only 'run' sweeps them)",
                                 field="--knob")
            out.append((key, value))
    return tuple(out)


def _peer_pairs(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--peer ROLE=URL`` items as pairs (checked by the request's validation)."""
    out: list[tuple[str, str]] = []
    for item in items:
        role, eq, url = str(item).partition("=")
        if not eq:
            raise InputError(f"expected ROLE=http://ADDRESS:PORT, got {str(item)[:80]!r}", field="--peer")
        out.append((role.strip(), url.strip()))
    return tuple(out)


def _check_host(text: str, flag: str = "--host") -> None:
    """The address servers and the proxy bind: an IP address or a host name."""
    host = text.strip()
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _HOST_NAME.match(host):
            raise InputError(f"expected an IP address or a host name, got {text!r}", field=flag) from None


def _whole(text: str, flag: str) -> int:
    t = text.strip()
    if not t.isascii() or not t.lstrip("-").isdigit() or len(t) > 40:
        raise InputError(f"expected a whole number, got {text!r}", field=flag)
    return int(t)


def _number(text: str, flag: str) -> float:
    try:
        value = float(text.strip()) if len(text) <= 40 else math.nan
    except ValueError:
        raise InputError(f"expected a number, got {text!r}", field=flag) from None
    if not math.isfinite(value):
        raise InputError(f"expected a finite number, got {text!r}", field=flag)
    return value


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise InputError(message)


#: the argparse names from_args reads (the arguments tui/core/plan/launchargs.py defines)
_DESTS = frozenset({"model", "topology", "gpus", "host", "port", "server_port", "side_channel_port", "model_path",
                    "arg", "env", "gpu_memory_utilization", "max_model_len", "allow_shared_gpus", "vllm", "bundle",
                    "allow_env", "trust_remote_code", "apply_fix", "replace", "no_stagger", "ready_timeout",
                    "stall_timeout", "knob", "dp_local", "dp_start_rank", "dp_address", "dp_rpc_port", "roles",
                    "advertise", "peer"})
