"""``disagg-tui web``'s server: the console in a browser, one app process per tab, behind a token.

textual-serve supplies the browser side (its xterm.js page script and assets) and the relay of one app process per
WebSocket (:class:`~tui.console.web.session.ConsoleSession`); this is its server, made for a GPU host:

- **the token gate**: an aiohttp middleware in front of every route. A request passes only with the token, in the
  URL's query once (``?token=``, as printed) and then in the cookie that answer sets (HttpOnly, SameSite=Strict,
  named for the port), which the page's own requests (its script, the WebSocket) carry; anything else is HTTP 403
  before any handler runs: no page, no app process. A WebSocket from another origin's page is refused too.
- **sessions**: each WebSocket starts one app process (the argv the CLI gives: the same host options, watch-only
  unless ``--operator``); at most ``max_sessions`` at once (HTTP 503 past them: the page and the WebSocket both
  say so). A tab that closes stops its own app; what that console started runs on, detached.
- **nothing secret in the logs**: aiohttp's access log (which prints each request line, query included) is off;
  the server prints one line of its own per session opened, closed or refused, with paths, never queries.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import textual_serve
from aiohttp import WSMsgType, web
from textual_serve.download_manager import DownloadManager

from tui.console.web.page import console_page, refusal_page
from tui.console.web.session import AppCommand, ConsoleSession
from tui.core.errors import AppError
from tui.core.printable import printable

STATIC = Path(textual_serve.__file__).parent / "static"
#: the WebSocket's keep-alive (seconds): a tab whose browser went away without closing is noticed and stopped
HEARTBEAT_S = 15.0
#: the most bytes of one message from a browser (keys and resizes are a few bytes; a paste may be more)
MAX_MESSAGE = 1 << 20
#: characters of one line of the server's own log (a refused request's path is anyone's, up to aiohttp's 8 KiB)
MAX_LOG_CHARS = 400
CSP = ("default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; font-src 'self'; "
       "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


@dataclass(frozen=True)
class WebConfig:
    """What the server serves and how: the address, the token, each tab's app, how many tabs at once."""

    host: str
    port: int
    token: str
    app: AppCommand
    max_sessions: int = 4
    title: str = "disagg-tui"
    font_size: int = 16


def _to_int(value: str | None, default: int, lo: int, hi: int) -> int:
    try:
        return min(max(int(value or ""), lo), hi)
    except ValueError:
        return default


class WebServer:
    """The aiohttp application and its sessions; ``say`` prints the server's own lines (never the token)."""

    def __init__(self, config: WebConfig, *, say: Callable[[str], None] = print) -> None:
        self.config = config
        self._say = say
        self.sessions: dict[int, ConsoleSession] = {}
        self.refused = 0
        self.port = config.port
        self._sockets: set[web.WebSocketResponse] = set()
        self._ending: set[asyncio.Future[None]] = set()
        self._downloads = DownloadManager()

    def say(self, line: str) -> None:
        """One line of the server's own log, through the sink: a request's path, method or address (a browser's,
        anyone's on the port) is shown escaped and cut, never an escape sequence or a second line."""
        self._say(printable(line, MAX_LOG_CHARS))

    @property
    def cookie(self) -> str:
        return f"disagg-tui-web-{self.port}"

    # --- the token gate ------------------------------------------------------------------------------------------
    def _matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.config.token.encode())

    def _query_token(self, request: web.Request) -> bool:
        return self._matches(request.query.get("token"))

    def authorised(self, request: web.Request) -> bool:
        return self._query_token(request) or self._matches(request.cookies.get(self.cookie))

    @web.middleware
    async def _gate(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        if not self.authorised(request):
            self.refused += 1
            self.say(f"refused {request.method} {request.path} from {request.remote}: no valid token (HTTP 403)")
            return web.Response(status=403, content_type="text/html", text=refusal_page(
                "403: this console needs its token",
                "Open the URL 'disagg-tui web' printed when it started, token included (?token=...)."))
        response: web.StreamResponse = await handler(request)
        return response

    @staticmethod
    async def _headers(request: web.Request, response: web.StreamResponse) -> None:
        """On every answer: the page never framed elsewhere, its address (the token) never sent as a referrer."""
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")

    # --- the routes ----------------------------------------------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._gate], client_max_size=MAX_MESSAGE)
        app.router.add_get("/", self._index)
        app.router.add_get("/ws", self._websocket)
        app.router.add_static("/static", STATIC, show_index=False, follow_symlinks=False)
        app.on_response_prepare.append(self._headers)
        app.on_shutdown.append(self._close_sockets)
        return app

    def _full(self) -> web.Response | None:
        if len(self.sessions) < self.config.max_sessions:
            return None
        n = self.config.max_sessions
        return web.Response(status=503, content_type="text/html", text=refusal_page(
            f"503: {n} console{'s' if n != 1 else ''} open already",
            f"This server allows {n} browser console{'s' if n != 1 else ''} at once (--max-sessions {n}), and "
            "each tab is one. Close a tab that shows it and reload this page, or ask the operator to restart "
            "'disagg-tui web' with a higher --max-sessions."))

    async def _index(self, request: web.Request) -> web.Response:
        full = self._full()
        if full is not None:
            self.say(f"refused a page for {request.remote}: {len(self.sessions)} consoles open (HTTP 503)")
            return full
        font = _to_int(request.query.get("fontsize"), self.config.font_size, 8, 40)
        response = web.Response(content_type="text/html", text=console_page(
            title=self.config.title, font_size=font, max_sessions=self.config.max_sessions))
        response.headers["Cache-Control"] = "no-store"
        if self._query_token(request):
            response.set_cookie(self.cookie, self.config.token, httponly=True, samesite="Strict", path="/")
        return response

    def _same_origin(self, request: web.Request) -> bool:
        """A browser names the page a WebSocket comes from: only the console's own page may open one."""
        origin = request.headers.get("Origin")
        return origin is None or urlsplit(origin).netloc == request.host

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if not self._same_origin(request):
            self.refused += 1
            self.say(f"refused a console for {request.remote}: its page is not this server's (HTTP 403)")
            return web.Response(status=403, text="403: a console opens only from its own page")
        full = self._full()
        if full is not None:
            self.say(f"refused a console for {request.remote}: {len(self.sessions)} open (HTTP 503)")
            return full
        ws = web.WebSocketResponse(heartbeat=HEARTBEAT_S, max_msg_size=MAX_MESSAGE)
        session = ConsoleSession(self.config.app, write_bytes=ws.send_bytes, write_str=ws.send_str, close=ws.close,
                                 download_manager=self._downloads)
        self.sessions[session.number] = session  # the slot is taken before the first await: none given twice
        try:
            await ws.prepare(request)
            self._sockets.add(ws)
            width = _to_int(request.query.get("width"), 80, 20, 500)
            height = _to_int(request.query.get("height"), 24, 8, 300)
            await session.start(width, height)
            self.say(f"console {session.number} opened for {request.remote} (pid {session.pid}; "
                     f"{len(self.sessions)} of {self.config.max_sessions} open)")
            await self._relay(ws, session)
        except OSError as err:
            self.say(f"console {session.number} could not start: {err}")
        finally:
            self.sessions.pop(session.number, None)  # its slot is free at once; its app stops below
            self._sockets.discard(ws)
            # shielded: aiohttp cancels the handler of a connection that closed, and the app must stop all the same
            ending = asyncio.ensure_future(self._end(ws, session))
            self._ending.add(ending)  # held: a task nobody references may be collected before it ends
            ending.add_done_callback(self._ending.discard)
            await asyncio.shield(ending)
        return ws

    async def _end(self, ws: web.WebSocketResponse, session: ConsoleSession) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.close()
        code = await session.close_app()
        if code is not None:
            self.say(f"console {session.number} closed (its app exited {code}); what it started goes on")

    @staticmethod
    async def _relay(ws: web.WebSocketResponse, session: ConsoleSession) -> None:
        """What the browser sends (textual-serve's envelopes: ``["stdin", text]``, ``["resize", {...}]``, ping,
        focus, blur) to the tab's app; anything else is dropped."""
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                continue
            try:
                envelope = json.loads(message.data)
            except ValueError:
                continue
            if not isinstance(envelope, list) or not envelope or not isinstance(envelope[0], str):
                continue
            kind, data = envelope[0], envelope[1] if len(envelope) > 1 else None
            if kind == "stdin" and isinstance(data, str):
                await session.send_bytes(data.encode("utf-8"))
            elif kind == "resize" and isinstance(data, dict):
                await session.set_terminal_size(_to_int(str(data.get("width")), 80, 20, 500),
                                                _to_int(str(data.get("height")), 24, 8, 300))
            elif kind == "ping" and isinstance(data, str):
                await ws.send_json(["pong", data[:32]])
            elif kind == "focus":
                await session.focus()
            elif kind == "blur":
                await session.blur()

    async def _close_sockets(self, _: web.Application) -> None:
        for ws in list(self._sockets):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.close(code=1001, message=b"the server is stopping")

    # --- running -------------------------------------------------------------------------------------------------
    async def serve(self, ready: Callable[[int], None]) -> None:
        """Listen, call ``ready(port)`` once listening, serve until SIGINT or SIGTERM, then close every tab's app
        (and nothing they started)."""
        runner = web.AppRunner(self.make_app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.config.host, self.config.port, shutdown_timeout=10.0)
        try:
            await site.start()
        except OSError as err:
            await runner.cleanup()
            raise AppError(f"cannot listen on {self.config.host}:{self.config.port}: {err.strerror or err}",
                              hint="another --port, or stop what listens there") from None
        addresses = runner.addresses
        if addresses:
            self.port = int(addresses[0][1])
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        ready(self.port)
        try:
            await stop.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            if self.sessions:
                self.say(f"stopping: closing {len(self.sessions)} console(s); what they started goes on")
            await runner.cleanup()
            if self._ending:  # tabs whose consoles are still stopping
                await asyncio.gather(*self._ending, return_exceptions=True)
