"""The Prometheus text parser against every real vLLM 0.24 /metrics capture, and the format's corners."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import pytest

from tests.telemetry_helpers import CPU, H200, exposition_text, metrics_captures
from tui.core.telemetry import prom

CAPTURES = metrics_captures()


def test_every_capture_is_found() -> None:
    # 4 bench + 24 run1 + 4 rerun before/after + 24 rerun during + 3 endpoints + 2 two_servers + 2 cpu
    assert len(CAPTURES) == 63


def _sample_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def _declared(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"(?m)^# TYPE (\S+) (\S+)$", text)}


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: str(Path(p).relative_to(p.parents[2])))
def test_capture_parses_without_loss(path: Path) -> None:
    text = exposition_text(path)
    exp = prom.parse(text, strict=True)
    assert exp.errors == ()
    # every sample line became exactly one sample, in order, with its value
    lines = _sample_lines(text)
    samples = [s for fam in exp.families.values() for s in fam.samples]
    assert len(samples) == len(lines) == len(exp)
    by_line = {}
    for ln in lines:
        name_labels, _, value = ln.rpartition(" ")
        by_line[name_labels] = float(value)
    rendered = {prom.render_sample(s).rpartition(" ")[0]: s.value for s in samples}
    assert len(rendered) == len(by_line)
    for key, value in by_line.items():
        got = rendered[key]
        assert got == value or (math.isnan(got) and math.isnan(value)), key
    # every declared family exists with its declared type, and owns samples
    declared = _declared(text)
    for name, kind in declared.items():
        fam = exp.family(name)
        assert fam is not None and fam.type == kind, name
        assert fam.help is not None
    # histograms are well formed: cumulative buckets, +Inf bucket == _count, one per series
    for fam in exp.families.values():
        if fam.type != prom.HISTOGRAM or not fam.samples:  # declared before its first observation: no samples
            continue
        series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        counts = {s.labels: s.value for s in fam.samples if s.name == fam.name + "_count"}
        for s in fam.samples:
            if s.name == fam.name + "_bucket":
                key = tuple(kv for kv in s.labels if kv[0] != "le")
                series.setdefault(key, []).append((prom.parse_value(s.label("le") or "nan"), s.value))
        assert series, fam.name
        for key, buckets in series.items():
            assert buckets == sorted(buckets), fam.name
            assert math.isinf(buckets[-1][0])
            assert all(a[1] <= b[1] for a, b in itertools.pairwise(buckets)), fam.name
            assert counts[key] == buckets[-1][1], fam.name


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_capture_round_trips(path: Path) -> None:
    exp = prom.parse(exposition_text(path), strict=True)
    again = prom.parse(prom.render(exp), strict=True)
    assert list(again.families) == list(exp.families)
    for name, fam in exp.families.items():
        other = again.families[name]
        assert (other.type, other.help) == (fam.type, fam.help)
        assert [(s.name, s.labels) for s in other.samples] == [(s.name, s.labels) for s in fam.samples]
        for a, b in zip(fam.samples, other.samples, strict=True):
            assert a.value == b.value or (math.isnan(a.value) and math.isnan(b.value))


def test_spot_values_idle_endpoint() -> None:
    exp = prom.parse(exposition_text(H200 / "endpoints" / "GET_metrics.txt"))
    info = next(exp.samples("vllm:cache_config_info"))
    assert info.label("kv_cache_size_tokens") == "743120"
    assert info.label("num_gpu_blocks") == "46445"
    assert info.label("gpu_memory_utilization") == "0.85"
    assert info.value == 1.0
    assert exp.family("vllm:prompt_tokens_total").type == prom.COUNTER  # type: ignore[union-attr]
    assert exp.family("vllm:prompt_tokens_created").type == prom.GAUGE  # type: ignore[union-attr]
    assert exp.value("vllm:num_requests_running", engine="0") == 0.0
    assert exp.family("http_request_size_bytes").type == prom.SUMMARY  # type: ignore[union-attr]


def test_spot_values_under_load() -> None:
    exp = prom.parse(exposition_text(H200 / "rerun/bench/bench1_in512_out2048_n128_metrics_during/metrics_05.txt"))
    assert exp.comments == 1  # the capture's "# captured_at_epoch=…" line
    assert exp.value("vllm:generation_tokens_total") == 103226.0
    assert exp.value("vllm:num_requests_running") == 128.0
    assert exp.value("vllm:prompt_tokens_by_source_total", source="local_cache_hit") == 848.0
    ttft = exp.histogram("vllm:time_to_first_token_seconds")
    assert ttft is not None
    assert ttft.count == 128.0 and ttft.sum == 1120.8774859905243
    assert [b.le for b in ttft.buckets][:3] == [0.001, 0.005, 0.01]
    assert dict((b.le, b.count) for b in ttft.buckets)[10.0] == 128.0
    assert dict((b.le, b.count) for b in ttft.buckets)[7.5] == 0.0


def test_dp2_nixl_families_per_engine() -> None:
    exp = prom.parse(exposition_text(CPU / "metrics-engine-registry-dp2-nixl.prom"), strict=True)
    assert exp.family("vllm:nixl_xfer_time_seconds").type == prom.HISTOGRAM  # type: ignore[union-attr]
    assert exp.family("vllm:nixl_num_failed_transfers_total").type == prom.COUNTER  # type: ignore[union-attr]
    engines = {s.label("engine") for s in exp.samples("vllm:nixl_xfer_time_seconds_bucket")}
    assert engines == {"0", "1"}
    h = exp.histogram("vllm:nixl_bytes_transferred", engine="1")
    assert h is not None and h.buckets[0].le == 2048.0 and math.isinf(h.buckets[-1].le)


def test_two_servers_export_identical_label_sets() -> None:
    a = prom.parse(exposition_text(H200 / "two_servers/port8100_GET_metrics.txt"))
    b = prom.parse(exposition_text(H200 / "two_servers/port8200_GET_metrics.txt"))
    keys_a = {(s.name, s.labels) for s in a.samples("vllm:generation_tokens_total")}
    keys_b = {(s.name, s.labels) for s in b.samples("vllm:generation_tokens_total")}
    assert keys_a == keys_b  # the same series: only the endpoint tells the two servers apart
    vllm_a = {(s.name, s.labels) for f in a.families.values() if f.name.startswith("vllm:") for s in f.samples}
    vllm_b = {(s.name, s.labels) for f in b.families.values() if f.name.startswith("vllm:") for s in f.samples}
    assert vllm_a == vllm_b


def test_keep_skips_other_families() -> None:
    text = exposition_text(H200 / "endpoints/GET_metrics_final.txt")
    exp = prom.parse(text, keep=("vllm:num_requests", "vllm:generation_tokens"))
    assert set(exp.families) == {"vllm:num_requests_running", "vllm:num_requests_waiting",
                                 "vllm:num_requests_waiting_by_reason", "vllm:generation_tokens_total",
                                 "vllm:generation_tokens_created"}
    full = prom.parse(text)
    assert exp.value("vllm:generation_tokens_total") == full.value("vllm:generation_tokens_total") > 0


# --- the format's corners --------------------------------------------------------------------------------------


CORNERS = (
    '# HELP esc_metric A help with a backslash \\\\ and a newline \\n inside.\n'
    '# TYPE esc_metric gauge\n'
    'esc_metric{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb",brace="x}y",comma="a,b"} 1.5\n'
    '# TYPE special gauge\n'
    'special{kind="pinf"} +Inf\n'
    'special{kind="ninf"} -Inf\n'
    'special{kind="nan"} NaN\n'
    'special{kind="exp"} 1.795939161170421e+09\n'
    'special{kind="ts"} 3 1700000000000\n'
    '# TYPE om_counter counter\n'
    'om_counter_total{a="1"} 17\n'
    'om_counter_created{a="1"} 1.7e9\n'
    '# TYPE lat histogram\n'
    'lat_bucket{le="0.1"} 1 # {trace_id="abc"} 0.05 1700000000.1\n'
    'lat_bucket{le="1"} 3\n'
    'lat_bucket{le="+Inf"} 4\n'
    'lat_sum 5.25\n'
    'lat_count 4\n'
    'lat_created 1.7e9\n'
    '# TYPE rpc summary\n'
    'rpc{quantile="0.5"} 0.2\n'
    'rpc{quantile="0.99"} 0.9\n'
    'rpc_sum 12\n'
    'rpc_count 40\n'
    'no_type_here{x="1",} 7\r\n'
    '# a free comment\n'
    'spaced_labels{ a = "1" , b="2" } 8\n'
    '# EOF\n'
    'after_eof 1\n'
)


def test_corners() -> None:
    exp = prom.parse(CORNERS, strict=True)
    s = next(exp.samples("esc_metric"))
    assert dict(s.labels) == {"path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb", "brace": "x}y", "comma": "a,b"}
    assert exp.family("esc_metric").help == "A help with a backslash \\ and a newline \n inside."  # type: ignore
    assert exp.value("special", kind="pinf") == math.inf
    assert exp.value("special", kind="ninf") == -math.inf
    assert math.isnan(exp.value("special", kind="nan") or 0.0)
    assert exp.value("special", kind="exp") == 1795939161.170421
    assert next(exp.samples("special", kind="ts")).timestamp == 1700000000000.0
    assert [x.name for x in exp.family("om_counter").samples] == ["om_counter_total",  # type: ignore[union-attr]
                                                                  "om_counter_created"]
    lat = exp.histogram("lat")
    assert lat is not None and lat.count == 4 and lat.sum == 5.25
    assert [(b.le, b.count) for b in lat.buckets] == [(0.1, 1), (1.0, 3), (math.inf, 4)]
    assert "lat_created" in [x.name for x in exp.family("lat").samples]  # type: ignore[union-attr]
    assert exp.family("rpc").type == prom.SUMMARY  # type: ignore[union-attr]
    assert len(exp.family("rpc").samples) == 4  # type: ignore[union-attr]
    assert exp.family("no_type_here").type == prom.UNTYPED  # type: ignore[union-attr]
    assert exp.value("spaced_labels", a="1", b="2") == 8
    assert exp.comments == 1
    assert exp.value("after_eof") is None
    # rendering keeps every value, escapes included
    again = prom.parse(prom.render(exp), strict=True)
    assert dict(next(again.samples("esc_metric")).labels) == dict(s.labels)
    assert again.value("special", kind="pinf") == math.inf


@pytest.mark.parametrize("bad", ["metric{a=1} 2", "metric{a=\"1\" b=\"2\"} 3", "metric 1 2 3",
                                 "metric notanumber", "{a=\"1\"} 2", "# TYPE m wibble"])
def test_malformed_lines_are_reported(bad: str) -> None:
    exp = prom.parse("ok 1\n" + bad + "\nok2 2\n")
    assert len(exp.errors) == 1 and exp.errors[0].line_no == 2
    assert exp.value("ok") == 1 and exp.value("ok2") == 2
    with pytest.raises(prom.PromParseError, match="line 2"):
        prom.parse("ok 1\n" + bad + "\n", strict=True)


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    b = [prom.Bucket(0.1, 10), prom.Bucket(0.5, 30), prom.Bucket(1.0, 40), prom.Bucket(math.inf, 40)]
    assert prom.histogram_quantile(0.25, b) == pytest.approx(0.1)  # rank 10: the top of the first bucket
    assert prom.histogram_quantile(0.5, b) == pytest.approx(0.1 + 0.4 * (20 - 10) / 20)
    assert prom.histogram_quantile(0.99, b) == pytest.approx(0.5 + 0.5 * (39.6 - 30) / 10)
    over = [prom.Bucket(1.0, 1), prom.Bucket(math.inf, 10)]
    assert prom.histogram_quantile(0.9, over) == 1.0  # in the +Inf bucket: the highest finite bound
    assert prom.histogram_quantile(0.5, [prom.Bucket(1.0, 0), prom.Bucket(math.inf, 0)]) is None
    assert prom.histogram_quantile(1.5, b) is None
