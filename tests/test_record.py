"""Recordings: the recorder's file round-trips every event, survives a SIGKILL up to its last flush, and a
truncated, corrupt or newer recording is read up to the damage or refused; the replay source paces, pauses,
seeks and jumps; secrets never reach the file."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import eventually_async
from tui.cli.main import main
from tui.core import paths
from tui.core.bench.events import BenchDone, BenchTick, CampaignStep
from tui.core.events import EventBus, Notice, OperatorAction
from tui.core.launch.events import LayoutChanged, LogLine, PlanLaunched, ServerPhase, ServerReady
from tui.core.playbook.events import Diagnosis
from tui.core.record import Recorder, Recording, RecordingError, ReplaySource, new_header
from tui.core.record.format import CHUNK_HEAD, TRAILER
from tui.core.redact import REDACTED, Redactor, is_secret_env, is_secret_flag, redact_argv, secret_names_in
from tui.core.telemetry.events import GpuSampled, ServerHealth
from tui.core.telemetry.gpu import GpuSample

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_800_000_000.0


def _gpu(ts: float) -> GpuSampled:
    sample = GpuSample(index=0, name="NVIDIA B200", uuid="GPU-0", ts=ts, util_gpu=50.0, mem_used=1 << 30,
                       mem_total=180 << 30, power_w=400.0, throttle=("sw_power_cap",))
    return GpuSampled(ts=ts, host="sim", simulated=True, gpus=(sample,))


def _events() -> list:
    evs: list = [OperatorAction(ts=T0, action="run", source="cli", detail={"argv": ["run", "--sim"]}),
                 PlanLaunched(ts=T0 + 0.1, layout_id="L1", plan={"topology": "dp2", "profile_id": "m",
                                                                 "servers": [{"env": {"HF_TOKEN": "x"}}]}),
                 LayoutChanged(ts=T0 + 0.2, layout_id="L1", status="starting", topology="dp2", profile_id="m")]
    for i in range(40):
        evs.append(_gpu(T0 + 0.25 * i))
        evs.append(ServerHealth(ts=T0 + 0.25 * i + 0.01, server="server", endpoint="http://127.0.0.1:1", role="single",
                                state="up", latency_ms=1.0))
    evs += [ServerPhase(ts=T0 + 1.0, server="server", phase="load", label="loading weights", progress=0.3),
            ServerPhase(ts=T0 + 1.1, server="server", phase="load", label="loading weights", progress=0.4),
            ServerReady(ts=T0 + 2.0, server="server", url="http://127.0.0.1:1", startup_s=2.0),
            LogLine(ts=T0 + 2.1, server="server", lineno=7, text="INFO hello"),
            Diagnosis(ts=T0 + 3.0, server="server", entry_id="e1", title="t", severity="error", priority=1,
                      line_no=3, line="boom", explanation="x", fix="do y", captures={"a": "b"}),
            BenchTick(ts=T0 + 4.0, run_id="c/r", phase="run", elapsed_s=1.0, total=10, sent=5, done=2, failed=0,
                      inflight=3, output_tps=123.0),
            BenchDone(ts=T0 + 6.0, run_id="c/r", status="complete", summary={"completed": 10}, flags=("f",),
                      meta={"campaign": "c", "name": "r"}),
            CampaignStep(ts=T0 + 6.5, campaign="c", step="cell_failed", text="failed: x"),
            Notice(ts=T0 + 7.0, level="error", message="it broke")]
    return evs


def _record(path: Path, events: list, **kw: object) -> Recorder:
    bus = EventBus()
    rec = Recorder(path, new_header("test"), **kw).start()  # type: ignore[arg-type]
    rec.attach(bus)
    for e in events:
        bus.publish(e)
    rec.close()
    return rec


def test_round_trip_markers_and_seek(tmp_path: Path) -> None:
    p = tmp_path / "a.dtrec"
    evs = _events()
    rec = _record(p, evs)
    assert rec.stats.events == len(evs) and rec.stats.dropped == 0
    with Recording.open(p) as r:
        assert r.ended_cleanly and r.damage is None and r.event_count == len(evs)
        got = list(r.events())
        # the plan's HF_TOKEN was redacted on the way in; everything else is the same event
        assert got[1].plan["servers"][0]["env"]["HF_TOKEN"] == REDACTED
        assert [e for i, e in enumerate(got) if i != 1] == [e for i, e in enumerate(evs) if i != 1]
        kinds = [m.kind for m in r.markers]
        assert kinds.count("diagnosis") == 1 and kinds.count("run") == 1 and kinds.count("failure") == 2
        # one phase marker for the phase, not one per progress step
        assert [m.label for m in r.markers if m.kind == "phase"].count("server: loading weights") == 1
        later = list(r.events(start=T0 + 5.0))
        assert later and all(e.ts >= T0 + 5.0 for e in later) and later == [e for e in got if e.ts >= T0 + 5.0]
        assert r.next_marker(T0 + 3.5, "run").ts == T0 + 6.0  # type: ignore[union-attr]
        assert json.loads(p.read_bytes().split(b"\n", 1)[0])["version"] == 1
        indexed = (list(r.chunks), list(r.markers), got)
    # the index at the end of a cleanly closed file says what a walk of the chunk headers finds
    data = p.read_bytes()
    _magic, at, _length, _crc = TRAILER.unpack_from(data, len(data) - TRAILER.size)
    walked = tmp_path / "walked.dtrec"
    walked.write_bytes(data[:at])
    with Recording.open(walked) as r:
        assert (list(r.chunks), list(r.markers), list(r.events())) == indexed
        assert r.ended_cleanly and r.damage is None


def test_many_frames_seek_into_the_middle(tmp_path: Path) -> None:
    p = tmp_path / "b.dtrec"
    bus = EventBus()
    rec = Recorder(p, new_header("t"), flush_s=0.01, frame_s=20).start()
    rec.attach(bus)
    for i in range(300):
        bus.publish(_gpu(T0 + i))
        if i % 30 == 0:
            time.sleep(0.03)  # several chunks and frames
    rec.close()
    with Recording.open(p) as r:
        assert len(r.chunks) > 3 and sum(c.new_frame for c in r.chunks) > 1
        assert [e.ts for e in r.events(start=T0 + 150)] == [T0 + i for i in range(150, 300)]


_CHILD = """
import sys, time
from tui.core.events import EventBus
from tui.core.record import Recorder, new_header
from tui.core.bench.events import BenchTick
bus = EventBus()
rec = Recorder(sys.argv[1], new_header("killed")).start()
rec.attach(bus)
print("started", flush=True)
i = 0
while True:
    bus.publish(BenchTick(run_id="r", phase="run", elapsed_s=i * 0.01, total=0, sent=i, done=i, failed=0, inflight=0))
    i += 1
    time.sleep(0.01)
"""


def test_sigkilled_recorder_replays_up_to_its_last_second(tmp_path: Path) -> None:
    p = tmp_path / "killed.dtrec"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(p)], stdout=subprocess.PIPE, text=True,
                             env=paths.child_env(), cwd=ROOT)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "started"
        time.sleep(2.5)
        killed_at = time.time()
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(10)
    with Recording.open(p) as r:
        assert not r.ended_cleanly
        evs = list(r.events())
        assert len(evs) > 100
        assert killed_at - evs[-1].ts <= 1.0, f"lost {killed_at - evs[-1].ts:.2f} s"
        assert [e.sent for e in evs] == list(range(len(evs)))  # nothing missing in between


def test_truncated_and_corrupt_recordings_replay_up_to_the_damage(tmp_path: Path) -> None:
    p = tmp_path / "c.dtrec"
    bus = EventBus()
    rec = Recorder(p, new_header("t"), flush_s=0.01).start()
    rec.attach(bus)
    for i in range(50):
        bus.publish(_gpu(T0 + i))
        time.sleep(0.02)  # one chunk every few events
    rec.close()
    data = p.read_bytes()
    with Recording.open(p) as r:
        full = list(r.events())
        offsets = [c.offset for c in r.chunks]
    assert len(offsets) > 5 and len(full) == 50
    # cut in the middle of a chunk: the chunks before it replay, damage says where
    cut = tmp_path / "cut.dtrec"
    cut.write_bytes(data[:offsets[3] + 5])
    with Recording.open(cut) as r:
        part = list(r.events())
        assert r.damage is not None and "truncated at byte" in r.damage
        assert 0 < len(part) < 50 and part == full[:len(part)]
    # flip a byte inside a payload: its chunk fails the checksum, the chunks before it replay
    bad = bytearray(data)
    bad[offsets[4] + 2] ^= 0xFF
    corrupt = tmp_path / "corrupt.dtrec"
    corrupt.write_bytes(bytes(bad))
    with Recording.open(corrupt) as r:
        part = list(r.events())
        assert r.damage is not None and "checksum mismatch" in r.damage
        assert 0 < len(part) < 50 and part == full[:len(part)]
    # the header alone: no events, no crash
    head = tmp_path / "head.dtrec"
    head.write_bytes(data[:data.index(b"\n") + 1 + CHUNK_HEAD.size - 3])
    with Recording.open(head) as r:
        assert list(r.events()) == [] and r.damage is not None


def test_newer_format_and_not_a_recording_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "a.dtrec"
    _record(p, _events()[:3])
    head, rest = p.read_bytes().split(b"\n", 1)
    d = json.loads(head)
    d["version"] = 99
    newer = tmp_path / "newer.dtrec"
    newer.write_bytes(json.dumps(d).encode() + b"\n" + rest)
    with pytest.raises(RecordingError, match="newer"):
        Recording.open(newer)
    junk = tmp_path / "junk.dtrec"
    junk.write_text("hello\n")
    with pytest.raises(RecordingError, match="not a disagg-tui recording"):
        Recording.open(junk)
    for f in (newer, junk):
        assert main(["replay", str(f), "--headless"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1 and str(f) in err


async def test_replay_source_paces_pauses_seeks_and_jumps(tmp_path: Path) -> None:
    p = tmp_path / "r.dtrec"
    evs = [_gpu(T0 + i * 0.5) for i in range(21)]  # 10 s of recording
    evs.insert(10, Notice(ts=T0 + 4.75, level="error", message="boom"))
    _record(p, evs)
    with Recording.open(p) as r:
        bus = EventBus()
        got: list = []
        bus.subscribe(got.append)
        src = ReplaySource(r, bus, speed=50.0)
        assert src.start == T0 and src.end == T0 + 10.0
        with pytest.raises(ValueError, match=r"0\.5"):
            src.set_speed(200)
        src.set_speed(1.0)  # 10 s to play: paused well before the end, however late the loop lets it look
        task = asyncio.create_task(src.run())
        await eventually_async(lambda: len(got) >= 2, 30, "the first events")
        src.pause()
        await asyncio.sleep(0.02)
        held, at = len(got), src.now()
        await asyncio.sleep(0.1)
        assert len(got) == held and src.now() == at and 0 < held < len(evs)
        assert all(e.ts <= at for e in got)
        marker = src.next_marker("failure")
        assert marker is not None and marker.ts == T0 + 4.75 and src.now() == T0 + 4.75
        seen: list[float] = []
        src.on_seek(seen.append)
        src.seek(T0 + 8.0)
        assert seen == [T0 + 8.0]
        got.clear()
        src.set_speed(100.0)
        src.resume()
        await eventually_async(lambda: src.at_end, 30, "the end")
        assert [e.ts for e in got] == [T0 + 8.0, T0 + 8.5, T0 + 9.0, T0 + 9.5, T0 + 10.0]
        src.seek(T0)  # back to the start after the end: it replays again
        await eventually_async(lambda: len(got) > 5, 30, "the replay again")
        assert got[5].ts == T0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_redaction_rules() -> None:
    assert is_secret_env("HF_TOKEN") and is_secret_env("OPENAI_API_KEY") and is_secret_env("DB_PASSWORD")
    assert is_secret_env("MY_SECRET_THING") and not is_secret_env("MAX_TOKENS") and not is_secret_env("PATH")
    assert is_secret_flag("--api-key") and is_secret_flag("--hf-token")
    assert not is_secret_flag("--max-num-batched-tokens")
    assert redact_argv(["vllm", "--api-key", "k1", "--max-num-batched-tokens", "8192", "--hf-token=t"]) == [
        "vllm", "--api-key", REDACTED, "--max-num-batched-tokens", "8192", f"--hf-token={REDACTED}"]
    red = Redactor({"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwx", "HOME": "/root"})
    out = red.value({"env": {"HF_TOKEN": "anything", "A": "1"}, "headers": {"Authorization": "Bearer xyz"},
                     "line": "export HF_TOKEN=hf_abcdefghijklmnopqrstuvwx; curl -H 'Authorization: Bearer abcdefgh12'",
                     "log": "token hf_abcdefghijklmnopqrstuvwx leaked, and hf_ZZZZZZZZZZZZZZZZZZZZZZ too",
                     "argv": ["x", "--api-key", "s3cr3tvalue"], "max_tokens": 5})
    text = json.dumps(out)
    assert "abcdefghijklmnop" not in text and "s3cr3tvalue" not in text and "xyz" not in text
    assert "abcdefgh12" not in text and "ZZZZZZZZ" not in text
    assert out["env"]["A"] == "1" and out["max_tokens"] == 5
    assert secret_names_in(out) == ["HF_TOKEN"]


def test_not_like_for_like_is_flagged_naming_what_differs(tmp_path: Path) -> None:
    from tui.core.bench import table
    from tui.core.bench.store import Run, RunMeta

    def run(name: str, host: str, version: str, prompts: int, tps: float) -> Run:
        meta = RunMeta(campaign="c", name=name, topology="dp2", workload="decode-heavy", status="complete",
                       model="m", fingerprint={"hostname": host, "server": {"server_version": version}})
        summary = {"num_prompts": prompts, "random_input_len": 512, "random_output_len": 2048, "completed": prompts,
                   "output_throughput": tps, "mean_tpot_ms": 10.0, "p99_tpot_ms": 12.0, "mean_ttft_ms": 300.0}
        return Run(tmp_path / name, meta, summary)

    same = [run("a", "box1", "0.24.0", 128, 1000.0), run("b", "box1", "0.24.0", 128, 1010.0)]
    assert table.like_for_like_note(same) == ""
    assert len(table.build_cells(same)) == 1  # alike: averaged as repeats of one cell
    mixed = [run("a", "box1", "0.24.0", 128, 1000.0), run("b", "box2", "0.23.1", 64, 900.0)]
    note = table.like_for_like_note(mixed)
    assert note.startswith("NOT LIKE-FOR-LIKE") and "host (box1 vs box2)" in note and "vLLM" in note
    assert "workload decode-heavy (128 prompts, 512/2048 tok vs 64 prompts, 512/2048 tok)" in note
    cells = table.build_cells(mixed)
    assert len(cells) == 2 and all(c.setup for c in cells)  # never averaged together, each row labelled
    assert "setup" in table.render_text(table.comparison_frame(cells))


def test_summary_rebuilds_the_table_when_the_session_printed_none(tmp_path: Path) -> None:
    from tui.core.bench.store import RunMeta
    from tui.core.record.summary import render, summarize

    evs = []
    for topo, tps in (("dp2", 2000.0), ("tp2", 1500.0)):
        meta = RunMeta(campaign="c", name=f"{topo}-w", topology=topo, workload="w", status="complete", model="m",
                       fingerprint={"simulated": True})
        summary = {"num_prompts": 8, "completed": 8, "output_throughput": tps, "mean_tpot_ms": 5.0,
                   "p99_tpot_ms": 6.0, "mean_ttft_ms": 100.0, "simulated": True}
        evs.append(BenchDone(ts=T0 + len(evs), run_id=f"c/{topo}-w", status="complete", summary=summary,
                             meta=meta.to_dict()))
    p = tmp_path / "bench.dtrec"
    _record(p, evs)
    with Recording.open(p) as r:
        text = render(summarize(r))
    assert "results (rebuilt from the recorded runs; the session printed no table):" in text
    assert "SIMULATED: every run" in text
    assert "2,000 *" in text and "1,500" in text
