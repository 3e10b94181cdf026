"""Run directories: ``runs_dir()/<campaign>/<topology>-<workload>[-rate][-repN]/``.

What a run directory holds:

- ``run.json``: what ran and how it went (status ``running | complete | incomplete | failed``, the runner, the
  endpoint, the client's self-measurement, flags, the KV-transfer check, the fingerprint, energy);
- ``summary.json``: the ``vllm bench serve --save-result`` dictionary (same keys, so either tool's scripts
  read it; ``topology`` and ``workload`` ride along as vllm's ``--metadata`` keys do);
- ``workload.json`` and ``plan.json`` (when a layout is known); ``logs/``: the servers' logs;
- ``requests.parquet``: one row per finished request (send time, TTFT, every ITL gap, E2E, token counts, error).

Every file is written with its secrets redacted (:mod:`tui.core.redact`: a plan's tokens, an ``--api-key``, a URL's
credentials, a token echoed in an error), the journal's error texts too.

Records are written as they arrive: each one is appended to ``requests.jsonl`` (flushed at once, in the worker's
compact form with the ITL list packed as base64 float64) and every
few seconds the new ones become a parquet part in ``requests/``. A clean end merges the parts into
``requests.parquet``. A run that was killed keeps its journal and parts; ``load_run`` reads them and reports the
run ``incomplete`` (its owner process is gone), with a summary computed from the requests that finished.
"""

from __future__ import annotations

import binascii
import contextlib
import functools
import json
import math
import os
import re
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tui.core import paths, safeio, safewrite, typedread
from tui.core.bench import served as served_mod
from tui.core.bench.kvxfer import KvTransferRun, TtftBreakdown
from tui.core.bench.metrics import (
    RequestRecord,
    pack_floats,
    record_from_wire,
    summarize,
)
from tui.core.bench.serverside import KvTransferCheck, PacingCheck, PrefixCacheCheck
from tui.core.errors import AppError, InputError
from tui.core.models import Catalog, Workload, ranges
from tui.core.plan.spec import LaunchPlan
from tui.core.procs import pid_alive
from tui.core.redact import Redactor

RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
#: a campaign folder's spec (``tui.core.bench.campaign``): the runs stored beside it are the campaign's
CAMPAIGN_FILE = "campaign.json"
#: the plan of the layout a run measured (``LaunchPlan.redacted_dict()``), when one was known
PLAN_FILE = "plan.json"
REQUESTS_FILE = "requests.parquet"
PARTS_DIR = "requests"
JOURNAL_FILE = "requests.jsonl"
FLUSH_EVERY_S = 5.0
FLUSH_EVERY_N = 2048
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    return _SAFE.sub("_", text).strip("_") or "run"


def rate_label(rate: float | None) -> str:
    return "inf" if rate is None or math.isinf(rate) else f"{rate:g}"


def run_name(topology: str, workload: str, rate: float | None = None, repeat: int = 1, *,
             with_rate: bool = False) -> str:
    parts = [safe_name(topology), safe_name(workload)]
    if with_rate or (rate is not None and not math.isinf(rate)):
        parts.append(rate_label(rate))
    name = "-".join(parts)
    return f"{name}-rep{repeat}" if repeat > 1 else name


@dataclass
class RunMeta:
    campaign: str
    name: str
    topology: str = ""
    workload: str = ""
    request_rate: float | None = None  # None = inf (saturation)
    repeat: int = 1
    status: str = "running"  # running | complete | incomplete | failed
    runner: str = "disagg-tui"  # disagg-tui | vllm-bench | imported
    started: float = field(default_factory=time.time)
    ended: float | None = None
    pid: int = field(default_factory=os.getpid)
    endpoint: str = ""
    model: str = ""
    message: str = ""
    flags: list[str] = field(default_factory=list)
    client: dict[str, Any] = field(default_factory=dict)
    kv_transfer: dict[str, Any] | None = None
    #: NIXL transfers over the run (``kvxfer.KvTransferRun.to_dict``: count, bytes, seconds, MB/s, failures),
    #: with ``link`` (the GPU-to-GPU bandwidth it is judged against) and ``slow_path``
    kv_xfer: dict[str, Any] | None = None
    #: where the mean TTFT went (``kvxfer.TtftBreakdown.to_dict``): client→proxy, prefill, KV transfer, decode
    ttft_breakdown: dict[str, Any] | None = None
    prefix_cache: dict[str, Any] | None = None
    sim_pacing: dict[str, Any] | None = None  # simulated servers: how far they fell behind their clock
    prompts: dict[str, Any] = field(default_factory=dict)  # format (text | ids | file) and how they were made
    triton_jit: list[str] = field(default_factory=list)
    energy: dict[str, Any] | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    goodput_slo: dict[str, float] = field(default_factory=dict)
    layout_id: str = ""
    #: speculative decoding over the run, from vLLM's counters (``serverside.spec_decode_check``): drafts, draft and
    #: accepted tokens, acceptance rate, mean acceptance length, per position; None without speculative decoding
    spec_decode: dict[str, Any] | None = None
    #: the serve knobs its layout was started with (``[ROLE.]NAME`` → value, ``profiles/knobs.yaml``); {} for none
    knobs: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.campaign}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["request_rate"] = rate_label(self.request_rate)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunMeta:
        """A run's record as :meth:`to_dict` wrote it, every field of its type and range (a run.json may come from
        a teammate's copied folder): a :class:`~tui.core.typedread.FieldError` names the first that is not. Keys
        of a newer version are left out."""
        if not isinstance(d, dict):
            raise typedread.FieldError(f"expected a mapping, got {typedread.described(d)}")
        data = dict(d)
        data["request_rate"] = _read_rate(d.get("request_rate"))
        meta = typedread.read(cls, data, ranges=_META_RANGES)
        _check_parts(meta)
        for key in _META_TEXTS:
            typedread.check_text(getattr(meta, key), (key,), limit=2048 if key == "endpoint" else 256)
        for i, flag in enumerate(meta.flags):
            typedread.check_text(flag, ("flags", i), limit=200)
        typedread.check_text(meta.message, ("message",), limit=typedread.MAX_TEXT, lines=True)
        if len(meta.knobs) > 64:
            raise typedread.FieldError(f"{len(meta.knobs):,} knobs (at most 64)", ("knobs",))
        for k, v in meta.knobs.items():  # the table's knob columns print both
            typedread.check_text(k, ("knobs",), limit=40)
            typedread.check_text(v, ("knobs", k), limit=40)
        return meta


#: the texts of a run's record that the table, the warnings and the console print as they are
_META_TEXTS = ("campaign", "name", "topology", "workload", "status", "runner", "endpoint", "model", "layout_id")
#: what a run's record may say beyond the types of its fields
_META_RANGES = {"pid": (0, typedread.PID_MAX), "repeat": (1, 1_000_000)}
#: a figure of a summary (a count, a throughput, milliseconds) at most, in magnitude
FIGURE_MAX = 1e15


def _read_rate(rate: Any) -> float | None:
    """A stored request rate (``"inf"``, a number, or its text as :func:`rate_label` wrote it)."""
    if rate is None or rate == "inf":
        return None
    value: Any = rate
    if isinstance(rate, str) and len(rate) <= 40:
        try:
            value = float(rate)
        except ValueError:
            value = rate
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= FIGURE_MAX:
        raise typedread.FieldError(f"expected 'inf' or a rate > 0, got {typedread.described(rate)}",
                                   ("request_rate",))
    return float(value)


_F = float | None
#: what the readers of a run's record take from its free-form parts (the dataclasses' ``to_dict`` and the keys they
#: derive): each key named here must hold its type, so a figure of a copied record stays a number
_META_PARTS: dict[str, dict[str, Any]] = {
    "kv_transfer": {**typedread.field_types(KvTransferCheck), "transferred": bool, "recomputed": bool,
                    "local_share": _F},
    "prefix_cache": {**typedread.field_types(PrefixCacheCheck), "share": _F, "unexpected": bool},
    "sim_pacing": {**typedread.field_types(PacingCheck), "overloaded": bool, "held_clock": _F},
    "kv_xfer": {**typedread.field_types(KvTransferRun), "mean_xfer_ms": _F, "mean_mib": _F, "mib_per_s": _F,
                "gb_per_s": _F, "moved_mib_per_s": _F, "slow_path": bool,
                "link": dict[str, str | float | None] | None},
    "ttft_breakdown": {**typedread.field_types(TtftBreakdown), "transfer_share": _F},
    "energy": {"joules": _F, "per_gpu_joules": dict[str, float], "joules_per_output_token": _F},
    "client": {"tool": str, "setup_s": _F, "warmup_s": _F, "warmups": int, "initial_test": str,
               "warmup_completed": bool | None, "counters_include_warmup": bool, "cpu": _F, "loop_lag_p50_ms": _F,
               "loop_lag_p90_ms": _F, "loop_lag_p99_ms": _F, "loop_lag_max_ms": _F, "requested_rate": _F,
               "achieved_rate": _F, "send_lag_mean_ms": _F, "send_lag_max_ms": _F, "connections_opened": int,
               "client_limited": bool, "reasons": list[str]},
    "fingerprint": {"hostname": str | None, "simulated": bool | None, "server": dict[str, Any] | None,
                    "gpus": list[dict[str, Any]] | None, "hosts": list[dict[str, Any]] | None,
                    "cluster": str | None},
}


def _check_parts(meta: RunMeta) -> None:
    for name, types in _META_PARTS.items():
        value = getattr(meta, name)
        if value:
            try:
                typedread.check_keys(value, types)
            except typedread.FieldError as exc:
                raise exc.inside(name) from None
    fp = meta.fingerprint
    typedread.check_text(fp.get("hostname"), ("fingerprint", "hostname"), limit=255)  # the setup column's
    for i, h in enumerate(fp.get("hosts") or []):  # a layout across hosts: each host's name is the setup column's
        typedread.check_text(h.get("name"), ("fingerprint", f"hosts[{i}]", "name"), limit=64)
    server = fp.get("server")
    if isinstance(server, dict):
        typedread.check_text(server.get("server_version"), ("fingerprint", "server", "server_version"), limit=100)


def read_meta_dict(data: Any, source: str | Path) -> RunMeta:
    """:meth:`RunMeta.from_dict`, its error one line naming ``source`` and the field."""
    try:
        return RunMeta.from_dict(data)
    except typedread.FieldError as exc:
        raise InputError(exc.reason, file=source, field=exc.field or None) from None


#: the summary keys that hold figures, besides those ending as vllm's do (``_ms``, ``_throughput``, ``_tokens``...)
_FIGURES = frozenset({"completed", "failed", "num_prompts", "duration", "request_goodput", "burstiness",
                      "max_concurrency", "max_concurrent_requests", "random_range_ratio", "random_input_len",
                      "random_output_len", "random_prefix_len"})
_FIGURE_ENDS = ("_ms", "_throughput", "_tokens", "_per_s", "_len", "_s", "_pct")
_TEXTS = frozenset({"date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "topology",
                    "workload"})


def check_summary(data: Any, source: str | Path) -> dict[str, Any]:
    """A run's summary (``vllm bench serve``'s keys), its figures numbers within range and its names texts; one
    line naming ``source`` and the key otherwise. Keys of other kinds ride along as they are."""
    if not isinstance(data, dict):
        raise InputError(f"a summary must be a mapping, got {typedread.described(data)}", file=source)
    for key, value in data.items():
        if value is None:
            continue
        if key in _FIGURES or key.endswith(_FIGURE_ENDS) or key.startswith("ci95_"):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or abs(value) > FIGURE_MAX:
                raise InputError(f"expected a figure (a finite number within ±{FIGURE_MAX:g}), got "
                                 f"{typedread.described(value)}", file=source, field=str(key))
        elif key == "request_rate":
            try:
                _read_rate(value)
            except typedread.FieldError as exc:
                raise InputError(exc.reason, file=source, field=key) from None
        elif key in _TEXTS:
            try:
                typedread.check_text(value, (key,), limit=1000)
            except typedread.FieldError as exc:
                raise InputError(exc.reason, file=source, field=key) from None
    return data


def write_json(path: Path, data: Any, *, redactor: Redactor | None = None, root: Path | None = None) -> None:
    """Whole or not at all: a reader never finds half a file (a full disk leaves the old file, or none). Secrets
    never reach a run directory: ``data`` is written redacted (a plan's HF_TOKEN, an --api-key, a URL's
    credentials, a token in a message; :mod:`tui.core.redact`). Inside a project folder the folders are checked
    and no link is followed (:func:`tui.core.safewrite.write_atomic`); ``root``: the folder that is trusted (by
    default the project folder holding ``path``, else its own folder)."""
    text = json.dumps((redactor or Redactor()).value(data), indent=1, default=str)
    safewrite.write_atomic(path, text, root=root or paths.root_for(path))


def write_parquet(path: Path, frame: Any, *, root: Path | None = None) -> None:
    """A polars frame as a parquet file, whole or not at all and never through a link (as :func:`write_json`)."""
    import io

    buf = io.BytesIO()
    frame.write_parquet(buf)
    safewrite.write_atomic(path, buf.getvalue(), root=root or paths.root_for(path))


def _to_wire(rec: RequestRecord) -> dict[str, Any]:
    return {"i": rec.index, "st": rec.start, "ok": rec.success, "ttft": rec.ttft, "lat": rec.latency,
            "itl": pack_floats(rec.itl), "pt": rec.prompt_tokens, "ct": rec.output_tokens, "ch": rec.chunks,
            "err": rec.error, "ei": rec.expected_input, "eo": rec.expected_output}


def _redact_wire(line: bytes, red: Redactor) -> bytes:
    """A finished request's line with its error text redacted (a server's error may echo a token); a line without
    an error (nearly all) is kept as it came, unparsed."""
    if b'"err":"' not in line or b'"err":""' in line:
        return line
    try:
        msg = json.loads(line)
    except ValueError:
        return line
    if not isinstance(msg, dict) or not isinstance(msg.get("err"), str):
        return line
    err = red.text(msg["err"])
    if err == msg["err"]:
        return line
    msg["err"] = err
    return json.dumps(msg, separators=(",", ":")).encode()


def records_frame(records: Sequence[RequestRecord]) -> Any:
    import polars as pl

    return pl.DataFrame(
        {
            "index": [r.index for r in records],
            "start_s": [r.start for r in records],
            "success": [r.success for r in records],
            "ttft_s": [r.ttft for r in records],
            "latency_s": [r.latency for r in records],
            "itl_s": [list(r.itl) for r in records],
            "prompt_tokens": [r.prompt_tokens for r in records],
            "output_tokens": [r.output_tokens for r in records],
            "chunks": [r.chunks for r in records],
            "error": [r.error for r in records],
            "expected_input": [r.expected_input for r in records],
            "expected_output": [r.expected_output for r in records],
        },
        schema={"index": pl.Int64, "start_s": pl.Float64, "success": pl.Boolean, "ttft_s": pl.Float64,
                "latency_s": pl.Float64, "itl_s": pl.List(pl.Float64), "prompt_tokens": pl.Int64,
                "output_tokens": pl.Int64, "chunks": pl.Int64, "error": pl.Utf8, "expected_input": pl.Int64,
                "expected_output": pl.Int64},
    )


def records_from_frame(df: Any) -> list[RequestRecord]:
    out = []
    for row in df.iter_rows(named=True):
        out.append(RequestRecord(
            index=int(row["index"]), start=float(row["start_s"]), success=bool(row["success"]),
            ttft=float(row["ttft_s"] or 0.0), latency=float(row["latency_s"] or 0.0),
            itl=list(row["itl_s"] or []), prompt_tokens=int(row["prompt_tokens"] or 0),
            output_tokens=None if row["output_tokens"] is None else int(row["output_tokens"]),
            chunks=int(row["chunks"] or 0), error=str(row["error"] or ""),
            expected_input=int(row["expected_input"] or 0), expected_output=int(row["expected_output"] or 0),
        ))
    return out


class RunWriter:
    """Writes one run directory while the run goes (journal + parquet parts), then finalises it."""

    def __init__(self, directory: Path, meta: RunMeta, *, workload: dict[str, Any] | None = None,
                 plan: dict[str, Any] | None = None) -> None:
        self.dir = directory
        self.meta = meta
        #: the folder trusted as it is: the runs folder (checked: this user's, writable by nobody else), or the run's
        #: own folder when it is elsewhere; nothing below it is reached through a link
        self.root = paths.root_for(directory) or directory
        safewrite.ensure_dir(directory / PARTS_DIR, root=self.root)
        #: secrets never reach a run directory: each file is written redacted, and so are the journal's error texts
        self.redactor = Redactor()
        if workload is not None:
            write_json(directory / "workload.json", workload, redactor=self.redactor, root=self.root)
        if plan is not None:
            write_json(directory / PLAN_FILE, plan, redactor=self.redactor, root=self.root)
        self.save_meta()
        self._journal = safewrite.open_append(directory / JOURNAL_FILE, root=self.root, buffering=-1)
        self._raw: list[bytes] = []  # every record line, as received
        self._records: list[RequestRecord] = []  # decoded so far
        self._in_parts = 0  # records already written to parquet parts
        self._part = 0
        self._last_flush = time.monotonic()

    def save_meta(self) -> None:
        write_json(self.dir / RUN_FILE, self.meta.to_dict(), redactor=self.redactor, root=self.root)

    def add_wire(self, line: bytes) -> None:
        """Keep a finished request as the worker sent it: journaled at once, decoded later. While a run goes the
        parent does as little as it can (it may share a core with the client or the server)."""
        line = _redact_wire(line.rstrip(b"\n"), self.redactor)
        self._journal.write(line + b"\n")
        self._journal.flush()
        self._raw.append(line)
        if (len(self._raw) - self._in_parts >= FLUSH_EVERY_N
                or time.monotonic() - self._last_flush >= FLUSH_EVERY_S):
            self.flush_part()

    def add(self, rec: RequestRecord) -> None:
        self.add_wire(json.dumps(_to_wire(rec), separators=(",", ":")).encode())

    @property
    def records(self) -> list[RequestRecord]:
        for line in self._raw[len(self._records):]:
            self._records.append(record_from_wire(json.loads(line)))
        return self._records

    def flush_part(self) -> None:
        """The records since the last part become one parquet part."""
        self._last_flush = time.monotonic()
        new = self.records[self._in_parts:]
        if not new:
            return
        self._part += 1
        write_parquet(self.dir / PARTS_DIR / f"part-{self._part:06d}.parquet", records_frame(new), root=self.root)
        self._in_parts += len(new)

    def finish(self, status: str, summary: dict[str, Any] | None, *, message: str = "") -> None:
        """Merge the parts into ``requests.parquet``, write the summary, record the status."""
        self._journal.close()
        ordered = sorted(self.records, key=lambda r: r.index)
        write_parquet(self.dir / REQUESTS_FILE, records_frame(ordered), root=self.root)
        shutil.rmtree(self.dir / PARTS_DIR, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (self.dir / JOURNAL_FILE).unlink()
        if summary is not None:
            write_json(self.dir / SUMMARY_FILE, summary, redactor=self.redactor, root=self.root)
        self.meta.status = status
        self.meta.ended = time.time()
        if message:
            self.meta.message = message
        self.save_meta()


# --- reading ---------------------------------------------------------------------------------------------------


@dataclass
class Run:
    path: Path
    meta: RunMeta
    summary: dict[str, Any]

    @property
    def id(self) -> str:
        return self.meta.id

    def records(self) -> list[RequestRecord]:
        return read_records(self.path)

    @property
    def simulated(self) -> bool:
        """Measured on the simulated host (its figures come from the simulator's performance model)."""
        return bool((self.meta.fingerprint or {}).get("simulated")) or bool(self.summary.get("simulated"))

    @property
    def unusable(self) -> str:
        """Why this run's figures may enter no mean, interval, best mark or recommendation ("" when they may): it is
        still running, it failed or was stopped (``incomplete``), or it completed no request. The run is stored and
        shown all the same, with this as its status."""
        s = self.summary
        done, failed = _count(s.get("completed")), _count(s.get("failed"))
        total = _count(s.get("num_prompts")) or done + failed
        counts = f"{done}/{total} done, {failed} failed" if s else ""
        status = self.meta.status
        if status == "running":
            return "still running"
        if status != "complete":
            return f"{status} ({counts})" if counts else status
        if not done:
            return f"no request completed ({counts})" if counts else "no request completed (no summary)"
        return ""

    @functools.cached_property
    def served(self) -> served_mod.ServedSettings:
        """What its layout served with (every vLLM flag and variable of its plan, normalised: :mod:`served`)."""
        return read_run_served(self.path)

    @property
    def campaign_folder(self) -> Path | None:
        """The campaign folder it is stored in (one with a ``campaign.json``), None for a run of no campaign (a
        ``bench`` or an imported result)."""
        folder = self.path.parent
        return folder if os.path.lexists(folder / CAMPAIGN_FILE) and os.path.lexists(self.path / RUN_FILE) \
            else None


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else 0


def read_records(directory: Path) -> list[RequestRecord]:
    """Every finished request of a run: ``requests.parquet``, else the parts and the journal (a killed run).
    Each file must be a regular one within the size of a result; a record of the wrong type or range makes the
    file's one-line InputError (a journal's line is skipped, as one cut short by a kill)."""
    final = directory / REQUESTS_FILE
    if final.exists() or final.is_symlink():
        return _parquet_records(final)
    by_index: dict[int, RequestRecord] = {}
    parts = sorted((directory / PARTS_DIR).glob("part-*.parquet")) if (directory / PARTS_DIR).is_dir() else []
    for part in parts:
        for rec in _parquet_records(part):
            by_index[rec.index] = rec
    journal = directory / JOURNAL_FILE
    if journal.exists() or journal.is_symlink():
        for line in safeio.read_bytes(journal, "results").splitlines():
            try:
                rec = record_from_wire(json.loads(line, parse_constant=_no_constant))
            except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError, binascii.Error):
                continue  # a line cut short by the kill
            if _record_problem(rec) is None:
                by_index.setdefault(rec.index, rec)
    return [by_index[k] for k in sorted(by_index)]


#: a request's seconds (send time, TTFT, latency, a gap) at most; its token counts at most
RECORD_SECONDS = 1e7
RECORD_TOKENS = 1 << 40


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a record may hold")


def _record_problem(rec: RequestRecord) -> str | None:
    """What is out of range in a request's record (None: nothing)."""
    for name in ("start", "ttft", "latency"):
        v = getattr(rec, name)
        if not (isinstance(v, int | float) and 0.0 <= v <= RECORD_SECONDS):
            return f"{name} must be 0..{RECORD_SECONDS:g} s, got {typedread.described(v)}"
    if not all(isinstance(g, int | float) and 0.0 <= g <= RECORD_SECONDS for g in rec.itl):
        return "an ITL gap out of range"
    for name in ("index", "prompt_tokens", "output_tokens", "chunks", "expected_input", "expected_output"):
        v = getattr(rec, name)
        if v is not None and not (isinstance(v, int) and 0 <= v <= RECORD_TOKENS):
            return f"{name} must be a count ≥ 0, got {typedread.described(v)}"
    return None


def _parquet_records(path: Path) -> list[RequestRecord]:
    import polars as pl

    st = safeio.check_regular(path)
    limit = safeio.LIMITS["results"]
    if st.st_size > limit:
        raise safeio.too_large(path, st.st_size, limit, "results")
    try:
        records = records_from_frame(pl.read_parquet(path))
    except (OSError, ValueError, TypeError, KeyError, OverflowError, pl.exceptions.PolarsError) as exc:
        raise InputError(f"damaged request records: {safeio.shown(str(exc), 160)}", file=path) from None
    for i, rec in enumerate(records):
        problem = _record_problem(rec)
        if problem is not None:
            raise InputError(f"damaged request records: row {i + 1}: {problem}", file=path)
    return records


def read_meta(directory: Path) -> RunMeta:
    """A run directory's ``run.json``: a regular file within the size of a run record, strict JSON, every field of
    its type and range; one-line InputError naming the file (and field) otherwise."""
    run_file = directory / RUN_FILE
    if not (run_file.exists() or run_file.is_symlink()):
        raise InputError("not a run directory (no run.json)", file=directory)
    try:
        data = safeio.load_json(run_file, "run record")
    except InputError as exc:
        raise InputError(f"damaged run.json: {exc.message}", file=run_file, line=exc.line, field=exc.field) from None
    return read_meta_dict(data, run_file)


def read_summary(directory: Path) -> dict[str, Any] | None:
    """A run directory's ``summary.json`` (:func:`check_summary`), None when it has none."""
    summary_file = directory / SUMMARY_FILE
    if not (summary_file.exists() or summary_file.is_symlink()):
        return None
    try:
        data = safeio.load_json(summary_file, "run record")
    except InputError as exc:
        raise InputError(f"damaged summary: {exc.message}", file=summary_file, line=exc.line,
                         field=exc.field) from None
    return check_summary(data, summary_file)


def load_run(directory: Path) -> Run:
    """A stored run (a folder a teammate may have copied: every file is checked, :func:`read_meta`,
    :func:`read_summary`, :func:`read_records`); one-line InputError naming the file that is damaged."""
    meta = read_meta(directory)
    if meta.status == "running" and not pid_alive(meta.pid):
        meta.status = "incomplete"
        if "incomplete" not in meta.flags:
            meta.flags.append("incomplete")
        meta.message = meta.message or "the run's process ended before the run did (killed?)"
    summary: dict[str, Any] = {}
    stored = read_summary(directory)
    if stored is not None:
        summary = stored
    elif meta.status != "running":
        records = read_records(directory)
        if records:
            ends = [r.end for r in records if r.success] or [r.start for r in records]
            duration = max(max(ends) - min(r.start for r in records), 1e-9)
            summary = summarize(records, duration, goodput=meta.goodput_slo or None,
                                header=_header_from_meta(meta, len(records), directory))
    return Run(directory, meta, summary)


def _header_from_meta(meta: RunMeta, num_prompts: int, directory: Path) -> dict[str, Any]:
    """The summary's header for a run whose summary was never written, from its meta and its workload file."""
    workload: dict[str, Any] = {}
    with contextlib.suppress(InputError):
        loaded = safeio.load_json(directory / "workload.json", "run record")
        workload = loaded if isinstance(loaded, dict) else {}
    burstiness, concurrency = workload.get("burstiness", 1.0), workload.get("max_concurrency")
    if isinstance(burstiness, bool) or not isinstance(burstiness, int | float) or not 0 < burstiness <= FIGURE_MAX:
        burstiness = 1.0
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 0 < concurrency <= FIGURE_MAX:
        concurrency = None
    return {"date": time.strftime("%Y%m%d-%H%M%S", time.localtime(meta.started)), "endpoint_type": "openai",
            "backend": "openai", "label": "disagg-tui", "model_id": meta.model, "tokenizer_id": meta.model,
            "num_prompts": num_prompts, "topology": meta.topology, "workload": meta.workload,
            "request_rate": rate_label(meta.request_rate), "burstiness": burstiness, "max_concurrency": concurrency}


def _has_run_file(folder: Path) -> bool:
    return os.path.lexists(folder / RUN_FILE)


def _subdirs(folder: Path) -> list[Path]:
    try:
        names, _more = safeio.scan_dir(folder)
    except OSError:
        return []
    return [folder / n for n in names if (folder / n).is_dir()]


def _run_dirs(folder: Path) -> list[Path]:
    """The run directories of a campaign folder (each with a run.json of any kind), by name."""
    return [d for d in _subdirs(folder) if _has_run_file(d)]


def find_runs(refs: Iterable[str] = (), root: Path | None = None) -> list[Path]:
    """Run directories named by ``refs`` (a run path, a campaign name or path, ``campaign/run``), or every run. A
    folder whose run.json is a broken link, a FIFO or anything but a file is a run all the same (``load_run``
    says what is wrong with it); at most :data:`safeio.MAX_DIR_ENTRIES` entries are read of each folder."""
    base = root or paths.runs_dir()
    out: list[Path] = []
    refs = list(refs)
    if not refs:
        return [d for c in _subdirs(base) for d in _run_dirs(c)]
    for ref in refs:
        candidates = [Path(ref).expanduser(), base / ref]
        for c in candidates:
            if _has_run_file(c):  # a FIFO too: load_run says what it is
                out.append(c)
                break
            found = _run_dirs(c)
            if found:
                out.extend(found)
                break
        else:
            raise InputError(f"no run or campaign {ref!r} (looked in {base})", field="RUN")
    seen: set[Path] = set()
    unique = []
    for p in out:
        rp = p.resolve()
        if rp not in seen:
            seen.add(rp)
            unique.append(p)
    return unique


def read_run_json(path: Path) -> dict[str, Any]:
    """A JSON object of a run folder (``plan.json``, ``workload.json``): {} when absent (or not an object); a one-line
    InputError naming the file when it is no regular file (a FIFO, a device, a broken link), larger than a run
    record may be, or not strict JSON (NaN, nesting past safeio.MAX_DEPTH)."""
    if not os.path.lexists(path):
        return {}
    data = safeio.load_json(path, "run record")
    return data if isinstance(data, dict) else {}


def read_run_workload(directory: Path) -> Workload | None:
    """The workload a run directory's ``workload.json`` says it ran (an edited one too), every field of its type
    and within :data:`tui.core.models.ranges.WORKLOAD`; None when it has none or one that does not read."""
    try:
        data = safeio.load_json(directory / "workload.json", "run record")
    except InputError:
        return None
    if not isinstance(data, dict):
        return None
    data = {k: v for k, v in data.items() if k in Workload.__dataclass_fields__}
    rate = data.pop("request_rate", None)
    bounds = {k: (r.lo, r.hi) for k, r in ranges.WORKLOAD.items() if k != "request_rate"}
    try:
        wl = typedread.read(Workload, data, ranges=bounds)
        limits = ranges.WORKLOAD["request_rate"]
        value = _read_rate(rate)
    except typedread.FieldError:
        return None
    if value is not None and not limits.lo <= value <= limits.hi:
        return None
    return wl.with_overrides(request_rate=math.inf if value is None else value)


def run_workloads(runs: Iterable[Run], catalog: Catalog | None = None) -> dict[str, Workload]:
    """The workloads the runs used, by name: each run's own (``workload.json``, an edited one too, checked), else
    the catalogue's of that name; a name neither knows is left out."""
    out: dict[str, Workload] = {}
    for r in runs:
        name = r.meta.workload
        if name in out:
            continue
        own = read_run_workload(r.path)
        if own is not None:
            out[name] = own
            continue
        if catalog is not None:
            with contextlib.suppress(AppError):
                out[name] = catalog.workload(name)
    return out


def read_run_plan(directory: Path) -> LaunchPlan | None:
    """The plan of the layout a run directory measured (its ``plan.json``), None when it kept none; the folder may
    be a teammate's copy: the file is read bounded and strict, and a plan of the wrong shape is a one-line
    InputError naming it."""
    path = directory / PLAN_FILE
    if not os.path.lexists(path):
        return None
    data = safeio.load_json(path, "run record")
    plan: LaunchPlan = safeio.guarded(lambda: LaunchPlan.from_dict(data), path, "plan")
    return plan


def read_run_served(directory: Path) -> served_mod.ServedSettings:
    """The served settings of a run directory's ``plan.json`` (:func:`served.plan_settings`); unknown, saying why,
    when it kept none, or one that does not read (a copied folder's file: bounded and strict, never an error)."""
    path = directory / PLAN_FILE
    if not os.path.lexists(directory / RUN_FILE):
        return served_mod.unknown("its run folder is not on this host")
    if not os.path.lexists(path):
        return served_mod.unknown("stored without its plan")
    try:
        data = safeio.load_json(path, "run record")
    except InputError as err:
        return served_mod.unknown(f"its plan does not read: {err.message}")
    if not isinstance(data, dict):
        return served_mod.unknown("its plan is not an object")
    return served_mod.plan_settings(data)


def load_runs(directories: Iterable[Path]) -> tuple[list[Run], list[InputError]]:
    """The runs of ``directories`` that read; each that does not is left out with its one-line error (what the
    results list as damaged, instead of one copied folder stopping them all)."""
    runs: list[Run] = []
    damaged: list[InputError] = []
    for d in directories:
        try:
            runs.append(load_run(d))
        except InputError as err:
            damaged.append(err)
    return runs, damaged
