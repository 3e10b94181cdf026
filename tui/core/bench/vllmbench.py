"""The real ``vllm bench serve`` as an alternative runner: same workload, its own client, its result as a run.

The command is configurable (``vllm``, a venv's ``bin/vllm``, or ``python -m vllm.entrypoints.cli.main``). Its
progress (tqdm on stderr, ``\\r``-separated) becomes ``BenchTick`` events with the request counts; its other
lines are passed on as text. It writes ``--save-result --save-detailed`` JSON into the run directory, which is
then loaded like an imported result (runner ``vllm-bench``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tui.core import paths
from tui.core.bench.events import BenchDone, BenchTick
from tui.core.bench.runner import BenchOptions, BenchTarget, prepare_run
from tui.core.bench.store import RUN_FILE, Run, RunMeta, import_vllm_result, rate_label, safe_name, write_json
from tui.core.errors import InputError, RunFailed
from tui.core.events import EventBus

_TQDM = re.compile(r"(\d+)/(\d+) \[(\d+):(\d+)(?::(\d+))?<")
RESULT_NAME = "result.json"


def bench_argv(command: Sequence[str], opts: BenchOptions, endpoint: str, model: str, tokenizer: str,
               result_dir: Path, topology: str) -> list[str]:
    w = opts.workload
    if opts.prompts_file:
        raise InputError("the vllm bench runner sends vllm's random dataset only; drop --prompts",
                         field="--runner")
    argv = [*command, "bench", "serve", "--base-url", endpoint, "--model", model, "--tokenizer", tokenizer,
            "--dataset-name", "random", "--random-input-len", str(w.input_len),
            "--random-output-len", str(w.output_len), "--random-range-ratio", str(w.range_ratio),
            "--random-prefix-len", str(w.prefix_len), "--num-prompts", str(w.num_prompts),
            "--request-rate", "inf" if math.isinf(w.request_rate) else str(w.request_rate),
            "--burstiness", str(w.burstiness), "--seed", str(w.seed),
            "--percentile-metrics", ",".join(opts.metrics),
            "--metric-percentiles", ",".join(f"{p:g}" for p in opts.percentiles),
            "--save-result", "--save-detailed", "--result-dir", str(result_dir), "--result-filename", RESULT_NAME,
            "--label", "vllm-bench", "--metadata", f"topology={topology}", f"workload={w.name}"]
    if w.max_concurrency:
        argv += ["--max-concurrency", str(w.max_concurrency)]
    if w.ignore_eos:
        argv.append("--ignore-eos")
    if opts.goodput:
        argv += ["--goodput", *(f"{k}:{v:g}" for k, v in opts.goodput.items())]
    if opts.warmup > 0:
        argv += ["--num-warmups", str(opts.warmup)]
    return argv


def parse_progress(segment: str) -> tuple[int, int] | None:
    m = _TQDM.search(segment)
    return (int(m.group(1)), int(m.group(2))) if m else None


async def run_vllm_bench(command: Sequence[str], opts: BenchOptions, target: BenchTarget, tokenizer: str, *,
                         bus: EventBus | None = None, on_tick: Callable[[BenchTick], None] | None = None,
                         on_line: Callable[[str], None] | None = None) -> Run:
    w = opts.workload
    setup = await prepare_run(opts, target)
    model, rate, name, root, directory = setup.model, setup.rate, setup.name, setup.root, setup.directory
    out_dir = directory / "vllm"
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = bench_argv(command, opts, target.endpoint, model, tokenizer, out_dir, target.topology)
    (directory / "command.txt").write_text(" ".join(argv) + "\n", encoding="utf-8")
    run_id = f"{safe_name(target.campaign)}/{name}"
    started = time.monotonic()
    tail: list[str] = []

    def emit(segment: str) -> None:
        seg = segment.strip()
        if not seg:
            return
        prog = parse_progress(seg)
        if prog is not None:
            tick = BenchTick(run_id=run_id, phase="run", elapsed_s=time.monotonic() - started, total=prog[1],
                             sent=prog[1], done=prog[0], failed=0, inflight=prog[1] - prog[0])
            if bus is not None:
                bus.publish(tick)
            if on_tick is not None:
                on_tick(tick)
            return
        tail.append(seg)
        del tail[:-30]
        if on_line is not None:
            on_line(seg)

    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE, env=paths.child_env(),
                                                    start_new_session=True)
    except OSError as exc:
        raise InputError(f"cannot run {argv[0]}: {exc.strerror}", field="--vllm-bench",
                         hint="point at vllm with --vllm PATH or --vllm-bench 'PYTHON -m "
                              "vllm.entrypoints.cli.main'") from None

    async def pump(stream: asyncio.StreamReader) -> None:
        buf = ""
        while True:
            data = await stream.read(65536)
            if not data:
                break
            buf += data.decode("utf-8", "replace")
            *parts, buf = re.split(r"[\r\n]", buf)
            for part in parts:
                emit(part)
        emit(buf)

    assert proc.stdout is not None
    assert proc.stderr is not None
    readers = asyncio.gather(pump(proc.stdout), pump(proc.stderr))
    try:
        await readers
        code = await proc.wait()
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 10)
        raise
    result = out_dir / RESULT_NAME
    if code != 0 or not result.exists():
        meta = RunMeta(campaign=safe_name(target.campaign), name=name, topology=target.topology, workload=w.name,
                       request_rate=rate, status="failed", runner="vllm-bench", endpoint=target.endpoint,
                       model=model, message=f"vllm bench serve exited with code {code}: " + " | ".join(tail[-3:]))
        write_json(directory / RUN_FILE, meta.to_dict())
        if bus is not None:
            bus.publish(BenchDone(run_id=run_id, status="failed", run_dir=str(directory), message=meta.message))
        raise RunFailed(meta.message[:400], hint=f"command in {directory / 'command.txt'}")
    run = import_vllm_result(result, campaign=target.campaign, topology=target.topology, workload=w.name,
                             root=root, name=name, runner="vllm-bench",
                             meta_extra={"endpoint": target.endpoint, "request_rate": rate,
                                         "repeat": target.repeat, "goodput_slo": dict(opts.goodput),
                                         "message": "vllm bench serve: " + rate_label(w.request_rate) + " req/s"})
    if bus is not None:
        bus.publish(BenchDone(run_id=run.id, status=run.meta.status, run_dir=str(run.path), summary=run.summary))
    return run
