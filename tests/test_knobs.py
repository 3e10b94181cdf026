"""The knob catalogue (profiles/knobs.yaml): every flag as vLLM 0.24 takes it; axes and settings as one-line errors;
the planner's refusals; the settings on the servers they are for; a hostile operator catalogue refused in one line."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tui.core import paths
from tui.core.errors import InputError, PlanRefused
from tui.core.models import Catalog
from tui.core.plan.hostfacts import sim_facts
from tui.core.plan.knobs import KnobCatalog, apply_settings, configurations, refusals, request_knobs
from tui.core.plan.request import LaunchRequest, plan_request
from tui.core.yamlio import load_file

HELP = (FIXTURES / "vllm-0.24.0-cpu" / "vllm-serve-help-all.txt").read_text()
REQUIRED = ("spec", "ep", "attn", "mnbt", "seqs", "kv", "async", "prefix", "sampler", "graphs")
#: vLLM 0.24's AttentionBackendEnum names (../shared/VLLM-0.24.md, --attention-backend)
BACKENDS = {"FLASH_ATTN", "FLASH_ATTN_DIFFKV", "TRITON_ATTN", "TRITON_ATTN_DIFFKV", "FLASHINFER", "FLASHINFER_MLA",
            "TORCH_SDPA", "FLEX_ATTENTION", "TRITON_MLA", "CUTLASS_MLA", "FLASHMLA"}
CUDAGRAPH_MODES = {"NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"}


def _options() -> dict[str, set[str] | None]:
    """Every option string of `vllm serve --help=all` (0.24.0) → its choices ({a,b} in the help), or None."""
    out: dict[str, set[str] | None] = {}
    for line in HELP.splitlines():
        if not line.startswith("  -"):
            continue
        for part in line.strip().split(", "):
            m = re.match(r"(-{1,2}[A-Za-z0-9][\w.-]*)(?: \{([^}]*)\})?", part)
            if m:
                out[m.group(1)] = set(m.group(2).split(",")) if m.group(2) else None
    return out


def _spec_methods() -> set[str]:
    allow = load_file(paths.shipped_profiles_dir() / "bundle-allowlist.yaml")
    return set(allow["flags"]["--spec-method"]["choice"])


def test_the_catalogue_has_the_knobs_the_issue_names() -> None:
    cat = KnobCatalog.load()
    assert set(REQUIRED) <= set(cat.knobs)
    assert cat.knobs["spec"].roles == ("single", "decode")  # speculative decoding belongs to decode


@pytest.mark.parametrize("name", REQUIRED)
def test_every_flag_is_what_vllm_0_24_accepts(name: str) -> None:
    knob = KnobCatalog.load().knobs[name]
    options = _options()
    words_sets = [knob.args, *(v.args for v in knob.values)]
    assert any(words_sets) or any(v.env for v in knob.values), name
    for v in knob.values:
        for var in dict(v.env):
            assert var == "VLLM_USE_FLASHINFER_SAMPLER"  # the one variable knobs set, read by vLLM 0.24
    for words in words_sets:
        words = [w.replace("{n}", "4") for w in words]
        for i, w in enumerate(words):
            if not w.startswith("-"):
                continue
            assert w in options, f"{name}: {w} is not a vllm serve 0.24.0 option"
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("-") else None
            choices = options[w]
            if choices is not None:
                assert value in choices, f"{name}: {w} {value} not among {sorted(choices)}"
            if w == "--attention-backend":
                assert value in BACKENDS
            if w == "--speculative-config":
                cfg = json.loads(value or "")
                assert cfg["method"] in _spec_methods() and cfg["num_speculative_tokens"] == 4
            if w == "--compilation-config":
                assert json.loads(value or "")["cudagraph_mode"] in CUDAGRAPH_MODES


@pytest.mark.parametrize(("text", "says"), [
    ("prefill.spec=ngram", "speculative decoding belongs to decode"),
    ("nope=1", "unknown knob 'nope'"),
    ("attn=fast", "attn: unknown value 'fast'"),
    ("mnbt=8", "mnbt=8: must be 16..1048576"),
    ("spec=ngram:99", "the number must be 1..16"),
    ("spec=off,off", "off given twice"),
    ("attn", "expected [ROLE.]NAME=V1,V2"),
    ("single.attn=triton", "a knob's role is prefill or decode"),
])
def test_a_bad_axis_is_one_line_naming_the_knob(text: str, says: str) -> None:
    with pytest.raises(InputError) as exc:
        KnobCatalog.load().axis(text)
    line = exc.value.one_line()
    assert says in line and "--knob" in line and "\n" not in line


def test_axes_cross_per_topology_and_role_axes_drop_out_where_no_server_takes_them() -> None:
    axes = KnobCatalog.load().axes(["spec=off,ngram:4", "attn=auto,triton", "decode.mnbt=2048,8192"])
    assert len(configurations(axes, "tp2")) == 4  # decode.mnbt: tp2 has no decode server
    pd = configurations(axes, "1p1d")
    assert len(pd) == 8 and pd[-1].label == "spec=ngram:4 attn=triton decode.mnbt=8192"
    assert pd[-1].slug == "spec-ngram4_attn-triton_decode-mnbt-8192"
    with pytest.raises(InputError, match="given as two axes"):
        KnobCatalog.load().axes(["attn=auto", "attn=triton"])


def _plan(model: str, topology: str, *, gpu: str = "b200", gpus: int = 2, nvcc: bool = True,
          vllm: str = "0.24.0", knobs: tuple[tuple[str, str], ...] = ()) -> tuple[object, object, object]:
    facts = sim_facts("h200" if gpu == "a100" else gpu, gpus, nvcc=nvcc, vllm_version=vllm)
    if gpu == "a100":  # compute capability 8.0: what an Ampere GPU reports
        facts = dataclasses.replace(facts, gpus=tuple(dataclasses.replace(g, compute_capability=8.0)
                                                      for g in facts.gpus))
    req = LaunchRequest(model=model, topology=topology, knobs=knobs)
    profile, plan = plan_request(req, Catalog.load(), facts)
    return profile, plan, facts


@pytest.mark.parametrize(("model", "topology", "knob", "gpu", "nvcc", "vllm", "says"), [
    ("dummy-qwen3-8b", "tp2", ("ep", "on"), "h200", True, "0.24.0", "needs a mixture-of-experts model"),
    ("gemma-4-26b-a4b-fp8", "tp1", ("ep", "on"), "b200", True, "0.24.0", "needs ≥ 2 per server"),
    ("dummy-qwen3-8b", "tp1", ("spec", "mtp:2"), "h200", True, "0.24.0", "has none (config.json"),
    ("dummy-qwen3-8b", "tp1", ("attn", "flashinfer"), "h200", False, "0.24.0", "needs a usable nvcc"),
    ("dummy-qwen3-8b", "tp1", ("kv", "fp8"), "a100", True, "0.24.0", "needs compute capability 8.9"),
    ("dummy-qwen3-8b", "tp1", ("async", "on"), "h200", True, "0.9.2", "needs vLLM ≥ 0.10.2"),
])
def test_the_planner_refuses_what_cannot_work_naming_the_knob(model: str, topology: str, knob: tuple[str, str],
                                                               gpu: str, nvcc: bool, vllm: str, says: str) -> None:
    with pytest.raises(PlanRefused) as exc:
        _plan(model, topology, gpu=gpu, nvcc=nvcc, vllm=vllm, knobs=(knob,))
    line = exc.value.one_line()
    assert line.startswith(f"{knob[0]}=") and says in line and "\n" not in line


def test_what_fits_is_planned_on_the_servers_it_is_for() -> None:
    _, plan, _ = _plan("qwen3.6-27b-nvfp4", "1p1d", knobs=(("spec", "mtp:2"), ("decode.mnbt", "2048"),
                                                             ("prefill.mnbt", "16384"), ("sampler", "triton")))
    pre, dec = plan.servers  # type: ignore[attr-defined]
    assert "--speculative-config" not in pre.argv and dec.argv[dec.argv.index("--speculative-config") + 1] == \
        '{"method":"mtp","num_speculative_tokens":2}'
    assert pre.argv[pre.argv.index("--max-num-batched-tokens") + 1] == "16384"
    assert dec.argv[dec.argv.index("--max-num-batched-tokens") + 1] == "2048"
    assert dict(pre.env)["VLLM_USE_FLASHINFER_SAMPLER"] == "0" == dict(dec.env)["VLLM_USE_FLASHINFER_SAMPLER"]
    assert plan.knobs == (("spec", "mtp:2"), ("decode.mnbt", "2048"), ("prefill.mnbt", "16384"),  # type: ignore
                          ("sampler", "triton"))
    assert any(w.source == "knob" and "decode.mnbt=2048" in w.reason for w in plan.workarounds)  # type: ignore


def test_a_decode_knob_on_the_prefill_host_of_a_layout_across_hosts_says_it_is_for_the_other_part() -> None:
    """The prefill host's part (--roles prefill) of a 1P1D across hosts with decode.mnbt and spec: its server gets
    neither, and the plan's knob lines say they are for the decode servers (they said 'on the ? servers')."""
    facts = sim_facts("b200", 2)
    req = LaunchRequest(model="qwen3.6-27b-nvfp4", topology="1p1d", roles=("prefill",), advertise="10.0.0.1",
                        knobs=(("decode.mnbt", "2048"), ("spec", "mtp:2")))
    _, plan = plan_request(req, Catalog.load(), facts)
    (pre,) = plan.servers
    assert "--max-num-batched-tokens" not in pre.argv and "--speculative-config" not in pre.argv
    lines = [w.reason for w in plan.workarounds if w.source == "knob"]
    assert lines == ["knob decode.mnbt=2048 (max batched tokens, no server of this plan: it is for the decode "
                     "servers)", "knob spec=mtp:2 (speculative decoding, no server of this plan: it is for the "
                     "decode servers)"]


def test_a_knob_replaces_the_host_workaround_it_overrides() -> None:
    """No nvcc on Blackwell: the planner pins Triton attention; attn=flash_attn replaces the flag and its reason."""
    _, plan, _ = _plan("dummy-qwen3-8b", "tp1", nvcc=False, knobs=(("attn", "flash_attn"),))
    argv = plan.servers[0].argv  # type: ignore[attr-defined]
    assert argv.count("--attention-backend") == 1 and argv[argv.index("--attention-backend") + 1] == "FLASH_ATTN"
    changes = [w.change for w in plan.workarounds]  # type: ignore[attr-defined]
    assert "--attention-backend TRITON_ATTN" not in changes and "--attention-backend FLASH_ATTN" in changes


def test_a_switch_knob_removes_its_twin() -> None:
    facts = sim_facts("h200", 1)
    profile, plan = plan_request(LaunchRequest(model="dummy-qwen3-8b", topology="tp1",
                                               extra_args=("--async-scheduling",)), Catalog.load(), facts)
    settings = KnobCatalog.load().settings([("async", "off")])
    assert not refusals(settings, profile, plan, facts)
    argv = apply_settings(plan, settings).servers[0].argv
    assert "--no-async-scheduling" in argv and "--async-scheduling" not in argv


def test_the_request_carries_its_knobs_through_its_argv() -> None:
    req = LaunchRequest(model="dummy-qwen3-8b", topology="1p1d", knobs=(("decode.mnbt", "2048"), ("spec", "ngram:3")))
    argv = req.to_argv()
    assert "--knob=decode.mnbt=2048" in argv and LaunchRequest.from_argv(argv) == req
    assert request_knobs(argv) == {"decode.mnbt": "2048", "spec": "ngram:3"}
    with pytest.raises(InputError, match="only 'run' sweeps them"):
        LaunchRequest.from_text({"model": "m", "topology": "tp1", "knob": "attn=auto,triton"})


@pytest.mark.parametrize(("body", "says"), [
    ("knobs:\n  x:\n    title: t\n    vllm: {since: '0.24.0'}\n    values:\n      a: {default: true}\n"
     "      b: {args: ['--host', '0.0.0.0']}\n", "--host is placement"),
    ("knobs:\n  x:\n    title: t\n    vllm: {since: '0.24.0'}\n    values:\n      a: {default: true}\n"
     "      b: {args: ['-tp', '4']}\n", "-tp (vLLM reads it as --tensor-parallel-size) is placement"),
    ("knobs:\n  x:\n    title: t\n    vllm: {since: '0.24.0'}\n    values:\n      a: {default: true}\n"
     "      b: {args: ['--tensor_parallel', '4']}\n", "(vLLM reads it as --tensor-parallel-size) is placement"),
    ("knobs:\n  x:\n    title: t\n    vllm: {since: '0.24.0'}\n    values:\n      a: {default: true}\n"
     "      b: {args: ['--gpu-memory', '0.5']}\n", "(vLLM reads it as --gpu-memory-utilization)"),
    ("knobs:\n  x:\n    title: t\n    vllm: {since: '0.24.0'}\n    values:\n      a: {default: true}\n"
     "      b: {env: {PYTHONPATH: /tmp/evil}}\n", "vLLM's own variables only"),
    ("knobs:\n  x:\n    title: t\n    vllm: {since: '0.24.0'}\n    values:\n      a: {default: true}\n"
     "      b: {args: ['--hf-token', 'hf_x']}\n", "would put a secret"),
    ("knobs:\n  x:\n    title: t\n    vllm: {since: '0.24.0'}\n    values:\n      a: {default: true}\n"
     "      b: {env: {VLLM_API_KEY: hf_abcdefghijklmnopqrstuvwxyz123456}}\n", "a secret is never a knob's value"),
    ("knobs:\n  x:\n    title: t\n    vllm: {since: '0.24.0'}\n    values:\n      a: {default: true}\n"
     "      b: {args: ['--lora-modules', 'hf_abcdefghijklmnopqrstuvwxyz123456']}\n", "a secret is never a knob's"),
    ("knobs:\n  x:\n    title: t\n    vllm: {since: '0.24.0'}\n    values:\n      a: {default: true}\n"
     "      b: {args: ['--speculative-config', '{method: ngram}']}\n", "knobs.x.values.b.args"),
    ("knobs:\n  x:\n    title: t\n    vllm: {since: 'soon'}\n    values:\n      a: {default: true}\n",
     "expected a version"),
    ("knobs:\n  x:\n    title: t\n    vllm: {since: '0.24.0'}\n    run: rm -rf /\n    values:\n"
     "      a: {default: true}\n", "unknown field"),
    ("knobs:\n  x:\n    title: t\n    vllm: {since: '0.24.0'}\n    values:\n      a: {args: ['--enforce-eager']}\n",
     "exactly one value is the default"),
])
def test_a_hostile_operator_catalogue_is_one_line_naming_file_and_field(tmp_path: Path, body: str,
                                                                        says: str) -> None:
    f = tmp_path / "knobs.yaml"
    f.write_text(body)
    with pytest.raises(InputError) as exc:
        KnobCatalog().load_file(f)
    line = exc.value.one_line()
    assert says in line and "knobs.yaml" in line and "\n" not in line


def test_an_operator_knob_joins_and_wins(tmp_path: Path) -> None:
    (paths.user_profiles_dir()).mkdir(parents=True, exist_ok=True)
    (paths.user_profiles_dir() / "knobs.yaml").write_text(
        "knobs:\n  attn:\n    title: attention, ours\n    vllm: {since: '0.24.0'}\n    values:\n"
        "      auto: {default: true}\n      sdpa: {args: ['--attention-backend', 'TORCH_SDPA']}\n")
    cat = KnobCatalog.load()
    assert cat.knobs["attn"].title == "attention, ours" and "spec" in cat.knobs
    assert cat.axis("attn=auto,sdpa").choices[1].words() == ("--attention-backend", "TORCH_SDPA")


def test_knobs_lists_the_catalogue_and_says_what_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    from tui.cli.main import main

    assert main(["knobs", "--sim", "--model", "dummy-qwen3-8b", "--topology", "tp1", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["knobs"]}
    ep = {v["value"]: v for v in rows["ep"]["values"]}
    assert "dummy-qwen3-8b is dense" in ep["on"]["refused"] and not ep["off"]["refused"]
    assert main(["knobs", "--topology", "tp1"]) == 2
    assert "give --model too" in capsys.readouterr().err


def test_predict_names_the_winning_topology_and_knobs_and_leaves_refused_ones_out(
        capsys: pytest.CaptureFixture[str]) -> None:
    from tui.cli.main import main

    argv = ["predict", "--sim", "--model", "gemma-4-26b-a4b-fp8", "--gpus", "2", "--no-nvcc", "--isl", "512,8192",
            "--osl", "256", "--knob", "ep=off,on", "--knob", "attn=auto,flashinfer"]
    assert main([*argv, "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert set(m["configurations"]) == {"", "ep=on", "attn=flashinfer", "ep=on attn=flashinfer"}
    assert "needs ≥ 2 per server" in m["refused"]["1p1d ep=on"]
    assert "needs a usable nvcc" in m["refused"]["tp2 attn=flashinfer"]
    winners = {w["topology"] for c in m["cells"] for w in c["winners"].values()}
    assert winners and not winners & set(m["refused"])
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "knob configurations (4)" in text and "--knob ep=off,on --knob attn=auto,flashinfer" in text


def test_spec_decode_figures_over_a_run_from_vllms_counters() -> None:
    from tui.core.bench.serverside import spec_decode_check, spec_decode_counts

    def scrape(drafts: int, tokens: int, accepted: int, pos: tuple[int, ...]) -> str:
        lab = 'engine="0",model_name="m"'
        lines = [f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}",
                 f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {tokens}",
                 f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted}"]
        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {v}'
                  for i, v in enumerate(pos)]
        return "\n".join(lines) + "\n"

    before = {"u": spec_decode_counts(scrape(10, 40, 12, (8, 3, 1, 0)))}
    after = {"u": spec_decode_counts(scrape(110, 440, 212, (88, 63, 41, 20)))}
    got = spec_decode_check(before, after)
    assert got is not None and got["drafts"] == 100 and got["draft_tokens"] == 400 and got["accepted_tokens"] == 200
    assert got["acceptance_rate"] == 0.5 and got["mean_acceptance_length"] == 3.0  # the bonus token counted
    assert got["per_position_acceptance"] == [0.8, 0.6, 0.4, 0.2]
    assert spec_decode_counts("vllm:num_requests_running 0\n") is None  # no speculative decoding: no figures


def test_the_playbook_knows_what_the_real_knob_runs_logged() -> None:
    """The H200 knob runs: n-gram speculative decoding turned async scheduling off and moved to the V1 runner;
    FlashInfer attention autotuned for 83 s before the server was ready."""
    from tui.core.playbook import load_playbook
    from tui.core.playbook.offline import diagnose_file

    book = load_playbook()
    logs = FIXTURES / "vllm-0.24.0-h200-knobs" / "logs"
    spec = {d.entry_id for d in diagnose_file(logs / "spec_ngram.log", book).diagnoses}
    assert {"spec-ngram-disables-async", "spec-model-runner-v1", "spec-sampling-params-ignored"} <= spec
    fi = {d.entry_id for d in diagnose_file(logs / "attn_flashinfer.log", book).diagnoses}
    assert "flashinfer-attention-warmup" in fi
    base = {d.entry_id for d in diagnose_file(logs / "base.log", book).diagnoses}
    assert not base & {"spec-ngram-disables-async", "spec-model-runner-v1", "flashinfer-attention-warmup"}


def test_the_tp1_grid_references_are_the_real_runs_figures() -> None:
    """tui.sim.calibration.GRID_TABLE holds what the real H200 tp1 grid's summary.json files say."""
    from tui.sim.calibration import GRID_TABLE

    runs = FIXTURES / "vllm-0.24.0-h200-grid" / "tp1" / "runs"
    for (i, o), (tps, ttft, tpot) in GRID_TABLE.items():
        s = json.loads((runs / f"{i}x{o}" / "summary.json").read_text())
        assert s["output_throughput"] == pytest.approx(tps, rel=1e-3)
        assert s["mean_ttft_ms"] == pytest.approx(ttft, rel=1e-3)
        assert s["mean_tpot_ms"] == pytest.approx(tpot, rel=1e-3)


def test_a_knob_campaign_counts_its_layouts(tmp_path: Path) -> None:
    from tui.core.bench.campaign import CampaignSpec
    from tui.core.bench.campaigns import _layouts

    spec = CampaignSpec(name="c", model="m", topologies=["tp2", "1p1d"], workloads=["w"],
                        knobs=["attn=auto,triton", "decode.mnbt=2048,8192"])
    assert _layouts(spec) == 2 + 4  # decode.mnbt does not multiply tp2
    assert _layouts(CampaignSpec(name="c", model="m", topologies=["tp2"], workloads=["w"],
                                 knobs=["gone=1,2"])) == 1  # a knob the catalogue no longer has


def test_a_run_that_measured_its_acceptance_is_predicted_with_it() -> None:
    from tui.sim.predict import acceptance_from_rate, run_facts

    assert acceptance_from_rate(0.5, 1) == pytest.approx(0.5)
    a = acceptance_from_rate(0.4, 3)
    assert (a + a * a + a ** 3) / 3 == pytest.approx(0.4)
    plan = {"topology": "tp1", "servers": [{"role": "single", "env": {}, "argv": [
        "vllm", "serve", "/m", "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}']}]}
    meta = {"topology": "tp1", "spec_decode": {"acceptance_rate": 0.6, "drafts": 10, "draft_tokens": 20}}
    facts = run_facts(meta, plan, {"input_len": 128, "output_len": 128, "num_prompts": 8}, {})
    assert facts.spec_measured == pytest.approx(acceptance_from_rate(0.6, 2))
    assert facts.knobs.spec_acceptance == facts.spec_measured
    ngram = {**plan, "servers": [{**plan["servers"][0], "argv": [
        "vllm", "serve", "/m", "--speculative-config", '{"method":"ngram","num_speculative_tokens":4}']}]}
    assert run_facts(meta, ngram, {}, {}).spec_measured is None  # a CPU drafter's own default stands
