"""``disagg-tui doctor``: each check passes, warns or fails with one line, on given host facts."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.helpers import free_port
from tui.cli.main import main
from tui.core.models import Catalog
from tui.core.plan.hostfacts import GpuInfo, HostFacts, Toolchain, VllmInfo, sim_facts
from tui.core.plan.planner import PlanOptions, plan
from tui.core.plan.preflight import Check
from tui.core.playbook.doctor import doctor
from tui.core.topology import parse_topology

GIB = 2**30


class FakeNvml:
    """The few pynvml calls the doctor makes, over fixed memory figures per GPU (bytes)."""

    def __init__(self, used: dict[int, int], total: int = 140 * GIB) -> None:
        self.used = used
        self.total = total

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index not in self.used:
            raise RuntimeError(f"no GPU {index}")
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        used = self.used[handle]
        return SimpleNamespace(total=self.total, used=used, free=self.total - used)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment with every cache under tmp_path (nothing of the real machine's)."""
    return {"HOME": str(tmp_path / "home"), "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache"),
            "HF_HOME": str(tmp_path / "hf")}


@pytest.fixture
def listener() -> Iterator[int]:
    """A port something listens on (an ephemeral one, never a fixed number)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


def by_name(checks: list[Check]) -> dict[str, Check]:
    out: dict[str, Check] = {}
    for c in checks:
        out.setdefault(c.name, c)
    return out


def run(facts: HostFacts, env: dict[str, str], nvml: Any = None, **kw: Any) -> dict[str, Check]:
    kw.setdefault("ports", [("endpoint", free_port())])
    kw.setdefault("min_cache_free_gib", 0.0)
    return by_name(doctor(facts, nvml, env=env, **kw))


def test_simulated_host_report(env: dict[str, str]) -> None:
    facts = sim_facts("b200", 2)
    c = run(facts, env, FakeNvml({0: 0, 1: 0}, total=179 * GIB))
    assert [x.status for x in c.values()] == ["pass"] * len(c)
    assert "SIMULATED" in c["host"].reason and "2× NVIDIA B200" in c["host"].reason
    assert "driver" not in c  # nobody asked for a real driver
    assert c["gpus"].reason.startswith("2 GPUs (0: NVIDIA B200")
    assert c["interconnect"].reason == "NVLink between GPU 0,1 (NV18)"
    assert c["vllm"].reason == "0.24.0 at (simulated)"
    assert "simulated servers do not write it" in c["compile cache"].reason
    assert c["gpu memory"].reason == "GPU 0 179/179 GiB free; GPU 1 179/179 GiB free"


def test_no_driver_fails_and_says_the_report_is_simulated(env: dict[str, str]) -> None:
    reason = "SIMULATED host: NVML did not initialise: NVML Shared Library Not Found"
    checks = doctor(sim_facts(), None, env=env, simulated_reason=reason, ports=[("x", free_port())],
                    min_cache_free_gib=0.0)
    assert checks[0] == Check("driver", "fail", reason + "; real launches are impossible, this report is for the "
                                                         "SIMULATED host")
    assert by_name(checks)["gpu memory"].status == "warn"  # no NVML to ask


def test_real_host_driver_and_gpu_count(env: dict[str, str]) -> None:
    facts = replace(sim_facts("h200", 1), simulated=False, driver="580.159.04", hostname="gpu7")
    c = run(facts, env, topology=parse_topology("tp2"))
    assert c["driver"].status == "pass" and c["driver"].reason.startswith("NVIDIA driver 580.159.04, CUDA 13.0")
    assert c["gpus"].status == "fail" and "tp2 needs 2 GPUs; this host has 1" in c["gpus"].reason
    empty = replace(facts, gpus=())
    assert run(empty, env)["gpus"] == Check("gpus", "fail", "no GPU found")


@pytest.mark.parametrize(("link", "status", "words"), [
    ("NV18", "pass", "NVLink between GPU 0,1 (NV18)"),
    ("PHB", "warn", "PCIe through the CPU's host bridge (PHB)"),
    ("SYS", "warn", "they sit on different NUMA nodes"),
])
def test_interconnect_between_the_gpus_used(env: dict[str, str], link: str, status: str, words: str) -> None:
    facts = replace(sim_facts("h200", 2), nvlink=(("X", link), (link, "X")))
    c = run(facts, env)["interconnect"]
    assert c.status == status and words in c.reason
    one = run(facts, env, topology=parse_topology("tp1"))["interconnect"]
    assert one == Check("interconnect", "pass", "one GPU (0): no GPU-to-GPU traffic")
    assert run(replace(facts, nvlink=()), env)["interconnect"].status == "warn"


def test_toolchain_and_flashinfer_cubin(env: dict[str, str]) -> None:
    base = sim_facts("b200", 2)
    none = replace(base, toolchain=Toolchain(), vllm=replace(base.vllm, flashinfer_cubin=None))  # type: ignore[arg-type]
    c = run(none, env)
    assert c["nvcc"].status == "warn" and "turns the FlashInfer sampler off" in c["nvcc"].reason
    assert c["flashinfer-cubin"].status == "warn" and "no usable nvcc" in c["flashinfer-cubin"].reason
    silent = replace(base, toolchain=Toolchain(nvcc_in_default="/usr/local/cuda/bin/nvcc"),
                     vllm=replace(base.vllm, flashinfer_cubin=None))  # type: ignore[arg-type]
    c = run(silent, env)
    assert c["nvcc"].status == "warn" and "JIT-compile FlashInfer kernels silently" in c["nvcc"].reason
    assert "first start JIT-compiles FlashInfer kernels" in c["flashinfer-cubin"].reason
    home = replace(base, toolchain=Toolchain(cuda_home="/opt/empty"))
    assert "CUDA_HOME=/opt/empty has no bin/nvcc" in run(home, env)["nvcc"].reason


def test_vllm_version_location_and_nixl(env: dict[str, str]) -> None:
    base = sim_facts("b200", 2)
    newer = replace(base, vllm=VllmInfo("vllm", "/venv/bin/vllm", "0.25.1", nixl=None, flashinfer_cubin="0.6"))
    c = run(newer, env)
    assert c["vllm"].status == "warn" and "0.25.1 at /venv/bin/vllm; checked with 0.24.0" in c["vllm"].reason
    assert c["nixl"] == Check("nixl", "pass", "not installed (only disaggregated <X>p<Y>d layouts need it)")
    pd = run(newer, env, topology=parse_topology("1p1d"))
    assert pd["nixl"].status == "fail" and "pip install nixl" in pd["nixl"].reason
    missing = replace(base, vllm=VllmInfo("vllm", None, None, error="'vllm' not found on PATH"))
    c = run(missing, env)
    assert c["vllm"].status == "fail" and "'vllm' not found on PATH" in c["vllm"].reason
    assert c["flashinfer-cubin"].status == "warn"


def test_ports_busy_and_free(env: dict[str, str], listener: int) -> None:
    c = run(sim_facts(), env, ports=[("endpoint", listener)])["ports"]
    assert c.status == "warn" and f"in use: {listener} (endpoint)" in c.reason
    facts = sim_facts("b200", 2)
    profile = Catalog.load().model("dummy-qwen3-8b")
    layout = plan(profile, "tp1", facts, PlanOptions(port=listener))
    c = by_name(doctor(facts, None, env=env, plan=layout, profile=profile, min_cache_free_gib=0.0))["ports"]
    assert c.status == "fail" and str(listener) in c.reason  # the launch preflight's check, as up runs it


def test_gpu_memory_taken(env: dict[str, str]) -> None:
    facts = sim_facts("h200", 2)
    c = run(facts, env, FakeNvml({0: 100 * GIB, 1: 0}))["gpu memory"]
    assert c.status == "warn" and c.reason.startswith("GPU 0 has 100.0 GiB in use")
    profile = Catalog.load().model("dummy-qwen3-8b")
    layout = plan(profile, "tp1", facts, PlanOptions(port=free_port()))
    c = by_name(doctor(facts, FakeNvml({0: 100 * GIB, 1: 0}), env=env, plan=layout, min_cache_free_gib=0.0))
    assert c["gpu memory"].status == "fail" and c["plan"].reason == "dummy-qwen3-8b as tp1 on GPU 0"


def test_compile_cache_location_and_disk(env: dict[str, str], tmp_path: Path) -> None:
    c = run(sim_facts(), env)["compile cache"]
    assert c.status == "pass"
    assert c.reason.startswith(f"{tmp_path / 'vllm-cache'} (created on first start, from VLLM_CACHE_ROOT): ")
    (tmp_path / "vllm-cache").mkdir()
    c = by_name(doctor(sim_facts(), None, env=env, ports=[], min_cache_free_gib=1e9))["compile cache"]
    assert c.status == "warn" and "(exists, from VLLM_CACHE_ROOT)" in c.reason and "only" in c.reason
    xdg = {"HOME": env["HOME"], "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert run(sim_facts(), xdg)["compile cache"].reason.startswith(str(tmp_path / "xdg" / "vllm"))


def _real(facts: HostFacts) -> HostFacts:
    return replace(facts, simulated=False)


def test_model_files_local_folder(env: dict[str, str], tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    profile = replace(Catalog.load().model("dummy-qwen3-8b"), model=str(folder))
    c = run(_real(sim_facts("h200", 1)), env, profile=profile)["model files"]
    assert c.status == "pass" and c.reason.startswith(f"{folder} (0.0 GiB, 2 files): config and tokenizer present")
    (folder / "tokenizer.json").unlink()
    assert run(_real(sim_facts("h200", 1)), env, profile=profile)["model files"].status == "fail"
    real = replace(profile, load_format=None)
    (folder / "model.safetensors").write_bytes(b"\0" * 4096)
    c = run(_real(sim_facts("h200", 1)), env, profile=real)["model files"]
    assert c == Check("model files", "pass", f"{folder} (0.0 GiB, 2 files)")
    gone = replace(profile, model=str(tmp_path / "missing"))
    assert run(_real(sim_facts("h200", 1)), env, profile=gone)["model files"].reason.endswith("no such folder")
    sim = run(sim_facts(), env, profile=gone)["model files"]
    assert sim.status == "pass" and "not needed on the SIMULATED host" in sim.reason


def test_model_files_hugging_face_cache_and_token(env: dict[str, str], tmp_path: Path) -> None:
    profile = Catalog.load().model("gemma-4-26b-a4b-fp8")
    facts = _real(sim_facts("h200", 2))
    secret = "hf_SECRET_value_never_printed"
    c = run(facts, {**env, "HF_TOKEN": secret}, profile=profile)["model files"]
    assert c.status == "warn"
    assert f"not in the Hugging Face cache ({tmp_path / 'hf' / 'hub'})" in c.reason
    assert "a token is set (HF_TOKEN)" in c.reason and secret not in c.reason
    c = run(facts, env, profile=profile)["model files"]
    assert "no Hugging Face token" in c.reason and "gated repository cannot be downloaded" in c.reason
    offline = run(facts, {**env, "HF_HUB_OFFLINE": "1"}, profile=profile)["model files"]
    assert offline.status == "fail" and "HF_HUB_OFFLINE" in offline.reason
    # a snapshot in the cache: files are symlinks into blobs/, as huggingface_hub lays them out
    repo = tmp_path / "hf" / "hub" / "models--RedHatAI--gemma-4-26B-A4B-it-FP8-Dynamic"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc").write_bytes(b"\0" * 2048)
    (repo / "blobs" / "def").write_text("{}")
    snap = repo / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    (snap / "model-00001-of-00001.safetensors").symlink_to(repo / "blobs" / "abc")
    (snap / "config.json").symlink_to(repo / "blobs" / "def")
    c = run(facts, env, profile=profile)["model files"]
    assert c == Check("model files", "pass", f"{snap} (0.0 GiB, 2 files)")


def test_model_specific_known_issues(env: dict[str, str]) -> None:
    cat = Catalog.load()
    qwen, gemma = cat.model("qwen3.6-27b-nvfp4"), cat.model("gemma-4-26b-a4b-fp8")
    h200 = sim_facts("h200", 2)
    checks = doctor(h200, None, env=env, profile=qwen, ports=[], min_cache_free_gib=0.0)
    [nvfp4] = [c for c in checks if c.name.startswith("known issues") and c.status == "fail"]
    assert "NVFP4 needs compute capability 10.0 (Blackwell); GPU 0 is NVIDIA H200 (9.0)" in nvfp4.reason
    b200 = sim_facts("b200", 2)
    dp = by_name(doctor(b200, None, env=env, profile=gemma, topology=parse_topology("dp2"), ports=[],
                        min_cache_free_gib=0.0))["known issues: gemma-4-26b-a4b-fp8"]
    assert dp.status == "warn" and "serve it as tp2" in dp.reason and "--moe-backend triton" in dp.reason
    layout = plan(qwen, "1p1d", b200, PlanOptions(port=free_port(), server_base_port=free_port()))
    hybrid = by_name(doctor(b200, None, env=env, profile=qwen, plan=layout, min_cache_free_gib=0.0))
    assert hybrid["known issues: qwen3.6-27b-nvfp4"] == Check(
        "known issues: qwen3.6-27b-nvfp4", "pass",
        "hybrid attention behind NIXL: the plan sets VLLM_SSM_CONV_STATE_LAYOUT=DS")
    assert hybrid["nixl"].status == "pass"  # from the launch preflight, for a plan with a proxy
    stripped = replace(layout, servers=tuple(replace(s, env=tuple(kv for kv in s.env
                                                                  if kv[0] != "VLLM_SSM_CONV_STATE_LAYOUT"))
                                             for s in layout.servers))
    bad = by_name(doctor(b200, None, env=env, profile=qwen, plan=stripped, min_cache_free_gib=0.0))
    assert bad["known issues: qwen3.6-27b-nvfp4"].status == "fail"
    assert bad["known issues: qwen3.6-27b-nvfp4"].reason.endswith("does not set it for prefill-0, decode-0")
    # a refused plan (NVFP4 on Hopper): no plan to speak of, so the check says what the planner would do
    refused = [c for c in doctor(h200, None, env=env, profile=qwen, topology=parse_topology("1p1d"),
                                 plan_refused="needs Blackwell", ports=[], min_cache_free_gib=0.0)
               if c.name.startswith("known issues") and c.status == "pass"]
    assert [c.reason for c in refused] == ["hybrid attention behind NIXL needs VLLM_SSM_CONV_STATE_LAYOUT=DS; the "
                                           "planner sets it"]


def test_plan_refused_is_a_failing_check(env: dict[str, str]) -> None:
    c = run(sim_facts("h200", 2), env, topology=parse_topology("1p1d"), plan_refused="needs Blackwell")
    assert c["plan"] == Check("plan", "fail", "needs Blackwell")


def test_ignored_attention_backend_variable(env: dict[str, str]) -> None:
    c = run(sim_facts(), {**env, "VLLM_ATTENTION_BACKEND": "TRITON_ATTN"})["environment"]
    assert c.status == "warn" and "use '--attention-backend NAME'" in c.reason


def test_gpu_list_and_names_on_a_mixed_host(env: dict[str, str]) -> None:
    gpus = (GpuInfo(0, "NVIDIA H200", "u0", 143771, 9.0), GpuInfo(1, "NVIDIA B200", "u1", 183359, 10.0))
    c = run(replace(sim_facts(), gpus=gpus, nvlink=()), env)["gpus"]
    assert c.reason == "2 GPUs (0: NVIDIA H200 140 GiB cc 9.0; 1: NVIDIA B200 179 GiB cc 10.0)"


# --- the command ---------------------------------------------------------------------------------------------


def test_doctor_command_on_the_simulated_host(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "cache"))
    code = main(["doctor", "--sim", "--json"])
    out, _ = capsys.readouterr()
    data = json.loads(out)
    assert data["simulated"] is True and data["host"].startswith("SIMULATED host")
    names = [c["name"] for c in data["checks"]]
    for name in ("host", "gpus", "interconnect", "gpu memory", "nvcc", "flashinfer-cubin", "vllm", "nixl", "ports",
                 "compile cache", "environment"):
        assert name in names
    assert code == (1 if data["summary"]["fail"] else 0)
    code = main(["doctor", "--sim", "--sim-gpu", "h200", "--model", "qwen3.6-27b-nvfp4", "--topology", "1p1d"])
    out, _ = capsys.readouterr()
    assert code == 1
    assert out.splitlines()[0].startswith("doctor: SIMULATED host")
    assert "[FAIL] plan: qwen3.6-27b-nvfp4 is NVFP4, which needs compute capability 10.0" in out
    assert out.splitlines()[-1].endswith("failed") and " 2 failed" in out.splitlines()[-1]
