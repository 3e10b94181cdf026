"""``disagg-tui bench`` (one workload against what is up, or an endpoint) and ``disagg-tui run`` (a campaign)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shlex
import shutil
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tui.cli import predictions
from tui.cli.argtypes import nonneg_float, nonneg_int, positive_float, positive_int
from tui.cli.common import add_force_option
from tui.cli.context import CliContext, add_global_options
from tui.cli.progress import ProgressLine
from tui.cli.recording import SessionRecording, add_record_options
from tui.core import safeio
from tui.core.bench import report, table
from tui.core.bench.campaign import BenchFn
from tui.core.bench.dataset import run_seed
from tui.core.bench.events import BenchTick
from tui.core.bench.eventsfile import EventsWriter
from tui.core.bench.metrics import parse_goodput
from tui.core.bench.runner import DEFAULT_VOCAB, BenchOptions, BenchTarget, run_bench
from tui.core.bench.store import Run
from tui.core.bench.vllmbench import VLLM_BENCH_HINT, run_vllm_bench
from tui.core.errors import EXIT_FAILED, EXIT_OK, InputError
from tui.core.events import EventBus
from tui.core.launch import ownership
from tui.core.launch.state import LayoutRecord, StateStore
from tui.core.models import Workload, parse_rate

DEFAULT_WORKLOAD = "decode-heavy"


def _ratio(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"must be within [0, 1), got {text}")
    return v


def _rate(text: str) -> float:
    try:
        return parse_rate(text, field="--rate")
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def add_traffic_options(p: argparse.ArgumentParser, *, single: bool) -> None:
    """Options shared by ``bench`` and ``run`` (``single``: one workload and one rate)."""
    if single:
        p.add_argument("--workload", "-w", metavar="NAME|FILE", help=f"workload (default {DEFAULT_WORKLOAD})")
        p.add_argument("--input-len", type=positive_int, metavar="N", help="prompt tokens per request")
        p.add_argument("--output-len", type=positive_int, metavar="N", help="tokens generated per request")
        p.add_argument("--rate", type=_rate, metavar="R|inf", help="requests/s (Poisson), or inf: all at once")
        p.add_argument("--prompts", metavar="FILE.jsonl",
                       help='prompts from a JSONL file ({"prompt": text | [ids], "output_len": N})')
    p.add_argument("--num-prompts", type=positive_int, metavar="N", help="requests per run")
    p.add_argument("--burstiness", type=positive_float, metavar="B",
                   help="gamma burstiness of arrivals (1 = Poisson; <1 burstier)")
    p.add_argument("--max-concurrency", type=positive_int, metavar="C", help="at most C requests in flight")
    p.add_argument("--range-ratio", type=_ratio, metavar="R", help="spread lengths over [L(1-R), L(1+R)]")
    p.add_argument("--prefix-len", type=nonneg_int, metavar="N", help="a shared prefix of N tokens")
    p.add_argument("--seed", type=nonneg_int, metavar="S", help="random seed of prompts and arrivals")
    p.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="SLOs for goodput: ttft:MS tpot:MS e2el:MS")
    p.add_argument("--warmup", type=nonneg_int, metavar="N",
                   help="warm-up burst size, excluded from results (default: the run's concurrency; 0 = none)")
    p.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                   help="run each cell N times; report mean and 95%% confidence interval")
    p.add_argument("--request-timeout", type=positive_float, default=6 * 3600.0, metavar="S",
                   help="fail a request that has not finished after S seconds (default 21600, vllm bench's)")
    p.add_argument("--no-token-timeout", type=nonneg_float, default=120.0, metavar="S",
                   help="stop the run when no token arrives for S seconds while requests are in flight "
                        "(default 120; 0 = never); finished requests are kept")
    p.add_argument("--served-model", metavar="NAME", help="model name in requests (default: from /v1/models)")
    p.add_argument("--prompt-format", choices=("text", "ids"), default="text",
                   help="random prompts as text made with the server's tokenizer, as vllm bench sends them "
                        "(default), or as token ids (vLLM 0.24 serves those measurably slower)")
    p.add_argument("--vocab-size", type=positive_int, metavar="N",
                   help="draw prompt token ids below N (default: the model profile's vocabulary)")
    p.add_argument("--extra-body", metavar="JSON", help="extra JSON fields for every request (e.g. temperature)")
    p.add_argument("--runner", choices=("ours", "vllm"), default="ours",
                   help="our load generator, or the real 'vllm bench serve'")
    p.add_argument("--vllm-bench", metavar="CMD",
                   help="how to run vllm for --runner vllm (default: the --vllm executable, else 'vllm')")
    p.add_argument("--tokenizer", metavar="DIR", help="tokenizer folder for --runner vllm")
    p.add_argument("--campaign", metavar="NAME", help="store runs under runs/NAME/")
    p.add_argument("--json", action="store_true", help="print the result as JSON (vllm bench key names)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line")


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="benchmark what is up (or an endpoint) with one workload",
                       description="Run one workload against the active layout (or --endpoint) with our streaming "
                                   "load generator (or the real vllm bench serve); figures use vllm bench serve's "
                                   "definitions and key names. Results go to runs/<campaign>/.")
    p.add_argument("--endpoint", "-e", metavar="URL", help="http://HOST:PORT (default: the active layout)")
    add_traffic_options(p, single=True)
    add_force_option(p, "benchmark a layout a running campaign or another benchmark holds (a second load skews "
                        "both runs)")
    p.add_argument("--events-to", metavar="FILE.jsonl",
                   help="also write the run's events (start, live ticks, end) to FILE as JSON lines, flushed as they "
                        "happen, for another program to follow (the console follows a benchmark it started)")
    add_record_options(p, default_on=False)
    add_global_options(p)
    p.set_defaults(handler=run)


# --- building the options -----------------------------------------------------------------------------------


def workload_from_args(args: argparse.Namespace, ctx: CliContext, name: str | None) -> Workload:
    lengths = getattr(args, "input_len", None) is not None or getattr(args, "output_len", None) is not None
    base_name = name or DEFAULT_WORKLOAD
    base = ctx.catalog.workload(base_name)
    changes: dict[str, Any] = {
        "input_len": getattr(args, "input_len", None), "output_len": getattr(args, "output_len", None),
        "num_prompts": args.num_prompts, "request_rate": getattr(args, "rate", None),
        "burstiness": args.burstiness, "max_concurrency": args.max_concurrency, "range_ratio": args.range_ratio,
        "prefix_len": args.prefix_len, "seed": args.seed,
    }
    w = base.with_overrides(**changes)
    if lengths and name is None:
        w = w.with_overrides(name=f"random-{w.input_len}x{w.output_len}")
    return w.with_overrides(description=changed_description(base, w))


def changed_description(base: Workload, w: Workload) -> str:
    """The description of a workload as flags left it: the shipped one's when nothing that shapes the traffic
    changed, else what it now is (the shipped description would describe another workload)."""
    shape = ("input_len", "output_len", "prefix_len", "range_ratio", "num_prompts", "request_rate",
             "max_concurrency", "burstiness")
    changed = [f"{k} {getattr(base, k)}→{getattr(w, k)}" for k in shape if getattr(base, k) != getattr(w, k)]
    if not changed:
        return base.description
    rate = "all at once" if w.request_rate == float("inf") else f"{w.request_rate:g} req/s"
    prefix = f" after a shared {w.prefix_len}-token prefix" if w.prefix_len else ""
    return (f"{w.num_prompts} random prompts of {w.input_len} tokens{prefix} → {w.output_len} output tokens, "
            f"{rate} (workload '{base.name}' changed by flags: {', '.join(changed)})")


def options_from_args(args: argparse.Namespace, workload: Workload, vocab: int | None, api_key: str | None = None
                      ) -> BenchOptions:
    extra: dict[str, Any] = {}
    if args.extra_body:
        try:
            extra = json.loads(args.extra_body)
        except ValueError as exc:
            raise InputError(f"not JSON: {exc}", field="--extra-body") from None
        if not isinstance(extra, dict):
            raise InputError("must be a JSON object", field="--extra-body")
    prompts = getattr(args, "prompts", None)
    if prompts:
        safeio.check_regular(Path(prompts).expanduser(), field="--prompts")  # missing, a FIFO, a device, a folder
    return BenchOptions(
        workload=workload, prompts_file=prompts, model=args.served_model,
        vocab_size=args.vocab_size or vocab or DEFAULT_VOCAB,
        warmup=-1 if args.warmup is None else args.warmup, goodput=parse_goodput(args.goodput or []),
        extra_body=extra, prompt_format=args.prompt_format,
        timeout_s=args.request_timeout, stall_timeout_s=args.no_token_timeout,
        headers={"Authorization": f"Bearer {key}"} if (key := api_key) else {},
    )


def layout_model_ref(ctx: CliContext, layout: LayoutRecord) -> str:
    """What resolves a layout's profile again: its id, or, for a model derived from a folder or the HF cache (no
    profile of that id), the model folder the layout serves."""
    pid = layout.profile_id
    if pid in ctx.catalog.models:
        return pid
    return str(layout.plan.get("model") or "") or pid


def profile_vocab(ctx: CliContext, profile_id: str) -> int | None:
    if not profile_id:
        return None
    try:
        return ctx.catalog.model(profile_id).shape.vocab_size
    except InputError:
        return None


def active_target(args: argparse.Namespace, ctx: CliContext) -> tuple[BenchTarget, int | None]:
    """The endpoint to bench: --endpoint, else the layout that is up (with its servers' logs and plan)."""
    if args.endpoint:
        from tui.core.bench.streamclient import parse_endpoint

        ep = parse_endpoint(args.endpoint)
        return BenchTarget(endpoint=ep.url, topology="endpoint"), None
    layout: LayoutRecord | None = StateStore().active()
    if layout is None:
        from tui.core.remote import record

        across = record.active()
        if across is not None:  # a layout across hosts this host started (up --hosts): its endpoint, its hosts
            target = BenchTarget(endpoint=across.endpoint, topology=across.topology, plan=across.plan)
            target.fingerprint_extra = across.fingerprint()
            return target, profile_vocab(ctx, across.model)
        raise InputError("nothing is up to benchmark", field="--endpoint",
                         hint="start a layout with 'disagg-tui up --model M --topology T' or give --endpoint URL")
    if not layout.endpoint:
        raise InputError(f"layout {layout.id} has no endpoint yet (status {layout.status})", field="--endpoint")
    target = BenchTarget(endpoint=layout.endpoint, topology=layout.topology or "layout", layout=layout)
    if not layout.simulated:
        _real_host_extras(ctx, target, layout)
    target.link = _layout_link(ctx, layout)
    return target, profile_vocab(ctx, layout_model_ref(ctx, layout))


def _layout_link(ctx: CliContext, layout: LayoutRecord) -> Any:
    """The GPU-to-GPU bandwidth between a disaggregated layout's prefill and decode GPUs (None otherwise)."""
    from tui.core.bench.kvxfer import link_bandwidth

    pre = sorted({g for p in layout.processes if p.role == "prefill" for g in p.gpus})
    dec = sorted({g for p in layout.processes if p.role == "decode" for g in p.gpus})
    if not pre or not dec:
        return None
    try:
        return link_bandwidth(ctx.host.facts, pre, dec)
    except Exception:  # noqa: BLE001 - without the host's topology the transfer is not judged
        return None


def layout_vllm(layout: LayoutRecord) -> dict[str, Any]:
    """The vLLM the layout runs (its plan's executable, version read from that executable's environment), not
    whatever ``vllm`` is on this shell's PATH."""
    from tui.core.plan.hostfacts import detect_vllm

    exe = str(layout.plan.get("vllm_executable") or "vllm")
    info = detect_vllm(exe)
    return {"vllm": info.version, "vllm_executable": info.resolved or exe, "nixl": info.nixl}


def _real_host_extras(ctx: CliContext, target: BenchTarget, layout: LayoutRecord) -> None:
    """On a real host: the GPUs in the fingerprint and the NVML energy counter as the energy hook."""
    from tui.core.bench.serverside import nvml_energy_reader

    try:
        facts = ctx.host.facts
        target.fingerprint_extra = {
            "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid} for g in facts.gpus
                     if g.index in layout.gpus],
            "driver": facts.driver, "cuda_driver": facts.cuda_driver,
            **layout_vllm(layout),
        }
        target.energy = nvml_energy_reader(ctx.host.nvml(), layout.gpus)
    except Exception as exc:  # noqa: BLE001 - the fingerprint and energy are extras: the run goes on without
        ctx.warn(f"no GPU fingerprint or energy figure: {exc}")


def vllm_bench_command(args: argparse.Namespace) -> list[str]:
    """The vllm command for ``--runner vllm``, checked to exist before anything is started (a campaign would
    otherwise bring every layout up to fail each cell on it)."""
    if args.vllm_bench:
        try:
            command = shlex.split(args.vllm_bench)
        except ValueError as exc:
            raise InputError(f"cannot split {args.vllm_bench!r}: {exc}", field="--vllm-bench") from None
        if not command:
            raise InputError("is empty", field="--vllm-bench")
    else:
        command = [getattr(args, "vllm", None) or "vllm"]
    if shutil.which(command[0]) is None:
        raise InputError(f"{command[0]!r} is not an executable here", field="--vllm-bench" if args.vllm_bench
                         else "--vllm", hint=VLLM_BENCH_HINT)
    return command


def tokenizer_for(args: argparse.Namespace, ctx: CliContext, profile_id: str | None) -> str:
    """vllm bench's tokenizer: ``--tokenizer``, else the model profile's model folder (or HF id)."""
    if args.tokenizer:
        return str(args.tokenizer)
    if profile_id:
        try:
            model = ctx.catalog.model(profile_id).model
        except InputError:
            model = ""
        if model:
            return model
    raise InputError("vllm bench serve needs a tokenizer", field="--tokenizer",
                     hint="give --tokenizer DIR (a local tokenizer folder)")


# --- running ---------------------------------------------------------------------------------------------------


def vllm_bench_fn(args: argparse.Namespace, ctx: CliContext, profile_id: str | None,
                  on_line: Callable[[str], None] | None = None) -> BenchFn:
    """``--runner vllm`` as a run function (``bench`` and ``run``): its command and tokenizer are checked here, once,
    before anything is sent or started."""
    command = vllm_bench_command(args)
    tokenizer = tokenizer_for(args, ctx, profile_id)

    async def bench(opts: BenchOptions, target: BenchTarget, bus: EventBus | None,
                    on_tick: Callable[[BenchTick], None] | None) -> Run:
        return await run_vllm_bench(command, opts, target, tokenizer, bus=bus, on_tick=on_tick, on_line=on_line)
    return bench


def run_async(coro: Any) -> Any:
    """asyncio.run, with SIGTERM treated like Ctrl-C (the run stops and is stored as incomplete)."""
    async def main() -> Any:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
        return await coro

    return asyncio.run(main())


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    if args.prompts and (args.input_len is not None):
        raise InputError("--prompts gives the prompts; drop --input-len", field="--prompts")
    target, vocab = active_target(args, ctx)
    workload = workload_from_args(args, ctx, args.workload)
    opts = options_from_args(args, workload, vocab, ctx.api_key)
    target.campaign = args.campaign or "bench"
    if target.layout is not None:  # a layout a running campaign or benchmark holds: refused unless --force
        held = ownership.check_free(target.layout, "benchmark it", force=args.force)
        for h in held:
            ctx.warn(f"benchmarking all the same (--force): {h.text} holds {target.layout.id}; this run is stored "
                     f"under runs/{target.campaign}/, apart from it")
    progress = ProgressLine(ctx.err, enabled=not args.quiet)
    runs: list[Run] = []
    vllm = vllm_bench_fn(args, ctx, layout_model_ref(ctx, target.layout) if target.layout else None,
                         on_line=None if args.json else lambda s: progress.text(f"vllm: {s}")) \
        if args.runner == "vllm" else None

    bus = EventBus()
    events = None
    if args.events_to:
        try:
            events = EventsWriter(Path(args.events_to).expanduser()).attach(bus)
        except OSError as exc:
            raise InputError(f"cannot write it: {exc.strerror or exc}", file=args.events_to,
                             field="--events-to") from None
    session = SessionRecording(ctx, args, "bench", bus)

    async def go() -> None:
        for i in range(args.repeat):
            target.repeat = i + 1
            target.name = None
            # each repeat sends prompts of its own, so the server's prefix cache cannot serve it from the last one
            seeded = replace(opts, workload=opts.workload.with_overrides(
                seed=run_seed(opts.workload.seed, repeat=i + 1)))
            recorded = bus if session.enabled or events is not None else None
            runs.append(await vllm(seeded, target, recorded, progress.tick) if vllm is not None else
                        await run_bench(seeded, target, bus=recorded, on_tick=progress.tick))
            progress.end()

    # while it runs, the layout's record names this benchmark as a user (another one, a stop or a restart asks first)
    use = ownership.using(StateStore(), target.layout.id, what=f"{workload.name}, runs/{target.campaign}") \
        if target.layout is not None else contextlib.nullcontext()
    with session, use, contextlib.closing(events) if events is not None else contextlib.nullcontext():
        try:
            run_async(session.around(go()))
        except (KeyboardInterrupt, asyncio.CancelledError):
            progress.end()
            ctx.error("interrupted: vllm bench serve keeps no results when stopped; the run is marked incomplete"
                      if args.runner == "vllm" else
                      "interrupted: finished requests are stored; the run is marked incomplete")
            return 130
        with session.results("bench", target.campaign) as recorded_results:
            code = report_runs(args, ctx, runs)
            recorded_results["rows"] = [{"run": r.id, **r.summary} for r in runs if r.summary]
        return code


def report_runs(args: argparse.Namespace, ctx: CliContext, runs: list[Run]) -> int:
    predictions.attach_all(ctx, runs)
    summaries = [r.summary for r in runs if r.summary]
    # the repeats' mean and interval are of the runs that measured something (a failed, stopped or empty one: none)
    good = [r.summary for r in runs if r.summary and not r.unusable]
    if args.json:
        if len(runs) == 1:
            ctx.print_json(summaries[0] if summaries else {})
        else:
            ctx.print_json(report.aggregate(good))
    else:
        note = table.simulated_note(runs)
        if note:
            ctx.print(note)
        for r in runs:
            if r.summary:
                ctx.print(report.format_result(r.summary))
        if len(good) > 1:
            ctx.print(report.format_aggregate(report.aggregate(good))
                      + (f"\n  ({len(runs) - len(good)} run(s) left out: in no figure)" if len(good) < len(runs)
                         else ""))
    code = EXIT_OK
    for r in runs:
        where = f"results: {r.path}"
        if r.meta.status != "complete":
            ctx.error(f"run {r.id} {r.meta.status}: {r.meta.message}")
            code = EXIT_FAILED
        elif r.unusable:  # it ended, but measured nothing: a failure, and in no figure
            ctx.error(f"run {r.id}: {r.unusable}: in no figure")
            print(where, file=ctx.err)
            code = EXIT_FAILED
        else:
            print(where, file=ctx.err)
        line = client_line(r)
        if line:
            print(line, file=ctx.err)
        for kv_line in kv_lines(r):
            print(kv_line, file=ctx.err)
        for flag in r.meta.flags:
            ctx.warn(f"{r.id}: {flag_text(flag, r)}")
        note = prompts_note(r)
        if note:
            ctx.warn(f"{r.id}: {note}")
    return code


def flag_text(flag: str, r: Run) -> str:
    m = r.meta
    if flag == "client-limited":
        return "the load generator may have limited this run: " + "; ".join(m.client.get("reasons", []))
    if flag == "triton-jit":
        return "a server JIT-compiled a Triton kernel during the run (latency spike): " + (m.triton_jit or [""])[0]
    if flag == "kv-recompute":
        return "decode re-did the prefill: KV transfer did not happen for most requests"
    if flag == "prefix-cache-hits":
        share = (m.prefix_cache or {}).get("share", 0.0)
        return (f"{share:.0%} of the prompt tokens came from the servers' prefix cache (prompts sent before): "
                "TTFT is understated; run again with another --seed, or serve with --no-enable-prefix-caching")
    if flag == "sim-overloaded":
        pacing = m.sim_pacing or {}
        share, clock, held = pacing.get("share", 0.0), pacing.get("clock", 1.0), pacing.get("held_clock", 1.0)
        tail = (f"--sim-clock {held:g} would have held on this machine" if clock * (1 - share) >= 1
                else "this machine cannot pace them even in real time")
        return (f"the simulated servers fell {share:.0%} behind clock {clock:g}: the figures measure this machine's "
                f"CPUs, not the simulated GPUs (kept out of the recommendation); {tail}")
    if flag == "sim-diverged":
        off = (m.sim_pacing or {}).get("diverged")
        return (f"the simulated run departed from the simulator's own prediction ({off} measured/predicted): the "
                "proxy, the client or this machine's CPUs shaped it, not the simulated GPUs (kept out of the "
                "recommendation)")
    if flag == "kv-slow-path":
        kv = m.kv_xfer or {}
        link = kv.get("link") or {}
        gbps = kv.get("gb_per_s") or 0.0
        return (f"KV moved at {gbps:.3f} GB/s, far below the {link.get('kind', '?')} link between the prefill and "
                f"decode GPUs (~{(link.get('bytes_per_s') or 0) / 1e9:,.0f} GB/s): no GPU-to-GPU path (UCX over "
                "host memory or TCP); this run says nothing about 1P1D here and is left out of recommendations "
                "(see 'disagg-tui playbook show nixl-slow-transfer')")
    if flag == "kv-failed-transfers":
        return f"{(m.kv_xfer or {}).get('failed_transfers', 0):.0f} NIXL transfer(s) failed"
    if flag == "kv-no-transfer":
        return "no prompt token arrived over the KV connector during the run"
    if flag == "failed-requests":
        return f"{r.summary.get('failed', 0)} request(s) failed"
    if flag == "incomplete":
        return "incomplete run"
    if flag == "server-died":
        return "a process of the layout died during the run: " + r.meta.message
    if flag == "stalled":
        return "the run was stopped: no token arrived for --no-token-timeout seconds"
    if flag == "server-busy-at-start":
        return "the servers still had requests after the warm-up: the run started on a busy server"
    return flag


def kv_lines(r: Run) -> list[str]:
    """How KV travelled in a disaggregated run and where its TTFT went (stderr lines)."""
    from tui.core.bench.kvxfer import KvTransferRun, Part, TtftBreakdown

    out = []
    kv = r.meta.kv_xfer
    if kv:
        run = KvTransferRun(kv["transfers"], kv["bytes"], kv["xfer_time_s"], kv["failed_transfers"],
                            kv["failed_notifications"], tuple(kv["servers"]), wall_s=kv.get("wall_s"))
        link = kv.get("link")
        out.append(run.line() + (f" ({run.gb_per_s or 0.0:.3f} GB/s; link: {link['kind']} "
                                 f"~{link['bytes_per_s'] / 1e9:,.0f} GB/s)" if link else ""))
    b = r.meta.ttft_breakdown
    if b:
        def part(d: dict[str, Any]) -> Part:
            return Part(d.get("mean_ms"), d.get("p50_ms"), d.get("p99_ms"), d.get("share"))

        out.append(TtftBreakdown(b["ttft_mean_ms"], part(b["client_proxy"]), part(b["prefill"]),
                                 part(b["kv_transfer"]), part(b["decode_first_token"])).line())
    return out


def prompts_note(r: Run) -> str:
    """What the operator should know about how the prompts went out (ids instead of text; inexact lengths)."""
    p = r.meta.prompts
    if p.get("note"):
        return str(p["note"])
    n = r.summary.get("num_prompts") or 0
    if p.get("format") == "text" and n and int(p.get("exact", n)) < int(n):
        return (f"{int(n) - int(p['exact'])} of {n} text prompts do not count exactly the intended tokens on the "
                "server's tokenizer (the run uses the server's counts)")
    return ""


def client_line(r: Run) -> str:
    """How the client fared and what the run cost in energy (one line for stderr)."""
    c = r.meta.client
    parts = []
    if c.get("tool") == "vllm bench serve":
        def secs(key: str) -> str:  # None: vllm bench never printed that phase's line
            return "?" if c.get(key) is None else f"{c[key]:.1f} s"

        parts.append(f"client: vllm bench serve (set-up {secs('setup_s')}, warm-up {secs('warmup_s')}: "
                     f"initial test {c.get('initial_test')}"
                     + (f", {c['warmups']} warm-up request(s)" if c.get("warmups") else "") + ")")
    elif c:
        parts.append(f"client CPU {c.get('cpu', 0.0):.0%} of a core, event-loop lag p99 "
                     f"{c.get('loop_lag_p99_ms', 0.0):.1f} ms")
        if c.get("requested_rate"):
            parts.append(f"sent {c.get('achieved_rate') or 0.0:.2f} of {c['requested_rate']:g} req/s requested")
    e = r.meta.energy
    if e and e.get("joules_per_output_token") is not None:
        parts.append(f"energy {e['joules']:,.0f} J, {e['joules_per_output_token']:.3f} J per output token"
                     + (" (simulated)" if r.simulated else ""))
    return "; ".join(parts)
