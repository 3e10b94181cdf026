"""Events of the benchmark engine: live figures while a run goes, and its end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tui.core.events import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchTick(Event):
    """Live figures of a run, at ≥ 4 Hz. Windowed values cover the last ``window_s`` seconds; None = no data yet.

    ``output_tps`` and ``output_tokens`` (received since the run began) count tokens as ``vllm bench serve`` does:
    an ended request its ``usage``, one still streaming its chunks at the ended requests' tokens per chunk (under
    speculative decoding a chunk carries several); TPOT is per request, (E2EL − TTFT)/(tokens − 1) for one that
    ended; ITL is per chunk (``tui.core.bench.live``).
    """

    kind: ClassVar[str] = "bench_tick"
    run_id: str
    phase: str  # setup (vllm bench starting) | warmup | run
    elapsed_s: float
    total: int
    sent: int
    done: int
    failed: int
    inflight: int
    waiting: int = 0
    output_tps: float | None = None
    output_tokens: int | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    window_s: float = 0.0
    loop_lag_ms: float = 0.0
    #: "client": measured by our load generator per request; "server": read from the servers' /metrics while
    #: another client (vllm bench serve) drives the run (histogram quantiles, TTFT from the engine's arrival)
    source: str = "client"

    def line(self) -> str:
        """One progress line for the headless CLI."""
        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f}"

        tps = "-" if self.output_tps is None else f"{self.output_tps:,.0f}"
        if self.phase == "setup":
            return f"[{self.run_id}] {self.elapsed_s:6.1f}s  setting up (tokenizer, prompts) …"
        if self.phase == "warmup":
            counts = f"{self.done}/{self.total} done, {self.inflight} in flight" if self.total else "…"
            return f"[{self.run_id}] {self.elapsed_s:6.1f}s  warm-up: {counts}"
        return (f"[{self.run_id}] {self.elapsed_s:6.1f}s  done {self.done}/{self.total}  in flight {self.inflight}"
                f"  failed {self.failed}  out {tps} tok/s  TTFT p50/p99 {ms(self.ttft_p50_ms)}/"
                f"{ms(self.ttft_p99_ms)} ms  TPOT {ms(self.tpot_p50_ms)}/{ms(self.tpot_p99_ms)} ms  ITL "
                f"{ms(self.itl_p50_ms)}/{ms(self.itl_p99_ms)} ms"
                + ("  (server /metrics)" if self.source == "server" else ""))


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchDone(Event):
    """A run ended: ``status`` complete | incomplete | failed, with its directory and summary (vllm key names)."""

    kind: ClassVar[str] = "bench_done"
    run_id: str
    status: str
    run_dir: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    message: str = ""
    #: the run's record (``RunMeta.to_dict()``): with ``summary`` it is enough to rebuild the run's row of the
    #: comparison table from a recording ({} when the run left no record)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchStarted(Event):
    """A run began (before its warm-up): which client, against what, how many requests, where it is stored."""

    kind: ClassVar[str] = "bench_started"
    run_id: str
    runner: str  # disagg-tui | vllm-bench
    topology: str
    workload: str
    total: int
    request_rate: str  # "inf" or req/s
    endpoint: str = ""
    run_dir: str = ""
    repeat: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchLine(Event):
    """A line of output of a client that is not ours (``vllm bench serve``), progress bars left out."""

    kind: ClassVar[str] = "bench_line"
    run_id: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CampaignStep(Event):
    """What a campaign does now: ``step`` is resume | skip_layout | bring_up | cell | cell_done | cell_failed |
    tear_down | layout_failed. ``done``/``total`` count its cells (skipped ones done; an auto sweep's rates join
    ``total`` once its saturation runs are in). ``text`` is the line the headless CLI prints."""

    kind: ClassVar[str] = "campaign_step"
    campaign: str
    step: str
    text: str
    topology: str = ""
    workload: str = ""
    request_rate: str = ""
    repeat: int = 0
    done: int = 0
    total: int = 0
    status: str = ""
    run_dir: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultsReported(Event):
    """A command printed its comparison: ``text`` is exactly what went to stdout (the SIMULATED note, the table,
    the recommendation), ``rows`` the table's rows as ``--json`` gives them; a replay prints the same."""

    kind: ClassVar[str] = "results_reported"
    command: str  # run | bench | results
    text: str
    campaign: str = ""
    rows: tuple[dict[str, Any], ...] = ()
    recommendation: dict[str, Any] = field(default_factory=dict)
