"""tui/core (and the simulated host) never import Textual: checked in a fresh interpreter."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import tui.core
import tui.sim

ROOT = Path(__file__).resolve().parent.parent


def _modules(pkg: object) -> list[str]:
    path = pkg.__path__  # type: ignore[attr-defined]
    prefix = pkg.__name__ + "."  # type: ignore[attr-defined]
    return [m.name for m in pkgutil.walk_packages(path, prefix) if not m.name.endswith("__main__")]


def test_core_and_sim_never_import_textual() -> None:
    modules = _modules(tui.core) + _modules(tui.sim)
    assert "tui.core.plan.planner" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print('TEXTUAL' if bad else 'CLEAN', bad[:3])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("CLEAN"), out.stdout


def test_no_textual_import_statement_in_core() -> None:
    for base in (ROOT / "tui" / "core", ROOT / "tui" / "sim"):
        for path in base.rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert "import textual" not in text and "from textual" not in text, path


def test_core_alone_never_loads_the_simulator_or_a_front_end() -> None:
    """The fake plugs into the core, not the other way round: every core module imported, no tui.sim/cli/console."""
    modules = _modules(tui.core)
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "front = (['tui', 'sim'], ['tui', 'cli'], ['tui', 'console'], ['tui', 'hosts'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[:2] in front)\n"
        "print('LEAK' if bad else 'CLEAN', bad[:3])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("CLEAN"), out.stdout
