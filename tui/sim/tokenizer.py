"""The simulated server's tokenizer: one character per token, so ``tokenize(detokenize(ids)) == ids``.

``vllm bench serve`` builds its random prompts with the model's real tokenizer, sends the first one to
``POST /tokenize`` and, when the server counts a different length, re-aligns every prompt: it tokenises it on the
server and, where the server counts more tokens than intended, sends ``detokenize(tokens[:prompt_len])`` instead
(``vllm/benchmarks/serve.py: _align_prompts_to_server_tokenizer``). A real tokenizer's text has several characters
per token, so this tokenizer always counts more, the bench always re-aligns, and after the round trip every text
prompt counts exactly the length the bench intended: the same count a token-id prompt of that length gets.

Token id ``i`` is the code point ``i`` (ids from 0xD800 skip the 2048 surrogates, which are not characters). Text
characters beyond the vocabulary fold back into it (the only case where the round trip is not exact).
"""

from __future__ import annotations

_SURROGATE_START = 0xD800
_SURROGATE_COUNT = 0x800

#: what simulated models "write": short words, one character per token
_WORDS = ("the", "model", "writes", "short", "words", "while", "it", "runs", "on", "a", "simulated", "gpu",
          "tokens", "flow", "at", "the", "pace", "of", "its", "engine", "steps", "and", "batches")


def _corpus(length: int) -> str:
    out: list[str] = []
    size = 0
    k = 0
    while size < length:
        word = " " + _WORDS[k]
        out.append(word)
        size += len(word)
        k = (k * 7 + 3) % len(_WORDS)
    return "".join(out)[:length]


_CORPUS = _corpus(8191)


class SimTokenizer:
    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = max(256, int(vocab_size))

    def id_to_char(self, tid: int) -> str:
        tid %= self.vocab_size
        cp = tid if tid < _SURROGATE_START else tid + _SURROGATE_COUNT
        return chr(min(cp, 0x10FFFF))

    def char_to_id(self, ch: str) -> int:
        cp = ord(ch)
        tid = cp if cp < _SURROGATE_START else cp - _SURROGATE_COUNT
        return tid % self.vocab_size

    def encode(self, text: str) -> list[int]:
        return [self.char_to_id(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.id_to_char(i) for i in ids)

    def count(self, text: str) -> int:
        return len(text)

    def output_text(self, seed: int, start: int, n: int) -> str:
        """The text of generated tokens ``start .. start+n`` of a request (deterministic per ``seed``)."""
        size = len(_CORPUS)
        a = (seed * 7919 + start) % size
        if a + n <= size:
            return _CORPUS[a:a + n]
        out = [_CORPUS[a:]]
        rest = n - (size - a)
        while rest > 0:
            out.append(_CORPUS[:min(rest, size)])
            rest -= size
        return "".join(out)
