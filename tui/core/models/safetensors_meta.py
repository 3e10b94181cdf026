"""The size of a checkpoint's weights without reading its tensors.

A ``*.safetensors`` file starts with an 8-byte little-endian header length N and N bytes of JSON that name every
tensor's dtype, shape and byte range; the index ``*.safetensors.index.json`` of a sharded checkpoint has the total
in ``metadata.total_size`` and the shard of every tensor in ``weight_map``. Only those bytes are read here, never
the tensors, so a 100 GB checkpoint costs a few kilobytes of reading (and a folder of header-only files, as the
tests use, reads the same as the real one). A PyTorch ``*.bin`` checkpoint (no header to read) is sized by its
index's ``total_size`` or, without one, by its files' sizes.
"""

from __future__ import annotations

import math
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core import safeio
from tui.core.errors import InputError
from tui.core.models import ranges

#: bytes per element of the dtypes safetensors knows
DTYPE_BYTES: dict[str, float] = {
    "F64": 8, "I64": 8, "U64": 8, "C64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1, "F4": 0.5, "F6_E2M3": 0.75,
    "F6_E3M2": 0.75,
}
#: a header larger than this is not a safetensors header (the format itself caps it at 100 MB)
MAX_HEADER_BYTES = min(100_000_000, safeio.LIMITS["safetensors header"])
#: dimensions of one tensor (real ones have at most 5)
MAX_RANK = 16
#: a dtype safetensors may add later: skipped in the size check, but it must look like one
_DTYPE_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,15}\Z")
#: shards an index may name (the largest checkpoints have a few hundred)
MAX_SHARDS = 10_000


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


def _read_exactly(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < n:
        piece = os.read(fd, min(n - got, 4 << 20))
        if not piece:
            break
        chunks.append(piece)
        got += len(piece)
    return b"".join(chunks)


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file (8-byte length, then the JSON); one-line InputError otherwise (a
    FIFO or a device is refused before anything is read from it)."""
    try:
        fd, st = safeio.open_regular(path)
    except InputError as err:
        if err.message == "a broken link":
            raise InputError("no such file (a broken link: an unfinished download?)", file=path) from None
        raise
    try:
        head = _read_exactly(fd, 8)
        if len(head) < 8:
            raise InputError("not a safetensors file (shorter than its 8-byte header length)", file=path)
        (length,) = struct.unpack("<Q", head)
        if not 2 <= length <= MAX_HEADER_BYTES:
            raise InputError(f"not a safetensors file (header length {length:,}; at most {MAX_HEADER_BYTES:,})",
                             file=path)
        if length > st.st_size - 8:
            raise InputError(f"truncated safetensors header ({max(st.st_size - 8, 0):,} of {length:,} bytes)",
                             file=path)
        raw = _read_exactly(fd, length)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=path) from None
    finally:
        os.close(fd)
    if len(raw) < length:
        raise InputError(f"truncated safetensors header ({len(raw):,} of {length:,} bytes)", file=path)
    try:
        data = safeio.parse_json(raw.decode("utf-8"), path)
    except UnicodeDecodeError as exc:
        raise InputError(f"safetensors header is not UTF-8 (byte {exc.start + 8})", file=path) from None
    except InputError as err:
        raise InputError(f"safetensors header: {err.message}", file=path, line=err.line) from None
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
        total += _tensor_bytes(path, safeio.shown(repr(name), 80), meta)
        count += 1
    if total > ranges.MAX_WEIGHT_BYTES:
        raise InputError(f"the header names {total:,} bytes of tensors; no checkpoint holds more than "
                         f"{ranges.MAX_WEIGHT_BYTES:,}", file=path)
    return total, count


def _tensor_bytes(path: Path, name: str, meta: Any) -> int:
    """The bytes one header entry spans, checked: a known dtype, a shape of whole numbers, offsets that agree."""
    if not isinstance(meta, dict) or not isinstance(meta.get("data_offsets"), list) \
            or len(meta["data_offsets"]) != 2 or not isinstance(meta.get("shape"), list):
        raise InputError(f"tensor {name}: header entry needs dtype, shape and data_offsets", file=path)
    start, end = meta["data_offsets"]
    if isinstance(start, bool) or isinstance(end, bool) or not isinstance(start, int) or not isinstance(end, int) \
            or end < start or start < 0 or end > ranges.MAX_WEIGHT_BYTES:
        raise InputError(f"tensor {name}: bad data_offsets {safeio.shown(repr(meta['data_offsets']), 80)}",
                         file=path)
    dtype = meta.get("dtype")
    if not isinstance(dtype, str) or not _DTYPE_NAME.match(dtype):
        raise InputError(f"tensor {name}: {safeio.shown(repr(dtype), 40)} is no safetensors dtype", file=path)
    shape = meta["shape"]
    if len(shape) > MAX_RANK or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        raise InputError(f"tensor {name}: shape {safeio.shown(repr(shape), 80)} is not a list of at most "
                         f"{MAX_RANK} whole numbers", file=path)
    per = DTYPE_BYTES.get(dtype)
    if per is not None:
        elements = math.prod(shape)
        if elements * per > ranges.MAX_WEIGHT_BYTES or int(elements * per + 0.999) != end - start:
            raise InputError(f"tensor {name}: {dtype} {safeio.shown(repr(shape), 80)} is "
                             f"{math.ceil(elements * per):,} bytes but data_offsets span {end - start:,}", file=path)
    return end - start


def _shard_name(index: Path, value: Any) -> str:
    """A shard named by an index: a relative path inside the folder (never absolute, never '..')."""
    if not isinstance(value, str) or not value or value.startswith("/") or "\0" in value or len(value) > 1024 \
            or ".." in Path(value).parts or any(not ch.isprintable() for ch in value) \
            or any(len(part.encode("utf-8", "surrogatepass")) > 255 for part in Path(value).parts):
        raise InputError(f"{safeio.shown(repr(value), 80)} is not a file name in the model folder", file=index,
                         field="weight_map")
    return value


def _read_index(path: Path) -> tuple[int | None, list[str]]:
    try:
        data = safeio.load_json(path, "index.json")
    except InputError as err:
        if err.message == "a broken link":
            raise InputError("no such file (a broken link: an unfinished download?)", file=path) from None
        raise
    if not isinstance(data, dict) or not isinstance(data.get("weight_map"), dict):
        raise InputError("a safetensors index needs a 'weight_map' object", file=path, field="weight_map")
    meta = data.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is not None and (isinstance(total, bool) or not isinstance(total, int | float)
                              or not 1 <= total <= ranges.MAX_WEIGHT_BYTES):
        raise InputError(f"expected a positive number of bytes of at most {ranges.MAX_WEIGHT_BYTES:,}, got "
                         f"{safeio.shown(repr(total), 60)}", file=path, field="metadata.total_size")
    shards = sorted({_shard_name(path, v) for v in data["weight_map"].values()})
    if len(shards) > MAX_SHARDS:
        raise InputError(f"names {len(shards):,} shards; a checkpoint has at most {MAX_SHARDS:,}", file=path,
                         field="weight_map")
    return (int(total) if total is not None else None), shards


def _missing_shards(folder: Path, index: Path, shards: list[str]) -> None:
    """InputError for a shard the index lists that is missing (an unfinished download) or no regular file."""
    missing = []
    for s in shards:
        try:
            mode = (folder / s).stat().st_mode
        except FileNotFoundError:
            missing.append(s)
            continue
        except OSError as exc:
            raise InputError(f"shard {safeio.shown(s, 80)}: cannot read: {exc.strerror or exc}", file=index,
                             field="weight_map") from None
        if not stat.S_ISREG(mode):
            safeio.check_regular(folder / s)  # names what it is (a FIFO, a device, a directory)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise InputError(f"shard {safeio.shown(missing[0], 80)}{more} listed in {index.name} is missing (an "
                         "unfinished download?)", file=index, field="weight_map")


def _names(folder: Path) -> list[str]:
    try:
        names, more = safeio.scan_dir(folder)
    except OSError as exc:
        raise InputError(f"cannot list: {exc.strerror or exc}", file=folder) from None
    if more:
        raise InputError(f"holds more than {safeio.MAX_DIR_ENTRIES:,} entries: not a model folder", file=folder)
    return names


def weights_info(folder: Path) -> WeightsInfo | None:
    """The weights' size from the safetensors index (its ``total_size``, every shard present) or, without an index,
    from the headers of every ``*.safetensors`` file. None when the folder has no safetensors weights."""
    names = _names(folder)
    indexes = [folder / n for n in names if n.endswith(".safetensors.index.json")]
    if indexes:
        index = next((p for p in indexes if p.name == "model.safetensors.index.json"), indexes[0])
        total, shards = _read_index(index)
        _missing_shards(folder, index, shards)
        if total is None:  # an index without the total: add the shards' headers up
            total = 0
            tensors = 0
            for s in shards:
                b, n = header_bytes(folder / s)
                total += b
                tensors += n
            _some_bytes(total, folder / shards[0] if shards else index)
            return WeightsInfo(total_bytes=total, files=tuple(shards), how="headers", tensors=tensors)
        return WeightsInfo(total_bytes=total, files=tuple(shards), how="index")
    files = [folder / n for n in names if n.endswith(".safetensors")]
    if not files:
        return _bin_weights(folder, names)
    total = 0
    tensors = 0
    for f in files:
        b, n = header_bytes(f)
        total += b
        tensors += n
    _some_bytes(total, files[0])
    return WeightsInfo(total_bytes=total, files=tuple(f.name for f in files), how="headers", tensors=tensors)


def _some_bytes(total: int, first: Path) -> None:
    """Weights whose headers describe no tensor data (an empty header, only zero-sized tensors) are no weights: the
    error names the file, not the model's config.json."""
    if total <= 0:
        raise InputError("the safetensors header describes no tensor data: not a checkpoint", file=first,
                         field="header")


def _bin_weights(folder: Path, names: list[str]) -> WeightsInfo | None:
    """PyTorch ``*.bin`` checkpoints (no headers to read): their index's ``total_size``, else the files' sizes."""
    index = folder / "pytorch_model.bin.index.json"
    if "pytorch_model.bin.index.json" in names:
        total, shards = _read_index(index)
        _missing_shards(folder, index, shards)
        if total is not None:
            return WeightsInfo(total_bytes=total, files=tuple(shards), how="index")
        return WeightsInfo(total_bytes=sum((folder / s).stat().st_size for s in shards), files=tuple(shards),
                           how="file sizes")
    files = [folder / n for n in names if n.endswith(".bin") and n != "training_args.bin"]
    files = [p for p in files if p.is_file()]
    if not files:
        return None
    return WeightsInfo(total_bytes=sum(p.stat().st_size for p in files), files=tuple(p.name for p in files),
                       how="file sizes")
