"""What is sent and when: random token-id prompts, JSONL prompts, warm-ups, arrival schedules."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from tui.core.bench.arrivals import send_offsets
from tui.core.bench.dataset import (
    Prompt,
    RandomSpec,
    length_bounds,
    load_prompts_file,
    random_prompts,
    warmup_prompts,
)
from tui.core.errors import InputError


def test_random_prompts_lengths_vocab_and_determinism() -> None:
    spec = RandomSpec(input_len=100, output_len=20, num_prompts=200, range_ratio=0.5, seed=3, vocab_size=1000)
    ps = random_prompts(spec)
    assert len(ps) == 200
    assert {p.input_len for p in ps} <= set(range(50, 151))
    assert {p.output_len for p in ps} <= set(range(10, 31))
    assert min(p.input_len for p in ps) < 70 and max(p.input_len for p in ps) > 130  # the range is used
    assert all(0 <= t < 1000 for p in ps for t in p.ids or ())
    again = random_prompts(spec)
    assert [list(p.ids or ()) for p in ps] == [list(p.ids or ()) for p in again]
    other = random_prompts(RandomSpec(100, 20, 200, 0.5, seed=4, vocab_size=1000))
    assert [list(p.ids or ()) for p in ps] != [list(p.ids or ()) for p in other]
    # vllm's sequence: consecutive ids modulo the vocabulary from a random offset
    ids = list(ps[0].ids or ())
    assert all((b - a) % 1000 == 1 for a, b in itertools.pairwise(ids))


def test_prefix_is_shared_and_exclusions_hold() -> None:
    ps = random_prompts(RandomSpec(input_len=30, output_len=5, num_prompts=10, prefix_len=8, vocab_size=50,
                                   exclude_ids=(0, 1, 2, 3)))
    prefixes = {tuple(p.ids[:8]) for p in ps if p.ids is not None}
    assert len(prefixes) == 1
    assert all(p.input_len == 38 for p in ps)
    assert not {0, 1, 2, 3} & {t for p in ps for t in p.ids or ()}


def test_length_bounds_like_vllm() -> None:
    assert length_bounds(7500, 0.0) == (7500, 7500)
    assert length_bounds(10, 0.25) == (7, 13)
    assert length_bounds(1, 0.5, at_least_one=True) == (1, 2)
    with pytest.raises(InputError):
        RandomSpec(10, 10, 10, range_ratio=1.0).check()


def test_prompt_json_and_text(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hello there", "output_len": 4}\n\n{"prompt": [5, 6, 7], "max_tokens": 9}\n'
                 '{"prompt": "x"}\n')
    ps = load_prompts_file(f, default_output_len=16, num_prompts=5)
    assert [p.output_len for p in ps] == [4, 9, 16, 4, 9]
    assert json.loads(ps[0].prompt_json()) == "hello there"
    assert json.loads(ps[1].prompt_json()) == [5, 6, 7]
    assert ps[1].input_len == 3 and ps[0].input_len == 0


@pytest.mark.parametrize(("text", "what"), [("not json\n", ":1: not JSON"), ('{"x": 1}\n', "prompt"),
                                            ('{"prompt": ""}\n', "non-empty"),
                                            ('{"prompt": "a", "output_len": 0}\n', "output_len"), ("", "no prompts")])
def test_bad_prompt_files_name_the_line(tmp_path: Path, text: str, what: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(text)
    with pytest.raises(InputError) as e:
        load_prompts_file(f, 16)
    assert what in e.value.one_line() and "bad.jsonl" in e.value.one_line()


def test_warmup_covers_shapes_and_batch() -> None:
    ps = random_prompts(RandomSpec(input_len=100, output_len=40, num_prompts=50, range_ratio=0.5, vocab_size=500))
    w = warmup_prompts(ps, burst=16, vocab_size=500)
    shortest = min(p.input_len for p in ps)
    longest = max(p.input_len for p in ps)
    lens = {p.input_len for p in w}
    assert shortest in lens and longest in lens  # both prompt-length extremes are warmed
    assert all(1 <= p.output_len <= 32 for p in w)
    assert sum(1 for p in w if p.output_len == 8 and p.input_len <= 16) == 16  # the batch-size burst
    run_starts = {tuple(p.ids[:4]) for p in ps if p.ids is not None}
    assert not any(tuple(p.ids[:4]) in run_starts for p in w if p.ids is not None)  # no shared prefix to cache
    assert warmup_prompts(ps, burst=0) == []


def test_warmup_of_text_prompts() -> None:
    # text of a known count (made with the server's tokenizer): fresh ids of the same lengths, never the run's text
    ps = [Prompt(output_len=4, text=f"run prompt {i} " * 50, tokens=300 + i) for i in range(5)]
    w = warmup_prompts(ps, burst=2, vocab_size=500)
    assert {p.input_len for p in w if p.output_len == 4} == {300, 304}
    assert all(p.ids is not None for p in w)
    # text of unknown length (a prompts file): the text reversed
    fs = [Prompt(output_len=4, text="abc def"), Prompt(output_len=4, text="a longer prompt")]
    w = warmup_prompts(fs, burst=1, vocab_size=500)
    assert {p.text for p in w if p.text} == {"fed cba", "tpmorp regnol a"}


def test_saturation_sends_everything_at_once() -> None:
    assert send_offsets(5, math.inf) == [0.0] * 5


def _cv(gaps: list[float]) -> float:
    m = sum(gaps) / len(gaps)
    return math.sqrt(sum((g - m) ** 2 for g in gaps) / len(gaps)) / m


@pytest.mark.parametrize(("burstiness", "cv"), [(1.0, 1.0), (0.25, 2.0), (4.0, 0.5)])
def test_arrivals_follow_gamma_with_burstiness(burstiness: float, cv: float) -> None:
    n, rate = 20000, 50.0
    offs = send_offsets(n, rate, burstiness, seed=7)
    assert offs[-1] == pytest.approx(n / rate)  # rescaled as vllm does: the last send at N/rate
    assert all(b >= a for a, b in itertools.pairwise(offs))
    gaps = [offs[0]] + [b - a for a, b in itertools.pairwise(offs)]
    assert sum(gaps) / n == pytest.approx(1 / rate, rel=1e-9)
    # gamma(shape k): coefficient of variation 1/sqrt(k) (Poisson: 1)
    assert _cv(gaps) == pytest.approx(cv, rel=0.05)
    assert send_offsets(n, rate, burstiness, seed=7) == offs


def test_constant_arrivals_with_infinite_burstiness() -> None:
    assert send_offsets(4, 2.0, math.inf) == [0.5, 1.0, 1.5, 2.0]
    with pytest.raises(ValueError):
        send_offsets(3, 1.0, 0.0)


def test_workloads_with_one_seed_share_no_prompt_start() -> None:
    # decode-heavy then prefill-heavy on one layout: the second must not find the first's prompts in the cache
    short = random_prompts(RandomSpec(input_len=512, output_len=2048, num_prompts=16, vocab_size=151936))
    long = random_prompts(RandomSpec(input_len=7500, output_len=200, num_prompts=16, vocab_size=151936))
    starts = {tuple(p.ids[:16]) for p in short if p.ids is not None}
    assert not any(tuple(p.ids[:16]) in starts for p in long if p.ids is not None)
    again = random_prompts(RandomSpec(input_len=512, output_len=2048, num_prompts=16, vocab_size=151936))
    assert [list(p.ids or []) for p in again] == [list(p.ids or []) for p in short]  # same seed and shape: same
