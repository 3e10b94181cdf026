"""Random prompts as text made with the server's tokenizer (what vllm bench sends), and the fallback to ids.

The fake tokenizer here behaves like a byte-level BPE in the ways that matter: it knows fewer ids than the model's
vocabulary and drops the ones it does not know when decoding (as Hugging Face tokenizers do); random ids do not
round-trip (some decode to nothing, some to text that tokenizes as two tokens), while its own tokenization does."""

from __future__ import annotations

import array
import json
import random

import httpx
import pytest

from tests.simserver import SimServers
from tui.core.bench.dataset import Prompt, RandomSpec, random_prompts
from tui.core.bench.runner import BenchOptions, BenchTarget, run_bench
from tui.core.bench.textprompts import TokenizerUnavailable, as_text, server_vocab
from tui.core.models import Workload

KNOWN = 1000  # the tokenizer's ids; the model's vocabulary is larger


def _word(tid: int) -> str:
    if tid < 10:  # pieces that decode to nothing on their own (a partial byte sequence)
        return ""
    if tid >= 900:  # a token whose text is two words: it comes back as two tokens
        return f"w{tid - 890} w{tid - 889}"
    return f"w{tid}"


def _encode(text: str) -> list[int]:
    return [int(w[1:]) for w in text.split()]


class FakeTokenizerServer:
    def __init__(self) -> None:
        self.calls = {"/tokenize": 0, "/detokenize": 0}

    def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        path = request.url.path
        self.calls[path] = self.calls.get(path, 0) + 1
        if path == "/detokenize":
            words = [_word(t) for t in body["tokens"] if 0 <= t < KNOWN]
            text = " ".join(w for w in words if w)
            return httpx.Response(200, json={"prompt": text})
        if path == "/tokenize":
            assert body["add_special_tokens"] is False
            toks = _encode(body["prompt"])
            return httpx.Response(200, json={"tokens": toks, "count": len(toks), "max_model_len": 65536})
        return httpx.Response(404, json={"detail": "Not Found"})


async def test_vocab_is_found_by_bisection() -> None:
    srv = FakeTokenizerServer()
    t = httpx.MockTransport(srv.handler)
    assert await server_vocab("http://x", "m", 151936, transport=t) == KNOWN
    assert srv.calls["/detokenize"] < 25
    assert await server_vocab("http://x", "m", 500, transport=t) == 500  # all known


async def test_text_prompts_count_the_intended_tokens() -> None:
    srv = FakeTokenizerServer()
    prompts = random_prompts(RandomSpec(input_len=300, output_len=4, num_prompts=20, range_ratio=0.3, seed=3,
                                        vocab_size=KNOWN))
    made = await as_text(prompts, base_url="http://x", model="m", vocab=KNOWN, transport=httpx.MockTransport(
        srv.handler))
    assert made.exact == 20 and made.rounds >= 2  # the first texts counted wrong: aligned in rounds
    for src, p in zip(prompts, made.prompts, strict=True):
        assert p.text is not None and p.ids is None
        assert p.tokens == src.input_len == len(_encode(p.text))
        assert p.output_len == src.output_len
        assert p.prompt_json().startswith('"')


async def test_shared_prefix_stays_shared() -> None:
    srv = FakeTokenizerServer()
    prompts = random_prompts(RandomSpec(input_len=50, output_len=4, num_prompts=6, prefix_len=40, seed=1,
                                        vocab_size=KNOWN))
    made = await as_text(prompts, base_url="http://x", model="m", vocab=KNOWN,
                         transport=httpx.MockTransport(srv.handler))
    heads = {p.text[:100] for p in made.prompts if p.text}
    assert len(heads) == 1


async def test_no_tokenizer_routes_raise() -> None:
    t = httpx.MockTransport(lambda r: httpx.Response(404, json={"detail": "Not Found"}))
    with pytest.raises(TokenizerUnavailable, match="404"):
        await server_vocab("http://x", "m", 1000, transport=t)
    p = [Prompt(output_len=2, ids=array.array("i", [1, 2, 3]))]
    with pytest.raises(TokenizerUnavailable):
        await as_text(p, base_url="http://x", model="m", vocab=10, transport=t)


async def test_sim_run_sends_text_of_exact_length(sims: SimServers) -> None:
    server = sims.start(startup_s=0.2, clock=50.0)
    server.wait_ready()
    wl = Workload(name="w", input_len=700, output_len=4, num_prompts=10, range_ratio=0.5, seed=random.randrange(99))
    run = await run_bench(BenchOptions(workload=wl, model="dummy-qwen3-8b", warmup=0), BenchTarget(endpoint=server.url))
    assert run.meta.prompts["format"] == "text" and run.meta.prompts["exact"] == 10
    frame = run.records()
    # the server's usage counts what was intended for every request
    assert all(r.prompt_tokens == r.expected_input for r in frame)
    ids = await run_bench(BenchOptions(workload=wl, model="dummy-qwen3-8b", warmup=0, prompt_format="ids"),
                          BenchTarget(endpoint=server.url))
    assert ids.meta.prompts == {"format": "ids"}
    assert sum(r.prompt_tokens for r in ids.records()) == sum(r.prompt_tokens for r in frame)


async def test_stub_without_tokenizer_falls_back_to_ids(stub) -> None:
    url, _ = await stub()
    run = await run_bench(BenchOptions(workload=Workload(name="w", input_len=20, output_len=3, num_prompts=4),
                                       warmup=0), BenchTarget(endpoint=url))
    assert run.meta.status == "complete"
    assert run.meta.prompts["format"] == "ids" and "cannot tokenize" in run.meta.prompts["note"]


async def test_same_seed_same_text() -> None:
    prompts = random_prompts(RandomSpec(input_len=120, output_len=4, num_prompts=12, seed=5, vocab_size=KNOWN))
    texts = []
    for _ in range(2):
        made = await as_text(prompts, base_url="http://x", model="m", vocab=KNOWN, seed=5,
                             transport=httpx.MockTransport(FakeTokenizerServer().handler))
        texts.append([p.text for p in made.prompts])
    assert texts[0] == texts[1]
