"""``vllm bench serve --save-result`` JSON as a stored run: ``results import`` and the vllm runner's result.

The file is from outside: read as a regular file within the results' size limit, strict JSON (a NaN or an
Infinity is refused naming its field), every field the import reads checked for its type and range
(:func:`check_vllm_result`) before anything is written; :func:`detailed_result` writes a run back in that format.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tui.core import paths, safeio, safewrite, typedread
from tui.core.bench.metrics import DETAILED_KEYS, records_from_vllm_json, strip_detailed
from tui.core.bench.store import (
    FIGURE_MAX,
    RECORD_SECONDS,
    RECORD_TOKENS,
    REQUESTS_FILE,
    RUN_FILE,
    SUMMARY_FILE,
    Run,
    RunMeta,
    check_summary,
    load_run,
    records_frame,
    run_name,
    safe_name,
    write_json,
    write_parquet,
)
from tui.core.errors import InputError

#: the most requests one result may hold. A run's per-request records are read whole, one Python object each, by
#: every table, chart and recommendation that shows the run (~40 µs a request on a loaded 2-core host: 4 s for 100k),
#: and the results' size limit (256 MiB) was sized for 100k requests with their arrays; a bigger run is refused in
#: one line before any per-request work (a million requests: a few seconds, not minutes and 2 GB)
MAX_REQUESTS = 100_000

#: a JSON string (its escapes included); the brackets outside strings; the innermost pairs of brackets
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_INNERMOST = re.compile(rb"\[\]|\{\}")


def _too_deep(raw: bytes, limit: int = safeio.MAX_DEPTH) -> bool:
    """Whether ``raw``'s brackets outside strings nest deeper than ``limit`` (or do not pair up), at the speed of
    the regex engine: the strings removed, the brackets kept, then each pass removes the innermost pairs (a result
    nests 3 deep: 3 passes). :func:`safeio.json_depth_exceeded` scans byte by byte in Python (seconds a 100 MB)."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        if not brackets:
            return False
        brackets = _INNERMOST.sub(b"", brackets)
    return bool(brackets)


def read_vllm_result(raw: bytes, file: Path) -> dict[str, Any]:
    """A ``vllm bench serve`` result from its bytes: strict JSON decoded at C speed (nesting past
    :data:`safeio.MAX_DEPTH` refused before decoding), at most :data:`MAX_REQUESTS` requests (refused before any
    per-request work), a ``NaN`` or an ``Infinity`` refused naming its field, every field the import reads of its type
    and range (:func:`check_vllm_result`)."""
    if raw.lstrip()[:1] not in (b"{", b"["):
        raise InputError("not a JSON result: it does not start with an object", file=file)
    if _too_deep(raw):
        line = safeio.json_depth_exceeded(raw)
        if line is not None:
            raise InputError(f"not a JSON result: not accepted JSON: nested deeper than {safeio.MAX_DEPTH} levels",
                             file=file, line=line)
    constants: list[str] = []

    def constant(name: str) -> float:
        constants.append(name)
        return float(name.replace("Infinity", "inf"))

    try:
        data = json.loads(raw, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"not a JSON result: not valid JSON: {exc.msg} (column {exc.colno})", file=file,
                         line=exc.lineno) from None
    except (ValueError, RecursionError) as exc:  # not UTF-8, an integer past Python's 4300 digits
        raise InputError(f"not a JSON result: not valid JSON: {safeio.shown(str(exc), 120)}", file=file) from None
    if not isinstance(data, dict) or "duration" not in data or "output_throughput" not in data:
        raise InputError("not a vllm bench serve result (no duration/output_throughput)", file=file)
    for key in DETAILED_KEYS:
        items = data.get(key)
        if isinstance(items, list) and len(items) > MAX_REQUESTS:
            raise InputError(f"{len(items):,} requests: at most {MAX_REQUESTS:,} are imported (every table reads a "
                             "run's requests whole); a result saved without --save-detailed imports its summary",
                             file=file, field=key)
    if constants:
        where = safeio.nonfinite_at(data)
        if where is not None:
            raise InputError(f"must be a finite number, got {where[1]!r}", file=file, field=where[0] or None)
    summary = strip_detailed(data)
    where = safeio.nonfinite_at(summary)  # 1e400 decodes to inf without a constant: named by its field
    if where is not None:
        raise InputError(f"must be a finite number, got {where[1]!r}", file=file, field=where[0] or None)
    # what is kept of it (summary.json) must read back as every later reader reads a run record: no integer of
    # more digits than safeio takes (a float() of it is an OverflowError), no nesting past its depth
    try:
        safeio.parse_json(json.dumps(summary), file)
    except InputError as exc:
        raise InputError(f"not a JSON result: {exc.message}", file=file) from None
    check_vllm_result(data, file)
    return data


def import_vllm_result(file: Path, *, campaign: str = "imported", topology: str | None = None,
                       workload: str | None = None, root: Path | None = None, name: str | None = None,
                       runner: str = "imported", meta_extra: dict[str, Any] | None = None) -> Run:
    """A ``vllm bench serve --save-result`` JSON becomes a run (with per-request records when it has them). The
    file is from outside: a regular file of at most the results' size limit, read once (:func:`read_vllm_result`
    checks those bytes, and those bytes are kept), before anything is written."""
    try:
        raw = safeio.read_bytes(file, "results")
    except InputError as exc:
        if exc.message == "no such file":
            raise
        raise InputError(f"not a JSON result: {exc.message}", file=file) from None
    data = read_vllm_result(raw, file)
    topo = topology or data.get("topology") or "unknown"
    rate = data.get("request_rate", "inf")
    rate_f = None if rate in ("inf", None) else float(rate)
    wl = workload or data.get("workload") or _guess_workload(data)
    base = root or paths.runs_dir()
    stem = name or run_name(topo, wl, rate_f)
    directory = base / safe_name(campaign) / stem
    n = 1
    while directory.exists() and (directory / SUMMARY_FILE).exists():
        n += 1
        directory = base / safe_name(campaign) / f"{stem}-{n}"
    meta = RunMeta(campaign=safe_name(campaign), name=directory.name, topology=topo, workload=wl,
                   request_rate=rate_f, status="complete", runner=runner, started=_date_epoch(data),
                   model=data.get("model_id") or "", message=f"imported from {safeio.shown(str(file), 400)}")
    for key, value in (meta_extra or {}).items():
        setattr(meta, key, value)
    meta.ended = meta.started + float(data.get("duration") or 0.0)
    paths.make_dirs(directory)
    records = records_from_vllm_json(data)
    summary = strip_detailed(data)
    summary.setdefault("topology", topo)
    summary.setdefault("workload", wl)
    write_json(directory / SUMMARY_FILE, summary)
    if records:
        write_parquet(directory / REQUESTS_FILE, records_frame(records))
        if not all(data.get("itls") or [[]]):
            meta.flags.append("itls-trimmed")
    # the bytes checked, not the file again (it may have changed); never through a link in the runs folder
    safewrite.write_atomic(directory / "vllm-result.json", raw, root=paths.root_for(directory))
    write_json(directory / RUN_FILE, meta.to_dict())
    return load_run(directory)


def record_count(run: Run) -> int:
    """How many request records a run just imported holds, from its parquet file's metadata (the records are not
    read: at 100k, reading them back took longer than the import)."""
    import polars as pl

    path = run.path / REQUESTS_FILE
    if not path.is_file():
        return 0
    return int(pl.scan_parquet(path).select(pl.len()).collect().item())


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and abs(v) <= FIGURE_MAX


def _seconds(v: Any) -> bool:
    return _is_number(v) and 0 <= v <= RECORD_SECONDS


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= RECORD_TOKENS


_PER_REQUEST: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "ttfts": (f"a number of seconds (0..{RECORD_SECONDS:g}) or null", lambda v: v is None or _seconds(v)),
    "input_lens": ("a whole number ≥ 0", _count),
    "output_lens": ("a whole number ≥ 0", _count),
    "start_times": ("a number of seconds ≥ 0", lambda v: _is_number(v) and 0 <= v <= typedread.TIME_MAX),
    "errors": ("a text or null", lambda v: v is None or (isinstance(v, str) and len(v) <= typedread.MAX_TEXT)),
    "itls": ("a list of seconds", lambda v: v is None or (isinstance(v, list) and all(_seconds(g) for g in v))),
}


_NUMBER = {int, float}


def _within(values: list[Any], kinds: set[type], lo: float, hi: float) -> bool:
    """Every value of one of ``kinds`` (never a bool: its type is bool, not int) and within lo..hi, at C speed:
    ``set(map(type))``, ``min``, ``max``. A NaN never reaches here (only the NaN constant makes one, and a result
    with one is walked by :func:`safeio.nonfinite_at` first); an infinity is out of range."""
    if not values:
        return True
    if not set(map(type, values)) <= kinds:
        return False
    return kinds == {str} or (lo <= min(values) and max(values) <= hi)


def _all_fit(key: str, items: list[Any]) -> bool:
    """Whether every item of a per-request array fits :data:`_PER_REQUEST`'s rule for ``key`` (True is the answer
    for any result vllm writes; False sends the caller to find the first that does not)."""
    present = [x for x in items if x is not None]
    if key == "ttfts":
        return _within(present, _NUMBER, 0, RECORD_SECONDS)
    if key in ("input_lens", "output_lens"):
        return len(present) == len(items) and _within(present, {int}, 0, RECORD_TOKENS)
    if key == "start_times":
        return len(present) == len(items) and _within(present, _NUMBER, 0, min(typedread.TIME_MAX, FIGURE_MAX))
    if key == "errors":
        return _within(present, {str}, 0, 0) and max(map(len, present), default=0) <= typedread.MAX_TEXT
    if key == "itls":
        if not set(map(type, present)) <= {list}:
            return False
        return _within(list(itertools.chain.from_iterable(present)), _NUMBER, 0, RECORD_SECONDS)
    return False


def check_vllm_result(data: dict[str, Any], file: str | Path) -> None:
    """The fields an import reads have the types ``vllm bench serve`` writes; one error naming the field otherwise."""
    for key in ("duration", "output_throughput"):
        if not _is_number(data[key]) or data[key] < 0:
            raise InputError(f"expected a number ≥ 0, got {data[key]!r}"[:200], file=file, field=key)
    for key in ("topology", "workload", "model_id", "date"):
        try:
            typedread.check_text(data.get(key), (key,), limit=200)
        except typedread.FieldError as exc:
            raise InputError(exc.reason, file=file, field=key) from None
    check_summary(strip_detailed(data), file)  # every figure a number within range
    rate = data.get("request_rate", "inf")
    if rate not in ("inf", None) and not (_is_number(rate) and rate > 0):
        raise InputError(f"expected 'inf' or a number > 0, got {rate!r}"[:200], file=file, field="request_rate")
    for key in ("num_prompts", "completed", "total_input_tokens", "total_output_tokens"):
        if data.get(key) is not None and not _is_number(data[key]):
            raise InputError(f"expected a number, got {data[key]!r}"[:200], file=file, field=key)
    ttfts = data.get("ttfts")
    if ttfts is None:
        return
    if not isinstance(ttfts, list):
        raise InputError(f"expected a list (one item per request), got {type(ttfts).__name__}", file=file,
                         field="ttfts")
    for key, (what, ok) in _PER_REQUEST.items():
        items = data.get(key)
        if not items:
            continue  # absent or empty: the reader fills it in
        if not isinstance(items, list) or len(items) != len(ttfts):
            raise InputError(f"expected a list of {len(ttfts)} items (one per request, as ttfts), got "
                             f"{len(items) if isinstance(items, list) else type(items).__name__}", file=file,
                             field=key)
        if _all_fit(key, items):
            continue
        for i, item in enumerate(items):  # the first that does not fit, named (a file that is wrong: any speed)
            if not ok(item):
                raise InputError(f"expected {what}, got {item!r}"[:200], file=file, field=f"{key}[{i}]")
    starts = data.get("start_times") or []
    if starts and max(starts) - min(starts) > RECORD_SECONDS:  # each request is kept relative to the first
        i = starts.index(max(starts))
        raise InputError(f"requests started {max(starts) - min(starts):.3g} s apart (a run lasts at most "
                         f"{RECORD_SECONDS:g} s)", file=file, field=f"start_times[{i}]")


def _guess_workload(data: dict[str, Any]) -> str:
    ins = data.get("input_lens")
    outs = data.get("output_lens")
    if ins and outs:
        return f"random-{round(sum(ins) / len(ins))}x{round(sum(outs) / len(outs))}"
    n = data.get("num_prompts") or data.get("completed") or 0
    if n and data.get("total_input_tokens") is not None:
        return f"random-{round(data['total_input_tokens'] / n)}x{round(data.get('total_output_tokens', 0) / n)}"
    return "unknown"


def _date_epoch(data: dict[str, Any]) -> float:
    try:
        epoch = time.mktime(time.strptime(str(data.get("date"))[:40], "%Y%m%d-%H%M%S"))
    except (ValueError, OverflowError):
        return time.time()
    return epoch if 0 <= epoch <= typedread.TIME_MAX else time.time()


def detailed_result(run: Run) -> dict[str, Any]:
    """The run as a ``--save-detailed`` dictionary (summary plus vllm's per-request arrays)."""
    out = dict(run.summary)
    records = run.records()
    arrays: dict[str, list[Any]] = {
        "input_lens": [r.prompt_tokens for r in records], "output_lens": [r.output_len for r in records],
        "ttfts": [r.ttft if r.success else 0.0 for r in records], "itls": [r.itl for r in records],
        "start_times": [r.start for r in records], "generated_texts": ["" for _ in records],
        "errors": [r.error for r in records],
    }
    for key in DETAILED_KEYS:
        out[key] = arrays[key]
    return out
