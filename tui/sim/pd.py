"""Disaggregated prefill/decode between simulated servers: the NIXL side channel and ``kv_transfer_params``.

A prefill instance (any server with a NixlConnector kv-transfer-config that receives ``"do_remote_decode": true``)
computes the prompt, returns one token and, at the top level of its response, the parameters the decode instance
needs (``nixl/pull_scheduler.py:request_finished``); it keeps the request's KV blocks until they are read or its
lease (``kv_lease_duration``, 30 s) runs out. A decode instance that receives ``"do_remote_prefill": true`` with
those parameters connects to the prefill instance's side-channel port (``VLLM_NIXL_SIDE_CHANNEL_PORT`` + DP rank:
really listening, so a clash hangs the second engine as in vLLM), "reads" the blocks (the prefill side frees them
and says how many bytes they hold), and waits the time those bytes take over NVLink before it decodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
from dataclasses import dataclass
from typing import Any

from tui.sim.perfmodel import BLOCK_SIZE

READ_TIMEOUT_S = 5.0


@dataclass
class Held:
    engine: int
    rid: str  # the scheduler's request id
    prompt_len: int
    nbytes: int
    gpus: tuple[int, ...]


def remote_request_id(request_id: str) -> str:
    return f"{request_id}-0-{secrets.token_hex(4)}"


def producer_params(*, engine_id: str, request_id: str, block_ids: list[list[int]], host: str, port: int, tp: int,
                    num_tokens: int) -> dict[str, Any]:
    return {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": block_ids,
            "remote_engine_id": engine_id, "remote_request_id": request_id, "remote_host": host,
            "remote_port": port, "tp_size": tp, "remote_num_tokens": num_tokens}


def block_ids(start: int, count: int, total_blocks: int, hybrid: bool) -> list[list[int]]:
    """One list of block ids per KV-cache group (full attention; plus the linear-attention state group)."""
    total = max(1, total_blocks)
    ids = [(start + i) % total for i in range(count)]
    return [ids, [(start + count) % total]] if hybrid else [ids]


def external_tokens(prompt_len: int, remote_num_tokens: int) -> int:
    """Tokens a decode instance loads: whole blocks only, and never the last prompt token (it computes that one to
    sample from)."""
    n = min(remote_num_tokens, prompt_len - 1)
    return max(0, n // BLOCK_SIZE * BLOCK_SIZE)


class SideChannel:
    """The prefill side's listener: answers reads of held KV blocks."""

    def __init__(self, release: Any) -> None:
        self.release = release  # callable(remote_request_id) -> Held | None
        self.servers: list[asyncio.AbstractServer] = []

    async def start(self, socks: list[socket.socket]) -> None:
        for sock in socks:
            sock.listen(64)
            sock.setblocking(False)
            self.servers.append(await asyncio.start_server(self._serve, sock=sock))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
            req = json.loads(line or b"{}")
            held = self.release(str(req.get("remote_request_id", ""))) if req.get("op") == "read" else None
            if held is None:
                reply: dict[str, Any] = {"ok": False, "error": "unknown or expired request"}
            else:
                reply = {"ok": True, "bytes": held.nbytes, "gpus": list(held.gpus), "num_tokens": held.prompt_len}
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except (OSError, ValueError, TimeoutError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def close(self) -> None:
        for s in self.servers:
            s.close()
        for s in self.servers:
            with contextlib.suppress(OSError):
                await s.wait_closed()


async def read_remote(host: str, port: int, request_id: str) -> dict[str, Any]:
    """The decode side's pull: returns the prefill side's reply, or raises OSError."""
    target = "127.0.0.1" if host == "localhost" else host
    reader, writer = await asyncio.wait_for(asyncio.open_connection(target, port), READ_TIMEOUT_S)
    try:
        writer.write(json.dumps({"op": "read", "remote_request_id": request_id}).encode() + b"\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    reply = json.loads(line or b"{}")
    if not isinstance(reply, dict):
        raise OSError("bad side-channel reply")
    return reply
