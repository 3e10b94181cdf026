"""What a recording costs: a synthetic one-hour session through the real recorder, against two references.

The hour: 2 GPUs sampled at 4 Hz, 3 servers polled at 1 Hz (``/health`` and derived ``/metrics`` each), and a
1,000-stream benchmark's live ticks at 4 Hz, built with the real event classes (templates taken from the shipped
sample recording, every number varied by a random walk, so nothing compresses better than it would live). The
events are fed the way a session feeds them: half a second of events, then a flush, so the file has the chunks
(and the chunk headers) a live hour has.

Measured for each storage:

- **ours**: ``tui.core.record`` (zstd-framed JSON Lines, one chunk per half second, a new frame per minute, the
  seek index in the chunk headers);
- **plain JSON Lines**, the reference (one ``to_dict`` line per event, flushed every half second; a seek is a scan);
- **SQLite WAL + zstd batches** (dolphie's way: one row per half-second batch, each compressed on its own, an
  index on time, a commit per batch).

Figures: size on disk per hour; the recorder's CPU share while recording (CPU seconds spent for the hour of events,
the writer thread and the publishing side, divided by 3,600 s); time to open the recording and seek to each minute
(open + the first event at or after the minute; the worst and the median of 60 in wall-clock time, and the median
CPU time, which a loaded machine does not inflate; every 10th minute for plain JSON Lines, which has no index to
seek by). Targets: ≤ 20 MB per hour, ≤ 1 %
of a core, open + seek ≤ 200 ms.

    python benchmarks/recording_cost.py [--minutes 60]

This machine's cores are shared: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import zstandard  # noqa: E402

from tui.core.events import Event, EventBus, event_from_dict  # noqa: E402
from tui.core.record import Recorder, Recording, new_header  # noqa: E402
from tui.core.record.kinds import load_event_kinds  # noqa: E402

SAMPLE = ROOT / "recordings" / "sim-bakeoff-qwen3.6-27b-dp2-tp2-1p1d.dtrec"
T0 = 1_800_000_000.0
HALF = 0.5


def templates() -> dict[str, dict[str, Any]]:
    """The richest event of each kind in the shipped sample, as plain data."""
    best: dict[str, dict[str, Any]] = {}
    with Recording.open(SAMPLE) as rec:
        for ev in rec.events():
            d = ev.to_dict()
            if ev.kind in ("gpu_sampled", "server_health", "server_metrics", "bench_tick"):
                size = len(json.dumps(d))
                if size > len(json.dumps(best.get(ev.kind, {}))):
                    best[ev.kind] = d
    return best


def vary(d: Any, rng: random.Random, scale: float) -> Any:
    """Every float nudged (a random walk step), ints and strings kept."""
    if isinstance(d, dict):
        return {k: (v if k in ("ts", "kind") else vary(v, rng, scale)) for k, v in d.items()}
    if isinstance(d, list):
        return [vary(v, rng, scale) for v in d]
    if isinstance(d, float):
        return round(d * (1.0 + rng.uniform(-scale, scale)), 6)
    return d


def synthetic_hour(minutes: int) -> list[list[Event]]:
    """Half-second batches of events for ``minutes`` of a session."""
    load_event_kinds()
    tpl = templates()
    gpu = tpl["gpu_sampled"]
    gpus = gpu["gpus"]
    while len(gpus) < 2:
        gpus.append(dict(gpus[0], index=len(gpus)))
    gpu["gpus"] = gpus[:2]
    rng = random.Random(7)
    state = {k: dict(v) for k, v in tpl.items()}
    servers = ("prefill-0", "decode-0", "proxy")
    batches: list[list[Event]] = []
    total = minutes * 60 * 4
    for q in range(total):  # quarter seconds
        ts = T0 + q * 0.25
        batch = batches[-1] if q % 2 else []
        if not q % 2:
            batches.append(batch)
        state["gpu_sampled"] = vary(state["gpu_sampled"], rng, 0.02)
        g = dict(state["gpu_sampled"], ts=ts)
        g["gpus"] = [dict(x, ts=ts) for x in g["gpus"]]
        batch.append(event_from_dict(g))
        tick = vary(state["bench_tick"], rng, 0.02)
        state["bench_tick"] = tick
        batch.append(event_from_dict(dict(tick, ts=ts + 0.01, total=1000, sent=min(1000, q), done=max(0, q - 1000),
                                          inflight=1000, elapsed_s=q * 0.25)))
        if q % 4 == 0:
            for i, name in enumerate(servers):
                h = dict(state["server_health"], ts=ts + 0.02 + i * 0.01, server=name,
                         latency_ms=round(rng.uniform(0.5, 3.0), 3))
                batch.append(event_from_dict(h))
                state["server_metrics"] = vary(state["server_metrics"], rng, 0.03)
                m = dict(state["server_metrics"], ts=ts + 0.05 + i * 0.01, server=name)
                if isinstance(m.get("figures"), dict):
                    m["figures"] = dict(m["figures"], ts=ts)
                batch.append(event_from_dict(m))
    return batches


def _cpu() -> float:
    return time.thread_time()


# --- the three storages ----------------------------------------------------------------------------------------


def run_ours(batches: list[list[Event]], path: Path) -> tuple[float, float]:
    """(writer CPU s, publisher CPU s)"""
    bus = EventBus()
    rec = Recorder(path, new_header("benchmark")).start()
    rec.attach(bus)
    pub = 0.0
    for batch in batches:
        c = _cpu()
        for ev in batch:
            bus.publish(ev)
        rec.flush()
        pub += _cpu() - c
        while not rec._queue.empty():  # keep the writer in step, as real time would
            time.sleep(0.0005)
    stats = rec.close()
    if stats.dropped or stats.events != sum(len(b) for b in batches):
        raise RuntimeError(f"the recorder lost events: {stats}")
    return stats.cpu_s, pub


def _writer_thread(target: Any) -> float:
    """Run ``target`` in a thread; its CPU time."""
    out: list[float] = []

    def body() -> None:
        target()
        out.append(time.thread_time())

    t = threading.Thread(target=body)
    t.start()
    t.join()
    return out[0]


def run_jsonl(batches: list[list[Event]], path: Path) -> tuple[float, float]:
    def body() -> None:
        enc = json.JSONEncoder(separators=(",", ":"), default=str).encode
        with open(path, "wb") as f:
            for batch in batches:
                f.write(b"".join(enc(ev.to_dict()).encode() + b"\n" for ev in batch))
                f.flush()

    return _writer_thread(body), 0.0


def run_sqlite(batches: list[list[Event]], path: Path) -> tuple[float, float]:
    def body() -> None:
        enc = json.JSONEncoder(separators=(",", ":"), default=str).encode
        cctx = zstandard.ZstdCompressor(level=3)
        db = sqlite3.connect(path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("CREATE TABLE chunks (t0 REAL, t1 REAL, n INTEGER, data BLOB)")
        db.execute("CREATE INDEX chunks_t1 ON chunks (t1)")
        for batch in batches:
            data = b"".join(enc(ev.to_dict()).encode() + b"\n" for ev in batch)
            db.execute("INSERT INTO chunks VALUES (?, ?, ?, ?)",
                       (min(e.ts for e in batch), max(e.ts for e in batch), len(batch), cctx.compress(data)))
            db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()

    return _writer_thread(body), 0.0


def seek_ours(path: Path, t: float) -> Event:
    with Recording.open(path) as rec:
        return next(iter(rec.events(start=t)))


def seek_jsonl(path: Path, t: float) -> Event:
    with open(path, "rb") as f:
        for line in f:
            d = json.loads(line)
            if d["ts"] >= t:
                return event_from_dict(d)
    raise LookupError(t)


def seek_sqlite(path: Path, t: float) -> Event:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT data FROM chunks WHERE t1 >= ? ORDER BY t1 LIMIT 1", (t,)).fetchone()
        for line in zstandard.ZstdDecompressor().decompress(row[0]).splitlines():
            d = json.loads(line)
            if d["ts"] >= t:
                return event_from_dict(d)
    finally:
        db.close()
    raise LookupError(t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=int, default=60)
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    t = time.perf_counter()
    batches = synthetic_hour(args.minutes)
    n = sum(len(b) for b in batches)
    hour = args.minutes * 60.0
    print(f"{args.minutes} min of session: {n:,} events in {len(batches):,} half-second batches "
          f"(built in {time.perf_counter() - t:.1f} s)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, runner, seeker, fname in (
                ("plain JSON Lines (reference)", run_jsonl, seek_jsonl, "r.jsonl"),
                ("SQLite WAL + zstd batches", run_sqlite, seek_sqlite, "r.sqlite"),
                ("ours: zstd-framed JSONL", run_ours, seek_ours, "r.dtrec")):
            path = Path(tmp) / fname
            writer, pub = runner(batches, path)
            size = path.stat().st_size
            times, cpus = [], []
            # a scan of plain JSON Lines reads half the hour per seek on average: every 10th minute is enough
            minutes = range(0, args.minutes, 10) if seeker is seek_jsonl else range(args.minutes)
            for minute in minutes:
                at = T0 + minute * 60.0
                c, cpu = time.perf_counter(), time.process_time()
                ev = seeker(path, at)
                times.append(time.perf_counter() - c)
                cpus.append(time.process_time() - cpu)
                assert ev.ts >= at
            rows.append((name, size * 3600.0 / hour, (writer + pub) / hour, max(times), statistics.median(times),
                         statistics.median(cpus)))
    ref = rows[0]
    print()
    head = (f"{'storage':<30} {'MB/hour':>9} {'vs ref':>7} {'CPU % of a core':>16} {'vs ref':>7} "
            f"{'open+seek worst ms':>19} {'median ms':>10} {'median CPU ms':>14}")
    print(head)
    print("-" * len(head))
    for name, mb, cpu, worst, med, med_cpu in rows:
        print(f"{name:<30} {mb / 1e6:>9.2f} {mb / ref[1]:>6.2f}× {cpu * 100:>15.3f}% {cpu / ref[2]:>6.2f}× "
              f"{worst * 1e3:>19.1f} {med * 1e3:>10.1f} {med_cpu * 1e3:>14.1f}")
    ours = rows[-1]
    print()
    print(f"targets: ≤ 20 MB/hour: {'met' if ours[1] <= 20e6 else 'MISSED'} ({ours[1] / 1e6:.2f}); "
          f"≤ 1% of a core: {'met' if ours[2] <= 0.01 else 'MISSED'} ({ours[2] * 100:.3f}%); "
          f"open+seek ≤ 200 ms: {'met' if ours[3] <= 0.2 else 'MISSED'} (worst {ours[3] * 1e3:.1f} ms)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
