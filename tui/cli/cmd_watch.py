"""``disagg-tui watch``: GPU samples and server health as they come, as readable lines or JSON Lines."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from dataclasses import replace
from typing import Any

from tui.cli.context import CliContext, add_global_options
from tui.cli.recording import SessionRecording, add_record_options
from tui.core.errors import EXIT_OK, InputError
from tui.core.events import EventBus
from tui.core.launch.state import StateStore
from tui.core.telemetry.layout import ActiveLayout, parse_endpoint
from tui.core.telemetry.live import LiveTelemetry
from tui.core.telemetry.poller import DEFAULT_HEALTH_HZ, DEFAULT_METRICS_HZ, PollerConfig
from tui.core.telemetry.sampler import DEFAULT_RATE_HZ, MAX_RATE_HZ
from tui.core.telemetry.view import json_line, tick_lines


def register(sub: Any) -> None:
    p = sub.add_parser(
        "watch", help="stream GPU samples and server health (lines or JSON Lines)",
        description="Every GPU through NVML (utilisation, memory, power, temperature, clocks, throttling, the "
                    "processes on it and the server that owns each) and every server and proxy of the active "
                    "layout (/health, derived /metrics figures), one tick per GPU sample. The simulated host is "
                    "labelled SIMULATED.")
    p.add_argument("--json", action="store_true", help="one JSON object per tick (JSON Lines)")
    p.add_argument("--seconds", type=float, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    p.add_argument("--rate", type=float, default=DEFAULT_RATE_HZ, metavar="HZ",
                   help=f"GPU samples (ticks) per second, up to {MAX_RATE_HZ:g} (default {DEFAULT_RATE_HZ:g})")
    p.add_argument("--health-rate", type=float, default=DEFAULT_HEALTH_HZ, metavar="HZ",
                   help=f"/health polls per second per server (default {DEFAULT_HEALTH_HZ:g})")
    p.add_argument("--metrics-rate", type=float, default=DEFAULT_METRICS_HZ, metavar="HZ",
                   help=f"/metrics scrapes per second per server (default {DEFAULT_METRICS_HZ:g})")
    p.add_argument("--window", type=float, default=10.0, metavar="S",
                   help="latency quantiles over the last S seconds (default 10)")
    p.add_argument("--endpoint", action="append", default=[], metavar="[NAME=]URL[#ROLE]",
                   help="watch this server instead of the active layout's (repeatable), e.g. "
                        "decode=http://127.0.0.1:8200#decode")
    add_record_options(p, default_on=False)
    add_global_options(p)
    p.set_defaults(handler=run)


def _validate(args: argparse.Namespace, api_key: str | None = None) -> PollerConfig:
    if not 0 < args.rate <= MAX_RATE_HZ:
        raise InputError(f"must be within (0, {MAX_RATE_HZ:g}] Hz, got {args.rate:g}", field="--rate")
    if args.seconds is not None and args.seconds <= 0:
        raise InputError(f"must be > 0, got {args.seconds:g}", field="--seconds")
    if args.window <= 0:
        raise InputError(f"must be > 0, got {args.window:g}", field="--window")
    try:
        return PollerConfig(health_hz=args.health_rate, metrics_hz=args.metrics_rate, window_s=args.window,
                            rate_window_s=min(5.0, args.window), api_key=api_key)
    except ValueError as exc:
        raise InputError(str(exc), field="--health-rate/--metrics-rate") from None


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    key = ctx.api_key
    config = _validate(args, key)
    # servers named here get the key (--api-key, or $VLLM_API_KEY) when one is given; a layout's, when started so
    endpoints = [replace(parse_endpoint(e, i), api_key=key is not None) for i, e in enumerate(args.endpoint)] or None
    host = ctx.host
    store = StateStore()
    if endpoints is None and ActiveLayout(store).get() is None:
        ctx.warn("no active layout on this host: watching the GPUs only (start one with 'disagg-tui up', or "
                 "name servers with --endpoint)")
    bus = EventBus()
    with SessionRecording(ctx, args, "watch", bus, telemetry=False):
        try:
            asyncio.run(_watch(args, ctx, host, store, config, endpoints, bus))
        except KeyboardInterrupt:
            pass
    return EXIT_OK


async def _watch(args: argparse.Namespace, ctx: CliContext, host: Any, store: StateStore, config: PollerConfig,
                 endpoints: Any, bus: EventBus | None = None) -> None:
    async with LiveTelemetry(host, store, rate_hz=args.rate, poller_config=config, endpoints=endpoints,
                             bus=bus) as live:
        for err in live.errors:
            ctx.warn(err)
        async for tick in live.ticks(args.seconds):
            text = json_line(tick) + "\n" if args.json else "\n".join(tick_lines(tick)) + "\n\n"
            try:
                ctx.out.write(text)
                ctx.out.flush()
            except BrokenPipeError:  # `watch | head`: the reader left; stop quietly
                with contextlib.suppress(OSError, ValueError):
                    os.dup2(os.open(os.devnull, os.O_WRONLY), ctx.out.fileno())
                return
