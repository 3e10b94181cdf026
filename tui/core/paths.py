"""Where things live.

Shipped with the package: ``profiles/`` and ``recordings/`` (inside the wheel under ``tui/_shipped/``; in a source
checkout, at the repository root). The operator's files follow XDG, each overridable by an environment variable:

- ``$DISAGG_TUI_CONFIG_DIR`` or ``$XDG_CONFIG_HOME/disagg-tui``: profiles and playbook additions;
- ``$DISAGG_TUI_STATE_DIR`` or ``$XDG_STATE_HOME/disagg-tui``: the state file of running layouts, server logs,
  the simulated GPUs;
- ``$DISAGG_TUI_DATA_DIR`` or ``$XDG_DATA_HOME/disagg-tui``: results (``runs/``) and session recordings
  (``recordings/``).

Each of these folders is the operator's alone: what is written inside one goes through :mod:`tui.core.safewrite`
(:func:`root_for` names the folder), which refuses a folder that is group/world-writable or owned by another user
and never follows a symlink below it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tui.core import safewrite

APP = "disagg-tui"
_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # .../tui


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / fallback


def config_dir() -> Path:
    override = os.environ.get("DISAGG_TUI_CONFIG_DIR")
    return Path(override) if override else _xdg("XDG_CONFIG_HOME", ".config") / APP


def state_dir() -> Path:
    override = os.environ.get("DISAGG_TUI_STATE_DIR")
    return Path(override) if override else _xdg("XDG_STATE_HOME", ".local/state") / APP


def data_dir() -> Path:
    override = os.environ.get("DISAGG_TUI_DATA_DIR")
    return Path(override) if override else _xdg("XDG_DATA_HOME", ".local/share") / APP


def runs_dir() -> Path:
    override = os.environ.get("DISAGG_TUI_RUNS_DIR")
    return Path(override) if override else data_dir() / "runs"


def recordings_dir() -> Path:
    """Where session recordings go: ``$DISAGG_TUI_RECORDINGS_DIR`` or ``<data dir>/recordings``."""
    override = os.environ.get("DISAGG_TUI_RECORDINGS_DIR")
    return Path(override) if override else data_dir() / "recordings"


def roots() -> list[Path]:
    """The project's own folders, the outermost first: what :func:`root_for` finds a path under."""
    found = [Path(os.path.abspath(d())) for d in (state_dir, data_dir, config_dir, runs_dir, recordings_dir)]
    return sorted(dict.fromkeys(found), key=lambda d: len(d.parts))


def root_for(path: Path) -> Path | None:
    """The project folder (state, data or config; runs or recordings where they are set elsewhere) that holds
    ``path``, the outermost one: it is checked as a whole (this user's, writable by nobody else), and every folder
    below it is opened without following a link (``data/runs`` a symlink is refused: set ``DISAGG_TUI_RUNS_DIR``
    instead). None when ``path`` is in none of them (a file the operator named on the command line)."""
    p = Path(os.path.abspath(path))
    return next((r for r in roots() if p == r or r in p.parents), None)


def make_dirs(path: Path) -> Path:
    """Create ``path`` and its missing parents with mode 0700: state, server logs, results and the operator's
    config are theirs alone (a log or a plan may carry what the operator would not show). Inside a project folder
    (:func:`root_for`) the folder is checked first (this user's, writable by nobody else: ``safewrite.UnsafeDir``
    otherwise, once per process) and no symlink below it is followed. Existing folders keep their mode."""
    return safewrite.ensure_dir(Path(path), root=root_for(path))


def _shipped(name: str) -> Path:
    inside = _PACKAGE_DIR / "_shipped" / name
    if inside.is_dir():
        return inside
    return _PACKAGE_DIR.parent / name


def shipped_profiles_dir() -> Path:
    return _shipped("profiles")


def shipped_recordings_dir() -> Path:
    return _shipped("recordings")


def user_profiles_dir() -> Path:
    return config_dir() / "profiles"


def project_root() -> Path:
    """The directory that holds the ``tui`` package (put on PYTHONPATH for child processes)."""
    return _PACKAGE_DIR.parent


def python_module_argv(module: str) -> list[str]:
    """argv that runs one of our modules in a child Python (the simulated server, the proxy, the load generator)."""
    return [sys.executable, "-m", module]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child Python of ours: the parent's, with our package importable."""
    env = dict(os.environ)
    root = str(project_root())
    current = env.get("PYTHONPATH", "")
    parts = [p for p in current.split(os.pathsep) if p]
    if root not in parts:
        env["PYTHONPATH"] = os.pathsep.join([root, *parts])
    if extra:
        env.update(extra)
    return env
