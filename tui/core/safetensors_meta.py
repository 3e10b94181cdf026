"""The size of a checkpoint's weights without reading its tensors.

A ``*.safetensors`` file starts with an 8-byte little-endian header length N and N bytes of JSON that name every
tensor's dtype, shape and byte range; the index ``*.safetensors.index.json`` of a sharded checkpoint has the total
in ``metadata.total_size`` and the shard of every tensor in ``weight_map``. Only those bytes are read here, never
the tensors, so a 100 GB checkpoint costs a few kilobytes of reading (and a folder of header-only files, as the
tests use, reads the same as the real one). A PyTorch ``*.bin`` checkpoint (no header to read) is sized by its
index's ``total_size`` or, without one, by its files' sizes.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core.errors import InputError

#: bytes per element of the dtypes safetensors knows
DTYPE_BYTES: dict[str, float] = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1, "F4": 0.5, "F6_E2M3": 0.75,
    "F6_E3M2": 0.75,
}
#: a header larger than this is not a safetensors header (the format itself caps it at 100 MB)
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True, slots=True)
class WeightsInfo:
    """What the checkpoint's weight files say about their size."""

    total_bytes: int
    files: tuple[str, ...]  # the weight files (names relative to the folder)
    how: str  # "index" (its total_size), "headers" (the safetensors files' own), "file sizes" (*.bin checkpoints)
    tensors: int = 0  # tensors counted (headers only)

    @property
    def gib(self) -> float:
        return self.total_bytes / 2**30


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file (8-byte length, then the JSON); one-line InputError otherwise."""
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise InputError("not a safetensors file (shorter than its 8-byte header length)", file=path)
            (length,) = struct.unpack("<Q", head)
            if not 2 <= length <= MAX_HEADER_BYTES:
                raise InputError(f"not a safetensors file (header length {length})", file=path)
            raw = fh.read(length)
    except FileNotFoundError:
        raise InputError("no such file (a broken link: an unfinished download?)", file=path) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=path) from None
    if len(raw) < length:
        raise InputError(f"truncated safetensors header ({len(raw)} of {length} bytes)", file=path)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"safetensors header is not JSON: {exc}", file=path) from None
    if not isinstance(data, dict):
        raise InputError("safetensors header is not a JSON object", file=path)
    return data


def header_bytes(path: Path) -> tuple[int, int]:
    """(bytes of tensor data, number of tensors) the header of ``path`` describes, checked against each tensor's
    dtype and shape."""
    total = 0
    count = 0
    for name, meta in read_header(path).items():
        if name == "__metadata__":
            continue
        if not isinstance(meta, dict) or not isinstance(meta.get("data_offsets"), list) \
                or len(meta["data_offsets"]) != 2 or not isinstance(meta.get("shape"), list):
            raise InputError(f"tensor {name!r}: header entry needs dtype, shape and data_offsets", file=path)
        start, end = meta["data_offsets"]
        if not isinstance(start, int) or not isinstance(end, int) or end < start or start < 0:
            raise InputError(f"tensor {name!r}: bad data_offsets {meta['data_offsets']!r}", file=path)
        per = DTYPE_BYTES.get(str(meta.get("dtype")))
        if per is not None:
            elements = 1
            for dim in meta["shape"]:
                elements *= int(dim)
            if int(elements * per + 0.999) != end - start:
                raise InputError(f"tensor {name!r}: {meta.get('dtype')} {meta['shape']} is "
                                 f"{int(elements * per + 0.999)} bytes but data_offsets span {end - start}",
                                 file=path)
        total += end - start
        count += 1
    return total, count


def _read_index(path: Path) -> tuple[int | None, list[str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no such file (a broken link: an unfinished download?)", file=path) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"not a readable JSON index: {exc}", file=path) from None
    if not isinstance(data, dict) or not isinstance(data.get("weight_map"), dict):
        raise InputError("a safetensors index needs a 'weight_map' object", file=path, field="weight_map")
    meta = data.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is not None and (isinstance(total, bool) or not isinstance(total, int | float) or total <= 0):
        raise InputError(f"expected a positive number of bytes, got {total!r}", file=path,
                         field="metadata.total_size")
    shards = sorted({str(v) for v in data["weight_map"].values()})
    return (int(total) if total is not None else None), shards


def weights_info(folder: Path) -> WeightsInfo | None:
    """The weights' size from the safetensors index (its ``total_size``, every shard present) or, without an index,
    from the headers of every ``*.safetensors`` file. None when the folder has no safetensors weights."""
    indexes = sorted(folder.glob("*.safetensors.index.json"))
    if indexes:
        index = next((p for p in indexes if p.name == "model.safetensors.index.json"), indexes[0])
        total, shards = _read_index(index)
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise InputError(f"shard {missing[0]}{more} listed in {index.name} is missing (an unfinished "
                             "download?)", file=folder)
        if total is None:  # an index without the total: add the shards' headers up
            total = 0
            tensors = 0
            for s in shards:
                b, n = header_bytes(folder / s)
                total += b
                tensors += n
            return WeightsInfo(total_bytes=total, files=tuple(shards), how="headers", tensors=tensors)
        return WeightsInfo(total_bytes=total, files=tuple(shards), how="index")
    files = sorted(p for p in folder.glob("*.safetensors") if p.exists() or p.is_symlink())
    if not files:
        return _bin_weights(folder)
    total = 0
    tensors = 0
    for f in files:
        b, n = header_bytes(f)
        total += b
        tensors += n
    return WeightsInfo(total_bytes=total, files=tuple(f.name for f in files), how="headers", tensors=tensors)


def _bin_weights(folder: Path) -> WeightsInfo | None:
    """PyTorch ``*.bin`` checkpoints (no headers to read): their index's ``total_size``, else the files' sizes."""
    index = folder / "pytorch_model.bin.index.json"
    if index.is_file():
        total, shards = _read_index(index)
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            raise InputError(f"shard {missing[0]} listed in {index.name} is missing (an unfinished download?)",
                             file=folder)
        if total is not None:
            return WeightsInfo(total_bytes=total, files=tuple(shards), how="index")
        return WeightsInfo(total_bytes=sum((folder / s).stat().st_size for s in shards), files=tuple(shards),
                           how="file sizes")
    files = sorted(p for p in folder.glob("*.bin") if p.is_file() and p.name != "training_args.bin")
    if not files:
        return None
    return WeightsInfo(total_bytes=sum(p.stat().st_size for p in files), files=tuple(p.name for p in files),
                       how="file sizes")
