"""Benchmark: a workload (shipped, the operator's, or edited here) against what is up, with live figures.

The run is the CLI's ``disagg-tui bench`` started detached (our load generator, or the real ``vllm bench serve``
with the runner set so), its events written to a file the console follows (``bench --events-to``): the run, its
records and its summary live in a process of its own, so drawing never slows it, the console never holds its
records, and the run goes on when the console quits (a console opened later follows it again). Its ``BenchTick``s
reach the console's bus at 4 Hz, its results are stored as they are produced. Stopping early (SIGTERM to the run,
taken as Ctrl-C) keeps what was measured; the run is marked incomplete. While it runs: output tokens per second,
TPOT, TTFT and ITL (p50/p99) over time, progress, done/in-flight/failed, the client's own health, and the servers'
view from their ``/metrics``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Footer, Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option

from tui.console import fmt
from tui.console.context import ConsoleContext
from tui.console.messages import BenchRequested, BenchStopRequested
from tui.console.safetext import text
from tui.console.screens.base import ConsoleScreen
from tui.console.state import BENCH, ConsoleState
from tui.console.widgets.charts import TimeSeriesChart
from tui.console.widgets.header import HeaderBar
from tui.core.bench.metrics import parse_goodput
from tui.core.errors import AppError, InputError
from tui.core.models import Workload, parse_rate

FIELDS = (("input_len", "input tokens"), ("output_len", "output tokens"), ("num_prompts", "prompts"),
          ("request_rate", "rate req/s (inf)"), ("max_concurrency", "max concurrency"),
          ("slo_ttft", "SLO TTFT ms"), ("slo_tpot", "SLO TPOT ms"))
RUNNERS = (("ours (disagg-tui)", "ours"), ("vllm bench serve", "vllm"))


def workload_from_form(base: Workload, values: dict[str, str]) -> tuple[Workload, dict[str, float]]:
    """The workload the form describes (a changed shape gets a name and description of its own) and its SLO."""
    changes: dict[str, object] = {}
    for key in ("input_len", "output_len", "num_prompts", "max_concurrency"):
        text = values.get(key, "").strip()
        if text:
            if not text.isdigit() or int(text) < 1:
                raise InputError(f"expected a positive integer, got {text!r}", field=key.replace("_", " "))
            changes[key] = int(text)
    rate = values.get("request_rate", "").strip()
    if rate:
        changes["request_rate"] = parse_rate(rate, field="rate")
    w = base.with_overrides(**changes)
    if (w.input_len, w.output_len) != (base.input_len, base.output_len):
        w = replace(w, name=f"random-{w.input_len}x{w.output_len}",
                    description=f"random prompts, {w.input_len} tokens in, {w.output_len} out (from {base.name})")
    slo_parts = []
    for key, name in (("slo_ttft", "ttft"), ("slo_tpot", "tpot")):
        text = values.get(key, "").strip()
        if text:
            slo_parts.append(f"{name}:{text}")
    return w, parse_goodput(slo_parts)


class BenchScreen(ConsoleScreen):
    AUTO_FOCUS = "#workloads"
    BINDINGS: ClassVar[list[BindingType]] = [
        # not a priority key: it comes after a cursor key typed just before it ("Down C-s" starts the one below)
        Binding("ctrl+s", "start", "start"),
        Binding("ctrl+x", "stop", "stop run", priority=True),
        Binding("escape", "app.mode('dashboard')", "dashboard"),
    ]

    #: what a replay does not offer (it measures nothing)
    LIVE_ACTIONS: ClassVar[frozenset[str]] = frozenset({"start", "stop"})

    def __init__(self, ctx: ConsoleContext, state: ConsoleState) -> None:
        super().__init__(ctx, state)
        self.workload_name: str | None = None
        self._tick = 0

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        with Horizontal(id="bench-body"):
            with VerticalScroll(id="bench-form"):
                wl = OptionList(id="workloads")
                wl.border_title = "Workload"
                yield wl
                for key, label in FIELDS:
                    yield Label(label)
                    yield Input(id=f"f-{key}", placeholder="the workload's", compact=True)
                yield Label("client")
                yield Select(RUNNERS, value="ours", allow_blank=False, id="runner")
                with Horizontal(classes="buttons"):
                    yield Button("Start (ctrl+s)", id="start", variant="primary")
                    yield Button("Stop (ctrl+x)", id="stop", variant="error")
            with Vertical(id="bench-live"):
                yield Static(id="bench-status")
                with Horizontal(classes="chart-row"):
                    yield TimeSeriesChart("output tokens/s", "tok/s", id="chart-tps")
                    yield TimeSeriesChart("TPOT", "ms", id="chart-tpot")
                with Horizontal(classes="chart-row"):
                    yield TimeSeriesChart("TTFT", "ms", id="chart-ttft")
                    yield TimeSeriesChart("ITL", "ms", id="chart-itl")
                yield Static(id="bench-servers")
        yield Footer()

    def on_mount(self) -> None:
        for i in self.query(Input):  # no blinking cursor: no repaint twice a second over SSH
            i.cursor_blink = False
        ol = self.query_one("#workloads", OptionList)
        for name, w in sorted(self.ctx.catalog.workloads.items()):
            rate = "inf" if math.isinf(w.request_rate) else f"{w.request_rate:g}/s"
            ol.add_option(Option(Text.assemble((f"{name:<15}", "bold"),
                                               f" {w.input_len}→{w.output_len} ×{w.num_prompts} @ {rate}"), id=name))
        if ol.option_count:
            ol.highlighted = 0
            self.workload_name = ol.get_option_at_index(0).id
        self._show_defaults()
        self.draw(self.state, full=True)

    def on_screen_resume(self) -> None:
        self.draw(self.state, full=True)

    @on(OptionList.OptionHighlighted, "#workloads")
    def _pick(self, event: OptionList.OptionHighlighted) -> None:
        self.workload_name = event.option.id
        self._show_defaults()

    def _show_defaults(self) -> None:
        """An empty field is the highlighted workload's own value: its placeholder says which."""
        w = self.ctx.catalog.workloads.get(self.workload_name or "")
        if w is None:
            return
        values = {"input_len": w.input_len, "output_len": w.output_len, "num_prompts": w.num_prompts,
                  "request_rate": "inf" if math.isinf(w.request_rate) else f"{w.request_rate:g}",
                  "max_concurrency": w.max_concurrency or "none"}
        for key, _ in FIELDS:
            shown = values.get(key)
            self.query_one(f"#f-{key}", Input).placeholder = f"{shown} (the workload's)" if shown is not None \
                else "none"

    @on(Button.Pressed, "#start")
    def _start(self) -> None:
        self.action_start()

    @on(Button.Pressed, "#stop")
    def _stop(self) -> None:
        self.action_stop()

    # --- drawing -----------------------------------------------------------------------------------------------
    def draw(self, model: ConsoleState, *, full: bool = False) -> None:
        self._tick += 1
        self.query_one(HeaderBar).draw(model, screen="bench")
        if not (full or BENCH in model.dirty or self._tick % 4 == 0):
            return
        b = model.bench
        self.query_one("#bench-status", Static).update(self._status(model))
        self.query_one("#bench-servers", Static).update(self._servers(model))
        if not full and self._tick % 2:  # the charts at 2 Hz: each costs ~25 ms a frame (benchmarks/chart_redraw.py)
            return
        now = b.tick.elapsed_s if b.tick is not None else None
        s = b.series

        def pts(name: str) -> list[tuple[float, float]]:
            return list(s.get(name, ()))

        self.query_one("#chart-tps", TimeSeriesChart).set_series({"out": pts("output_tps")}, now=now)
        self.query_one("#chart-tpot", TimeSeriesChart).set_series({"p50": pts("tpot_p50"), "p99": pts("tpot_p99")},
                                                                  now=now)
        self.query_one("#chart-ttft", TimeSeriesChart).set_series({"p50": pts("ttft_p50"), "p99": pts("ttft_p99")},
                                                                  now=now)
        self.query_one("#chart-itl", TimeSeriesChart).set_series({"p50": pts("itl_p50"), "p99": pts("itl_p99")},
                                                                 now=now)

    def _status(self, model: ConsoleState) -> Text:
        b = model.bench
        t = Text()
        if b.started is None:
            lay = model.layout
            if lay is None or lay.status != "ready":
                t.append("Nothing is up to benchmark: launch a layout first (l).", style=fmt.WARN)
            elif lay.held_by:  # a campaign benchmarks it, or another benchmark runs: a second load skews both
                t.append(f"{lay.topology} of {lay.profile_id} at {lay.endpoint} is in use by {lay.held_by}. ",
                         style=fmt.WARN)
                t.append("A second load skews both runs: ctrl+s asks first.")
            else:
                t.append(f"Ready to benchmark {lay.topology} of {lay.profile_id} at {lay.endpoint}. ", style=fmt.OK)
                t.append("Pick a workload, edit it if you like, ctrl+s to start.")
            if lay is not None and lay.started_by:
                t.append(f"\n{lay.started_by[:1].upper()}{lay.started_by[1:]}.", style=fmt.DIM)
            return t
        s = b.started
        t.append(f"{s.workload} on {s.topology}", style="bold")
        t.append(f" · {s.total} prompts · rate {s.request_rate} · {s.runner} · {s.run_id}\n")
        tick = b.tick
        if tick is not None:
            total = tick.total or s.total
            frac = tick.done / total if total else 0.0
            t.append(f"{tick.phase:<7}")
            t.append_text(fmt.bar(frac, 30, style=fmt.BUSY))
            t.append(f" {tick.done}/{total} done · {tick.inflight} in flight · {tick.waiting} waiting · "
                     f"{tick.failed} failed · {fmt.duration(tick.elapsed_s)}\n")
            t.append(f"out {fmt.num(tick.output_tps)} tok/s   TPOT p50/p99 {fmt.ms_value(tick.tpot_p50_ms)}/"
                     f"{fmt.ms_value(tick.tpot_p99_ms)}   TTFT p50/p99 {fmt.ms_value(tick.ttft_p50_ms)}/"
                     f"{fmt.ms_value(tick.ttft_p99_ms)}   ITL p50/p99 {fmt.ms_value(tick.itl_p50_ms)}/"
                     f"{fmt.ms_value(tick.itl_p99_ms)}\n")
            lag = tick.loop_lag_ms
            t.append("client: ")
            t.append(f"event-loop lag {lag:.1f} ms", style=fmt.OK if lag < 50 else fmt.WARN)
            if tick.source == "server":
                t.append("  (figures from the servers' /metrics: another client drives the run)", style=fmt.DIM)
        if b.done is not None:
            d = b.done
            style = fmt.OK if d.status == "complete" else fmt.WARN
            t.append(f"\n{d.status}", style=style)
            summ = d.summary
            if summ:
                t.append(f": {fmt.num(summ.get('output_throughput'))} tok/s, mean TPOT "
                         f"{fmt.ms_value(summ.get('mean_tpot_ms'))}, mean TTFT {fmt.ms_value(summ.get('mean_ttft_ms'))}"
                         f", {summ.get('completed', '?')} done, {summ.get('failed', 0)} failed")
            if d.flags:
                t.append(f"\nflags: {', '.join(d.flags)}", style=fmt.WARN)
            if d.message:
                t.append(f"\n{d.message}", style=fmt.DIM)
            t.append(f"\nstored in {d.run_dir}", style=fmt.DIM)
        return t

    def _servers(self, model: ConsoleState) -> Table:
        table = Table(title="the servers' view (/metrics)", title_justify="left", expand=True, box=None,
                      show_edge=False, pad_edge=False)
        for col in ("server", "run/wait", "KV %", "gen tok/s", "TTFT p50", "TPOT p50", "KV in"):
            table.add_column(col, justify="right" if col != "server" else "left")
        for v in model.servers.values():
            f = v.figures
            if v.role == "proxy" or f is None:
                continue
            xfer = ""
            if f.kv_transfer is not None and f.kv_transfer.bytes_per_s is not None:
                xfer = fmt.kv_rate(f.kv_transfer, long=False)  # the core's definition, both figures labelled
            table.add_row(text(v.name), f"{f.running or 0:.0f}/{f.waiting or 0:.0f}",
                          "—" if f.kv_cache_usage is None else f"{f.kv_cache_usage * 100:.1f}",
                          fmt.num(f.generation_tps), fmt.ms(f.ttft.p50 if f.ttft else None),
                          fmt.ms(f.tpot.p50 if f.tpot else None), xfer)
        return table

    # --- running ---------------------------------------------------------------------------------------------
    def _values(self) -> dict[str, str]:
        return {key: self.query_one(f"#f-{key}", Input).value for key, _ in FIELDS}

    def action_start(self) -> None:
        """The workload as edited, asked of the app (which starts and follows it, or says why not)."""
        if self.state.bench.running:
            self.notify("a benchmark is running: ctrl+x stops it", severity="warning", timeout=4)
            return
        # the list's highlight as it is now: the highlight message of a cursor key typed just before ctrl+s (tmux
        # send-keys b Down C-s) may not have reached this screen yet
        ol = self.query_one("#workloads", OptionList)
        if ol.highlighted is not None:
            self.workload_name = ol.get_option_at_index(ol.highlighted).id
        if self.workload_name is None:
            return
        try:
            base = self.ctx.catalog.workload(self.workload_name)
            workload, slo = workload_from_form(base, self._values())
        except AppError as err:
            self.notify(err.hint or "", title=err.one_line(), severity="error", timeout=8)
            return
        self.post_message(BenchRequested(workload, slo, str(self.query_one("#runner", Select).value)))

    def action_stop(self) -> None:
        self.post_message(BenchStopRequested())
