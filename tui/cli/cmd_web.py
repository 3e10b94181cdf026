"""``disagg-tui web``: the console in teammates' browsers (textual-serve), token-protected, watch-only by default.

Each browser tab gets a console of its own (an app process attached to the host's state, like a console opened
later in a terminal); closing the tab stops that console only, never what it started. It binds 127.0.0.1 (an SSH
port-forward reaches it); it prints one URL with a token, fresh each start unless ``--token-file``, and refuses
every request without it (HTTP 403, no console started).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import re
import secrets
import socket
import stat
from pathlib import Path
from typing import Any

from tui.cli.argtypes import bounded_int, positive_float
from tui.cli.context import CliContext, add_global_options
from tui.core import netaddr, paths, safeio
from tui.core.errors import EXIT_OK, AppError, InputError
from tui.core.plan.ports import is_loopback

DEFAULT_PORT = 8765
DEFAULT_MAX_SESSIONS = 4
MAX_SESSIONS = 64
#: what a token file may hold: URL-safe characters (it goes into the URL as it is), long enough not to be guessed
TOKEN = re.compile(r"[A-Za-z0-9_\-.~]{16,256}")
TOKEN_FILE_LIMIT = 4096


def register(sub: Any) -> None:
    p = sub.add_parser(
        "web", help="serve the console to teammates' browsers (watch-only unless --operator)",
        description="Serve the console to web browsers (textual-serve): each tab is a console of its own, "
                    "attached to this host's layouts, benchmarks and campaigns as a console opened later in a "
                    "terminal is; closing the tab stops that console, never what it started. Watch-only unless "
                    "--operator: a teammate sees everything, and a launch, stop, benchmark, fix or playbook edit "
                    "is refused, saying why. It binds 127.0.0.1: reach it from another machine with an SSH "
                    "port-forward (ssh -L 8765:127.0.0.1:8765 HOST). It prints one URL with an access token (a "
                    "fresh one each start, or --token-file's) and refuses any request without it (HTTP 403).")
    p.add_argument("--port", type=bounded_int(0, 65535), default=DEFAULT_PORT, metavar="N",
                   help=f"the port to listen on (default {DEFAULT_PORT}; 0: any free one, printed)")
    p.add_argument("--host", default="127.0.0.1", metavar="ADDR",
                   help="the address to listen on (default 127.0.0.1; any other one is reachable from other "
                        "machines over plain HTTP: a warning says so)")
    p.add_argument("--operator", action="store_true",
                   help="let the browsers act: launch, stop, benchmark, apply fixes, edit the playbook (default: "
                        "watch-only)")
    p.add_argument("--token-file", metavar="FILE",
                   help="the access token, from this file (one line of 16-256 URL-safe characters; default: a "
                        "fresh random one each start)")
    p.add_argument("--max-sessions", type=bounded_int(1, MAX_SESSIONS), default=DEFAULT_MAX_SESSIONS, metavar="N",
                   help=f"the most browser consoles at once (default {DEFAULT_MAX_SESSIONS}; each is a process on "
                        "this host); past it a page says so")
    p.add_argument("--replay", metavar="FILE",
                   help="serve a recorded session instead of this host (each tab replays it from the start)")
    p.add_argument("--speed", type=positive_float, default=1.0, metavar="X",
                   help="--replay's speed 0.5-100 (default 1)")
    p.add_argument("--layout-ports", metavar="E,S,C",
                   help="with --operator: the ports of the layouts the browsers launch (endpoint, first server, "
                        "first NIXL side channel; default the planner's)")
    add_global_options(p)
    p.set_defaults(handler=run)


def _check_host(host: str) -> str:
    host = host.strip()
    if host == "localhost":
        return host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise InputError(f"not an IP address: {host!r} (127.0.0.1, 0.0.0.0, ::1 ...)", field="--host") from None
    return host


def read_token(path: str, warn: Any) -> str:
    """The token of ``--token-file``: its one line, checked; a file others may read is a warning."""
    st = safeio.check_regular(path, field="--token-file")
    text = safeio.read_text(path, limit=TOKEN_FILE_LIMIT, field="--token-file").strip()
    if not TOKEN.fullmatch(text):
        raise InputError("must hold one line of 16-256 URL-safe characters (A-Z a-z 0-9 - _ . ~)",
                         file=path, field="--token-file")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        warn(f"--token-file {path}: others on this host may read it (chmod 600)")
    return text


def _layout_ports(text: str | None) -> str | None:
    if text is None:
        return None
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and 1 <= int(p) <= 65535 for p in parts):
        raise InputError(f"expected three ports ENDPOINT,SERVER,SIDE_CHANNEL, got {text!r}", field="--layout-ports")
    return ",".join(str(int(p)) for p in parts)


def url_host(host: str) -> str:
    """The host part of the URL printed: the machine's name for a wildcard address, brackets for IPv6."""
    if netaddr.is_wildcard(host):
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host


def app_argv(args: argparse.Namespace, ctx: CliContext, replay: Path | None) -> list[str]:
    """Each tab's console: the same host flags as this command (the token is never among them)."""
    from tui.console.argv import global_args

    argv = [*paths.python_module_argv("tui.cli.web_app"), *global_args(ctx.host_options())]
    if replay is not None:
        return [*argv, "--replay", str(replay), "--speed", f"{args.speed:g}"]
    if not args.operator:
        argv.append("--watch-only")
    ports = _layout_ports(args.layout_ports)
    if ports is not None:
        argv += ["--layout-ports", ports]
    return argv


def _added(env: dict[str, str]) -> dict[str, str]:
    """What ``env`` adds to this process's environment (each tab's app starts from the server's own)."""
    return {k: v for k, v in env.items() if os.environ.get(k) != v}


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    try:
        import textual_serve  # noqa: F401
    except ImportError:
        raise AppError("disagg-tui web needs textual-serve, which is not installed",
                       hint="pip install 'disagg-tui[web]'") from None
    from tui.console.web.server import WebConfig, WebServer
    from tui.console.web.session import AppCommand

    host = _check_host(args.host)
    replay: Path | None = None
    if args.replay is not None:
        if args.operator:
            raise InputError("a replay launches nothing: leave out --operator", field="--replay")
        if not 0.5 <= args.speed <= 100:
            raise InputError(f"must be within 0.5-100, got {args.speed:g}", field="--speed")
        from tui.cli.cmd_replay import resolve
        from tui.core.record import Recording

        replay = resolve(args.replay).resolve()
        Recording.open(replay).close()  # a file that is no recording: one line now, not in every tab
    if args.layout_ports is not None and not args.operator:
        raise InputError("only with --operator: a watch-only console launches nothing", field="--layout-ports")
    token = read_token(args.token_file, ctx.warn) if args.token_file else secrets.token_urlsafe(32)
    env: dict[str, str] = {}
    if ctx.api_key:  # in the environment, never on a command line others can read (ps)
        env["VLLM_API_KEY"] = ctx.api_key
    argv = app_argv(args, ctx, replay)
    if not is_loopback(host):
        ctx.warn(f"--host {host}: the console is served to other machines over plain HTTP (the token travels "
                 "unencrypted); the default 127.0.0.1 and an SSH port-forward keep it on this host")
    mode = (f"replaying {replay.name}" if replay is not None else
            "operator: the browsers may launch, stop, benchmark, apply fixes and edit the playbook" if args.operator
            else "watch-only (--operator lets the browsers act)")
    title = f"disagg-tui · {socket.gethostname()}" + (" · watch-only" if not args.operator else "")
    config = WebConfig(host=host, port=args.port, token=token, max_sessions=args.max_sessions, title=title,
                       app=AppCommand(argv=tuple(argv), env=_added(paths.child_env(env))))
    server = WebServer(config, say=lambda line: ctx.print(f"web: {line}"))

    def ready(port: int) -> None:
        ctx.print(f"disagg-tui web: the console, {mode}; at most {args.max_sessions} browser(s) at once")
        ctx.print(f"open: http://{url_host(host)}:{port}/?token={token}")
        if is_loopback(host):
            ctx.print(f"from another machine: ssh -L {port}:127.0.0.1:{port} {socket.gethostname()}, then open "
                      "the URL above there")
        ctx.print("Ctrl-C stops the server and its browser consoles (never what they started)")

    asyncio.run(server.serve(ready))
    return EXIT_OK
