"""Files from outside are hostile until checked (issue 21): recordings, ``results import`` files, stored runs and
campaigns, the state file, a benchmark's events file and the start-up history.

Each class of hostile input has a case here: a FIFO, a device or a directory in a file's place (refused at once,
never waited on), a decompression bomb (bounded time and memory, one line naming the file and the byte), values of
the wrong type or range inside otherwise valid files (a time that is a string, NaN, 1e300, a count that is a list),
and what every JSON the CLI prints must stay (valid JSON, no NaN). Loopback only; no network."""

from __future__ import annotations

import json
import math
import os
import struct
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import zstandard

from tests.hardening.cli import CliResult, no_traceback, run_cli
from tests.helpers import cli
from tui.core.record.format import FORMAT, MAGIC, RecordingHeader, chunk_crc, encode_chunk

T0 = 1_800_000_000.0


# --- building recordings by hand -----------------------------------------------------------------------------------


def _header(**over: Any) -> bytes:
    head: dict[str, Any] = {"format": FORMAT, "version": 1, "app_version": "0", "started": T0, "command": "test",
                            "recorded": ["everything"], "simulated": True, "host": {}, "extra": {}}
    head.update(over)
    return json.dumps(head).encode() + b"\n"


def _lines(events: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def _frame(data: bytes, *, finish: bool = True) -> bytes:
    """One zstd frame of ``data``, as the recorder writes it (a block flush, or the frame's end)."""
    cobj = zstandard.ZstdCompressor(write_checksum=True).compressobj()
    flag = zstandard.COMPRESSOBJ_FLUSH_FINISH if finish else zstandard.COMPRESSOBJ_FLUSH_BLOCK
    return cobj.compress(data) + cobj.flush(flag)


def _rle_frame(byte: bytes, blocks: int) -> bytes:
    """A zstd frame of ``blocks`` RLE blocks of 128 KiB of ``byte`` each: 4 bytes of file per 128 KiB of output
    (a 200 kB file decompresses to gigabytes)."""
    head = b"\x28\xb5\x2f\xfd" + b"\x00" + bytes([7 << 3])  # no content size; a 128 KiB window
    size = 128 << 10
    body = bytearray()
    for i in range(blocks):
        last = 1 if i == blocks - 1 else 0
        word = last | (1 << 1) | (size << 3)  # block type 1: RLE
        body += word.to_bytes(3, "little") + byte
    return head + bytes(body)


def _event(kind: str, ts: float, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "ts": ts, **fields}


GOOD = [_event("notice", T0 + 1, level="error", message="first"),
        _event("server_ready", T0 + 2, server="s0", url="http://127.0.0.1:1", startup_s=2.0),
        _event("layout_changed", T0 + 3, layout_id="L", status="ready", topology="tp1", profile_id="m")]


def _recording(path: Path, chunks: list[tuple[float, float, int, bool, bytes]], *,
               header: bytes | None = None, markers: list[list[Any]] | None = None) -> Path:
    """A recording of ``(t0, t1, n, new_frame, payload)`` chunks (the last marked as the clean end)."""
    data = bytearray(header if header is not None else _header())
    for i, (t0, t1, n, new_frame, payload) in enumerate(chunks):
        data += encode_chunk(t0, t1, n, new_frame=new_frame, end=i == len(chunks) - 1,
                             markers=(markers or []) if i == 0 else [], payload=payload)
    path.write_bytes(bytes(data))
    return path


def _good_chunk() -> tuple[float, float, int, bool, bytes]:
    return (T0 + 1, T0 + 3, len(GOOD), True, _frame(_lines(GOOD)))


def _one_error_line(res: CliResult) -> str:
    errors = [line for line in res.err_lines if not line.startswith("warning:")]
    assert len(errors) == 1, res.err
    return errors[0]


def _strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in the JSON printed")

    return json.loads(text, parse_constant=refuse)


# --- recordings: decompression bombs ---------------------------------------------------------------------------


@pytest.mark.parametrize("fill", [b"\x00", b"\n", b"{"], ids=["zeros", "newlines", "one-long-line"])
def test_a_decompression_bomb_is_bounded_and_what_came_before_replays(fill: bytes, tmp_path: Path) -> None:
    """200 kB of RLE blocks (6 GB once decompressed) after a good frame: read in bounded time and memory, the good
    events replay, the damage names the byte where the bomb is."""
    bomb = _rle_frame(fill, 50_000)
    assert len(bomb) < 210_000
    path = _recording(tmp_path / "bomb.dtrec", [_good_chunk(), (T0 + 4, T0 + 5, 1000, True, bomb)])
    from tui.core.record import Recording

    tracemalloc.start()
    began = time.monotonic()
    cpu0 = time.process_time()
    try:
        with Recording.open(path) as rec:
            events = list(rec.events())
            damage = rec.damage
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - began < 20 and time.process_time() - cpu0 < 10
    assert peak < 96 << 20, f"peak {peak:,} bytes"
    assert [e.kind for e in events] == [e["kind"] for e in GOOD]
    assert damage is not None and "byte" in damage
    res = run_cli(["replay", "--headless", str(path)])
    assert no_traceback(res) and res.code == 0, res.err
    warn = [line for line in res.err_lines if line.startswith("warning:")]
    assert len(warn) == 1 and str(path) in warn[0] and "byte" in warn[0], res.err
    assert "STOPPED EARLY" in res.out


def test_a_bomb_inside_the_first_frame_stops_at_the_frame_limit(tmp_path: Path) -> None:
    """A frame whose one chunk says 3 events but decompresses to gigabytes of valid-looking lines."""
    line = json.dumps(GOOD[0]).encode() + b"\n"
    cobj = zstandard.ZstdCompressor().compressobj()
    piece = line * ((4 << 20) // len(line))
    payload = b"".join(cobj.compress(piece) for _ in range(200)) + cobj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    assert len(payload) < 2 << 20
    path = _recording(tmp_path / "lines.dtrec", [(T0, T0 + 1, 3, True, payload)])
    from tui.core.record import Recording

    began = time.monotonic()
    with Recording.open(path) as rec:
        n = sum(1 for _ in rec.events())
        assert rec.damage is not None and "byte" in rec.damage
    assert n <= 3 and time.monotonic() - began < 20


def test_the_overall_output_limit_bounds_many_frames(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frame after frame of good events, each within the frame limit: the whole pass stops at its own limit."""
    from tui.core.record import reader

    monkeypatch.setattr(reader, "MAX_OUTPUT_FLOOR", 4096)
    monkeypatch.setattr(reader, "MAX_OUTPUT_RATIO", 2)
    lines = _lines(GOOD * 40)
    chunks = [(T0 + i, T0 + i + 0.5, len(GOOD) * 40, True, _frame(lines)) for i in range(50)]
    path = _recording(tmp_path / "many.dtrec", chunks)
    with reader.Recording.open(path) as rec:
        n = sum(1 for _ in rec.events())
        assert rec.damage is not None and "decompress" in rec.damage
    assert 0 < n < 50 * len(GOOD) * 40


# --- recordings: what is not a file --------------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["fifo", "directory", "device"])
def test_replay_refuses_what_is_not_a_regular_file_at_once(what: str, tmp_path: Path) -> None:
    target = {"fifo": tmp_path / "r.dtrec", "directory": tmp_path / "d.dtrec", "device": Path("/dev/zero")}[what]
    if what == "fifo":
        os.mkfifo(target)
    elif what == "directory":
        target.mkdir()
    began = time.monotonic()
    proc = cli("replay", "--headless", str(target), timeout=60)
    assert time.monotonic() - began < 60
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(target) in lines[0] and "regular file" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


# --- recordings: a header or chunks with values of the wrong type or range --------------------------------------


@pytest.mark.parametrize(("over", "field"), [
    ({"started": "yesterday"}, "started"),
    ({"started": 1e300}, "started"),
    ({"started": -5.0}, "started"),
    ({"recorded": "gpu"}, "recorded"),
    ({"host": [1, 2]}, "host"),
    ({"command": {"a": 1}}, "command"),
    ({"simulated": "no"}, "simulated"),
    ({"version": 1.5}, "version"),
    ({"version": True}, "version"),
])
def test_a_header_of_the_wrong_types_is_one_line(over: dict[str, Any], field: str, tmp_path: Path) -> None:
    path = _recording(tmp_path / "h.dtrec", [_good_chunk()], header=_header(**over))
    for argv in (["replay", "--headless", str(path)], ["replay", "--json", str(path)],
                 ["replay", "--headless", "--markers", str(path)]):
        res = run_cli(argv)
        assert no_traceback(res) and res.code == 2, res.err
        line = _one_error_line(res)
        assert str(path) in line and field in line, line


def test_a_header_with_nan_is_one_line(tmp_path: Path) -> None:
    raw = _header().replace(f'"started": {json.dumps(T0)}'.encode(), b'"started": NaN')
    assert b"NaN" in raw
    path = _recording(tmp_path / "nan.dtrec", [_good_chunk()], header=raw)
    res = run_cli(["replay", "--json", str(path)])
    assert no_traceback(res) and res.code == 2, res.err
    assert str(path) in _one_error_line(res)


@pytest.mark.parametrize(("t0", "t1"), [(math.nan, T0), (T0, math.inf), (1e300, 1e300), (-1e12, T0), (T0 + 9, T0)])
def test_chunk_times_out_of_range_are_damage(t0: float, t1: float, tmp_path: Path) -> None:
    path = _recording(tmp_path / "t.dtrec", [_good_chunk(), (t0, t1, len(GOOD), True, _frame(_lines(GOOD)))])
    res = run_cli(["replay", "--json", str(path)])
    assert no_traceback(res) and res.code == 0, res.err
    data = _strict_json(res.out)
    assert data["damage"] and "byte" in data["damage"] and data["events"] == len(GOOD)
    res = run_cli(["replay", "--headless", "--markers", str(path)])
    assert no_traceback(res) and res.code == 0, res.err


BAD_EVENTS = [
    _event("notice", "soon", level="error", message="x"),  # a time that is a string
    _event("notice", 1e300, level="error", message="x"),  # a time past any recording
    {"kind": "notice", "ts": None, "level": "error", "message": "x"},
    _event("server_ready", T0 + 2, server="s", url="u", startup_s="fast"),
    _event("server_ready", T0 + 2, server=["s"], url="u", startup_s=1.0),
    _event("layout_changed", T0 + 2, layout_id="L", status=5),
    _event("server_exited", T0 + 2, server="s", returncode="x", during="load", last_lines="abc"),
    _event("bench_done", T0 + 2, run_id="c/r", status="complete", summary=[1, 2], meta={}),
    _event("gpu_sampled", T0 + 2, host="h", simulated=True, gpus=[{"index": "zero"}]),
    _event("server_ready", T0 + 2, server="s", url="u", startup_s=1e300),
    [1, 2, 3],
    "just a text",
    _event("notice", T0 + 2, level="error"),  # a field missing
]


def test_events_of_the_wrong_type_are_skipped_and_counted(tmp_path: Path) -> None:
    lines = _lines(GOOD[:1]) + _lines(BAD_EVENTS) + b'{"kind": "notice", "ts": NaN, "level": "e", "message": "m"}\n'
    lines += _lines(GOOD[1:])
    n = len(GOOD) + len(BAD_EVENTS) + 1
    path = _recording(tmp_path / "e.dtrec", [(T0 + 1, T0 + 3, n, True, _frame(lines))])
    from tui.core.record import Recording

    with Recording.open(path) as rec:
        kinds = [e.kind for e in rec.events()]
        assert kinds == [e["kind"] for e in GOOD]
        assert rec.bad_events == len(BAD_EVENTS) + 1 and rec.damage is None
    for argv in (["replay", "--headless", str(path)], ["replay", "--headless", "--markers", str(path)]):
        res = run_cli(argv)
        assert no_traceback(res) and res.code == 0, res.err
        assert f"{len(BAD_EVENTS) + 1} damaged events" in res.out, res.out
    res = run_cli(["replay", "--json", str(path)])
    assert no_traceback(res) and res.code == 0, res.err
    data = _strict_json(res.out)
    assert data["bad_events"] == len(BAD_EVENTS) + 1 and data["events"] == len(GOOD)


def test_markers_of_the_wrong_type_are_left_out_and_labels_escaped(tmp_path: Path) -> None:
    markers = [[T0 + 1, "failure", "ok one"], ["soon", "failure", "x"], [math.nan, "phase", "x"],
               [1e300, "phase", "x"], [T0 + 2, "nonsense", "x"], [T0 + 2, "phase"], "x",
               [T0 + 2, "diagnosis", "\x1b[31mred\x1b[0m" + "y" * 100_000]]
    path = _recording(tmp_path / "m.dtrec", [_good_chunk()], markers=markers)
    raw = path.read_bytes()
    assert b"NaN" in raw  # json.dumps wrote the NaN marker as the writer of a hostile file would
    res = run_cli(["replay", "--headless", "--markers", str(path)])
    assert no_traceback(res) and res.code == 0, res.err
    text = res.out.split("markers:")[-1]
    assert "ok one" in text and "\x1b" not in res.out and "nonsense" not in text
    assert max(len(line) for line in text.splitlines()) < 400
    res = run_cli(["replay", "--json", "--markers", str(path)])
    assert no_traceback(res) and res.code == 0, res.err
    data = _strict_json(res.out)
    assert [m[1] for m in data["markers"]] == ["failure", "diagnosis"]


def test_markers_held_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.core.record import reader

    monkeypatch.setattr(reader, "MAX_MARKERS", 50)
    markers = [[T0 + 1 + i / 1000, "phase", f"m{i}"] for i in range(500)]
    path = _recording(tmp_path / "many.dtrec", [_good_chunk()], markers=markers)
    with reader.Recording.open(path) as rec:
        assert len(rec.markers) == 50 and rec.markers_left_out == 450


def test_a_hostile_index_is_not_trusted(tmp_path: Path) -> None:
    """A clean recording whose index at its end says a chunk's times are NaN: opened by walking its chunks."""
    from tui.core.record.format import INDEX_ENTRY, TRAILER, TRAILER_MAGIC

    path = _recording(tmp_path / "i.dtrec", [_good_chunk()])
    data = path.read_bytes()
    start = len(_header())
    mlen = struct.unpack_from("<4sII", data, start)[1]
    offset = start + struct.calcsize("<4sIIIddIB")
    plen = len(data) - offset - mlen
    meta = data[offset:offset + mlen]
    payload = data[offset + mlen:]
    crc = chunk_crc(math.nan, 1e300, len(GOOD), 3, meta, payload)  # the index's entry checks out as a chunk
    entry = INDEX_ENTRY.pack(start, offset + mlen, plen, math.nan, 1e300, len(GOOD), 3, crc, offset, mlen, 0)
    markers = json.dumps([[T0 + 1, "phase", "y"]]).encode()
    blob = len(markers).to_bytes(4, "little") + markers + entry
    import zlib

    data += blob + TRAILER.pack(TRAILER_MAGIC, len(data), len(blob), zlib.crc32(blob))
    path.write_bytes(data)
    res = run_cli(["replay", "--json", "--markers", str(path)])
    assert no_traceback(res) and res.code == 0, res.err
    got = _strict_json(res.out)
    assert got["events"] == len(GOOD)
    res = run_cli(["replay", "--headless", str(path)])
    assert no_traceback(res) and res.code == 0, res.err
    from tui.core.record import Recording

    with Recording.open(path) as rec:
        assert math.isfinite(rec.start) and math.isfinite(rec.end) and rec.duration_s < 10


def test_header_round_trips_through_the_strict_reader() -> None:
    head = RecordingHeader(app_version="1", started=T0, command="c", recorded=("gpu",), host={"h": 1},
                           simulated=True, extra={"x": [1]})
    line = head.to_json_line()
    assert RecordingHeader.from_dict(json.loads(line)) == head
    assert MAGIC  # the format's magic is what the chunks start with


async def test_the_console_replays_a_bomb_up_to_it_and_says_so(tmp_path: Path) -> None:
    from tests.console.conftest import wait_for
    from tui.console.replay import make_replay

    path = _recording(tmp_path / "bomb.dtrec", [_good_chunk(), (T0 + 4, T0 + 5, 1000, True,
                                                                 _rle_frame(b"\n", 50_000))])
    app = make_replay(path, speed=100.0)
    notes: list[str] = []
    real = app.notify

    def notify(message: str, **kw: Any) -> None:
        notes.append(str(message))
        real(message, **kw)

    app.notify = notify  # type: ignore[method-assign]
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: any("byte" in n for n in notes), 30, "the damage notice")
    assert any(str(path.name) in n and "byte" in n for n in notes), notes


# --- results import: a vllm bench result from outside ------------------------------------------------------------

SAMPLE = Path(__file__).resolve().parent.parent / "fixtures" / "vllm-0.24.0-cpu" / \
    "bench-serve-result-sample-save-detailed.json"


def _result(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SAMPLE.read_text())
    for key, value in over.items():
        if value is _DROP:
            data.pop(key, None)
        else:
            data[key] = value
    return data


_DROP = object()


@pytest.mark.parametrize(("text", "field"), [
    ('"duration": NaN', "duration"),
    ('"output_throughput": Infinity', "output_throughput"),
    ('"mean_ttft_ms": -Infinity', "mean_ttft_ms"),
    ('"request_goodput": NaN', "request_goodput"),
    ('"p99_tpot_ms": 1e400', "p99_tpot_ms"),
    ('"ttfts": [0.1, NaN, 0.2]', "ttfts[1]"),
])
def test_results_import_refuses_nonfinite_figures_naming_the_field(text: str, field: str, tmp_path: Path) -> None:
    key = text.split(":")[0].strip('"')
    data = _result()
    if key == "ttfts":
        data.pop("ttfts")
        for k in ("input_lens", "output_lens", "itls", "start_times", "generated_texts", "errors"):
            data.pop(k)
    else:
        data.pop(key, None)
    raw = json.dumps(data)
    f = tmp_path / "r.json"
    f.write_text(raw[:-1] + ", " + text + "}")
    res = run_cli(["results", "import", str(f)])
    assert no_traceback(res) and res.code == 2, res.err
    line = _one_error_line(res)
    assert str(f) in line and f"'{field}'" in line and "finite" in line, line
    res = run_cli(["results", "--format", "json"])
    assert no_traceback(res) and res.code == 2  # nothing was stored


@pytest.mark.parametrize(("over", "field"), [
    ({"topology": {"a": 1}}, "topology"),
    ({"model_id": 5}, "model_id"),
    ({"workload": "x" * 5000}, "workload"),
    ({"completed": "all"}, "completed"),
    ({"mean_tpot_ms": 1e300}, "mean_tpot_ms"),
    ({"ttfts": [-1.0] * 20}, "ttfts[0]"),
    ({"start_times": [1e300] * 20}, "start_times[0]"),
    ({"output_lens": [1e300] * 20}, "output_lens[0]"),
    ({"request_rate": "fast"}, "request_rate"),
])
def test_results_import_checks_types_and_ranges(over: dict[str, Any], field: str, tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    f.write_text(json.dumps(_result(**over)))
    res = run_cli(["results", "import", str(f)])
    assert no_traceback(res) and res.code == 2, res.err
    line = _one_error_line(res)
    assert str(f) in line and field in line, line


@pytest.mark.parametrize("what", ["fifo", "device"])
def test_results_import_refuses_what_is_not_a_regular_file_at_once(what: str, tmp_path: Path) -> None:
    target = tmp_path / "r.json" if what == "fifo" else Path("/dev/zero")
    if what == "fifo":
        os.mkfifo(target)
    proc = cli("results", "import", str(target), timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(target) in lines[0] and "regular file" in lines[0], proc.stderr


def test_results_import_bounds_the_file_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.core import safeio

    monkeypatch.setitem(safeio.LIMITS, "results", 4096)
    f = tmp_path / "r.json"
    f.write_text(json.dumps(_result()))
    assert f.stat().st_size > 4096
    res = run_cli(["results", "import", str(f)])
    assert no_traceback(res) and res.code == 2, res.err
    assert "too large" in _one_error_line(res)


def test_results_json_is_valid_json_after_an_import_with_figures_missing(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    f.write_text(json.dumps(_result(mean_ttft_ms=_DROP, p99_tpot_ms=_DROP, request_goodput=None,
                                    total_token_throughput=_DROP, total_input_tokens=None)))
    res = run_cli(["results", "import", str(f)])
    assert res.code == 0, res.err
    for fmt in ("json", "csv", "md", "table"):
        res = run_cli(["results", "--format", fmt])
        assert no_traceback(res) and res.code == 0, res.err
    data = _strict_json(run_cli(["results", "--format", "json"]).out)
    assert len(data["runs"]) == 1 and data["rows"]


# --- stored runs: a copied runs folder -----------------------------------------------------------------------------


def _good_run() -> Path:
    """One imported run in this test's runs folder; its folder."""
    from tui.core import paths

    f = paths.runs_dir().parent / "good.json"
    paths.make_dirs(f.parent)
    f.write_text(json.dumps(_result()))
    res = run_cli(["results", "import", str(f), "--topology", "tp1"])
    assert res.code == 0, res.err
    return next(paths.runs_dir().glob("imported/*/run.json")).parent


def _run_json(**over: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"campaign": "copied", "name": "bad", "topology": "tp2", "workload": "w",
                            "request_rate": "inf", "repeat": 1, "status": "complete", "runner": "imported",
                            "started": T0, "ended": T0 + 10, "pid": 1, "flags": [], "client": {}}
    meta.update(over)
    return meta


DEEP = {"a": None}
for _ in range(200):
    DEEP = {"a": DEEP}

BAD_RUNS: dict[str, bytes] = {
    "status-number": json.dumps(_run_json(status=5)).encode(),
    "started-text": json.dumps(_run_json(started="yesterday")).encode(),
    "started-huge": json.dumps(_run_json(started=1e300)).encode(),
    "rate-word": json.dumps(_run_json(request_rate="fast")).encode(),
    "rate-negative": json.dumps(_run_json(request_rate=-2)).encode(),
    "flags-text": json.dumps(_run_json(flags="abc")).encode(),
    "pid-negative": json.dumps(_run_json(pid=-1)).encode(),
    "repeat-zero": json.dumps(_run_json(repeat=0)).encode(),
    "huge-int": json.dumps(_run_json()).replace('"pid": 1', '"pid": ' + "9" * 400).encode(),
    "missing-campaign": json.dumps({k: v for k, v in _run_json().items() if k != "campaign"}).encode(),
    "a-list": b"[1, 2, 3]",
    "nan": json.dumps(_run_json()).replace('"ended": 1800000010.0', '"ended": NaN').encode(),
    "deep": json.dumps(_run_json(client=DEEP)).encode(),
    "not-json": b"{broken",
    "binary": bytes(range(256)),
    "goodput-text": json.dumps(_run_json(goodput_slo={"ttft": "fast"})).encode(),
    "workload-escape": json.dumps(_run_json(workload="\x1b]0;title\x07w")).encode(),
    "flag-escape": json.dumps(_run_json(flags=["\x1b[31mred"])).encode(),
    "kv-figure-mapping": json.dumps(_run_json(kv_transfer={"external": {"a": 1}, "local_compute": 1.0})).encode(),
    "client-figure-text": json.dumps(_run_json(client={"loop_lag_p99_ms": "slow"})).encode(),
    "breakdown-part-list": json.dumps(_run_json(ttft_breakdown={"kv_transfer": [1]})).encode(),
    "hostname-escape": json.dumps(_run_json(fingerprint={"hostname": "\x1b[2Jh"})).encode(),
}


@pytest.mark.parametrize("name", sorted(BAD_RUNS))
def test_a_damaged_run_is_listed_never_a_traceback(name: str) -> None:
    from tui.core import paths

    _good_run()
    bad = paths.runs_dir() / "copied" / "bad"
    bad.mkdir(parents=True)
    (bad / "run.json").write_bytes(BAD_RUNS[name])
    (bad / "summary.json").write_text(json.dumps({"output_throughput": 1.0, "completed": 1}))
    for fmt in ("table", "csv", "md", "json"):
        res = run_cli(["results", "--format", fmt])
        assert no_traceback(res) and res.code == 0, res.err
        warn = [ln for ln in res.err_lines if "damaged run" in ln]
        assert len(warn) == 1 and str(bad / "run.json") in warn[0], res.err
        if fmt == "json":
            data = _strict_json(res.out)
            assert len(data["runs"]) == 1 and data["damaged"][0]["path"] == str(bad / "run.json")
    res = run_cli(["results", "copied"])  # only the damaged one: an error line naming it
    assert no_traceback(res) and res.code == 2, res.err
    assert "damaged" in res.err and str(bad / "run.json") in res.err


BAD_SUMMARIES: dict[str, bytes] = {
    "figure-text": json.dumps({"output_throughput": "fast", "completed": 1}).encode(),
    "figure-huge": json.dumps({"output_throughput": 1e300, "completed": 1}).encode(),
    "completed-list": json.dumps({"output_throughput": 1.0, "completed": [1]}).encode(),
    "nan": b'{"output_throughput": NaN, "completed": 1}',
    "a-list": b"[]",
    "topology-mapping": json.dumps({"output_throughput": 1.0, "topology": {"x": 1}}).encode(),
}


@pytest.mark.parametrize("name", sorted(BAD_SUMMARIES))
def test_a_damaged_summary_is_listed(name: str) -> None:
    from tui.core import paths

    _good_run()
    bad = paths.runs_dir() / "copied" / "bad"
    bad.mkdir(parents=True)
    (bad / "run.json").write_text(json.dumps(_run_json()))
    (bad / "summary.json").write_bytes(BAD_SUMMARIES[name])
    res = run_cli(["results", "--format", "json"])
    assert no_traceback(res) and res.code == 0, res.err
    data = _strict_json(res.out)
    assert len(data["runs"]) == 1 and data["damaged"][0]["path"] == str(bad / "summary.json")


def test_a_run_file_too_large_is_damaged(monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.core import paths, safeio

    _good_run()
    bad = paths.runs_dir() / "copied" / "bad"
    bad.mkdir(parents=True)
    (bad / "run.json").write_text(json.dumps(_run_json(message="x" * 20_000)))
    monkeypatch.setitem(safeio.LIMITS, "run record", 16_000)
    res = run_cli(["results"])
    assert no_traceback(res) and res.code == 0, res.err
    assert any("too large" in ln and "run.json" in ln for ln in res.err_lines), res.err


@pytest.mark.parametrize("where", ["run.json", "summary.json", "requests.parquet", "workload.json", "plan.json",
                                   "prediction.json"])
def test_a_fifo_in_a_run_folder_is_never_waited_on(where: str) -> None:
    """A FIFO in place of any file of a run: ``results`` (every format) returns promptly, the run listed as
    damaged where its record or summary is the FIFO, read without the FIFO otherwise."""
    from tui.core import paths

    good = _good_run()
    target = good / where
    if target.exists():
        target.unlink()
    if where == "summary.json":  # without a p99, the table reads the records (here a FIFO)
        pass
    os.mkfifo(target)
    for fmt in ("table", "json"):
        proc = cli("results", "--format", fmt, timeout=60)
        assert "Traceback" not in proc.stderr, proc.stderr
        if where in ("run.json", "summary.json"):
            assert proc.returncode == 2 and str(target) in proc.stderr and "FIFO" in proc.stderr, proc.stderr
        else:
            assert proc.returncode == 0, proc.stderr
            if fmt == "json":
                _strict_json(proc.stdout)
    assert paths.runs_dir().is_dir()


def test_damaged_request_records_leave_the_summary(tmp_path: Path) -> None:
    """A run whose summary lacks a p99 (the table then reads the records) and whose records are not parquet: the
    summary's figures stand alone; a goodput asked for under an SLO cannot, and says which file."""
    good = _good_run()
    summary = json.loads((good / "summary.json").read_text())
    summary.pop("p99_tpot_ms")
    (good / "summary.json").write_text(json.dumps(summary))
    (good / "requests.parquet").write_bytes(b"PAR1 not really")
    res = run_cli(["results", "--format", "json"])
    assert no_traceback(res) and res.code == 0, res.err
    assert len(_strict_json(res.out)["runs"]) == 1
    res = run_cli(["results", "--goodput", "ttft:100"])  # goodput under an SLO needs the records: the error
    assert no_traceback(res) and res.code == 2, res.err
    assert "requests.parquet" in _one_error_line(res)


def test_a_killed_runs_journal_of_the_wrong_types_is_skipped() -> None:
    from tui.core import paths
    from tui.core.bench.store import load_run

    d = paths.runs_dir() / "c" / "killed"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(_run_json(status="running", pid=0)))
    good = {"i": 0, "st": 0.0, "ok": True, "ttft": 0.1, "lat": 0.5, "itl": "", "pt": 10, "ct": 5, "ch": 5,
            "err": "", "ei": 10, "eo": 5}
    lines = [good, {**good, "i": 1, "st": "x"}, {**good, "i": 2, "ttft": 1e300}, {**good, "i": 3, "pt": -5},
             {**good, "i": "four"}, [1, 2]]
    raw = b"\n".join(json.dumps(x).encode() for x in lines) + b'\n{"i": 5, "st": NaN}\n'
    (d / "requests.jsonl").write_bytes(raw)
    run = load_run(d)
    assert run.meta.status == "incomplete" and [r.index for r in run.records()] == [0]
    assert run.summary and math.isfinite(run.summary["duration"])


# --- campaigns: resuming one from a copied folder ------------------------------------------------------------------


def _prompt(fn: Any, timeout: float = 20.0) -> Any:
    """``fn()`` in a thread, which must return within ``timeout`` (a FIFO read would block it for ever: the test
    fails instead of hanging; the FIFO's writer end is opened by the caller's cleanup)."""
    import threading

    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn} did not return within {timeout:.0f} s (a FIFO waited on?)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _spec(name: str = "c") -> Any:
    from tui.core.bench.campaign import CampaignSpec

    return CampaignSpec(name=name, model="m", topologies=["tp1"], workloads=["w"])


@pytest.mark.parametrize(("data", "names"), [
    (b"fifo", ("FIFO",)),
    (json.dumps({"name": 5, "model": "m", "topologies": ["tp1"], "workloads": ["w"]}).encode(), ("name",)),
    (json.dumps({"name": "c", "model": "m", "topologies": "tp1", "workloads": ["w"]}).encode(), ("topologies",)),
    (json.dumps({"name": "c", "model": "m", "topologies": ["tp1"], "workloads": ["w"], "rates": ["x"]}).encode(),
     ("rates[0]",)),
    (json.dumps({"name": "c", "model": "m", "topologies": ["tp1"], "workloads": ["w"], "repeat": -1}).encode(),
     ("repeat",)),
    (b'{"name": "c", "model": "m", "topologies": ["tp1"], "workloads": ["w"], "seed": NaN}', ("NaN",)),
    (b"[1]", ("mapping",)),
])
def test_resuming_a_campaign_with_a_hostile_campaign_file_is_one_line(data: bytes, names: tuple[str, ...],
                                                                      tmp_path: Path) -> None:
    from tui.core.bench.campaign import CAMPAIGN_FILE, CampaignStore
    from tui.core.errors import InputError

    store = CampaignStore(_spec(), root=tmp_path)
    store.dir.mkdir(parents=True)
    f = store.dir / CAMPAIGN_FILE
    if data == b"fifo":
        os.mkfifo(f)
    else:
        f.write_bytes(data)
    with pytest.raises(InputError) as err:
        _prompt(store.open)
    line = err.value.one_line()
    assert str(f) in line and "damaged campaign file" in line and all(n in line for n in names), line


def test_a_damaged_cell_is_run_again_and_a_fifo_never_waited_on(tmp_path: Path) -> None:
    from tui.core.bench.campaign import CampaignStore, Cell, campaign_runs, orphaned_layout
    from tui.core.errors import InputError
    from tui.core.launch.state import LayoutRecord, StateStore
    from tui.core.models import Workload

    store = CampaignStore(_spec(), root=tmp_path)
    assert store.open() is False
    wl = Workload(name="w", input_len=8, output_len=8)
    cell = Cell("tp1", "w", None)
    d = store.run_dir(cell, wl)
    d.mkdir(parents=True)
    os.mkfifo(d / "run.json")
    assert _prompt(lambda: store.finished(cell, wl)) is None  # not complete: the cell runs again
    with pytest.raises(InputError, match="FIFO"):
        _prompt(lambda: campaign_runs(store.dir))
    # an orphaned layout of this campaign is looked for in its runs' records: a FIFO among them is skipped
    state = StateStore(tmp_path / "state")
    with state.locked() as layouts:
        layouts["L"] = LayoutRecord(id="L", created=T0, simulated=True, status="ready", owner_pid=0,
                                    plan={"topology": "tp1", "profile_id": "m"}, processes=[])
    plan = SimpleNamespace(profile_id="m", topology="tp1")  # what orphaned_layout asks of a plan
    assert _prompt(lambda: orphaned_layout(plan, store.dir, state)) is None  # type: ignore[arg-type]
    store.clear(cell, wl)
    assert not d.exists()


def test_the_stored_campaigns_read_hostile_folders(tmp_path: Path) -> None:
    from tui.console.campaigns import campaign_state, campaigns
    from tui.core.bench.campaign import CAMPAIGN_FILE
    from tui.core.bench.campaigns import read_campaign, stored_campaigns
    from tui.core.errors import InputError

    good = tmp_path / "good"
    good.mkdir()
    (good / CAMPAIGN_FILE).write_text(json.dumps({**_spec("good").to_dict(), "created": "yesterday"}))
    for name, data in (("a", b"fifo"), ("b", json.dumps(_run_json(status=7)).encode()),
                       ("c", json.dumps(_run_json(topology="tp1", workload="w")).encode()),
                       ("d", json.dumps(_run_json(topology="tp2", workload="w")).encode())):
        (good / name).mkdir()
        if data == b"fifo":
            os.mkfifo(good / name / "run.json")
        else:
            (good / name / "run.json").write_bytes(data)
    (good / "c" / "summary.json").write_text('{"output_throughput": "lots"}')
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / CAMPAIGN_FILE).write_text(json.dumps({"name": "bad", "topologies": 3}))
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / CAMPAIGN_FILE)
    stored = _prompt(lambda: read_campaign(good))
    assert stored.created == 0.0 and stored.total >= 4
    assert [r.path.name for r in stored.runs] == ["d"]
    damaged = {d.name: err.one_line() for d, err in stored.damaged}
    # each run folder read as every stored run is: a FIFO, a status of the wrong type, a summary of the wrong type
    assert "FIFO" in damaged["a"] and "status" in damaged["b"] and "output_throughput" in damaged["c"], damaged
    state = campaign_state(stored)
    by = {c.run_dir.rsplit("/", 1)[-1]: c for c in state.cells}
    assert by["a"].status == "damaged" and "FIFO" in by["a"].message
    assert by["d"].status == "complete" and by["d"].output_tps is None
    for folder in (bad, fifo):
        with pytest.raises(InputError, match="campaign"):
            _prompt(lambda f=folder: read_campaign(f))
    assert [c.name for c in _prompt(lambda: stored_campaigns(tmp_path))] == ["good"]
    assert [c.name for c in _prompt(lambda: campaigns(tmp_path))] == ["good"]


# --- the console's results screen ------------------------------------------------------------------------------


def test_the_results_screen_lists_damaged_runs_and_reads_run_files_bounded(tmp_path: Path) -> None:
    from tui.console.screens.results import load_results, plan_shell, workloads_of
    from tui.core import paths
    from tui.core.models import Catalog

    good = _good_run()
    (good / "workload.json").write_text(json.dumps({"name": "random-32x16", "input_len": "many",
                                                    "output_len": 4}))
    bad = paths.runs_dir() / "copied" / "bad"
    bad.mkdir(parents=True)
    os.mkfifo(bad / "run.json")
    data = _prompt(lambda: load_results(Catalog.load(), None))
    assert len(data.runs) == 1 and any("FIFO" in e and str(bad) in e for e in data.errors), data.errors
    wls = _prompt(lambda: workloads_of(data.runs, Catalog.load()))
    assert all(isinstance(w.input_len, int) for w in wls.values())
    assert _prompt(lambda: plan_shell(good)) is None  # no plan kept
    os.mkfifo(good / "plan.json")
    text, ok = _prompt(lambda: plan_shell(good))
    assert not ok and "FIFO" in text
    (good / "plan.json").unlink()
    (good / "plan.json").write_text(json.dumps({"servers": [{"argv": 5}], "topology": []}))
    text, ok = _prompt(lambda: plan_shell(good))
    assert not ok and "plan" in text
    (good / "workload.json").unlink()
    os.mkfifo(good / "workload.json")
    _prompt(lambda: workloads_of(data.runs, Catalog.load()))


# --- the state file -----------------------------------------------------------------------------------------------


def test_a_broken_link_in_place_of_a_run_file_or_the_state_file_is_named(isolated_dirs: Path) -> None:
    from tui.core import paths

    _good_run()
    bad = paths.runs_dir() / "copied" / "bad"
    bad.mkdir(parents=True)
    (bad / "run.json").symlink_to(bad / "gone.json")
    res = run_cli(["results", "--format", "json"])
    assert no_traceback(res) and res.code == 0, res.err
    assert _strict_json(res.out)["damaged"][0]["path"] == str(bad / "run.json")
    state = isolated_dirs / "state" / "layouts.json"
    state.symlink_to(state)  # a link loop
    res = run_cli(["status"])
    assert no_traceback(res) and res.code == 2 and str(state) in _one_error_line(res), res.err
    state.unlink()
    state.symlink_to(isolated_dirs / "nowhere")
    res = run_cli(["status"])
    assert no_traceback(res) and res.code == 2 and "broken link" in _one_error_line(res), res.err


@pytest.mark.parametrize("cmd", [["status"], ["status", "--json"], ["down"]])
def test_a_fifo_in_place_of_the_state_file_is_one_line_at_once(cmd: list[str], isolated_dirs: Path) -> None:
    state = isolated_dirs / "state" / "layouts.json"
    os.mkfifo(state)
    began = time.monotonic()
    proc = cli(*cmd, timeout=60)
    assert time.monotonic() - began < 60
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(lines) == 1 and str(state) in lines[0] and "FIFO" in lines[0] and "move it aside" in lines[0], \
        proc.stderr


def test_a_fifo_in_place_of_the_lock_file_is_one_line(isolated_dirs: Path) -> None:
    from tui.core.errors import InputError
    from tui.core.launch.state import StateStore

    lock = isolated_dirs / "state" / "layouts.lock"
    os.mkfifo(lock)
    store = StateStore()
    with pytest.raises(InputError, match="lock file"):
        _prompt(lambda: store.locked().__enter__())


def test_the_follower_says_once_what_it_cannot_read(isolated_dirs: Path) -> None:
    """A damaged state file, or a FIFO where a server's log should be: a Notice each (the console shows it),
    never a follower thread stuck on the FIFO."""
    from tui.core.events import EventBus, Notice
    from tui.core.follow import LayoutFollower
    from tui.core.launch.state import LayoutRecord, ProcessRecord, StateStore

    bus = EventBus()
    seen: list[Any] = []
    bus.subscribe(seen.append)
    state = isolated_dirs / "state" / "layouts.json"
    state.write_text('{"version": 1, "layouts": {"x": {"id": "x", "created": "soon"}}}')
    follower = LayoutFollower(bus, StateStore())
    _prompt(follower.poll_once)
    _prompt(follower.poll_once)
    notes = [e for e in seen if isinstance(e, Notice)]
    # one record that does not read is left out (the others stay followed), said once (issue 32)
    assert len(notes) == 1 and "created" in notes[0].message and str(state) in notes[0].message
    assert "layout x" in notes[0].message and notes[0].level == "warning"
    log = isolated_dirs / "server.log"
    os.mkfifo(log)
    state.unlink()
    with StateStore().locked() as layouts:
        layouts["x"] = LayoutRecord(id="x", created=T0, simulated=True, status="starting",
                                    plan={"topology": "tp1", "profile_id": "m", "servers": [{"name": "s",
                                                                                            "gpus": [0]}]},
                                    processes=[ProcessRecord(name="s", role="single", pid=os.getpid(),
                                                             pgid=os.getpgid(0), create_time=0.0, log=str(log),
                                                             url="http://127.0.0.1:9")])
    seen.clear()
    _prompt(follower.poll_once)
    notes = [e for e in seen if isinstance(e, Notice)]
    assert len(notes) == 1 and "FIFO" in notes[0].message and str(log) in notes[0].message


# --- a benchmark's events file and the start-up history ---------------------------------------------------------


def test_an_events_file_of_hostile_lines_is_skipped_and_counted(tmp_path: Path) -> None:
    from tui.core.bench.eventsfile import EventsTail

    path = tmp_path / "e.jsonl"
    good = json.dumps({"kind": "bench_done", "ts": T0, "run_id": "r", "status": "complete"}).encode()
    lines = [json.dumps({"t": "header", "pid": "me", "create_time": 1.0, "argv": []}).encode(),
             json.dumps({"t": "header", "pid": 1, "create_time": 1e300, "argv": []}).encode(),
             good,
             b'{"kind": "bench_done", "ts": NaN, "run_id": "r", "status": "complete"}',
             json.dumps({"kind": "bench_done", "ts": "x", "run_id": "r", "status": "complete"}).encode(),
             json.dumps({"kind": "bench_tick", "ts": T0, "run_id": "r", "phase": "run", "elapsed_s": [],
                         "total": 1, "sent": 1, "done": 1, "failed": 0, "inflight": 0}).encode(),
             b"[" * 100_000 + b"]" * 100_000,
             b'{"kind": "notice", "ts": 1, "level": "info", "message": "' + b"x" * (5 << 20) + b'"}',
             good]
    path.write_bytes(b"\n".join(lines) + b"\n" + b"y" * (6 << 20))  # and a last line that never ends
    tail = EventsTail(path)
    got = tail.read_all()
    assert [e.kind for e in got] == ["bench_done", "bench_done"]
    assert tail.header is None and tail.bad_lines == 8, tail.bad_lines


def test_an_events_file_that_is_a_fifo_is_never_waited_on(tmp_path: Path) -> None:
    from tui.console.benchjob import running_benches
    from tui.core.bench.eventsfile import EventsTail

    path = tmp_path / "x.bench.events.jsonl"
    os.mkfifo(path)
    tail = EventsTail(path)
    assert _prompt(tail.read_all) == [] and tail.unreadable is not None and "FIFO" in tail.unreadable
    assert _prompt(lambda: running_benches(tmp_path)) == []


def test_the_startup_history_skips_hostile_lines_and_a_fifo(tmp_path: Path) -> None:
    from tui.core.launch.history import StartupHistory, StartupRecord

    h = StartupHistory(tmp_path)
    good = StartupRecord(key="k", server="s", startup_s=30.0, ts=T0, phases=(("load", 5.0),))
    bad = [{**good.to_dict(), "startup_s": "slow"}, {**good.to_dict(), "startup_s": 1e300},
           {**good.to_dict(), "ts": 1e300}, {**good.to_dict(), "phases": [["load", -5]]},
           {**good.to_dict(), "phases": "load"}, {**good.to_dict(), "key": ["k"]}, [1, 2]]
    raw = b"\n".join(json.dumps(x).encode() for x in [good.to_dict(), *bad])
    raw += b'\n{"key": "k", "server": "s", "startup_s": NaN}\n' + b"x" * 100_000 + b"\n"
    h.path.write_bytes(raw)
    assert h.records() == [good] and h.skipped == len(bad) + 2
    exp = h.expected("k", "s")
    assert exp is not None and exp.seconds == 30.0 and "30 s" in exp.describe()
    h.path.unlink()
    os.mkfifo(h.path)
    assert _prompt(h.records) == []
    _prompt(lambda: h.append(good))  # a FIFO nobody reads: no history kept, no wait
    assert h.path.exists() and not h.path.is_file()


def test_a_huge_startup_history_reads_its_end_only(tmp_path: Path) -> None:
    from tui.core.launch.history import READ_BYTES, StartupHistory, StartupRecord

    h = StartupHistory(tmp_path)
    old = json.dumps(StartupRecord(key="k", server="s", startup_s=99.0, ts=T0).to_dict()).encode() + b"\n"
    new = json.dumps(StartupRecord(key="k", server="s", startup_s=10.0, ts=T0).to_dict()).encode() + b"\n"
    h.path.write_bytes(old * (2 * READ_BYTES // len(old)) + new * 3)
    tracemalloc.start()
    try:
        recs = h.records()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert recs[-1].startup_s == 10.0 and peak < 12 * READ_BYTES


def test_a_run_folders_json_is_read_bounded(tmp_path: Path) -> None:
    """What another reader of a run folder (a bundle's export) takes its plan.json and workload.json with."""
    from tui.core.bench.store import read_run_json
    from tui.core.errors import InputError

    assert read_run_json(tmp_path / "none.json") == {}
    (tmp_path / "list.json").write_text("[1]")
    assert read_run_json(tmp_path / "list.json") == {}
    for name, make in (("fifo.json", lambda p: os.mkfifo(p)), ("deep.json", lambda p: p.write_text("[" * 10_000)),
                       ("nan.json", lambda p: p.write_text('{"a": NaN}')),
                       ("link.json", lambda p: p.symlink_to(tmp_path / "missing"))):
        path = tmp_path / name
        make(path)
        with pytest.raises(InputError) as err:
            _prompt(lambda path=path: read_run_json(path))
        assert str(path) in err.value.one_line()
