"""Per-request records and the run summary, with ``vllm bench serve`` 0.24's definitions and key names.

Definitions (``vllm/benchmarks/serve.py:calculate_metrics``; ``../shared/VLLM-0.24.md`` §8):

- TTFT: request send → first chunk with non-empty ``choices``; ITL: one gap per later choice chunk; E2EL: send →
  last choice chunk (the usage chunk and ``[DONE]`` do not count).
- output tokens: ``usage.completion_tokens`` (fallback: the number of choice chunks, where vllm re-tokenises the
  text); TPOT per request = (E2EL − TTFT)/(output tokens − 1), only for output > 1 token; for goodput a request
  with ≤ 1 output token counts as TPOT 0.
- request/output/total-token throughput over the benchmark duration (the wall time of the main run);
- goodput: requests meeting every given SLO (``ttft``/``tpot``/``e2el`` in ms, each compared with ≤) per second;
- peak output tok/s and peak concurrency: the largest count in any 1 s bucket from the first successful send;
- percentiles as ``np.percentile`` (linear interpolation), mean and population std; every ms value is s × 1000.
"""

from __future__ import annotations

import base64
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tui.core.bench import stats
from tui.core.errors import InputError

METRICS = ("ttft", "tpot", "itl", "e2el")
GOODPUT_KEYS = ("ttft", "tpot", "e2el")
DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
DEFAULT_METRICS: tuple[str, ...] = METRICS
#: the per-request arrays of ``--save-detailed`` (absent from a plain ``--save-result``)
DETAILED_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors")


@dataclass(slots=True)
class RequestRecord:
    """One measured request. Times are seconds; ``start`` is relative to the start of the main run."""

    index: int
    start: float
    success: bool
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int | None = None  # usage.completion_tokens; None when the server sent no usage
    chunks: int = 0  # choice chunks received
    error: str = ""
    expected_input: int = 0
    expected_output: int = 0

    @property
    def output_len(self) -> int:
        """Output tokens as vllm counts them: usage, else (our fallback) one per choice chunk; 0 when failed."""
        if not self.success:
            return 0
        if self.output_tokens:
            return int(self.output_tokens)
        return max(self.chunks, 1)

    @property
    def tpot(self) -> float | None:
        n = self.output_len
        if not self.success or n <= 1:
            return None
        return (self.latency - self.ttft) / (n - 1)

    @property
    def end(self) -> float:
        return self.start + self.latency


def pack_floats(values: list[float]) -> str:
    """Floats as base64 of little-endian float64: exact, and far cheaper than JSON for a long ITL list."""
    return base64.b64encode(array("d", values).tobytes()).decode("ascii")


def unpack_floats(text: str) -> list[float]:
    a = array("d")
    a.frombytes(base64.b64decode(text))
    return a.tolist()


def record_from_wire(msg: Mapping[str, Any]) -> RequestRecord:
    """A record as the worker sends it (and as the journal of a run keeps it): short keys, ITL packed."""
    return RequestRecord(
        index=int(msg["i"]), start=float(msg["st"]), success=bool(msg["ok"]), ttft=float(msg.get("ttft") or 0.0),
        latency=float(msg.get("lat") or 0.0), itl=unpack_floats(msg.get("itl") or ""),
        prompt_tokens=int(msg.get("pt") or 0),
        output_tokens=None if msg.get("ct") is None else int(msg["ct"]), chunks=int(msg.get("ch") or 0),
        error=str(msg.get("err") or ""), expected_input=int(msg.get("ei") or 0),
        expected_output=int(msg.get("eo") or 0),
    )


def parse_goodput(items: Iterable[str]) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` → ``{"ttft": 500.0, "tpot": 50.0}`` (ms), as ``--goodput`` of vllm bench."""
    out: dict[str, float] = {}
    for item in items:
        for part in item.split():
            key, sep, value = part.partition(":")
            key = key.strip().lower()
            if not sep or key not in GOODPUT_KEYS:
                raise InputError(f"expected KEY:MS with KEY one of {', '.join(GOODPUT_KEYS)}; got {part!r}",
                                 field="--goodput")
            try:
                ms = float(value)
            except ValueError:
                raise InputError(f"expected a number of milliseconds in {part!r}", field="--goodput") from None
            if not ms > 0 or math.isinf(ms):
                raise InputError(f"an SLO must be a positive number of ms; got {part!r}", field="--goodput")
            out[key] = ms
    return out


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def percentile_key(metric: str, p: float) -> str:
    return f"p{_p_word(p)}_{metric}_ms"


def is_good(rec: RequestRecord, slo_ms: Mapping[str, float]) -> bool:
    """Does a successful request meet every SLO (ms, ≤)? TPOT counts as 0 for ≤ 1 output token, as in vllm."""
    if not rec.success:
        return False
    for key, limit in slo_ms.items():
        if key == "ttft":
            value = rec.ttft
        elif key == "tpot":
            value = rec.tpot or 0.0
        else:
            value = rec.latency
        if not limit / 1000.0 >= value:
            return False
    return True


def peaks(records: Sequence[RequestRecord]) -> tuple[float, int]:
    """(peak output tokens in any 1 s bucket, peak concurrent requests in any 1 s bucket), as vllm computes them.

    Token times are start + TTFT, then + each ITL; buckets start at the earliest successful send.
    """
    ok = [r for r in records if r.success]
    if not ok:
        return 0.0, 0
    t0 = min(r.start for r in ok)
    t_end = max(r.start + r.latency for r in ok)
    n = math.ceil(t_end - t0) + 1
    tokens = [0] * n
    conc = [0] * n
    for r in ok:
        t = r.start + r.ttft
        b = int(t - t0)
        if 0 <= b < n:
            tokens[b] += 1
        for gap in r.itl:
            t += gap
            b = int(t - t0)
            if 0 <= b < n:
                tokens[b] += 1
        first = int(r.start - t0)
        last = int((r.start + r.latency) - t0)
        for s in range(first, last + 1):
            conc[s] += 1
    return float(max(tokens)), int(max(conc))


def summarize(
    records: Sequence[RequestRecord],
    duration: float,
    *,
    goodput: Mapping[str, float] | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    metrics: Sequence[str] = DEFAULT_METRICS,
    header: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``--save-result`` dictionary (without the detailed arrays), keys in vllm's order.

    ``header`` supplies the leading keys (``date, endpoint_type, backend, label, model_id, tokenizer_id,
    num_prompts``, metadata, ``request_rate, burstiness, max_concurrency``); the measured keys follow.
    """
    if duration <= 0:
        raise ValueError(f"duration must be > 0, got {duration}")
    ttfts: list[float] = []
    tpots: list[float] = []
    itls: list[float] = []
    e2els: list[float] = []
    total_input = 0
    total_output = 0
    completed = 0
    failed = 0
    good = 0
    for r in records:
        if not r.success:
            failed += 1
            continue
        completed += 1
        n_out = r.output_len
        total_output += n_out
        total_input += r.prompt_tokens
        tp = r.tpot
        if tp is not None:
            tpots.append(tp)
        itls.extend(r.itl)
        ttfts.append(r.ttft)
        e2els.append(r.latency)
        if goodput and is_good(r, goodput):
            good += 1
    peak_tokens, peak_conc = peaks(records)
    out: dict[str, Any] = dict(header or {})
    out.update({
        "duration": duration,
        "completed": completed,
        "failed": failed,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": completed / duration,
        "request_goodput": good / duration if goodput else None,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_conc,
        "rtfx": 0.0,
    })
    series = {"ttft": ttfts, "tpot": tpots, "itl": itls, "e2el": e2els}
    for metric in METRICS:
        if metric not in metrics:
            continue
        values = series[metric]
        data = sorted(values)
        out[f"mean_{metric}_ms"] = stats.mean(values) * 1000
        out[f"median_{metric}_ms"] = stats.percentile_sorted(data, 50.0) * 1000 if data else 0.0
        out[f"std_{metric}_ms"] = stats.std(values) * 1000
        for p in percentiles:
            out[percentile_key(metric, p)] = stats.percentile_sorted(data, p) * 1000 if data else 0.0
    return out


def goodput_of(records: Sequence[RequestRecord], duration: float, slo_ms: Mapping[str, float]) -> float:
    """Requests meeting every SLO per second of the run (computed again from the records for any SLO)."""
    return sum(1 for r in records if is_good(r, slo_ms)) / duration if duration > 0 else 0.0


def attainment(records: Sequence[RequestRecord], slo_ms: Mapping[str, float]) -> float:
    """Fraction of all requests (failed ones count as missing) that met every SLO."""
    return sum(1 for r in records if is_good(r, slo_ms)) / len(records) if records else 0.0


def records_from_vllm_json(data: Mapping[str, Any]) -> list[RequestRecord]:
    """Per-request records from a ``--save-detailed`` result (empty without the arrays).

    vllm does not save each request's E2E latency: it is rebuilt as TTFT + ΣITL (as vllm's own timeline plot
    does), which is exact to the clock reads. A trimmed ``itls`` makes those latencies short.
    """
    ttfts = data.get("ttfts")
    if not isinstance(ttfts, list):
        return []
    n = len(ttfts)
    itls = data.get("itls") or [[] for _ in range(n)]
    input_lens = data.get("input_lens") or [0] * n
    output_lens = data.get("output_lens") or [0] * n
    errors = data.get("errors") or [""] * n
    starts = data.get("start_times")
    t0 = min(starts) if starts else 0.0
    out = []
    for i in range(n):
        err = str(errors[i] or "")
        ttft = ttfts[i]
        success = ttft is not None and not err and (output_lens[i] or 0) > 0
        gaps = [float(g) for g in (itls[i] or [])]
        ttft_f = float(ttft or 0.0)
        out.append(RequestRecord(
            index=i,
            start=(float(starts[i]) - t0) if starts else 0.0,
            success=success,
            ttft=ttft_f,
            latency=ttft_f + math.fsum(gaps) if success else 0.0,
            itl=gaps,
            prompt_tokens=int(input_lens[i] or 0),
            output_tokens=int(output_lens[i]) if success else None,
            chunks=(len(gaps) + 1) if success else 0,
            error=err,
            expected_input=int(input_lens[i] or 0),
            expected_output=int(output_lens[i] or 0),
        ))
    return out


def strip_detailed(data: Mapping[str, Any]) -> dict[str, Any]:
    """A result dict without the ``--save-detailed`` arrays (what a plain ``--save-result`` holds)."""
    return {k: v for k, v in data.items() if k not in DETAILED_KEYS}
