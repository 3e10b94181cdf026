"""A run the servers' prefix cache served from an earlier run is flagged; repeats send prompts of their own.

vLLM caches prompt prefixes by default. On the real H200 the same 128 random 512-token prompts sent twice gave mean
TTFT ~1.0 s and then ~0.25 s: the second run skipped its prefill. The simulated server keeps a block-hash prefix
cache and exports ``vllm:prefix_cache_{queries,hits}_total`` as vLLM does, so both sides are checked here."""

from __future__ import annotations

import json

import pytest

from tests.simserver import SimServers
from tui.cli.main import main
from tui.core.bench.campaign import Cell
from tui.core.bench.dataset import run_seed
from tui.core.bench.runner import BenchOptions, BenchTarget, run_bench, shared_prefix_share
from tui.core.bench.serverside import PrefixCacheCheck, prefix_cache_counts, prefix_check
from tui.core.bench.store import load_run
from tui.core.models import Workload

METRICS = """# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 500.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 200.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 16.0
"""


def test_prefix_counts_and_check() -> None:
    assert prefix_cache_counts(METRICS) == (1500.0, 216.0)
    assert prefix_cache_counts("vllm:num_requests_running 0\n") is None
    chk = prefix_check({"a": (1500.0, 216.0), "b": None}, {"a": (2500.0, 916.0), "b": (9.0, 9.0)})
    assert chk == PrefixCacheCheck(1000.0, 700.0) and chk.unexpected and chk.share == pytest.approx(0.7)
    assert not prefix_check({"a": (0.0, 0.0)}, {"a": (1000.0, 30.0)}).unexpected  # type: ignore[union-attr]
    # a workload that shares a prefix on purpose expects its share of hits
    assert not prefix_check({"a": (0.0, 0.0)}, {"a": (1000.0, 480.0)}, expected=0.5).unexpected  # type: ignore
    assert prefix_check({}, {"a": None}) is None


def test_shared_prefix_share() -> None:
    wl = Workload(name="w", input_len=300, output_len=8, prefix_len=100)
    assert shared_prefix_share(BenchOptions(workload=wl)) == pytest.approx(0.25)
    assert shared_prefix_share(BenchOptions(workload=wl.with_overrides(prefix_len=0))) == 0.0


def test_every_repeat_and_rate_has_its_own_seed() -> None:
    assert run_seed(5) == 5  # a single run keeps the workload's seed
    seeds = {run_seed(5, repeat=r, rate=rate) for r in (1, 2, 3) for rate in (None, 1.0, 2.0, float("inf"))}
    assert len(seeds) == 12
    assert run_seed(5, repeat=2) == 4041515155  # stable across processes: a resumed campaign finds its runs
    assert run_seed(5, repeat=2) != run_seed(6, repeat=2)



def test_a_campaign_sends_each_repeat_and_rate_prompts_of_its_own() -> None:
    """The campaign's cells get their workload's seed through run_seed: repeat 2 is not repeat 1."""
    from tui.core.bench.campaign import CampaignRunner, CampaignSpec
    from tui.core.models import Workload

    wl = Workload(name="w", input_len=8, output_len=4, num_prompts=2, seed=5)
    runner = CampaignRunner(spec=CampaignSpec(name="c", model="m", topologies=["dp2"], workloads=["w"]),
                            lifecycle=None, host=None, planner=None, workloads={"w": wl},  # type: ignore[arg-type]
                            options=lambda w: None)  # type: ignore[arg-type,return-value]
    seeds = [runner._wl(Cell("dp2", "w", rate, rep)).seed for rep in (1, 2) for rate in (None, 2.0)]
    assert seeds == [run_seed(5, repeat=rep, rate=rate) for rep in (1, 2) for rate in (None, 2.0)]
    assert len(set(seeds)) == 4


async def test_same_prompts_twice_are_flagged(sims: SimServers) -> None:
    server = sims.start(startup_s=0.2, clock=50.0)
    server.wait_ready()
    wl = Workload(name="w", input_len=256, output_len=4, num_prompts=8, seed=11)
    first = await run_bench(BenchOptions(workload=wl, model="dummy-qwen3-8b", warmup=0),
                            BenchTarget(endpoint=server.url, campaign="pc"))
    again = await run_bench(BenchOptions(workload=wl, model="dummy-qwen3-8b", warmup=0),
                            BenchTarget(endpoint=server.url, campaign="pc"))
    assert "prefix-cache-hits" not in first.meta.flags
    assert first.meta.prefix_cache is not None and first.meta.prefix_cache["share"] < 0.05
    assert "prefix-cache-hits" in again.meta.flags
    assert again.meta.prefix_cache is not None and again.meta.prefix_cache["share"] > 0.8
    assert load_run(again.path).meta.prefix_cache == again.meta.prefix_cache  # stored with the run
    other = await run_bench(BenchOptions(workload=wl.with_overrides(seed=run_seed(11, repeat=2)),
                                         model="dummy-qwen3-8b", warmup=0),
                            BenchTarget(endpoint=server.url, campaign="pc"))
    assert "prefix-cache-hits" not in other.meta.flags


def test_bench_repeat_sends_new_prompts(sims: SimServers, capsys: pytest.CaptureFixture[str]) -> None:
    server = sims.start(startup_s=0.2, clock=50.0)
    server.wait_ready()
    code = main(["bench", "--endpoint", server.url, "--input-len", "256", "--output-len", "4", "--num-prompts", "8",
                 "--repeat", "3", "--json", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "prefix cache" not in err
    assert json.loads(out)
    # the same command again sends the first repeat's prompts: the server still has them, and the run says so
    assert main(["bench", "--endpoint", server.url, "--input-len", "256", "--output-len", "4", "--num-prompts", "8",
                 "--json", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "of the prompt tokens came from the servers' prefix cache" in err and "--seed" in err


async def test_server_without_prefix_caching_counts_nothing(sims: SimServers) -> None:
    server = sims.start("--no-enable-prefix-caching", startup_s=0.2, clock=50.0)
    server.wait_ready()
    wl = Workload(name="w", input_len=256, output_len=4, num_prompts=8, seed=11)
    for _ in range(2):
        run = await run_bench(BenchOptions(workload=wl, model="dummy-qwen3-8b", warmup=0),
                              BenchTarget(endpoint=server.url, campaign="pc"))
        assert "prefix-cache-hits" not in run.meta.flags
        assert run.meta.prefix_cache == {"queries": 0.0, "hits": 0.0, "expected": 0.0, "share": 0.0,
                                         "unexpected": False}
