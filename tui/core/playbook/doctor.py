"""``disagg-tui doctor``: is this host ready to serve, and what will go wrong first? Each check passes, warns or
fails with one line. It extends the per-launch preflight (``tui.core.plan.preflight``) with host-wide checks: driver and
GPUs, the links between the GPUs a plan uses, the CUDA toolchain FlashInfer would JIT with, vLLM and its packages,
free ports and GPU memory, the compile cache's disk, the model's files, and what is known to fail for a model.

Blocking (NVML, sockets, file-system walks): run it off the event loop.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tui.core.plan import planner
from tui.core.plan.hostfacts import HostFacts
from tui.core.plan.planner import LaunchPlan
from tui.core.plan.preflight import (
    FAIL,
    PASS,
    WARN,
    Check,
    check_gpus_free,
    check_ports,
    check_toolchain,
    check_vllm,
    port_free,
)
from tui.core.playbook.weights import hf_hub_cache, hf_token_source, locate_model
from tui.core.profiles import ModelProfile
from tui.core.topology import Topology

GIB = 2**30
#: free disk below which the compile cache warns. A policy floor, not a measurement: torch.compile/inductor
#: artefacts of one model and config are hundreds of MB and FlashInfer's JIT cache adds to them; a few GiB
#: leaves room for several profiles without the disk filling up mid-start.
MIN_CACHE_FREE_GIB = 5.0
#: GPU memory in use (MiB) above which a GPU is taken to be busy (the same threshold as the launch preflight)
BUSY_MIB = 2048
_LINK_WORDS = {
    "PIX": "PCIe through one switch", "PXB": "PCIe through several switches", "PHB": "PCIe through the CPU's host "
    "bridge", "NODE": "PCIe across host bridges of one NUMA node", "SYS": "across NUMA nodes (the CPU interconnect)",
}


def _ok(name: str, reason: str) -> Check:
    return Check(name, PASS, reason)


def _warn(name: str, reason: str) -> Check:
    return Check(name, WARN, reason)


def _fail(name: str, reason: str) -> Check:
    return Check(name, FAIL, reason)


def _scope(facts: HostFacts, topology: Topology | None, plan: LaunchPlan | None) -> tuple[int, ...]:
    """The GPUs that matter: the plan's, else the first ones a topology would take, else all."""
    if plan is not None:
        return plan.gpus
    present = tuple(g.index for g in facts.gpus)
    if topology is not None:
        return present[:topology.gpus_needed]
    return present


def check_host(facts: HostFacts, simulated_reason: str | None) -> list[Check]:
    out: list[Check] = []
    if facts.simulated:
        if simulated_reason:
            out.append(_fail("driver", f"{simulated_reason}; real launches are impossible, this report is for the "
                                       "SIMULATED host"))
        out.append(_ok("host", f"SIMULATED host {facts.hostname}: {len(facts.gpus)}× "
                               f"{', '.join(sorted({g.name for g in facts.gpus})) or 'no GPU'}, driver "
                               f"{facts.driver or '?'}, CUDA {facts.cuda_driver or '?'}"))
        return out
    if not facts.driver:
        out.append(_warn("driver", "NVML answered but gave no driver version"))
    else:
        out.append(_ok("driver", f"NVIDIA driver {facts.driver}, CUDA {facts.cuda_driver or '?'} (NVML answers)"))
    out.append(_ok("host", f"real host {facts.hostname}"))
    return out


def check_gpu_count(facts: HostFacts, topology: Topology | None) -> Check:
    gpus = facts.gpus
    desc = "; ".join(f"{g.index}: {g.name} {g.memory_total_mib / 1024:.0f} GiB cc {g.compute_capability:.1f}"
                     for g in gpus)
    if not gpus:
        return _fail("gpus", "no GPU found")
    if topology is not None and topology.gpus_needed > len(gpus):
        return _fail("gpus", f"{topology.name} needs {topology.gpus_needed} GPUs; this host has {len(gpus)} ({desc})")
    need = f"; {topology.name} uses {topology.gpus_needed}" if topology is not None else ""
    return _ok("gpus", f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} ({desc}){need}")


def check_interconnect(facts: HostFacts, scope: Sequence[int]) -> Check:
    if len(scope) < 2:
        return _ok("interconnect", f"one GPU ({','.join(map(str, scope)) or '-'}): no GPU-to-GPU traffic")
    matrix = facts.nvlink
    if not matrix:
        return _warn("interconnect", "GPU topology unknown (NVML gave no link information)")
    worst: tuple[int, str, int, int] | None = None  # (rank, link, i, j); higher rank = slower
    links: set[str] = set()
    for a in scope:
        for b in scope:
            if a >= b or a >= len(matrix) or b >= len(matrix[a]):
                continue
            link = matrix[a][b]
            links.add(link)
            rank = 0 if link.startswith("NV") else {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}.get(link, 6)
            if worst is None or rank > worst[0]:
                worst = (rank, link, a, b)
    gpus = ",".join(map(str, scope))
    if worst is None:
        return _warn("interconnect", f"no link information for GPU {gpus}")
    rank, link, a, b = worst
    if rank == 0:
        return _ok("interconnect", f"NVLink between GPU {gpus} ({', '.join(sorted(links))})")
    words = _LINK_WORDS.get(link, "an unknown link")
    numa = "; they sit on different NUMA nodes" if link == "SYS" else ""
    return _warn("interconnect", f"GPU {a} and {b} talk over {words} ({link}){numa}: tensor-parallel all-reduce "
                                "and NIXL KV transfer will be slower than over NVLink")


def check_gpu_memory(facts: HostFacts, nvml: Any | None, scope: Sequence[int], plan: LaunchPlan | None) -> Check:
    if nvml is None:
        return _warn("gpu memory", "NVML not available: free GPU memory not checked")
    if plan is not None:
        return check_gpus_free(plan, nvml, threshold_mib=BUSY_MIB)[0]
    parts: list[str] = []
    busy: list[str] = []
    for idx in scope:
        try:
            mem = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(idx))
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            return _warn("gpu memory", f"could not read GPU {idx}: {exc}")
        used_mib = int(mem.used) // 2**20
        parts.append(f"GPU {idx} {int(mem.free) / GIB:.0f}/{int(mem.total) / GIB:.0f} GiB free")
        if used_mib > BUSY_MIB:
            busy.append(f"GPU {idx} has {used_mib / 1024:.1f} GiB in use")
    if busy:
        return _warn("gpu memory", "; ".join(busy) + " (another server or job; 'disagg-tui status', nvidia-smi)")
    return _ok("gpu memory", "; ".join(parts) or "no GPU")


def check_flashinfer_cubin(facts: HostFacts) -> Check:
    v = facts.vllm
    if v is None or not v.found:
        return _warn("flashinfer-cubin", "unknown (vllm not found)")
    if v.flashinfer_cubin:
        return _ok("flashinfer-cubin", f"{v.flashinfer_cubin} installed: prebuilt FlashInfer kernels for the common "
                                       "cases, less JIT")
    if not facts.toolchain.nvcc_usable:
        return _warn("flashinfer-cubin", "not installed and no usable nvcc: every FlashInfer kernel would need a JIT "
                                         "build that cannot run (the plan turns the FlashInfer sampler off)")
    return _warn("flashinfer-cubin", "not installed: the first start JIT-compiles FlashInfer kernels (minutes, "
                                     "silent); pip install flashinfer-cubin into vLLM's environment")


def check_nixl(facts: HostFacts, topology: Topology | None) -> Check | None:
    """For a disaggregated topology without a plan (check_vllm covers a plan)."""
    v = facts.vllm
    if v is None or not v.found:
        return None
    if v.nixl:
        return _ok("nixl", f"nixl {v.nixl} in vLLM's environment")
    if topology is not None and topology.disaggregated:
        return _fail("nixl", f"{topology.name} moves KV cache with NIXL, which is not installed in vLLM's "
                             "environment (hint: <that venv>/bin/pip install nixl)")
    return _ok("nixl", "not installed (only disaggregated <X>p<Y>d layouts need it)")


def default_ports(topology: Topology | None) -> list[tuple[str, int]]:
    """The ports a layout takes with the planner's defaults (the endpoint; servers and side channels for pd)."""
    out = [("endpoint", planner.DEFAULT_PORT)]
    if topology is not None and topology.disaggregated:
        for i in range(topology.prefill + topology.decode):
            out.append((f"server {i}", planner.SERVER_BASE_PORT + planner.SERVER_PORT_STEP * i))
            out.append((f"NIXL side channel {i}", planner.SIDE_CHANNEL_BASE + i))
    return out


def check_free_ports(plan: LaunchPlan | None, topology: Topology | None,
                     ports: Sequence[tuple[str, int]] | None) -> Check:
    if plan is not None:
        return check_ports(plan)[0]
    wanted = list(ports) if ports is not None else default_ports(topology)
    busy = [f"{p} ({name})" for name, p in wanted if not port_free("127.0.0.1", p)]
    if busy:
        return _warn("ports", f"in use: {', '.join(busy)} (stop what holds them or choose other ports)")
    return _ok("ports", "free: " + ", ".join(str(p) for _, p in wanted))


def vllm_cache_root(env: Mapping[str, str]) -> Path:
    """``VLLM_CACHE_ROOT``, else ``$XDG_CACHE_HOME/vllm``, else ``~/.cache/vllm`` (vllm/envs.py)."""
    if env.get("VLLM_CACHE_ROOT"):
        return Path(env["VLLM_CACHE_ROOT"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "vllm"


def _existing_parent(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_gib(path: Path) -> float | None:
    try:
        return shutil.disk_usage(_existing_parent(path)).free / GIB
    except OSError:
        return None


def check_compile_cache(env: Mapping[str, str], simulated: bool, min_free_gib: float) -> Check:
    root = vllm_cache_root(env)
    where = f"{root} ({'exists' if root.is_dir() else 'created on first start'}"
    where += ", from VLLM_CACHE_ROOT)" if env.get("VLLM_CACHE_ROOT") else ")"
    sim = "; simulated servers do not write it" if simulated else ""
    free = free_gib(root)
    if free is None:
        return _warn("compile cache", f"{where}: free disk unknown{sim}")
    if free < min_free_gib:
        return _warn("compile cache", f"{where}: only {free:.1f} GiB free there (< {min_free_gib:g}); torch.compile "
                                      f"and FlashInfer write their caches there{sim}")
    return _ok("compile cache", f"{where}: {free:.0f} GiB free{sim}")


def check_model_files(profile: ModelProfile, env: Mapping[str, str], simulated: bool) -> Check:
    name = "model files"
    if simulated:
        return _ok(name, f"{profile.model}: not needed on the SIMULATED host (the simulated server loads no "
                         "weights)")
    found = locate_model(profile.model, env)
    dummy = profile.load_format == "dummy"
    if found.found:
        size = f"{found.size_bytes / GIB:.1f} GiB" + ("+" if found.capped else "")
        where = f"{found.where} ({size}, {found.files} files)"
        if dummy:
            if found.has_config and found.has_tokenizer:
                return _ok(name, f"{where}: config and tokenizer present (--load-format dummy needs no weights)")
            return _fail(name, f"{where}: --load-format dummy still needs config.json and a tokenizer, and "
                               f"{'config.json' if not found.has_config else 'the tokenizer'} is missing")
        if not found.has_weights:
            return _warn(name, f"{where}: no weight files (*.safetensors, *.bin) yet: a partial download?")
        return _ok(name, where)
    if found.kind == "local":
        return _fail(name, f"{found.where}: no such folder")
    token = hf_token_source(env)
    offline = env.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    if offline:
        return _fail(name, f"{profile.model} is not in the Hugging Face cache ({hf_hub_cache(env)}) and "
                           "HF_HUB_OFFLINE is set: the start cannot download it")
    need = 0.0 if dummy else profile.weights_gib
    free = free_gib(hf_hub_cache(env))
    if free is not None and free < need:
        return _fail(name, f"{profile.model} is not cached; its ~{need:.0f} GiB of weights do not fit in the "
                           f"{free:.0f} GiB free under {hf_hub_cache(env)}")
    tok = f"a token is set ({token})" if token else ("no Hugging Face token (HF_TOKEN or "
                                                     f"{Path(env.get('HF_HOME') or '~/.cache/huggingface')}/token): "
                                                     "a gated repository cannot be downloaded")
    return _warn(name, f"{profile.model} is not in the Hugging Face cache ({hf_hub_cache(env)}): the first start "
                       f"downloads ~{need:.0f} GiB; {tok}")


def check_known_issues(profile: ModelProfile, facts: HostFacts, topology: Topology | None,
                       plan: LaunchPlan | None, scope: Sequence[int]) -> list[Check]:
    name = f"known issues: {profile.id}"
    out: list[Check] = []
    need_cc = profile.min_compute_capability
    if need_cc is not None:
        low = [g for g in facts.gpus if g.index in scope and g.compute_capability < need_cc]
        if low:
            arch = " (Blackwell)" if need_cc >= 10 else ""
            which = ", ".join(f"{g.index} is {g.name} ({g.compute_capability:.1f})" for g in low)
            out.append(_fail(name, f"{profile.quantization.upper()} needs compute capability {need_cc:.1f}{arch}; "
                                   f"GPU {which}"))
    version = facts.vllm.version if facts.vllm else None
    on_024 = version is None or version.startswith("0.24")
    if profile.is_moe:
        if topology is not None and topology.kind == "dp" and on_024:
            out.append(_warn(name, f"MoE + data parallel did not start on vLLM 0.24 (CUTLASS FP8 MoE warm-up "
                                   f"assertion): serve it as tp{topology.dp}, or try '--moe-backend triton' as an "
                                   "experiment (up --apply-fix moe-dp-start-failure)"))
        elif topology is None and on_024:
            out.append(_ok(name, "MoE: use tp or a disaggregated layout, not dp, on vLLM 0.24"))
    if profile.is_hybrid:
        if topology is not None and topology.disaggregated:
            missing = [s.name for s in plan.servers if s.env_dict().get("VLLM_SSM_CONV_STATE_LAYOUT") != "DS"] \
                if plan is not None else []
            if plan is None:
                out.append(_ok(name, "hybrid attention behind NIXL needs VLLM_SSM_CONV_STATE_LAYOUT=DS; the planner "
                                     "sets it"))
            elif not missing:
                out.append(_ok(name, "hybrid attention behind NIXL: the plan sets VLLM_SSM_CONV_STATE_LAYOUT=DS"))
            else:
                out.append(_fail(name, "hybrid attention behind NIXL needs VLLM_SSM_CONV_STATE_LAYOUT=DS, and the "
                                       f"plan does not set it for {', '.join(missing)}"))
        elif topology is None:
            out.append(_ok(name, "hybrid attention: behind NIXL it needs VLLM_SSM_CONV_STATE_LAYOUT=DS (the planner "
                                 "sets it)"))
    if not out:
        out.append(_ok(name, "none known for this layout"))
    return out


def check_environment(env: Mapping[str, str]) -> Check:
    if env.get("VLLM_ATTENTION_BACKEND"):
        return _warn("environment", "VLLM_ATTENTION_BACKEND is set, and vLLM 0.24 ignores it (it only warns): "
                                    "use '--attention-backend NAME' (--arg), and unset it")
    return _ok("environment", "no ignored VLLM_* variables set")


def doctor(
    facts: HostFacts,
    nvml: Any | None,
    *,
    profile: ModelProfile | None = None,
    topology: Topology | None = None,
    plan: LaunchPlan | None = None,
    plan_refused: str | None = None,
    simulated_reason: str | None = None,
    env: Mapping[str, str] | None = None,
    ports: Sequence[tuple[str, int]] | None = None,
    min_cache_free_gib: float = MIN_CACHE_FREE_GIB,
) -> list[Check]:
    """Every check, in reading order. ``plan`` (from ``up``/``plan``) narrows GPUs and ports to the layout;
    ``topology`` without a plan uses the planner's default ports and the first GPUs; ``plan_refused``: why the
    planner refused the layout (a failing check). ``simulated_reason``: why the
    host is simulated when nobody asked (no driver answered), which fails the driver check. ``env``: the
    environment servers inherit (default ``os.environ``); a Hugging Face token in it is never printed."""
    env = dict(os.environ) if env is None else env
    if plan is not None and topology is None:
        topology = plan.topo
    scope = _scope(facts, topology, plan)
    checks: list[Check] = []
    checks += check_host(facts, simulated_reason)
    checks.append(check_gpu_count(facts, topology))
    if plan_refused is not None:
        checks.append(_fail("plan", plan_refused))
    elif plan is not None:
        checks.append(_ok("plan", f"{plan.profile_id} as {plan.topology} on GPU {','.join(map(str, plan.gpus))}"))
    checks.append(check_interconnect(facts, scope))
    checks.append(check_gpu_memory(facts, nvml, scope, plan))
    checks.append(check_toolchain(facts))
    checks.append(check_flashinfer_cubin(facts))
    checks += check_vllm(facts, plan)
    if plan is None or plan.proxy is None:
        nixl = check_nixl(facts, topology)
        if nixl is not None:
            checks.append(nixl)
    checks.append(check_free_ports(plan, topology, ports))
    checks.append(check_compile_cache(env, facts.simulated, min_cache_free_gib))
    if profile is not None:
        checks.append(check_model_files(profile, env, facts.simulated))
        checks += check_known_issues(profile, facts, topology, plan, scope)
    checks.append(check_environment(env))
    return checks
