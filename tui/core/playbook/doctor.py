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

from tui.core.launch.history import StartupHistory, plan_key
from tui.core.models import ModelProfile
from tui.core.plan import planner
from tui.core.plan.hostfacts import HostFacts, detect_toolchain
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


def server_envs(plan: LaunchPlan | None, env: Mapping[str, str]) -> list[dict[str, str]]:
    """The environment each server of the plan starts with (the shell's, then the plan's ``--env``, profile and
    fixes), or just the shell's without a plan."""
    if plan is None or not plan.servers:
        return [dict(env)]
    return [{**env, **s.env_dict()} for s in plan.servers]


def flashinfer_users(facts: HostFacts, plan: LaunchPlan | None, env: Mapping[str, str]) -> list[str]:
    """What in the plan would use FlashInfer (and JIT-compile it without prebuilt kernels): its sampler (vLLM's
    default unless ``VLLM_USE_FLASHINFER_SAMPLER=0`` in the server's environment) and its attention (vLLM's choice
    on Blackwell unless ``--attention-backend`` names another; Hopper uses FlashAttention 3)."""
    users: list[str] = []
    servers = plan.servers if plan is not None else ()
    for i, e in enumerate(server_envs(plan, env)):
        name = servers[i].name if servers else "server"
        if e.get("VLLM_USE_FLASHINFER_SAMPLER", "1").strip().lower() not in ("0", "false"):
            users.append(f"{name}: the FlashInfer sampler (VLLM_USE_FLASHINFER_SAMPLER unset)")
        gpus = servers[i].gpus if servers else tuple(g.index for g in facts.gpus)
        argv = list(servers[i].argv) if servers else []
        backend = argv[argv.index("--attention-backend") + 1].upper() if "--attention-backend" in argv[:-1] else ""
        blackwell = any((g := facts.gpu(x)) is not None and g.compute_capability >= 10.0 for x in gpus)
        if (backend.startswith("FLASHINFER")) or (not backend and blackwell):
            users.append(f"{name}: FlashInfer attention" + ("" if backend else " (vLLM's choice on Blackwell)"))
    return users


def check_flashinfer_cubin(facts: HostFacts, plan: LaunchPlan | None = None, env: Mapping[str, str] | None = None,
                           cold_hint: str = "") -> Check:
    """Whether the first start will JIT-compile FlashInfer kernels: only when the plan uses FlashInfer (its
    environment and the GPU architecture decide), no prebuilt kernels are installed and nvcc can run."""
    v = facts.vllm
    env = dict(os.environ) if env is None else env
    users = flashinfer_users(facts, plan, env)
    if plan is not None and not users:
        return _ok("flashinfer", "the plan does not use FlashInfer (sampler off through VLLM_USE_FLASHINFER_SAMPLER=0; "
                                 "FlashAttention on this GPU): nothing to JIT-compile")
    if v is None or not v.found:
        return _warn("flashinfer-cubin", "unknown (vllm not found)")
    if v.flashinfer_cubin:
        return _ok("flashinfer-cubin", f"{v.flashinfer_cubin} installed: prebuilt FlashInfer kernels for the common "
                                       "cases, less JIT")
    toolchain = facts.toolchain
    cuda_homes = {e.get("CUDA_HOME") for e in server_envs(plan, env) if e.get("CUDA_HOME")}
    if cuda_homes and plan is not None:  # the plan's CUDA_HOME, not the shell's, decides what FlashInfer finds
        toolchain = detect_toolchain({**env, "CUDA_HOME": sorted(h for h in cuda_homes if h)[0]})
    if not toolchain.nvcc_usable:
        return _warn("flashinfer-cubin", "not installed and no usable nvcc: every FlashInfer kernel would need a JIT "
                                         "build that cannot run (the plan turns the FlashInfer sampler off)")
    what = "; ".join(users) if users else "FlashInfer kernels"
    return _warn("flashinfer-cubin", f"not installed: the first start JIT-compiles FlashInfer kernels for {what} "
                                     "(minutes, silent; 'up' shows the compile)"
                 + (f"; {cold_hint}" if cold_hint else "")
                 + "; pip install flashinfer-cubin into vLLM's environment, or --env VLLM_USE_FLASHINFER_SAMPLER=0")


def check_kv_path(facts: HostFacts, nvml: Any | None, plan: LaunchPlan, env: Mapping[str, str]) -> list[Check]:
    """For a disaggregated plan: how KV will travel between its prefill and decode GPUs (shared GPU, NVLink, peer
    access), the UCX transports its environment allows, and NIXL's version."""
    out: list[Check] = []
    pre = sorted({g for s in plan.servers if s.role == "prefill" for g in s.gpus})
    dec = sorted({g for s in plan.servers if s.role == "decode" for g in s.gpus})
    name = "kv path"
    shared = sorted(set(pre) & set(dec))
    if shared:
        out.append(_warn(name, f"prefill and decode share GPU {','.join(map(str, shared))}: UCX has no CUDA IPC path "
                               "between two processes on one GPU and moves KV over TCP loopback (0.01-0.4 GB/s on "
                               "the real H200): a functional check; runs are flagged kv-slow-path"))
    elif pre and dec:
        matrix = facts.nvlink
        links = {matrix[a][b] for a in pre for b in dec if a < len(matrix) and b < len(matrix[a])}
        if links and all(link.startswith("NV") for link in links):
            out.append(_ok(name, f"NVLink between prefill GPU {','.join(map(str, pre))} and decode GPU "
                                 f"{','.join(map(str, dec))} ({', '.join(sorted(links))})"))
        elif links:
            out.append(_warn(name, f"no NVLink between prefill and decode GPUs ({', '.join(sorted(links))}): KV moves "
                                   "over PCIe at best"))
        else:
            out.append(_warn(name, "GPU topology unknown: how KV will travel is not known"))
        p2p = _peer_access(nvml, pre[0], dec[0])
        if p2p is not None:
            out.append(_ok("peer access", f"GPU {pre[0]} → {dec[0]}: {p2p}") if p2p == "OK" else
                       _warn("peer access", f"GPU {pre[0]} → {dec[0]}: {p2p}: CUDA IPC/peer copies are not possible, "
                                            "UCX falls back to host memory"))
    for e, s in zip(server_envs(plan, env), plan.servers, strict=False):
        tls = e.get("UCX_TLS")
        if tls and "cuda_ipc" not in tls and tls.strip() != "all":
            out.append(_warn("ucx", f"{s.name}: UCX_TLS={tls} leaves out cuda_ipc: KV cannot go GPU to GPU"))
            break
    v = facts.vllm
    if v is not None and v.found and v.nixl:
        ucx = _ucx_version()
        out.append(_ok("nixl", f"nixl {v.nixl} in vLLM's environment" + (f"; UCX {ucx}" if ucx else "")))
    return out


def _peer_access(nvml: Any | None, a: int, b: int) -> str | None:
    """NVML's P2P read status between two GPUs ("OK", or why not); None when it cannot be asked."""
    if nvml is None or not hasattr(nvml, "nvmlDeviceGetP2PStatus"):
        return None
    try:
        ha, hb = nvml.nvmlDeviceGetHandleByIndex(a), nvml.nvmlDeviceGetHandleByIndex(b)
        status = int(nvml.nvmlDeviceGetP2PStatus(ha, hb, getattr(nvml, "NVML_P2P_CAPS_INDEX_READ", 0)))
    except Exception:  # noqa: BLE001 - a driver that cannot say is no finding
        return None
    words = {0: "OK", 1: "chipset not supported", 2: "GPU not supported", 3: "IOH topology not supported",
             4: "disabled by the driver's registry key", 5: "not supported"}
    return words.get(status, f"status {status}")


def _ucx_version() -> str | None:
    """The UCX version ``ucx_info -v`` reports, when the tool is on PATH (NIXL wheels bundle their own UCX)."""
    exe = shutil.which("ucx_info")
    if exe is None:
        return None
    import subprocess

    try:
        out = subprocess.run([exe, "-v"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if "version" in line.lower():
            return line.strip().lstrip("# ")
    return None


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


def check_environment(env: Mapping[str, str], plan: LaunchPlan | None = None) -> Check:
    if any(e.get("VLLM_ATTENTION_BACKEND") for e in server_envs(plan, env)):
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
    history: StartupHistory | None = None,
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
    hint = ""
    if history is not None and plan is not None and plan.servers:
        hint = history.cold_hint(plan_key(plan), plan.servers[0].name)
    checks.append(check_flashinfer_cubin(facts, plan, env, hint))
    checks += check_vllm(facts, plan)
    if plan is None or plan.proxy is None:
        nixl = check_nixl(facts, topology)
        if nixl is not None:
            checks.append(nixl)
    if plan is not None and plan.proxy is not None:
        checks += check_kv_path(facts, nvml, plan, env)
    checks.append(check_free_ports(plan, topology, ports))
    checks.append(check_compile_cache(env, facts.simulated, min_cache_free_gib))
    if profile is not None:
        checks.append(check_model_files(profile, env, facts.simulated))
        checks += check_known_issues(profile, facts, topology, plan, scope)
    checks.append(check_environment(env, plan))
    return checks
