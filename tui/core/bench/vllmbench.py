"""The real ``vllm bench serve`` as an alternative runner: same workload, its own client, its result as a run.

The command is configurable (``vllm``, a venv's ``bin/vllm``, or ``python -m vllm.entrypoints.cli.main``). Its
progress (tqdm on stderr, ``\\r``-separated) gives the request count; the live figures come from the servers'
``/metrics`` (:mod:`tui.core.bench.serverlive`); both become ``BenchTick`` events; its other lines are passed on
as text. It writes ``--save-result --save-detailed`` JSON into the run directory, which is
then loaded like an imported result (runner ``vllm-bench``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from tui.core import paths, safewrite, vllmargv
from tui.core.bench.events import BenchDone, BenchLine, BenchTick
from tui.core.bench.runner import (
    BenchOptions,
    BenchTarget,
    ServerBracket,
    prepare_run,
    run_fingerprint,
    shared_prefix_share,
    started_event,
)
from tui.core.bench.serverlive import ServerLive
from tui.core.bench.store import RUN_FILE, Run, RunMeta, rate_label, safe_name, write_json
from tui.core.bench.vllmresult import import_vllm_result
from tui.core.errors import InputError, RunFailed
from tui.core.events import EventBus
from tui.core.redact import redact_argv
from tui.core.telemetry.derive import ITL, TPOT, TTFT

_TQDM = re.compile(r"(\d+)/(\d+) \[(\d+):(\d+)(?::(\d+))?<")
RESULT_NAME = "result.json"
# vllm bench's lines between its phases (vllm/benchmarks/serve.py)
TEST_RUN_MARK = "Starting initial single prompt test run"
TEST_DONE_MARK = "Initial test run completed"
TEST_SKIPPED_MARK = "Skipping endpoint ready check"
WARMUP_DONE_MARK = "Warmup run completed"
MAIN_RUN_MARK = "Starting main benchmark run"
_SCRAPE_S = 0.5
VLLM_BENCH_HINT = "point at vllm with --vllm PATH or --vllm-bench 'PYTHON -m vllm.entrypoints.cli.main'"


def bench_argv(command: Sequence[str], opts: BenchOptions, endpoint: str, model: str, tokenizer: str,
               result_dir: Path, topology: str) -> list[str]:
    w = opts.workload
    if opts.prompts_file:
        raise InputError("the vllm bench runner sends vllm's random dataset only; drop --prompts",
                         field="--runner")
    vllmargv.check_value(model, field="model")  # a served name from the server's answer: never an option
    vllmargv.check_model(tokenizer, field="--tokenizer")
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


def _key_env(opts: BenchOptions) -> dict[str, str]:
    """vllm bench sends ``Authorization: Bearer $OPENAI_API_KEY``: the key of our bearer header, in its environment
    (never on its command line)."""
    auth = opts.headers.get("Authorization", "")
    return {"OPENAI_API_KEY": auth.removeprefix("Bearer ")} if auth.startswith("Bearer ") else {}


def parse_progress(segment: str) -> tuple[int, int] | None:
    m = _TQDM.search(segment)
    return (int(m.group(1)), int(m.group(2))) if m else None


class _Progress:
    """What vllm bench's output says so far: its phase (setting up: imports, tokenizer, dataset; warm-up: the initial
    single-prompt test and ``--num-warmups``; run), how long each took, and the main run's count from its tqdm bar."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.phase = "setup"
        self.done = 0
        self.started = time.monotonic()
        self.warmup_started: float | None = None
        self.run_started: float | None = None
        self.seen: set[str] = set()
        self.warmup_done = 0
        self.warmup_total = 0

    def line(self, seg: str) -> bool:
        """Take one segment of output; True when it was progress (not a line to pass on)."""
        for mark in (TEST_RUN_MARK, TEST_DONE_MARK, TEST_SKIPPED_MARK, WARMUP_DONE_MARK):
            if mark in seg:
                self.seen.add(mark)
        if TEST_RUN_MARK in seg and self.warmup_started is None:
            self.warmup_started = time.monotonic()
            self.phase = "warmup"
        if MAIN_RUN_MARK in seg and self.run_started is None:
            self.run_started = time.monotonic()
            self.phase = "run"
            return False
        prog = parse_progress(seg)
        if prog is None:
            return False
        if self.phase == "run":
            self.done, self.total = prog
        else:  # the bar of its --num-warmups requests
            self.warmup_done, self.warmup_total = prog
        return True

    def elapsed(self) -> float:
        since = self.run_started or self.warmup_started or self.started
        return time.monotonic() - since

    def client(self, warmups: int) -> dict[str, object]:
        """What run.json keeps of vllm bench's client: its phases' lengths and how its warm-up went."""
        def span(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else round(b - a, 3)

        return {"tool": "vllm bench serve", "setup_s": span(self.started, self.warmup_started or self.run_started),
                "warmup_s": span(self.warmup_started, self.run_started), "warmups": warmups,
                "initial_test": ("completed" if TEST_DONE_MARK in self.seen else
                                 "skipped" if TEST_SKIPPED_MARK in self.seen else
                                 "started" if TEST_RUN_MARK in self.seen else "not run"),
                "warmup_completed": WARMUP_DONE_MARK in self.seen if warmups > 0 else None}


async def run_vllm_bench(command: Sequence[str], opts: BenchOptions, target: BenchTarget, tokenizer: str, *,
                         bus: EventBus | None = None, on_tick: Callable[[BenchTick], None] | None = None,
                         on_line: Callable[[str], None] | None = None) -> Run:
    """Run ``vllm bench serve`` as a child (its own process group) and load its result as a run.

    While it runs, ``BenchTick`` events at ``opts.tick_s`` carry its request count and the servers' live figures
    (``source="server"``: :mod:`tui.core.bench.serverlive`); around it the same server-side checks as our runner's
    (:class:`ServerBracket`) go into the run's meta, with vllm bench's warm-up (its count and duration).
    """
    w = opts.workload
    setup = await prepare_run(opts, target)
    model, rate, name, root, directory = setup.model, setup.rate, setup.name, setup.root, setup.directory
    out_dir = directory / "vllm"
    argv = bench_argv(command, opts, target.endpoint, model, tokenizer, out_dir, target.topology)

    def prepare_dir() -> None:
        paths.make_dirs(out_dir)
        safewrite.write_atomic(directory / "command.txt", " ".join(redact_argv(argv)) + "\n",
                               root=paths.root_for(directory))

    await asyncio.to_thread(prepare_dir)
    run_id = f"{safe_name(target.campaign)}/{name}"
    tail: list[str] = []
    progress = _Progress(w.num_prompts)
    live = ServerLive(target.server_urls(), target.decode_urls())
    # the server-side checks of our runner: read before vllm bench starts, and again when it says its main run
    # starts (after its warm-up has finished), so that its warm-up stays out of the counters, as with ours
    probe = RunMeta(campaign=safe_name(target.campaign), name=name)
    bracket = ServerBracket(target)
    await bracket.open(probe, wait_idle=True)
    reopened: asyncio.Task[None] | None = None  # the counters read again at the main run's start
    if bus is not None:
        bus.publish(started_event(run_id, "vllm-bench", opts, target, directory))

    def publish(tick: BenchTick) -> None:
        if bus is not None:
            bus.publish(tick)
        if on_tick is not None:
            on_tick(tick)

    async def ended(status: str, message: str) -> str:
        """A run that left no result (stopped or failed): its run.json says why, and BenchDone says it ended."""
        meta = RunMeta(campaign=safe_name(target.campaign), name=name, topology=target.topology, workload=w.name,
                       request_rate=rate, repeat=target.repeat, status=status, runner="vllm-bench",
                       endpoint=target.endpoint, model=model, layout_id=target.layout.id if target.layout else "",
                       knobs=target.knob_values(), client=progress.client(max(opts.warmup, 0)), ended=time.time(),
                       flags=[*probe.flags, *(["incomplete"] if status == "incomplete" else [])],
                       triton_jit=probe.triton_jit, message=message)
        await asyncio.to_thread(write_json, directory / RUN_FILE, meta.to_dict())
        if bus is not None:
            bus.publish(BenchDone(run_id=run_id, status=status, run_dir=str(directory), flags=tuple(meta.flags),
                                  message=message, meta=meta.to_dict()))
        return message

    def tick() -> BenchTick:
        queued = live.queued()
        left = max(progress.total - progress.done, 0)
        inflight = min(queued, left) if queued is not None and progress.phase == "run" else 0
        if progress.phase != "run":
            return BenchTick(run_id=run_id, phase=progress.phase, elapsed_s=progress.elapsed(),
                             total=progress.warmup_total or max(opts.warmup, 0), sent=0, done=progress.warmup_done,
                             failed=0, inflight=queued or 0, source="server")
        # vllm bench sends at its rate and the servers count what reached them: sent = finished + at the servers
        ttft, tpot, itl = live.quantiles_ms(TTFT), live.quantiles_ms(TPOT), live.quantiles_ms(ITL)
        return BenchTick(run_id=run_id, phase="run", elapsed_s=progress.elapsed(), total=progress.total,
                         sent=progress.done + inflight, done=progress.done, failed=0, inflight=inflight,
                         output_tps=live.output_tps(), ttft_p50_ms=ttft[0], ttft_p99_ms=ttft[1],
                         tpot_p50_ms=tpot[0], tpot_p99_ms=tpot[1], itl_p50_ms=itl[0], itl_p99_ms=itl[1],
                         window_s=live.windows[live.urls[0]].rate_window_s if live.urls else 0.0,
                         source="server")

    def emit(segment: str) -> None:
        nonlocal reopened
        seg = segment.strip()
        if not seg:
            return
        phase = progress.phase
        if progress.line(seg):
            return
        if phase != "run" and progress.phase == "run" and proc.returncode is None:
            reopened = asyncio.create_task(bracket.open(probe, wait_idle=False))
        tail.append(seg)
        del tail[:-30]
        if bus is not None:
            bus.publish(BenchLine(run_id=run_id, text=seg))
        if on_line is not None:
            on_line(seg)

    try:
        # unbuffered: its phase lines must arrive when it prints them (the counters are read again at its main
        # run's start), not when it exits; a pipe would otherwise hold them in its buffer
        # one pipe for both streams: its phase lines (stdout) and its progress bars (stderr) must be read in the
        # order it wrote them, or a warm-up bar read after "Starting main benchmark run" would count as the run's
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT,
                                                    env=paths.child_env({"PYTHONUNBUFFERED": "1", **_key_env(opts)}),
                                                    start_new_session=True)
    except OSError as exc:
        raise InputError(f"cannot run {argv[0]}: {exc.strerror}", field="--vllm-bench",
                         hint=VLLM_BENCH_HINT) from None
    except asyncio.CancelledError:  # stopped while it was starting (asyncio kills the child): said as any stop
        await ended("incomplete", "stopped while vllm bench serve was starting: no request of it is kept")
        raise

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

    async def poller() -> None:
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                began = time.monotonic()
                await live.poll(client)
                await asyncio.sleep(max(0.0, _SCRAPE_S - (time.monotonic() - began)))

    async def ticker() -> None:
        while True:
            publish(tick())
            await asyncio.sleep(opts.tick_s)

    assert proc.stdout is not None

    ticking = [asyncio.create_task(poller()), asyncio.create_task(ticker())]
    try:
        await pump(proc.stdout)
        code = await proc.wait()
    except asyncio.CancelledError:
        await _stop(proc)
        if reopened is not None:
            reopened.cancel()
        # vllm bench writes its result only at its end: nothing of this run can be kept but the fact
        await ended("incomplete", f"stopped after {progress.done}/{progress.total} requests; vllm bench serve saves "
                                  "its results only at its end, so no request of it is kept")
        raise
    finally:
        for t in ticking:
            t.cancel()
        await asyncio.gather(*ticking, *([reopened] if reopened is not None else []), return_exceptions=True)
    publish(tick())
    result = out_dir / RESULT_NAME
    if code != 0 or not result.exists():
        await bracket.close(probe, 0, shared_prefix_share(opts), directory)  # the servers' logs, JIT lines
        message = await ended("failed", f"vllm bench serve exited with code {code}: " + " | ".join(tail[-3:]))
        raise RunFailed(message[:400], hint=f"command in {directory / 'command.txt'}")
    probe.client = progress.client(max(opts.warmup, 0))
    probe.client["counters_include_warmup"] = reopened is None
    output_tokens = await asyncio.to_thread(_output_tokens, result)
    fingerprint = await asyncio.to_thread(run_fingerprint, target, setup.info, client="vllm bench serve")
    await bracket.close(probe, output_tokens, shared_prefix_share(opts), directory)
    bracket.breakdown(probe, await asyncio.to_thread(_mean_ttft_ms, result))
    run = await asyncio.to_thread(
        import_vllm_result, result, campaign=target.campaign, topology=target.topology, workload=w.name,
        root=root, name=name, runner="vllm-bench",
        meta_extra={"endpoint": target.endpoint, "request_rate": rate, "repeat": target.repeat,
                    "goodput_slo": dict(opts.goodput), "layout_id": target.layout.id if target.layout else "",
                    "knobs": target.knob_values(),
                    "message": "vllm bench serve: " + rate_label(w.request_rate) + " req/s",
                    "flags": probe.flags, "triton_jit": probe.triton_jit, "prefix_cache": probe.prefix_cache,
                    "kv_transfer": probe.kv_transfer, "kv_xfer": probe.kv_xfer, "spec_decode": probe.spec_decode,
                    "ttft_breakdown": probe.ttft_breakdown, "energy": probe.energy,
                    "client": probe.client, "sim_pacing": probe.sim_pacing,
                    "fingerprint": fingerprint})
    if bus is not None:
        bus.publish(BenchDone(run_id=run.id, status=run.meta.status, run_dir=str(run.path), summary=run.summary,
                              flags=tuple(run.meta.flags), meta=run.meta.to_dict()))
    return run


async def _stop(proc: asyncio.subprocess.Process, grace_s: float = 10.0) -> None:
    """SIGTERM to vllm bench's process group, SIGKILL if it is still there after ``grace_s``: a client left running
    would go on loading the servers into the next cell or the tear-down."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
            return
        except TimeoutError:
            continue


def _mean_ttft_ms(result: Path) -> float | None:
    try:
        value = json.loads(result.read_text(encoding="utf-8")).get("mean_ttft_ms")
        return float(value) if value is not None else None
    except (OSError, ValueError, TypeError):
        return None


def _output_tokens(result: Path) -> int:
    try:
        data = json.loads(result.read_text(encoding="utf-8"))
        return int(data.get("total_output_tokens") or 0)
    except (OSError, ValueError, TypeError):
        return 0  # import_vllm_result says what is wrong with the file
