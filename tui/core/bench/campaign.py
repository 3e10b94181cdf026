"""Campaigns (bake-offs): every topology brought up in turn, every workload (and rate) run on it, torn down.

- Cells are (topology, workload, rate, repeat). Within a topology their order is shuffled (seeded), so a slow
  drift of the machine does not always favour the same cell; repeats give a mean and a confidence interval.
- Rates: the workload's own (usually ``inf``, saturation), an explicit list, or ``auto``: saturation first,
  then fractions of the request throughput it reached, giving a latency–throughput curve per topology.
- Between layouts the GPUs must be free again (memory released) before the next one starts.
- Resume: the campaign's spec is stored in ``campaign.json``; a cell whose run directory is ``complete`` is not
  run again (unless it completed no request: it measured nothing), and a topology whose cells are all complete is
  not even brought up.

Layout bring-up and tear-down belong to the supervisor; this module takes them through ``Lifecycle``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import random
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tui.core import paths, safeio, typedread
from tui.core.bench.dataset import run_seed
from tui.core.bench.events import BenchTick, CampaignStep
from tui.core.bench.runner import BenchOptions, BenchTarget, run_bench
from tui.core.bench.serverside import EnergyReader
from tui.core.bench.store import CAMPAIGN_FILE as CAMPAIGN_FILE  # where it always was, for its readers
from tui.core.bench.store import (
    RUN_FILE,
    Run,
    RunMeta,
    load_run,
    rate_label,
    run_name,
    safe_name,
    write_json,
)
from tui.core.errors import AppError, InputError, RunFailed
from tui.core.events import EventBus
from tui.core.host.base import Host
from tui.core.launch.state import LayoutRecord, StateStore
from tui.core.models import ModelProfile, Workload
from tui.core.plan.knobs import MAX_AXES, Configuration, slug_of
from tui.core.plan.planner import LaunchPlan
from tui.core.procs import pid_alive

AUTO_FRACTIONS = (0.25, 0.5, 0.75, 0.9)
GPU_FREE_TIMEOUT_S = 120.0
#: a GPU counts as free when this little memory is in use (the driver's own reservation stays below it)
GPU_FREE_MIB = 1024


def orphaned_layout(plan: LaunchPlan, campaign_dir: Path, state: StateStore | None = None) -> LayoutRecord | None:
    """The active layout when this campaign's runs were measured on it (same model and topology) and the process
    that launched it is gone: what a ``run`` killed with SIGKILL or SIGHUP leaves up. The same command run again
    stops it and starts afresh, rather than waiting for the GPUs it holds. A layout of anyone else is left alone."""
    try:
        rec = (state or StateStore()).active()
    except AppError:
        return None
    if rec is None or rec.profile_id != plan.profile_id or rec.topology != plan.topology or pid_alive(rec.owner_pid):
        return None
    for run_file in campaign_dir.glob(f"*/{RUN_FILE}"):
        with contextlib.suppress(InputError):  # a FIFO or a damaged record in a run's folder: not this one
            data = safeio.load_json(run_file, "run record")
            if isinstance(data, dict) and data.get("layout_id") == rec.id:
                return rec
    return None


class Lifecycle(Protocol):
    """What a campaign needs from the supervisor (``tui.core.launch.lifecycle`` provides these as module functions)."""

    async def bring_up(self, profile: ModelProfile, plan: LaunchPlan, host: Host, bus: EventBus) -> LayoutRecord:
        """Launch the plan's servers (and proxy), wait until the endpoint is ready; raise an AppError if not."""
        ...

    async def tear_down(self, record: LayoutRecord, bus: EventBus) -> None:
        """Stop every process of the layout and forget it (the GPUs are released when this returns or soon)."""
        ...


@dataclass
class CampaignSpec:
    name: str
    model: str
    topologies: list[str]
    workloads: list[str]
    rates: list[float] | str | None = None  # None: each workload's own; "auto": saturation then fractions
    repeat: int = 1
    seed: int = 0
    num_prompts: int | None = None
    goodput: dict[str, float] = field(default_factory=dict)
    warmup: int = -1
    simulated: bool = False
    host: str = ""  # what was measured on: "sim:b200x2 clock 1" or the real host's name (part of the cells)
    client: str = "ours"  # whose load generator: ours | vllm (the real vllm bench serve)
    #: the knob axes crossed with the topologies (``[ROLE.]NAME=V1,V2``, ``run --knob``); [] for none
    knobs: list[str] = field(default_factory=list)

    def cells_key(self) -> dict[str, Any]:
        """What defines the cells (a resume must match it)."""
        return {"model": self.model, "topologies": self.topologies, "workloads": self.workloads,
                "rates": [rate_label(r) for r in self.rates] if isinstance(self.rates, list) else self.rates,
                "repeat": self.repeat, "seed": self.seed, "num_prompts": self.num_prompts, "host": self.host,
                # a campaign of vllm bench's client is another campaign (ours keeps the key it always had)
                **({"client": self.client} if self.client != "ours" else {}),
                **({"knobs": self.knobs} if self.knobs else {})}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if isinstance(self.rates, list):
            d["rates"] = [rate_label(r) for r in self.rates]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CampaignSpec:
        """A spec as :meth:`to_dict` wrote it, every field of its type (a campaign folder may be a copy):
        :class:`~tui.core.typedread.FieldError` naming the first that is not."""
        if not isinstance(d, dict):
            raise typedread.FieldError(f"expected a mapping, got {typedread.described(d)}")
        data = dict(d)
        raw = data.pop("rates", None)
        rates: list[float] | str | None
        if isinstance(raw, list):
            if len(raw) > 10_000:
                raise typedread.FieldError(f"a list of {len(raw):,} rates", ("rates",))
            rates = [_spec_rate(r, i) for i, r in enumerate(raw)]
        elif raw is None or (isinstance(raw, str) and len(raw) <= 40):
            rates = raw
        else:
            raise typedread.FieldError(f"expected a list of rates or 'auto', got {typedread.described(raw)}",
                                       ("rates",))
        knobs = data.get("knobs")
        if isinstance(knobs, list) and len(knobs) > MAX_AXES:
            raise typedread.FieldError(f"{len(knobs)} knob axes (at most {MAX_AXES})", ("knobs",))
        spec = typedread.read(cls, data, ranges={"repeat": (1, 1_000_000), "warmup": (-1, 1_000_000),
                                                 "num_prompts": (1, 1_000_000)})
        spec.rates = rates
        for i, text in enumerate(spec.knobs):  # shown as the campaign's axes
            typedread.check_text(text, ("knobs", i), limit=600)
        return spec


def _spec_rate(rate: Any, i: int) -> float:
    """One of a stored spec's rates: ``"inf"``, a number > 0 or its text."""
    if rate == "inf":
        return math.inf
    value: Any = rate
    if isinstance(rate, str) and len(rate) <= 40:
        with contextlib.suppress(ValueError):
            value = float(rate)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1e9:
        raise typedread.FieldError(f"expected 'inf' or a rate > 0, got {typedread.described(rate)}", ("rates", i))
    return float(value)


def read_spec(path: Path) -> CampaignSpec:
    """A campaign folder's ``campaign.json``: a regular file within a run record's size, strict JSON, a spec of
    the right types; one line naming the file (and field) otherwise."""
    try:
        data = safeio.load_json(path, "run record")
    except InputError as exc:
        raise InputError(f"damaged campaign file: {exc.message}", file=path, line=exc.line) from None
    try:
        return CampaignSpec.from_dict(data)
    except typedread.FieldError as exc:
        raise InputError(f"damaged campaign file: {exc.reason}", file=path, field=exc.field or None) from None


@dataclass(frozen=True, slots=True)
class Cell:
    topology: str
    workload: str
    rate: float | None  # None: the workload's own rate; inf: saturation
    repeat: int = 1
    derived: bool = False  # an auto-sweep rate (known only after the saturation run)
    config: str = ""  # the knob configuration's label (``attn=triton spec=ngram:4``); "" without knobs

    def name(self, wl: Workload) -> str:
        rate = wl.request_rate if self.rate is None else self.rate
        name = run_name(self.topology, self.workload, rate, self.repeat, with_rate=self.derived or (
            self.rate is not None and not math.isinf(self.rate)))
        return f"{name}_{slug_of(self.config)}" if self.config else name

    @property
    def layout(self) -> str:
        """The layout it runs on: its topology, and its knobs where it has some (``tp2 [attn=triton]``)."""
        return f"{self.topology} [{self.config}]" if self.config else self.topology


@dataclass
class CellOutcome:
    cell: Cell
    status: str  # complete | failed | incomplete | skipped (already done)
    run: Run | None = None
    message: str = ""


@dataclass
class CampaignResult:
    spec: CampaignSpec
    directory: Path
    outcomes: list[CellOutcome] = field(default_factory=list)

    @property
    def failed(self) -> list[CellOutcome]:
        return [o for o in self.outcomes if o.status not in ("complete", "skipped")]

    def runs(self) -> list[Run]:
        return [o.run for o in self.outcomes if o.run is not None and o.run.meta.status == "complete"]


def auto_rates(saturation_throughput: float) -> list[float]:
    """Rates below saturation: fractions of the request throughput the saturation run reached (3 significant
    digits, so a resumed campaign derives the same names)."""
    out = []
    for f in AUTO_FRACTIONS:
        r = saturation_throughput * f
        if r <= 0:
            continue
        digits = 3 - math.floor(math.log10(r)) - 1
        out.append(round(r, max(digits, 0)) if digits > 0 else float(round(r)))
    return sorted(set(out))


def plan_cells(spec: CampaignSpec, workloads: Mapping[str, Workload],
               configs: Callable[[str], Sequence[Configuration]] | None = None) -> list[Cell]:
    """The cells known before anything runs (auto-sweep rates are added after each saturation run); ``configs``:
    the knob configurations of each topology."""
    cells = []
    layouts = [(topo, c.label) for topo in spec.topologies for c in (configs(topo) if configs else [Configuration()])]
    for topo, label in layouts:
        for wname in spec.workloads:
            if spec.rates == "auto":
                rates: list[float | None] = [math.inf]
            elif isinstance(spec.rates, list):
                rates = list(spec.rates)
            else:
                rates = [None]
            for rate in rates:
                for rep in range(1, spec.repeat + 1):
                    cells.append(Cell(topo, wname, rate, rep, config=label))
    return cells


class CampaignStore:
    def __init__(self, spec: CampaignSpec, root: Path | None = None) -> None:
        self.spec = spec
        self.root = root or paths.runs_dir()
        self.dir = self.root / safe_name(spec.name)

    def open(self) -> bool:
        """Create or resume; True when resuming. A different spec under the same name is refused."""
        f = self.dir / CAMPAIGN_FILE
        if f.exists() or f.is_symlink():
            old = read_spec(f)
            if old.cells_key() != self.spec.cells_key():
                raise InputError(f"campaign {self.spec.name!r} exists with other cells", field="--campaign",
                                 hint="choose another --campaign name, or repeat the same command to resume")
            return True
        paths.make_dirs(self.dir)
        write_json(f, {**self.spec.to_dict(), "created": time.time()})
        return False

    def run_dir(self, cell: Cell, wl: Workload) -> Path:
        return self.dir / cell.name(wl)

    def finished(self, cell: Cell, wl: Workload) -> Run | None:
        d = self.run_dir(cell, wl)
        if not (d / RUN_FILE).exists():
            return None
        try:
            run = load_run(d)
        except InputError:
            return None
        return run if run.meta.status == "complete" and not run.unusable else None  # none done: measured again

    def clear(self, cell: Cell, wl: Workload) -> None:
        """Remove an unfinished attempt before running the cell again."""
        d = self.run_dir(cell, wl)
        if d.exists():
            shutil.rmtree(d)

    def record_failure(self, cell: Cell, wl: Workload, message: str, *, keep_runner_record: bool = False) -> Run:
        """A cell that failed without a run of its own; ``keep_runner_record``: the runner already wrote why into
        the cell's (freshly cleared) directory, and that record, with its details, is the one kept."""
        d = self.run_dir(cell, wl)
        if keep_runner_record and (d / RUN_FILE).exists():
            with contextlib.suppress(InputError):
                return load_run(d)
        paths.make_dirs(d)
        rate = wl.request_rate if cell.rate is None else cell.rate
        meta = RunMeta(campaign=safe_name(self.spec.name), name=d.name, topology=cell.topology,
                       workload=cell.workload, request_rate=None if math.isinf(rate) else rate, repeat=cell.repeat,
                       status="failed", message=message, ended=time.time(), knobs=config_values(cell.config))
        write_json(d / RUN_FILE, meta.to_dict())
        return load_run(d)


def gpu_memory_used_mib(nvml: Any, gpus: Sequence[int]) -> dict[int, float]:
    out = {}
    for g in gpus:
        handle = nvml.nvmlDeviceGetHandleByIndex(g)
        out[g] = float(nvml.nvmlDeviceGetMemoryInfo(handle).used) / 2**20
    return out


async def wait_gpus_free(host: Host, gpus: Sequence[int], timeout_s: float = GPU_FREE_TIMEOUT_S,
                         poll_s: float = 1.0) -> None:
    """Wait until every GPU of the next layout has released its memory; RunFailed after ``timeout_s``."""
    if not gpus:
        return
    try:
        nvml = host.nvml()
    except Exception:  # noqa: BLE001 - no NVML answers: nothing to check (the bring-up will say what it finds)
        return
    deadline = time.monotonic() + timeout_s
    used: dict[int, float] = {}
    while True:
        used = await asyncio.to_thread(gpu_memory_used_mib, nvml, gpus)
        if all(v < GPU_FREE_MIB for v in used.values()):
            return
        if time.monotonic() >= deadline:
            busy = ", ".join(f"GPU {g}: {v:,.0f} MiB" for g, v in used.items() if v >= GPU_FREE_MIB)
            raise RunFailed(f"GPU memory still in use {timeout_s:.0f} s after the previous layout stopped ({busy})",
                            hint="another process holds the GPUs; see 'disagg-tui watch'")
        await asyncio.sleep(poll_s)


Planner = Callable[[str], tuple[ModelProfile, LaunchPlan]]
#: a layout with knobs: (topology, configuration) → its plan (PlanRefused naming the knob where one cannot work)
KnobPlanner = Callable[[str, Configuration], tuple[ModelProfile, LaunchPlan]]


def config_values(label: str) -> dict[str, str]:
    """A configuration's label back as axis key → value (what a run stores)."""
    return dict(part.split("=", 1) for part in label.split() if "=" in part)
Notify = Callable[[str], None]


@dataclass
class CampaignRunner:
    spec: CampaignSpec
    lifecycle: Lifecycle
    host: Host
    planner: Planner
    workloads: Mapping[str, Workload]
    options: Callable[[Workload], BenchOptions]
    bus: EventBus = field(default_factory=EventBus)
    notify: Notify = print
    on_tick: Callable[[BenchTick], None] | None = None
    energy_for: Callable[[Sequence[int]], EnergyReader | None] | None = None  # an energy hook for these GPUs
    root: Path | None = None
    gpu_free_timeout_s: float = GPU_FREE_TIMEOUT_S
    wait_free: Callable[[Host, Sequence[int], float], Awaitable[None]] | None = None
    #: runs one cell: our load generator by default (``run_bench``); the CLI passes vllm bench's runner for
    #: ``--runner vllm``
    bench: BenchFn | None = None
    #: the knob configurations of each topology (``run --knob``) and the planner of one; None: no knobs
    configs: Callable[[str], Sequence[Configuration]] | None = None
    knob_planner: KnobPlanner | None = None
    #: what each run measured on a layout adds to its fingerprint (a layout across hosts: every host's); None: nothing
    fingerprint_for: Callable[[LayoutRecord], dict[str, Any]] | None = None

    _outcomes: dict[Cell, CellOutcome] = field(default_factory=dict, init=False, repr=False)
    _total: int = field(default=0, init=False, repr=False)

    def _step(self, step: str, text: str, *, quiet: bool = False, **where: Any) -> None:
        """Publish where the campaign is (a ``CampaignStep``) and tell the CLI (unless ``quiet``)."""
        done = len(self._outcomes)
        self.bus.publish(CampaignStep(campaign=self.spec.name, step=step, text=text, done=done,
                                      total=max(self._total, done), **where))
        if not quiet:
            self.notify(text)

    def _wl(self, cell: Cell) -> Workload:
        wl = self.workloads[cell.workload]
        if self.spec.num_prompts:
            wl = wl.with_overrides(num_prompts=self.spec.num_prompts)
        if self.spec.seed:
            wl = wl.with_overrides(seed=self.spec.seed)
        if cell.rate is not None:
            wl = wl.with_overrides(request_rate=cell.rate)
        # prompts of its own for every repeat and rate: vLLM's prefix cache must not serve a run from the last one
        rate = None if cell.rate is None else float(cell.rate)
        return wl.with_overrides(seed=run_seed(wl.seed, repeat=cell.repeat, rate=rate))

    async def run(self) -> CampaignResult:
        store = CampaignStore(self.spec, self.root)
        resumed = await asyncio.to_thread(store.open)
        result = CampaignResult(self.spec, store.dir)
        outcomes: dict[Cell, CellOutcome] = {}
        cells = plan_cells(self.spec, self.workloads, self.configs)
        self._outcomes, self._total = outcomes, len(cells)
        if resumed:
            self._step("resume", f"resuming campaign {self.spec.name} in {store.dir}")
        rng = random.Random(self.spec.seed)
        auto = self.spec.rates == "auto"

        known = set(cells)

        def todo_of(group: Sequence[Cell]) -> list[Cell]:
            known.update(group)  # an auto sweep's rates join the count once they are known
            self._total = len(known)
            pending = []
            for c in group:
                done = store.finished(c, self._wl(c))
                if done is None:
                    pending.append(c)
                elif c not in outcomes:
                    outcomes[c] = CellOutcome(c, "skipped", done)
            return pending

        layouts = list(dict.fromkeys((c.topology, c.config) for c in cells))
        for topo, label in layouts:
            name = f"{topo} [{label}]" if label else topo
            base_todo = todo_of([c for c in cells if c.topology == topo and c.config == label])
            derived_todo = todo_of(self._derived(store, topo, label)) if auto and not base_todo else []
            if not base_todo and not derived_todo:
                self._step("skip_layout", f"{name}: every cell already done", topology=topo)
                continue
            everything = base_todo + derived_todo
            try:
                profile, plan = self._plan(topo, label)
            except AppError as exc:
                await self._fail_all(store, outcomes, everything, f"plan refused: {exc.one_line()}")
                continue
            await self._stop_orphan(plan, store.dir)
            wait = self.wait_free or wait_gpus_free
            try:
                await wait(self.host, list(plan.gpus), self.gpu_free_timeout_s)
            except AppError as exc:
                await self._fail_all(store, outcomes, everything, exc.one_line())
                continue
            self._step("bring_up", f"{name}: bringing the layout up", topology=topo)
            try:
                record = await self.lifecycle.bring_up(profile, plan, self.host, self.bus)
            except AppError as exc:
                await self._fail_all(store, outcomes, everything, f"bring-up failed: {exc.one_line()}")
                continue
            try:
                rng.shuffle(base_todo)
                await self._run_cells(store, outcomes, record, plan, base_todo)
                if auto:
                    pending = todo_of(self._derived(store, topo, label))
                    rng.shuffle(pending)
                    await self._run_cells(store, outcomes, record, plan, pending)
            finally:
                self._step("tear_down", f"{name}: tearing the layout down", topology=topo)
                await self.lifecycle.tear_down(record, self.bus)
        result.outcomes = list(outcomes.values())
        return result

    def _plan(self, topo: str, label: str) -> tuple[ModelProfile, LaunchPlan]:
        if not label or self.configs is None or self.knob_planner is None:
            return self.planner(topo)
        config = next((c for c in self.configs(topo) if c.label == label), None)
        if config is None:
            raise AppError(f"no knob configuration {label!r} for {topo}")
        return self.knob_planner(topo, config)

    def _derived(self, store: CampaignStore, topo: str, label: str = "") -> list[Cell]:
        """The auto-sweep cells of a layout, from its saturation runs (mean over repeats)."""
        out: list[Cell] = []
        for wname in self.spec.workloads:
            sats = []
            for rep in range(1, self.spec.repeat + 1):
                c = Cell(topo, wname, math.inf, rep, config=label)
                run = store.finished(c, self._wl(c))
                if run is not None and run.summary.get("request_throughput"):
                    sats.append(float(run.summary["request_throughput"]))
            if not sats:
                continue
            for rate in auto_rates(sum(sats) / len(sats)):
                for rep in range(1, self.spec.repeat + 1):
                    out.append(Cell(topo, wname, rate, rep, derived=True, config=label))
        return out

    async def _stop_orphan(self, plan: LaunchPlan, campaign_dir: Path) -> None:
        rec = await asyncio.to_thread(orphaned_layout, plan, campaign_dir)
        if rec is not None:
            self._step("tear_down", f"{plan.topology}: stopping layout {rec.id}, left up by an interrupted run",
                       topology=plan.topology)
            await self.lifecycle.tear_down(rec, self.bus)

    async def _fail_all(self, store: CampaignStore, outcomes: dict[Cell, CellOutcome], cells: Sequence[Cell],
                        message: str) -> None:
        for c in cells:
            run = await asyncio.to_thread(store.record_failure, c, self._wl(c), message)
            outcomes[c] = CellOutcome(c, "failed", run, message)
        self._step("layout_failed", f"failed: {message}", topology=cells[0].topology if cells else "",
                   status="failed")

    async def _run_cells(self, store: CampaignStore, outcomes: dict[Cell, CellOutcome], record: LayoutRecord,
                         plan: LaunchPlan, cells: Sequence[Cell]) -> None:
        # NVML, the run directories and their records: off the event loop (a console runs on it)
        energy = await asyncio.to_thread(self.energy_for, plan.gpus) if self.energy_for is not None and cells \
            else None
        for cell in cells:
            wl = self._wl(cell)
            await asyncio.to_thread(store.clear, cell, wl)
            target = BenchTarget(endpoint=record.endpoint, topology=cell.topology, layout=record,
                                 plan=plan.to_dict(), campaign=self.spec.name, name=cell.name(wl),
                                 repeat=cell.repeat, energy=energy, runs_root=store.root,
                                 knobs=config_values(cell.config) if cell.config else None)
            if self.fingerprint_for is not None:
                target.fingerprint_extra = self.fingerprint_for(record)
            where: dict[str, Any] = {"topology": cell.topology, "workload": cell.workload,
                                     "request_rate": rate_label(wl.request_rate), "repeat": cell.repeat}
            self._step("cell", f"{cell.layout} × {cell.workload} @ {rate_label(wl.request_rate)} req/s"
                       + (f" (repeat {cell.repeat})" if self.spec.repeat > 1 else ""), **where)
            try:
                bench = self.bench or _ours
                run = await bench(self.options(wl), target, self.bus, self.on_tick)
            except AppError as exc:
                run = await asyncio.to_thread(
                    functools.partial(store.record_failure, cell, wl, exc.one_line(), keep_runner_record=True))
                outcomes[cell] = CellOutcome(cell, "failed", run, exc.one_line())
                self._step("cell_failed", f"failed: {exc.one_line()}", status="failed", run_dir=str(run.path),
                           **where)
                continue
            outcomes[cell] = CellOutcome(cell, run.meta.status, run, run.meta.message)
            self._step("cell_done", f"{run.id}: {run.meta.status}: {run.meta.message}", status=run.meta.status,
                       run_dir=str(run.path), quiet=run.meta.status == "complete", **where)


BenchFn = Callable[[BenchOptions, BenchTarget, EventBus | None, Callable[[BenchTick], None] | None],
                   Awaitable[Run]]


async def _ours(opts: BenchOptions, target: BenchTarget, bus: EventBus | None,
                on_tick: Callable[[BenchTick], None] | None) -> Run:
    return await run_bench(opts, target, bus=bus, on_tick=on_tick)


def campaign_runs(directory: Path) -> list[Run]:
    """Every run of a campaign directory (complete or not)."""
    return [load_run(p.parent) for p in sorted(directory.glob(f"*/{RUN_FILE}"))]
