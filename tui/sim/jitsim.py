"""A simulated FlashInfer JIT compile: what the real H200 did for 85 s while vLLM's log said nothing.

``ninja -v -C <cache>/cached_ops/sampling`` under the server with three ``nvcc`` jobs (sampling, renorm, the
binding), each a real process named as the real ones (``/proc/<pid>/cmdline`` rewritten), using a little CPU and
writing its object file into the cache directory as it goes; at the end ninja links ``sampling.so`` and exits. A
cache that already holds ``sampling.so`` compiles nothing (a warm start). The cache lives under
``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`` (the simulated host points it into its state directory), else
``$HOME/.cache/flashinfer``, as FlashInfer's own ``jit/env.py`` does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from tui.sim.procs import set_pdeathsig, set_title

FLASHINFER_VERSION = "0.6.12"
#: the real compile's length (fixtures vllm-0.24.0-h200-default-env: ninja from 08:11:36 to 08:13:01)
JIT_S = 85.0
SOURCES = ("sampling", "renorm", "flashinfer_sampling_binding")


def module_dir(env: Mapping[str, str], arch: str = "90a", module: str = "sampling") -> Path:
    base = env.get("FLASHINFER_WORKSPACE_BASE") or env.get("HOME") or os.path.expanduser("~")
    return Path(base) / ".cache" / "flashinfer" / FLASHINFER_VERSION / arch / "cached_ops" / module


def is_warm(env: Mapping[str, str], arch: str = "90a") -> bool:
    return (module_dir(env, arch) / "sampling.so").is_file()


def start(env: Mapping[str, str], wall_s: float, arch: str = "90a") -> int:
    """Fork the ninja process (it forks its nvcc jobs); returns its pid. It ends by itself after ``wall_s``."""
    d = module_dir(env, arch)
    d.mkdir(parents=True, exist_ok=True)
    (d / "build.ninja").write_text("".join(f"build {s}.cuda.o: nvcc csrc/{s}.cu\n" for s in SOURCES)
                                   + "build sampling.so: link " + " ".join(f"{s}.cuda.o" for s in SOURCES) + "\n")
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        set_pdeathsig(signal.SIGKILL)
        set_title(f"ninja -v -C {d}")
        deadline = time.monotonic() + wall_s
        jobs = [_job(d, s, deadline) for s in SOURCES]
        for j in jobs:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(j, 0)
        (d / "sampling.so").write_bytes(b"\x7fELF" + b"\0" * 65536)
    except BaseException:  # noqa: BLE001 - a forked child never returns into the server's code
        code = 1
    os._exit(code)


def _job(d: Path, source: str, deadline: float) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        set_pdeathsig(signal.SIGKILL)
        set_title(f"/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -MF {d}/csrc_{source}.cuda.o.d "
                  f"-c csrc/{source}.cu -o {source}.cuda.o")
        with open(d / f"{source}.cuda.o", "wb") as out:
            while time.monotonic() < deadline:
                x = 0
                for i in range(20000):  # a little CPU, as a compiler uses (kept small: the machine is shared)
                    x ^= i * i
                out.write(x.to_bytes(8, "little") * 512)
                out.flush()
                time.sleep(0.05)
    except BaseException:  # noqa: BLE001
        os._exit(1)
    os._exit(0)


def wait(pid: int, timeout_s: float) -> None:
    """Reap the ninja process (kill it if it outlives ``timeout_s``)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
