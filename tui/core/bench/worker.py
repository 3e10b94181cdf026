"""The load generator's process: ``python -m tui.core.bench.worker``.

It reads one JSON line on stdin (the configuration: ``settings``, ``dataset``, ``warmup``, ``hold``), builds the
prompts, runs the load generator and writes JSON lines on stdout: ``ready``, ``phase``, ``warmup``, ``tick`` (every
``tick_s``), ``r`` (one per finished request), then ``done`` (or ``error``). With ``hold`` it sends ``hold`` after
the warm-up and starts the run on a ``go`` line, so the parent can read the servers' counters in between (warm-up
traffic stays out of them). A ``stop`` line on stdin — or
stdin closing, which is what happens when the parent dies — ends the run early; requests still in flight are
abandoned. Running apart from the console means drawing never delays a read, and the parent can be killed
without the worker outliving it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import sys
import time
from typing import Any

from tui.core.bench.dataset import Prompt, RandomSpec, load_prompts_file, random_prompts, warmup_prompts
from tui.core.bench.loadgen import LoadGenerator, LoadSettings
from tui.core.bench.textprompts import TokenizerUnavailable, as_text, server_vocab

_F_SETPIPE_SZ = 1031  # Linux fcntl: a bigger pipe absorbs bursts of records


def settings_from_dict(d: dict[str, Any]) -> LoadSettings:
    rate = d.get("request_rate", "inf")
    return LoadSettings(
        base_url=str(d["base_url"]), model=str(d["model"]), path=str(d.get("path", "/v1/completions")),
        request_rate=math.inf if rate in ("inf", None) else float(rate),
        burstiness=float(d.get("burstiness", 1.0)), max_concurrency=d.get("max_concurrency"),
        seed=int(d.get("seed", 0)), ignore_eos=bool(d.get("ignore_eos", True)),
        extra_body=dict(d.get("extra_body") or {}), headers=dict(d.get("headers") or {}),
        request_id_prefix=str(d.get("request_id_prefix", "bench-")), tick_s=float(d.get("tick_s", 0.25)),
        timeout_s=float(d.get("timeout_s", 6 * 3600.0)), stall_s=float(d.get("stall_s", 120.0)),
    )


def build_prompts(d: dict[str, Any]) -> list[Prompt]:
    kind = d.get("kind", "random")
    if kind == "file":
        return load_prompts_file(d["path"], int(d.get("output_len", 128)), d.get("num_prompts"))
    spec = RandomSpec(
        input_len=int(d["input_len"]), output_len=int(d["output_len"]), num_prompts=int(d["num_prompts"]),
        range_ratio=float(d.get("range_ratio", 0.0)), prefix_len=int(d.get("prefix_len", 0)),
        seed=int(d.get("seed", 0)), vocab_size=int(d.get("vocab_size", 32000)),
        exclude_ids=tuple(d.get("exclude_ids") or ()),
    )
    return random_prompts(spec)


async def prepare_prompts(d: dict[str, Any], settings: LoadSettings) -> tuple[list[Prompt], dict[str, Any]]:
    """The run's prompts, and how they are sent: random ones as text made with the server's tokenizer (what
    ``vllm bench serve`` sends) unless the dataset asks for token ids or the server cannot tokenize."""
    if d.get("kind", "random") == "file":
        prompts = build_prompts(d)
        return prompts, {"format": "file", "text": sum(1 for p in prompts if p.text is not None)}
    if d.get("format", "text") != "text":
        return build_prompts(d), {"format": "ids"}
    vocab = int(d.get("vocab_size", 32000))
    try:
        known = await server_vocab(settings.base_url, settings.model, vocab, headers=settings.headers)
        prompts = build_prompts({**d, "vocab_size": min(vocab, known)})
        made = await as_text(prompts, base_url=settings.base_url, model=settings.model, vocab=min(vocab, known),
                             seed=int(d.get("seed", 0)), headers=settings.headers)
    except TokenizerUnavailable as exc:
        return build_prompts(d), {"format": "ids", "note": f"the server cannot tokenize ({exc}): prompts sent "
                                                            "as token ids, which vLLM serves slower than text"}
    return made.prompts, {"format": "text", "tokenizer_vocab": known, "exact": made.exact,
                          "rounds": made.rounds}


class _PipeProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


class _Out:
    """JSON lines to stdout through an asyncio pipe transport: writing never blocks the event loop."""

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self.transport = transport

    def __call__(self, msg: dict[str, Any]) -> None:
        if not self.transport.is_closing():
            self.transport.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")


async def _main() -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    with contextlib.suppress(OSError, AttributeError):
        import fcntl

        fcntl.fcntl(sys.stdout.fileno(), _F_SETPIPE_SZ, 1 << 20)
    w_transport, w_protocol = await loop.connect_write_pipe(_PipeProtocol, sys.stdout)
    out = _Out(w_transport)
    line = await reader.readline()
    if not line:
        return 2
    try:
        config = json.loads(line)
        settings = settings_from_dict(config["settings"])
        if config.get("cpu") is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {int(config["cpu"])})
        t = time.perf_counter()
        prompts, prompt_info = await prepare_prompts(config["dataset"], settings)
        warm_n = int(config.get("warmup", -1))
        if warm_n < 0:
            warm_n = min(len(prompts), settings.max_concurrency or len(prompts))
        vocab = int(config["dataset"].get("vocab_size", 32000))
        warm = warmup_prompts(prompts, warm_n, seed=settings.seed, vocab_size=vocab)
        gen = LoadGenerator(settings, prompts, warm, out)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        out({"t": "error", "message": f"{type(exc).__name__}: {exc}"})
        await _drain(w_transport, w_protocol)
        return 2
    out({"t": "ready", "n": len(prompts), "warmup": len(warm), "build_s": time.perf_counter() - t,
         "prompts": prompt_info})

    gen.hold = bool(config.get("hold"))

    async def control() -> None:
        while True:
            cmd = await reader.readline()
            if cmd.strip() == b"go":
                gen.go.set()
                continue
            if not cmd or cmd.strip() == b"stop":
                gen.stop()
                return

    ctl = asyncio.create_task(control())
    try:
        final = await gen.run()
    finally:
        ctl.cancel()
    out(final)
    await _drain(w_transport, w_protocol)
    return 0 if final.get("t") == "done" else 1


async def _drain(transport: asyncio.WriteTransport, protocol: _PipeProtocol) -> None:
    """Close stdout once everything written has reached the pipe (a pipe transport flushes before it closes)."""
    transport.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(protocol.closed, 30)


def main() -> int:
    # the parent owns the run: a Ctrl-C in the terminal reaches it, and it tells us to stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return asyncio.run(_main())


if __name__ == "__main__":
    sys.exit(main())
