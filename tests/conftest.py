"""Shared test fixtures: isolated XDG directories for every test, and the fixture folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simserver import SimServers

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "vllm-0.24.0-h200"
CPU = FIXTURES / "vllm-0.24.0-cpu"


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own config, state and data directories (never the operator's)."""
    root = tmp_path / "xdg"
    root.mkdir(mode=0o700)
    for name in ("config", "state", "data"):  # private, as the app wants them (tui.core.safewrite refuses others)
        (root / name).mkdir(mode=0o700)
    monkeypatch.setenv("DISAGG_TUI_CONFIG_DIR", str(root / "config"))
    monkeypatch.setenv("DISAGG_TUI_STATE_DIR", str(root / "state"))
    monkeypatch.setenv("DISAGG_TUI_DATA_DIR", str(root / "data"))
    monkeypatch.delenv("DISAGG_TUI_RUNS_DIR", raising=False)
    import sys

    state = sys.modules.get("tui.core.launch.state")
    if state is not None:  # the state file's warnings are the process's: none of an earlier test's is printed
        state.drain_notes()
    return root


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[SimServers]:
    """Simulated vLLM servers started by a test, killed (process groups) at teardown."""
    servers = SimServers(tmp_path)
    try:
        yield servers
    finally:
        servers.close()


# Property-based tests (tests/hardening/test_fuzz.py): a bounded number of examples each, and no per-example deadline
# (the shared 2-core machine makes timings noisy), so the whole suite stays within its time budget.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("disagg", max_examples=50, deadline=None, derandomize=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile("disagg")
