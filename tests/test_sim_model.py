"""Pure parts of the simulator: flags, tokenizer, metrics text, memory plan, performance model, scheduler."""

from __future__ import annotations

import json
import random
import re

import pytest

from tests.conftest import CPU, H200
from tui.core.models import Catalog, ModelProfile
from tui.core.plan.gpuspecs import B200
from tui.core.plan.gpuspecs import H200 as H200_SPEC
from tui.sim import cli, config
from tui.sim.metrics import EngineGauges, EngineMetrics, buckets_1_2_5, go_float, render
from tui.sim.perfmodel import Chunk, Hardware, ModelCost, batch_defaults, memory_plan
from tui.sim.scheduler import FINISHED, REMOTE_KV, EngineScheduler, SimRequest
from tui.sim.serve_flags import SERVE_FLAGS
from tui.sim.tokenizer import SimTokenizer


def prof(pid: str = "dummy-qwen3-8b") -> ModelProfile:
    return Catalog.load().model(pid)


# --- flags ------------------------------------------------------------------------------------------------------


def test_flag_table_is_the_real_help() -> None:
    text = (CPU / "vllm-serve-help-all.txt").read_text(encoding="utf-8")
    real = set()
    for line in text.splitlines():
        if line.startswith("  -") and not line.startswith("  -h,"):
            head = re.split(r"\s{2,}", line[2:])[0]
            for spec in re.split(r", (?=-)", head):
                real.add(spec.split(" ", 1)[0])
    ours = {name for entry in SERVE_FLAGS for name in entry.split(" ")[0].split(",")}
    assert ours == real
    kinds = {e.split(" ")[0].split(",")[0]: e.split(" ")[1] for e in SERVE_FLAGS}
    assert (kinds["--port"], kinds["--served-model-name"], kinds["--trust-remote-code"], kinds["--headless"]) == \
        ("value", "list", "bool", "flag")


def test_cli_rewrites_like_vllm() -> None:
    _, ns, order, extras = cli.parse(["serve", "m", "--max_model_len", "1k", "-tp", "2", "-O3",
                                      "--kv-transfer-config.kv_role", "kv_consumer",
                                      "--kv_transfer_config.kv_connector", "NixlConnector", "--gpu-mem", "0.5"])
    assert extras == []
    assert (ns.max_model_len, ns.tensor_parallel_size, ns.optimization_level) == ("1k", "2", "3")
    assert ns.gpu_memory_utilization == "0.5"  # a unique prefix
    assert json.loads(ns.kv_transfer_config) == {"kv_role": "kv_consumer", "kv_connector": "NixlConnector"}
    cfg = config.build(ns, order, {"DISAGG_SIM_GPU": "h200", "CUDA_VISIBLE_DEVICES": "1,0"})
    assert (cfg.max_model_len, cfg.tp, cfg.gpu_ids, cfg.engine_gpus(0)) == (1000, 2, (1, 0), (1, 0))
    assert cfg.kv_transfer is not None and cfg.kv_transfer.role == "kv_consumer"
    _, _, _, extras = cli.parse(["serve", "m", "--foo", "1"])
    assert extras == ["--foo", "1"]


def test_config_defaults_and_errors() -> None:
    _, ns, order, _ = cli.parse(["serve", "m"])
    cfg = config.build(ns, order, {"DISAGG_SIM_GPU": "h200"})
    assert cfg.gpu_memory_utilization == 0.92  # vLLM 0.24's default
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == batch_defaults(H200_SPEC) == (8192, 1024)
    assert cfg.env.flashinfer_sampler and cfg.env.ready_timeout_s == 600 and cfg.env.side_channel_port == 5600
    _, ns, order, _ = cli.parse(["serve", "m", "--kv-transfer-config", '{"kv_connector":"NixlConnector",'
                                                                       '"kv_role":"producer"}'])
    with pytest.raises(config.ConfigError, match="Input should be 'kv_producer', 'kv_both' or 'kv_consumer'"):
        config.build(ns, order, {})


# --- tokenizer --------------------------------------------------------------------------------------------------


def test_tokenizer_round_trips_any_ids() -> None:
    tok = SimTokenizer(151936)
    rng = random.Random(7)
    ids = [rng.randrange(151936) for _ in range(5000)] + [0xD7FF, 0xD800, 0xD801, 151935]
    assert tok.encode(tok.decode(ids)) == ids
    assert tok.encode(tok.decode(ids[:512])) == ids[:512]
    text = "def fibonacci(n): ∑ 語 😀"
    assert tok.decode(tok.encode(text)) == text
    out = tok.output_text(42, 0, 300)
    assert len(out) == 300 and out == tok.output_text(42, 0, 120) + tok.output_text(42, 120, 180)


# --- metrics text -----------------------------------------------------------------------------------------------


def test_metric_number_format_and_buckets() -> None:
    assert (go_float(1303090.0), go_float(52432.0), go_float(1.7959372990194497e9), go_float(float("inf"))) == \
        ("1.30309e+06", "52432.0", "1.7959372990194497e+09", "+Inf")
    real = (H200 / "endpoints" / "GET_metrics.txt").read_text()
    les = re.findall(r'^vllm:request_prompt_tokens_bucket\{engine="0",le="([^"]+)"', real, re.M)
    assert [go_float(b) for b in buckets_1_2_5(16384)] + ["+Inf"] == les


def test_dp_nixl_exposition_matches_the_registry_dump() -> None:
    real = (CPU / "metrics-engine-registry-dp2-nixl.prom").read_text()
    engines = [(str(i), EngineMetrics(4096, nixl=True), EngineGauges()) for i in range(2)]
    ours = render(engines, "Qwen/Qwen3-8B", {"block_size": "16"}, single_process=True)

    def vllm_series(text: str) -> list[str]:
        out = []
        for line in text.splitlines():
            if line.startswith("vllm:") and "_created" not in line and "cache_config_info" not in line:
                out.append(line.rsplit(" ", 1)[0])
        return out

    assert vllm_series(ours) == vllm_series(real)


# --- memory and performance -------------------------------------------------------------------------------------


def test_memory_plan_reproduces_the_h200_kv_cache() -> None:
    log = (H200 / "startup" / "main.log").read_text()
    real_tokens = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", log).group(1).replace(",", ""))  # type: ignore
    real_gib = float(re.search(r"Available KV cache memory: ([\d.]+) GiB", log).group(1))  # type: ignore[union-attr]
    mem = memory_plan(prof(), Hardware.for_gpu(H200_SPEC), tp=1, gpu_memory_utilization=0.85,
                      max_num_batched_tokens=8192)
    assert abs(mem.kv_gib - real_gib) < 0.05 and abs(mem.kv_tokens - real_tokens) / real_tokens < 0.001
    assert abs(mem.claim_gib * 1024 - 124038) / 124038 < 0.01  # nvidia-smi: 124038 MiB for VLLM::EngineCore
    # two servers side by side at 0.4 (fixtures MANIFEST: 39.45 GiB, 287,280 tokens each)
    half = memory_plan(prof(), Hardware.for_gpu(H200_SPEC), tp=1, gpu_memory_utilization=0.4,
                       max_num_batched_tokens=8192)
    assert abs(half.kv_tokens - 287280) / 287280 < 0.02


def test_decode_step_grows_with_batch_context_and_prefill() -> None:
    cost = ModelCost(prof(), Hardware.for_gpu(H200_SPEC))
    one = cost.step_time(1, 512)
    batch = cost.step_time(128, 128 * 1536)
    assert 3.5e-3 < one < 6e-3  # weights over HBM bandwidth plus overheads
    assert 11e-3 < batch < 17e-3
    assert cost.step_time(128, 128 * 2500) > batch  # more KV to read
    mixed = cost.step_time(127, 127 * 1536, [Chunk(8000, 0, True)])
    assert mixed > 10 * batch  # a prefill chunk in the step slows every decode in it


def test_tensor_parallel_splits_weights_and_pays_all_reduce() -> None:
    p = prof("qwen3.6-27b-nvfp4")
    hw = Hardware.for_gpu(B200)
    tp1, tp2 = ModelCost(p, hw, 1), ModelCost(p, hw, 2)
    assert tp2.dense_read == pytest.approx(tp1.dense_read / 2)
    assert tp2.kv_bytes_per_token == pytest.approx(tp1.kv_bytes_per_token / 2)
    assert tp1.allreduce_time(128) == 0 < tp2.allreduce_time(128)
    assert tp2.state_bytes_per_seq > 0 and tp1.kv_bytes_per_token == 2 * 16 * 4 * 256  # FP8 KV, 16 full layers


def test_moe_reads_the_experts_its_tokens_touch() -> None:
    cost = ModelCost(prof("gemma-4-26b-a4b-fp8"), Hardware.for_gpu(B200))
    one, many = cost.weight_bytes(1), cost.weight_bytes(256)
    assert one < 0.3 * many  # one token touches 8 of 128 experts; a big batch touches all
    assert many == pytest.approx(cost.dense_read + cost.expert_read, rel=1e-3)


# --- scheduler --------------------------------------------------------------------------------------------------


def sched(kv_tokens: int = 100_000, **kw: int) -> EngineScheduler:
    cost = ModelCost(prof(), Hardware.for_gpu(H200_SPEC))
    return EngineScheduler(cost, kv_tokens=kv_tokens, max_num_seqs=kw.get("seqs", 1024),
                           max_num_batched_tokens=kw.get("budget", 8192))


def run(s: EngineScheduler, t: float = 0.0, limit: int = 100_000) -> float:
    for _ in range(limit):
        res = s.step(t)
        if res is None:
            return t
        t = res.end
    raise AssertionError("did not finish")


def test_chunked_prefill_and_decode_first() -> None:
    s = sched()
    long = SimRequest("long", prompt_len=20_000, max_tokens=3, arrival=0)
    s.add(long)
    first = s.step(0.0)
    assert first is not None and first.prefill_tokens == 8192 and not first.emitted
    short = SimRequest("short", prompt_len=10, max_tokens=50, arrival=0)
    s.add(short)
    t = first.end
    res = s.step(t)
    assert res is not None and res.prefill_tokens == 8192  # long's next chunk fills the budget; short waits
    res = s.step(res.end)
    # long's last 3,616 tokens and all of short's 10 fit in one budget: both sample their first token
    assert res is not None and res.prefill_tokens == 3616 + 10 and {r.rid for r in res.emitted} == {"long", "short"}
    res = s.step(res.end)
    assert res is not None and res.decode_tokens == 2 and res.prefill_tokens == 0
    run(s, res.end)
    assert long.generated == 3 and short.generated == 50 and s.free_blocks == s.total_blocks


def test_admission_waits_for_kv_and_preempts_the_newest() -> None:
    s = sched(kv_tokens=16 * 100)  # 100 blocks
    a = SimRequest("a", prompt_len=700, max_tokens=400, arrival=0)
    b = SimRequest("b", prompt_len=700, max_tokens=400, arrival=0)
    c = SimRequest("c", prompt_len=700, max_tokens=10, arrival=0)
    for r in (a, b, c):
        s.add(r)
    res = s.step(0.0)
    assert res is not None and s.num_running == 2 and s.num_waiting == 1  # c does not fit yet
    run(s, res.end)
    assert s.num_preemptions >= 1 and b.preemptions >= 1 and a.preemptions == 0
    assert all(r.state == FINISHED for r in (a, b, c)) and s.free_blocks == s.total_blocks


def test_remote_kv_skips_the_prefill_and_held_blocks_wait_for_the_reader() -> None:
    s = sched()
    remote = SimRequest("d", prompt_len=7500, max_tokens=5, arrival=0, external_tokens=7488, transfer_time=0.05)
    s.add(remote)
    assert s.step(0.0) is None and remote.state == REMOTE_KV and s.next_ready_time() == pytest.approx(0.05)
    res = s.step(0.05)
    assert res is not None and res.prefill_tokens == 12 and [r.rid for r in res.emitted] == ["d"]
    assert remote.computed_prompt == 12
    p = SimRequest("p", prompt_len=1000, max_tokens=1, arrival=0, hold_after_finish=True)
    s2 = sched()
    s2.add(p)
    run(s2)
    assert "p" in s2.held and s2.free_blocks < s2.total_blocks
    s2.release_held("p")
    assert s2.free_blocks == s2.total_blocks
    s2.add(SimRequest("q", prompt_len=1000, max_tokens=1, arrival=0, hold_after_finish=True))
    end = run(s2)
    assert s2.expire_leases(end + 29) == [] and len(s2.expire_leases(end + 31)) == 1
    assert s2.free_blocks == s2.total_blocks


def test_abort_frees_blocks() -> None:
    s = sched()
    r = SimRequest("x", prompt_len=3000, max_tokens=100, arrival=0)
    s.add(r)
    s.step(0.0)
    assert s.free_blocks < s.total_blocks
    assert s.abort("x", 1.0) is r and r.finish_reason == "abort" and s.free_blocks == s.total_blocks


@pytest.mark.parametrize("blocks", [2000, 120], ids=["roomy", "tight-kv"])
def test_decode_fast_forward_equals_stepping(blocks: int) -> None:
    """Also when the KV cache runs short: the fast path runs as many steps as the free blocks allow, then the
    stepping preempts exactly as it would have."""

    def make() -> tuple[EngineScheduler, list[SimRequest]]:
        s = sched(kv_tokens=16 * blocks)
        reqs = [SimRequest(str(i), prompt_len=50 + 37 * i, max_tokens=20 + 11 * i, arrival=0) for i in range(12)]
        for r in reqs:
            s.add(r)
        return s, reqs

    slow, slow_reqs = make()
    run(slow)
    fast, fast_reqs = make()
    t = 0.0
    jumps = 0
    while True:
        jump = fast.decode_run(t)
        if jump is not None:
            jumps += 1
            t = jump[0][-1]
            continue
        res = fast.step(t)
        if res is None:
            break
        t = res.end
    assert jumps > 3
    assert fast.num_preemptions == slow.num_preemptions and (slow.num_preemptions > 0) == (blocks < 1000)
    for a, b in zip(slow_reqs, fast_reqs, strict=True):
        assert (a.generated, a.first_token_at) == (b.generated, b.first_token_at)
        assert a.finished_at == pytest.approx(b.finished_at, rel=1e-12)
    assert fast.free_blocks == fast.total_blocks


def test_prefix_cache_matches_leading_blocks_and_forgets_reused_memory() -> None:
    from tui.sim.prefixcache import PrefixCache, block_hashes

    a = list(range(100))
    hashes = block_hashes(a)
    assert len(hashes) == 6  # full blocks only
    cache = PrefixCache()
    cache.insert(hashes)
    assert cache.match(block_hashes(a[:64] + [7] * 36)) == 4  # diverges in the fifth block
    assert cache.match(block_hashes([1, *a[1:]])) == 0  # chained: a different first block changes every hash
    cache.shrink(2)
    assert len(cache) == 2 and cache.match(hashes) == 0  # the oldest blocks went first


def test_non_default_args_line_matches_the_real_one() -> None:
    import shlex

    from tui.sim.startup import _args_repr

    cmd = (H200 / "startup" / "main.cmd").read_text().splitlines()[1].removeprefix("# cmd: ")
    argv = shlex.split(cmd)[1:]  # after "vllm"
    _, ns, order, _ = cli.parse(argv)
    real = re.search(r"non-default args: (\{.*\})$", (H200 / "startup" / "main.log").read_text(), re.M)
    assert real is not None
    assert _args_repr(config.build(ns, order, {}).non_default) == real.group(1)
