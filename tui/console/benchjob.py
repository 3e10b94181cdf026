"""A benchmark the console follows: the detached ``disagg-tui bench`` it started, or one an earlier console
started that is still running, read through the events file the run writes (``bench --events-to FILE``).

The run, its records and its summary live in the run's own process; the console reads only its events, so drawing
never slows the run and the run goes on when the console quits. No Textual here: the app reads from a thread.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from tui.console.argv import bench_argv
from tui.console.jobs import JOBS_DIR, Job, jobs_folder, start_job
from tui.core import paths, safewrite, yamlio
from tui.core.bench.events import BenchDone, BenchStarted
from tui.core.bench.eventsfile import EventsTail
from tui.core.errors import AppError
from tui.core.events import Event
from tui.core.host.base import HostOptions
from tui.core.launch import ownership
from tui.core.launch.state import StateStore
from tui.core.models import Workload

#: a benchmark the console started: its workload file and the events file it follows (``bench --events-to``)
BENCH_WORKLOAD = ".workload.yaml"
BENCH_EVENTS = ".events.jsonl"


def bench_files(name: str = "bench", *, jobs_dir: Path | None = None) -> tuple[Path, Path]:
    """Where a benchmark started from the console keeps its workload and its events (the job's folder)."""
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{time.monotonic_ns() % 10**6:06d}"
    stem = jobs_folder(jobs_dir) / f"{stamp}-{name}"
    return stem.with_name(stem.name + BENCH_WORKLOAD), stem.with_name(stem.name + BENCH_EVENTS)


def write_workload(path: Path, workload: Workload) -> None:
    """The form's workload as a workload file ``bench --workload FILE`` reads back unchanged (name, description,
    every traffic field). Blocking: call it from a thread."""
    from tui.core.record.bundle import workload_to_dict

    safewrite.write_atomic(path, yamlio.dump({"name": workload.name, **workload_to_dict(workload)}),
                           root=paths.root_for(path))


def start_bench(store: StateStore, options: HostOptions, workload: Workload, slo: dict[str, float],
                runner: str, *, force: bool = False) -> BenchJob:
    """``disagg-tui bench`` started detached against the active layout, to be followed; AppError saying why not
    (nothing up, a layout not ready yet, no ``vllm`` for ``vllm bench serve``), ``LayoutInUse`` naming who holds
    the layout (a running campaign, another benchmark) unless ``force``. Blocking: call it from a thread."""
    layout = store.active()
    if layout is None or not layout.endpoint:
        raise AppError("nothing is up to benchmark", hint="launch a layout first (l)")
    if layout.status != "ready":
        raise AppError(f"the layout is {layout.status}", hint="benchmark it once it is ready")
    ownership.check_free(layout, "benchmark it", force=force)
    if runner == "vllm":
        exe = options.vllm or "vllm"
        if shutil.which(exe) is None:
            raise AppError(f"{exe!r} is not an executable here",
                           hint="start the console with --vllm /path/to/venv/bin/vllm for vllm bench serve")
    workload_file, events = bench_files()
    write_workload(workload_file, workload)
    job = start_job("bench", bench_argv(workload_file, events, slo, runner, options, force=force))
    return BenchJob(events, job)


def running_benches(jobs_dir: Path | None = None, limit: int = 20) -> list[Path]:
    """The events files of benchmarks still running on this host (started by this console or an earlier one), the
    newest first. Blocking (reads files): call it from a thread."""
    folder = jobs_dir or (paths.state_dir() / JOBS_DIR)  # read only: not made when missing
    try:
        found = sorted(folder.glob("*" + BENCH_EVENTS), key=lambda p: p.name, reverse=True)[:limit]
    except OSError:
        return []
    out = []
    for path in found:
        tail = EventsTail(path)
        tail.read(limit=4096)  # the header is the first line
        if tail.header is not None and tail.header.alive():
            out.append(path)
    return out


@dataclass
class BenchJob:
    """A benchmark the console follows: the detached ``bench`` it started (``job``), or one it found running (no
    ``job``: an earlier console's). Its events come from the events file; the run's own process keeps its records,
    so the console never holds them. Blocking reads: call ``read``/``alive``/``stop`` from a thread."""

    events: Path
    job: Job | None = None
    tail: EventsTail = field(init=False)
    started: BenchStarted | None = None
    done: bool = False

    def __post_init__(self) -> None:
        self.tail = EventsTail(self.events)

    def read(self) -> list[Event]:
        got = self.tail.read_all()
        for ev in got:
            if isinstance(ev, BenchStarted):
                self.started, self.done = ev, False
            elif isinstance(ev, BenchDone):
                self.done = True
        return got

    def alive(self) -> bool:
        if self.job is not None:
            return self.job.poll() is None
        return self.tail.header is not None and self.tail.header.alive()

    def stop(self) -> bool:
        """Ask the run to stop (SIGTERM, which ``bench`` takes as Ctrl-C: what was measured is stored, the run
        marked incomplete). False when it is not running."""
        if self.job is not None and self.job.popen is not None:
            if self.job.poll() is not None:
                return False
            self.job.popen.send_signal(signal.SIGTERM)
            return True
        header = self.tail.header
        if header is None or not header.alive():
            return False
        try:
            os.kill(header.pid, signal.SIGTERM)
        except OSError:
            return False
        return True

    def ended_without_end(self) -> BenchDone | None:
        """The end of a run whose process went away before it said so (killed, crashed): what reached its
        directory is there; None when no run had started (the command failed first: see ``job.last_error``)."""
        if self.started is None or self.done:
            return None
        code = self.job.poll() if self.job is not None else None
        why = self.job.last_error() if self.job is not None else ""
        message = ("the benchmark process ended before the run did"
                   + (f" (exit {code})" if code is not None else "") + (f": {why}" if why else "")
                   + "; the requests that finished are kept in the run's journal")
        return BenchDone(run_id=self.started.run_id, status="incomplete", run_dir=self.started.run_dir,
                         message=message, flags=("incomplete",))
