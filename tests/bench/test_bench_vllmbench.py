"""The vllm bench serve runner: its command line, its progress, its result loaded as a run (a fake vllm here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.bench.benchpaths import CPU_SAMPLE, H200
from tui.core.bench.events import BenchTick
from tui.core.bench.runner import BenchOptions, BenchTarget
from tui.core.bench.vllmbench import bench_argv, parse_progress, run_vllm_bench
from tui.core.errors import InputError, RunFailed
from tui.core.profiles import Workload

FAKE = '''
import json, sys, time
args = sys.argv[1:]
assert args[:2] == ["bench", "serve"], args
opt = {args[i]: args[i + 1] for i in range(2, len(args) - 1) if args[i].startswith("--")}
if "--fail" in opt.get("--model", ""):
    print("ValueError: Initial test run failed", file=sys.stderr)
    sys.exit(1)
print("Starting main benchmark run...")
n = int(opt["--num-prompts"])
for i in range(n + 1):
    sys.stderr.write(f"\\r{100 * i // n:3d}%|##| {i}/{n} [00:0{i}<00:00,  1.00it/s]")
    sys.stderr.flush()
data = json.load(open(SAMPLE))
data["num_prompts"] = n
for kv in args[args.index("--metadata") + 1:]:
    if kv.startswith("--"):
        break
    k, v = kv.split("=", 1)
    data[k] = v
json.dump(data, open(opt["--result-dir"] + "/" + opt["--result-filename"], "w"))
print("============ Serving Benchmark Result ============")
'''


def _fake(tmp_path: Path) -> list[str]:
    f = tmp_path / "fake_vllm.py"
    f.write_text(f"SAMPLE = {str(CPU_SAMPLE)!r}\n" + FAKE)
    return [sys.executable, str(f)]


def _opts(n: int = 20) -> BenchOptions:
    return BenchOptions(workload=Workload(name="tiny", input_len=32, output_len=16, num_prompts=n,
                                          max_concurrency=4), goodput={"ttft": 100.0})


def test_argv_maps_the_workload(tmp_path: Path) -> None:
    argv = bench_argv(["vllm"], _opts(), "http://h:1", "m", "/tok", tmp_path, "tp2")
    s = " ".join(argv)
    for part in ("bench serve --base-url http://h:1 --model m --tokenizer /tok --dataset-name random",
                 "--random-input-len 32 --random-output-len 16", "--num-prompts 20", "--request-rate inf",
                 "--max-concurrency 4", "--ignore-eos", "--goodput ttft:100", "--save-result --save-detailed",
                 "--metadata topology=tp2 workload=tiny", "--percentile-metrics ttft,tpot,itl,e2el"):
        assert part in s, part
    with pytest.raises(InputError):
        bench_argv(["vllm"], BenchOptions(workload=_opts().workload, prompts_file="x.jsonl"), "u", "m", "t",
                   tmp_path, "tp2")


def test_progress_parsed_from_real_stdout() -> None:
    text = (H200 / "bench" / "bench2_in7500_out200_n128_stdout.txt").read_text()
    seen = [p for seg in text.replace("\r", "\n").split("\n") if (p := parse_progress(seg))]
    assert seen[0] == (0, 128) and seen[-1] == (128, 128)
    assert parse_progress("Starting main benchmark run...") is None


async def test_fake_vllm_bench_becomes_a_run(stub, tmp_path: Path) -> None:
    url, _ = await stub(mode="fast")
    ticks: list[BenchTick] = []
    lines: list[str] = []
    target = BenchTarget(endpoint=url, topology="tp1", campaign="vb", runs_root=tmp_path)
    run = await run_vllm_bench(_fake(tmp_path), _opts(), target, "/tok", on_tick=ticks.append,
                               on_line=lines.append)
    assert run.meta.runner == "vllm-bench" and run.meta.status == "complete"
    assert run.meta.topology == "tp1" and run.meta.workload == "tiny"
    assert run.summary["topology"] == "tp1" and run.summary["output_throughput"] > 0
    assert len(run.records()) == 20
    assert ticks[-1].done == 20 and ticks[-1].total == 20
    assert "Starting main benchmark run..." in lines
    assert (run.path / "command.txt").read_text().split()[2:4] == ["bench", "serve"]
    assert json.loads((run.path / "vllm-result.json").read_text())["label"] == "tui"


async def test_failing_vllm_bench_is_a_failed_run(stub, tmp_path: Path) -> None:
    url, _ = await stub(mode="fast")
    opts = _opts()
    opts.model = "--fail"
    target = BenchTarget(endpoint=url, topology="tp1", campaign="vb", runs_root=tmp_path)
    with pytest.raises(RunFailed, match="exited with code 1: ValueError: Initial test run failed"):
        await run_vllm_bench(_fake(tmp_path), opts, target, "/tok")
    meta = json.loads(next((tmp_path / "vb").glob("*/run.json")).read_text())
    assert meta["status"] == "failed"
