"""What a run sends: random token-id prompts (vllm bench's random dataset) or prompts from a JSONL file.

Random dataset, as ``vllm bench serve --dataset-name random`` builds it (``benchmarks/datasets``): per request an
input length from the integers in [⌊L·(1−r)⌋, ⌈L·(1+r)⌉] and an output length likewise (at least 1), a random
offset, then the prompt ``prefix + allowed[(offset + i + k) mod |allowed|] for k < input_len``, where
``allowed`` is the vocabulary (minus excluded ids) and the prefix of ``prefix_len`` random ids is shared by every
request. vllm decodes that to text and re-aligns it with the server's tokenizer; so do we by default
(``tui.core.bench.textprompts``: drawn from the ids the server's tokenizer knows), or we send the token ids
themselves (``--prompt-format ids``). The generator is Python's ``random.Random`` seeded with the seed and the
shape: the same seed and shape give the same prompts (not vllm's numpy stream), another shape other prompts.

A prompts file is JSON lines: ``{"prompt": "text" | [ids], "output_len": N}`` (``max_tokens`` is accepted for
``output_len``; without either, the workload's output length is used).
"""

from __future__ import annotations

import array
import json
import math
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core import safeio
from tui.core.errors import InputError
from tui.core.models import ranges

#: bounds on a workload (:data:`tui.core.models.ranges.WORKLOAD`): a length no model context reaches, and prompts that
#: fit in memory
MAX_LEN = int(ranges.WORKLOAD["input_len"].hi)
MAX_PROMPTS = int(ranges.WORKLOAD["num_prompts"].hi)
MAX_PROMPT_TOKENS = ranges.MAX_PROMPT_TOKENS
#: bytes of a prompts file (a million prompts of a few hundred characters each)
MAX_PROMPTS_FILE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request's prompt: ``ids`` (token ids, a compact int array) or ``text``. ``input_len`` is the ids' count,
    or for text the count the server's tokenizer gave (``tokens``; 0 when unknown: the server's ``usage`` tells)."""

    output_len: int
    ids: array.array[int] | None = None
    text: str | None = None
    tokens: int = 0

    @property
    def input_len(self) -> int:
        return len(self.ids) if self.ids is not None else self.tokens

    def prompt_json(self) -> str:
        """The ``"prompt"`` value as JSON text."""
        if self.ids is not None:
            return "[" + ",".join(map(str, self.ids)) + "]"
        return json.dumps(self.text)


@dataclass(frozen=True, slots=True)
class RandomSpec:
    input_len: int
    output_len: int
    num_prompts: int
    range_ratio: float = 0.0
    prefix_len: int = 0
    seed: int = 0
    vocab_size: int = 32000
    exclude_ids: tuple[int, ...] = ()

    def check(self) -> None:
        if self.input_len < 1 or self.output_len < 1 or self.num_prompts < 1:
            raise InputError("input_len, output_len and num_prompts must be ≥ 1")
        for name, value, top in (("input_len", self.input_len, MAX_LEN), ("output_len", self.output_len, MAX_LEN),
                                 ("prefix_len", self.prefix_len, MAX_LEN),
                                 ("num_prompts", self.num_prompts, MAX_PROMPTS)):
            if value > top:
                raise InputError(f"must be at most {top:,}, got {value:,}", field=name)
        total = self.num_prompts * (self.prefix_len + length_bounds(self.input_len, self.range_ratio)[1])
        if total > MAX_PROMPT_TOKENS:
            raise InputError(f"the prompts would hold {total:,} tokens; at most {MAX_PROMPT_TOKENS:,} in one run "
                             "(they are built in memory before the clock starts)", field="num_prompts")
        if not 0.0 <= self.range_ratio < 1.0:
            raise InputError(f"range_ratio must be within [0, 1), got {self.range_ratio}", field="range_ratio")
        if self.prefix_len < 0:
            raise InputError("prefix_len must be ≥ 0", field="prefix_len")
        if self.vocab_size <= len(set(self.exclude_ids)):
            raise InputError("no token ids left to sample from", field="vocab_size")
        if self.prefix_len + length_bounds(self.input_len, self.range_ratio)[0] < 1:
            raise InputError(f"input length {self.input_len} is too small for range ratio {self.range_ratio:g} "
                             "(the shortest prompt would be empty)", field="input_len")


def length_bounds(length: int, ratio: float, *, at_least_one: bool = False) -> tuple[int, int]:
    lo = math.floor(length * (1 - ratio))
    hi = math.ceil(length * (1 + ratio))
    if at_least_one:
        lo, hi = max(lo, 1), max(hi, 1)
    return lo, hi


def random_prompts(spec: RandomSpec) -> list[Prompt]:
    """Random prompts: consecutive token ids from a random start per prompt (after the shared prefix, if any).

    The generator is seeded with the seed and the shape together: two workloads with the same seed (decode-heavy
    and prefill-heavy, one after the other on the same layout) must not start their prompts with the same ids, or
    vLLM's prefix cache serves the second from the first (a campaign showed it: 512-token prompts 100 % cached
    after the 7,500-token ones; vllm bench's random dataset has this flaw)."""
    spec.check()
    rng = random.Random(f"{spec.seed}/{spec.input_len}/{spec.output_len}/{spec.prefix_len}/{spec.range_ratio!r}")
    in_lo, in_hi = length_bounds(spec.input_len, spec.range_ratio)
    out_lo, out_hi = length_bounds(spec.output_len, spec.range_ratio, at_least_one=True)
    n = spec.num_prompts
    input_lens = [rng.randint(in_lo, in_hi) for _ in range(n)]
    output_lens = [rng.randint(out_lo, out_hi) for _ in range(n)]
    offsets = [rng.randrange(spec.vocab_size) for _ in range(n)]
    excluded = set(spec.exclude_ids)
    allowed = [t for t in range(spec.vocab_size) if t not in excluded] if excluded else None
    size = len(allowed) if allowed is not None else spec.vocab_size
    prefix = array.array("i", ((allowed[rng.randrange(size)] if allowed is not None else rng.randrange(size))
                               for _ in range(spec.prefix_len)))
    out = []
    for i in range(n):
        ids = array.array("i", prefix)
        start = (offsets[i] + i) % size
        length = input_lens[i]
        if allowed is None:
            # consecutive ids modulo the vocabulary, built from ranges (fast for 1,000 × 8,000-token prompts)
            while length > 0:
                take = min(length, size - start)
                ids.extend(range(start, start + take))
                length -= take
                start = 0
        else:
            ids.extend(allowed[(start + k) % size] for k in range(length))
        out.append(Prompt(output_len=output_lens[i], ids=ids))
    return out


def load_prompts_file(path: str | Path, default_output_len: int, num_prompts: int | None = None) -> list[Prompt]:
    """Prompts from a JSONL file (cycled when ``num_prompts`` exceeds the file's lines)."""
    p = Path(path).expanduser()
    if num_prompts is not None and not 1 <= num_prompts <= MAX_PROMPTS:
        raise InputError(f"must be 1 to {MAX_PROMPTS:,}, got {num_prompts:,}", field="num_prompts")
    data = safeio.read_bytes(p, "prompts file", limit=MAX_PROMPTS_FILE_BYTES)  # a FIFO or a device: refused
    try:
        # split on newlines only: str.splitlines would also split inside a prompt at U+2028 and the like
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", file=p, line=data.count(b"\n", 0, exc.start) + 1
                         ) from None
    prompts: list[Prompt] = []
    tokens = 0
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(prompts) >= MAX_PROMPTS:
            raise InputError(f"more than {MAX_PROMPTS:,} prompts in one file", file=p, line=lineno)
        try:
            item: Any = safeio.parse_json(line, p)  # strict: no NaN/Infinity, no huge numbers, bounded nesting
        except InputError as err:
            detail = err.message.removeprefix("not valid JSON: ").removeprefix("not accepted JSON: ")
            raise InputError(f"not JSON: {detail}", file=p, line=lineno) from None
        if not isinstance(item, dict) or "prompt" not in item:
            raise InputError('each line must be an object with a "prompt"', file=p, line=lineno)
        prompt = item["prompt"]
        out_len = item.get("output_len", item.get("max_tokens", default_output_len))
        if not isinstance(out_len, int) or isinstance(out_len, bool) or not 1 <= out_len <= MAX_LEN:
            raise InputError(f"output_len must be a whole number from 1 to {MAX_LEN:,}, got "
                             f"{safeio.shown(repr(out_len), 60)}", file=p, line=lineno)
        if isinstance(prompt, str) and prompt:
            prompts.append(Prompt(output_len=out_len, text=prompt))
        elif (isinstance(prompt, list) and prompt
              and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**31 for t in prompt)):
            if len(prompt) > MAX_LEN:
                raise InputError(f"a prompt of {len(prompt):,} token ids; at most {MAX_LEN:,}", file=p, line=lineno)
            tokens += len(prompt)
            if tokens > MAX_PROMPT_TOKENS:
                raise InputError(f"the prompts hold more than {MAX_PROMPT_TOKENS:,} token ids", file=p, line=lineno)
            prompts.append(Prompt(output_len=out_len, ids=array.array("i", prompt)))
        else:
            raise InputError("prompt must be a non-empty string or a list of token ids", file=p, line=lineno)
    if not prompts:
        raise InputError("no prompts in the file", file=p)
    if num_prompts is not None:
        prompts = [prompts[i % len(prompts)] for i in range(num_prompts)]
    return prompts


def run_seed(seed: int, *, repeat: int = 1, rate: float | None = None) -> int:
    """The dataset seed of one run in a series (repeats, a rate sweep): each run gets prompts of its own.

    vLLM caches prefixes by default. Sent again to the same server, the same prompts find their blocks still
    cached: the prefill is skipped and TTFT understated (the real H200: mean TTFT ~1.0 s cold, ~0.25 s warm, 128
    prompts of 512 tokens). The first run at the workload's own rate keeps the workload's seed; every other
    (repeat, rate) gets a seed derived from it, stable across resumes."""
    if repeat <= 1 and rate is None:
        return seed
    return zlib.crc32(f"{seed}/{rate!r}/{repeat}".encode())


def warmup_prompts(prompts: Sequence[Prompt], burst: int, *, seed: int = 0, vocab_size: int = 32000,
                   short_output: int = 8) -> list[Prompt]:
    """Warm-up requests that cover the run's shapes and batch sizes, so no first-time compile lands in the run.

    - one request per distinct extreme shape (shortest and longest prompt, each with the shortest and longest
      output length of the run, capped at 32 tokens so the warm-up stays short but still decodes a batch);
    - a burst of ``burst`` short requests sent at once, so the server meets the run's batch sizes (the real
      H200 capture JIT-compiled a Triton top-k/top-p kernel at its first large batch, inside the measured run).

    Their prompts share nothing with the run's (fresh token ids of the same lengths; a text prompt of unknown
    length reversed), so vLLM's prefix cache
    gives the run no head start. They carry the run's sampling parameters (the body is built the same way).
    ``burst`` 0 disables both.
    """
    if burst <= 0 or not prompts:
        return []
    rng = random.Random(seed + 7919)
    by_len = sorted(prompts, key=lambda p: (p.input_len, len(p.text or "")))
    outs = sorted(p.output_len for p in prompts)
    cap = 32
    chosen: list[Prompt] = []
    seen: set[tuple[int, int]] = set()
    for base in (by_len[0], by_len[-1]):
        for out_len in (outs[0], outs[-1]):
            capped = max(2, min(out_len, cap)) if out_len > 1 else 1
            key = (base.input_len if base.input_len else len(base.text or ""), capped)
            if key in seen:
                continue
            seen.add(key)
            if base.input_len:  # token ids, or text of a known count: fresh ids of that length
                chosen.append(Prompt(output_len=capped, ids=_fresh_ids(rng, base.input_len, vocab_size)))
            else:
                chosen.append(Prompt(output_len=capped, text=(base.text or "")[::-1]))
    short_len = max(1, min(16, by_len[0].input_len or 16))
    for _ in range(burst):
        chosen.append(Prompt(output_len=short_output, ids=_fresh_ids(rng, short_len, vocab_size)))
    return chosen


def _fresh_ids(rng: random.Random, length: int, vocab_size: int) -> array.array[int]:
    """Random ids (not consecutive like the run's prompts, so no run prompt shares a prefix with them)."""
    return array.array("i", (rng.randrange(vocab_size) for _ in range(length)))
