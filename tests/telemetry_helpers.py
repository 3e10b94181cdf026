"""Helpers for the telemetry tests: real /metrics captures, small local HTTP servers, process trees."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "vllm-0.24.0-h200"
CPU = FIXTURES / "vllm-0.24.0-cpu"
_LOG_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[")


def metrics_captures() -> list[Path]:
    """Every real /metrics capture in the fixtures."""
    files = set(H200.glob("bench/*_metrics_*.txt"))
    files |= set(H200.glob("bench/run1_samples_before_traffic/*_metrics_snapshots/metrics_*.txt"))
    files |= set(H200.glob("rerun/bench/*_metrics_*.txt"))
    files |= set(H200.glob("rerun/bench/*_metrics_during/metrics_*.txt"))
    files |= set(H200.glob("endpoints/GET_metrics*.txt"))
    files |= set(H200.glob("two_servers/port*_GET_metrics.txt"))
    files |= set(CPU.glob("*.prom"))
    return sorted(files)


def exposition_text(path: Path) -> str:
    """The exposition body of a capture: HTTP head removed (its content-length checked), or the log lines the
    CPU captures carry before the first ``# HELP`` removed (each checked to be a vLLM log line)."""
    raw = path.read_bytes()
    if raw.startswith(b"HTTP/"):
        head, _, body = raw.partition(b"\r\n\r\n")
        m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        assert m is not None, path
        assert int(m.group(1)) == len(body), f"{path}: body truncated"
        return body.decode("utf-8")
    text = raw.decode("utf-8")
    if path.suffix == ".prom":
        start = text.index("# HELP")
        for line in text[:start].splitlines():
            assert _LOG_LINE.match(line), f"{path}: unexpected preamble line {line!r}"
        return text[start:]
    return text


def captured_at(text: str) -> float:
    m = re.match(r"# captured_at_epoch=([\d.]+)", text)
    assert m is not None
    return float(m.group(1))


def during_series(bench: str) -> list[Path]:
    return sorted((H200 / "rerun" / "bench" / f"{bench}_metrics_during").glob("metrics_*.txt"))


# --- a tiny HTTP/1.1 server on a free port ----------------------------------------------------------------------


Handler = Callable[[str, str], "tuple[int, str, bytes] | None"]  # (method, path) → (status, type, body); None: hang


@dataclass
class LocalServer:
    """An asyncio HTTP/1.1 server (keep-alive) on 127.0.0.1, port 0; ``handler`` decides each answer."""

    handler: Handler
    port: int = 0
    requests: list[str] = field(default_factory=list)
    _server: asyncio.base_events.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)
    _closing: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> LocalServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        self._closing.set()
        await asyncio.sleep(0)  # let hanging handlers return before their connections go
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                length = 0
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    if h.lower().startswith(b"content-length:"):
                        length = int(h.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                self.requests.append(path)
                answer = self.handler(method, path)
                if answer is None:
                    await self._closing.wait()  # hang until the server closes
                    return
                status, ctype, body = answer
                reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}.get(status, "X")
                writer.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}"
                             f"\r\n\r\n".encode() + body)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()


# --- process trees ---------------------------------------------------------------------------------------------

_ENGINE = """
import subprocess, sys, time
kids = []
for title in sys.argv[1:]:
    argv0 = title if title != "-" else "sleep"
    kids.append(subprocess.Popen([argv0, "600"], executable="/bin/sleep"))
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(600)
"""

_API = """
import subprocess, sys, time
engine = subprocess.Popen(["VLLM::EngineCore", "-c", sys.argv[1], *sys.argv[3:]], executable=sys.executable,
                          stdout=subprocess.PIPE, text=True)
pids = engine.stdout.readline().split()
print(engine.pid, *pids, flush=True)
if sys.argv[2] == "exit":
    sys.stdin.readline()
    sys.exit(0)
time.sleep(600)
"""


@dataclass
class Tree:
    api: subprocess.Popen[str]
    api_pid: int
    engine_pid: int
    worker_pids: list[int]
    create_time: float

    def kill(self) -> None:
        for pid in (*self.worker_pids, self.engine_pid, self.api_pid):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        try:
            self.api.wait(5)
        except subprocess.TimeoutExpired:
            pass


def spawn_tree(worker_titles: list[str], *, api_exits: bool = False) -> Tree:
    """API server (python) → engine (``VLLM::EngineCore``) → workers (``sleep`` titled as given; ``-``: untitled).

    The API process starts its own session, as the supervisor starts servers. With ``api_exits`` it leaves its
    engine behind (reparented, same process group).
    """
    api = subprocess.Popen([sys.executable, "-c", _API, _ENGINE, "exit" if api_exits else "stay", *worker_titles],
                           stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True, start_new_session=True)
    assert api.stdout is not None and api.stdin is not None
    line = api.stdout.readline().split()
    engine_pid, workers = int(line[0]), [int(p) for p in line[1:]]
    create_time = psutil.Process(api.pid).create_time()
    if api_exits:
        api.stdin.write("go\n")
        api.stdin.flush()
        api.wait(10)
    return Tree(api=api, api_pid=api.pid, engine_pid=engine_pid, worker_pids=workers, create_time=create_time)
