"""The head's side of data parallel across hosts: the handshake its start waits on, and its remote ranks.

While its own engines start, the head listens on ``--data-parallel-address:--data-parallel-rpc-port`` and answers
each ``--headless`` host's hello (:class:`HandshakeServer`, served from the start-up's :class:`Pacer`, never a
thread); it becomes ready only once every remote rank has reported its start finished. Then each remote rank is a
:class:`RemoteEngine` beside the local :class:`~tui.sim.runtime.EngineRuntime` s: the load balancer picks among all
of them, a request given to a remote one goes over the link, and its tokens come back as the headless host's own
scheduler produces them (its timing model runs there, on its GPUs). A link that drops fails the head like an engine
core that died (:meth:`tui.sim.serverstate.ServerState.remote_lost`).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tui.sim import faults
from tui.sim.config import VLLM_VERSION
from tui.sim.dplink import LineBuffer, Link, LinkError, apply_snapshot, encode, want_int, want_ints, want_str
from tui.sim.logfmt import Proc
from tui.sim.metrics import EngineGauges, EngineMetrics
from tui.sim.runtime import EngineRuntime, LiveRequest
from tui.sim.scheduler import FINISHED
from tui.sim.startup_ctx import DpPeer, StartFailed

if TYPE_CHECKING:
    from tui.sim.startup_ctx import StartContext

MAX_PEERS = 64  # connections the handshake holds at once
POLL_LOG_S = 10.0  # vLLM's STARTUP_POLL_PERIOD_MS: how often the wait is logged


@dataclass
class _Pending:
    sock: socket.socket
    address: str
    buf: LineBuffer = field(default_factory=LineBuffer)
    ranks: list[int] = field(default_factory=list)
    ready: dict[int, int] = field(default_factory=dict)


class HandshakeServer:
    """The head's handshake socket during its start (synchronous: served by the start's pacer)."""

    def __init__(self, s: StartContext) -> None:
        self.s = s
        cfg = s.cfg
        self.expected = set(cfg.remote_ranks)
        self.claimed: dict[int, _Pending] = {}
        self.pending: list[_Pending] = []
        self.done: list[DpPeer] = []
        family = socket.AF_INET6 if ":" in cfg.dp_address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((cfg.dp_address, cfg.dp_rpc_port))
            sock.listen(16)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self.sock = sock
        s.pacer.watch[sock.fileno()] = self._accept

    @property
    def ready(self) -> bool:
        return all(r in p.ready for r, p in self.claimed.items()) and set(self.claimed) == self.expected

    def counts(self) -> tuple[int, int]:
        """(remote ranks not connected yet, remote ranks connected and still starting)."""
        return len(self.expected - set(self.claimed)), sum(1 for r, p in self.claimed.items() if r not in p.ready)

    # --- the wait -------------------------------------------------------------------------------------------
    def wait(self, stop: Callable[[], bool]) -> list[DpPeer]:
        """Wait (logging as vLLM's ``wait_for_engine_startup`` does) until every remote rank is ready."""
        s = self.s
        parent = Proc(None, os.getpid())
        while not self.ready and not stop():
            unconnected, starting = self.counts()
            if unconnected:
                s.info(parent, "utils.py:1177", f"Waiting for 0 local, {unconnected} remote core engine proc(s) to "
                                               "connect.")
            if starting:
                s.info(parent, "utils.py:1183", f"Waiting for 0 local, {starting} remote core engine proc(s) to "
                                               "start.")
            s.pacer.wait_wall(POLL_LOG_S, until=lambda: self.ready or stop())
        return self.done

    def close(self) -> None:
        self.s.pacer.watch.pop(self.sock.fileno(), None)
        self.sock.close()
        for p in self.pending:
            self._drop(p)

    # --- sockets --------------------------------------------------------------------------------------------
    def _accept(self) -> None:
        try:
            conn, addr = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        if len(self.pending) >= MAX_PEERS:
            conn.close()
            return
        conn.setblocking(False)
        peer = _Pending(conn, f"{addr[0]}:{addr[1]}")
        self.pending.append(peer)
        self.s.pacer.watch[conn.fileno()] = lambda: self._readable(peer)

    def _readable(self, peer: _Pending) -> None:
        try:
            data = peer.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._lost(peer, "connection closed by the remote host")
            return
        try:
            for msg in peer.buf.feed(data):
                self._handle(peer, msg)
                if peer not in self.pending:
                    return
        except LinkError as exc:
            self._reject(peer, str(exc))

    def _handle(self, peer: _Pending, msg: dict[str, Any]) -> None:
        cfg, s = self.s.cfg, self.s
        parent = Proc(None, os.getpid())
        if msg["t"] == "hello" and not peer.ranks:
            ranks = want_ints(msg, "ranks", cfg.dp, 0, 1 << 20)
            dp = want_int(msg, "dp_size", 1, 1 << 20)
            for r in ranks:
                if r not in self.expected or r in self.claimed or ranks.count(r) > 1:
                    s.log.error(parent, "utils.py:1129", f"Message from engine with unexpected data parallel rank: "
                                                         f"{r}")
                    raise LinkError(f"Message from engine with unexpected data parallel rank: {r}")
            theirs = (dp, want_str(msg, "model", 4096), want_int(msg, "tp", 1, 1 << 16),
                      want_int(msg, "max_model_len", 1, 1 << 40), want_str(msg, "version", 64))
            ours = (cfg.dp, cfg.model, cfg.tp, cfg.max_model_len, VLLM_VERSION)
            if theirs != ours or not ranks:
                r = ranks[0] if ranks else -1
                raise LinkError(f"Configuration mismatch detected for engine {r}. All DP workers must have identical "
                                f"configurations for parameters that affect collective communication")
            peer.ranks = ranks
            for r in ranks:
                self.claimed[r] = peer
                s.info(parent, "utils.py:1160", f"HELLO from remote core engine process {r}.")
            self._send(peer, {"t": "init", "dp_size": cfg.dp, "address": cfg.handshake_uri})
        elif msg["t"] == "ready" and peer.ranks:
            r = want_int(msg, "rank", 0, 1 << 20)
            if r not in peer.ranks or r in peer.ready:
                raise LinkError(f"Unexpected READY message for remote engine {r}")
            peer.ready[r] = want_int(msg, "kv_tokens", 16, 1 << 40)
            s.info(parent, "utils.py:1160", f"READY from remote core engine process {r}.")
            if len(peer.ready) == len(peer.ranks):  # its link is the server's from now on: stop reading here
                s.pacer.watch.pop(peer.sock.fileno(), None)
                self.pending.remove(peer)
                self.done.append(DpPeer(sock=peer.sock, address=peer.address, ranks=list(peer.ranks),
                                        kv_tokens=dict(peer.ready), leftover=peer.buf.take_rest()))
        else:
            raise LinkError(f"unexpected {msg['t']!r} message during the handshake")

    def _send(self, peer: _Pending, obj: dict[str, Any]) -> None:
        try:
            peer.sock.send(encode(obj))  # a short line into an empty socket buffer
        except OSError as exc:
            raise LinkError(f"send failed: {exc}") from None

    def _reject(self, peer: _Pending, error: str) -> None:
        with contextlib.suppress(LinkError):
            self._send(peer, {"t": "reject", "error": error[:1000]})
        if peer.ranks:
            self._lost(peer, error)
        else:
            self._drop(peer)

    def _drop(self, peer: _Pending) -> None:
        self.s.pacer.watch.pop(peer.sock.fileno(), None)
        with contextlib.suppress(ValueError):
            self.pending.remove(peer)
        for r in peer.ranks:
            self.claimed.pop(r, None)
        peer.sock.close()

    def _lost(self, peer: _Pending, why: str) -> None:
        """A remote engine that had joined went away before the start finished: the start fails, as it does when
        an engine core fails to start."""
        ranks = list(peer.ranks)
        self._drop(peer)
        if not ranks:
            return
        s = self.s
        s.log.error(Proc(None, os.getpid()), "utils.py:1265", f"Remote core engine proc(s) {ranks} at "
                                                              f"{peer.address} lost during start-up: {why}")
        failed = "{" + ", ".join(f"'EngineCore_DP{r}': 1" for r in ranks) + "}"
        s.log.raw(s.api, faults.api_init_failed(failed))
        raise StartFailed(1)


class RemoteEngine:
    """A DP rank served by a ``--headless`` host, as the head's load balancer and routes see it."""

    def __init__(self, index: int, send: Callable[[dict[str, Any]], None], metrics: EngineMetrics, *,
                 clock: float, kv_tokens: int, max_model_len: int) -> None:
        self.index = index
        self.remote = True
        self._send = send
        self.metrics = metrics
        self.clock = clock
        self.kv_tokens = kv_tokens
        self.max_model_len = max_model_len
        self.live: dict[str, LiveRequest] = {}
        self._gauges = EngineGauges()
        self.busy_v = self.lag_v = self.lag_max_v = 0.0
        self.stopped = False
        self.dead_reason: str | None = None

    @property
    def load(self) -> int:
        return len(self.live)

    def gauges(self) -> EngineGauges:
        return self._gauges

    def submit(self, live: LiveRequest) -> None:
        live.engine = self.index
        sim = live.sim
        if self.stopped:
            live.error, live.done = self.dead_reason or "engine stopped", True
            live.event.set()
            return
        self.live[sim.rid] = live
        self._send({"t": "add", "r": self.index, "id": sim.rid, "p": sim.prompt_len, "m": sim.max_tokens,
                    "n": live.params_n, "h": live.hashes[: self.max_model_len // 16 + 1]})

    def abort(self, rid: str) -> None:
        live = self.live.pop(rid, None)
        if live is None:
            return
        live.done = True
        live.event.set()
        if not self.stopped:
            self._send({"t": "abort", "r": self.index, "id": rid})

    def fail_all(self, message: str) -> None:
        self.dead_reason = message
        for live in list(self.live.values()):
            live.error, live.done = message, True
            live.event.set()
        self.live.clear()
        self.stopped = True

    def stop(self) -> None:
        self.stopped = True

    # --- from the link ----------------------------------------------------------------------------------------
    def progress(self, entries: Any) -> None:
        if not isinstance(entries, list) or len(entries) > 100_000:
            raise LinkError("progress: a list expected")
        for entry in entries:
            if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                    and isinstance(entry[1], int) and not isinstance(entry[1], bool) and isinstance(entry[2], bool)):
                raise LinkError("progress: [id, generated, finished] entries expected")
            rid, generated, finished = entry
            live = self.live.get(rid)
            if live is None:
                continue  # aborted here meanwhile
            sim = live.sim
            if not sim.generated <= generated <= sim.max_tokens:
                raise LinkError(f"progress of {rid}: {generated} tokens of at most {sim.max_tokens}")
            sim.generated = generated
            if finished:
                sim.state, sim.finish_reason = FINISHED, "length" if generated >= sim.max_tokens else "stop"
                live.done = True
                del self.live[rid]
            live.event.set()

    def apply(self, data: Any) -> None:
        self._gauges, (self.busy_v, self.lag_v, self.lag_max_v) = apply_snapshot(self.metrics, data)


AnyEngine = EngineRuntime | RemoteEngine


class HeadLink:
    """One headless host's link, once the head serves: its remote engines' requests out, their progress in."""

    def __init__(self, peer: DpPeer, engines: dict[int, RemoteEngine], on_lost: Callable[[list[int], str], None]
                 ) -> None:
        self.peer = peer
        self.engines = engines
        self.on_lost = on_lost
        self.link: Link | None = None

    def send(self, obj: dict[str, Any]) -> None:
        if self.link is None:
            return
        try:
            self.link.send(obj)
        except LinkError as exc:
            self.on_lost(list(self.engines), str(exc))

    async def run(self) -> None:
        why = "connection closed by the remote host"
        try:
            self.link = await Link.open(self.peer.sock, self.peer.leftover, self.peer.address)
            while True:
                msg = await self.link.recv()
                if msg is None:
                    break
                rank = want_int(msg, "r", 0, 1 << 20)
                engine = self.engines.get(rank)
                if engine is None:
                    raise LinkError(f"message for rank {rank}, which that host does not run")
                if msg["t"] == "p":
                    engine.progress(msg.get("u"))
                elif msg["t"] == "x":
                    engine.apply(msg.get("m"))
                else:
                    raise LinkError(f"unexpected {msg['t']!r} message")
        except (LinkError, OSError) as exc:
            why = str(exc)
        finally:
            if self.link is not None:
                self.link.close()
        self.on_lost(list(self.engines), why)
