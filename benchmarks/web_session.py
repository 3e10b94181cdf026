"""A browser console's cost on the host, and its key-to-paint latency against the terminal console's.

On the simulated host (two B200s, a 1P1D of qwen3.6 up), two consoles watch the same layout at once, the same size:

- **the terminal console** (the reference): ``disagg-tui console --sim`` in a pseudo-terminal, its output read by
  this script as a terminal would read it;
- **a browser console**: ``disagg-tui web --sim`` (watch-only) and one tab in headless Chromium (Debian's, driven by
  Playwright); on the host that is the tab's app process (the same console, textual's web driver instead of the
  terminal's) and the web server relaying it (aiohttp). Chromium runs on the teammate's machine in real use: it
  is measured apart and is no cost to the host.

Two phases, each a watching block (no key: what a console costs while someone looks) then a block of key presses
(one every 0.25 s, the two consoles in turn): first the layout up and idle (telemetry only), then while a benchmark
of ``--streams`` concurrent streams runs against it (``disagg-tui bench``, its own processes, excluded).

- CPU: each process's CPU time over wall time (% of one core), watching and with keys; memory: RSS (max, MiB);
- key-to-paint: a cursor move in the servers table (down, then up) switches the log pane to the other server; the
  time from the key until that server's own log lines (``(APIServer pid=N)``, N that server's) are on the screen:
  for the terminal, until they reach the terminal's side of the pseudo-terminal (a terminal draws them within its
  next frame); for the browser, from the page's keydown until xterm.js has rendered them (its ``onRender``), which
  includes the WebSocket both ways, the relay and xterm.js's parsing and drawing. "of which: to the page" is the
  key's way to the tab's console and the paint's way back (until the WebSocket frame carrying it reaches the page);
  the rest is xterm.js parsing and drawing it, here in headless Chromium without a GPU (software rendering: a
  teammate's browser with a GPU draws faster).
  (benchmarks/console_load.py measures the console's own part, key to the app's paint call, inside its process.)

The table's ratios are the browser console's figures over the terminal console's, measured in the same run.

    python benchmarks/web_session.py [--streams 1000] [--watch-s 20] [--presses 30]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import re
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = "qwen3.6-27b-nvfp4"
DOWN, UP = b"\x1b[B", b"\x1b[A"

#: when the WebSocket frame that carries the marker reaches the page (before xterm.js parses and draws it)
NET_HOOK = """(() => {
  window.__recv = { want: null, at: null };
  const listen = WebSocket.prototype.addEventListener;
  WebSocket.prototype.addEventListener = function (type, fn, options) {
    if (type === "message") {
      const inner = fn;
      fn = function (e) {
        const R = window.__recv;
        if (R.want !== null && R.at === null && typeof e.data !== "string"
            && new TextDecoder("latin1").decode(new Uint8Array(e.data)).includes(R.want)) R.at = performance.now();
        return inner.call(this, e);
      };
    }
    return listen.call(this, type, fn, options);
  };
})();"""
ON_RENDER = """() => {
  const t = window.__terminals[0];
  window.__lat = { want: null, t0: null, seen: null };
  const has = (want) => {
    const b = t.buffer.active;
    for (let y = 0; y < t.rows; y++) {
      const line = b.getLine(b.viewportY + y);
      if (line && line.translateToString(true).includes(want)) return true;
    }
    return false;
  };
  document.addEventListener("keydown", () => {
    const L = window.__lat;
    if (L.want !== null && L.t0 === null) L.t0 = performance.now();
  }, true);
  t.onRender(() => {
    const L = window.__lat;
    if (L.want !== null && L.t0 !== null && L.seen === null && has(L.want)) L.seen = performance.now();
  });
  return [t.cols, t.rows];
}"""


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tui", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)


class PtyConsole:
    """``disagg-tui console`` in a pseudo-terminal of ``cols`` × ``rows``; what it writes is read (and timed) here."""

    def __init__(self, cols: int, rows: int) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "truecolor"}
        self.proc = subprocess.Popen([sys.executable, "-m", "tui", "console", "--sim"], cwd=ROOT, env=env,
                                     stdin=slave, stdout=slave, stderr=slave, start_new_session=True, close_fds=True)
        os.close(slave)
        self.master = master
        self.chunks: list[tuple[float, bytes]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 1 << 16)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                self.chunks.append((time.perf_counter(), data))
                if len(self.chunks) > 4096:
                    del self.chunks[:2048]

    def seen(self, marker: bytes, since: float) -> float | None:
        """When ``marker`` first arrived after ``since`` (across chunk boundaries)."""
        with self.lock:
            chunks = [c for c in self.chunks if c[0] >= since]
        tail = b""
        for t, data in chunks:
            if marker in tail + data:
                return t
            tail = (tail + data)[-len(marker):]
        return None

    def wait_for(self, marker: bytes, timeout: float = 60.0) -> None:
        t0 = time.perf_counter()
        end = t0 + timeout
        while self.seen(marker, 0.0) is None:
            if time.perf_counter() > end:
                raise SystemExit(f"the terminal console never showed {marker!r}")
            time.sleep(0.1)

    def key(self, key: bytes, marker: bytes, limit_s: float = 5.0) -> float:
        t0 = time.perf_counter()
        os.write(self.master, key)
        while time.perf_counter() - t0 < limit_s:
            t = self.seen(marker, t0)
            if t is not None:
                return (t - t0) * 1000
            time.sleep(0.001)
        return limit_s * 1000

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        os.close(self.master)


def _browser_key(page: Any, key: str, marker: str, limit_s: float = 5.0) -> tuple[float, float]:
    """(keydown to rendered, keydown to the frame carrying it reaching the page), ms."""
    page.evaluate("w => { window.__lat = { want: w, t0: null, seen: null }; window.__recv = { want: w, at: null }; }",
                  marker)
    page.keyboard.press(key)
    try:
        page.wait_for_function("() => window.__lat.seen !== null", timeout=limit_s * 1000)
    except Exception:  # noqa: BLE001 - a key whose paint never came counts as the limit
        return limit_s * 1000, limit_s * 1000
    seen, recv = page.evaluate("() => [window.__lat.seen - window.__lat.t0, window.__recv.at - window.__lat.t0]")
    return float(seen), float(recv)


def _cpu(p: Any) -> float:
    import psutil

    try:
        t = p.cpu_times()
        return float(t.user + t.system)
    except psutil.Error:
        return 0.0


def _rss(p: Any) -> float:
    import psutil

    try:
        return float(p.memory_info().rss) / 2**20
    except psutil.Error:
        return 0.0


def _q(values: list[float], pct: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100)[pct - 1]


def _phase(label: str, procs: dict[str, list[Any]], term: PtyConsole, page: Any, markers: tuple[str, str],
           watch_s: float, presses: int) -> dict[str, Any]:
    """A watching block then a key block; per group of processes: CPU share in each, max RSS; key latencies."""
    out: dict[str, Any] = {"label": label, "cpu_watch": {}, "cpu_keys": {}, "rss": {}, "lat": {}}
    rss: dict[str, float] = dict.fromkeys(procs, 0.0)

    def sample_rss() -> None:
        for name, ps in procs.items():
            rss[name] = max(rss[name], sum(_rss(p) for p in ps))

    for block in ("watch", "keys"):
        c0 = {name: sum(_cpu(p) for p in ps) for name, ps in procs.items()}
        t0 = time.monotonic()
        if block == "watch":
            while time.monotonic() - t0 < watch_s:
                sample_rss()
                time.sleep(1.0)
        else:
            lat: dict[str, list[float]] = {"terminal": [], "browser": [], "to the page": []}
            down = True
            for _ in range(presses):
                marker = markers[1] if down else markers[0]  # down: the decode server's log; up: the prefill's
                lat["terminal"].append(term.key(DOWN if down else UP, marker.encode()))
                time.sleep(0.25)
                seen, recv = _browser_key(page, "ArrowDown" if down else "ArrowUp", marker)
                lat["browser"].append(seen)
                lat["to the page"].append(recv)
                time.sleep(0.25)
                down = not down
                sample_rss()
            out["lat"] = lat
        wall = time.monotonic() - t0
        out[f"cpu_{block}"] = {name: (sum(_cpu(p) for p in ps) - c0[name]) / wall for name, ps in procs.items()}
    out["rss"] = rss
    return out


def _apiserver_pid(log: str) -> str:
    text = Path(log).read_text(encoding="utf-8", errors="replace")
    m = re.search(r"\(APIServer pid=(\d+)\)", text)
    if m is None:
        raise SystemExit(f"no APIServer line in {log}")
    return f"(APIServer pid={m.group(1)})"


class Consoles:
    """The two consoles of a phase: a tab of the web server in Chromium, and a terminal console of the same size."""

    def __init__(self, server: Any, browser: Any, markers: tuple[str, str], *, bench: bool) -> None:
        import psutil

        from tests.web import browser as chromium

        self.page = chromium.new_page(browser)
        self.page.add_init_script(NET_HOOK)
        self.page.goto(server.url)
        words = ("Benchmark", "in flight") if bench else ("prefill-0", "decode-0")
        chromium.wait_for_text(self.page, *words, markers[0], timeout=120)
        self.cols, self.rows = self.page.evaluate(ON_RENDER)
        chromium.focus_terminal(self.page)
        self.term = PtyConsole(self.cols, self.rows)
        self.term.wait_for(markers[0].encode(), 120)
        if bench:
            self.term.wait_for(b"in flight", 120)
        time.sleep(3.0)  # both settled: first screens drawn, startup objects frozen
        (app,) = server.apps()
        browsers = [c for c in psutil.Process().children(recursive=True) if "chrom" in c.name().lower()]
        self.procs = {"terminal console": [psutil.Process(self.term.proc.pid)], "browser: its console": [app],
                      "browser: web server": [psutil.Process(server.proc.pid)], "Chromium (not the host's)": browsers}

    def close(self) -> None:
        self.page.close()
        self.term.close()


def _start_bench(a: argparse.Namespace) -> Any:
    """The benchmark, started as the console starts one (detached, its events where a console opened later finds
    and follows them)."""
    from tui.console.benchjob import start_bench
    from tui.core.host.base import HostOptions
    from tui.core.launch.state import StateStore
    from tui.core.models import Catalog

    base = Catalog.load().workload("decode-heavy")
    wl = base.with_overrides(num_prompts=a.streams, output_len=a.output_len, input_len=a.input_len,
                             name=f"load-{a.input_len}x{a.output_len}")
    return start_bench(StateStore(), HostOptions(sim=True), wl, {}, "ours")


def run(a: argparse.Namespace) -> int:
    from playwright.sync_api import sync_playwright

    from tests.helpers import layout_port_args
    from tests.web import browser as chromium
    from tests.web.webserver import WebServerProcess

    ports = layout_port_args()
    up = _cli("up", "--sim", "--sim-startup", "1", "--model", MODEL, "--topology", "1p1d", *ports)
    if up.returncode != 0:
        print(up.stderr[-2000:], file=sys.stderr)
        return 1
    bench: Any = None
    phases: list[dict[str, Any]] = []
    inflight = "?"
    try:
        (lay,) = json.loads(_cli("status", "--json", "--sim").stdout)["layouts"]
        logs = {p["name"]: p["log"] for p in lay["processes"]}
        markers = (_apiserver_pid(logs["prefill-0"]), _apiserver_pid(logs["decode-0"]))
        with WebServerProcess("--sim", "--max-sessions", "2") as server, sync_playwright() as p:
            browser = chromium.launch(p)
            c = Consoles(server, browser, markers, bench=False)
            phases.append(_phase("layout up, no benchmark", c.procs, c.term, c.page, markers, a.watch_s, a.presses))
            c.close()
            bench = _start_bench(a)
            c = Consoles(server, browser, markers, bench=True)  # opened on the running benchmark: they follow it
            phases.append(_phase(f"{a.streams} streams live", c.procs, c.term, c.page, markers, a.watch_s,
                                 a.presses))
            found = re.search(r"in flight (\d[\d,]*)", chromium.screen_text(c.page))
            inflight = found.group(1) if found else "?"
            c.close()
            browser.close()
    finally:
        if bench is not None:
            bench.stop()
            if bench.job is not None and bench.job.popen is not None:
                try:
                    bench.job.popen.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(bench.job.popen.pid, signal.SIGKILL)
        _cli("down", "--all", "--sim")
    _print(phases, a, c.cols, c.rows, inflight)
    if a.json:
        print(json.dumps(phases))
    return 0


def _print(phases: list[dict[str, Any]], a: argparse.Namespace, cols: int, rows: int, inflight: str) -> None:
    print(f"browser console vs terminal console: simulated 2x B200, 1P1D of {MODEL}, {cols}x{rows} each; "
          f"{a.streams} streams ({a.input_len}->{a.output_len}), {inflight} in flight when measured; "
          f"{a.watch_s:g} s watching + {a.presses} presses each per phase")
    for ph in phases:
        print(f"\n{ph['label']}")
        print(f"  {'process':<28} {'CPU % watching':>15} {'CPU % with keys':>16} {'RSS MiB (max)':>14}")
        for name in ph["rss"]:
            print(f"  {name:<28} {ph['cpu_watch'][name] * 100:>15.1f} {ph['cpu_keys'][name] * 100:>16.1f} "
                  f"{ph['rss'][name]:>14.1f}")
        host = ("browser: its console", "browser: web server")
        cw = sum(ph["cpu_watch"][n] for n in host)
        ck = sum(ph["cpu_keys"][n] for n in host)
        rss = sum(ph["rss"][n] for n in host)
        ref = "terminal console"
        print(f"  {'browser session on the host':<28} {cw * 100:>15.1f} {ck * 100:>16.1f} {rss:>14.1f}")
        print(f"  ratio host/terminal: CPU watching {cw / max(ph['cpu_watch'][ref], 1e-9):.2f}x, with keys "
              f"{ck / max(ph['cpu_keys'][ref], 1e-9):.2f}x, RSS {rss / max(ph['rss'][ref], 1e-9):.2f}x")
        lt, lb, ln = ph["lat"]["terminal"], ph["lat"]["browser"], ph["lat"]["to the page"]
        print(f"  {'key-to-paint ms':<28} {'p50':>7} {'p99':>7} {'ratio p50':>10} {'ratio p99':>10}")
        for name, v in (("terminal console", lt), ("browser, rendered", lb), ("  of which: to the page", ln)):
            print(f"  {name:<28} {_q(v, 50):>7.1f} {_q(v, 99):>7.1f} {_q(v, 50) / max(_q(lt, 50), 1e-9):>9.2f}x "
                  f"{_q(v, 99) / max(_q(lt, 99), 1e-9):>9.2f}x")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=4096)  # outlasts both phases on the 2-core VM
    p.add_argument("--watch-s", type=float, default=20.0)
    p.add_argument("--presses", type=int, default=30)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="web-session-") as tmp:
        for name in ("state", "data", "config"):
            os.environ[f"DISAGG_TUI_{name.upper()}_DIR"] = str(Path(tmp) / name)
        return run(a)


if __name__ == "__main__":
    sys.exit(main())
