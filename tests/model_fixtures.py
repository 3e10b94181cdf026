"""Model folders and a Hugging Face cache tree for the profile-derivation tests.

``tests/fixtures/models/<name>/`` holds each model's ``config.json`` (real architectures) and, for the sharded
ones, ``model.safetensors.index.json``. The shards themselves are written here as tiny real safetensors files: an
8-byte header length, the JSON header and (optionally) the tensor bytes. Sizes are read from headers and indexes
only, so a header describing a 1 GB tensor in a 200-byte file reads the same as the real file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import struct
from pathlib import Path

MODELS = Path(__file__).parent / "fixtures" / "models"
BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1, "I8": 1}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]], *, with_data: bool = False) -> int:
    """A safetensors file with these tensors (dtype, shape); returns the bytes of tensor data its header names."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        if with_data:
            fh.write(b"\0" * offset)
    return offset


def model_folder(root: Path, name: str) -> Path:
    """A copy of fixture ``name`` under ``root`` with its shards (header-only safetensors files)."""
    dest = root / name
    shutil.copytree(MODELS / name, dest)
    index = dest / "model.safetensors.index.json"
    if index.is_file():
        shards: dict[str, list[str]] = {}
        for tensor, shard in json.loads(index.read_text())["weight_map"].items():
            shards.setdefault(shard, []).append(tensor)
        for shard, names in shards.items():
            write_safetensors(dest / shard, {n: ("BF16", [4096, 4096]) for n in names})
    return dest


def hf_cache(root: Path, repo_id: str, fixture: str, *, commit: str = "0123456789abcdef0123456789abcdef01234567"
             ) -> Path:
    """A Hugging Face hub cache under ``root`` holding ``repo_id`` like huggingface_hub lays it out: blobs named by
    content hash, the snapshot's files linking to them, refs/main naming the commit. Returns the cache (hub) dir."""
    hub = root / "hub"
    src = model_folder(root / "src" / repo_id.replace("/", "--"), fixture)
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    blobs, snap = repo / "blobs", repo / "snapshots" / commit
    blobs.mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        data = f.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        os.symlink(os.path.join("..", "..", "blobs", digest), snap / f.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return hub
