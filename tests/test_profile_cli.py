"""``disagg-tui profile new|list|show`` and ``plan``/``up --sim`` with models derived from a folder or a (fake)
Hugging Face cache: fit checks use the derived sizes, profiles written by ``profile new`` load back strictly and
plan the same, errors are one line with exit 2."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers import layout_port_args
from tests.model_fixtures import hf_cache, model_folder
from tests.test_modeldir import EXPECTED
from tui.cli.cmd_bench import layout_model_ref, profile_vocab
from tui.cli.context import CliContext
from tui.cli.main import main
from tui.core.launch.state import StateStore
from tui.core.models import Catalog, parse_model_profile
from tui.core.models.modelsrc import derive_ref
from tui.core.yamlio import load_file

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("disagg-tui: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_new_loads_back_strictly_and_plans_the_same(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             name: str) -> None:
    folder = model_folder(tmp_path, name)
    target = tmp_path / "out" / f"{name}.yaml"
    code, out, err = _run(capsys, "profile", "new", "--from", str(folder), "-o", str(target))
    assert code == 0, err
    warnings = [ln for ln in err.splitlines() if "warning" in ln]
    assert f"wrote {target}: profile " in err
    assert [w for w in warnings if "ships its own Python code" not in w] == []  # auto_map: never trusted on its word
    text = target.read_text()
    assert text.startswith("# Model profile derived by disagg-tui from") and "# config.json num_hidden_layers" in text
    written = parse_model_profile(load_file(target), target)  # strict: unknown keys or bad values would raise
    derived = derive_ref(str(folder), Catalog.load())
    assert derived is not None
    assert written.to_dict() == derived.profile().to_dict()
    plans = []
    for ref in (str(folder), str(target)):
        code, out, err = _run(capsys, "plan", "--sim", "--model", ref, "--topology", "1p1d", "--no-preflight")
        assert code == 0, err
        plans.append(out)
    assert plans[0] == plans[1] and f"vllm serve {folder} " in plans[0]
    assert ("VLLM_SSM_CONV_STATE_LAYOUT=DS" in plans[0]) == (EXPECTED[name]["attention"] == "hybrid")


def test_plan_fit_checks_use_the_derived_sizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jamba = model_folder(tmp_path, "jamba-v0.1")
    weights = 103139180544 / GIB
    code, _out, err = _run(capsys, "plan", "--sim", "--model", str(jamba), "--topology", "1p1d",
                           "--gpu-memory-utilization", "0.5")
    assert code == 2
    assert f"jamba-v0.1 does not fit: {weights:.1f} GiB of weights per GPU" in _error_line(err)
    code, _out, err = _run(capsys, "plan", "--sim", "--model", str(jamba), "--topology", "tp2",
                           "--gpu-memory-utilization", "0.25")
    assert code == 2 and f"{weights / 2:.1f} GiB of weights per GPU" in _error_line(err)
    qwen = model_folder(tmp_path, "qwen3-8b")
    code, _out, err = _run(capsys, "plan", "--sim", "--model", str(qwen), "--topology", "tp1",
                           "--max-model-len", "2000000")
    kv_need = 2 * 36 * 8 * 128 * 2 * 2000000 / GIB
    assert code == 2 and f"one request of max_model_len 2000000 needs {kv_need:.1f} GiB" in _error_line(err)
    (qwen / "tokenizer_config.json").unlink()  # no tokenizer: planned, with a warning naming the fix
    code, _out, err = _run(capsys, "plan", "--sim", "--model", str(qwen), "--topology", "tp1", "--no-preflight")
    assert code == 0 and f"warning: {qwen}: no tokenizer files" in err and "--tokenizer DIR" in err
    # NVFP4 needs Blackwell: the derived profile is refused on the simulated H200
    nv = model_folder(tmp_path, "qwen3.6-27b-nvfp4")
    code, _out, err = _run(capsys, "plan", "--sim", "--sim-gpu", "h200", "--model", str(nv), "--topology", "tp1")
    assert code == 2 and "is NVFP4, which needs compute capability 10.0" in _error_line(err)


def test_plan_repo_id_from_a_fake_hf_cache(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    hf_cache(tmp_path / "hf", "Qwen/Qwen3-30B-A3B-FP8", "qwen3-30b-a3b-fp8")
    code, out, err = _run(capsys, "plan", "--sim", "--model", "Qwen/Qwen3-30B-A3B-FP8", "--topology", "dp2", "--json")
    assert code == 0, err
    plan = json.loads(out)["plan"]
    (server,) = plan["servers"]
    snapshot = str(tmp_path / "hf" / "hub" / "models--Qwen--Qwen3-30B-A3B-FP8" / "snapshots" /
                   "0123456789abcdef0123456789abcdef01234567")
    assert server["argv"][2] == snapshot and plan["profile_id"] == "qwen3-30b-a3b-fp8"
    assert server["argv"][server["argv"].index("--served-model-name") + 1] == "Qwen/Qwen3-30B-A3B-FP8"
    assert "qwen3-30b-a3b-fp8 is MoE: MoE + data parallel did not start on vLLM 0.24" in err
    code, out, err = _run(capsys, "plan", "--sim", "--model", "Qwen/Qwen3-30B-A3B-FP8", "--topology", "1p1d")
    assert code == 0 and "VLLM_SSM_CONV_STATE_LAYOUT" not in out and "is MoE" not in err
    code, _out, err = _run(capsys, "plan", "--sim", "--model", "Qwen/Qwen3-235B-A22B", "--topology", "tp1")
    line = _error_line(err)
    assert code == 2 and "Qwen/Qwen3-235B-A22B: not a model folder here and not in the Hugging Face cache" in line
    assert "huggingface-cli download Qwen/Qwen3-235B-A22B" in line


def test_profile_list_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    hf_cache(tmp_path / "hf", "mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b-instruct-v0.1")
    models = tmp_path / "models"
    model_folder(models, "jamba-v0.1")
    (models / "empty").mkdir()  # no config.json: not a model folder, not listed
    code, out, err = _run(capsys, "profile", "list", "--dir", str(models), "--json")
    assert code == 0, err
    rows = {r["id"]: r for r in json.loads(out)["models"]}
    assert rows["mixtral-8x7b-instruct-v0.1"]["source"] == "hf-cache" and rows["jamba-v0.1"]["source"] == "folder"
    assert rows["gemma-4-26b-a4b-fp8"]["source"] == "shipped" and "empty" not in rows
    assert rows["jamba-v0.1"]["problem"] is None and rows["jamba-v0.1"]["path"] == str(models / "jamba-v0.1")
    code, out, _err = _run(capsys, "profile", "list", "--dir", str(models))
    assert code == 0 and "hf-cache  mistralai/Mixtral-8x7B-Instruct-v0.1" in out
    code, out, err = _run(capsys, "profile", "show", "mistralai/Mixtral-8x7B-Instruct-v0.1", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["sizes"]["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    assert shown["profile"]["weights_gib"] == pytest.approx(93405585408 / GIB, abs=0.0006)
    assert shown["profile"]["architecture"]["num_experts"] == 8
    code, out, _err = _run(capsys, "profile", "show", "qwen3.6-27b-nvfp4")  # a shipped one, same command
    assert code == 0 and "KV 32,768 bytes per token (16 KV layers x 4 KV heads x 256 x 1 bytes x 2)" in out


def test_profile_new_save_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], isolated_dirs: Path
                                     ) -> None:
    folder = model_folder(tmp_path, "mixtral-8x7b-instruct-v0.1")
    code, out, err = _run(capsys, "profile", "new", "--from", str(folder / "config.json"), "--save", "--id", "mix")
    assert code == 0, err
    saved = isolated_dirs / "config" / "profiles" / "models" / "mix.yaml"
    assert saved.is_file() and "use --model mix" in err
    code, out, err = _run(capsys, "plan", "--sim", "--model", "mix", "--topology", "tp2", "--no-preflight")
    assert code == 0 and f"vllm serve {folder} " in out
    code, out, err = _run(capsys, "profile", "new", "--from", str(folder), "-o", str(saved))
    assert code == 2 and "exists; give --force" in _error_line(err)
    code, out, err = _run(capsys, "profile", "new", "--from", str(folder))  # no -o: the YAML on stdout
    assert code == 0 and out.startswith("# Model profile derived") and "num_experts: 8" in out
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _out, err = _run(capsys, "profile", "new", "--from", str(empty))
    assert code == 2 and f"{empty}: field '--model': not a model folder: no config.json" in _error_line(err)
    code, _out, err = _run(capsys, "plan", "--sim", "--model", str(tmp_path / "nowhere"), "--topology", "tp1")
    assert code == 2 and "no such profile file or model folder" in _error_line(err)
    partial = model_folder(tmp_path / "p", "qwen3-8b")
    (partial / "model-00003-of-00005.safetensors").unlink()
    code, _out, err = _run(capsys, "up", "--sim", "--model", str(partial), "--topology", "tp1")
    assert code == 2 and "shard model-00003-of-00005.safetensors listed in model.safetensors.index.json is " \
                         "missing" in _error_line(err)


def test_up_sim_runs_a_model_of_the_hf_cache(tmp_path: Path) -> None:
    import os

    hub = hf_cache(tmp_path / "hf", "nvidia/Qwen3.6-27B-NVFP4", "qwen3.6-27b-nvfp4")
    env = {**os.environ, "HF_HUB_CACHE": str(hub)}
    ports = layout_port_args()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, cwd=ROOT,
                              timeout=90, check=False, env=env)

    up = cli("up", "--sim", "--sim-startup", "0.3", "--model", "nvidia/Qwen3.6-27B-NVFP4", "--topology", "1p1d",
             *ports)
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        assert "is up (SIMULATED host)" in up.stdout
        endpoint = f"http://127.0.0.1:{ports[1]}"
        models = httpx.get(endpoint + "/v1/models", timeout=10, trust_env=False).json()
        assert models["data"][0]["id"] == "nvidia/Qwen3.6-27B-NVFP4"
        logs = list(Path(os.environ["DISAGG_TUI_STATE_DIR"]).glob("layouts/*/prefill-0.log"))
        text = logs[0].read_text()
        assert "Model loading took 14.00 GiB" in text  # the derived weights (15032385536 bytes)
        assert "Setting SSM conv state layout to DS" in text  # the hybrid constraint behind NIXL
        # later commands (bench) find the derived profile again from the layout's record
        layout = StateStore().active()
        assert layout is not None and layout.profile_id == "nvidia-qwen3.6-27b-nvfp4"
        ctx = CliContext(args=argparse.Namespace())
        ref = layout_model_ref(ctx, layout)
        assert ref.endswith("/snapshots/0123456789abcdef0123456789abcdef01234567")
        assert profile_vocab(ctx, ref) == 248320
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
