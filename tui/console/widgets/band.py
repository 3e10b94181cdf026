"""The band in the middle of the dashboard: the one thing going on.

A failure the playbook recognised (the diagnosis banner, with the fix one key away) comes first; then a start in
progress (one line per server: phase, progress, elapsed against the expected time, the last log line); then a
benchmark (progress, live figures); then a campaign; else what to do next.
"""

from __future__ import annotations

import textwrap

from rich.text import Text

from tui.console import fmt
from tui.console.fixview import shown_fix
from tui.console.state import ConsoleState, ServerView
from tui.console.widgets.panel import TextPanel
from tui.core.playbook import Playbook
from tui.core.printable import printable


class Band(TextPanel):
    DEFAULT_CSS = "Band { height: auto; min-height: 3; }"

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        #: the playbook a diagnosis's fix is described from, for the GPUs shown (set by the screen)
        self.book: Playbook | None = None
        #: the servers table's row (a remote host's server is followed here from its host's ticks)
        self.selected: str | None = None

    def draw(self, model: ConsoleState) -> None:
        width = max(self.size.width or (self.app.size.width - 4), 40)
        text, kind = render_band(model, width, self.book, selected=self.selected)
        self.set_class(kind == "diagnosis", "-diagnosis")
        self.set_class(kind == "startup", "-startup")
        self.set_class(kind == "bench", "-bench")
        self.set_text(text)


def render_band(model: ConsoleState, width: int, book: Playbook | None = None,
                selected: str | None = None) -> tuple[Text, str]:
    d = model.active_diagnosis()
    if d is not None and (d.is_failure or (model.layout is not None and model.layout.status == "failed")):
        return _diagnosis(model, width, book), "diagnosis"
    remote = model.server_at(selected) if selected is not None and selected not in model.servers else None
    if remote is not None and remote.host:
        return _remote(model, remote, width), "remote"
    starting = [v for v in model.servers.values() if v.role != "proxy" and v.phase != "ready"
                and v.exited is None] if model.starting() else []
    if starting or (model.layout is not None and model.layout.status == "starting"):
        return _startup(model, width), "startup"
    if model.bench.started is not None:
        return _bench(model, width), "bench"
    c = model.campaign
    if c.step is not None:
        s = c.step
        t = Text(f"Campaign {c.name}: ", style="bold")
        t.append(f"{s.done}/{s.total} cells  ")
        t.append(s.text)
        return t, "campaign"
    return _idle(model, width), "idle"


def _remote(model: ConsoleState, v: ServerView, width: int) -> Text:
    """A server of another host: its host's own diagnosis of it first, else its start (phase, progress, ETA, the
    last log line, from its host's follow stream) while it starts, else its state and figures (its host's ticks);
    under it its host's layout (the follow stream's status, else the tick's)."""
    from tui.console.remotes import diagnosis_of
    from tui.console.widgets.servers import state_cell

    rv = model.remotes[v.host]
    d = diagnosis_of(rv, v.name)
    t = Text.assemble((printable(v.name), "bold"),
                      printable(f" on {v.host}" + (f" ({v.role})" if v.role else "")) + ": ")
    starting = v.started and v.exited is None and v.phase != "ready" and d is None
    if d is not None:
        t.append("failed: " if d.is_failure else "warning: ", style=fmt.BAD if d.is_failure else fmt.WARN)
        t.append(printable(d.entry_id), style="bold")
        t.append(f" · {d.title}")
        t.append("\nFix (on " + printable(v.host) + "): ", style="bold")
        t.append(d.fix or "no fix known: see its log", style="")
    elif v.exited is not None:
        t.append(fmt.exit_words(v.exited.returncode, v.exited.during), style=fmt.BAD)
    elif starting:
        t.append_text(fmt.bar(v.progress, 24 if width >= 120 else 12, style=fmt.BUSY))
        t.append(f" {v.progress * 100:3.0f}% {fmt.cut_words(v.phase_label or 'launching', 33)} ")
        t.append(_server_eta(model, v, short=width < 100))
        if v.subphase is not None:
            t.append("\n↳ " + v.subphase.label, style=fmt.BUSY)
        elif v.last_line and width >= 100:
            tail = v.last_line.strip()
            room = max(width - 4, 20)
            t.append("\n" + (tail[: room - 1] + "…" if len(tail) > room else tail), style=fmt.DIM)
    else:
        t.append_text(state_cell(model, v, max(width // 3, 20)))
        f = v.figures
        if f is not None:
            t.append(f"  run {fmt.num(f.running)} / wait {fmt.num(f.waiting)}")
            if f.kv_cache_usage is not None:
                t.append(f"  KV {f.kv_cache_usage * 100:.1f}%")
            t.append(f"  prompt {fmt.num(f.prompt_tps)} tok/s  gen {fmt.num(f.generation_tps)} tok/s")
        if v.ready_s is not None:
            t.append(f"  started in {fmt.duration(v.ready_s)}", style=fmt.DIM)
    line = Text()
    if rv.down is not None:
        line.append(f"{v.host} is unreachable ({rv.down.reason}): these are its last figures.", style=fmt.BAD)
    elif rv.layout is not None:
        lay = rv.layout
        line.append(f"On {v.host}: {lay.topology} of {lay.profile_id} is {lay.status}"
                    + (f" at {lay.endpoint}" if lay.endpoint and lay.status != "failed" else "")
                    + (f": {lay.note}" if lay.note and lay.status in ("failed", "degraded") else "") + ".",
                    style=fmt.BAD if lay.status in ("failed", "degraded") else fmt.DIM)
    elif rv.tick is not None and rv.tick.layout is not None:
        tl = rv.tick.layout
        line.append(f"On {v.host}: {tl.topology} of {tl.profile} is {tl.status}"
                    + (f" at {tl.endpoint}" if tl.endpoint else "") + ".", style=fmt.DIM)
    if rv.tick is not None and rv.tick.errors:
        line.append(f" {v.host} says: {rv.tick.errors[0]}", style=fmt.WARN)
    if line.plain:
        t.append("\n")
        t.append_text(line)
    return t


def _idle(model: ConsoleState, width: int = 160) -> Text:
    lay = model.layout
    if lay is None and model.replay_label is not None:  # a replay launches nothing
        return Text.assemble(("No layout is up at this point of the recording. ", "bold"), "Press ", ("n", "bold"),
                             " for the next marker, ", ("m", "bold"), " for the list of them.")
    if lay is None:
        return Text.assemble(("No layout is up. ", "bold"), "Press ", ("l", "bold"), " to pick a model and a "
                             "topology and launch it, ", ("c", "bold"), " for a campaign, ", ("r", "bold"),
                             " for stored results.")
    if lay.status == "ready":
        if lay.held_by:  # a running campaign or a benchmark holds it: what it does is not this console's to undo
            t = Text.assemble((f"{lay.topology} of {lay.profile_id} is ready", fmt.OK), f" at {lay.endpoint}.")
            held = f"In use by {lay.held_by}: b, s and R ask first."
            for line in textwrap.wrap(held, max(width - 4, 20)):  # the band cuts a long line: its holder stays whole
                t.append("\n" + line, style=fmt.WARN)
        else:
            t = Text.assemble((f"{lay.topology} of {lay.profile_id} is ready", fmt.OK), f" at {lay.endpoint}. ",
                              "Press ", ("b", "bold"), " to benchmark it, ", ("s", "bold"), " to stop it.")
        started = [f"{v.name} in {fmt.duration(v.ready_s)}" for v in model.servers.values()
                   if v.ready_s is not None and v.role != "proxy"]
        if started or lay.started_by:
            parts = [*(["Started: " + ", ".join(started)] if started else []), *([lay.started_by] if lay.started_by
                                                                                  else [])]
            t.append("\n" + _cap(" · ".join(parts)), style=fmt.DIM)
        if lay.fixes:
            t.append("\n")
            t.append_text(fixes_text(lay.fixes))
        return t
    if lay.status == "failed":
        t = Text.assemble((f"{lay.topology} of {lay.profile_id} failed to start", fmt.BAD),
                          f": {lay.note}. " if lay.note else ". ", "Press ", ("l", "bold"), " to launch again, ",
                          ("x", "bold"), " to dismiss it.")
        return _owned(t, lay.started_by)
    if lay.status == "degraded":  # a server or the proxy of a started layout has exited
        t = Text.assemble((f"{lay.topology} of {lay.profile_id} is degraded", fmt.BAD),
                          f": {lay.note}. " if lay.note else ". ", "Its log is below; press ", ("s", "bold"),
                          " to stop what is left, ", ("l", "bold"), " to launch again.")
        return _owned(t, lay.started_by)
    return _owned(Text(f"{lay.topology} of {lay.profile_id}: {lay.status}", style=fmt.BUSY), lay.started_by)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _owned(t: Text, started_by: str) -> Text:
    """The band's text with who started the layout under it (``Started by campaign X (pid 4242) at 19:54``)."""
    if started_by:
        t.append("\n" + _cap(started_by), style=fmt.DIM)
    return t


def fixes_text(fixes: tuple[tuple[str, tuple[str, ...]], ...]) -> Text:
    """``Fix in effect: flashinfer-no-nvcc (set VLLM_USE_FLASHINFER_SAMPLER=0; add --attention-backend ...)``."""
    t = Text("Fix in effect: " if len(fixes) == 1 else "Fixes in effect: ", style="bold")
    for i, (entry, changes) in enumerate(fixes):
        if i:
            t.append(", ")
        t.append(entry, style=fmt.WARN)
        if changes:
            t.append(f" ({'; '.join(changes)})")
    return t


def _diagnosis(model: ConsoleState, width: int, book: Playbook | None) -> Text:
    d = model.active_diagnosis()
    assert d is not None
    fix = shown_fix(d, book, model)
    t = Text()
    t.append("✖ " if d.is_failure else "▲ ", style=fmt.BAD if d.is_failure else fmt.WARN)
    t.append(f"{printable(d.server)} " if d.server else "", style="bold")  # keys, kept raw: shown escaped
    t.append("failed: " if d.is_failure else "warning: ")
    t.append(printable(d.entry_id), style="bold")
    t.append(f" · {d.title}")
    first = d.explanation.strip().splitlines()[0] if d.explanation.strip() else ""
    for line in textwrap.wrap(first, max(width - 2, 20))[:2]:
        t.append("\n" + line)
    t.append("\nFix: ", style="bold")
    t.append(fix.text or "no fix known: see the details")
    keys = Text("\n")
    if d.fixable:
        keys.append("a", style="bold reverse")
        keys.append(" apply the fix and relaunch   ")
    keys.append("d", style="bold reverse")
    keys.append(" details   ")
    keys.append("x", style="bold reverse")
    keys.append(" dismiss")
    more = len([x for x in model.diagnoses if (x.server, x.entry_id) not in model.dismissed]) - 1
    if more > 0:
        keys.append(f"   (+{more} more: p for the playbook)", style=fmt.DIM)
    t.append_text(keys)
    return t


def _server_eta(model: ConsoleState, v: ServerView, *, short: bool = False) -> str:
    elapsed = model.age(v.started) if v.started else None
    if v.expected_s:
        left = v.expected_s - (elapsed or 0.0)
        eta = f"ETA {fmt.duration(left)}" if left > 0 else f"over by {fmt.duration(-left)}"
        if short:
            return f"{fmt.duration(elapsed)} {eta}"
        return f"{fmt.duration(elapsed)} / ~{fmt.duration(v.expected_s)}  {eta}"
    return fmt.duration(elapsed) if short else f"{fmt.duration(elapsed)} (first start here: no ETA yet)"


def _startup(model: ConsoleState, width: int) -> Text:
    lay = model.layout
    t = Text()
    t.append("Starting ", style="bold")
    if lay is not None:
        t.append(f"{lay.topology} of {lay.profile_id}")
        if lay.fixes:
            t.append(" with the fix" + ("es " if len(lay.fixes) > 1 else " ") + ", ".join(e for e, _ in lay.fixes),
                     style=fmt.WARN)
        if lay.started_by:
            t.append(f" · {lay.started_by}", style=fmt.DIM)
    servers = [v for v in model.servers.values() if v.role != "proxy"]
    if not servers:
        t.append("\nlaunching…", style=fmt.DIM)
    bar_w = 24 if width >= 120 else 12
    for v in servers:
        t.append("\n")
        t.append(f"{v.name:<10} ", style="bold")
        if v.exited is not None:
            t.append(fmt.exit_words(v.exited.returncode, v.exited.during), style=fmt.BAD)
            continue
        if v.waits_for and not v.started:
            t.append(f"held back: starts once {', '.join(v.waits_for)} allocated its KV cache on GPU "
                     f"{','.join(map(str, v.gpus))} (a shared GPU's memory profiling would halve both caches)",
                     style=fmt.DIM)
            continue
        done = v.phase == "ready"
        t.append_text(fmt.bar(v.progress, bar_w, style=fmt.OK if done else fmt.BUSY))
        t.append(f" {v.progress * 100:3.0f}% ")
        label = "ready" if done else (v.phase_label or "launching")
        lw = 33 if width >= 140 else 28 if width >= 100 else 16  # the longest label whole where there is room
        t.append(f"{fmt.cut_words(label, lw):<{lw}}", style=fmt.OK if done else "")
        if done and v.ready_s is not None:
            t.append(f" in {fmt.duration(v.ready_s)}")
        else:
            t.append(" " + _server_eta(model, v, short=width < 100))
        if v.subphase is not None and not done:  # the silent log's reason, from the process tree and caches
            t.append("\n" + " " * 11 + "↳ " + v.subphase.label, style=fmt.BUSY)
        elif width >= 120 and v.last_line and not done:
            room = width - len(t.plain.splitlines()[-1]) - 4
            if room > 20:
                tail = v.last_line.strip()
                t.append("  " + (tail[: room - 1] + "…" if len(tail) > room else tail), style=fmt.DIM)
    return t


def _bench(model: ConsoleState, width: int) -> Text:
    b = model.bench
    s = b.started
    assert s is not None
    tick = b.tick
    t = Text()
    narrow = width < 100
    t.append("Benchmark ", style="bold")
    t.append(s.workload if narrow else f"{s.workload} on {s.topology} · {s.total} prompts · rate {s.request_rate} · "
             f"{'ours' if s.runner == 'disagg-tui' else s.runner}")
    if b.done is not None:
        style = fmt.OK if b.done.status == "complete" else fmt.WARN
        t.append(f"  {b.done.status}", style=style)
        summ = b.done.summary
        if not summ:  # ended with no summary (its process died, or nothing finished): no figures to show
            t.append(f"\n{b.done.message or 'no summary: no request finished'}", style=fmt.DIM)
            return t
        t.append(f"\nout {fmt.num(summ.get('output_throughput'))} tok/s   TPOT mean "
                 f"{fmt.ms_value(summ.get('mean_tpot_ms'))}   TTFT mean {fmt.ms_value(summ.get('mean_ttft_ms'))}"
                 f"   failed {summ.get('failed', '—')}   r for results")
        return t
    if tick is None:
        t.append("\nsetting up…", style=fmt.DIM)
        return t
    total = tick.total or s.total
    frac = tick.done / total if total else 0.0
    t.append(f"  {tick.phase} {tick.done}/{total} ")
    t.append_text(fmt.bar(frac, 20 if width >= 120 else 10, style=fmt.BUSY))
    t.append(f" {frac * 100:.0f}%")
    tps = [v for _, v in b.series.get("output_tps", [])]
    t.append("\nout " if narrow else "\nout tok/s ")
    if width >= 100 and tps:
        t.append(fmt.sparkline(tps, 12, top=max(tps) or 1.0), style=fmt.BUSY)
    if narrow:
        t.append(f"{fmt.num(tick.output_tps)}  TPOT {fmt.ms_value(tick.tpot_p50_ms)}/{fmt.ms_value(tick.tpot_p99_ms)}"
                 f"  TTFT {fmt.ms_value(tick.ttft_p50_ms)}/{fmt.ms_value(tick.ttft_p99_ms)}  fail {tick.failed}")
        return t
    t.append(f" {fmt.num(tick.output_tps)}   TPOT p50/p99 {fmt.ms_value(tick.tpot_p50_ms)} / "
             f"{fmt.ms_value(tick.tpot_p99_ms)}   TTFT p50/p99 {fmt.ms_value(tick.ttft_p50_ms)} / "
             f"{fmt.ms_value(tick.ttft_p99_ms)}   in flight {tick.inflight}   failed {tick.failed}")
    lag = tick.loop_lag_ms
    t.append("   client ")
    t.append("ok" if lag < 50 else f"lag {lag:.0f} ms", style=fmt.OK if lag < 50 else fmt.WARN)
    if tick.source == "server":
        t.append("  (servers' /metrics)", style=fmt.DIM)
    return t
