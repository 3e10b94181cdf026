"""The disaggregated (XpYd) proxy as a process: ``python -m tui.core.proxy`` or ``disagg-tui proxy``.

    python -m tui.core.proxy --port 8000 --prefill http://127.0.0.1:8100 --decode http://127.0.0.1:8200

Binds 127.0.0.1:8000 by default (``--port 0``: any free port, printed), prints one startup line once it accepts
connections, then one access line per completion request with the prefill and decode legs' timings. It runs on
uvicorn with the httptools parser, and on uvloop when that happens to be installed (it is not a dependency). The
socket is bound without ``SO_REUSEPORT``, so a second proxy on a taken port fails instead of splitting traffic.
What it does per request: :mod:`tui.core.proxy.app`.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Sequence
from typing import Any, TextIO
from urllib.parse import urlsplit

import uvicorn

from tui.core import netaddr
from tui.core.errors import EXIT_OK, AppError, InputError
from tui.core.procs import reset_ignored_sigint
from tui.core.proxy.app import (
    ACCESS_LOGGER,
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_STREAM_IDLE_TIMEOUT_S,
    ProxyApp,
    ProxySettings,
)
from tui.core.proxy.upstream import BALANCE_CHOICES

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
#: after SIGINT/SIGTERM, how long requests in flight may finish before they are cut
GRACEFUL_SHUTDOWN_S = 5
#: how long an idle client connection is kept open: longer than clients keep theirs (httpx 5 s, aiohttp 15 s), so
#: the client, not the proxy, closes it, and no client reuses a connection the proxy is closing at that moment
CLIENT_KEEPALIVE_S = 75
STARTUP_PREFIX = "disagg-tui proxy listening on "


def add_proxy_arguments(parser: argparse.ArgumentParser) -> None:
    """The proxy's options, shared by ``python -m tui.core.proxy`` and ``disagg-tui proxy``."""
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to bind (default {DEFAULT_PORT}; 0 = any free port, printed at start)")
    parser.add_argument("--prefill", action="append", required=True, metavar="URL",
                        help="a prefill (kv_producer) vLLM server, e.g. http://127.0.0.1:8100; repeatable")
    parser.add_argument("--decode", action="append", required=True, metavar="URL",
                        help="a decode (kv_consumer) vLLM server, e.g. http://127.0.0.1:8200; repeatable")
    parser.add_argument("--balance", choices=BALANCE_CHOICES, default="round-robin",
                        help="how a server of each role is chosen when there are several (default round-robin; "
                             "least-outstanding: the one with the fewest requests in flight)")
    parser.add_argument("--health-timeout", type=float, default=1.0, metavar="S",
                        help="how long /health waits for each server's /health (default 1 s)")
    parser.add_argument("--health-ttl", type=float, default=0.5, metavar="S",
                        help="how long a health result is reused (default 0.5 s)")
    parser.add_argument("--connect-timeout", type=float, default=10.0, metavar="S",
                        help="how long to wait for a connection to a server (default 10 s)")
    parser.add_argument("--read-timeout", type=float, default=DEFAULT_READ_TIMEOUT_S, metavar="S",
                        help="answer 504 when a server has not started answering within S seconds: prefill's "
                             f"answer, decode's first byte (default {DEFAULT_READ_TIMEOUT_S:g}: a first request "
                             "on a real GPU can take minutes; 0 = no limit)")
    parser.add_argument("--stream-idle-timeout", type=float, default=DEFAULT_STREAM_IDLE_TIMEOUT_S, metavar="S",
                        help="end a decode answer that sends nothing for S seconds once started (a stream gets an "
                             f"error event; default {DEFAULT_STREAM_IDLE_TIMEOUT_S:g}; 0 = no limit)")
    parser.add_argument("--no-access-log", action="store_true", help="no line per request")


def server_url(text: str, flag: str) -> str:
    """``http://host:port`` from what the operator typed; a path, query or other scheme is refused."""
    raw = text.strip()
    try:
        parts = urlsplit(raw if "://" in raw else "http://" + raw)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"not a server URL: {text!r} ({exc})", field=flag) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"not an http:// server URL: {text!r}", field=flag)
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InputError(f"give the server's base URL without a path: {text!r}", field=flag,
                         hint="e.g. http://127.0.0.1:8100 (the proxy adds /v1/completions itself)")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def settings_from_args(args: argparse.Namespace) -> ProxySettings:
    if not 0 <= args.port <= 65535:
        raise InputError(f"port must be 0..65535, got {args.port}", field="--port")
    for flag, value in (("--health-timeout", args.health_timeout), ("--health-ttl", args.health_ttl),
                        ("--connect-timeout", args.connect_timeout), ("--read-timeout", args.read_timeout),
                        ("--stream-idle-timeout", args.stream_idle_timeout)):
        if not 0 <= value < float("inf"):
            raise InputError(f"must be ≥ 0, got {value}", field=flag)
    prefill = tuple(server_url(u, "--prefill") for u in args.prefill)
    decode = tuple(server_url(u, "--decode") for u in args.decode)
    for role, urls in (("prefill", prefill), ("decode", decode)):
        if len(set(urls)) != len(urls):
            raise InputError(f"a {role} server is given twice: {', '.join(urls)}", field="--" + role)
    return ProxySettings(prefill=prefill, decode=decode, host=args.host, port=args.port, balance=args.balance,
                         health_timeout_s=args.health_timeout, health_ttl_s=args.health_ttl,
                         connect_timeout_s=args.connect_timeout, read_timeout_s=args.read_timeout,
                         stream_idle_timeout_s=args.stream_idle_timeout, access_log=not args.no_access_log)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket, SO_REUSEADDR but never SO_REUSEPORT (a taken port must fail loudly)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InputError(f"cannot resolve {host!r}: {exc.strerror}", field="--host") from None
    family, _kind, _proto, _name, address = infos[0]
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY on accepted connections only when the listening socket's
    # proto is TCP. With proto 0, Nagle holds the second write of an answer (its body after its headers) until
    # the client's delayed ACK, ~40 ms later, on every request of a kept-alive connection.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise AppError(f"proxy cannot listen on {host}:{port}: {exc.strerror or exc}",
                       hint="another process holds the port; pick another with --port") from None
    return sock


def listen_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = netaddr.connect_host(host)
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


def startup_line(url: str, settings: ProxySettings) -> str:
    return (f"{STARTUP_PREFIX}{url} (prefill: {', '.join(settings.prefill)}; decode: {', '.join(settings.decode)}; "
            f"balance: {settings.balance})")


def log_config(access_log: bool) -> dict[str, Any]:
    """uvicorn's own lines to stderr as usual; the proxy's access lines to stdout, in uvicorn's format."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "default": {"()": "uvicorn.logging.DefaultFormatter", "fmt": "%(levelprefix)s %(message)s",
                        "use_colors": None},
            "access": {"()": "uvicorn.logging.DefaultFormatter", "fmt": "%(levelprefix)s %(message)s",
                       "use_colors": False},
        },
        "handlers": {
            "default": {"formatter": "default", "class": "logging.StreamHandler", "stream": "ext://sys.stderr"},
            "access": {"formatter": "access", "class": "logging.StreamHandler", "stream": "ext://sys.stdout"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "tui.proxy": {"handlers": ["default"], "level": "INFO", "propagate": False},
            ACCESS_LOGGER: {"handlers": ["access"], "level": "INFO" if access_log else "WARNING",
                            "propagate": False},
        },
    }


def uvicorn_config(app: ProxyApp, *, log: dict[str, Any] | None) -> uvicorn.Config:
    return uvicorn.Config(
        app, http="httptools", loop="auto", ws="none", lifespan="on", interface="asgi3",
        access_log=False, proxy_headers=False, server_header=False, log_config=log,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, timeout_keep_alive=CLIENT_KEEPALIVE_S,
    )


def serve(settings: ProxySettings, out: TextIO | None = None) -> int:
    """Run the proxy in the foreground until SIGINT or SIGTERM; returns an exit code."""
    sock = bind_socket(settings.host, settings.port)
    url = listen_url(sock)
    stream = out if out is not None else sys.stdout

    def ready() -> None:
        print(startup_line(url, settings), file=stream, flush=True)

    app = ProxyApp(settings, on_ready=ready)
    server = uvicorn.Server(uvicorn_config(app, log=log_config(settings.access_log)))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if not server.started:
        raise AppError("the proxy did not start (see the lines above)")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tui.core.proxy",
                                     description="The disaggregated prefill/decode proxy in front of vLLM servers.")
    add_proxy_arguments(parser)
    args = parser.parse_args(argv)
    reset_ignored_sigint()  # a stop sends SIGINT first
    try:
        return serve(settings_from_args(args))
    except AppError as err:
        print(f"disagg-tui proxy: error: {err.one_line()}", file=sys.stderr, flush=True)
        return err.exit_code
    except KeyboardInterrupt:
        return 130

