"""``disagg-tui web`` in a real browser: headless Chromium (Debian's) driven by Playwright against the server started
as a subprocess on the simulated host.

- the page loads with the token and shows the dashboard; without it the browser gets 403 and no console starts;
- watch-only (the default): a launch (``l``, then ctrl+l) is refused, the page says why;
- ``--operator``: a 1P1D launched from the browser comes up ready, ``disagg-tui status --json`` in a terminal sees
  it, a second tab shows it too, and closing the first tab stops that tab's console only (the layout stays up);
- a replay is served: the page shows the recording;
- screenshots of the pages are kept (the test's tmp dir; ``DISAGG_TUI_TEST_ARTEFACTS`` keeps copies).

One browser for the module; a few page loads. Skipped when Chromium is absent, except in CI, where that fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import cli, eventually, layout_port_args
from tests.web import browser as chromium
from tests.web.webserver import ROOT, WebServerProcess

SAMPLE = ROOT / "recordings" / "sim-bakeoff-qwen3.6-27b-dp2-tp2-1p1d.dtrec"
MODEL = "qwen3.6-27b-nvfp4"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium.chromium()  # a skip (or, in CI, a failure) before Playwright starts
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = chromium.launch(p)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def shipped_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only the shipped profiles: an empty Hugging Face cache, no model folders (the launch screen's list fixed)."""
    (tmp_path / "hub").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("DISAGG_TUI_MODEL_DIRS", raising=False)
    monkeypatch.setenv("DISAGG_TUI_DUMMY_MODEL_DIR", "/nonexistent/dummy-model")


def _status() -> dict[str, Any]:
    r = cli("status", "--json", "--sim")
    assert r.returncode == 0, r.stderr
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def test_watch_only_shows_the_dashboard_and_refuses_a_launch(browser: Any, tmp_path: Path,
                                                           shipped_models: None) -> None:
    with WebServerProcess("--sim") as server:
        page = chromium.new_page(browser)
        try:
            denied = page.goto(server.base)  # no token
            assert denied.status == 403 and "needs its token" in page.content()
            assert server.apps() == []  # no console started for it
            loaded = page.goto(server.url)
            assert loaded.status == 200
            chromium.wait_for_text(page, "disagg-tui", "SIMULATED", "No layout is up", "GPU0 B200", "Servers", "Log")
            eventually(lambda: len(server.apps()) == 1, 20, "the tab's console")
            chromium.keep_screenshot(page, tmp_path, "web-dashboard.png")
            chromium.focus_terminal(page)
            page.keyboard.press("l")
            chromium.wait_for_text(page, "Preflight", "Serve knobs")  # a teammate may look at a plan
            page.keyboard.press("Control+l")
            text = chromium.wait_for_text(page, "watch-only", "the server was started without --operator")
            assert "launches, stops, measures" in text
            chromium.keep_screenshot(page, tmp_path, "web-watch-only-refused.png")
        finally:
            page.close()
        eventually(lambda: server.apps() == [], 20, "the closed tab's console gone")
    assert _status()["layouts"] == []  # nothing was launched


def test_an_operator_launches_from_the_browser_and_the_terminal_sees_it(browser: Any, tmp_path: Path,
                                                                         shipped_models: None,
                                                                         isolated_dirs: Path) -> None:
    ports = layout_port_args()
    layout_ports = f"{ports[1]},{ports[3]},{ports[5]}"
    with WebServerProcess("--sim", "--sim-startup", "1", "--operator", "--layout-ports", layout_ports) as server:
        first = chromium.new_page(browser)
        second = None
        try:
            first.goto(server.url)
            chromium.wait_for_text(first, "No layout is up")
            chromium.focus_terminal(first)
            first.keyboard.press("l")
            chromium.wait_for_text(first, "Preflight", "Serve knobs")
            first.keyboard.type("qwen3.6")  # the README's launch: the model's name filters the list
            first.keyboard.press("Enter")
            chromium.wait_for_text(first, f"# {MODEL} as 1p1d", f"--port {ports[1]}")
            first.keyboard.press("Control+l")
            eventually(lambda: any(lay["status"] == "ready" for lay in _status()["layouts"]), 90,
                       "the browser's 1P1D ready, as the terminal's status sees it")
            (lay,) = _status()["layouts"]
            assert (lay["topology"], lay["profile"], lay["endpoint"]) == ("1p1d", MODEL, f"http://127.0.0.1:{ports[1]}")
            chromium.wait_for_text(first, "prefill-0", "decode-0", "ready", timeout=60)
            # a second tab: a console of its own, attached to the same host, shows the same layout
            second = chromium.new_page(browser)
            second.goto(server.url)
            chromium.wait_for_text(second, "prefill-0", "decode-0", "ready", timeout=60)
            eventually(lambda: len(server.apps()) == 2, 20, "two tabs, two consoles")
            apps = server.apps()
            first.close()  # closing the first tab stops its console only, never what it launched
            eventually(lambda: len(server.apps()) == 1, 20, "the first tab's console gone")
            assert server.apps()[0].pid in {a.pid for a in apps}
            assert [x["status"] for x in _status()["layouts"]] == ["ready"]
            chromium.keep_screenshot(second, tmp_path, "web-operator-ready.png")
        finally:
            if not first.is_closed():
                first.close()
            if second is not None:
                second.close()
            cli("down", "--all", "--sim", timeout=120)
    assert _status()["layouts"] == []
    _no_token_kept(server.token, isolated_dirs)


def _no_token_kept(token: str, root: Path) -> None:
    """The token is in no file the session left: the state file, the logs, the consoles' job logs, the recordings
    (the operator's tabs record; their events read back)."""
    from tui.core.record import Recording

    recordings = 0
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        if path.suffix == ".dtrec":
            with Recording.open(path) as rec:
                assert all(token not in json.dumps(ev.to_dict(), default=str) for ev in rec.events()), path
            recordings += 1
        else:
            assert token.encode() not in path.read_bytes(), path
    assert recordings >= 1  # the operator's tabs recorded their sessions


def test_a_replay_in_the_browser(browser: Any, tmp_path: Path) -> None:
    with WebServerProcess("--replay", str(SAMPLE), "--speed", "100") as server:
        page = chromium.new_page(browser)
        try:
            page.goto(server.url)
            chromium.wait_for_text(page, "REPLAY", "prefill-0")
            chromium.keep_screenshot(page, tmp_path, "web-replay.png")
        finally:
            page.close()


def test_without_chromium_the_browser_tests_skip_except_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chromium, "CHROMIUM", Path("/nonexistent/chromium"))
    monkeypatch.setattr(chromium.shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        chromium.chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and no Chromium"):
        chromium.chromium()
