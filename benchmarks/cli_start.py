"""How long the CLI takes to start: ``disagg-tui --version``, help, and a plan, against references run alongside.

Each command runs as a fresh process ``--runs`` times (after ``--warmup`` unmeasured runs), hyperfine-style; the
table gives the median and the spread (min-max) of the wall time and the ratio of the median to two references
measured in the same run on the same machine: ``python -c pass`` (the interpreter's own start) and
``python -c 'import textual'`` (what loading the console's library costs). Then, for ``--version``, which of the
packages a start must not pay for when it does not use them were imported anyway (textual, rich, polars, httpx,
the simulator, the console).

The goal (issue 22): ``disagg-tui --version`` within 0.15 s. ``--root DIR`` measures another checkout (an older
commit in a ``git worktree``) with this interpreter, for a before/after.

    python benchmarks/cli_start.py [--runs 15] [--warmup 2] [--root DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 0.15
#: what a start must not import unless the command uses it
HEAVY = ("textual", "rich", "polars", "httpx", "tui.sim", "tui.console")


def _time(argv: list[str], env: dict[str, str], cwd: Path, runs: int, warmup: int) -> list[float]:
    out = []
    for i in range(warmup + runs):
        t0 = time.perf_counter()
        done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        dt = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-400:]}")
        if i >= warmup:
            out.append(dt)
    return out


def _imported(root: Path, env: dict[str, str], args: list[str]) -> list[str]:
    """The HEAVY packages ``disagg-tui ARGS`` imported (the CLI's main run in a child that reports sys.modules)."""
    code = ("import sys, contextlib, io\n"
            "from tui.cli.main import main\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main({args!r})\n"
            f"print(' '.join(n for n in {HEAVY!r} if n in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True,
                          check=False)
    return done.stdout.split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose tui/ is measured")
    a = ap.parse_args()
    root = a.root.resolve()
    tmp = tempfile.mkdtemp(prefix="cli-start-")
    env = {**os.environ, "PYTHONPATH": str(root), "DISAGG_TUI_STATE_DIR": f"{tmp}/state",
           "DISAGG_TUI_CONFIG_DIR": f"{tmp}/config", "DISAGG_TUI_DATA_DIR": f"{tmp}/data"}
    py = sys.executable
    cli = [py, "-m", "tui"]
    cases = [
        ("python -c pass", [py, "-c", "pass"]),
        ("python -c 'import textual'", [py, "-c", "import textual"]),
        ("disagg-tui --version", [*cli, "--version"]),
        ("disagg-tui --help", [*cli, "--help"]),
        ("disagg-tui up --help", [*cli, "up", "--help"]),
        ("disagg-tui plan --sim (tp1)", [*cli, "plan", "--sim", "--model", "dummy-qwen3-8b", "--topology", "tp1",
                                         "--no-preflight"]),
    ]
    times = {name: _time(argv, env, root, a.runs, a.warmup) for name, argv in cases}
    base = statistics.median(times["python -c pass"])
    textual = statistics.median(times["python -c 'import textual'"])
    print(f"{a.runs} runs each after {a.warmup} warm-up; tui/ from {root}")
    print(f"{'command':<30} {'median s':>9} {'min-max s':>13} {'× python':>9} {'× textual':>10}")
    for name, _ in cases:
        t = times[name]
        med = statistics.median(t)
        print(f"{name:<30} {med:9.3f} {min(t):6.3f}-{max(t):.3f} {med / base:9.2f} {med / textual:10.2f}")
    version = statistics.median(times["disagg-tui --version"])
    print(f"\n--version: {version:.3f} s, goal ≤ {GOAL_S} s: {'met' if version <= GOAL_S else 'NOT met'}")
    for args in (["--version"], ["up", "--help"]):
        heavy = _imported(root, env, args)
        said = ", ".join(heavy) if heavy else "none of " + ", ".join(HEAVY)
        print(f"imported by 'disagg-tui {' '.join(args)}': {said}")


if __name__ == "__main__":
    main()
