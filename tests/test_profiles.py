"""Profiles: shipped ones load; every broken file gives one line naming file, line and field; exit code 2."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import expectation
from tui.core.errors import InputError
from tui.core.models import Catalog, parse_model_profile, parse_workloads_file
from tui.core.yamlio import load_file, load_text

BAD = Path(__file__).parent / "fixtures" / "bad_profiles"


def test_shipped_profiles_and_workloads() -> None:
    cat = Catalog.load()
    assert {"qwen3.6-27b-nvfp4", "gemma-4-26b-a4b-fp8", "dummy-qwen3-8b"} <= set(cat.models)
    q = cat.models["qwen3.6-27b-nvfp4"]
    assert q.model == "nvidia/Qwen3.6-27B-NVFP4" and q.is_hybrid and not q.is_moe
    assert q.quantization == "nvfp4" and q.kv_cache_dtype == "fp8" and q.min_compute_capability == 10.0
    assert "0.24.0" in q.checked_with_vllm
    g = cat.models["gemma-4-26b-a4b-fp8"]
    assert g.is_moe and g.model == "RedHatAI/gemma-4-26B-A4B-it-FP8-Dynamic"
    d = cat.models["dummy-qwen3-8b"]
    assert d.load_format == "dummy" and d.served_name == "dummy-qwen3-8b"
    dh, ph = cat.workloads["decode-heavy"], cat.workloads["prefill-heavy"]
    assert (dh.input_len, dh.output_len, dh.num_prompts, dh.ignore_eos) == (512, 2048, 128, True)
    assert (ph.input_len, ph.output_len) == (7500, 200)
    assert math.isinf(dh.request_rate)


def test_dummy_model_folder_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISAGG_TUI_DUMMY_MODEL_DIR", "/data/qwen3-8b-shape")
    assert Catalog.load().model("dummy-qwen3-8b").model == "/data/qwen3-8b-shape"
    monkeypatch.delenv("DISAGG_TUI_DUMMY_MODEL_DIR")
    assert Catalog.load().model("dummy-qwen3-8b").model == "/tmp/model"


def test_user_profile_overrides_shipped(isolated_dirs: Path) -> None:
    shipped = Path(Catalog.load().models["dummy-qwen3-8b"].source)
    user = isolated_dirs / "config" / "profiles" / "models"
    user.mkdir(parents=True)
    text = shipped.read_text().replace("title: Dummy Qwen3-8B (bf16, random weights)", "title: mine")
    (user / "dummy.yaml").write_text(text)
    assert Catalog.load().models["dummy-qwen3-8b"].title == "mine"


def test_model_by_path() -> None:
    shipped = Catalog.load().models["gemma-4-26b-a4b-fp8"].source
    assert Catalog.load().model(shipped).id == "gemma-4-26b-a4b-fp8"


@pytest.mark.parametrize("path", sorted(BAD.glob("*.yaml")), ids=lambda p: p.stem)
def test_broken_profiles_name_file_line_and_field(path: Path) -> None:
    line, field, text = expectation(path)
    with pytest.raises(InputError) as info:
        parse_model_profile(load_file(path), path)
    err = info.value
    assert err.file == str(path)
    assert err.line == line, err.one_line()
    if field:  # a syntax error names the field it broke in too (the nearest key at or above its line)
        assert err.field == field, err.one_line()
    assert text in err.one_line()
    assert "\n" not in err.one_line()


def test_broken_profile_via_cli_exits_2_with_one_line(isolated_dirs: Path) -> None:
    path = BAD / "bad_type.yaml"
    out = subprocess.run([sys.executable, "-m", "tui", "plan", "--sim", "--model", str(path), "--topology", "tp1"],
                         capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    assert f"{path}:16: field 'vllm.max_model_len'" in lines[0]


def test_workload_file_errors() -> None:
    with pytest.raises(InputError, match="request_rate"):
        parse_workloads_file(load_text("name: w\ninput_len: 10\noutput_len: 5\nrequest_rate: fast\n", "w.yaml"),
                             "w.yaml")
    with pytest.raises(InputError, match=r"w\.yaml:3: field 'workloads\.a\.output_len'"):
        parse_workloads_file(load_text("workloads:\n  a:\n    output_len: -1\n    input_len: 3\n", "w.yaml"),
                             "w.yaml")
    one = parse_workloads_file(load_text("name: w\ninput_len: 10\noutput_len: 5\nrequest_rate: 2.5\n", "w.yaml"),
                               "w.yaml")
    assert one["w"].request_rate == 2.5
