"""The vllm bench serve runner: its command line, its progress, its result loaded as a run (a fake vllm here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.bench.benchpaths import CPU_SAMPLE, H200
from tests.helpers import eventually_async
from tui.core.bench.events import BenchTick
from tui.core.bench.runner import BenchOptions, BenchTarget
from tui.core.bench.vllmbench import bench_argv, parse_progress, run_vllm_bench
from tui.core.errors import InputError, RunFailed
from tui.core.models import Workload

FAKE = '''
import json, sys, time
args = sys.argv[1:]
assert args[:2] == ["bench", "serve"], args
opt = {args[i]: args[i + 1] for i in range(2, len(args) - 1) if args[i].startswith("--")}
if opt.get("--model", "") == "fail-at-test-run":
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


# a vllm bench that sends real traffic: a warm-up pause, then streamed completions to the server, with progress
TRAFFIC = '''
import json, sys, time, urllib.request
args = sys.argv[1:]
opt = {args[i]: args[i + 1] for i in range(2, len(args) - 1) if args[i].startswith("--")}
n = int(opt["--num-prompts"])
def send(i):
    body = json.dumps({"model": opt["--model"], "prompt": [1] * 8, "max_tokens": 40, "stream": True}).encode()
    req = urllib.request.Request(opt["--base-url"] + "/v1/completions", data=body,
                                 headers={"content-type": "application/json"})
    urllib.request.urlopen(req).read()
print("Starting initial single prompt test run...", flush=True)
time.sleep(0.4)  # the warm-up as our reader sees it: its lines read when the pipe delivers them (> 0.1 s asked)
warm = int(opt.get("--num-warmups", 0))
for i in range(warm):  # with its own progress bar, as vllm bench draws one for its warm-up
    send(i)
    sys.stderr.write(f"\\r100%|##| {i + 1}/{warm} [00:00<00:00,  9.00it/s]"); sys.stderr.flush()
print("Starting main benchmark run...", flush=True)
time.sleep(0.3)  # vllm bench prints its traffic settings before it sends
sys.stderr.write(f"\\r  0%| | 0/{n} [00:00<?, ?it/s]"); sys.stderr.flush()
for i in range(n):
    send(i)
    sys.stderr.write(f"\\r{100 * (i + 1) // n:3d}%|##| {i + 1}/{n} [00:0{i}<00:00,  1.00it/s]"); sys.stderr.flush()
data = json.load(open(SAMPLE))
data["num_prompts"] = n
json.dump(data, open(opt["--result-dir"] + "/" + opt["--result-filename"], "w"))
'''


def _fake(tmp_path: Path, body: str = FAKE) -> list[str]:
    f = tmp_path / "fake_vllm.py"
    f.write_text(f"SAMPLE = {str(CPU_SAMPLE)!r}\n" + body)
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
    from tui.core.bench.events import BenchDone, BenchLine, BenchStarted
    from tui.core.events import Event, EventBus

    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    run = await run_vllm_bench(_fake(tmp_path), _opts(), target, "/tok", on_tick=ticks.append,
                               on_line=lines.append, bus=bus)
    assert isinstance(events[0], BenchStarted) and events[0].runner == "vllm-bench" and events[0].total == 20
    assert isinstance(events[-1], BenchDone) and events[-1].status == "complete"
    assert [e.text for e in events if isinstance(e, BenchLine)] == lines
    assert run.meta.runner == "vllm-bench" and run.meta.status == "complete"
    assert run.meta.topology == "tp1" and run.meta.workload == "tiny"
    assert run.summary["topology"] == "tp1" and run.summary["output_throughput"] > 0
    assert len(run.records()) == 20
    assert ticks[-1].done == 20 and ticks[-1].total == 20
    assert "Starting main benchmark run..." in lines
    assert (run.path / "command.txt").read_text().split()[2:4] == ["bench", "serve"]
    assert json.loads((run.path / "vllm-result.json").read_text())["label"] == "tui"


async def test_live_figures_come_from_the_servers_metrics(stub, tmp_path: Path) -> None:
    """While vllm bench runs, ticks carry its phase and count and the server's token rate, marked as the server's
    view; its warm-up's length reaches run.json, and the run gets the server-side checks of our own runner."""
    url, srv = await stub(mode="paced", ms_per_token=5.0)
    ticks: list[BenchTick] = []
    target = BenchTarget(endpoint=url, topology="tp1", campaign="vb", runs_root=tmp_path)
    opts = _opts(12)
    opts.warmup = 1
    run = await run_vllm_bench(_fake(tmp_path, TRAFFIC), opts, target, "/tok", on_tick=ticks.append)
    assert srv.stats.completions == 13  # one warm-up request, then the run's
    assert all(t.source == "server" for t in ticks)
    warm = [t for t in ticks if t.phase == "warmup"]
    main = [t for t in ticks if t.phase == "run"]
    assert warm and main and ticks.index(warm[-1]) < ticks.index(main[0])
    assert warm[0].total == 1 and "warm-up" in warm[0].line()
    assert any(t.output_tps and t.output_tps > 0 for t in main)  # 40 tokens per 0.2 s from the stub's counter
    assert main[-1].done == 12 and main[-1].sent == 12 and main[-1].inflight == 0
    assert [t.done for t in main] == sorted(t.done for t in main)
    assert all(t.total == 12 for t in main)  # the warm-up's own bar (1/1) is not the run's count
    assert all(t.total == 1 and t.done <= 1 for t in warm)  # the warm-up bar counts the warm-up
    assert "(server /metrics)" in main[-1].line()
    client = run.meta.client
    assert client["tool"] == "vllm bench serve" and client["warmups"] == 1 and client["warmup_s"] > 0.1
    assert client["initial_test"] == "started" and client["warmup_completed"] is False
    assert client["counters_include_warmup"] is False
    assert run.meta.fingerprint["client"] == "vllm bench serve"
    saved = json.loads((run.path / "run.json").read_text())
    assert saved["client"]["warmup_s"] == client["warmup_s"]


@pytest.mark.parametrize("flushes", [True, False])
async def test_a_1p1d_vllm_bench_run_gets_our_server_side_checks(stub, tmp_path: Path, monkeypatch, flushes) -> None:
    """Around a vllm bench run, as around ours: the decode server's prompt-token sources (here it computed every
    prompt itself: flagged), counted from the start of its main run (its warm-up left out), its log copied into
    the run."""
    from tests.helpers import decode_layout

    url, _ = await stub(mode="fast", kv_source="local_compute")
    log = tmp_path / "decode.log"
    log.write_text("INFO ... decode server log\n")
    layout = decode_layout(url, log)
    target = BenchTarget(endpoint=url, topology="1p1d", campaign="vb", runs_root=tmp_path, layout=layout)
    opts = _opts(3)
    opts.warmup = 2
    # vllm bench prints its phase lines without flushing: to a pipe they would come only at its exit (and the
    # counters would be read again after the run) unless the child runs unbuffered, whatever our environment says
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    fake = TRAFFIC if flushes else TRAFFIC.replace(", flush=True", "")
    run = await run_vllm_bench(_fake(tmp_path, fake), opts, target, "/tok")
    assert run.meta.client["warmup_s"] > 0.1 and run.meta.client["counters_include_warmup"] is False
    kv = run.meta.kv_transfer
    assert kv is not None and kv["local_compute"] == 3 * 8 and kv["external"] == 0
    assert "kv-recompute" in run.meta.flags and (run.path / "logs" / "decode.log").exists()
    assert run.meta.layout_id == "l"


async def test_a_stopped_vllm_bench_is_killed_and_marked_incomplete(stub, tmp_path: Path) -> None:
    import asyncio
    import os

    url, _ = await stub(mode="fast")
    pidfile = tmp_path / "pid"
    slow = f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\n" \
           "print('Starting main benchmark run...', flush=True)\ntime.sleep(60)\n"
    target = BenchTarget(endpoint=url, topology="tp1", campaign="vb", runs_root=tmp_path)
    from tui.core.bench.events import BenchDone
    from tui.core.events import Event, EventBus

    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    task = asyncio.create_task(run_vllm_bench(_fake(tmp_path, slow), _opts(5), target, "/tok", bus=bus))
    await eventually_async(lambda: pidfile.exists() and pidfile.read_text(), 60, "the client's pid")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    meta = json.loads(next((tmp_path / "vb").glob("*/run.json")).read_text())
    assert meta["status"] == "incomplete" and "no request of it is kept" in meta["message"]
    assert meta["client"]["tool"] == "vllm bench serve" and "incomplete" in meta["flags"]
    done = [e for e in events if isinstance(e, BenchDone)]
    assert len(done) == 1 and done[0].status == "incomplete"


async def test_failing_vllm_bench_is_a_failed_run(stub, tmp_path: Path) -> None:
    url, _ = await stub(mode="fast")
    opts = _opts()
    opts.model = "fail-at-test-run"
    target = BenchTarget(endpoint=url, topology="tp1", campaign="vb", runs_root=tmp_path)
    with pytest.raises(RunFailed, match="exited with code 1: ValueError: Initial test run failed"):
        await run_vllm_bench(_fake(tmp_path), opts, target, "/tok")
    meta = json.loads(next((tmp_path / "vb").glob("*/run.json")).read_text())
    assert meta["status"] == "failed"


def test_a_campaign_can_run_vllm_bench_as_its_client(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``run --runner vllm``: every cell is a vllm bench run against the layout that is up; the campaign is another
    campaign than ours with the same cells."""
    import shlex

    from tests.helpers import layout_port_args
    from tui.cli.main import main
    from tui.core.bench.store import find_runs, load_run

    fake = shlex.join(_fake(tmp_path, TRAFFIC))
    (tmp_path / "wl.yaml").write_text("name: small\ninput_len: 64\noutput_len: 32\nnum_prompts: 4\n")
    base = ["run", "--sim", "--sim-gpus", "1", "--sim-startup", "0.3", "--sim-clock", "20",
            "--model", "qwen3.6-27b-nvfp4", "--topology", "tp1", "--workload", str(tmp_path / "wl.yaml"),
            *layout_port_args(), "--json", "--quiet"]
    code = main([*base, "--runner", "vllm", "--vllm-bench", fake, "--tokenizer", "/tok"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert [(r["topology"], r["workload"]) for r in data["rows"]] == [("tp1", "small")]
    runs = [load_run(p) for p in find_runs([Path(data["campaign"]).name])]
    assert [r.meta.runner for r in runs] == ["vllm-bench"]
    assert runs[0].meta.client["tool"] == "vllm bench serve" and (runs[0].path / "command.txt").exists()
    spec = json.loads((Path(data["campaign"]) / "campaign.json").read_text())
    assert spec["client"] == "vllm"


@pytest.mark.parametrize(("flag", "message"), [
    ("/nonexistent/vllm", "field '--vllm-bench': '/nonexistent/vllm' is not an executable here"),
    ("'python -m vllm", "field '--vllm-bench': cannot split"),
])
def test_a_vllm_bench_command_that_cannot_run_is_refused_first(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                               flag: str, message: str) -> None:
    """Before any layout is brought up (a campaign would start every one of them to fail each cell on it)."""
    from tests.helpers import free_port
    from tui.cli.main import main

    (tmp_path / "wl.yaml").write_text("name: small\ninput_len: 64\noutput_len: 32\nnum_prompts: 4\n")
    for argv in (["bench", "--endpoint", f"http://127.0.0.1:{free_port()}"],
                 ["run", "--sim", "--model", "qwen3.6-27b-nvfp4", "--topology", "tp1", "--workload",
                  str(tmp_path / "wl.yaml")]):
        code = main([*argv, "--runner", "vllm", "--vllm-bench", flag, "--tokenizer", "/tok"])
        err = capsys.readouterr().err
        assert code == 2 and message in err, err
        assert "Traceback" not in err and "bringing the layout up" not in err
