"""Text reports: one run's result block in ``vllm bench serve``'s layout, and the aggregate of repeats."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tui.core.bench import stats

_HEADERS = (("ttft", "TTFT", "Time to First Token"), ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
            ("itl", "ITL", "Inter-token Latency"), ("e2el", "E2EL", "End-to-end Latency"))


def _row(label: str, value: Any, fmt: str = "") -> str:
    text = format(value, fmt) if fmt else str(value)
    return f"{label:<40} {text:<10}"


def format_result(s: Mapping[str, Any]) -> str:
    """The block ``vllm bench serve`` prints, from a summary dict (same rows, same order, same formats)."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    lines.append(_row("Successful requests:", s.get("completed", 0)))
    lines.append(_row("Failed requests:", s.get("failed", 0)))
    if s.get("max_concurrency") is not None:
        lines.append(_row("Maximum request concurrency:", s["max_concurrency"]))
    rate = s.get("request_rate")
    if rate not in (None, "inf"):
        lines.append(_row("Request rate configured (RPS):", float(rate), ".2f"))
    lines.append(_row("Benchmark duration (s):", float(s.get("duration", 0.0)), ".2f"))
    lines.append(_row("Total input tokens:", s.get("total_input_tokens", 0)))
    lines.append(_row("Total generated tokens:", s.get("total_output_tokens", 0)))
    lines.append(_row("Request throughput (req/s):", float(s.get("request_throughput", 0.0)), ".2f"))
    if s.get("request_goodput") is not None:
        lines.append(_row("Request goodput (req/s):", float(s["request_goodput"]), ".2f"))
    lines.append(_row("Output token throughput (tok/s):", float(s.get("output_throughput", 0.0)), ".2f"))
    lines.append(_row("Peak output token throughput (tok/s):", float(s.get("max_output_tokens_per_s", 0.0)), ".2f"))
    lines.append(_row("Peak concurrent requests:", float(s.get("max_concurrent_requests", 0)), ".2f"))
    lines.append(_row("Total token throughput (tok/s):", float(s.get("total_token_throughput", 0.0)), ".2f"))
    for key, name, header in _HEADERS:
        if f"mean_{key}_ms" not in s:
            continue
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        lines.append(_row(f"Mean {name} (ms):", float(s[f"mean_{key}_ms"]), ".2f"))
        lines.append(_row(f"Median {name} (ms):", float(s[f"median_{key}_ms"]), ".2f"))
        for k, v in s.items():
            if k.startswith("p") and k.endswith(f"_{key}_ms") and isinstance(v, int | float):
                lines.append(_row(f"P{k[1:-len(key) - 4]} {name} (ms):", float(v), ".2f"))
    lines.append("=" * 50)
    return "\n".join(lines)


HEADLINE = ("output_throughput", "total_token_throughput", "request_throughput", "request_goodput",
            "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
            "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")


def aggregate(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Repeats of one cell: every numeric summary key averaged, and ``ci95_<key>`` (±, Student t) for the
    headline figures; the non-numeric keys of the first run ride along."""
    if not summaries:
        return {}
    out: dict[str, Any] = {}
    for key, first in summaries[0].items():
        vals = [s.get(key) for s in summaries]
        nums = [float(v) for v in vals if isinstance(v, int | float) and not isinstance(v, bool)]
        if isinstance(first, int | float) and not isinstance(first, bool) and len(nums) == len(summaries):
            out[key] = stats.mean(nums)
        else:
            out[key] = first
    out["repeats"] = len(summaries)
    for key in HEADLINE:
        nums = [float(s[key]) for s in summaries if isinstance(s.get(key), int | float)]
        if len(nums) == len(summaries) and nums:
            out[f"ci95_{key}"] = stats.confidence_interval(nums).half
    return out


def format_aggregate(agg: Mapping[str, Any]) -> str:
    n = agg.get("repeats", 1)
    lines = [f"{n} repeats: mean ± 95% confidence interval"]
    for key in HEADLINE:
        if key in agg and agg[key] is not None:
            ci = agg.get(f"ci95_{key}")
            lines.append(f"  {key:<24} {agg[key]:>12.2f}" + (f" ± {ci:.2f}" if ci is not None else ""))
    return "\n".join(lines)
