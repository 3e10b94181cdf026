"""Round trips as properties (issue 32): for every layout the app can start on one host — a topology, serve knobs
from the shipped catalogue, playbook fixes, extra vLLM flags the allowlist names, the exporting host's own address,
ports, GPUs and vllm executable — ``export`` then ``import`` on another host gives back the same plan: the same
servers, each with the same vLLM configuration (flags as vLLM reads them, environment) apart from what each host
decides itself (placement), the same knobs and the same fixes applied.

The pure functions ``export`` and ``import`` go through are used (``build_bundle`` → the YAML written →
``load_bundle`` → ``plan_here``): nothing is launched.

Not in the space, on purpose: a fix whose values come from the failing log line (``{estimated}``, ``{flag}``): this
host cannot apply it without that line, so it is not recorded as applied here (tests/hardening/
test_trust2_import.py::TestFixesApplied); a layout across hosts: export writes one host's part, and ``up --bundle``
launches a bundle's layout on one host (``plan_across`` refuses a bundle)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tui.core.errors import InputError, PlanRefused
from tui.core.models import Catalog, ModelProfile
from tui.core.plan.allowlist import PLACEMENT_ENV, PLACEMENT_FLAGS, Allowlist, load_allowlist, split_flags
from tui.core.plan.hostfacts import HostFacts, sim_facts
from tui.core.plan.knobs import Knob, KnobCatalog, check_request_knobs
from tui.core.plan.planner import PlanOptions, apply_fix, plan
from tui.core.plan.spec import LaunchPlan
from tui.core.playbook.book import Playbook, load_playbook
from tui.core.record.bundle import build_bundle, load_bundle, write_bundle
from tui.core.record.bundle_plan import _PLANNED_FLAGS, plan_here
from tui.core.record.fingerprint import host_fingerprint
from tui.core.topology import parse_topology

TOPOLOGIES = ("tp1", "tp2", "dp2", "1p1d")
#: profiles of both families: a dense hybrid-attention model and a mixture of experts (expert parallel applies)
MODELS = ("qwen3.6-27b-nvfp4", "gemma-4-26b-a4b-fp8")


@dataclass(frozen=True)
class World:
    facts: HostFacts
    catalog: Catalog
    knobs: KnobCatalog
    book: Playbook
    rules: Allowlist


_WORLD: list[World] = []


def world() -> World:
    """This host's catalogues, read once (each example plans against the same files)."""
    if not _WORLD:
        _WORLD.append(World(sim_facts("b200", 2), Catalog.load(), KnobCatalog.load(), load_playbook(operator=False),
                            load_allowlist()))
    return _WORLD[0]


def _fix_ids() -> list[str]:
    book = load_playbook(operator=False)
    return sorted(e.id for e in book.entries if e.fixable and e.fix is not None and not e.fix.placeholders())


def _flag_values(rules: Allowlist) -> list[tuple[str, st.SearchStrategy[str | None]]]:
    """Each allowlisted flag a launch may add (``up --arg``), with values of its shape; not the placement flags
    nor the memory flags the planner plans (those are the planner's and the operator's, said apart)."""
    out: list[tuple[str, st.SearchStrategy[str | None]]] = []
    for flag, shape in sorted(rules.flags.items()):
        if flag in PLACEMENT_FLAGS or flag in _PLANNED_FLAGS or flag == "--served-model-name":
            continue
        if shape.kind == "switch":
            out.append((flag, st.none()))
        elif shape.kind == "int" and shape.lo is not None and shape.hi is not None:
            out.append((flag, st.integers(int(shape.lo), int(min(shape.hi, 1 << 20))).map(str)))
        elif shape.kind == "float" and shape.lo is not None and shape.hi is not None:
            out.append((flag, st.floats(shape.lo, shape.hi).map(lambda x: f"{x:.2f}")))
        elif shape.kind == "choice":
            out.append((flag, st.sampled_from(shape.choices)))
    return out


def knob_value(knob: Knob) -> st.SearchStrategy[str]:
    """A value of ``knob`` as ``--knob NAME=VALUE`` takes it: a named value (``ngram:N`` in its range), or a number
    of an int knob."""
    named: list[st.SearchStrategy[str]] = []
    for v in knob.values:
        if v.param is None:
            named.append(st.just(v.name))
        else:
            named.append(st.integers(v.param.lo, v.param.hi).map(f"{v.name}:{{}}".format))
    if knob.kind == "int":
        named.append(st.integers(knob.lo, min(knob.hi, 1 << 16)).map(str))
    return st.one_of(named)


@st.composite
def layouts(draw: st.DrawFn) -> tuple[ModelProfile, str, PlanOptions, LaunchPlan]:
    """A layout as ``up`` starts it on the exporting host: topology, knobs, extra flags, fixes, its placement."""
    w = world()
    profile = w.catalog.model(draw(st.sampled_from(MODELS)))
    topology = draw(st.sampled_from(TOPOLOGIES))
    topo = parse_topology(topology)
    flags = _flag_values(w.rules)
    picked = draw(st.lists(st.sampled_from(range(len(flags))), max_size=3, unique=True))
    extra: list[str] = []
    bases: set[str] = set()
    for i in picked:
        flag, values = flags[i]
        base = flag.removeprefix("--no-").removeprefix("--")
        if base in bases:  # --enable-x and --no-enable-x together: vLLM takes the last, so does a round trip
            continue
        bases.add(base)
        value = draw(values)
        extra += [flag] if value is None else [flag, value]
    options = PlanOptions(
        host=draw(st.sampled_from(["127.0.0.1", "10.20.0.7", "0.0.0.0", "::1"])),
        port=draw(st.integers(9000, 9999)), server_base_port=draw(st.integers(12000, 12900)),
        side_channel_base=draw(st.integers(15000, 15900)),
        gpus=draw(st.sampled_from([None, (1, 0)])) if topo.gpus_needed == 2 else None,
        vllm_executable=draw(st.sampled_from(["vllm", "/opt/vllm/bin/vllm"])),
        extra_args=tuple(extra))
    try:
        p = plan(profile, topo, w.facts, options)
        pairs: list[tuple[str, str]] = []
        for name, knob in sorted(w.knobs.knobs.items()):
            if draw(st.booleans()):
                roles = [r for r in knob.roles if r != "single"] if topo.kind == "pd" else []
                role = draw(st.sampled_from([None, *roles]))
                pairs.append((f"{role}.{name}" if role else name, draw(knob_value(knob))))
        if pairs:
            p = check_request_knobs(w.knobs, pairs, profile, p, w.facts)
        arches = {g.arch for i in p.gpus if (g := w.facts.gpu(i)) is not None}
        arch = arches.pop() if len(arches) == 1 else None  # as up --apply-fix picks a fix's arch_add_args
        for fix_id in draw(st.lists(st.sampled_from(_fix_ids()), max_size=2, unique=True)):
            ((_, fix),) = w.book.fixes([], fix_id, arch)
            p = apply_fix(p, fix, fix_id)
    except (PlanRefused, InputError):
        assume(False)  # a layout up refuses to start is no layout to hand on
        raise
    return profile, topology, options, p


def _config(p: LaunchPlan, rules: Allowlist) -> list[tuple[str, str, tuple[str, ...], dict[str, str | None],
                                                          dict[str, str]]]:
    """Each server as vLLM reads it, less what each host decides itself: name, role, the served model, its flags
    (long names, the last of a repeated one) and its environment, without placement."""
    out: list[tuple[str, str, tuple[str, ...], dict[str, str | None], dict[str, str]]] = []
    for s in p.servers:
        flags = {f: v for f, v in split_flags(s.argv[3:], rules, error=InputError) if f not in PLACEMENT_FLAGS}
        env = {k: v for k, v in s.env if k not in PLACEMENT_ENV}
        out.append((s.name, s.role, (s.argv[1], s.argv[2]), flags, env))
    return out


#: the importing hosts: the same kind of GPU (a fix's arch_add_args and a knob's requirements are each host's own
#: word, so a Hopper host plans a Blackwell host's layout its own way), more of them, its own address and ports
IMPORTERS = [(2, PlanOptions()), (4, PlanOptions(host="10.30.0.9", port=18000, server_base_port=18100)),
             (8, PlanOptions(side_channel_base=25600, vllm_executable="/usr/local/bin/vllm"))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.filter_too_much])
@given(layout=layouts(), importer=st.sampled_from(IMPORTERS))
def test_export_then_import_gives_back_the_same_plan(layout: tuple[ModelProfile, str, PlanOptions, LaunchPlan],
                                                     importer: tuple[int, PlanOptions]) -> None:
    profile, topology, _, exported = layout
    w = world()
    gpus, options = importer
    facts = sim_facts("b200", gpus)
    data = build_bundle(source="layout", source_id="l1", profile=profile, layouts=[(topology, exported.to_dict())],
                        workloads={}, fingerprint=host_fingerprint(w.facts))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bundle.yaml"
        write_bundle(path, data)
        bundle = load_bundle(path)
        bp = plan_here(bundle, bundle.layouts[0], facts, options, book=w.book, knobs=w.knobs, allow=w.rules)
    got = bp.plan
    assert _config(got, w.rules) == _config(exported, w.rules)
    assert got.knobs == exported.knobs
    assert got.fixes_applied == exported.fixes_applied
    assert [(s.tp, s.dp, len(s.gpus)) for s in got.servers] == [(s.tp, s.dp, len(s.gpus)) for s in exported.servers]
    assert (got.proxy is None) == (exported.proxy is None)
    assert bp.secrets == ()
    # what this host decides is this host's: its address and ports, never the exporting host's
    assert {s.host for s in got.servers} == {options.host}
    assert all(s.argv[0] == options.vllm_executable for s in got.servers)


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_a_plain_layout_round_trips_on_the_same_host(topology: str) -> None:
    """The smallest case, without hypothesis: a layout planned with this host's defaults comes back identical."""
    w = world()
    profile = w.catalog.model(MODELS[0])
    exported = plan(profile, parse_topology(topology), w.facts, PlanOptions())
    data = build_bundle(source="layout", source_id="l1", profile=profile, layouts=[(topology, exported.to_dict())],
                        workloads={}, fingerprint={})
    with tempfile.TemporaryDirectory() as tmp:
        write_bundle(Path(tmp) / "b.yaml", data)
        bundle = load_bundle(Path(tmp) / "b.yaml")
        bp = plan_here(bundle, bundle.layouts[0], w.facts, PlanOptions(), book=w.book, knobs=w.knobs)
    assert bp.plan == exported and bp.carried == () and bp.warnings == ()
