"""The bench/run/results commands: one-line errors with exit 2, JSON with vllm bench's key names, live events."""

from __future__ import annotations

import json

import pytest

from tui.cli.main import main
from tui.core.bench.events import BenchDone, BenchTick
from tui.core.bench.live import LiveWindow
from tui.core.events import event_from_dict


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse mistakes
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("argv", "needle"), [
    (["bench", "--rate", "fast"], "--rate"),
    (["bench", "--max-concurrency", "0"], "--max-concurrency"),
    (["bench", "--endpoint", "http://127.0.0.1:9", "--goodput", "ttft"], "--goodput"),
    (["bench", "--endpoint", "http://127.0.0.1:9", "--goodput", "itl:5"], "--goodput"),
    (["bench", "--endpoint", "http://127.0.0.1:9", "--workload", "no-such-workload"], "no-such-workload"),
    (["bench", "--endpoint", "ftp://example"], "--endpoint"),
    (["bench"], "nothing is up"),
    (["bench", "--endpoint", "http://127.0.0.1:9", "--extra-body", "{oops"], "--extra-body"),
    (["bench", "--endpoint", "http://127.0.0.1:9", "--range-ratio", "1.5"], "--range-ratio"),
    (["bench", "--endpoint", "http://127.0.0.1:9", "--prompts", "/nonexistent.jsonl"], "no such file"),
    (["run", "--model", "qwen3.6-27b-nvfp4", "--topology", "tp2,zz9", "--workload", "decode-heavy"], "zz9"),
    (["run", "--model", "qwen3.6-27b-nvfp4", "--topology", "tp2", "--workload", "nope"], "nope"),
    (["run", "--model", "qwen3.6-27b-nvfp4", "--topology", "tp2", "--workload", "decode-heavy", "--rates", "x"],
     "--rates"),
    (["results", "--format", "xml"], "--format"),
])
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert "Traceback" not in err and out == ""


def test_unreachable_endpoint_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "bench", "--endpoint", "http://127.0.0.1:1", "--num-prompts", "2")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot ask" in err


def test_bench_json_uses_vllm_key_names(capsys: pytest.CaptureFixture[str], stub_process) -> None:
    url = stub_process("--mode", "paced", "--ms-per-token", "2")
    code, out, err = _run(capsys, "bench", "--endpoint", url, "--input-len", "64", "--output-len", "30",
                          "--num-prompts", "12", "--max-concurrency", "6", "--goodput", "ttft:5000", "tpot:100",
                          "--json")
    assert code == 0, err
    s = json.loads(out)
    for key in ("output_throughput", "total_token_throughput", "request_throughput", "request_goodput",
                "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
                "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms",
                "max_output_tokens_per_s", "max_concurrent_requests", "completed", "failed", "duration"):
        assert key in s, key
    assert s["completed"] == 12 and s["max_concurrency"] == 6 and s["workload"] == "random-64x30"
    assert s["mean_tpot_ms"] == pytest.approx(2.0, rel=0.5)
    assert "results:" in err


def test_bench_defaults_to_decode_heavy_and_repeats(capsys: pytest.CaptureFixture[str], stub_process) -> None:
    url = stub_process("--mode", "fast")
    code, out, err = _run(capsys, "bench", "--endpoint", url, "--num-prompts", "4", "--output-len", "8",
                          "--repeat", "2", "--json", "--quiet")
    assert code == 0, err
    agg = json.loads(out)
    assert agg["repeats"] == 2 and agg["workload"] == "random-512x8"
    assert "ci95_output_throughput" in agg and agg["completed"] == 4
    code, out, _ = _run(capsys, "bench", "--endpoint", url, "--num-prompts", "3", "--quiet")
    assert code == 0
    assert "Serving Benchmark Result" in out and "Total input tokens:                      1536" in out


def test_the_live_line_keeps_its_ttft_once_every_request_has_started() -> None:
    """Issue 22, finding 15: a run whose requests had all had their first token (a long decode) went from showing
    TTFT figures to "TTFT p50/p99 -/- ms" once those first tokens were older than the TTFT window."""
    lw = LiveWindow(run_id="c/r", total=4, window_s=1.0)
    first = lw.update({"phase": "run", "el": 0.5, "chunks": 40, "ttfts": [0.2, 0.4], "sent": 4, "inflight": 4})
    assert first.ttft_p50_ms == pytest.approx(300.0)
    later = [lw.update({"phase": "run", "el": 0.5 + 0.25 * i, "chunks": 40 + 100 * i, "sent": 4, "inflight": 4})
             for i in range(1, 120)]  # 30 s of decoding, no new first token
    assert all(t.ttft_p50_ms == pytest.approx(300.0) and t.ttft_p99_ms is not None for t in later)
    assert "TTFT p50/p99 -/-" not in later[-1].line()
    newer = lw.update({"phase": "run", "el": 31.0, "chunks": 12000, "ttfts": [1.0], "sent": 4, "inflight": 4})
    assert newer.ttft_p50_ms == pytest.approx(1000.0)  # a new first token: the window's figures again


def test_the_live_ttft_of_a_burst_stays_the_whole_bursts_as_its_first_tokens_leave_the_window() -> None:
    """128 first tokens over 3.5 s (a burst through 1P1D), then decoding: the live TTFT stays the burst's p50 (its
    middle, ~1.75 s), not the p50 of the last few first tokens left in the window as the older ones leave it (3.4 s
    was shown while the stored median was 1.6 s)."""
    lw = LiveWindow(run_id="c/r", total=128, window_s=1.0)
    ttfts = [0.2 + 3.3 * i / 127 for i in range(128)]
    ticks = [lw.update({"phase": "run", "el": 0.25 * (k + 1), "chunks": 10 * (k + 1), "sent": 128, "inflight": 128,
                        "ttfts": [t for t in ttfts if 0.25 * k < t <= 0.25 * (k + 1)]}) for k in range(14)]
    assert ticks[-1].ttft_p50_ms == pytest.approx(1850.0, rel=0.05)
    later = [lw.update({"phase": "run", "el": 3.5 + 0.25 * i, "chunks": 200 + 100 * i, "sent": 128,
                        "inflight": 128}) for i in range(1, 80)]  # the window lets the burst's first tokens go
    assert all(t.ttft_p50_ms == ticks[-1].ttft_p50_ms for t in later)


def test_live_window_and_events_round_trip() -> None:
    lw = LiveWindow(run_id="c/r", total=10, window_s=1.0)
    lw.update({"phase": "run", "el": 0.0, "chunks": 0, "ttfts": [0.2], "gaps": [], "req": []})
    lw.update({"phase": "run", "el": 0.5, "chunks": 500, "ttfts": [0.4], "gaps": [0.01, 0.02, 0.03],
               "req": [[0, 0.02, 1]], "sent": 10, "done": 2, "inflight": 8})
    tick = lw.update({"phase": "run", "el": 1.0, "chunks": 1000, "gaps": [0.01], "req": [[1, 0.01, 1], [2, 0.03, 1]],
                      "sent": 10, "done": 4, "inflight": 6})
    assert tick.output_tps == 1000.0
    assert tick.ttft_p50_ms == pytest.approx(300.0)
    assert tick.itl_p50_ms == pytest.approx(15.0)  # gaps after the window's first tick: 10, 20, 30, 10 ms
    assert tick.tpot_p50_ms == pytest.approx(20.0)
    assert "done 4/10" in tick.line()
    again = event_from_dict(json.loads(json.dumps(tick.to_dict())))
    assert again == tick and isinstance(again, BenchTick)
    done = BenchDone(run_id="c/r", status="complete", summary={"output_throughput": 1.0}, flags=("x",))
    assert event_from_dict(json.loads(json.dumps(done.to_dict()))) == done


def test_a_bench_that_completed_no_request_fails_and_is_in_no_figure(capsys: pytest.CaptureFixture[str],
                                                                     stub_process) -> None:
    """Issue 23: a run of 0/N done is stored and shown, but it measured nothing: the command fails and says so."""
    url = stub_process("--fail-every", "1")
    code, out, err = _run(capsys, "bench", "--endpoint", url, "--input-len", "16", "--output-len", "8",
                          "--num-prompts", "4", "--warmup", "0")
    assert code == 1, err
    assert "Successful requests:                     0 " in out
    assert "no request completed (0/4 done, 4 failed): in no figure" in err and "results:" in err
