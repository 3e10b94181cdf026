"""Profiles derived from model folders and the Hugging Face cache: the sizes match hand-computed values for each
real architecture; broken or partial folders give one line naming the file and what is wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.model_fixtures import hf_cache, model_folder, write_safetensors
from tui.core.errors import InputError
from tui.core.models import Catalog, parse_model_profile
from tui.core.models.hfcache import find_repo, hub_cache_dir
from tui.core.models.modeldir import derive
from tui.core.models.modelsrc import list_models, resolve_model
from tui.core.models.profile_yaml import profile_yaml
from tui.core.models.safetensors_meta import header_bytes, weights_info
from tui.core.yamlio import load_text

GIB = 2**30

# per fixture: the facts and the hand-computed sizes. KV bytes per token = 2 (K and V) x layers with a KV cache x
# KV heads x head dim x bytes per element; weights = the index's metadata.total_size; parameters from the shape.
EXPECTED = {
    "qwen3-8b": dict(
        family="dense", attention="full", quantization="bf16", kv_cache_dtype="auto", layers=36, full=36,
        kv_heads=8, head_dim=128, intermediate=12288, experts=(0, 0),
        kv=2 * 36 * 8 * 128 * 2, weights=16381470720 / GIB,
        # embeddings + lm_head (untied) + 36 x (q,k,v,o + gate/up/down)
        params=2 * 151936 * 4096 + 36 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 12288),
        active=None, max_len=32768),
    "mixtral-8x7b-instruct-v0.1": dict(
        family="moe", attention="full", quantization="bf16", kv_cache_dtype="auto", layers=32, full=32,
        kv_heads=8, head_dim=4096 // 32, intermediate=14336, experts=(8, 2),
        kv=2 * 32 * 8 * 128 * 2, weights=93405585408 / GIB,
        params=2 * 32000 * 4096 + 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 8 * 3 * 4096 * 14336 + 4096 * 8),
        active=2 * 32000 * 4096 + 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 2 * 3 * 4096 * 14336 + 4096 * 8),
        max_len=32768),
    "qwen3-30b-a3b-fp8": dict(
        family="moe", attention="full", quantization="fp8", kv_cache_dtype="auto", layers=48, full=48,
        kv_heads=4, head_dim=128, intermediate=768, experts=(128, 8),
        kv=2 * 48 * 4 * 128 * 2, weights=32484617216 / GIB,
        params=2 * 151936 * 2048 + 48 * (2 * 2048 * 4096 + 2 * 2048 * 512 + 128 * 3 * 2048 * 768 + 2048 * 128),
        active=2 * 151936 * 2048 + 48 * (2 * 2048 * 4096 + 2 * 2048 * 512 + 8 * 3 * 2048 * 768 + 2048 * 128),
        max_len=32768),
    "gemma-4-26b-a4b-it-fp8-dynamic": dict(
        # sliding-window layers count as attention layers; a dense MLP beside the experts in every layer; tied
        family="moe", attention="full", quantization="fp8", kv_cache_dtype="auto", layers=30, full=30,
        kv_heads=8, head_dim=256, intermediate=704, experts=(128, 8),
        kv=2 * 30 * 8 * 256 * 2, weights=27058831360 / GIB,
        params=262144 * 2816 + 30 * (2 * 2816 * 16 * 256 + 2 * 2816 * 8 * 256 + 128 * 3 * 2816 * 704 + 2816 * 128
                                     + 3 * 2816 * 2112),
        active=262144 * 2816 + 30 * (2 * 2816 * 16 * 256 + 2 * 2816 * 8 * 256 + 8 * 3 * 2816 * 704 + 2816 * 128
                                     + 3 * 2816 * 2112),
        max_len=32768),
    "qwen3.6-27b-nvfp4": dict(
        # 16 of 64 layers full attention; FP8 KV cache from the checkpoint (1 byte per element)
        family="dense", attention="hybrid", quantization="nvfp4", kv_cache_dtype="fp8", layers=64, full=16,
        kv_heads=4, head_dim=256, intermediate=17408, experts=(0, 0),
        kv=2 * 16 * 4 * 256 * 1, weights=15032385536 / GIB,
        params=2 * 248320 * 5120 + 16 * (2 * 5120 * 24 * 256 + 2 * 5120 * 4 * 256)
        # Gated DeltaNet: in_proj_qkvz, in_proj_ba, out_proj, conv1d (key dim 16x128, value dim 48x128)
        + 48 * (5120 * (2 * 2048 + 2 * 6144) + 5120 * 2 * 48 + 6144 * 5120 + (2 * 2048 + 6144) * 4)
        + 64 * 3 * 5120 * 17408,
        active=None, max_len=32768),
    "deepseek-v2-lite-chat": dict(
        # MLA: one latent of kv_lora_rank 512 + qk_rope_head_dim 64 per layer and token (written as 1 KV head of
        # 288), layer 0 dense (first_k_dense_replace), 64 routed experts (6 active) and 2 shared ones; own code
        family="moe", attention="full", quantization="bf16", kv_cache_dtype="auto", layers=27, full=27,
        kv_heads=1, head_dim=288, intermediate=1408, experts=(64, 6),
        kv=27 * (512 + 64) * 2, weights=31412968448 / GIB,
        params=2 * 102400 * 2048
        + 27 * (2048 * 16 * 192 + 2048 * (512 + 64) + 512 * 16 * (128 + 128) + 16 * 128 * 2048)
        + 3 * 2048 * 10944 + 26 * (64 * 3 * 2048 * 1408 + 3 * 2048 * 2 * 1408 + 2048 * 64),
        active=2 * 102400 * 2048
        + 27 * (2048 * 16 * 192 + 2048 * (512 + 64) + 512 * 16 * (128 + 128) + 16 * 128 * 2048)
        + 3 * 2048 * 10944 + 26 * (6 * 3 * 2048 * 1408 + 3 * 2048 * 2 * 1408 + 2048 * 64),
        max_len=32768),
    "jamba-v0.1": dict(
        # attention on layers 4, 12, 20, 28; experts on odd layers
        family="moe", attention="hybrid", quantization="bf16", kv_cache_dtype="auto", layers=32, full=4,
        kv_heads=8, head_dim=128, intermediate=14336, experts=(16, 2),
        kv=2 * 4 * 8 * 128 * 2, weights=103139180544 / GIB,
        params=2 * 65536 * 4096 + 4 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
        + 28 * (4096 * 2 * 8192 + 8192 * 4 + 8192 * (256 + 2 * 16) + 256 * 8192 + 8192 * 16 + 8192 + 8192 * 4096)
        + 16 * (16 * 3 * 4096 * 14336 + 4096 * 16) + 16 * 3 * 4096 * 14336,
        active=2 * 65536 * 4096 + 4 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
        + 28 * (4096 * 2 * 8192 + 8192 * 4 + 8192 * (256 + 2 * 16) + 256 * 8192 + 8192 * 16 + 8192 + 8192 * 4096)
        + 16 * (2 * 3 * 4096 * 14336 + 4096 * 16) + 16 * 3 * 4096 * 14336,
        max_len=32768),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_derived_sizes_match_hand_computed(tmp_path: Path, name: str) -> None:
    e = EXPECTED[name]
    derived = derive(model_folder(tmp_path, name))
    assert derived.missing == []
    assert [w for w in derived.warnings if "ships its own Python code" not in w] == []
    p = derived.profile()
    assert (p.family, p.attention, p.quantization, p.kv_cache_dtype) == (
        e["family"], e["attention"], e["quantization"], e["kv_cache_dtype"])
    s = p.shape
    assert (s.layers, s.full_attention_layers, s.num_kv_heads, s.head_dim, s.intermediate_size) == (
        e["layers"], e["full"], e["kv_heads"], e["head_dim"], e["intermediate"])
    assert (s.num_experts, s.experts_per_token) == e["experts"]
    assert p.kv_bytes_per_token() == e["kv"]
    assert p.weights_gib == pytest.approx(e["weights"], abs=0.0006)
    assert p.params_b == pytest.approx(e["params"] / 1e9, abs=0.0006)
    active = e["active"] if e["active"] is not None else e["params"]
    assert p.active_params_b == pytest.approx(active / 1e9, abs=0.0006)
    assert p.max_model_len == e["max_len"] and p.model == str(tmp_path / name)
    assert (p.min_compute_capability == 10.0) == (p.quantization == "nvfp4")
    assert not p.trust_remote_code  # auto_map (deepseek): the model ships its own code, never trusted on its word
    assert any("ships its own Python code" in w for w in p.warnings) == (name == "deepseek-v2-lite-chat")


def test_weights_from_safetensors_headers(tmp_path: Path) -> None:
    """No index: the weights are what the files' headers describe (the files are header-only)."""
    folder = model_folder(tmp_path, "llama-3.1-8b-instruct")
    a = write_safetensors(folder / "model-00001-of-00002.safetensors",
                          {"model.embed_tokens.weight": ("BF16", [128256, 4096]),
                           "model.norm.weight": ("BF16", [4096])})
    b = write_safetensors(folder / "model-00002-of-00002.safetensors",
                          {"lm_head.weight": ("BF16", [128256, 4096]),
                           "model.layers.0.self_attn.k_proj.weight": ("F8_E4M3", [1024, 4096]),
                           "model.layers.0.self_attn.k_proj.weight_scale": ("F32", [1024, 1])})
    assert a == 128256 * 4096 * 2 + 4096 * 2 and b == 128256 * 4096 * 2 + 1024 * 4096 + 1024 * 4
    assert (folder / "model-00001-of-00002.safetensors").stat().st_size < 400  # header only
    info = weights_info(folder)
    assert info is not None and info.how == "headers" and info.tensors == 5 and info.total_bytes == a + b
    p = derive(folder).profile()
    assert p.weights_gib == pytest.approx((a + b) / GIB, abs=0.0006)
    assert p.kv_bytes_per_token() == 2 * 32 * 8 * (4096 // 32) * 2  # head_dim from hidden / heads
    assert p.max_model_len == 32768  # 131072 in config.json, capped


def test_pytorch_bin_checkpoint_is_sized_by_its_files(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "llama-3.1-8b-instruct")
    (folder / "pytorch_model-00001-of-00002.bin").write_bytes(b"\0" * 3000)
    (folder / "pytorch_model-00002-of-00002.bin").write_bytes(b"\0" * 1000)
    (folder / "training_args.bin").write_bytes(b"\0" * 500)  # not weights
    info = weights_info(folder)
    assert info is not None and info.how == "file sizes" and info.total_bytes == 4000
    assert "the sizes of 2 .bin file(s)" in derive(folder).comments["weights_gib"]


def test_tiny_real_safetensors_file_with_data(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    n = write_safetensors(path, {"w": ("F16", [3, 5]), "b": ("F32", [5])}, with_data=True)
    assert header_bytes(path) == (3 * 5 * 2 + 5 * 4, 2) and n == 50


def _one_line(err: InputError) -> str:
    text = err.one_line()
    assert "\n" not in text and "Traceback" not in text
    return text


def test_broken_and_partial_folders_get_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError) as ei:
        derive(empty)
    assert "not a model folder: no config.json" in _one_line(ei.value) and str(empty) in ei.value.one_line()

    bad = model_folder(tmp_path, "qwen3-8b")
    (bad / "config.json").write_text('{"num_hidden_layers": 36,\n "hidden_size": }\n')
    with pytest.raises(InputError) as ei:
        derive(bad)
    assert f"{bad / 'config.json'}:2: not valid JSON" in _one_line(ei.value)

    partial = model_folder(tmp_path / "p", "mixtral-8x7b-instruct-v0.1")
    (partial / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(InputError) as ei:
        derive(partial)
    assert "shard model-00002-of-00002.safetensors listed in model.safetensors.index.json is missing" in \
        _one_line(ei.value)

    trunc = model_folder(tmp_path / "t", "llama-3.1-8b-instruct")
    write_safetensors(trunc / "model.safetensors", {"x": ("BF16", [8, 8])})
    raw = (trunc / "model.safetensors").read_bytes()
    (trunc / "model.safetensors").write_bytes(raw[:20])
    with pytest.raises(InputError) as ei:
        derive(trunc)
    assert "truncated safetensors header" in _one_line(ei.value) and "model.safetensors" in ei.value.one_line()


def test_fields_that_cannot_be_derived_are_named_with_the_field_to_set(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "qwen3-8b")
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["num_hidden_layers"]
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (folder / "config.json").write_text(json.dumps(cfg))
    derived = derive(folder)
    assert [m[0] for m in derived.missing] == ["architecture.layers", "quantization", "architecture.params_b"]
    with pytest.raises(InputError) as ei:
        derived.profile()
    line = _one_line(ei.value)
    assert "cannot derive architecture.layers (config.json has no num_hidden_layers" in line
    assert "quantization (config.json quantization_config (quant_method 'bitsandbytes')" in line
    assert f"profile new --from {folder} -o FILE" in line
    # the YAML written for it leaves those fields empty, so loading it names them until they are set
    text = profile_yaml(derived)
    assert "layers:" in text and "SET THIS: config.json has no num_hidden_layers" in text
    with pytest.raises(InputError) as ei:
        parse_model_profile(load_text(text, "p.yaml"), "p.yaml")
    assert "field 'architecture.params_b': required field is missing" in ei.value.one_line()
    fixed = text.replace("  params_b:", "  params_b: 8.19").replace("  layers:", "  layers: 36").replace(
        "quantization:", "quantization: bf16")
    assert parse_model_profile(load_text(fixed, "p.yaml"), "p.yaml").kv_bytes_per_token() == 2 * 36 * 8 * 128 * 2


def test_missing_tokenizer_is_a_plan_warning(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "qwen3-8b")
    (folder / "tokenizer_config.json").unlink()
    p = derive(folder).profile()
    assert len(p.warnings) == 1 and "no tokenizer files" in p.warnings[0] and "--tokenizer" in p.warnings[0]


def test_hf_cache_lookup_and_offline_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    hub = hf_cache(tmp_path / "hf", "Qwen/Qwen3-30B-A3B-FP8", "qwen3-30b-a3b-fp8")
    assert hub == hub_cache_dir()
    repo = find_repo("Qwen/Qwen3-30B-A3B-FP8")
    assert repo is not None and repo.snapshot is not None and repo.revision.startswith("0123456789")
    assert (repo.snapshot / "config.json").is_symlink()
    for rev in ("main", "0123456"):  # a branch of refs/, a commit prefix
        again = find_repo(f"Qwen/Qwen3-30B-A3B-FP8@{rev}")
        assert again is not None and again.snapshot == repo.snapshot
    with pytest.raises(InputError) as ei:
        find_repo("Qwen/Qwen3-30B-A3B-FP8@v2")
    assert "revision 'v2' is not in the Hugging Face cache" in _one_line(ei.value)
    cat = Catalog.load()
    p = resolve_model("Qwen/Qwen3-30B-A3B-FP8", cat)
    assert p is not None and p.id == "qwen3-30b-a3b-fp8" and p.served_name == "Qwen/Qwen3-30B-A3B-FP8"
    assert p.model == str(repo.snapshot) and p.kv_bytes_per_token() == 2 * 48 * 4 * 128 * 2
    assert cat.model("qwen/qwen3-30b-a3b-fp8").id == p.id  # typed in another case
    assert cat.model("qwen3-30b-a3b-fp8").served_name == p.served_name  # by the id profile list shows
    assert cat.model(str(repo.snapshot)).served_name == p.served_name  # the snapshot folder itself
    with pytest.raises(InputError) as ei:
        cat.model("Qwen/Qwen3-235B-A22B")
    line = _one_line(ei.value)
    assert "Qwen/Qwen3-235B-A22B: not a model folder here and not in the Hugging Face cache" in line
    assert "nothing is downloaded" in line and str(hub) in line
    # a partial download: a shard whose blob never arrived (dangling link)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "other" / "hub"))
    hub2 = hf_cache(tmp_path / "other", "mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b-instruct-v0.1")
    snap = next((hub2 / "models--mistralai--Mixtral-8x7B-Instruct-v0.1" / "snapshots").iterdir())
    os.unlink(os.path.realpath(snap / "model-00001-of-00002.safetensors"))
    with pytest.raises(InputError) as ei:
        cat.model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert "shard model-00001-of-00002.safetensors listed in model.safetensors.index.json is missing (an " \
           "unfinished download?)" in _one_line(ei.value)


def test_list_models_every_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_dirs: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    hf_cache(tmp_path / "hf", "nvidia/Qwen3.6-27B-NVFP4", "qwen3.6-27b-nvfp4")
    hub = hf_cache(tmp_path / "hf", "google/qwen3-8b", "qwen3-8b")  # same name as a folder below
    (hub / "models--acme--unfinished" / "blobs").mkdir(parents=True)  # a download that never made a snapshot
    models = tmp_path / "models"
    model_folder(models, "jamba-v0.1")
    model_folder(models, "qwen3-8b")
    broken = models / "half"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    monkeypatch.setenv("DISAGG_TUI_MODEL_DIRS", str(models))
    user = isolated_dirs / "config" / "profiles" / "models"
    user.mkdir(parents=True)
    shipped = Path(Catalog.load().models["gemma-4-26b-a4b-fp8"].source)
    (user / "mine.yaml").write_text(shipped.read_text().replace("id: gemma-4-26b-a4b-fp8", "id: mine"))
    entries = {e.id: e for e in list_models(Catalog.load())}
    assert entries["gemma-4-26b-a4b-fp8"].source == "shipped" and entries["mine"].source == "operator"
    assert entries["mine"].path == str(user / "mine.yaml")
    assert entries["qwen3.6-27b-nvfp4"].source == "shipped"  # the cached repo of that name gets its org in front
    by_ref = {e.ref: e for e in entries.values()}
    hub_q = by_ref["nvidia/Qwen3.6-27B-NVFP4"]
    assert hub_q.source == "hf-cache" and hub_q.problem is None and hub_q.id == "nvidia-qwen3.6-27b-nvfp4"
    assert by_ref["google/qwen3-8b"].id == "qwen3-8b" and by_ref["google/qwen3-8b"].source == "hf-cache"
    folder_q = by_ref[str(models / "qwen3-8b")]
    assert folder_q.source == "folder" and folder_q.id == "models-qwen3-8b" and folder_q.problem is None
    assert by_ref[str(models / "jamba-v0.1")].id == "jamba-v0.1"
    unfinished = by_ref["acme/unfinished"]
    assert unfinished.source == "hf-cache" and "no snapshot in the Hugging Face cache" in str(unfinished.problem)
    half = by_ref[str(broken)]
    assert half.source == "folder" and half.problem is not None and "\n" not in half.problem
    assert "cannot derive architecture.layers" in half.problem
    # every discovered id resolves through --model, to the same model the list names
    cat = Catalog.load()
    assert cat.model("nvidia-qwen3.6-27b-nvfp4").served_name == "nvidia/Qwen3.6-27B-NVFP4"
    assert cat.model("models-qwen3-8b").model == str(models / "qwen3-8b")
    assert cat.model("qwen3.6-27b-nvfp4").source == str(shipped.parent / "qwen3.6-27b-nvfp4.yaml")
