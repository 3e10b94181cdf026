"""``disagg-tui web`` over plain HTTP (no browser): the token gate in front of every route, one app process per
WebSocket, the session limit, a closed tab stopping its own app only, nothing secret on an app's command line or in
the server's output, bad input as one line and exit 2.

The server is a real subprocess (``disagg-tui web --sim --port 0``); its tabs are WebSockets opened with aiohttp's
client, as textual-serve's page opens them."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx
import psutil
import pytest

from tests.helpers import cli, eventually
from tests.web.webserver import ROOT, WebServerProcess

SAMPLE = ROOT / "recordings" / "sim-bakeoff-qwen3.6-27b-dp2-tp2-1p1d.dtrec"
UPGRADE = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
           "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


@pytest.fixture
def server() -> Iterator[WebServerProcess]:
    # a COLUMNS of the server's own (a CI runner's, pytest-xdist's) is no tab's size
    with WebServerProcess("--sim", "--max-sessions", "2", env={"COLUMNS": "80", "ROWS": "24"}) as s:
        yield s


def _cookie(s: WebServerProcess) -> dict[str, str]:
    return {"Cookie": f"disagg-tui-web-{s.base.rsplit(':', 1)[1].rstrip('/')}={s.token}"}


def test_without_the_token_nothing_is_served_and_no_console_starts(server: WebServerProcess) -> None:
    wrong = server.token[:-4] + ("AAAA" if not server.token.endswith("AAAA") else "BBBB")
    with httpx.Client(timeout=10) as c:
        for path, headers in [("", {}), (f"?token={wrong}", {}), ("?token=", {}), ("ws", UPGRADE),
                              (f"ws?token={wrong}", UPGRADE), ("static/js/textual.js", {}), ("nowhere", {}),
                              ("", {"Cookie": f"disagg-tui-web-1={server.token}"})]:  # another port's cookie
            r = c.get(server.base + path, headers=headers)
            assert r.status_code == 403, (path, r.status_code)
            assert "needs its token" in r.text
        time.sleep(0.5)
        assert server.apps() == []  # no app process was started
        r = c.get(server.url)
        assert r.status_code == 200 and "textual.js" in r.text
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and server.token in cookie
        assert r.headers["referrer-policy"] == "no-referrer" and r.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        r = c.get(server.base + "static/js/textual.js", headers=_cookie(server))  # the page's own requests
        assert r.status_code == 200
    assert server.apps() == []
    refused = [ln for ln in server.lines if "refused" in ln]
    assert len(refused) == 8 and all("HTTP 403" in ln for ln in refused)
    assert [ln for ln in server.lines if server.token in ln] == [f"open: {server.url}"]  # only the URL says it


def test_a_websocket_from_another_sites_page_is_refused(server: WebServerProcess) -> None:
    r = httpx.get(server.base + "ws", headers={**UPGRADE, **_cookie(server), "Origin": "http://evil.example"})
    assert r.status_code == 403
    time.sleep(0.3)
    assert server.apps() == []


async def _tab(session: aiohttp.ClientSession, s: WebServerProcess) -> aiohttp.ClientWebSocketResponse:
    """A tab: the WebSocket textual-serve's page opens; returns once the console drew its first screen."""
    ws = await session.ws_connect(s.base.replace("http", "ws") + "ws?width=120&height=40", headers=_cookie(s),
                                  origin=s.base.rstrip("/"))
    got = b""
    end = time.monotonic() + 60
    while b"disagg-tui" not in got:
        msg = await ws.receive(timeout=max(end - time.monotonic(), 0.1))
        assert msg.type == aiohttp.WSMsgType.BINARY, msg
        got += msg.data
    return ws


async def test_each_tab_is_a_console_of_its_own_and_closing_it_stops_only_that(server: WebServerProcess) -> None:
    async with aiohttp.ClientSession() as session:
        one = await _tab(session, server)
        two = await _tab(session, server)
        apps = server.apps()
        assert len(apps) == 2
        for app in apps:
            cmd = app.cmdline()
            assert cmd[1:3] == ["-m", "tui.cli.web_app"] and "--sim" in cmd and "--watch-only" in cmd
            env = app.environ()
            assert env["TEXTUAL_DRIVER"] == "textual.drivers.web_driver:WebDriver"
            assert (env["COLUMNS"], env["ROWS"]) == ("120", "40")  # the tab's size, not the server's COLUMNS
            assert env["DISAGG_TUI_STATE_DIR"] == os.environ["DISAGG_TUI_STATE_DIR"]  # the host's state
            assert server.token not in " ".join(cmd) and server.token not in " ".join(env.values())
        # a third tab: the page says why, and no third console starts
        async with session.get(server.url) as r:
            text = await r.text()
            assert r.status == 503 and "2 consoles open already" in text and "--max-sessions" in text
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(server.base.replace("http", "ws") + "ws", headers=_cookie(server),
                                     origin=server.base.rstrip("/"))
        assert refused.value.status == 503
        # closing the first tab stops its console only
        first = next(a for a in apps if a.pid == int(server.wait_for_line("console 1 opened").split("pid ")[1]
                                                             .split(";")[0]))
        await one.close()
        eventually(lambda: not first.is_running() or first.status() == psutil.STATUS_ZOMBIE, 20, "tab 1's app gone")
        assert [a.pid for a in server.apps()] == [a.pid for a in apps if a.pid != first.pid]
        assert not two.closed
        await two.send_str('["ping", "1"]')
        msg = await two.receive(timeout=10)
        while msg.type == aiohttp.WSMsgType.BINARY:  # the console's repaints first
            msg = await two.receive(timeout=10)
        assert msg.json() == ["pong", "1"]
        async with session.get(server.url) as r:
            assert r.status == 200  # a slot is free again
        await two.close()
    eventually(lambda: server.apps() == [], 20, "every tab's app gone")
    # closed by its quit (exit 0), or, on a machine too busy for it to quit within 5 s, by SIGTERM: closed either way
    server.wait_for_line("console 2 closed (its app exited ")


async def test_a_killed_server_leaves_no_console_behind() -> None:
    with WebServerProcess("--sim") as server:
        async with aiohttp.ClientSession() as session:
            await _tab(session, server)
            (app,) = server.apps()
            assert server.proc is not None
            server.proc.send_signal(signal.SIGKILL)
            eventually(lambda: not app.is_running() or app.status() == psutil.STATUS_ZOMBIE, 30,
                       "the orphaned app quit")


def test_stopping_the_server_stops_its_consoles() -> None:
    server = WebServerProcess("--sim").start()

    async def open_tab() -> None:
        async with aiohttp.ClientSession() as session:
            await _tab(session, server)
            (app,) = server.apps()
            assert server.stop() == 0  # Ctrl-C
            assert not app.is_running() or app.status() == psutil.STATUS_ZOMBIE

    asyncio.run(open_tab())
    assert "closing 1 console(s)" in server.output


def test_a_replay_is_served() -> None:
    with WebServerProcess("--replay", str(SAMPLE)) as server:

        async def tab() -> list[str]:
            async with aiohttp.ClientSession() as session:
                await _tab(session, server)
                (app,) = server.apps()
                return app.cmdline()

        cmd = asyncio.run(tab())
        assert "--replay" in cmd and str(SAMPLE) in cmd
        assert "replaying sim-bakeoff" in server.lines[0]


def test_a_token_file_gives_the_token(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text("a-team-token-0123456789\n")
    f.chmod(0o600)
    with WebServerProcess("--sim", "--token-file", str(f)) as server:
        assert server.token == "a-team-token-0123456789"
        assert httpx.get(server.url).status_code == 200
        assert not any("warning" in ln for ln in server.lines)
    f.chmod(0o644)
    with WebServerProcess("--sim", "--token-file", str(f)) as server:
        assert any("others on this host may read it" in ln for ln in server.lines)
    assert stat.S_IMODE(f.stat().st_mode) == 0o644


def test_another_address_than_loopback_warns() -> None:
    with WebServerProcess("--sim", "--host", "0.0.0.0") as server:
        assert any(ln.startswith("warning: --host 0.0.0.0: the console is served to other machines")
                   for ln in server.lines)
        assert "127.0.0.1" not in server.url


@pytest.mark.parametrize(("args", "says"), [
    (["--host", "everywhere"], "field '--host': not an IP address"),
    (["--port", "70000"], "must be within [0, 65535]"),
    (["--max-sessions", "0"], "must be within [1, 64]"),
    (["--token-file", "/nonexistent/token"], "--token-file"),
    (["--token-file", "TOOSHORT"], "16-256 URL-safe characters"),
    (["--replay", "/nonexistent/x.dtrec"], "no such recording"),
    (["--replay", str(SAMPLE), "--operator"], "a replay launches nothing"),
    (["--layout-ports", "8000,8100", "--operator"], "expected three ports"),
    (["--layout-ports", "8000,8100,5600"], "only with --operator"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str, tmp_path: Path) -> None:
    if "TOOSHORT" in args:
        (tmp_path / "short").write_text("abc\n")
        args = ["--token-file", str(tmp_path / "short")]
    r = cli("web", "--sim", "--port", "0", *args, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "open:" not in r.stdout


def test_a_port_in_use_is_one_line() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = cli("web", "--sim", "--port", str(s.getsockname()[1]), timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "cannot listen on 127.0.0.1:" in r.stderr, r.stderr


async def test_a_console_that_dies_ends_its_tab() -> None:
    """The tab's app exits without a word (it died): the WebSocket closes, the page says the session ended."""
    import sys

    from aiohttp.test_utils import TestClient, TestServer

    from tui.console.web.server import WebConfig, WebServer
    from tui.console.web.session import AppCommand

    said: list[str] = []
    web = WebServer(WebConfig(host="127.0.0.1", port=0, token="t" * 20,
                              app=AppCommand(argv=(sys.executable, "-c", "import sys; sys.exit(3)"))), say=said.append)
    async with TestClient(TestServer(web.make_app())) as client:
        ws = await client.ws_connect("/ws?token=" + "t" * 20)
        msg = await ws.receive(timeout=20)
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        # the server's side of the tab ends after the browser's (5 s was too short on a loaded 2-core machine)
        deadline = asyncio.get_running_loop().time() + 30
        while asyncio.get_running_loop().time() < deadline:
            if web.sessions == {} and any("closed" in line for line in said):
                break
            await asyncio.sleep(0.05)
    # (its exit code, 3, reads 255 where another part of the test process reaps children: pytest-xdist's workers)
    assert any("console 1 closed (its app exited" in line for line in said), said
    assert web.sessions == {}
