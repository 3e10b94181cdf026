"""Files from outside are hostile until checked (issue 21): model folders, their config.json and safetensors files,
the Hugging Face cache, model profiles and workloads, the playbook and the logs it is built from, prompts files.

Each class of hostile input is met where an operator would meet it (``profile list``, ``profile show``, ``plan
--model FOLDER|ORG/NAME|FILE``, ``playbook add --from``, ``diagnose``, ``bench --prompts``) and must be one line
naming the file (and field) with exit 2, or a correct result, never a traceback, a MemoryError or a hang. Cases
that could hang (a FIFO) run the CLI in a subprocess with a timeout."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from tests.hardening.cli import CliResult, no_traceback, run_cli
from tests.helpers import cli
from tests.model_fixtures import hf_cache, model_folder, write_safetensors

ROOT = Path(__file__).resolve().parent.parent.parent
PROFILE = ROOT / "profiles" / "models" / "qwen3.6-27b-nvfp4.yaml"
AS_ROOT = os.geteuid() == 0


def _one_error(res: CliResult, *names: str, code: int = 2) -> str:
    """The one error line of a CLI run (warnings aside), checked for the exit code, no traceback and ``names``."""
    assert no_traceback(res), res.err
    errors = [ln for ln in res.err_lines if not ln.startswith("warning:")]
    assert res.code == code, f"exit {res.code}: {res.err}"
    assert len(errors) == 1, res.err
    for name in names:
        assert name in errors[0], errors[0]
    return errors[0]


def _plan(model: str | Path) -> CliResult:
    return run_cli(["plan", "--sim", "--model", str(model), "--topology", "tp1", "--no-preflight"])


def _config(folder: Path, **changes: object) -> Path:
    """``folder``'s config.json with ``changes`` (a key of None is removed), written as JSON text."""
    path = folder / "config.json"
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data, indent=2))
    return path


def _config_text(folder: Path, key: str, literal: str) -> Path:
    """``folder``'s config.json with ``"key": LITERAL`` written as it is (NaN, a 400-digit number ...)."""
    path = folder / "config.json"
    data = json.loads(path.read_text())
    data[key] = "@@"
    path.write_text(json.dumps(data, indent=2).replace('"@@"', literal))
    return path


# --- 1. model sources: config.json --------------------------------------------------------------------------------


HOSTILE_CONFIGS = {
    # (key, literal written as is): what a hostile or broken config.json may hold
    "layers-10e12": ("num_hidden_layers", str(10**12)),
    "hidden-400-digits": ("hidden_size", "9" * 400),
    "heads-huge": ("num_attention_heads", str(10**7)),
    "kv-heads-huge": ("num_key_value_heads", str(10**9)),
    "head-dim-huge": ("head_dim", str(10**6)),
    "intermediate-huge": ("intermediate_size", str(10**9)),
    "vocab-huge": ("vocab_size", str(10**10)),
    "max-position-huge": ("max_position_embeddings", str(10**15)),
    "nan": ("rope_theta", "NaN"),
    "infinity": ("rms_norm_eps", "-Infinity"),
    "overflow": ("rope_theta", "1e999"),
    "mla-rank-huge": ("kv_lora_rank", str(10**8)),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_CONFIGS))
def test_hostile_config_json_is_one_line(case: str, tmp_path: Path) -> None:
    """A figure no model has (a layer count of 10**12 made ``[True] * layers`` die of MemoryError; a 400-digit
    hidden size gave a traceback), NaN or Infinity: one line naming config.json and the field."""
    key, literal = HOSTILE_CONFIGS[case]
    folder = model_folder(tmp_path, "qwen3-8b")
    path = _config_text(folder, key, literal)
    line = _one_error(_plan(folder), str(path))
    assert key in line or "not accepted JSON" in line, line


def test_hostile_figure_inside_text_config_names_its_field_and_line(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "qwen3-8b")
    cfg = json.loads((folder / "config.json").read_text())
    path = _config(folder, text_config={**cfg, "num_hidden_layers": 10**12})
    text = path.read_text()
    line_no = text.count("\n", 0, text.index('"num_hidden_layers"', text.index('"text_config"'))) + 1
    _one_error(_plan(folder), f"{path}:{line_no}: field 'text_config.num_hidden_layers'", "2,048")


def test_config_json_nested_deep_or_too_large_is_one_line(tmp_path: Path) -> None:
    deep = model_folder(tmp_path / "deep", "qwen3-8b")
    (deep / "config.json").write_text('{"x": ' + "[" * 5000 + "]" * 5000 + "}")
    _one_error(_plan(deep), "config.json", "nested deeper")
    big = model_folder(tmp_path / "big", "qwen3-8b")
    _config(big, padding="x" * (5 << 20))
    _one_error(_plan(big), "config.json", "too large")


def test_config_json_strings_are_capped_and_escaped(tmp_path: Path) -> None:
    """A hostile architectures list (a megabyte, terminal escapes) does not reach the profile's notes whole."""
    folder = model_folder(tmp_path, "qwen3-8b")
    _config(folder, architectures=["\x1b]0;pwned\x07" + "A" * 1_000_000])
    res = run_cli(["profile", "show", str(folder)])
    assert res.code == 0, res.err
    assert "\x1b" not in res.out and len(res.out) < 20_000


def test_fifo_config_json_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO where config.json should be waited forever for a writer."""
    folder = model_folder(tmp_path, "qwen3-8b")
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")
    for args in (["plan", "--sim", "--model", str(folder), "--topology", "tp1", "--no-preflight"],
                 ["profile", "show", str(folder / "config.json")]):
        res = cli(*args, timeout=60)
        assert res.returncode == 2, res.stderr
        assert "FIFO" in res.stderr and "config.json" in res.stderr and "Traceback" not in res.stderr


def test_fifo_weights_are_refused_at_once(tmp_path: Path) -> None:
    shard = model_folder(tmp_path / "a", "llama-3.1-8b-instruct")
    os.mkfifo(shard / "model.safetensors")
    index = model_folder(tmp_path / "b", "qwen3-8b")
    (index / "model.safetensors.index.json").unlink()
    os.mkfifo(index / "model.safetensors.index.json")
    for folder, name in ((shard, "model.safetensors"), (index, "model.safetensors.index.json")):
        res = cli("plan", "--sim", "--model", str(folder), "--topology", "tp1", "--no-preflight", timeout=60)
        assert res.returncode == 2, res.stderr
        assert "FIFO" in res.stderr and name in res.stderr and "Traceback" not in res.stderr


def test_links_and_folders_where_files_should_be_are_one_line(tmp_path: Path) -> None:
    loop = model_folder(tmp_path / "loop", "qwen3-8b")
    (loop / "config.json").unlink()
    os.symlink("config.json", loop / "config.json")
    _one_error(_plan(loop), "config.json", "symbolic links")
    broken = model_folder(tmp_path / "broken", "qwen3-8b")
    (broken / "config.json").unlink()
    os.symlink("nowhere.json", broken / "config.json")
    _one_error(_plan(broken), "config.json", "broken link")
    folder = model_folder(tmp_path / "dir", "qwen3-8b")
    (folder / "config.json").unlink()
    (folder / "config.json").mkdir()
    _one_error(_plan(folder), "config.json", "directory")
    shard_dir = model_folder(tmp_path / "shard-dir", "llama-3.1-8b-instruct")
    (shard_dir / "model.safetensors").mkdir()
    _one_error(_plan(shard_dir), "model.safetensors", "directory")


@pytest.mark.skipif(AS_ROOT, reason="root reads files whatever their permissions")
def test_unreadable_config_json_is_one_line(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "qwen3-8b")
    (folder / "config.json").chmod(0)
    _one_error(_plan(folder), "config.json", "ermission denied")


# --- 1. model sources: safetensors headers and the index ----------------------------------------------------------


def _raw_safetensors(path: Path, header: bytes, length: int | None = None) -> None:
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header)


HOSTILE_HEADERS: dict[str, tuple[bytes, int | None, str]] = {
    # (header bytes, declared length or None for the real one, what the error says)
    "length-2**63": (b"{}", 2**63, "header length"),
    "length-past-the-file": (b"{}", 1 << 20, "truncated"),
    "shape-of-strings": (b'{"w": {"dtype": "BF16", "shape": ["a", 2], "data_offsets": [0, 4]}}', None, "shape"),
    "shape-of-floats": (b'{"w": {"dtype": "BF16", "shape": [1e300], "data_offsets": [0, 4]}}', None, "shape"),
    "shape-rank-100": (json.dumps({"w": {"dtype": "U8", "shape": [1] * 100, "data_offsets": [0, 1]}}).encode(),
                       None, "shape"),
    "dtype-not-a-name": (b'{"w": {"dtype": ["BF16"], "shape": [2], "data_offsets": [0, 4]}}', None, "dtype"),
    "offsets-huge": (json.dumps({"w": {"dtype": "X9", "shape": [2], "data_offsets": [0, 10**25]}}).encode(), None,
                     "data_offsets"),
    "nan-in-header": (b'{"__metadata__": {"x": NaN}, "w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}',
                      None, "NaN"),
    "deep-header": (b'{"__metadata__": ' + b"[" * 5000 + b"]" * 5000 + b"}", None, "nested deeper"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_HEADERS))
def test_hostile_safetensors_header_is_one_line(case: str, tmp_path: Path) -> None:
    header, length, says = HOSTILE_HEADERS[case]
    folder = model_folder(tmp_path, "llama-3.1-8b-instruct")
    _raw_safetensors(folder / "model.safetensors", header, length)
    _one_error(_plan(folder), "model.safetensors", says)


def test_index_naming_a_shard_outside_the_folder_is_refused(tmp_path: Path) -> None:
    """weight_map values are file names in the folder: ``../other/x.safetensors`` or ``/dev/zero`` are no shard."""
    outside = tmp_path / "other"
    outside.mkdir()
    write_safetensors(outside / "x.safetensors", {"w": ("BF16", [64, 64])})
    for target in ("../other/x.safetensors", "/dev/zero", str(outside / "x.safetensors")):
        folder = model_folder(tmp_path / f"m{len(target)}", "qwen3-8b")
        index = folder / "model.safetensors.index.json"
        data = json.loads(index.read_text())
        data.pop("metadata", None)  # no total: the shards' headers would be read
        first = next(iter(data["weight_map"]))
        data["weight_map"][first] = target
        index.write_text(json.dumps(data))
        _one_error(_plan(folder), "model.safetensors.index.json", "weight_map")


def test_index_total_size_out_of_range_is_one_line(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "qwen3-8b")
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["metadata"] = {"total_size": 10**29}
    index.write_text(json.dumps(data))
    _one_error(_plan(folder), "model.safetensors.index.json", "metadata.total_size")


# --- 1. model sources: the Hugging Face cache and the model directories ------------------------------------------


def _hostile_repo(tmp_path: Path, repo: str, **changes: object) -> Path:
    hub = hf_cache(tmp_path, repo, "qwen3-8b")
    snap = next((hub / ("models--" + repo.replace("/", "--")) / "snapshots").iterdir())
    (snap / "config.json").unlink()  # a link into blobs/: write a file of its own
    (snap / "config.json").write_text(json.dumps({**json.loads((ROOT / "tests" / "fixtures" / "models" / "qwen3-8b" /
                                                                "config.json").read_text()), **changes}))
    return hub


def test_profile_list_with_one_hostile_repo_lists_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """One config.json with num_hidden_layers 10**12 in the HF cache made ``profile list`` die of MemoryError."""
    hub = hf_cache(tmp_path, "good/model-a", "qwen3-8b")
    _hostile_repo(tmp_path, "evil/layers", num_hidden_layers=10**12)
    _hostile_repo(tmp_path, "evil/digits", hidden_size=int("9" * 30))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    res = run_cli(["profile", "list", "--json"])
    assert res.code == 0 and no_traceback(res), res.err
    models = {m["ref"]: m for m in json.loads(res.out)["models"]}
    assert models["good/model-a"]["problem"] is None
    assert "num_hidden_layers" in models["evil/layers"]["problem"]
    assert "hidden_size" in models["evil/digits"]["problem"]
    text = run_cli(["profile", "list"])
    assert text.code == 0 and no_traceback(text)
    problem_lines = [ln for ln in text.out.splitlines() if "config.json:" in ln and "!" in ln]
    assert len(problem_lines) == 2 and all(len(ln) < 600 for ln in problem_lines), text.out


def test_plan_by_repo_id_with_a_hostile_config_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = _hostile_repo(tmp_path, "evil/model", vocab_size=10**12)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    _one_error(_plan("evil/model"), "config.json", "vocab_size")


def test_hf_cache_ref_naming_a_path_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """refs/main holds a commit hash: ``../../..`` is no commit (the newest snapshot is used instead)."""
    hub = hf_cache(tmp_path, "org/model", "qwen3-8b")
    repo = hub / "models--org--model"
    (repo / "refs" / "main").write_text("../../../../../..")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    res = run_cli(["profile", "show", "org/model", "--json"])
    assert res.code == 0, res.err
    assert "/snapshots/0123456789abcdef" in json.loads(res.out)["source"]


def test_walking_a_huge_models_directory_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory of $DISAGG_TUI_MODEL_DIRS (or the HF cache) with more entries than are read is said, in one line,
    instead of being walked whole."""
    from tui.core import safeio

    monkeypatch.setattr(safeio, "MAX_DIR_ENTRIES", 20)
    models = tmp_path / "models"
    model_folder(models, "qwen3-8b")
    for i in range(30):
        (models / f"junk-{i:03d}").mkdir()
    hub = tmp_path / "hub"
    hub.mkdir()
    for i in range(30):
        (hub / f"models--junk--m{i:03d}").mkdir()
    monkeypatch.setenv("DISAGG_TUI_MODEL_DIRS", str(models))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    res = run_cli(["profile", "list", "--json"])
    assert res.code == 0 and no_traceback(res), res.err
    cut = [m for m in json.loads(res.out)["models"] if m["problem"] and "more than 20 entries" in m["problem"]]
    assert {m["path"] for m in cut} == {str(models), str(hub)}


def test_model_folder_with_too_many_entries_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.core import safeio

    monkeypatch.setattr(safeio, "MAX_DIR_ENTRIES", 20)
    folder = model_folder(tmp_path, "llama-3.1-8b-instruct")
    write_safetensors(folder / "model.safetensors", {"w": ("BF16", [8, 8])})
    for i in range(30):
        (folder / f"junk-{i}.txt").write_text("")
    _one_error(_plan(folder), str(folder), "more than 20 entries")


# --- 2. model profiles and workloads ----------------------------------------------------------------------------


def _profile(tmp_path: Path, old: str, new: str) -> Path:
    text = PROFILE.read_text()
    assert old in text
    path = tmp_path / "m.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


HOSTILE_PROFILES = {
    # (text of the shipped profile, replaced by, the field the error names)
    "layers": ("layers: 64", f"layers: {10**12}", "architecture.layers"),
    "hidden": ("hidden_size: 5120", "hidden_size: 99999999", "architecture.hidden_size"),
    "heads": ("num_attention_heads: 24", "num_attention_heads: 100000", "architecture.num_attention_heads"),
    "kv-heads": ("num_kv_heads: 4", "num_kv_heads: 100000", "architecture.num_kv_heads"),
    "head-dim": ("head_dim: 256", "head_dim: 1000000", "architecture.head_dim"),
    "intermediate": ("intermediate_size: 17408", f"intermediate_size: {10**10}", "architecture.intermediate_size"),
    "vocab": ("vocab_size: 248320", f"vocab_size: {10**11}", "architecture.vocab_size"),
    "params": ("params_b: 27.0", "params_b: 1.0e+9", "architecture.params_b"),
    "weights": ("weights_gib: 14.0", "weights_gib: 1.0e+12", "weights_gib"),
    "max-model-len": ("max_model_len: 32768", f"max_model_len: {10**12}", "vllm.max_model_len"),
    "min-cc": ("min_compute_capability: 10.0", "min_compute_capability: 1.0e+30", "min_compute_capability"),
    "experts": ("family: dense", "family: moe\n  num_experts: 1000000\n  experts_per_token: 2",
                "architecture.num_experts"),
    "experts-per-token": ("family: dense", "family: moe\n  num_experts: 8\n  experts_per_token: 64",
                          "architecture.experts_per_token"),
    "long-id": ("id: qwen3.6-27b-nvfp4", "id: " + "a" * 300, "id"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_PROFILES))
def test_profile_figures_out_of_range_are_one_line(case: str, tmp_path: Path) -> None:
    old, new, field = HOSTILE_PROFILES[case]
    path = _profile(tmp_path, old, new)
    for res in (_plan(path), run_cli(["profile", "show", str(path)])):
        _one_error(res, f"{path}:", f"field '{field}'")


def test_profile_nested_5000_deep_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("id: x\nmodel: org/m\nnotes: " + "[" * 5000 + "]" * 5000 + "\n")
    _one_error(_plan(path), str(path), "deep")
    path.write_text("id: x\nmodel: org/m\nnotes:\n" + "".join("  " * i + "- \n" for i in range(1, 3000)))
    _one_error(_plan(path), str(path), "deep")


def test_fifo_profile_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    os.mkfifo(path)
    res = cli("plan", "--sim", "--model", str(path), "--topology", "tp1", "--no-preflight", timeout=60)
    assert res.returncode == 2 and "FIFO" in res.stderr and "Traceback" not in res.stderr, res.stderr


HOSTILE_WORKLOADS = {
    "input-len": (f"input_len: {10**12}", "input_len"),
    "output-len": (f"output_len: {10**9}", "output_len"),
    "num-prompts": (f"num_prompts: {10**9}", "num_prompts"),
    "prefix-len": (f"prefix_len: {10**12}", "prefix_len"),
    "seed": (f"seed: {2**40}", "seed"),
    "burstiness": ("burstiness: 1.0e+300", "burstiness"),
    "rate-digits": (f"request_rate: '{'9' * 400}'", "request_rate"),
    "rate-huge": ("request_rate: 1.0e+300", "request_rate"),
    "concurrency": (f"max_concurrency: {10**12}", "max_concurrency"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_WORKLOADS))
def test_workload_figures_out_of_range_are_one_line(case: str, tmp_path: Path) -> None:
    """A 10**12 input_len (or a rate, a seed numpy cannot take) is refused where it is written, not by the runner
    after a connection or not at all."""
    line, field = HOSTILE_WORKLOADS[case]
    base = {"input_len": "input_len: 8", "output_len": "output_len: 8"}
    key = line.split(":", 1)[0]
    body = "\n".join([*(v for k, v in base.items() if k != key), line])
    path = tmp_path / "w.yaml"
    path.write_text(f"name: w\n{body}\n")
    res = run_cli(["bench", "--endpoint", "http://127.0.0.1:9", "--workload", str(path)])
    _one_error(res, f"{path}:", field)


def test_random_cell_workload_lengths_are_bounded() -> None:
    res = run_cli(["bench", "--endpoint", "http://127.0.0.1:9", "--workload", "random-" + "9" * 5000 + "x8"])
    _one_error(res, "--workload", "input_len")
    res = run_cli(["bench", "--endpoint", "http://127.0.0.1:9", "--workload", f"random-8x{10**11}"])
    _one_error(res, "--workload", "output_len")
