"""The GPU sampler: on the fake NVML with claims, owner mapping through real process trees, NA values, replay."""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from tests.helpers import eventually
from tests.telemetry_helpers import H200, Tree, spawn_tree
from tui.core.events import EventBus
from tui.core.launch.state import LayoutRecord, ProcessRecord, StateStore
from tui.core.telemetry.events import GpuSampled
from tui.core.telemetry.gpu import EXACT, GUESSED, UNKNOWN, decode_throttle
from tui.core.telemetry.layout import ActiveLayout
from tui.core.telemetry.procmap import ProcessOwners, ServerRef, refs_from_layout
from tui.core.telemetry.sampler import GpuSampler, SamplerThread, TelemetryUnavailable
from tui.sim import fakenvml as fn
from tui.sim import gpuphysics as gp
from tui.sim.gpustate import Claim, SimGpuState

GIB = 2**30


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    SimGpuState(tmp_path).init_host("h200", 2)
    fn.configure(tmp_path)
    fn.nvmlInit()
    yield tmp_path
    fn.nvmlShutdown()
    fn.configure(None)


@pytest.fixture
def trees() -> Iterator[list[Tree]]:
    made: list[Tree] = []
    yield made
    for t in made:
        t.kill()


def _layout(records: list[ProcessRecord], servers: list[dict[str, Any]], status: str = "ready") -> LayoutRecord:
    return LayoutRecord(id="test-layout", created=time.time(), simulated=True, status=status,
                        plan={"topology": "tp2", "gpus": [0, 1], "servers": servers}, processes=records)


def _record(name: str, role: str, tree: Tree, log: Path, gpus: list[int], **kw: Any) -> ProcessRecord:
    return ProcessRecord(name=name, role=role, pid=tree.api_pid, pgid=tree.api_pid, create_time=tree.create_time,
                         log=str(log), url="http://127.0.0.1:9", gpus=gpus, **kw)


def test_tp2_workers_are_mapped_exactly_with_ranks_from_title_and_log(state_dir: Path, tmp_path: Path,
                                                                       trees: list[Tree]) -> None:
    # worker 0 carries its title (setproctitle), worker 1 does not: its rank comes from the server's log
    tree = spawn_tree(["VLLM::Worker_TP0", "-"])
    trees.append(tree)
    w0, w1 = tree.worker_pids
    log = tmp_path / "server.log"
    log.write_text(f"(APIServer pid={tree.api_pid}) INFO 11-29 07:10:40 [api_utils.py:273] non-default args\n"
                   f"(Worker pid={w1}) INFO 11-29 07:10:41 [gpu_worker.py:1] starting\n"
                   f"(Worker_TP1 pid={w1}) INFO 11-29 07:10:42 [model_runner.py:302] Model loading took 8 GiB\n")
    layout = _layout([_record("server", "single", tree, log, [0, 1])],
                     [{"name": "server", "tp": 2, "dp": 1, "gpus": [0, 1], "argv": ["vllm", "serve", "m", "-tp", "2"]}])
    sim = SimGpuState(state_dir)
    sim.write_claim(Claim(pid=w0, name="VLLM::Worker_TP0", gpus=[0], memory_bytes={0: 60 * GIB}, util={0: 0.5}))
    sim.write_claim(Claim(pid=w1, name="VLLM::Worker_TP1", gpus=[1], memory_bytes={1: 61 * GIB}, util={1: 0.5}))
    sampler = GpuSampler(fn, owners=ProcessOwners(refs_from_layout(layout)))
    g0, g1 = sampler.sample()
    (p0,) = g0.processes
    (p1,) = g1.processes
    assert (p0.pid, p0.owner, p0.role, p0.tp_rank, p0.dp_rank, p0.mapping) == (w0, "server", "single", 0, None, EXACT)
    assert p0.name == "VLLM::Worker_TP0" and p0.rank == "TP0"
    assert (p1.pid, p1.owner, p1.tp_rank, p1.mapping, p1.memory) == (w1, "server", 1, EXACT, 61 * GIB)
    assert "Worker_TP1" in p1.name
    assert p0.layout == "test-layout"


def test_memory_belongs_to_the_engine_not_the_api_process(state_dir: Path, tmp_path: Path,
                                                           trees: list[Tree]) -> None:
    tree = spawn_tree([])
    trees.append(tree)
    layout = _layout([_record("prefill-0", "prefill", tree, tmp_path / "none.log", [0])],
                     [{"name": "prefill-0", "tp": 1, "dp": 1, "gpus": [0]}])
    SimGpuState(state_dir).write_claim(Claim(pid=tree.engine_pid, gpus=[0], memory_bytes={0: 120 * GIB}))
    (proc,) = GpuSampler(fn, owners=ProcessOwners(refs_from_layout(layout))).sample()[0].processes
    assert proc.pid == tree.engine_pid != tree.api_pid
    assert (proc.owner, proc.role, proc.name, proc.mapping, proc.rank) == ("prefill-0", "prefill",
                                                                          "VLLM::EngineCore", EXACT, None)


def test_reused_pid_is_not_taken_for_ours(state_dir: Path, tmp_path: Path, trees: list[Tree]) -> None:
    tree = spawn_tree([])
    trees.append(tree)
    record = _record("server", "single", tree, tmp_path / "x.log", [0])
    record.create_time -= 3600  # the recorded server started an hour before this process: the pid was reused
    layout = _layout([record], [{"name": "server", "gpus": [0]}])
    SimGpuState(state_dir).write_claim(Claim(pid=tree.engine_pid, gpus=[0], memory_bytes={0: 100 * GIB}))
    (proc,) = GpuSampler(fn, owners=ProcessOwners(refs_from_layout(layout))).sample()[0].processes
    assert proc.mapping != EXACT


def test_engine_left_behind_is_found_by_process_group(state_dir: Path, tmp_path: Path, trees: list[Tree]) -> None:
    tree = spawn_tree([], api_exits=True)  # the API server died; its engine lives on, reparented
    trees.append(tree)
    layout = _layout([_record("decode-0", "decode", tree, tmp_path / "x.log", [1])],
                     [{"name": "decode-0", "gpus": [1]}])
    SimGpuState(state_dir).write_claim(Claim(pid=tree.engine_pid, gpus=[1], memory_bytes={1: 90 * GIB}))
    (proc,) = GpuSampler(fn, owners=ProcessOwners(refs_from_layout(layout))).sample()[1].processes
    assert (proc.owner, proc.role, proc.mapping) == ("decode-0", "decode", EXACT)


def _invisible_pid() -> int:
    """A pid no process can have here (above pid_max): what NVML reports for a server in a container."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 12345


def test_pids_from_another_namespace_are_guessed_by_gpu_and_memory() -> None:
    total = 141 * GIB
    a = ServerRef(name="twoA", role="single", pid=1, pgid=1, create_time=0.0, gpus=(0,), gpu_memory_utilization=0.4,
                  started=10.0)
    b = ServerRef(name="twoB", role="single", pid=2, pgid=2, create_time=0.0, gpus=(0,), gpu_memory_utilization=0.4,
                  started=20.0)
    big = ServerRef(name="big", role="single", pid=3, pgid=3, create_time=0.0, gpus=(1,),
                    gpu_memory_utilization=0.9, started=5.0)
    owners = ProcessOwners([a, b, big])
    pid = _invisible_pid()
    # two servers on one GPU with the same share (fixtures/two_servers): told apart by start order ↔ pid order
    procs = owners.assign(0, total, [(pid + 5, int(0.41 * total), "compute"), (pid, int(0.41 * total), "compute")])
    assert {(p.pid, p.owner, p.mapping) for p in procs} == {(pid, "twoA", GUESSED), (pid + 5, "twoB", GUESSED)}
    (only,) = owners.assign(1, total, [(pid + 9, int(0.88 * total), "compute")])
    assert (only.owner, only.mapping, only.name) == ("big", GUESSED, "")
    # a GPU no server was given: not ours
    (stray,) = owners.assign(2, total, [(pid + 11, GIB, "compute")])
    assert (stray.owner, stray.mapping) == (None, UNKNOWN)


def test_guessed_ranks_follow_gpu_position() -> None:
    tp = ServerRef(name="server", role="single", pid=1, pgid=1, create_time=0.0, gpus=(2, 3), tp=2)
    dp = ServerRef(name="dp", role="single", pid=2, pgid=2, create_time=0.0, gpus=(4, 5), dp=2)
    owners = ProcessOwners([tp, dp])
    pid = _invisible_pid()
    assert owners.assign(3, 100 * GIB, [(pid, 90 * GIB, "compute")])[0].tp_rank == 1
    p = owners.assign(5, 100 * GIB, [(pid + 1, 90 * GIB, "compute")])[0]
    assert (p.dp_rank, p.tp_rank, p.rank) == (1, None, "DP1")


def test_foreign_process_beside_ours_is_not_attributed(state_dir: Path, tmp_path: Path, trees: list[Tree]) -> None:
    tree = spawn_tree([])
    stranger = spawn_tree([])  # someone else's job on the same GPU, not in the state file
    trees += [tree, stranger]
    layout = _layout([_record("server", "single", tree, tmp_path / "x.log", [0])], [{"name": "server", "gpus": [0]}])
    sim = SimGpuState(state_dir)
    sim.write_claim(Claim(pid=tree.engine_pid, gpus=[0], memory_bytes={0: 100 * GIB}))
    sim.write_claim(Claim(pid=stranger.engine_pid, gpus=[0], memory_bytes={0: 10 * GIB}))
    procs = {p.pid: p for p in GpuSampler(fn, owners=ProcessOwners(refs_from_layout(layout))).sample()[0].processes}
    assert procs[tree.engine_pid].mapping == EXACT
    assert (procs[stranger.engine_pid].owner, procs[stranger.engine_pid].mapping) == (None, UNKNOWN)


def test_owner_lookups_are_cached(state_dir: Path, tmp_path: Path, trees: list[Tree],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    tree = spawn_tree([])
    trees.append(tree)
    layout = _layout([_record("server", "single", tree, tmp_path / "x.log", [0])], [{"name": "server", "gpus": [0]}])
    SimGpuState(state_dir).write_claim(Claim(pid=tree.engine_pid, gpus=[0], memory_bytes={0: GIB}))
    owners = ProcessOwners(refs_from_layout(layout))
    calls = []
    real = owners._resolve
    monkeypatch.setattr(owners, "_resolve", lambda *a: calls.append(a[0]) or real(*a))
    sampler = GpuSampler(fn, owners=owners)
    for _ in range(5):
        sampler.sample()
    assert calls == [tree.engine_pid]


def test_active_layout_feeds_the_mapping_from_the_state_file(state_dir: Path, tmp_path: Path,
                                                              trees: list[Tree]) -> None:
    tree = spawn_tree([])
    trees.append(tree)
    store = StateStore(tmp_path / "state")
    active = ActiveLayout(store, min_interval_s=0.0)
    SimGpuState(state_dir).write_claim(Claim(pid=tree.engine_pid, gpus=[1], memory_bytes={1: GIB}))
    sampler = GpuSampler(fn, owners=ProcessOwners(active.refs))
    assert sampler.sample()[1].processes[0].mapping == UNKNOWN  # no layout yet
    with store.locked() as layouts:
        layouts["test-layout"] = _layout([_record("server", "single", tree, tmp_path / "x.log", [1])],
                                         [{"name": "server", "gpus": [1]}])
    assert sampler.sample()[1].processes[0].owner == "server"


# --- not-available values ---------------------------------------------------------------------------------------


class Spy:
    """A pynvml-like module around the fake: counts calls, and can break chosen functions."""

    def __init__(self, inner: Any, broken: dict[str, BaseException] | None = None, missing: set[str] | None = None
                 ) -> None:
        self._inner = inner
        self.calls: dict[str, int] = {}
        self._broken = broken or {}
        self._missing = missing or set()

    def __getattr__(self, name: str) -> Any:
        if name in self._missing:
            raise AttributeError(name)
        target = getattr(self._inner, name)
        if not callable(target) or isinstance(target, type):
            return target

        def call(*args: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            if name in self._broken:
                raise self._broken[name]
            return target(*args)

        return call


def test_unsupported_metrics_become_none_with_a_reason_and_are_not_asked_again(tmp_path: Path) -> None:
    SimGpuState(tmp_path).init_host("b200", 2)
    fn.configure(tmp_path, unsupported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetCurrentClocksEventReasons",
                                        "nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetUtilizationRates"})
    fn.nvmlInit()
    try:
        spy = Spy(fn, broken={"nvmlDeviceGetTemperature": RuntimeError("sensor glitch")},
                  missing={"nvmlDeviceGetTotalEnergyConsumption"})
        sampler = GpuSampler(spy)
        for _ in range(3):
            samples = sampler.sample()
        g = samples[0]
        assert g.power_w is None and g.reason("power_w") == "Not Supported (NVML 3)"
        assert g.temp_c is None and g.reason("temp_c") == "sensor glitch"
        assert g.energy_j is None and "not in this NVML binding" in (g.reason("energy_j") or "")
        assert g.throttle is None and g.reason("throttle") is not None
        assert g.util_gpu is None and g.reason("util_gpu") == g.reason("util_mem") == "Not Supported (NVML 3)"
        assert g.mem_used == 0 and g.sm_clock_mhz is not None and g.mem_clock_mhz is not None  # the rest is read
        assert spy.calls["nvmlDeviceGetPowerUsage"] == 2  # once per GPU, never again
        assert spy.calls["nvmlDeviceGetTemperature"] == 6  # a transient failure is retried
        assert g.reason("mem_used") is None and g.reason("sm_clock_mhz") is None
    finally:
        fn.nvmlShutdown()
        fn.configure(None)


def test_a_driver_that_cannot_list_gpus_is_one_clear_message() -> None:
    spy = Spy(SimpleNamespace(nvmlDeviceGetCount=lambda: 0, NVMLError=pynvml.NVMLError),
              broken={"nvmlDeviceGetCount": pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)})
    with pytest.raises(TelemetryUnavailable, match="NVML cannot list the GPUs: Driver Not Loaded"):
        GpuSampler(spy).sample()
    event = SamplerThread(GpuSampler(spy), None).sample_once()
    assert event.gpus == () and event.error is not None and "hint" in event.error


def test_throttle_names() -> None:
    assert decode_throttle(0) == ()
    assert decode_throttle(0x1 | 0x4) == ("gpu_idle", "sw_power_cap")
    assert decode_throttle(0x40 | 0x10000) == ("hw_thermal_slowdown", "0x10000")


def test_sampler_thread_publishes_at_its_rate(state_dir: Path) -> None:
    bus = EventBus()
    got: list[Any] = []
    bus.subscribe(got.append)  # no loop attached: published from the sampler's thread
    thread = SamplerThread(GpuSampler(fn), bus, rate_hz=10.0, host_label="SIMULATED host", simulated=True)
    t0 = time.monotonic()
    thread.start()
    eventually(lambda: len(got) >= 5, 30, "five samples")  # however slow the machine (issue 22, finding 7)
    thread.stop()
    elapsed = time.monotonic() - t0
    n = len(got)
    assert 5 <= n <= elapsed * 10.0 + 2  # at its rate at most: a late sample is never made up by a burst
    assert all(b.ts - a.ts > 0.05 for a, b in itertools.pairwise(got))
    assert all(isinstance(e, GpuSampled) and len(e.gpus) == 2 and e.simulated for e in got)
    time.sleep(0.25)
    assert len(got) == n  # stopped means stopped
    with pytest.raises(ValueError, match="10"):
        SamplerThread(GpuSampler(fn), bus, rate_hz=11.0)


def test_events_round_trip_through_json(state_dir: Path) -> None:
    from tui.core.events import event_from_dict

    SimGpuState(state_dir).write_claim(Claim(pid=os.getpid(), gpus=[0], memory_bytes={0: GIB}, util={0: 0.3}))
    event = SamplerThread(GpuSampler(fn), None).sample_once()
    again = event_from_dict(json.loads(json.dumps(event.to_dict())))
    assert again == event


# --- replaying the real H200 NVML series -----------------------------------------------------------------------


class ReplayNvml:
    """A pynvml-like module answering with one recorded line of ``rerun/nvml/*.jsonl`` (real H200 readings)."""

    NVMLError = pynvml.NVMLError

    def __init__(self, head: dict[str, Any], row: dict[str, Any]) -> None:
        self.head, self.row = head, row

    def nvmlDeviceGetCount(self) -> int:
        return int(self.head["count"])

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.head["driver"])

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self.head["cuda_driver"])

    def nvmlSystemGetNVMLVersion(self) -> str:
        return str(self.head["nvml"])

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return str(self.row["name"]).encode()

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return str(self.row["uuid"])

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(total=self.row["mem_total"], used=self.row["mem_used"], free=self.row["mem_free"])

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self.row["util_gpu"], memory=self.row["util_mem"])

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self.row["power_mw"])

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return int(self.row["power_limit_mw"])

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return int(self.row["temp_c"])

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return int(self.row["mem_clock_mhz"] if kind == pynvml.NVML_CLOCK_MEM else self.row["sm_clock_mhz"])

    def nvmlDeviceGetPerformanceState(self, h: int) -> int:
        return int(self.row["pstate"])

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used_gpu_memory"]) for p in self.row["procs"]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return []

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("nvmlDevice", "nvmlSystem")):  # not recorded: this "driver" does not support it
            def unsupported(*args: Any) -> Any:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return unsupported
        raise AttributeError(name)


@pytest.mark.parametrize("series", ["bench1_in512_out2048_n128", "bench2_in7500_out200_n128"])
def test_replayed_h200_series_reads_back_in_app_units(series: str) -> None:
    lines = (H200 / "rerun" / "nvml" / f"{series}_nvml.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    rows = [json.loads(x) for x in lines[1:]]
    assert len(rows) == 40
    for row in rows:
        nvml = ReplayNvml(head, row)
        sampler = GpuSampler(nvml)
        (g,) = sampler.sample()
        assert (g.name, g.uuid) == ("NVIDIA H200", row["uuid"])
        assert g.util_gpu == row["util_gpu"] and g.util_mem == row["util_mem"]
        assert g.mem_used == row["mem_used"] and g.mem_total == row["mem_total"]
        assert g.power_w == row["power_mw"] / 1000 and g.power_limit_w == 700.0
        assert (g.temp_c, g.sm_clock_mhz, g.mem_clock_mhz) == (row["temp_c"], row["sm_clock_mhz"], 3201)
        (p,) = g.processes
        assert (p.pid, p.memory, p.mapping) == (row["procs"][0]["pid"], row["procs"][0]["used_gpu_memory"], UNKNOWN)
        assert g.energy_j is None and g.reason("energy_j") == "Not Supported (NVML 3)"
        assert g.reason("nvlink_tx_bps") == "no active NVLink on this GPU"
    facts = GpuSampler(ReplayNvml(head, rows[0])).host_facts()
    assert (facts.driver, facts.cuda_driver, facts.nvml_version) == ("580.159.04", "13.0", "13.580.159.04")
    assert facts.links == (("X",),)
    # under load: every reading busy, power near the limit after the first
    assert min(r["util_gpu"] for r in rows) >= 93


def test_memory_is_read_as_nvidia_smi_shows_it(state_dir: Path) -> None:
    SimGpuState(state_dir).write_claim(Claim(pid=os.getpid(), gpus=[0], memory_bytes={0: 100 * GIB}))
    g = GpuSampler(fn).sample()[0]
    assert g.mem_used == 100 * GIB + gp.CONTEXT_OVERHEAD_BYTES  # nvmlMemory_v2: the driver's reserve apart

    class OldDriver(Spy):
        def __getattr__(self, name: str) -> Any:
            if name == "nvmlDeviceGetMemoryInfo":
                def info(handle: Any, version: int | None = None) -> Any:
                    self.calls[name] = self.calls.get(name, 0) + 1
                    if version is not None:
                        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
                    return fn.nvmlDeviceGetMemoryInfo(handle)
                return info
            return super().__getattr__(name)

    old = OldDriver(fn)
    sampler = GpuSampler(old)
    for _ in range(3):
        g = sampler.sample()[0]
    assert g.mem_used == 100 * GIB + gp.CONTEXT_OVERHEAD_BYTES + gp.RESERVED_BYTES  # v1: reserve counted as used
    assert g.reason("mem_used") is None
    # per GPU: the total once (static), v2 once (then known missing), v1 at each of the 3 samples
    assert old.calls["nvmlDeviceGetMemoryInfo"] == 2 * (1 + 1 + 3)


def test_topology_text_has_nvidia_smi_topo_cells() -> None:
    """``nvidia-smi topo -m`` on the captured H200: ``GPU0  X  0-15  0  N/A`` (the last is the GPU's own NUMA id)."""
    text = (H200 / "smi" / "nvidia-smi_topo-m.txt").read_text()
    smi_row = next(line for line in text.splitlines() if line.startswith("GPU0")).split()
    from tui.core.telemetry.gpu import GpuAffinity, GpuHostFacts, cpu_list

    facts = GpuHostFacts(driver="580.159.04", cuda_driver="13.0", nvml_version=None, count=1,
                         names=("NVIDIA H200",), uuids=("GPU-x",), links=(("X",),),
                         affinity=(GpuAffinity(0, cpu_list(list(range(16))), 0),))
    ours = facts.topo_text().splitlines()[1].split()
    assert ours == smi_row[:4]
    assert cpu_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
