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


@pytest.mark.parametrize("total", [10**29, 5e-324, 0.5], ids=["huge", "denormal", "half-a-byte"])
def test_index_total_size_out_of_range_is_one_line(tmp_path: Path, total: float) -> None:
    # 5e-324 is above zero but rounds to no bytes: it is refused on the index, not reported as "no tensors" on
    # config.json (hypothesis found it in CI)
    folder = model_folder(tmp_path, "qwen3-8b")
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["metadata"] = {"total_size": total}
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


# --- 3. the playbook ------------------------------------------------------------------------------------------

H200 = ROOT / "tests" / "fixtures" / "vllm-0.24.0-h200"
FAILURES = H200 / "failures"


def _best(fn: object, repeat: int = 5) -> float:
    """The best wall time of ``repeat`` calls (the least disturbed by the other processes of a shared machine)."""
    import time

    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def _huge_line_log(path: Path, chars: int = 4 << 20) -> Path:
    import random

    rng = random.Random(7)
    words = " ".join("".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 9))) for _ in range(chars // 6))
    path.write_text("INFO 11-29 07:49:29 [api_server.py:1] starting\n"
                    f"(EngineCore_DP0 pid=9) ERROR 11-29 07:49:31 [core.py:1] Peculiar collapse: {words[:chars]}\n")
    return path


def test_playbook_add_from_a_4mb_line_is_cut_and_later_commands_cost_the_same(tmp_path: Path,
                                                                                isolated_dirs: Path) -> None:
    """A 4 MB log line once became a 4 MB pattern: the add took 20 s and wrote a playbook no later command could
    load. Now the pattern is made from the start of the line's message, and diagnose and playbook list cost what
    they load it (how long they take is benchmarks/diagnose_speed.py's to measure, not a test's)."""
    small = FAILURES / "fail_unknown_flag.log"

    def diagnose() -> None:
        assert run_cli(["diagnose", str(small)]).code == 0

    def listing() -> None:
        assert run_cli(["playbook", "list"]).code == 0

    log = _huge_line_log(tmp_path / "big.log")
    res = run_cli(["playbook", "add", "--from", f"{log}:2", "--title", "Peculiar collapse"])
    assert res.code == 0 and no_traceback(res), res.err
    assert "the pattern is made from the start" in res.err
    book = isolated_dirs / "config" / "playbook.yaml"
    assert book.stat().st_size < 4000
    from tui.core.playbook.book import load_playbook

    entry = load_playbook().entry("peculiar-collapse")
    assert entry.lines is not None and len(entry.lines.patterns[0].text) <= 1000
    found = run_cli(["diagnose", str(log), "--json"])
    assert found.code == 0
    assert [d["entry_id"] for d in json.loads(found.out)["files"][0]["diagnoses"]][:1] == ["peculiar-collapse"]
    diagnose()  # the later commands load the playbook with the entry
    listing()


def test_hand_written_huge_pattern_is_one_line_at_once(tmp_path: Path, isolated_dirs: Path) -> None:
    """An entry written by hand with a 900 kB pattern made every load take seconds; it is refused in one line,
    in about the time a clean playbook loads."""
    def listing() -> CliResult:
        return run_cli(["playbook", "list"])

    book = isolated_dirs / "config" / "playbook.yaml"
    book.write_text("version: 1\nentries:\n- id: huge\n  title: Huge\n  match:\n    lines: ['" + "a b " * 225_000
                    + "']\n  explain: x\n")
    _one_error(listing(), f"{book}:6", "characters")
    book.write_text("version: 1\nentries:\n- id: long\n  title: Long\n  match:\n    lines:\n      - '" + "x" * 2000
                    + "'\n  explain: x\n")
    _one_error(listing(), f"{book}:7", "entries[1].match.lines[1]", "at most 1,000")


def test_playbook_pattern_counts_are_bounded(isolated_dirs: Path) -> None:
    book = isolated_dirs / "config" / "playbook.yaml"
    patterns = "".join(f"      - 'failure number {i} happened'\n" for i in range(40))
    book.write_text(f"version: 1\nentries:\n- id: many\n  title: Many\n  match:\n    lines:\n{patterns}  explain: x\n")
    _one_error(run_cli(["playbook", "list"]), str(book), "entries[1].match.lines", "at most 32")
    entries = "".join(f"- id: e{i}\n  title: T\n  match:\n    lines: ['failure {i} happened']\n  explain: x\n"
                      for i in range(600))
    book.write_text(f"version: 1\nentries:\n{entries}")
    _one_error(run_cli(["playbook", "list"]), str(book), "entries", "at most 500")


def test_playbook_add_to_a_file_with_an_empty_entries_list(isolated_dirs: Path) -> None:
    """``entries: []`` was refused with 'its entries: list is not the last block of the file'."""
    book = isolated_dirs / "config" / "playbook.yaml"
    book.write_text("# mine\nversion: 1\nentries: []   # none yet\n")
    res = run_cli(["playbook", "add", "--text", "RuntimeError: the frobnicator jammed at stage 3", "--title",
                   "Frobnicator jammed"])
    assert res.code == 0, res.err
    text = book.read_text()
    assert text.startswith("# mine\nversion: 1\nentries:   # none yet\n") and "frobnicator-jammed" in text
    from tui.core.playbook.loader import parse_playbook_file

    assert [e.id for e in parse_playbook_file(book)] == ["frobnicator-jammed"]


def test_playbook_list_and_show_cap_and_escape_strings(isolated_dirs: Path) -> None:
    book = isolated_dirs / "config" / "playbook.yaml"
    book.write_text('version: 1\nentries:\n- id: loud\n  title: "Loud \\e]0;pwned\\a title"\n  match:\n'
                    "    lines: ['the loud thing happened']\n  explain: '" + "why " * 3000 + "'\n")
    listing = run_cli(["playbook", "list"])
    assert listing.code == 0, listing.err
    assert "\x1b" not in listing.out and "\\x1b]0;pwned" in listing.out
    show = run_cli(["playbook", "show", "loud"])
    assert show.code == 0, show.err
    assert "\x1b" not in show.out and len(show.out) < 4000 and "characters)" in show.out


def test_fifo_logs_and_playbooks_are_refused_at_once(tmp_path: Path, isolated_dirs: Path) -> None:
    """A FIFO given to ``playbook add --from`` or ``diagnose`` (or standing where the operator's playbook is)
    waited forever for a writer."""
    fifo = tmp_path / "server.log"
    os.mkfifo(fifo)
    for args in (["playbook", "add", "--from", f"{fifo}:1", "--title", "T"], ["diagnose", str(fifo)]):
        res = cli(*args, timeout=60)
        assert res.returncode == 2, res.stderr
        assert "FIFO" in res.stderr and str(fifo) in res.stderr and "Traceback" not in res.stderr
    os.mkfifo(isolated_dirs / "config" / "playbook.yaml")
    res = cli("playbook", "add", "--text", "RuntimeError: the frobnicator jammed at stage 3", "--title", "F",
              timeout=60)
    assert res.returncode == 2 and "FIFO" in res.stderr and "playbook.yaml" in res.stderr, res.stderr
    res = cli("playbook", "list", timeout=60)
    assert res.returncode == 2 and "FIFO" in res.stderr, res.stderr


def test_devices_and_folders_are_no_logs(tmp_path: Path) -> None:
    _one_error(run_cli(["diagnose", "/dev/null"]), "/dev/null", "device")
    _one_error(run_cli(["playbook", "add", "--from", "/dev/null:1", "--title", "T"]), "/dev/null", "device")
    _one_error(run_cli(["playbook", "add", "--from", f"{tmp_path}:1", "--title", "T"]), str(tmp_path), "directory")
    _one_error(run_cli(["playbook", "add", "--from", f"{FAILURES / 'fail_unknown_flag.log'}:{'9' * 5000}",
                        "--title", "T"]), "--from")


def test_diagnose_a_log_past_the_log_limit_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.core import safeio

    log = tmp_path / "huge.log"
    log.write_bytes(b"INFO nothing to see here\n" * 100)
    monkeypatch.setitem(safeio.LIMITS, "log", 1000)
    _one_error(run_cli(["diagnose", str(log)]), str(log), "too large")


@pytest.mark.parametrize("piece", [64, 4096, 1 << 20])
def test_diagnose_in_pieces_gives_what_the_whole_file_gives(piece: int, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A giant log is read in pieces that end at line ends: the diagnoses, line numbers and last lines are what
    reading it whole gives."""
    from tui.core.playbook import offline
    from tui.core.playbook.book import load_playbook

    book = load_playbook()
    monkeypatch.setattr(offline, "PIECE_BYTES", piece)

    def same(log: Path) -> None:
        def plain(r: offline.LogDiagnosis) -> dict[str, object]:
            d = r.to_dict()
            d["diagnoses"] = [{k: v for k, v in x.items() if k != "ts"} for x in d["diagnoses"]]
            return d

        whole = offline.diagnose_bytes(log.read_bytes(), book, source=str(log))
        assert plain(offline.diagnose_file(log, book)) == plain(whole), log

    logs = [*sorted(FAILURES.glob("*.log")), H200 / "startup" / "main.log"]
    assert len(logs) > 5
    for log in logs:
        same(log)
    odd = tmp_path / "odd.log"  # blank lines at the end, no final newline
    odd.write_bytes((FAILURES / "fail_unknown_flag.log").read_bytes() + b"\n\n   \nlast words")
    same(odd)
    blank_end = tmp_path / "blank.log"  # a piece of blank lines only after the last words
    blank_end.write_bytes((FAILURES / "fail_unknown_flag.log").read_bytes() + b"\n" * 10_000)
    same(blank_end)


def test_diagnose_memory_stays_bounded_on_a_large_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``diagnose`` read the whole log into memory (and ``playbook add --from`` too, for one line of it)."""
    import tracemalloc

    from tui.core.playbook import offline
    from tui.core.playbook.book import load_playbook

    book = load_playbook()
    monkeypatch.setattr(offline, "PIECE_BYTES", 1 << 20)
    log = tmp_path / "long.log"
    with log.open("wb") as fh:
        fh.write((FAILURES / "fail_unknown_flag.log").read_bytes())
        fh.write(b"INFO 11-29 07:49:29 [metrics.py:1] Avg prompt throughput: 0.0 tokens/s\n" * 400_000)
    size = log.stat().st_size
    assert size > 25 << 20
    tracemalloc.start()
    try:
        result = offline.diagnose_file(log, book)
        line = offline.read_log_line(log, 400_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.lines == 400_000 + (FAILURES / "fail_unknown_flag.log").read_bytes().count(b"\n")
    assert result.known_failure and "Avg prompt throughput" in line
    assert peak < size / 3, (peak, size)


# --- 4. the prompts dataset -----------------------------------------------------------------------------------


def test_prompts_file_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "p.jsonl"
    os.mkfifo(fifo)
    res = cli("bench", "--endpoint", "http://127.0.0.1:9", "--prompts", str(fifo), "--served-model", "m",
              timeout=60)
    assert res.returncode == 2 and "FIFO" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_prompts_file_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompts file is read whole: its size, its lines and the token ids they hold are bounded."""
    from tui.core.bench import dataset
    from tui.core.errors import InputError

    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": [1, 2, 3]}\n' * 10)
    monkeypatch.setattr(dataset, "MAX_PROMPTS", 5)
    with pytest.raises(InputError, match=r"p.jsonl:6: more than 5 prompts"):
        dataset.load_prompts_file(path, 8)
    monkeypatch.setattr(dataset, "MAX_PROMPTS", 1000)
    monkeypatch.setattr(dataset, "MAX_PROMPT_TOKENS", 20)
    with pytest.raises(InputError, match=r"p.jsonl:7: the prompts hold more than 20 token ids"):
        dataset.load_prompts_file(path, 8)
    monkeypatch.setattr(dataset, "MAX_PROMPTS_FILE_BYTES", 100)
    with pytest.raises(InputError, match=r"too large"):
        dataset.load_prompts_file(path, 8)


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(\w+\s?)*!", r"(.*a){20,}", r"(x+x+)+y", r"(?:\d+|\w+)+$"])
def test_a_pattern_that_backtracks_exponentially_is_refused(pattern: str, isolated_dirs: Path) -> None:
    """``(a+)+$`` on a 65-character line took minutes in ``diagnose`` (Python's re cannot be interrupted)."""
    book = isolated_dirs / "config" / "playbook.yaml"
    book.write_text("version: 1\nentries:\n- id: slow\n  title: Slow\n  match:\n    lines:\n"
                    f"      - {json.dumps(pattern)}\n  explain: x\n")
    _one_error(run_cli(["playbook", "list"]), f"{book}:7", "entries[1].match.lines[1]", "repeats a repeat")


def test_delimited_repeats_of_repeats_are_kept() -> None:
    from tui.core.playbook.redos import explosive

    for pattern in (r"(\s+\S+)*", r"(?:/-{1,2}[\w.+-]+)*", r"([a-z]+[0-9]+)+", r"(\w+\s)+", r"(?>a+)+", r"(ab)+"):
        assert not explosive(pattern), pattern


def test_operator_workloads_that_are_no_regular_file_are_one_line(isolated_dirs: Path) -> None:
    """A folder, a broken link or a FIFO where the operator's workloads.yaml is was skipped without a word."""
    target = isolated_dirs / "config" / "profiles" / "workloads.yaml"
    target.parent.mkdir(parents=True)
    target.mkdir()
    _one_error(_plan(PROFILE), str(target), "directory")
    target.rmdir()
    os.symlink("nowhere.yaml", target)
    _one_error(_plan(PROFILE), str(target), "broken link")
    target.unlink()
    os.mkfifo(target)
    res = cli("plan", "--sim", "--model", str(PROFILE), "--topology", "tp1", "--no-preflight", timeout=60)
    assert res.returncode == 2 and "FIFO" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_huge_integer_where_a_number_is_expected_is_one_line(tmp_path: Path) -> None:
    """``request_rate: 9...9`` (711 digits) is an int YAML reads whole; turning it into a float overflowed."""
    path = tmp_path / "w.yaml"
    path.write_text("name: w\ninput_len: 8\noutput_len: 8\nrequest_rate: " + "9" * 711 + "\n")
    _one_error(run_cli(["bench", "--endpoint", "http://127.0.0.1:9", "--workload", str(path)]), f"{path}:4",
               "request_rate", "digits")


def test_an_error_about_a_huge_value_is_one_short_line(tmp_path: Path) -> None:
    """An alias bomb in a list of strings made a 50,000-character error line (the value's repr)."""
    path = tmp_path / "m.yaml"
    text = PROFILE.read_text().replace('checked_with_vllm: ["0.24.0"]', "checked_with_vllm: [*c]")
    bomb = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n" \
           "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    path.write_text("x-anchors:\n" + "".join("  " + ln + "\n" for ln in bomb.splitlines()) + text)
    line = _one_error(_plan(path), str(path))
    assert len(line) < 600, line


def _nest(folder: Path, depth: int) -> None:
    """``folder/d/d/.../d``, ``depth`` deep (made through descriptors: the path is longer than PATH_MAX)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def _unnest(folder: Path, depth: int) -> None:
    """Remove what :func:`_nest` made: down to the bottom, then up through ``..``, two descriptors at a time."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        for _ in range(depth):
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        for _ in range(depth):
            parent = os.open("..", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir("d", dir_fd=fd)
    finally:
        os.close(fd)


def test_doctor_model_files_scan_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """doctor's look at a model's files walked the whole tree: folders nested 1,500 deep ran os.walk out of
    recursion (a traceback), a million folders out of time."""
    from tui.core.playbook import weights

    folder = model_folder(tmp_path, "llama-3.1-8b-instruct")
    write_safetensors(folder / "model.safetensors", {"w": ("BF16", [8, 8])})
    _nest(folder, 1500)
    try:
        found = weights.locate_model(str(folder), {})
    finally:
        _unnest(folder, 1500)  # (pytest's own clean-up of old temporary folders would recurse that deep)
    assert found.found and found.has_config and found.has_weights and found.capped
    monkeypatch.setattr(weights, "MAX_FILES", 50)
    wide = model_folder(tmp_path / "wide", "llama-3.1-8b-instruct")
    for i in range(200):
        (wide / f"sub{i}").mkdir()
    assert weights.locate_model(str(wide), {}).capped


@pytest.mark.parametrize("unit", ["KV Transfer metrics: ", "non-default args: {",
                                  "FlashInfer top-p/top-k sampling unavailable: "])
def test_a_long_line_repeating_a_literal_costs_what_any_long_line_costs(unit: str, tmp_path: Path) -> None:
    """A pattern like ``A: .*B`` (and the matcher's own 'non-default args: {(.*)}') backtracks over the rest of the
    line from every A: a 400 kB line of A's took seconds, a 4 MB one minutes. The matcher reads a line's first
    and last 8,192 characters."""
    size = 400_000
    plain = tmp_path / "plain.log"
    plain.write_text("INFO 11-29 07:49:29 [api_server.py:1] start\n" + "x" * size + "\n")
    hostile = tmp_path / "hostile.log"
    hostile.write_text("INFO 11-29 07:49:29 [api_server.py:1] start\n" + unit * (size // len(unit)) + "\n")

    def diagnose(log: Path) -> None:
        res = run_cli(["diagnose", str(log)])
        assert res.code == 0 and no_traceback(res), res.err

    diagnose(plain)
    # a hang guard, not a measurement (benchmarks/diagnose_speed.py measures): the backtracking took minutes on a
    # 4 MB line and seconds on this one; the matcher's cut keeps it near the plain line's ~0.1 s
    assert _best(lambda: diagnose(hostile), 1) < 10


def test_the_matcher_reads_a_long_line_s_start_and_end(tmp_path: Path) -> None:
    """What fails is said at a line's start; a progress bar's last state is at its end: both are matched."""
    from tui.core.playbook.book import load_playbook
    from tui.core.playbook.offline import diagnose_bytes

    book = load_playbook()
    line = (FAILURES / "fail_unknown_flag.log").read_text().splitlines()
    failing = next(ln for ln in line if "unrecognized arguments" in ln)
    data = ("INFO start\n" + failing + " " + "x" * 100_000 + "\n").encode()
    assert diagnose_bytes(data, book).known_failure
    args = "(APIServer pid=1) INFO 11-29 07:49:29 [utils.py:1] non-default args: {" + "'x': 1, " * 5000 + \
        "'data_parallel_size': 2}"
    from tui.core.playbook.matcher import Matcher

    m = Matcher(book)
    m.feed(args, 1)
    assert m.context.topology == "dp"
    m = Matcher(book)
    m.feed("INFO non-default args: {'data_parallel_size': " + "9" * 5000 + "}", 1)
    assert m.context.topology == "dp"
