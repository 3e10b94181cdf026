"""Two defects seen on the real H200: a run's fingerprint names the vLLM of the layout it ran against (not the
shell's PATH), and a workload changed by flags gets a description of what it now is."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from tui.cli.cmd_bench import changed_description, layout_vllm
from tui.core.launch.state import LayoutRecord
from tui.core.models import Workload


def test_fingerprint_names_the_layouts_vllm(tmp_path: Path) -> None:
    py = tmp_path / "venv" / "bin" / "python"  # the layout's environment: answers like importlib.metadata there
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\necho 'vllm 0.24.0'\necho 'nixl 1.5.1'\necho 'flashinfer-cubin -'\n")
    exe = py.parent / "vllm"
    exe.write_text(f"#!{py}\nfrom vllm.entrypoints.cli.main import main\n")
    for f in (py, exe):
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    rec = LayoutRecord(id="x", created=time.time(), simulated=False, plan={"vllm_executable": str(exe)},
                       processes=[], status="ready", owner_pid=os.getpid(), owner_user="u")
    assert layout_vllm(rec) == {"vllm": "0.24.0", "vllm_executable": str(exe), "nixl": "1.5.1"}


def test_a_workload_changed_by_flags_is_described_as_it_is() -> None:
    base = Workload("decode-heavy", 512, 2048, description="Long outputs, short prompts (the seed's 512 in / 2048 out)")
    assert changed_description(base, base) == base.description
    w = base.with_overrides(input_len=8192, output_len=128, name="random-8192x128")
    text = changed_description(base, w)
    assert "512 in / 2048 out" not in text
    assert text.startswith("128 random prompts of 8192 tokens → 128 output tokens, all at once")
    assert "input_len 512→8192, output_len 2048→128" in text
