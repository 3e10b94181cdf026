"""Serve knobs in the simulator and the predictor (issue 24): the command-line reader both use, each knob's effect
in the performance model (virtual time: no server, no clock), the decision map over topology × configuration, and
one simulated server that acts on the knobs (spec-decode counters and log line, an unknown attention backend).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import httpx
import pytest

from tests.simserver import SimServer, SimServers
from tui.core.models import Catalog, ModelProfile
from tui.core.plan.gpuspecs import H200
from tui.sim.benchsim import BenchResult, simulate_bench
from tui.sim.knobs_model import ServeKnobs, knobs_from_flags, mean_accepted_length, spec_plan
from tui.sim.perfmodel import H200_CAPTURE_STACK, Hardware, ModelCost, memory_plan
from tui.sim.predict import decision_map, predict, run_facts

NGRAM4 = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'


@cache
def prof(pid: str = "dummy-qwen3-8b") -> ModelProfile:
    return Catalog.load().model(pid)


def kn(*args: str, **env: str) -> ServeKnobs:
    return knobs_from_flags(["vllm", "serve", "/tmp/model", *args], env)


@cache
def run(args: tuple[str, ...], work: tuple[int, int], pid: str = "dummy-qwen3-8b") -> BenchResult:
    return simulate_bench(prof(pid), H200, "tp1", input_len=work[0], output_len=work[1], num_prompts=64,
                          stack=H200_CAPTURE_STACK, knobs=kn(*args), gpu_memory_utilization=0.30)


def test_knobs_from_flags_reads_every_form() -> None:
    k = kn("--attention-backend", "triton_attn", "--max-num-batched-tokens=2048", "--max-num-seqs", "64",
           "--kv-cache-dtype", "fp8_e4m3", "-sc", NGRAM4, "-ep", "--no-async-scheduling",
           "--no-enable-prefix-caching", "-cc", '{"cudagraph_mode": "NONE"}', "--load-format", "dummy",
           VLLM_USE_FLASHINFER_SAMPLER="0", DISAGG_SIM_SPEC_ACCEPTANCE="0.7")
    assert k == ServeKnobs(attention_backend="TRITON_ATTN", max_num_batched_tokens=2048, max_num_seqs=64,
                           kv_cache_dtype="fp8_e4m3", spec_method="ngram", spec_tokens=4, spec_acceptance=0.7,
                           expert_parallel=True, async_scheduling=False, prefix_caching=False, enforce_eager=True,
                           flashinfer_sampler=False, load_format="dummy")
    assert k.kv_fp8 and k.speculative and not k.async_on
    assert kn() == ServeKnobs() and kn().is_default
    assert kn("--spec-method", "qwen3_next_mtp", "--spec-tokens", "2") == ServeKnobs(spec_method="mtp", spec_tokens=2)
    assert kn("--speculative-config.method", "eagle3", "--speculative-config.num_speculative_tokens", "3"
              ).spec_method == "eagle3"
    assert kn("-ac", '{"backend": "flashinfer"}').attention_backend == "FLASHINFER"
    assert kn("-O0").enforce_eager and kn("--enforce-eager").enforce_eager
    assert kn("--max-num-seqs", "lots") == ServeKnobs()  # unparseable: unset (the server refuses it at start)


def test_spec_plan_acceptance_sources() -> None:
    assert mean_accepted_length(0.0, 4) == 1.0 and mean_accepted_length(1.0, 4) == 5.0
    assert mean_accepted_length(0.8, 2) == pytest.approx(1 + 0.8 + 0.64)
    mtp = kn("--spec-method", "mtp", "--spec-tokens", "2")
    dummy = spec_plan(mtp, dummy_weights=True)
    assert dummy is not None and dummy.acceptance == 0.0
    real = spec_plan(mtp)
    assert real is not None and real.acceptance == 0.85 and "DeepSeek-V3" in real.source
    given = spec_plan(kn("-sc", NGRAM4, DISAGG_SIM_SPEC_ACCEPTANCE="0.6"))
    assert given is not None and given.acceptance == 0.6 and given.draft_share == 1.0


def test_fp8_kv_doubles_capacity_and_halves_decode_reads() -> None:
    hw = Hardware.for_gpu(H200)
    auto = memory_plan(prof(), hw, tp=1, gpu_memory_utilization=0.3, max_num_batched_tokens=8192)
    fp8 = memory_plan(prof(), hw, tp=1, gpu_memory_utilization=0.3, max_num_batched_tokens=8192,
                      kv_cache_dtype="fp8")
    assert fp8.kv_tokens == pytest.approx(2 * auto.kv_tokens, rel=0.001)
    base, kv8 = ModelCost(prof(), hw), ModelCost(prof(), hw, knobs=kn("--kv-cache-dtype", "fp8"))
    assert kv8.kv_bytes_per_token == base.kv_bytes_per_token / 2
    assert kv8.step_time(64, 64 * 4000) < 0.85 * base.step_time(64, 64 * 4000)  # long contexts: KV-bound
    assert run(("--kv-cache-dtype", "fp8"), (512, 512)).mean_tpot_ms < run((), (512, 512)).mean_tpot_ms


def test_small_batched_token_budget_trades_ttft_for_steady_tpot() -> None:
    big, small = run((), (2048, 256)), run(("--max-num-batched-tokens", "2048"), (2048, 256))
    assert small.max_itl_ms < 0.5 * big.max_itl_ms  # decode steps no longer stall behind 8k-token chunks
    assert small.mean_ttft_ms > big.mean_ttft_ms  # prompts chunked over more steps
    seqs = run(("--max-num-seqs", "16"), (128, 128))
    assert seqs.mean_ttft_ms > 3 * run((), (128, 128)).mean_ttft_ms  # a waiting queue


def test_speculative_decoding_accepted_length_sets_tpot() -> None:
    base = run((), (128, 1024))
    dummy = run(("-sc", NGRAM4, "--load-format", "dummy"), (128, 1024))
    assert dummy.mean_tpot_ms > base.mean_tpot_ms  # random weights: the method's overhead alone
    def accepted(*args: str) -> BenchResult:
        return simulate_bench(prof(), H200, "tp1", input_len=128, output_len=1024, num_prompts=64,
                              stack=H200_CAPTURE_STACK, gpu_memory_utilization=0.30,
                              knobs=kn(*args, DISAGG_SIM_SPEC_ACCEPTANCE="0.8"))
    good = accepted("--spec-method", "mtp", "--spec-tokens", "4")
    assert good.total_output == 64 * 1024  # every token counted, several a step
    assert good.mean_tpot_ms < 0.8 * base.mean_tpot_ms  # ~3.4 tokens a step for a step of 5 tokens a sequence
    # n-gram turns async scheduling off in vLLM 0.24: even accepted drafts barely pay for the host's share
    assert accepted("-sc", NGRAM4).mean_tpot_ms < dummy.mean_tpot_ms
    p = predict(prof("qwen3.6-27b-nvfp4"), H200, "tp1", input_len=512, output_len=512, num_prompts=32,
                knobs=kn("--spec-method", "mtp", "--spec-tokens", "2"))
    assert p.values["spec_mean_acceptance_length"] == pytest.approx(1 + 0.85 + 0.85 ** 2)
    assert any("DeepSeek-V3" in n for n in p.notes)


def test_attention_backend_eager_async_and_expert_parallel() -> None:
    base = run((), (512, 512))
    assert run(("--attention-backend", "TRITON_ATTN"), (512, 512)).mean_tpot_ms > base.mean_tpot_ms
    assert run(("--enforce-eager",), (512, 512)).mean_tpot_ms > base.mean_tpot_ms
    assert run(("--no-async-scheduling",), (512, 512)).mean_tpot_ms > base.mean_tpot_ms
    gemma = prof("gemma-4-26b-a4b-fp8")
    hw = Hardware.for_gpu(H200)
    tp2, ep2 = ModelCost(gemma, hw, 2), ModelCost(gemma, hw, 2, knobs=kn("-ep"))
    assert ep2.ep == 2 and tp2.ep == 1 and ModelCost(prof(), hw, 2, knobs=kn("-ep")).ep == 1  # dense: no EP
    assert ep2.step_time(8, 8 * 1000) != tp2.step_time(8, 8 * 1000)


def test_run_facts_read_each_role_s_knobs() -> None:
    def server(role: str, *args: str) -> dict[str, object]:
        return {"role": role, "argv": ["vllm", "serve", "/tmp/model", *args], "env": {}}
    plan = {"servers": [server("prefill", "--max-num-batched-tokens", "8192"),
                        server("decode", "-sc", NGRAM4, "--max-num-batched-tokens", "2048")]}
    facts = run_facts({"topology": "1p1d"}, plan, {"input_len": 128, "output_len": 64}, {})
    assert facts.role_knobs["decode"].spec_tokens == 4 and facts.role_knobs["decode"].max_num_batched_tokens == 2048
    assert facts.role_knobs["prefill"].max_num_batched_tokens == 8192 and not facts.role_knobs["prefill"].speculative


def test_decision_map_over_configurations() -> None:
    configs = {"": {}, "attn=triton": {"*": (("--attention-backend", "TRITON_ATTN"), ())},
               "d.mnbt=2048": {"decode": (("--max-num-batched-tokens", "2048"), ())}}
    m = decision_map(prof(), H200, 2, isls=(512,), osls=(256,), num_prompts=16, configs=configs,
                     slo_ms={"tpot": 50})
    cell = m.cells[0]
    assert set(cell.predictions) == {f"{t}{label}" for t in ("dp2", "tp2", "1p1d")
                                     for label in ("", " attn=triton", " d.mnbt=2048")}
    # a decode-only knob on a TP layout is the layout without it (predicted once)
    assert cell.predictions["tp2 d.mnbt=2048"] is cell.predictions["tp2"]
    assert cell.predictions["1p1d d.mnbt=2048"] is not cell.predictions["1p1d"]
    assert cell.winners["max_throughput"][0] in cell.predictions
    data = json.loads(json.dumps(m.to_dict()))
    assert data["configurations"]["attn=triton"]["*"]["args"] == ["--attention-backend", "TRITON_ATTN"]
    plain = decision_map(prof(), H200, 2, isls=(512,), osls=(256,), num_prompts=16, slo_ms={"tpot": 50})
    assert set(plain.cells[0].predictions) == {"dp2", "tp2", "1p1d"}
    assert {t: p.values for t, p in plain.cells[0].predictions.items()} == {
        t: cell.predictions[t].values for t in ("dp2", "tp2", "1p1d")}


# --- one simulated server acting on the knobs -------------------------------------------------------------------


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    tmp = tmp_path_factory.mktemp("simknobs")
    servers = SimServers(tmp)
    s = servers.start("-sc", NGRAM4, "--attention-backend", "TRITON_ATTN", startup_s=0.3, clock=20.0,
                      env={"DISAGG_TUI_STATE_DIR": str(tmp / "state"), "DISAGG_SIM_SPEC_ACCEPTANCE": "0.7",
                           "VLLM_LOG_STATS_INTERVAL": "2"})
    try:
        s.wait_ready()
        yield s
    finally:
        servers.close()


def test_simulated_server_runs_speculative_decoding(spec_server: SimServer) -> None:
    s = spec_server
    r = httpx.post(s.url + "/v1/completions", json={"prompt": [1, 2, 3, 4, 5], "max_tokens": 200}, timeout=30)
    assert r.json()["usage"]["completion_tokens"] == 200
    text = httpx.get(s.url + "/metrics").text

    def value(name: str, extra: str = "") -> float:
        m = re.search(rf'^vllm:{name}\{{engine="0",model_name="dummy-qwen3-8b"{extra}\}} (\S+)$', text, re.M)
        assert m, name
        return float(m.group(1))

    drafts, drafted, accepted = (value(f"spec_decode_num_{n}_total") for n in ("drafts", "draft_tokens",
                                                                                 "accepted_tokens"))
    assert drafted == 4 * drafts and value("generation_tokens_total") == 200
    assert 199 - accepted == pytest.approx(drafts, abs=4)  # every step but the prefill's: 1 + accepted tokens
    assert 0.3 < accepted / drafted < 0.6  # 0.7 a token: (0.7 + 0.49 + 0.34 + 0.24) / 4 = 0.44 of the drafts
    pos = [value("spec_decode_num_accepted_tokens_per_pos_total", f',position="{i}"') for i in range(4)]
    assert pos == sorted(pos, reverse=True) and sum(pos) == accepted
    line = re.compile(r"\[metrics\.py:\d+\] SpecDecoding metrics: Mean acceptance length: [\d.]+, Accepted "
                      r"throughput: [\d.]+ tokens/s, Drafted throughput: [\d.]+ tokens/s, Accepted: \d+ tokens, "
                      r"Drafted: \d+ tokens, Per-position acceptance rate: [\d., ]+, Avg Draft acceptance rate: "
                      r"[\d.]+%")
    deadline = time.monotonic() + 5
    while not line.search(s.stdout()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert line.search(s.stdout())
    assert "Using AttentionBackendEnum.TRITON_ATTN backend." in s.log()
    assert "speculative_config=SpeculativeConfig(method='ngram'" in s.log()


def test_unknown_attention_backend_is_refused(tmp_path: Path) -> None:
    servers = SimServers(tmp_path)
    try:
        s = servers.start("--attention-backend", "TRITON", startup_s=0.05)
        assert s.wait_exit() == 1
        assert "ValueError: Unknown attention backend: 'TRITON'. Valid options are: FLASH_ATTN" in s.log()
    finally:
        servers.close()
