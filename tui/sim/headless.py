"""A ``vllm serve --headless`` host of data parallel across hosts: engines only, no API server.

It starts its ranks (``--data-parallel-start-rank`` .. + ``--data-parallel-size-local`` - 1) as the head starts its
own: engine processes holding this host's simulated GPU memory, the same start-up phases and lines, the DP ranks
global. Each engine's start waits for the head's handshake first (vLLM's engines connect to the head's
``--data-parallel-address:--data-parallel-rpc-port`` and retry until it answers, giving up after 5 minutes); once
they have started it reports them ready and serves the head's requests with this host's own schedulers, sending
their tokens back (:mod:`tui.sim.dplink`). When the head's link drops it logs the engine's fatal error and exits 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from typing import TYPE_CHECKING, Any

from tui.sim import faults
from tui.sim.config import VLLM_VERSION
from tui.sim.dplink import (
    HANDSHAKE_TIMEOUT_S,
    MAX_BATCH,
    LineBuffer,
    Link,
    LinkError,
    encode,
    snapshot,
    want_int,
    want_ints,
    want_str,
)
from tui.sim.logfmt import Proc, VllmLog
from tui.sim.perfmodel import BLOCK_SIZE
from tui.sim.runtime import EngineRuntime, LiveRequest
from tui.sim.scheduler import FINISHED, SimRequest, StepResult
from tui.sim.startup_ctx import CONTEXT_GIB, DpPeer, StartContext, Started, StartFailed
from tui.sim.startup_engine import EnginePhases
from tui.sim.timeline import architecture

if TYPE_CHECKING:
    from tui.sim.serverstate import ServerState

RETRY_S = 0.5  # between connection attempts to a head that is not listening yet
SNAPSHOT_S = 0.25  # how often an engine's metrics go to the head (when they changed)


class HeadlessStartup(StartContext):
    """The start of a headless host, up to its engines' READY to the head."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.api = Proc(None, os.getpid())  # the parent of headless engines logs without a prefix
        self.sock: socket.socket | None = None
        self.buf = LineBuffer()
        self.answer: dict[str, Any] | None = None

    def run(self) -> Started:
        cfg, t = self.cfg, self.times
        self.pacer.at(t.imports)
        self.pacer.after(t.config)
        arch = architecture(cfg.profile)
        self.info(self.api, "model.py:598", f"Resolved architecture: {arch}")
        self.info(self.api, "model.py:1725", f"Using max model len {cfg.max_model_len}")
        self.info(self.api, "scheduler.py:252",
                  f"Chunked prefill is enabled with max_num_batched_tokens={cfg.max_num_batched_tokens}.")
        self.info(self.api, "serve.py:247", f"Launching {cfg.dp_local} data parallel engine(s) in headless mode, "
                                            f"with head node address {cfg.handshake_uri}.")
        self.spawn_engines()
        self.set_memory(lambda _pid: CONTEXT_GIB)
        self.pacer.after(t.engine_spawn)
        sock = self._handshake()
        phases = EnginePhases(self, arch)
        phases.run()
        for e in self.engines:
            self._send({"t": "ready", "rank": e.rank, "kv_tokens": self.memory.kv_tokens})
        self.pacer.watch.pop(sock.fileno(), None)
        self.sock = None  # the serving side owns it now
        peer = DpPeer(sock=sock, address=cfg.handshake_uri, ranks=list(cfg.local_ranks),
                      leftover=self.buf.take_rest())
        return Started(engines=self.engines, api_children=[], memory=self.memory, kv_tokens=self.memory.kv_tokens,
                       http_sock=None, side_socks=phases.side_socks, api=self.api, hog=self.hog,
                       engine_ids=self.engine_ids, peers=[peer])

    # --- the handshake ----------------------------------------------------------------------------------------
    def _handshake(self) -> socket.socket:
        """Connect to the head (retrying while it is not listening), say hello, wait for its answer."""
        cfg = self.cfg
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
        waited = False
        while True:
            try:
                sock = socket.create_connection((cfg.dp_address, cfg.dp_rpc_port), timeout=2.0)
                break
            except OSError:
                if time.monotonic() > deadline:
                    self._no_front_end()
                if not waited:
                    waited = True
                    self.info(self.api, "core.py:1101", f"Waiting for the front-end process at {cfg.handshake_uri} "
                                                        "to accept the handshake; retrying.")
                self.pacer.wait_wall(RETRY_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self._send({"t": "hello", "ranks": list(cfg.local_ranks), "dp_size": cfg.dp, "model": cfg.model,
                    "tp": cfg.tp, "max_model_len": cfg.max_model_len, "version": VLLM_VERSION})
        sock.setblocking(False)
        self.pacer.watch[sock.fileno()] = self._readable
        while self.answer is None:
            if time.monotonic() > deadline:
                self._no_front_end()
            self.pacer.wait_wall(1.0, until=lambda: self.answer is not None)
        if self.answer["t"] != "init":
            error = want_str(self.answer, "error", 1000) if "error" in self.answer else "handshake refused"
            for e in self.engines:
                self.log.error(self.engine_proc(e), "core.py:1231", "EngineCore failed to start.")
            self.log.raw(self.api, f"RuntimeError: {error}")
            raise StartFailed(1)
        self.info(self.api, "core.py:1130", f"Connected to the front-end process at {cfg.handshake_uri} "
                                            f"(data parallel size {cfg.dp}, ranks {cfg.dp_start_rank}.."
                                            f"{cfg.dp_start_rank + cfg.dp_local - 1}).")
        return sock

    def _no_front_end(self) -> None:
        for e in self.engines:
            self.log.error(self.engine_proc(e), "core.py:1231", faults.no_front_end())
        raise StartFailed(1)

    def _send(self, obj: dict[str, Any]) -> None:
        assert self.sock is not None
        try:
            self.sock.setblocking(True)
            self.sock.sendall(encode(obj))
            self.sock.setblocking(False)
        except OSError:
            self._head_lost()

    def _readable(self) -> None:
        assert self.sock is not None
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._head_lost()
        try:
            for msg in self.buf.feed(data):
                if self.answer is None and msg["t"] in ("init", "reject"):
                    self.answer = msg
                else:
                    raise LinkError(f"unexpected {msg['t']!r} message during the handshake")
        except LinkError as exc:
            self.log.raw(self.api, f"RuntimeError: DP handshake with {self.cfg.handshake_uri} failed: {exc}")
            raise StartFailed(1) from None

    def _head_lost(self) -> None:
        for e in self.engines:
            self.log.error(self.engine_proc(e), "core.py:1233", faults.head_lost(self.cfg.handshake_uri, e.proc.name))
        self.info(self.api, "serve.py:283", "Shutting down.")
        raise StartFailed(1)

    def cleanup(self) -> None:
        if self.sock is not None:
            self.sock.close()
        for c in self.all_children():
            c.stop()
            self.claims.drop(c.pid)
            c.close()


class EngineLink:
    """A headless host's serving side: the head's requests in, each step's tokens and the metrics out."""

    def __init__(self, state: ServerState, link: Link) -> None:
        self.state = state
        self.link = link
        self.by_rank = {rt.index: rt for rt in state.engines}
        self.pending: dict[int, dict[str, tuple[int, bool]]] = {r: {} for r in self.by_rank}
        self.changed: set[int] = set(self.by_rank)
        self.wake = asyncio.Event()
        for rt in state.engines:
            rt.on_step = self._stepped(rt)

    def _stepped(self, rt: EngineRuntime) -> Any:
        pend = self.pending[rt.index]

        def on_step(res: StepResult) -> None:
            for req in res.emitted:
                pend[req.rid] = (req.generated, req.state == FINISHED)
            self.changed.add(rt.index)
            self.wake.set()
        return on_step

    async def receive(self) -> str:
        """Serve the head's messages until the link ends; why it ended."""
        cfg = self.state.cfg
        while True:
            try:
                msg = await self.link.recv()
            except LinkError as exc:
                return str(exc)
            if msg is None:
                return "connection closed by the head"
            try:
                rt = self.by_rank.get(want_int(msg, "r", 0, 1 << 20))
                if rt is None:
                    raise LinkError(f"a request for rank {msg['r']}, which this host does not run")
                rid = want_str(msg, "id")
                if msg["t"] == "add":
                    if rid in rt.live:
                        raise LinkError(f"request {rid} submitted twice")
                    prompt = want_int(msg, "p", 1, cfg.max_model_len)
                    sim = SimRequest(rid=rid, prompt_len=prompt, max_tokens=want_int(msg, "m", 1, cfg.max_model_len),
                                     arrival=0.0)
                    hashes = want_ints(msg, "h", cfg.max_model_len // BLOCK_SIZE + 1, -(1 << 63), (1 << 64) - 1)
                    rt.submit(LiveRequest(sim=sim, seed=0, params_n=want_int(msg, "n", 1, 1 << 16), hashes=hashes))
                elif msg["t"] == "abort":
                    rt.abort(rid)
                    self.pending[rt.index].pop(rid, None)
                else:
                    raise LinkError(f"unexpected {msg['t']!r} message")
                self.changed.add(rt.index)
                self.wake.set()
            except LinkError as exc:
                return f"protocol error from the head: {exc}"

    async def send(self) -> str:
        """Send progress as it comes, metrics at most every SNAPSHOT_S; why it stopped."""
        last = 0.0
        while True:
            due = max(0.0, last + SNAPSHOT_S - time.monotonic()) if self.changed else SNAPSHOT_S
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), due)
            self.wake.clear()
            try:
                for rank, pend in self.pending.items():
                    while pend:
                        batch = []
                        for rid in list(pend)[:MAX_BATCH]:
                            generated, finished = pend.pop(rid)
                            batch.append([rid, generated, finished])
                        self.link.send({"t": "p", "r": rank, "u": batch})
                now = time.monotonic()
                if self.changed and now - last >= SNAPSHOT_S:
                    last = now
                    for rank in sorted(self.changed):
                        rt = self.by_rank[rank]
                        self.link.send({"t": "x", "r": rank, "m": snapshot(rt.metrics, rt.gauges(), rt.busy_v,
                                                                             rt.lag_v, rt.lag_max_v)})
                    self.changed.clear()
            except LinkError as exc:
                return str(exc)


async def serve(state: ServerState, log: VllmLog) -> int:
    """Serve the head until its link drops (exit 1), an engine dies (exit 1) or a signal stops us (exit 0)."""
    cfg = state.cfg
    peer = state.started.peers[0]
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await state.start()
    link = await Link.open(peer.sock, peer.leftover, peer.address)
    engine_link = EngineLink(state, link)
    tasks = {asyncio.create_task(engine_link.receive()): "link", asyncio.create_task(engine_link.send()): "link",
             asyncio.create_task(state.exit_requested.wait()): "engine", asyncio.create_task(stop.wait()): "signal"}
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    first = next(iter(done))
    why, code = tasks[first], 0
    if why == "link" and not state.dead:
        reason = first.result()
        for e in state.started.engines:
            log.error(Proc(e.proc.name, e.proc.pid), "core.py:1233", faults.head_lost(cfg.handshake_uri, e.proc.name))
        log.error(state.api, "serve.py:275", f"Lost the data parallel head at {cfg.handshake_uri}: {reason}")
        code = 1
    elif why == "engine" or state.dead:
        code = 1
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t
    log.info(state.api, "serve.py:283", "Shutting down.")
    link.close()
    await state.stop()
    return code
