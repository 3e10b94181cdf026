"""What the console asks of the host: the headless commands, started detached, and a look at what is running.

Launching (``up``), stopping (``down``) and campaigns (``run``) are the CLI's own commands, started in their own
session with their output in a file: the console only watches them (the state file, the logs, the run
directories). Whatever happens to the console (quit, a dropped SSH connection, a crash), a start goes on to ready
or failure, a stop completes, an overnight campaign keeps running, and a console opened later finds them all.
No Textual here: the screens call these from workers.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.core import paths, safeio, typedread, yamlio
from tui.core.bench.campaign import CAMPAIGN_FILE, read_spec
from tui.core.bench.events import BenchDone, BenchStarted
from tui.core.bench.eventsfile import EventsTail
from tui.core.bench.store import RUN_FILE, rate_label, read_meta, read_summary
from tui.core.errors import InputError
from tui.core.events import Event
from tui.core.host.base import HostOptions
from tui.core.models import Workload
from tui.core.procs import pid_alive
from tui.core.redact import redact_argv

#: where the detached commands' output goes
JOBS_DIR = "console-jobs"


def global_args(options: HostOptions) -> list[str]:
    """The console's host options as the CLI's global flags (a detached command sees the same host)."""
    out: list[str] = []
    if options.sim:
        out.append("--sim")
    if options.sim_gpu:
        out += ["--sim-gpu", options.sim_gpu]
    if options.sim_gpus:
        out += ["--sim-gpus", str(options.sim_gpus)]
    for f in options.sim_faults:
        out += ["--sim-fault", f]
    if options.sim_startup_s is not None:
        out += ["--sim-startup", f"{options.sim_startup_s:g}"]
    if options.sim_clock is not None:
        out += ["--sim-clock", f"{options.sim_clock:g}"]
    if options.vllm:
        out += ["--vllm", options.vllm]
    return out


@dataclass(frozen=True, slots=True)
class LaunchKnobs:
    """The plan's common knobs the launch screen edits (the same flags ``up``/``plan``/``run`` take)."""

    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    extra_args: tuple[str, ...] = ()  # each one ``--arg`` value ("--flag value")
    extra_env: tuple[tuple[str, str], ...] = ()
    gpus: str | None = None
    #: (endpoint port, first server port, first NIXL side-channel port); None: the defaults 8000, 8100, 5600
    ports: tuple[int, int, int] | None = None

    def args(self) -> list[str]:
        out: list[str] = []
        if self.gpus:
            out += ["--gpus", self.gpus]
        if self.ports is not None:
            out += ["--port", str(self.ports[0]), "--server-port", str(self.ports[1]),
                    "--side-channel-port", str(self.ports[2])]
        if self.gpu_memory_utilization is not None:
            out += ["--gpu-memory-utilization", f"{self.gpu_memory_utilization:g}"]
        if self.max_model_len is not None:
            out += ["--max-model-len", str(self.max_model_len)]
        for a in self.extra_args:
            out.append(f"--arg={a}")
        for k, v in self.extra_env:
            out += ["--env", f"{k}={v}"]
        return out


@dataclass
class Job:
    """A detached CLI command: its argv, pid, and the file its output goes to."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    started: float = field(default_factory=time.time)

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen is not None else 0

    def poll(self) -> int | None:
        return self.popen.poll() if self.popen is not None else None

    def shell(self) -> str:
        """The command as shown (a notification, the job's log), secrets redacted (``--env HF_TOKEN=...``)."""
        return " ".join(shlex.quote(a) for a in redact_argv(["disagg-tui", *self.argv]))

    def last_error(self) -> str:
        """The command's own one-line error (``disagg-tui: error: ...``), else its last non-empty line."""
        try:
            lines = [ln for ln in self.log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        errors = [ln for ln in lines if "error:" in ln]
        return (errors or lines or [""])[-1].strip()


def start_job(name: str, argv: Sequence[str], *, jobs_dir: Path | None = None) -> Job:
    """``disagg-tui ARGV`` in its own session (an SSH drop or a crashed console leaves it running), stdin closed,
    stdout and stderr to ``<state>/console-jobs/<time>-<name>.log``. Blocking (a fork): call it from a thread."""
    folder = jobs_dir or (paths.state_dir() / JOBS_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{name}.log"
    job = Job(name=name, argv=list(argv), log=log)
    with open(log, "ab", buffering=0) as out:
        out.write(f"$ {job.shell()}\n".encode())
        job.popen = subprocess.Popen([*paths.python_module_argv("tui"), *argv], env=paths.child_env(),
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, close_fds=True)
    return job


#: a benchmark the console started: its workload file and the events file it follows (``bench --events-to``)
BENCH_WORKLOAD = ".workload.yaml"
BENCH_EVENTS = ".events.jsonl"


def bench_files(name: str = "bench", *, jobs_dir: Path | None = None) -> tuple[Path, Path]:
    """Where a benchmark started from the console keeps its workload and its events (the job's folder)."""
    folder = jobs_dir or (paths.state_dir() / JOBS_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{time.monotonic_ns() % 10**6:06d}-{name}"
    return stem.with_name(stem.name + BENCH_WORKLOAD), stem.with_name(stem.name + BENCH_EVENTS)


def write_workload(path: Path, workload: Workload) -> None:
    """The form's workload as a workload file ``bench --workload FILE`` reads back unchanged (name, description,
    every traffic field). Blocking: call it from a thread."""
    from tui.core.record.bundle import workload_to_dict

    path.write_text(yamlio.dump({"name": workload.name, **workload_to_dict(workload)}), encoding="utf-8")


def bench_argv(workload_file: Path, events: Path, slo: dict[str, float], runner: str, options: HostOptions, *,
               campaign: str = "console") -> list[str]:
    """``disagg-tui bench`` for a run started from the console: against the active layout, stored under
    ``runs/<campaign>/``, its events to ``events`` for the console to follow, no progress line (nobody reads it)."""
    argv = ["bench", "--workload", str(workload_file), "--campaign", campaign, "--events-to", str(events), "--quiet"]
    if slo:
        argv += ["--goodput", *(f"{k}:{v:g}" for k, v in slo.items())]
    if runner == "vllm":
        argv += ["--runner", "vllm"]
    return [*argv, *global_args(options)]


def running_benches(jobs_dir: Path | None = None, limit: int = 20) -> list[Path]:
    """The events files of benchmarks still running on this host (started by this console or an earlier one), the
    newest first. Blocking (reads files): call it from a thread."""
    folder = jobs_dir or (paths.state_dir() / JOBS_DIR)
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


def up_argv(model: str, topology: str, knobs: LaunchKnobs, options: HostOptions, *,
            apply_fix: str | None = None, replace: bool = False) -> list[str]:
    argv = ["up", "--model", model, "--topology", topology, *knobs.args()]
    if apply_fix:
        argv += ["--apply-fix", apply_fix]
    if replace:
        argv.append("--replace")
    return [*argv, *global_args(options)]


def down_argv(options: HostOptions, *, all_layouts: bool = False) -> list[str]:
    return ["down", *(["--all"] if all_layouts else []), *global_args(options)]


def run_argv(model: str, topologies: Sequence[str], workloads: Sequence[str], options: HostOptions, *,
             knobs: LaunchKnobs | None = None, rates: str | None = None, repeat: int = 1,
             campaign: str | None = None, num_prompts: int | None = None, runner: str = "ours") -> list[str]:
    argv = ["run", "--model", model, "--topology", ",".join(topologies), "--workload", ",".join(workloads),
            "--repeat", str(repeat), "--quiet"]
    if rates:
        argv += ["--rates", rates]
    if campaign:
        argv += ["--campaign", campaign]
    if num_prompts:
        argv += ["--num-prompts", str(num_prompts)]
    if runner != "ours":
        argv += ["--runner", runner]
    if knobs is not None:
        argv += knobs.args()
    return [*argv, *global_args(options)]


# --- campaigns on this host ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CellState:
    topology: str
    workload: str
    rate: str
    repeat: int
    status: str  # complete | incomplete | failed | running | pending
    run_dir: str = ""
    message: str = ""
    output_tps: float | None = None
    mean_tpot_ms: float | None = None
    mean_ttft_ms: float | None = None


@dataclass(frozen=True, slots=True)
class CampaignState:
    name: str
    directory: Path
    spec: dict[str, Any]
    cells: tuple[CellState, ...]
    created: float
    running: bool  # some run of it is being measured now (its client's process is alive)

    @property
    def done(self) -> int:
        return sum(1 for c in self.cells if c.status in ("complete", "failed", "incomplete"))

    @property
    def total(self) -> int:
        spec_cells = len(self.spec.get("topologies", [])) * len(self.spec.get("workloads", [])) \
            * max(int(self.spec.get("repeat", 1) or 1), 1) * max(len(self.spec.get("rates") or [None])
                                                                   if isinstance(self.spec.get("rates"), list)
                                                                   else 1, 1)
        return max(spec_cells, len(self.cells))


def _cell_of(run_dir: Path) -> CellState:
    """A cell's state from its run folder (checked as every stored run is: a damaged one is a ``damaged`` cell
    with its one-line error, never a traceback)."""
    try:
        meta = read_meta(run_dir)
    except InputError as err:
        return CellState(topology=safeio.shown(run_dir.name, 80), workload="", rate="", repeat=1, status="damaged",
                         run_dir=str(run_dir), message=err.one_line())
    status = meta.status
    if status == "running" and not pid_alive(meta.pid):
        status = "incomplete"
    try:
        summary = read_summary(run_dir) or {}
    except InputError:
        summary = {}

    def num(key: str) -> float | None:
        v = summary.get(key)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    return CellState(topology=meta.topology, workload=meta.workload, rate=rate_label(meta.request_rate),
                     repeat=meta.repeat, status=status, run_dir=str(run_dir), message=safeio.shown(meta.message),
                     output_tps=num("output_throughput"), mean_tpot_ms=num("mean_tpot_ms"),
                     mean_ttft_ms=num("mean_ttft_ms"))


#: run folders of one campaign read at most (a real one has a few dozen cells)
MAX_CELLS = 10_000


def read_campaign(directory: Path) -> CampaignState | None:
    """A campaign directory's state from its files (blocking: call from a thread); None when its campaign.json
    does not read (a FIFO in its place, a spec of the wrong types)."""
    try:
        spec = read_spec(directory / CAMPAIGN_FILE)
        raw = safeio.load_json(directory / CAMPAIGN_FILE, "run record")
    except InputError:
        return None
    created = raw.get("created") if isinstance(raw, dict) else None
    if isinstance(created, bool) or not isinstance(created, int | float) or not 0 <= created <= typedread.TIME_MAX:
        created = 0.0
    names, _more = safeio.scan_dir(directory, MAX_CELLS)
    run_dirs = [directory / n for n in names if (directory / n / RUN_FILE).exists()
                or (directory / n / RUN_FILE).is_symlink()]
    cells = tuple(_cell_of(d) for d in run_dirs)
    return CampaignState(name=directory.name, directory=directory, spec=spec.to_dict(), cells=cells,
                         created=float(created), running=any(c.status == "running" for c in cells))


def campaigns(root: Path | None = None, limit: int = 20) -> list[CampaignState]:
    """The newest campaigns of the runs directory, newest first."""
    base = root or paths.runs_dir()
    if not base.is_dir():
        return []
    names, _more = safeio.scan_dir(base)
    dirs = [base / n for n in names if (base / n / CAMPAIGN_FILE).is_file()]
    dirs.sort(key=lambda d: (d / CAMPAIGN_FILE).stat().st_mtime, reverse=True)
    out = [read_campaign(d) for d in dirs[:limit]]
    return [c for c in out if c is not None]
