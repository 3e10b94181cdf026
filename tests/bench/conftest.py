"""Fixtures of the benchmark engine's tests: the stub server (in this process or as a child), fixture paths."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from tui.core import paths
from tui.sim.stubserver import StubConfig, StubServer


@pytest.fixture
async def stub() -> AsyncIterator[Callable[..., object]]:
    """Start stub servers in the test's event loop: ``url = await stub(mode=..., ...)``; closed afterwards."""
    servers: list[StubServer] = []

    async def start(**kw: object) -> tuple[str, StubServer]:
        srv = StubServer(StubConfig(**kw))  # type: ignore[arg-type]
        port = await srv.start("127.0.0.1", 0)
        servers.append(srv)
        return f"http://127.0.0.1:{port}", srv

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def stub_process() -> Iterator[Callable[..., str]]:
    """Start the stub as a child process (port 0): ``url = stub_process("--mode", "paced", ...)``; killed after."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> str:
        p = subprocess.Popen([*paths.python_module_argv("tui.sim.stubserver"), "--port", "0", *args],
                             stdout=subprocess.PIPE, text=True, env=paths.child_env())
        procs.append(p)
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.startswith("listening on "), line
        return line.split()[-1]

    yield start
    for p in procs:
        p.kill()
        p.wait(timeout=10)
