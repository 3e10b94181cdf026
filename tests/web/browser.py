"""Headless Chromium for the browser tests (and benchmarks/web_session.py): Debian's ``/usr/bin/chromium`` driven by
Playwright, with the flags this closed network needs, and the console's screen read from the page.

textual-serve's page draws the console with xterm.js on a canvas (its WebGL or canvas renderer), so the screen's
text is not in the DOM. A script run in every page before the page's own (``add_init_script``) keeps each xterm.js
``Terminal`` the page makes (textual-serve's page assigns it to its terminal object's ``terminal`` property; an
accessor on ``Object.prototype`` sees that assignment, then steps aside); the tests read the terminal's buffer, row
by row, as the operator sees it.

The tests skip when Chromium is absent, except in CI (``CI=true``), where its absence fails them: the README's test
command installs it.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: without the background-networking flags Chromium's own connections are refused by this closed network, many at a
#: time, and it looks up Google's hosts at every start; Playwright gives each launch a fresh, empty profile
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 800}

KEEP_TERMINALS = """
(() => {
  window.__terminals = [];
  Object.defineProperty(Object.prototype, "terminal", {
    configurable: true,
    get() { return undefined; },
    set(value) {
      Object.defineProperty(this, "terminal", { value, writable: true, configurable: true, enumerable: true });
      if (value && value.buffer && value.buffer.active) window.__terminals.push(value);
    },
  });
})();
"""
SCREEN_TEXT = """() => {
  const t = window.__terminals && window.__terminals[0];
  if (!t) return "";
  const b = t.buffer.active, rows = [];
  for (let y = 0; y < t.rows; y++) {
    const line = b.getLine(b.viewportY + y);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows.join("\\n");
}"""


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def chromium() -> Path:
    """The browser, or a skip saying why (a failure in CI: there the README's test command installs it)."""
    found = CHROMIUM if CHROMIUM.exists() else Path(shutil.which("chromium") or CHROMIUM)
    if found.exists():
        return found
    if in_ci():
        pytest.fail(f"CI=true and no Chromium at {CHROMIUM}: the README's test command installs it "
                    "(apt-get install chromium)")
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium); in CI these tests run")


def launch(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=str(chromium()), headless=True, args=FLAGS)


def new_page(browser: Any) -> Any:
    page = browser.new_page(viewport=VIEWPORT)
    page.add_init_script(KEEP_TERMINALS)
    return page


def screen_text(page: Any) -> str:
    text: str = page.evaluate(SCREEN_TEXT)
    return text


def wait_for_text(page: Any, *words: str, timeout: float = 30.0) -> str:
    """The screen once every one of ``words`` is on it."""
    end = time.monotonic() + timeout
    text = ""
    while time.monotonic() < end:
        text = screen_text(page)
        if all(w in text for w in words):
            return text
        page.wait_for_timeout(50)
    raise AssertionError(f"the page never showed {words!r}; it shows:\n{text}")


def focus_terminal(page: Any) -> None:
    """Keys typed go to the console (xterm.js takes them in its hidden textarea)."""
    page.wait_for_selector(".xterm-helper-textarea", state="attached", timeout=30_000)
    page.focus(".xterm-helper-textarea")


def keep_screenshot(page: Any, folder: Path, name: str) -> Path:
    """A screenshot of the page under ``folder`` (the test's tmp dir) and, where ``DISAGG_TUI_TEST_ARTEFACTS`` names a
    folder, a copy there (CI keeps it)."""
    path = folder / name
    page.screenshot(path=str(path))
    keep = os.environ.get("DISAGG_TUI_TEST_ARTEFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, Path(keep) / name)
    return path
