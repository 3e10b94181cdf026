"""The parent side of a run: starts the worker, turns its ticks into ``BenchTick`` events, stores every record
as it arrives, and at the end writes the summary, the server-side checks and the fingerprint.

``run_bench`` is cancellable: cancelling it (Ctrl-C in the CLI, a stop in the console) tells the worker to stop,
keeps every finished request, and marks the run ``incomplete``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tui.core import paths
from tui.core.bench import kvxfer, serverside
from tui.core.bench.dataset import RandomSpec, load_prompts_file
from tui.core.bench.events import BenchDone, BenchStarted, BenchTick
from tui.core.bench.live import LiveWindow
from tui.core.bench.metrics import DEFAULT_METRICS, DEFAULT_PERCENTILES, summarize
from tui.core.bench.store import Run, RunMeta, RunWriter, load_run, rate_label, run_name, safe_name
from tui.core.errors import InputError, RunFailed
from tui.core.events import EventBus
from tui.core.launch.state import LayoutRecord
from tui.core.launch.supervisor import process_alive
from tui.core.models import Workload
from tui.core.plan.knobs import request_knobs

_LINE_LIMIT = 1 << 27
_STOP_GRACE_S = 15.0
DEFAULT_VOCAB = 32000


@dataclass
class BenchOptions:
    """What to send. ``workload`` carries vllm bench's traffic meanings; ``prompts_file`` replaces its prompts."""

    workload: Workload
    prompts_file: str | None = None
    model: str | None = None  # served model name; None: the first of GET /v1/models
    vocab_size: int = DEFAULT_VOCAB  # token ids are drawn below this (the model profile's vocabulary)
    prompt_format: str = "text"  # random prompts as text made with the server's tokenizer (as vllm bench) | "ids"
    warmup: int = -1  # -1: automatic (the run's shapes and batch size); 0: none; N: a burst of N
    goodput: dict[str, float] = field(default_factory=dict)
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    metrics: tuple[str, ...] = DEFAULT_METRICS
    extra_body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    tick_s: float = 0.25
    worker_cpu: int | None = None
    timeout_s: float = 6 * 3600.0  # one request, end to end (vllm bench's 6 h)
    stall_timeout_s: float = 120.0  # stop the run when no token arrives for this long with requests out; 0: never


@dataclass
class BenchTarget:
    """Where to send it and where the run is stored."""

    endpoint: str
    topology: str = "endpoint"
    layout: LayoutRecord | None = None
    plan: dict[str, Any] | None = None
    campaign: str = "bench"
    name: str | None = None  # None: <topology>-<workload>[-rate]-<time>
    repeat: int = 1
    energy: serverside.EnergyReader | None = None
    fingerprint_extra: dict[str, Any] = field(default_factory=dict)
    runs_root: Path | None = None
    #: the GPU-to-GPU bandwidth between the prefill and decode GPUs (host facts): a transfer far below it is
    #: flagged kv-slow-path; None: not judged
    link: kvxfer.LinkBandwidth | None = None
    #: the serve knobs of the layout (a campaign's configuration); None: those its launch request carried
    knobs: dict[str, str] | None = None

    def knob_values(self) -> dict[str, str]:
        """The knobs the run stores: the campaign's configuration, else the layout's launch request's."""
        if self.knobs is not None:
            return dict(self.knobs)
        plan = self.plan if self.plan is not None else (self.layout.plan if self.layout is not None else None)
        knobs = (plan or {}).get("knobs")
        if isinstance(knobs, dict):
            return {str(k)[:40]: str(v)[:40] for k, v in list(knobs.items())[:64]}
        return request_knobs(self.layout.request) if self.layout is not None and self.layout.request else {}

    def server_urls(self) -> list[str]:
        """The vLLM servers (not the proxy); the endpoint itself when no layout is known."""
        if self.layout is None:
            return [self.endpoint]
        return [p.url for p in self.layout.processes if p.role != "proxy" and p.url] or [self.endpoint]

    def decode_urls(self) -> list[str]:
        if self.layout is None:
            return []
        return [p.url for p in self.layout.processes if p.role == "decode" and p.url]

    def proxy_url(self) -> str | None:
        if self.layout is None:
            return None
        return next((p.url for p in self.layout.processes if p.role == "proxy" and p.url), None)

    def log_files(self) -> list[str]:
        if self.layout is None:
            return []
        return [p.log for p in self.layout.processes if p.log]

    @property
    def disaggregated(self) -> bool:
        return bool(self.decode_urls())


def worker_config(opts: BenchOptions, endpoint: str, model: str) -> dict[str, Any]:
    w = opts.workload
    dataset: dict[str, Any]
    if opts.prompts_file:
        dataset = {"kind": "file", "path": opts.prompts_file, "num_prompts": w.num_prompts,
                   "output_len": w.output_len, "vocab_size": opts.vocab_size}
    else:
        dataset = {"kind": "random", "input_len": w.input_len, "output_len": w.output_len,
                   "num_prompts": w.num_prompts, "range_ratio": w.range_ratio, "prefix_len": w.prefix_len,
                   "seed": w.seed, "vocab_size": opts.vocab_size, "format": opts.prompt_format}
    return {
        "settings": {
            "base_url": endpoint, "model": model, "request_rate": rate_label(w.request_rate),
            "burstiness": w.burstiness, "max_concurrency": w.max_concurrency, "seed": w.seed,
            "ignore_eos": w.ignore_eos, "extra_body": opts.extra_body, "headers": opts.headers,
            "request_id_prefix": f"bench-{int(time.time()) & 0xFFFFFF:06x}-", "tick_s": opts.tick_s,
            "timeout_s": opts.timeout_s, "stall_s": opts.stall_timeout_s,
        },
        "dataset": dataset,
        "warmup": opts.warmup,
        "cpu": opts.worker_cpu,
    }


def summary_header(opts: BenchOptions, target: BenchTarget, model: str) -> dict[str, Any]:
    w = opts.workload
    return {
        "date": time.strftime("%Y%m%d-%H%M%S"), "endpoint_type": "openai", "backend": "openai",
        "label": "disagg-tui", "model_id": model, "tokenizer_id": model, "num_prompts": w.num_prompts,
        "topology": target.topology, "workload": w.name,
        "request_rate": "inf" if math.isinf(w.request_rate) else w.request_rate,
        "burstiness": w.burstiness, "max_concurrency": w.max_concurrency,
        # the traffic as defined (vllm bench serve's argument names), so runs of one workload name that sent other
        # traffic are never compared as like for like (tui.core.bench.table.workload_signature)
        "random_input_len": w.input_len, "random_output_len": w.output_len, "random_range_ratio": w.range_ratio,
        "random_prefix_len": w.prefix_len,
        # figures of the simulated host say so wherever they go (vllm's scripts ignore a key they do not know)
        **({"simulated": True} if target.layout is not None and target.layout.simulated else {}),
    }


async def resolve_model(endpoint: str, model: str | None, headers: dict[str, str] | None = None
                        ) -> tuple[str, dict[str, Any]]:
    """The served model name (given, or the first of ``/v1/models``) and what the server says about itself."""
    import httpx

    try:
        info = await serverside.server_info(endpoint, headers=headers)
    except (httpx.HTTPError, ValueError) as exc:
        if model:
            return model, {"server_version": None, "models": [], "error": str(exc)}
        raise InputError(f"cannot ask {endpoint} for its model ({type(exc).__name__}: {exc})",
                         field="--endpoint", hint="is a layout up? see 'disagg-tui status'") from None
    name = model or (info["models"][0] if info["models"] else None)
    if not name:
        raise InputError(f"{endpoint}/v1/models lists no model", field="--endpoint")
    return name, info


def check_options(opts: BenchOptions) -> None:
    """Refuse a workload the worker could not build, before anything is created (InputError, exit 2)."""
    w = opts.workload
    if opts.prompts_file:
        load_prompts_file(opts.prompts_file, w.output_len, w.num_prompts)  # a bad file is refused before the run
    else:
        RandomSpec(input_len=w.input_len, output_len=w.output_len, num_prompts=w.num_prompts,
                   range_ratio=w.range_ratio, prefix_len=w.prefix_len, seed=w.seed,
                   vocab_size=opts.vocab_size).check()
    if not w.burstiness > 0:
        raise InputError(f"must be > 0, got {w.burstiness}", field="burstiness")
    if not w.request_rate > 0:
        raise InputError(f"must be > 0 (or inf), got {w.request_rate}", field="request_rate")


def shared_prefix_share(opts: BenchOptions) -> float:
    """The share of prompt tokens the workload repeats on purpose (its common prefix), which the cache may serve."""
    w = opts.workload
    if opts.prompts_file or w.prefix_len <= 0:
        return 0.0
    return w.prefix_len / (w.prefix_len + max(w.input_len, 1))


@dataclass(frozen=True, slots=True)
class RunSetup:
    """What every runner settles before a run: the served model, the rate, the run's name and directory."""

    model: str
    info: dict[str, Any]
    rate: float | None  # None: saturation
    name: str
    root: Path
    directory: Path


async def prepare_run(opts: BenchOptions, target: BenchTarget) -> RunSetup:
    """Check the options, ask the endpoint for its model, and name the run's directory (ours and vllm's runner)."""
    w = opts.workload
    check_options(opts)
    model, info = await resolve_model(target.endpoint, opts.model, opts.headers)
    rate = None if math.isinf(w.request_rate) else w.request_rate
    name = target.name or (run_name(target.topology, w.name, rate, target.repeat)
                           + time.strftime("-%Y%m%d-%H%M%S"))
    root = target.runs_root or paths.runs_dir()
    return RunSetup(model, info, rate, name, root, root / safe_name(target.campaign) / name)


def run_fingerprint(target: BenchTarget, server_info: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The hardware/software fingerprint a run keeps: the machine, the server's versions, the layout."""
    return serverside.fingerprint({"server": server_info, "layout": target.layout.id if target.layout else None,
                                   "simulated": target.layout.simulated if target.layout else None,
                                   **extra, **target.fingerprint_extra})


def started_event(run_id: str, runner: str, opts: BenchOptions, target: BenchTarget, directory: Path
                  ) -> BenchStarted:
    w = opts.workload
    return BenchStarted(run_id=run_id, runner=runner, topology=target.topology, workload=w.name,
                        total=w.num_prompts, request_rate=rate_label(w.request_rate), endpoint=target.endpoint,
                        run_dir=str(directory), repeat=target.repeat)


class ServerBracket:
    """What the servers say around a run (either runner): their counters, log positions and the GPUs' energy read
    at the start, and at the end the checks on them written into the run's meta and flags: Triton JIT compiles
    logged during the run, prefix-cache hits, whether a 1P1D decode server got its KV over the transfer, joules
    per output token; the servers' logs are copied into the run."""

    def __init__(self, target: BenchTarget) -> None:
        self.target = target
        self.server_urls = target.server_urls()
        self.decode_urls = target.decode_urls()
        self._kv: dict[str, dict[str, float] | None] = {}
        self._prefix: dict[str, tuple[float, float] | None] = {}
        self._pacing: dict[str, serverside.Pacing | None] = {}
        self._offsets: dict[str, int] = {}
        self._energy: dict[int, float] | None = None
        self._nixl: dict[str, kvxfer.NixlCounters | None] = {}
        self._proxy: dict[str, kvxfer.HistTotal] = {}
        self.kv_run: kvxfer.KvTransferRun | None = None
        self._proxy_after: dict[str, kvxfer.HistTotal] = {}
        self._opened = 0.0  # monotonic time of the starting point (the run's wall time when none is given)
        self._spec: dict[str, dict[str, Any] | None] = {}

    async def open(self, meta: RunMeta, *, wait_idle: bool) -> None:
        """Read the starting point. The log positions and the energy first (quick, local): when the run is already
        starting (vllm bench's main run), a JIT compile on its first requests must not fall before them."""
        if wait_idle and not await serverside.wait_idle(self.server_urls):
            meta.flags.append("server-busy-at-start")
        self._offsets = await asyncio.to_thread(serverside.log_offsets, self.target.log_files())
        self._energy = await asyncio.to_thread(serverside.read_energy, self.target.energy)
        self._opened = time.monotonic()
        proxy = self.target.proxy_url() if self.decode_urls else None
        texts = await serverside.scrape_metrics([*self.server_urls, *([proxy] if proxy else [])])
        self._kv = serverside.sources_of(texts, self.decode_urls) if self.decode_urls else {}
        self._prefix = serverside.prefix_counts_of({u: t for u, t in texts.items() if u != proxy})
        self._nixl = _nixl_of(texts, self.decode_urls)
        self._proxy = kvxfer.proxy_histograms(texts.get(proxy) or "") if proxy else {}
        self._pacing = serverside.pacing_of(texts)
        self._spec = serverside.spec_decode_of({u: t for u, t in texts.items() if u != proxy})

    async def close(self, meta: RunMeta, output_tokens: int, shared_prefix: float, directory: Path, *,
                    duration_s: float | None = None) -> None:
        """``duration_s``: the run's wall time (what the KV moved per second is over; else since :meth:`open`)."""
        wall = duration_s if duration_s and duration_s > 0 else (time.monotonic() - self._opened
                                                                  if self._opened else None)
        # the logs and the energy counters are read off the event loop (a console runs on it)
        flags = meta.flags
        meta.triton_jit = await asyncio.to_thread(serverside.jit_lines, self._offsets)
        if meta.triton_jit:
            flags.append("triton-jit")
        proxy = self.target.proxy_url() if self.decode_urls else None
        texts = await serverside.scrape_metrics([*self.server_urls, *([proxy] if proxy else [])])
        if proxy:
            self._proxy_after = kvxfer.proxy_histograms(texts.get(proxy) or "")
            texts.pop(proxy, None)
        prefix = serverside.prefix_check(self._prefix, serverside.prefix_counts_of(texts), shared_prefix)
        if prefix is not None:
            meta.prefix_cache = prefix.to_dict()
            if prefix.unexpected:
                flags.append("prefix-cache-hits")
        meta.spec_decode = serverside.spec_decode_check(self._spec, serverside.spec_decode_of(texts))
        pacing = serverside.pacing_check(self._pacing, serverside.pacing_of(texts))
        if pacing is not None:
            meta.sim_pacing = pacing.to_dict()
            if pacing.overloaded:
                flags.append("sim-overloaded")
        if self.decode_urls:
            check = serverside.kv_check(self._kv, serverside.sources_of(texts, self.decode_urls))
            meta.kv_transfer = check.to_dict() if check else {"unknown": "the decode servers export no "
                                                                         "vllm:prompt_tokens_by_source_total"}
            if check is not None and check.recomputed:
                flags.append("kv-recompute")
            elif check is not None and not check.transferred:
                flags.append("kv-no-transfer")
            self.kv_run = kvxfer.kv_transfer_run(self._nixl, _nixl_of(texts, self.decode_urls), wall_s=wall)
            if self.kv_run is not None:
                link = self.target.link
                slow = kvxfer.slow_path(self.kv_run, link)
                meta.kv_xfer = {**self.kv_run.to_dict(), "slow_path": slow,
                                "link": None if link is None else {"kind": link.kind, "bytes_per_s": link.bytes_per_s}}
                if self.kv_run.failed_transfers:
                    flags.append("kv-failed-transfers")
                if slow:
                    flags.append("kv-slow-path")
        meta.energy = serverside.energy_delta(
            self._energy, await asyncio.to_thread(serverside.read_energy, self.target.energy), output_tokens)
        if self.target.log_files():
            await asyncio.to_thread(serverside.copy_logs, self.target.log_files(), directory / "logs")

    def breakdown(self, meta: RunMeta, ttft_mean_ms: float | None) -> None:
        """The TTFT breakdown of a disaggregated run, once its mean TTFT is known (after ``close``)."""
        if not self.decode_urls or ttft_mean_ms is None:
            return
        if self.kv_run is None and not self._proxy_after:
            return
        meta.ttft_breakdown = kvxfer.ttft_breakdown(ttft_mean_ms, self.kv_run, self._proxy,
                                                    self._proxy_after).to_dict()


def _nixl_of(texts: dict[str, str | None], urls: list[str]) -> dict[str, kvxfer.NixlCounters | None]:
    return {u: (kvxfer.nixl_counters(t) if (t := texts.get(u)) is not None else None) for u in urls}


async def run_bench(opts: BenchOptions, target: BenchTarget, *, bus: EventBus | None = None,
                    on_tick: Callable[[BenchTick], None] | None = None) -> Run:
    w = opts.workload
    setup = await prepare_run(opts, target)
    model, info, rate, name, directory = setup.model, setup.info, setup.rate, setup.name, setup.directory
    meta = RunMeta(campaign=safe_name(target.campaign), name=name, topology=target.topology, workload=w.name,
                   request_rate=rate, repeat=target.repeat, endpoint=target.endpoint, model=model,
                   goodput_slo=dict(opts.goodput), layout_id=target.layout.id if target.layout else "",
                   knobs=target.knob_values())
    meta.fingerprint = run_fingerprint(target, info)
    writer = RunWriter(directory, meta, workload={**asdict(w), "request_rate": rate_label(w.request_rate),
                                                  "prompts_file": opts.prompts_file},
                       plan=target.plan if target.plan is not None else (target.layout.plan if target.layout else None))
    bracket = ServerBracket(target)
    if bus is not None:
        bus.publish(started_event(meta.id, "disagg-tui", opts, target, directory))

    async def at_start() -> None:
        """Between warm-up and run: wait for the servers to be idle, then read what they have counted so far, so
        warm-up traffic stays out of both the timing and the counters."""
        await bracket.open(meta, wait_idle=opts.warmup != 0)

    live = LiveWindow(run_id=meta.id, total=w.num_prompts)

    def publish(tick: BenchTick) -> None:
        if bus is not None:
            bus.publish(tick)
        if on_tick is not None:
            on_tick(tick)

    config = worker_config(opts, target.endpoint, model)
    try:
        result = await _drive_worker(config, writer, live, publish, at_start)
    except OSError as exc:  # a journal or parquet write failed (disk full): what reached the disk stays there
        raise _write_failed(meta.id, directory, exc) from None
    final, error, aborted = result.final, result.error, result.aborted
    meta.prompts = result.prompts
    records = writer.records
    summary: dict[str, Any] | None = None
    status = "complete"
    message = ""
    if final is not None and records:
        duration = float(final["duration"]) if final.get("duration") else 0.0
        if duration <= 0:
            duration = max(max(r.end for r in records) - min(r.start for r in records), 1e-9)
        summary = summarize(records, duration, goodput=opts.goodput or None, percentiles=opts.percentiles,
                            metrics=opts.metrics, header=summary_header(opts, target, model))
        meta.client = final.get("client") or {}
    dead = await asyncio.to_thread(dead_processes, target.layout)
    if "proxy" in dead:
        status, message = "failed", "the layout's proxy died during the run: the requests after it could not be sent"
    elif dead:
        status, message = "incomplete", f"{', '.join(dead)} died during the run (see 'disagg-tui status')"
    elif error:
        status, message = "failed", error
    elif final is not None and final.get("stalled"):
        status, message = "failed", str(final["stalled"])
    elif aborted or final is None or final.get("aborted"):
        status, message = "incomplete", "stopped before every request finished"
    elif not records:
        status, message = "failed", "no request finished"
    flags = meta.flags
    if meta.client.get("client_limited"):
        flags.append("client-limited")
    if summary and summary.get("failed"):
        flags.append("failed-requests")
    if status == "incomplete":
        flags.append("incomplete")
    if final is not None and final.get("stalled"):
        flags.append("stalled")
    if dead:
        flags.append("server-died")
    await bracket.close(meta, int(summary["total_output_tokens"]) if summary else 0, shared_prefix_share(opts),
                        directory, duration_s=float(summary["duration"]) if summary and summary.get("duration")
                        else None)
    bracket.breakdown(meta, float(summary["mean_ttft_ms"]) if summary and summary.get("mean_ttft_ms") is not None
                      else None)
    try:
        await asyncio.to_thread(writer.finish, status, summary, message=message)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a few hundred bytes may still fit: say why the run has no summary
            writer.meta.status, writer.meta.message = "failed", f"results could not be written: {exc}"
            writer.save_meta()
        raise _write_failed(meta.id, directory, exc) from None
    run = await asyncio.to_thread(load_run, directory)
    done = BenchDone(run_id=meta.id, status=status, run_dir=str(directory), summary=summary or {},
                     flags=tuple(flags), message=message, meta=run.meta.to_dict())
    if bus is not None:
        bus.publish(done)
    if result.cancelled:
        raise asyncio.CancelledError
    return run


def dead_processes(layout: LayoutRecord | None) -> list[str]:
    """The layout's processes (servers, the proxy) that are no longer running."""
    if layout is None:
        return []
    return [p.name for p in layout.processes if p.pid > 0 and not process_alive(p.pid, p.create_time)]


def _write_failed(run_id: str, directory: Path, exc: OSError) -> RunFailed:
    """A run whose results could not be written: no summary is left that could pass for a good one (the summary is
    written whole or not at all, and the run stays marked unfinished), the finished requests' journal is kept."""
    return RunFailed(f"cannot write the results of run {run_id} to {directory}: {exc.strerror or exc}",
                     hint="free some space there; the requests that finished are kept in its journal, and "
                          "'disagg-tui results' lists the run as incomplete")


@dataclass
class _WorkerResult:
    final: dict[str, Any] | None = None
    prompts: dict[str, Any] = field(default_factory=dict)  # how the worker made and sends the prompts
    error: str = ""
    aborted: bool = False
    cancelled: bool = False
    stderr: list[str] = field(default_factory=list)


async def _drive_worker(config: dict[str, Any], writer: RunWriter, live: LiveWindow,
                        publish: Callable[[BenchTick], None],
                        at_start: Callable[[], Awaitable[None]] | None = None) -> _WorkerResult:
    res = _WorkerResult()
    config = {**config, "hold": at_start is not None}
    proc = await asyncio.create_subprocess_exec(
        *paths.python_module_argv("tui.core.bench.worker"), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=paths.child_env(),
        start_new_session=True, limit=_LINE_LIMIT)
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdin.write(json.dumps(config).encode() + b"\n")
    await proc.stdin.drain()

    async def read_stderr() -> None:
        assert proc.stderr is not None
        async for line in proc.stderr:
            res.stderr.append(line.decode("utf-8", "replace").rstrip())
            del res.stderr[:-20]

    err_task = asyncio.create_task(read_stderr())

    async def pump() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            if raw.startswith(b'{"t":"r",'):
                writer.add_wire(raw)  # journaled now, decoded when the run ends
                continue
            msg = json.loads(raw)
            t = msg.get("t")
            if t == "tick":
                publish(live.update(msg))
            elif t == "hold":
                if at_start is not None:
                    await at_start()
                assert proc.stdin is not None
                proc.stdin.write(b"go\n")
                await proc.stdin.drain()
            elif t == "ready":
                res.prompts = dict(msg.get("prompts") or {})
            elif t == "phase" and msg.get("phase") == "warmup":
                live.warmup_total = int(msg.get("n") or 0)
            elif t == "done":
                res.final = msg
            elif t == "error":
                res.error = str(msg.get("message"))

    pump_task = asyncio.create_task(pump())
    try:
        await asyncio.shield(pump_task)
    except asyncio.CancelledError:
        res.cancelled = True
        res.aborted = True
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(b"stop\n")
            await proc.stdin.drain()
        try:
            await asyncio.wait_for(pump_task, _STOP_GRACE_S)
        except (TimeoutError, asyncio.CancelledError):
            pump_task.cancel()
    finally:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        err_task.cancel()
    if res.final is None and not res.error and not res.aborted:
        tail = "; ".join(res.stderr[-3:])
        res.error = f"the load generator exited with code {proc.returncode}" + (f": {tail}" if tail else "")
    return res
