"""Random prompts sent as text, the way ``vllm bench serve`` sends them, made with the server's own tokenizer.

Why: vLLM 0.24 does not serve a prompt given as token ids at the cost of the same prompt given as text. On the real
H200 (dummy Qwen3-8B, 48 prompts of 7,500 tokens at once), the very same token sequences sent as ids had a 2.6 %
higher mean TTFT and a 2.7 % longer run than sent as text (ids, text, text, ids; our client at 1 % CPU); with 128
such prompts our token-id runs were 4.8 % behind ``vllm bench serve`` on TTFT. ``vllm bench`` sends text, and
so does real traffic; so text is the default and ids an option (``--prompt-format ids``).

How, with no tokenizer on our side (the model's tokenizer lives where vLLM runs):

1. the tokenizer's size: the largest id whose ``POST /detokenize`` gives text (Hugging Face tokenizers drop ids
   they do not know, so a bisection finds it in ~18 small calls); the model's vocabulary can be larger (Qwen3's
   151,936 rows against its tokenizer's 151,665 ids; the dummy model's 8,192-token tokenizer);
2. the random prompts are drawn from that range, then each is turned into text by ``/detokenize`` and counted by
   ``POST /tokenize`` (``add_special_tokens: false``). Text of random ids seldom re-tokenizes to the same count: a
   longer one is cut (``detokenize(tokens[:n])``, as vllm bench's alignment does), a shorter one gets more random
   ids appended, up to ``MAX_ROUNDS`` rounds. Each prompt records the count the server's tokenizer gives it.

A server without these routes (a plain OpenAI-compatible stub) gets the token ids, and the run says so.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

from tui.core.bench.dataset import Prompt

MAX_ROUNDS = 10
CONCURRENCY = 64


class TokenizerUnavailable(Exception):
    """The server offers no usable /tokenize and /detokenize."""


@dataclass(frozen=True, slots=True)
class TextPrompts:
    prompts: list[Prompt]
    exact: int  # prompts whose server count equals the intended length
    rounds: int  # the most tokenize rounds a prompt needed


class ServerTokenizer:
    def __init__(self, client: httpx.AsyncClient, base_url: str, model: str,
                 headers: Mapping[str, str] | None = None) -> None:
        self.client = client
        self.base = base_url.rstrip("/")
        self.model = model
        self.headers = dict(headers or {})
        self.sem = asyncio.Semaphore(CONCURRENCY)

    async def _post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        async with self.sem:
            try:
                r = await self.client.post(self.base + path, json=body, headers=self.headers)
            except httpx.HTTPError as exc:
                raise TokenizerUnavailable(f"POST {path}: {type(exc).__name__}") from None
        if r.status_code != 200:
            raise TokenizerUnavailable(f"POST {path} answered {r.status_code}")
        try:
            data = r.json()
        except ValueError:
            raise TokenizerUnavailable(f"POST {path} answered no JSON") from None
        if not isinstance(data, dict):
            raise TokenizerUnavailable(f"POST {path} answered {type(data).__name__}")
        return data

    async def detokenize(self, ids: Sequence[int]) -> str:
        text = (await self._post("/detokenize", {"model": self.model, "tokens": list(ids)})).get("prompt")
        if not isinstance(text, str):
            raise TokenizerUnavailable("POST /detokenize answered no prompt text")
        return text

    async def tokenize(self, text: str) -> list[int]:
        tokens = (await self._post("/tokenize", {"model": self.model, "prompt": text,
                                                 "add_special_tokens": False})).get("tokens")
        if not isinstance(tokens, list):
            raise TokenizerUnavailable("POST /tokenize answered no tokens")
        return [int(t) for t in tokens]

    async def _known(self, tid: int) -> bool:
        try:
            return bool(await self.detokenize([tid]))
        except TokenizerUnavailable:
            return False

    async def vocab_size(self, upper: int) -> int:
        """How many ids (from 0) the tokenizer knows, at most ``upper``: the first unknown id, by bisection."""
        await self.detokenize([0])  # raises when the route is missing
        if await self._known(upper - 1):
            return upper
        lo, hi = 0, upper - 1  # lo known (or 0), hi unknown
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if await self._known(mid):
                lo = mid
            else:
                hi = mid
        return max(hi, 1)

    async def text_of(self, p: Prompt, rng: random.Random, vocab: int) -> tuple[Prompt, int]:
        """``p`` (token ids) as text counting ``len(p.ids)`` tokens on this server, when the rounds allow."""
        assert p.ids is not None
        target = len(p.ids)
        text = await self.detokenize(p.ids)
        tokens = await self.tokenize(text)
        rounds = 1
        while len(tokens) != target and rounds < MAX_ROUNDS:
            rounds += 1
            if len(tokens) > target:
                text = await self.detokenize(tokens[:target])
            else:
                more = [rng.randrange(vocab) for _ in range(target - len(tokens))]
                text = await self.detokenize(tokens + more)
            tokens = await self.tokenize(text)
        return Prompt(output_len=p.output_len, text=text, tokens=len(tokens)), rounds


async def as_text(prompts: Sequence[Prompt], *, base_url: str, model: str, vocab: int, seed: int = 0,
                  headers: Mapping[str, str] | None = None, timeout_s: float = 60.0,
                  transport: httpx.AsyncBaseTransport | None = None) -> TextPrompts:
    """The token-id prompts as text (see the module's text). Raises TokenizerUnavailable when the server cannot."""
    async with httpx.AsyncClient(timeout=timeout_s, transport=transport) as client:
        tok = ServerTokenizer(client, base_url, model, headers)
        # one generator per prompt: the answers arrive in any order, the prompts stay the same for a seed
        done = await asyncio.gather(*(tok.text_of(p, random.Random(seed * 1_000_003 + 104_729 + i), vocab)
                                      for i, p in enumerate(prompts)))
    out = [p for p, _ in done]
    exact = sum(1 for p, src in zip(out, prompts, strict=True) if p.tokens == src.input_len)
    return TextPrompts(out, exact, max((r for _, r in done), default=0))


async def server_vocab(base_url: str, model: str, upper: int, *, headers: Mapping[str, str] | None = None,
                       timeout_s: float = 30.0, transport: httpx.AsyncBaseTransport | None = None) -> int:
    async with httpx.AsyncClient(timeout=timeout_s, transport=transport) as client:
        return await ServerTokenizer(client, base_url, model, headers).vocab_size(upper)
