"""The playbook file: the shipped one is complete and valid, broken files give one line naming file:line: field,
the operator's file extends and overrides, and a fix becomes the planner's PlanFix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.helpers import expectation
from tui.core.errors import InputError
from tui.core.models import Catalog
from tui.core.plan.hostfacts import sim_facts
from tui.core.plan.planner import apply_fix, plan
from tui.core.playbook import MatchContext, load_playbook, operator_playbook_path
from tui.core.playbook.literals import required_literals
from tui.core.playbook.loader import parse_playbook_file, parse_playbook_text, shipped_playbook_path
from tui.core.playbook.model import version_matches

BAD = FIXTURES / "bad_playbooks"


def test_shipped_playbook_is_valid_and_complete() -> None:
    book = load_playbook(operator=False)
    ids = [e.id for e in book.entries]
    assert len(ids) == len(set(ids)) >= 30
    for e in book.entries:
        assert e.title and e.explain, e.id
        assert e.fixable or e.not_fixable, f"{e.id}: says neither a fix nor what to do"
        assert not e.auto or e.fixable, e.id
    # the entries the design note and VLLM-0.24.md §6 name
    for needed in ("flashinfer-no-nvcc", "flashinfer-jit-stall", "engine-ready-timeout", "ssm-conv-layout-nixl",
                   "moe-dp-start-failure", "kv-cache-too-small-for-max-len", "no-kv-cache-memory",
                   "max-model-len-over-derived", "gpu-memory-taken", "cuda-oom", "cuda-oom-loading",
                   "cuda-oom-sampler-warmup", "port-in-use", "unknown-flag", "bad-flag-value", "bad-json-config",
                   "nixl-not-installed", "nixl-handshake-failure", "nixl-transfer-failure",
                   "nixl-side-channel-port-clash", "vllm-attention-backend-env-ignored", "triton-jit-during-inference",
                   "engine-core-start-failed", "engine-core-died"):
        assert book.get(needed) is not None, needed
    auto = {e.id for e in book.entries if e.auto}
    assert auto == {"flashinfer-no-nvcc", "flashinfer-jit-stall", "flashinfer-sampler-unavailable",
                    "engine-ready-timeout", "ssm-conv-layout-nixl", "vllm-attention-backend-env-ignored",
                    "vllm-port-uri"}
    assert not book.entry("moe-dp-start-failure").auto  # an experiment, never automatic
    assert book.entry("triton-jit-during-inference").severity == "info"


def test_format_is_documented_at_the_top_of_the_shipped_file() -> None:
    head = shipped_playbook_path().read_text(encoding="utf-8").split("\nversion:", 1)[0]
    for word in ("id:", "title:", "severity:", "priority:", "generic:", "lines:", "after:", "within:", "end:",
                 "stalled:", "phases:", "exit_codes:", "seen:", "not_seen:", "when:", "family:", "attention:",
                 "topology:", "vllm:", "explain:", "set_env:", "unset_env:", "add_args:", "remove_args:", "roles:",
                 "not_fixable:", "auto:", "references:", "disabled: true"):
        assert word in head, word


@pytest.mark.parametrize("path", sorted(BAD.glob("*.yaml")), ids=lambda p: p.stem)
def test_broken_playbooks_name_file_line_and_field(path: Path) -> None:
    line, field, text = expectation(path)
    with pytest.raises(InputError) as info:
        parse_playbook_file(path)
    err = info.value
    assert err.file == str(path)
    assert err.line == line, err.one_line()
    if field:
        assert err.field == field, err.one_line()
    assert text in err.one_line()
    assert "\n" not in err.one_line()


def test_corpus_covers_the_kinds_of_mistake() -> None:
    texts = " ".join(expectation(p)[2] for p in BAD.glob("*.yaml"))
    for kind in ("unknown field", "bad regular expression", "expected an integer", "must be one of",
                 "required field is missing", "YAML syntax", "is used twice"):
        assert kind in texts


def test_operator_playbook_adds_replaces_and_disables(isolated_dirs: Path) -> None:
    path = operator_playbook_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "version: 1\nentries:\n"
        "  - id: port-in-use\n    title: Mine\n    match: {lines: ['my own port text']}\n    explain: mine\n"
        "    not_fixable: nothing\n"
        "  - id: triton-jit-during-inference\n    disabled: true\n"
        "  - id: nginx-on-8000\n    title: nginx holds the port\n    priority: 95\n"
        "    match: {lines: ['nginx: \\[emerg\\] bind\\(\\) to \\S+ failed']}\n    explain: x\n"
        "    fix: {add_args: ['--port 8001']}\n",
        encoding="utf-8")
    book = load_playbook()
    assert book.entry("port-in-use").title == "Mine"
    assert book.get("triton-jit-during-inference") is None
    assert book.entry("nginx-on-8000").source == str(path)
    assert book.entries[0].id == "nginx-on-8000"  # priority 95 sorts before every shipped entry
    assert str(path) in book.sources
    m = book.matcher()
    assert [d.entry_id for d in m.feed("nginx: [emerg] bind() to 0.0.0.0:8000 failed (98: in use)")] == \
        ["nginx-on-8000"]
    assert load_playbook(operator=False).get("triton-jit-during-inference") is not None


def test_broken_operator_playbook_stops_loading_with_its_location(isolated_dirs: Path) -> None:
    path = operator_playbook_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((BAD / "unknown_key.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(InputError, match=rf"{re.escape(str(path))}:6: field 'entries\[1\].severty'"):
        load_playbook()


def test_fix_becomes_a_plan_fix_the_planner_applies() -> None:
    book = load_playbook(operator=False)
    facts = sim_facts("h200", 2)
    profile = Catalog.load().model("dummy-qwen3-8b")
    base = plan(profile, "tp1", facts)
    fix = book.entry("flashinfer-no-nvcc").plan_fix(arch="hopper")
    assert fix is not None
    fixed = apply_fix(base, fix, "flashinfer-no-nvcc")
    server = fixed.servers[0]
    assert server.env_dict()["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    # on Hopper vLLM picks FlashAttention 3: the fix must not force Triton attention (it would skew a comparison)
    assert "--attention-backend" not in server.argv
    assert fixed.fixes_applied == ("flashinfer-no-nvcc",)
    blackwell = book.entry("flashinfer-no-nvcc").plan_fix(arch="blackwell")
    assert blackwell is not None and "--attention-backend TRITON_ATTN" in blackwell.add_args
    b200 = apply_fix(plan(Catalog.load().model("qwen3.6-27b-nvfp4"), "tp2", sim_facts("b200", 2)), blackwell, "x")
    argv = list(b200.servers[0].argv)
    assert argv[argv.index("--attention-backend") + 1] == "TRITON_ATTN"
    assert "on blackwell only" in book.entry("flashinfer-no-nvcc").fix_text()
    # the SSM layout fix on a disaggregated plan reaches both roles
    q = Catalog.load().model("dummy-qwen3-8b")
    pd = plan(q, "1p1d", facts)
    ssm = book.entry("ssm-conv-layout-nixl").plan_fix()
    assert ssm is not None
    assert all(s.env_dict()["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS" for s in apply_fix(pd, ssm, "ssm").servers)


def test_placeholders_fill_the_fix_from_the_matched_line() -> None:
    book = load_playbook(operator=False)
    line = ("(EngineCore_DP0 pid=77) ERROR 01-02 03:04:05 [core.py:1231] ValueError: To serve at least one request "
            "with the model's max seq len (262144), (48.00 GiB KV cache is needed, which is larger than the "
            "available KV cache memory (20.50 GiB). Based on the available memory, the estimated maximum model "
            "length is 111872. Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU "
            "backend) or decreasing `max_model_len` when initializing the engine.")
    [diag] = book.matcher().feed(line)
    assert diag.entry_id == "kv-cache-too-small-for-max-len"
    assert diag.captures == {"estimated": "111872"}
    assert diag.changes == ("add --max-model-len 111872",)
    pf = book.plan_fix(diag)
    assert pf is not None and pf.add_args == ("--max-model-len 111872",)
    facts = sim_facts("h200", 1)
    base = plan(Catalog.load().model("dummy-qwen3-8b"), "tp1", facts)
    argv = list(apply_fix(base, pf, diag.entry_id).servers[0].argv)
    assert argv[argv.index("--max-model-len") + 1] == "111872" and argv.count("--max-model-len") == 1


def test_fixes_for_apply_fix_auto_and_by_id() -> None:
    book = load_playbook(operator=False)
    m = book.matcher()
    diags = m.feed("(APIServer pid=1) WARNING 01-02 03:04:05 [envs.py:2004] Unknown vLLM environment variable "
                   "detected: VLLM_ATTENTION_BACKEND")
    diags += m.feed("(EngineCore pid=2) ERROR 01-02 03:04:06 [core.py:1231] RuntimeError: Could not find nvcc and "
                    "default cuda_home='/usr/local/cuda' doesn't exist")
    diags += m.feed("main.py: error: unrecognized arguments: --enable-magic")
    got = book.fixes(diags, "auto")
    assert [eid for eid, _ in got] == ["flashinfer-no-nvcc", "vllm-attention-backend-env-ignored"]
    assert got[1][1].unset_env == ("VLLM_ATTENTION_BACKEND",)
    [(eid, pf)] = book.fixes(diags, "unknown-flag")  # asked for by id: applied though not auto
    assert eid == "unknown-flag" and pf.remove_args == ("--enable-magic",)
    [(_, ready)] = book.fixes([], "engine-ready-timeout")  # not diagnosed, no placeholders: still available
    assert ready.set_env == (("VLLM_ENGINE_READY_TIMEOUT_S", "1800"),)
    with pytest.raises(InputError, match="no playbook entry 'nope'"):
        book.fixes(diags, "nope")
    with pytest.raises(InputError, match="has no fix to apply: Find the holder"):
        book.fixes(diags, "port-in-use")
    with pytest.raises(InputError, match="takes values from the failing log line"):
        book.fixes([], "kv-cache-too-small-for-max-len")


def test_version_specs() -> None:
    assert version_matches("0.24.0", "0.24") and version_matches("0.24.1+cu130", "0.24")
    assert not version_matches("0.2", "0.24") and not version_matches("0.240.0", "0.24")
    assert version_matches("0.24.0", ">=0.13") and not version_matches("0.12.9", ">=0.13")
    assert version_matches("0.24.0", "<0.30") and version_matches("0.24.0", "==0.24.0")
    assert version_matches("0.24", "==0.24.0") and version_matches("0.25.0", "!=0.24")


def test_when_conditions_unknown_facts_exclude_nothing_except_for_end_rules() -> None:
    when = load_playbook(operator=False).entry("moe-dp-start-failure").when
    assert when.admits(MatchContext())
    assert not when.admits(MatchContext(), strict=True)
    full = MatchContext(family="moe", topology="dp", vllm_version="0.24.0")
    assert when.admits(full, strict=True)
    assert not when.admits(MatchContext(topology="tp"))
    assert not when.admits(MatchContext(family="moe", topology="dp", vllm_version="0.25.1"))


@pytest.mark.parametrize(("pattern", "expected"), [
    (r"Could not find nvcc and default cuda_home='[^']*' doesn't exist",
     ("Could not find nvcc and default cuda_home='",)),
    (r"NIXL transfer failure: (?P<r>handshake_failed|transfer_failed)", ("NIXL transfer failure: ",)),
    (r"(?:abc|defg)\d+", ("defg", "abc")),
    (r"(?:abc|)\d+", ()),  # an optional branch: nothing is required
    (r"x?y", ()),
    (r"(?i)case insensitive", ()),
    (r"(?:hello world)+ again", ("hello world",)),
])
def test_required_literals(pattern: str, expected: tuple[str, ...]) -> None:
    assert required_literals(pattern) == expected


def test_every_shipped_pattern_has_a_literal_prefilter() -> None:
    # what keeps matching fast: most lines are rejected by a substring search before any regex runs
    for e in load_playbook(operator=False).entries:
        for p in (e.lines.patterns if e.lines else ()):
            assert p.literals and min(map(len, p.literals)) >= 3, f"{e.id}: {p.text!r}"


def test_disabled_entry_needs_only_its_id() -> None:
    [e] = parse_playbook_text("version: 1\nentries:\n  - {id: cuda-oom, disabled: true}\n", "x.yaml")
    assert e.disabled
    with pytest.raises(InputError, match="unknown field"):
        parse_playbook_text("version: 1\nentries:\n  - {id: cuda-oom, disabled: true, title: t}\n", "x.yaml")
