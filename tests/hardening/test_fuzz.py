"""Fuzzed parsers (hypothesis; the example count is bounded by the "disagg" profile in tests/conftest.py): on any
input they raise nothing but the project's own error type, and they round-trip what they should."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tui.core import yamlio
from tui.core.errors import InputError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
H200 = FIXTURES / "vllm-0.24.0-h200"
SHIPPED = Path(__file__).resolve().parent.parent.parent / "profiles"

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=30))
trees = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                     st.dictionaries(st.text(max_size=12), kids, max_size=4)),
                     max_leaves=12)


def _mutate(data: Any, path: list[Any], value: Any) -> Any:
    """``data`` with the node at ``path`` (indices into the keys or items met on the way) replaced by ``value``."""
    if not path or not isinstance(data, dict | list) or not data:
        return value
    if isinstance(data, dict):
        keys = list(data)
        key = keys[path[0] % len(keys)]
        return {**data, key: _mutate(data[key], path[1:], value)}
    i = path[0] % len(data)
    return [*data[:i], _mutate(data[i], path[1:], value), *data[i + 1:]]


def _yaml_of(data: Any) -> str:
    try:
        return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    except yaml.YAMLError:
        return "{}"


mutation = st.tuples(st.lists(st.integers(0, 50), max_size=4), trees)


# --- YAML loaders ------------------------------------------------------------------------------------------------

MODEL_TEXT = (SHIPPED / "models" / "qwen3.6-27b-nvfp4.yaml").read_text(encoding="utf-8")
WORKLOADS_TEXT = (SHIPPED / "workloads.yaml").read_text(encoding="utf-8")
PLAYBOOK_TEXT = (SHIPPED / "playbook.yaml").read_text(encoding="utf-8")


def _only_input_errors(fn: Any, text: str) -> None:
    try:
        fn(text)
    except InputError as err:
        assert "\n" not in err.one_line().strip() or "YAML" in err.one_line()


def _model(text: str) -> Any:
    from tui.core.models import parse_model_profile

    return parse_model_profile(yamlio.load_text(text, "m.yaml"), "m.yaml")


def _workloads(text: str) -> Any:
    from tui.core.models import parse_workloads_file

    return parse_workloads_file(yamlio.load_text(text, "w.yaml"), "w.yaml")


def _playbook(text: str) -> Any:
    from tui.core.playbook.loader import parse_playbook_text

    return parse_playbook_text(text, "pb.yaml")


@pytest.mark.parametrize("fn", [_model, _workloads, _playbook], ids=["model", "workloads", "playbook"])
@given(text=st.text(max_size=300))
def test_yaml_loaders_take_any_text(fn: Any, text: str) -> None:
    _only_input_errors(fn, text)


@pytest.mark.parametrize(("fn", "base"), [(_model, MODEL_TEXT), (_workloads, WORKLOADS_TEXT)],
                         ids=["model", "workloads"])
@given(change=mutation)
def test_yaml_loaders_take_any_change_to_a_good_file(fn: Any, base: str, change: tuple[list[int], Any]) -> None:
    data = yaml.safe_load(base)
    _only_input_errors(fn, _yaml_of(_mutate(data, *change)))


@settings(max_examples=15)  # each example compiles the entries' regular expressions
@given(change=mutation)
def test_playbook_loader_takes_any_change_to_an_entry(change: tuple[list[int], Any]) -> None:
    data = yaml.safe_load(PLAYBOOK_TEXT)
    data["entries"] = data["entries"][:2]
    _only_input_errors(_playbook, _yaml_of(_mutate(data, [1, 0, *change[0]], change[1])))


@given(st.sampled_from(["decode-heavy", "prefill-heavy"]),
       st.fixed_dictionaries({"input_len": st.integers(1, 10**6), "output_len": st.integers(1, 10**6),
                              "num_prompts": st.integers(1, 10**5),
                              "request_rate": st.one_of(st.just("inf"), st.floats(0.01, 1e4)),
                              "max_concurrency": st.one_of(st.none(), st.integers(1, 4096)),
                              "range_ratio": st.floats(0, 0.99), "seed": st.integers(0, 2**31)}))
def test_a_workload_round_trips_through_its_file(name: str, values: dict[str, Any]) -> None:
    """A workload written as a workload file reads back as the same workload."""
    values = {k: v for k, v in values.items() if v is not None}
    first = _workloads(_yaml_of({"workloads": {name: values}}))[name]
    again = _workloads(_yaml_of({"workloads": {name: {k: getattr(first, k) if k != "request_rate" else
                                                      ("inf" if math.isinf(first.request_rate) else
                                                       first.request_rate) for k in values}}}))[name]
    assert again == first
    for k, v in values.items():
        got = getattr(first, k)
        assert (math.isinf(got) if v == "inf" else got == pytest.approx(v)), k


# --- the Prometheus text parser ----------------------------------------------------------------------------------

metric_names = st.from_regex(r"\A[a-zA-Z_:][a-zA-Z0-9_:]{0,20}\Z")
label_names = st.from_regex(r"\A[a-zA-Z_][a-zA-Z0-9_]{0,10}\Z").filter(lambda s: not s.startswith("__"))
label_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
values = st.one_of(st.floats(allow_nan=False, width=64), st.integers(-2**53, 2**53).map(float))


@given(st.text(max_size=400))
def test_prometheus_parser_takes_any_text(text: str) -> None:
    from tui.core.telemetry import prom

    prom.parse(text)  # lenient: bad lines are collected, never raised
    try:
        prom.parse(text, strict=True)
    except prom.PromParseError:
        pass


@given(st.binary(max_size=400))
def test_prometheus_parser_takes_any_bytes_decoded(data: bytes) -> None:
    from tui.core.telemetry import prom

    prom.parse(data.decode("utf-8", "replace"))


@settings(max_examples=30)
@given(st.dictionaries(metric_names, st.lists(st.tuples(st.dictionaries(label_names, label_values, max_size=3),
                                                        values), min_size=1, max_size=3), min_size=1, max_size=4))
def test_prometheus_render_parse_round_trip(families: dict[str, list[tuple[dict[str, str], float]]]) -> None:
    """Gauges rendered as exposition text parse back to the same samples, and render to the same text again."""
    from tui.core.telemetry import prom

    lines = []
    expected = []
    for name, samples in families.items():
        assume(not name.endswith(("_bucket", "_count", "_sum", "_total", "_created")))
        lines.append(f"# TYPE {name} gauge")
        for labels, value in samples:
            body = ",".join(f'{k}="{prom._escape_label(v)}"' for k, v in sorted(labels.items()))
            lines.append(f"{name}{{{body}}} {prom.format_value(value)}" if body else
                         f"{name} {prom.format_value(value)}")
            expected.append((name, tuple(sorted(labels.items())), value))
    text = "\n".join(lines) + "\n"
    exp = prom.parse(text, strict=True)
    got = [(s.name, tuple(sorted(s.labels)), s.value) for f in exp.families.values() for s in f.samples]
    assert sorted(got) == sorted(expected)
    assert prom.render(prom.parse(prom.render(exp))) == prom.render(exp)


# --- the load generator's SSE chunk parser -----------------------------------------------------------------------


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def write(self, data: Any) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class _Pool:
    def _give_back(self, conn: Any) -> None:
        pass

    def _forget(self, conn: Any) -> None:
        pass


def _feed(pieces: list[bytes], *, close: bool = True) -> Any:
    from tui.core.bench.httpstream import StreamConnection, StreamResult

    loop = asyncio.new_event_loop()
    try:
        conn = StreamConnection(_Pool())
        conn.connection_made(_Transport())
        res = StreamResult(start=0.0)
        fut = loop.create_future()
        conn.begin(res, b"", fut)
        for p in pieces:
            conn.data_received(p)
        if close:
            conn.connection_lost(None)
        return res, fut.done()
    finally:
        loop.close()


def _sse_events() -> list[bytes]:
    body = (H200 / "sse" / "completions_stream_token_ids_prompt.txt").read_bytes()
    body = body.split(b"\r\n\r\n", 1)[1].replace(b"\r\n", b"\n")
    return [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]


EVENTS = _sse_events()
TOKENS = sum(1 for e in EVENTS if b'"choices":[{' in e)
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunked(events: list[bytes]) -> bytes:
    return HEAD + b"".join(f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in events) + b"0\r\n\r\n"


@given(st.lists(st.binary(max_size=200), max_size=8))
def test_sse_parser_takes_any_bytes(pieces: list[bytes]) -> None:
    res, finished = _feed(pieces)
    assert finished  # every response ends: a result or an error, never a hang
    assert res.success or res.error


@given(st.lists(st.binary(max_size=80), max_size=6))
def test_sse_parser_takes_any_body_after_a_good_head(pieces: list[bytes]) -> None:
    res, finished = _feed([HEAD, *pieces])
    assert finished and (res.success or res.error)


@given(st.lists(st.integers(1, 4000), max_size=30))
def test_sse_stream_split_anywhere_counts_the_same(cuts: list[int]) -> None:
    """A real vLLM stream cut into reads at any points: the same tokens and usage as in one read."""
    data = _chunked(EVENTS)
    points = sorted({c % len(data) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in itertools.pairwise(points)]
    res, finished = _feed(pieces, close=False)
    assert finished and res.success, res.error
    assert res.chunks == TOKENS
    whole, _ = _feed([data], close=False)
    assert (res.prompt_tokens, res.completion_tokens) == (whole.prompt_tokens, whole.completion_tokens)


@given(st.integers(1, 10_000))
def test_sse_stream_cut_short_is_an_error(cut: int) -> None:
    data = _chunked(EVENTS)
    res, finished = _feed([data[: cut % (len(data) - 5)]])
    assert finished and not res.success and res.error


# --- the vLLM log-line and phase parser, the playbook matcher ------------------------------------------------------

LOG_LINES = (H200 / "startup" / "main.log").read_text(encoding="utf-8", errors="replace").splitlines()


@given(st.lists(st.one_of(st.text(max_size=200), st.sampled_from(LOG_LINES)), max_size=20))
def test_log_line_and_phase_parsers_take_any_line(lines: list[str]) -> None:
    from tui.core.launch.phases import PhaseTracker, last_tqdm, parse_line

    tracker = PhaseTracker()
    last = tracker.phase
    for line in lines:
        rec = parse_line(line)
        assert isinstance(rec.message, str)
        last_tqdm(line)
        tracker.feed(line)
        assert tracker.phase.progress >= last.progress  # phases never go back
        last = tracker.phase


_BOOK: list[Any] = []


def _book() -> Any:
    if not _BOOK:
        from tui.core.playbook.book import load_playbook

        _BOOK.append(load_playbook(operator=False))
    return _BOOK[0]


@given(st.lists(st.one_of(st.text(max_size=200), st.sampled_from(LOG_LINES)), max_size=15),
       st.one_of(st.none(), st.integers(-64, 255)), st.one_of(st.none(), st.booleans()))
def test_playbook_matcher_takes_any_lines(lines: list[str], code: int | None, ready: bool | None) -> None:
    from tui.core.playbook.matcher import Matcher

    m = Matcher(_book(), server="s")
    for i, line in enumerate(lines, 1):
        for d in m.feed(line, i):
            assert d.entry_id
    m.finish(exit_code=code, ready=ready)


def test_matcher_replays_the_real_start_the_same_however_fed() -> None:
    """The real H200 start fed twice gives the same diagnoses (the matcher keeps no state across instances)."""
    from tui.core.playbook.matcher import Matcher

    def run() -> list[str]:
        m = Matcher(_book(), server="s")
        out = [d.entry_id for i, line in enumerate(LOG_LINES, 1) for d in m.feed(line, i)]
        return out + [d.entry_id for d in m.finish(exit_code=None, ready=True)]

    first = run()
    assert first  # the capture has a diagnosis to find (a Triton JIT during inference): equal lists are not both empty
    assert first == run()


# --- the vllm bench result reader -----------------------------------------------------------------------------------

FULL_RESULT = json.loads((H200 / "bench" / "bench2_in7500_out200_n128.json").read_text(encoding="utf-8"))
# the same result cut to its first 8 requests (the per-request arrays), so each example stays small
RESULT = {k: (v[:8] if isinstance(v, list) and len(v) == len(FULL_RESULT["ttfts"]) else v)
          for k, v in FULL_RESULT.items()}


@settings(max_examples=30)  # each example writes and reads a run directory
@given(change=mutation)
def test_vllm_result_reader_takes_any_change(change: tuple[list[int], Any], tmp_path_factory: Any) -> None:
    from tui.core.bench.store import load_run
    from tui.core.bench.vllmresult import import_vllm_result

    data = _mutate(RESULT, *change)
    folder = tmp_path_factory.mktemp("imp")
    f = folder / "r.json"
    f.write_text(json.dumps(data), encoding="utf-8")
    try:
        run = import_vllm_result(f, root=folder / "runs")
    except InputError:
        return
    load_run(run.path)


@given(data=trees)
def test_vllm_result_reader_takes_any_json(data: Any, tmp_path_factory: Any) -> None:
    from tui.core.bench.vllmresult import import_vllm_result

    folder = tmp_path_factory.mktemp("imp")
    f = folder / "r.json"
    f.write_text(json.dumps(data), encoding="utf-8")
    try:
        import_vllm_result(f, root=folder / "runs")
    except InputError:
        pass


def test_vllm_result_round_trips(tmp_path: Path) -> None:
    """A real result imported and read back keeps its figures."""
    from tui.core.bench.store import load_run
    from tui.core.bench.vllmresult import import_vllm_result

    f = tmp_path / "r.json"
    f.write_text(json.dumps(FULL_RESULT), encoding="utf-8")
    run = load_run(import_vllm_result(f, root=tmp_path / "runs").path)
    for key in ("duration", "completed", "output_throughput", "mean_ttft_ms", "mean_tpot_ms", "p99_itl_ms"):
        assert run.summary[key] == pytest.approx(FULL_RESULT[key]), key
    assert len(run.records()) == len(FULL_RESULT["ttfts"])
