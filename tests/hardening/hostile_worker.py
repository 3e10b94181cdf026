"""Runs CLI cases in this process under a memory limit and a per-case time limit; one JSON line per case.

Used by ``tests/hardening/test_hostile_shapes.py`` (``python tests/hardening/hostile_worker.py < cases.json``):
the hostile inputs (bombs, special files) that could hang the pytest worker or take all of its memory run here.

Input on stdin, one JSON object::

    {"margin_mib": 768 | null,           # RLIMIT_AS = the virtual size once the CLI is imported + this (null: none)
     "cases": [{"id": "...", "argv": [...], "env": {"NAME": "value" | null}, "timeout_s": 20}, ...]}

Output on stdout, one JSON line each: first ``{"ready": ...}`` (the virtual size the limit was set from, the limit),
then per case ``{"start": ID}`` as it starts (so the caller knows which case a hang killed) and its result:
``{"id", "outcome", "code", "errors", "err", "out_len", "err_len", "esc", "traceback", "wall_s", "cpu_s",
"peak_rss_mib", "vm_peak_mib"}``. ``outcome`` is ``returned`` (main() returned or exited), ``alarm`` (the time
limit: a hang), ``MemoryError`` or the name of any other exception that escaped main().

The peak RSS of each case is the kernel's high-water mark (``VmHWM``), reset before the case by writing 5 to
``/proc/self/clear_refs``; ``resource.getrusage`` gives the process's lifetime peak, reported in ``ready`` and as
``maxrss_mib`` per case for comparison.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
MiB = 1 << 20


class Hang(BaseException):
    """The case ran past its time limit (BaseException: no ``except Exception`` inside the CLI swallows it)."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise Hang()


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _warm_imports() -> None:
    """What the CLI's commands import lazily, imported before the limit is set (the limit bounds what a case
    allocates, not the size of the interpreter's modules)."""
    import polars  # noqa: F401
    import yaml  # noqa: F401
    import zstandard  # noqa: F401

    import tui.cli.main  # noqa: F401
    from tui.cli.main import COMMAND_MODULES, build_parser

    build_parser()
    assert COMMAND_MODULES
    for name in ("tui.core.record.reader", "tui.core.record.bundle", "tui.core.record.bundle_install",
                 "tui.core.bench.store", "tui.core.playbook.book", "tui.core.models.modelsrc",
                 "tui.core.models.hfcache", "tui.core.launch.state", "tui.core.launch.lifecycle", "tui.core.models"):
        with contextlib.suppress(ImportError):
            __import__(name)


def _run(case: dict[str, Any]) -> dict[str, Any]:
    from tui.cli.main import main

    for key, value in (case.get("env") or {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    out, err = io.StringIO(), io.StringIO()
    outcome = "returned"
    code: int | None = None
    reset = _reset_peak()
    t0, c0 = time.monotonic(), time.process_time()
    signal.alarm(int(case.get("timeout_s", 20)))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(case["argv"]))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except Hang:
        outcome = "alarm"
    except MemoryError:
        outcome = "MemoryError"
    except BaseException as exc:  # what escaped main() is the finding: reported, never raised
        outcome = type(exc).__name__
        with contextlib.suppress(BaseException):
            err.write(traceback.format_exc(limit=8))
    finally:
        signal.alarm(0)
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    o, e = out.getvalue(), err.getvalue()
    lines = [ln for ln in e.splitlines() if ln.strip()]
    warned = ("warning:", "disagg-tui: warning")
    full = [ln for ln in lines if not ln.startswith(warned)]
    errors = [ln[:600] for ln in full]
    warnings = [ln[:600] for ln in lines if ln.startswith(warned)]
    return {"id": case["id"], "outcome": outcome, "code": code, "errors": errors[:5], "warnings": warnings[:5],
            "error_len": len(full[0]) if full else 0,
            "err": e[-1500:], "out_head": o[:300], "out": o[:20_000], "out_len": len(o), "err_len": len(e),
            "esc": "\x1b" in o or "\x1b" in e,
            "traceback": "\nTraceback (most recent call last)" in "\n" + e, "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3), "peak_rss_mib": round(_status_kib("VmHWM") / 1024, 1) if reset else None,
            "vm_peak_mib": round(_status_kib("VmPeak") / 1024, 1),
            "maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> int:
    spec = json.load(sys.stdin)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    _warm_imports()
    vm = _status_kib("VmSize") * 1024
    margin = spec.get("margin_mib")
    limit = None
    if margin is not None:
        limit = vm + int(margin) * MiB
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _on_alarm)
    print(json.dumps({"ready": True, "vm_mib": round(vm / MiB, 1), "limit_mib": limit and round(limit / MiB, 1),
                      "rss_mib": round(_status_kib("VmRSS") / 1024, 1)}), flush=True)
    for case in spec["cases"]:
        print(json.dumps({"start": case["id"]}), flush=True)
        result = _run(case)
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
