"""Test helper: start simulated vLLM servers as real subprocesses on free ports, and clean them up.

Each server runs in its own session (process group), so teardown kills the whole group with everything the server
forked; ports come from binding port 0, never fixed numbers (tests run concurrently on shared machines).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parent.parent


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # zombies still count as members until reaped: look for live ones
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@dataclass
class SimServer:
    proc: subprocess.Popen[bytes]
    port: int
    out: Path
    err: Path
    state_dir: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stdout(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(encoding="utf-8", errors="replace")

    def log(self) -> str:
        return self.stdout() + self.stderr()

    def health(self) -> int | None:
        try:
            return httpx.get(self.url + "/health", timeout=2.0).status_code
        except httpx.TransportError:
            return None

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.health() == 200:
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            time.sleep(0.05)
        raise AssertionError(f"server not ready after {timeout}s:\n{self.log()[-4000:]}")

    def wait_exit(self, timeout: float = 20.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"server still running after {timeout}s:\n{self.log()[-3000:]}") from None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


class SimServers:
    """Factory fixture: ``start(...)`` launches one; everything is killed at teardown."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.servers: list[SimServer] = []

    def start(self, *args: str, model: str = "/tmp/model", gpu: str = "h200", gpus: int = 2,
              startup_s: float = 0.35, clock: float = 1.0, faults: str = "", env: dict[str, str] | None = None,
              profile: dict[str, object] | None = None, port: int | None = None,
              defaults: bool = True, merge: bool = False, devices: str | None = None) -> SimServer:
        port = port or free_port()
        n = len(self.servers)
        state = Path(os.environ.get("DISAGG_TUI_STATE_DIR", str(self.tmp / "state")))
        child_env = dict(os.environ)
        child_env.update({"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "DISAGG_SIM_STATE_DIR": str(state),
                          "DISAGG_SIM_GPU": gpu, "DISAGG_SIM_GPUS": str(gpus), "DISAGG_SIM_STARTUP_S": str(startup_s),
                          "DISAGG_SIM_CLOCK": str(clock), "DISAGG_SIM_SERVER_NAME": f"server-{n}"})
        child_env.pop("CUDA_VISIBLE_DEVICES", None)
        if devices is not None:
            child_env["CUDA_VISIBLE_DEVICES"] = devices
        if faults:
            child_env["DISAGG_SIM_FAULTS"] = faults
        if profile is not None:
            child_env["DISAGG_SIM_PROFILE_JSON"] = json.dumps(profile)
        child_env.update(env or {})
        argv = [sys.executable, "-m", "tui.sim.vllm", "serve", model, "--host", "127.0.0.1", "--port", str(port)]
        if defaults:
            argv += ["--served-model-name", "dummy-qwen3-8b", "--load-format", "dummy", "--max-model-len", "16384",
                     "--gpu-memory-utilization", "0.85"]
        argv += list(args)
        out = self.tmp / f"sim{n}.out"
        err = self.tmp / f"sim{n}.err"
        with out.open("wb") as fo, err.open("wb") as fe:
            proc = subprocess.Popen(argv, stdout=fo, stderr=fo if merge else fe, env=child_env, cwd=ROOT,
                                    start_new_session=True)
        server = SimServer(proc=proc, port=port, out=out, err=err, state_dir=state, env=child_env)
        self.servers.append(server)
        return server

    def close(self) -> None:
        for s in self.servers:
            s.kill()
