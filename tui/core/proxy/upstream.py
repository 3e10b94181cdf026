"""The disaggregated proxy's pure parts: request rewriting, picking a server, and the cached health view.

Request rewriting follows vLLM 0.24's NixlConnector flow (``shared/VLLM-0.24.md`` §7): the prefill (P) server gets
the client's body with ``stream`` off, one output token and a request for remote decode; the decode (D) server gets
the client's body untouched plus the ``kv_transfer_params`` that P returned, verbatim.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

Role = Literal["prefill", "decode"]
Balance = Literal["round-robin", "least-outstanding"]
BALANCE_CHOICES: tuple[Balance, ...] = ("round-robin", "least-outstanding")

#: what the proxy asks of P: compute the prompt's KV and keep it for a remote decoder to pull
PREFILL_KV_REQUEST: dict[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def prefill_body(body: dict[str, Any]) -> dict[str, Any]:
    """The P request: the client's body, not streamed, one token, no minimum, asking for remote decode."""
    p = dict(body)
    p["stream"] = False
    p["max_tokens"] = 1
    if "max_completion_tokens" in p:
        p["max_completion_tokens"] = 1
    p.pop("stream_options", None)
    p.pop("min_tokens", None)
    p.pop("min_completion_tokens", None)
    p["kv_transfer_params"] = dict(PREFILL_KV_REQUEST)
    return p


def decode_body(body: dict[str, Any], kv_transfer_params: dict[str, Any] | None) -> dict[str, Any]:
    """The D request: the client's body as sent, plus P's ``kv_transfer_params`` verbatim.

    Without parameters from P (a prefill server not configured with a KV connector), D gets the client's body as
    it is and computes the prompt itself, as vLLM's own example proxy does.
    """
    if kv_transfer_params is None:
        return body
    d = dict(body)
    d["kv_transfer_params"] = kv_transfer_params
    return d


def kv_params_of(prefill_response: Any) -> dict[str, Any] | None:
    """The top-level ``kv_transfer_params`` dict of P's JSON answer, or None when there is none."""
    if not isinstance(prefill_response, dict):
        return None
    kv = prefill_response.get("kv_transfer_params")
    return kv if isinstance(kv, dict) else None


@dataclass(eq=False, slots=True)
class Upstream:
    """One vLLM server behind the proxy, with its live request count."""

    role: Role
    url: str  # scheme://host:port, no trailing slash
    outstanding: int = 0
    picked: int = 0  # requests sent to it since start


class UpstreamPool:
    """The servers of one role and how the next one is chosen.

    ``round-robin`` takes them in turn. ``least-outstanding`` takes the one with the fewest requests in flight,
    ties broken in turn, so with one request at a time it is round robin too.
    """

    def __init__(self, role: Role, urls: tuple[str, ...], balance: Balance) -> None:
        if not urls:
            raise ValueError(f"no {role} server")
        if balance not in BALANCE_CHOICES:
            raise ValueError(f"unknown balance policy {balance!r}")
        self.role = role
        self.balance = balance
        self.servers = tuple(Upstream(role=role, url=u) for u in urls)
        self._next = 0

    @property
    def first(self) -> Upstream:
        return self.servers[0]

    def pick(self) -> Upstream:
        servers = self.servers
        n = len(servers)
        start = self._next
        index = start
        if self.balance == "least-outstanding" and n > 1:
            best = servers[start].outstanding
            for step in range(1, n):
                i = (start + step) % n
                if servers[i].outstanding < best:
                    best = servers[i].outstanding
                    index = i
        self._next = (index + 1) % n
        chosen = servers[index]
        chosen.picked += 1
        return chosen


@dataclass(frozen=True, slots=True)
class ServerCheck:
    """One server's answer to ``GET /health``."""

    role: Role
    url: str
    ok: bool
    status: int | None  # HTTP status, None when it did not answer
    error: str | None  # why it is not ok

    def describe(self) -> str:
        return f"{self.role} server {self.url} is down: {self.error}"

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "url": self.url, "ok": self.ok, "status": self.status, "error": self.error}


class HealthCache:
    """Every server's ``/health``, checked concurrently with a short timeout and reused for ``ttl`` seconds.

    Concurrent callers share one check in flight, so a burst of probes costs the servers one request each.
    """

    def __init__(self, client: Callable[[], httpx.AsyncClient], servers: tuple[Upstream, ...], *,
                 timeout: float, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._servers = servers
        self._timeout = timeout
        self._ttl = ttl
        self._clock = clock
        self._last: tuple[ServerCheck, ...] | None = None
        self._checked_at = 0.0
        self._inflight: asyncio.Future[tuple[ServerCheck, ...]] | None = None

    async def get(self) -> tuple[ServerCheck, ...]:
        if self._last is not None and self._clock() - self._checked_at < self._ttl:
            return self._last
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._check_all())
            self._inflight.add_done_callback(self._done)
        # shield: one caller going away must not cancel the check the others wait for
        return await asyncio.shield(self._inflight)

    def _done(self, fut: asyncio.Future[tuple[ServerCheck, ...]]) -> None:
        self._inflight = None
        if not fut.cancelled() and fut.exception() is None:
            self._last = fut.result()
            self._checked_at = self._clock()

    async def _check_all(self) -> tuple[ServerCheck, ...]:
        return tuple(await asyncio.gather(*(self._check(s) for s in self._servers)))

    async def _check(self, server: Upstream) -> ServerCheck:
        try:
            r = await self._client().get(server.url + "/health", timeout=self._timeout)
        except httpx.TimeoutException:
            return ServerCheck(server.role, server.url, False, None, f"no answer within {self._timeout:g} s")
        except httpx.TransportError as exc:
            return ServerCheck(server.role, server.url, False, None, describe_transport_error(exc))
        if r.status_code == 200:
            return ServerCheck(server.role, server.url, True, 200, None)
        return ServerCheck(server.role, server.url, False, r.status_code, f"/health answered {r.status_code}")


def describe_transport_error(exc: httpx.TransportError) -> str:
    """A short reason for a failed upstream request: 'connection refused', 'timed out', ..."""
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    text = str(exc)
    if isinstance(exc, httpx.ConnectError):
        if "refused" in text.lower() or "all connection attempts failed" in text.lower():
            return "connection refused"
        return f"cannot connect ({text})" if text else "cannot connect"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return f"connection broken ({text})" if text else "connection broken"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
