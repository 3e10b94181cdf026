"""The topology planner (pure): model profile × topology × GPUs × host facts → a launch plan.

A plan holds, for every server, its exact argv and the environment it adds, its GPUs, host/port and role, plus
the proxy of a disaggregated layout. Workarounds enter only where the host needs them, each with its reason, in
the form vLLM 0.24 really honours (``../shared/VLLM-0.24.md``):

- ``VLLM_USE_FLASHINFER_SAMPLER=0`` when FlashInfer would find no nvcc (its sampler is on by default and JIT-
  compiles during engine warm-up);
- ``--attention-backend TRITON_ATTN`` only where FlashInfer attention would be chosen (Blackwell) and would have to
  JIT without nvcc. On Hopper vLLM picks FlashAttention 3, and forcing Triton would skew the comparison;
- ``VLLM_ENGINE_READY_TIMEOUT_S=1800`` for TP/DP layouts (DP runs one API server per rank, which waits at most 600 s
  by default for a first compile that takes ~800 s). It is part of vLLM's compile-cache key, so its value never
  changes between launches of a profile;
- ``VLLM_SSM_CONV_STATE_LAYOUT=DS`` for hybrid (Mamba-style) models behind NIXL.

Never ``VLLM_ATTENTION_BACKEND``: vLLM 0.24 does not read it. Every plan is checked for GPU overlap and HTTP and
NIXL side-channel port clashes, which vLLM does not catch (a shared ``--port`` silently splits traffic through
SO_REUSEPORT; a shared side-channel port hangs the second engine forever).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, replace
from typing import Any

from tui.core import vllmargv
from tui.core.errors import InputError, PlanRefused
from tui.core.models import ModelProfile
from tui.core.plan.hostfacts import HostFacts
from tui.core.plan.ports import DEFAULT_HOST as DEFAULT_HOST  # the defaults live in ports (read by the CLI's help)
from tui.core.plan.ports import DEFAULT_PORT as DEFAULT_PORT
from tui.core.plan.ports import DP_RPC_PORT as DP_RPC_PORT
from tui.core.plan.ports import SERVER_BASE_PORT as SERVER_BASE_PORT
from tui.core.plan.ports import SERVER_PORT_STEP as SERVER_PORT_STEP
from tui.core.plan.ports import SIDE_CHANNEL_BASE as SIDE_CHANNEL_BASE
from tui.core.plan.spec import LaunchPlan, PlanFix, ProxySpec, ServerSpec, Workaround
from tui.core.redact import is_secret_flag
from tui.core.safeio import shown
from tui.core.topology import Topology, parse_topology

READY_TIMEOUT_ENV = "1800"
#: a variable a fix may take out of the environment a server inherits (vLLM's own)
_VLLM_VAR = re.compile(r"VLLM_[A-Z0-9_]{1,64}")
#: working memory vLLM needs beside weights and KV (activations, CUDA graphs, sampler), GiB per GPU
RUNTIME_OVERHEAD_GIB = 2.0


@dataclass(frozen=True, slots=True)
class PlanOptions:
    gpus: tuple[int, ...] | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    server_base_port: int = SERVER_BASE_PORT
    side_channel_base: int = SIDE_CHANNEL_BASE
    vllm_executable: str = "vllm"
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()
    model_path: str | None = None  # overrides the profile's model (a local folder)
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    #: let several servers share a GPU (e.g. 1P1D on one large GPU for a functional check); their
    #: gpu_memory_utilization must add up to at most MAX_SHARED_UTILIZATION on each GPU
    allow_shared_gpus: bool = False
    # --- this host's part of a layout across hosts (tui.core.plan.cluster makes them; all default to a whole layout)
    #: DP across hosts: the ranks on this host (None: all of them), the first one's global rank (> 0: engines only,
    #: ``--headless``), the head's address and RPC port (vLLM's ``--data-parallel-address`` / ``-rpc-port``)
    dp_local: int | None = None
    dp_start_rank: int = 0
    dp_address: str | None = None
    dp_rpc_port: int = DP_RPC_PORT
    #: P/D across hosts: the roles of the layout this host runs (empty: every role), the address other hosts reach
    #: its NIXL side channel at (``VLLM_NIXL_SIDE_CHANNEL_HOST``), and the other hosts' servers the proxy here
    #: sends to ((role, URL); a part with some roles and no peers runs no proxy)
    roles: tuple[str, ...] = ()
    advertise: str | None = None
    peers: tuple[tuple[str, str], ...] = ()


MAX_SHARED_UTILIZATION = 0.95


# --- planning --------------------------------------------------------------------------------------------------


def _fmt_float(x: float) -> str:
    return f"{x:.2f}" if round(x, 2) == x else repr(x)


def _select_gpus(topo: Topology, facts: HostFacts, wanted: tuple[int, ...] | None, shared: bool = False,
                 need: int | None = None) -> tuple[tuple[int, ...], list[str]]:
    """The GPUs of this host's servers (``need``: how many this host's part takes; default the whole layout's)."""
    warnings: list[str] = []
    present = [g.index for g in facts.gpus]
    need = topo.gpus_needed if need is None else need
    if wanted is not None:
        if len(set(wanted)) != len(wanted) and not shared:
            raise InputError(f"GPU listed twice in {','.join(map(str, wanted))} (to run several servers on one "
                             "GPU, pass --allow-shared-gpus)", field="--gpus")
        missing = [i for i in wanted if i not in present]
        if missing:
            raise PlanRefused(f"GPU {','.join(map(str, missing))} not present on this host "
                              f"(it has {len(present)}: {','.join(map(str, present)) or 'none'})")
        if len(wanted) < need:
            raise PlanRefused(f"{topo.name} needs {need} GPUs{_here(topo, need)}; --gpus gives {len(wanted)}")
        if len(wanted) > need:
            warnings.append(f"{topo.name} uses {need} GPUs{_here(topo, need)}; using "
                            f"{','.join(map(str, wanted[:need]))} of --gpus")
        return tuple(wanted[:need]), warnings
    if need > len(present):
        hint = " (the simulated host has --sim-gpus N)" if facts.simulated else ""
        raise PlanRefused(f"{topo.name} needs {need} GPUs{_here(topo, need)}; this host has {len(present)}{hint}")
    return tuple(present[:need]), warnings


def _here(topo: Topology, need: int) -> str:
    return "" if need == topo.gpus_needed else " on this host (its part of the layout across hosts)"


def _part_need(topo: Topology, opts: PlanOptions) -> int:
    """The GPUs this host's part of the layout takes (the whole layout's when it is not a part)."""
    if topo.kind == "dp" and opts.dp_local is not None:
        return opts.dp_local
    if topo.kind == "pd" and opts.roles:
        return sum(n for r, n in (("prefill", topo.prefill), ("decode", topo.decode)) if r in opts.roles) * topo.tp
    return topo.gpus_needed


def _check_part(topo: Topology, opts: PlanOptions) -> None:
    """A part of a layout across hosts that cannot be (PlanRefused, one line)."""
    if topo.kind != "dp" and (opts.dp_local is not None or opts.dp_start_rank or opts.dp_address):
        raise PlanRefused(f"--dp-local/--dp-start-rank/--dp-address are data parallel across hosts; {topo.name} "
                          "is not dp<N>")
    if topo.kind != "pd" and (opts.roles or opts.peers):
        raise PlanRefused(f"--roles/--peer split a disaggregated layout across hosts; {topo.name} is not <X>p<Y>d")
    if topo.kind == "dp" and opts.dp_local is not None:
        local, start = opts.dp_local, opts.dp_start_rank
        if not 1 <= local < topo.dp or topo.dp % local:
            raise PlanRefused(f"--dp-local {local}: each host of {topo.name} runs the same number of ranks, a "
                              f"divisor of {topo.dp} below it")
        if start % local or start + local > topo.dp:
            raise PlanRefused(f"--dp-start-rank {start}: with {local} rank(s) a host, {topo.name}'s hosts start at "
                              f"{', '.join(str(k) for k in range(0, topo.dp, local))}")
        if not opts.dp_address:
            raise PlanRefused("--dp-local needs --dp-address: the head's address, which every host's engines reach")
    elif opts.dp_start_rank:
        raise PlanRefused("--dp-start-rank needs --dp-local (the ranks on this host)")
    if topo.kind == "pd" and opts.roles:
        if not set(opts.roles) <= {"prefill", "decode"} or len(set(opts.roles)) != len(opts.roles):
            raise PlanRefused(f"--roles {','.join(opts.roles)}: prefill, decode or both, once each")
        for role, _url in opts.peers:
            if role in opts.roles:
                raise PlanRefused(f"--peer {role}=...: this host runs the {role} servers itself")
    elif opts.peers:
        raise PlanRefused("--peer needs --roles: the roles this host runs (the peers run the others)")


def _check_fit(profile: ModelProfile, topo: Topology, facts: HostFacts, gpus: tuple[int, ...], gmu: float,
               max_len: int) -> None:
    for idx in gpus:
        g = facts.gpu(idx)
        if g is None:
            continue
        if profile.min_compute_capability is not None and g.compute_capability < profile.min_compute_capability:
            raise PlanRefused(
                f"{profile.id} is {profile.quantization.upper()}, which needs compute capability "
                f"{profile.min_compute_capability:.1f}"
                + (" (Blackwell)" if profile.min_compute_capability >= 10 else "")
                + f"; GPU {idx} is {g.name} ({g.compute_capability:.1f})")
    shard = topo.tp  # weights are split over the TP group of each server
    weights = profile.weights_gib / shard
    for idx in gpus:
        g = facts.gpu(idx)
        if g is None:
            continue
        usable = g.memory_total_mib / 1024 * gmu
        if weights + RUNTIME_OVERHEAD_GIB > usable:
            raise PlanRefused(
                f"{profile.id} does not fit: {weights:.1f} GiB of weights per GPU (+{RUNTIME_OVERHEAD_GIB:g} GiB "
                f"working memory) > {usable:.1f} GiB usable on GPU {idx} ({g.name}, gpu_memory_utilization "
                f"{gmu:g}); use more tensor parallelism or a smaller quantisation")
        kv_need = profile.kv_bytes_per_token() / shard * max_len / 2**30
        kv_free = usable - weights - RUNTIME_OVERHEAD_GIB
        if kv_need > kv_free:
            raise PlanRefused(
                f"{profile.id} leaves {kv_free:.1f} GiB for KV cache per GPU; one request of max_model_len "
                f"{max_len} needs {kv_need:.1f} GiB; lower max_model_len or raise gpu_memory_utilization")


def plan(profile: ModelProfile, topology: Topology | str, facts: HostFacts,
         options: PlanOptions | None = None) -> LaunchPlan:
    """Build the launch plan. Raises PlanRefused (exit 2) for a request the host cannot honour."""
    opts = options or PlanOptions()
    topo = parse_topology(topology) if isinstance(topology, str) else topology
    _check_sources(profile, opts)
    _check_part(topo, opts)
    gpus, warnings = _select_gpus(topo, facts, opts.gpus, opts.allow_shared_gpus, _part_need(topo, opts))
    workarounds: list[Workaround] = []

    fam_ov = profile.override_for(topo.family)
    name_ov = profile.override_for(topo.name)
    gmu = opts.gpu_memory_utilization or (name_ov and name_ov.gpu_memory_utilization) or \
        (fam_ov and fam_ov.gpu_memory_utilization) or profile.gpu_memory_utilization
    max_len = opts.max_model_len or (name_ov and name_ov.max_model_len) or (fam_ov and fam_ov.max_model_len) or \
        profile.max_model_len
    _check_fit(profile, topo, facts, tuple(dict.fromkeys(gpus)), gmu, max_len)
    shared = len(set(gpus)) != len(gpus)
    if shared:
        per_gpu = max(gpus.count(g) for g in gpus)  # servers on the busiest shared GPU
        if topo.kind != "pd":
            raise PlanRefused(f"{topo.name} cannot share a GPU between its ranks; give {topo.gpus_needed} "
                              "distinct GPUs")
        if per_gpu * gmu > MAX_SHARED_UTILIZATION:
            raise PlanRefused(f"{per_gpu} servers share a GPU at gpu_memory_utilization {gmu:g} each "
                              f"({per_gpu * gmu:.2f} > {MAX_SHARED_UTILIZATION}); lower "
                              "--gpu-memory-utilization")
        warnings.append(f"servers share GPU(s) {','.join(map(str, sorted(set(gpus))))}: a functional check, "
                        "not a performance comparison")

    model = opts.model_path or profile.model
    warnings += list(profile.warnings)  # a derived profile's (a model folder without tokenizer files)
    vllm_version = facts.vllm.version if facts.vllm else None
    if profile.is_moe and topo.kind == "dp" and (vllm_version is None or vllm_version.startswith("0.24")):
        warnings.append(
            f"{profile.id} is MoE: MoE + data parallel did not start on vLLM 0.24 (CUTLASS FP8 MoE warm-up "
            "assertion). Prefer tp, or add '--moe-backend triton' (--arg) as an untested experiment")
    if facts.vllm is not None and facts.vllm.version and not facts.vllm.version_matches:
        warnings.append(f"vLLM {facts.vllm.version} found; profiles, flags and log patterns were checked with "
                        f"0.24.0 ({', '.join(profile.checked_with_vllm) or 'none listed'} for {profile.id}): "
                        "flags and log texts change between versions")

    # host-driven environment and flags
    host_env: list[tuple[str, str]] = []
    host_args: list[str] = []
    tool = facts.toolchain
    if not tool.nvcc_usable:
        host_env.append(("VLLM_USE_FLASHINFER_SAMPLER", "0"))
        workarounds.append(Workaround(
            "VLLM_USE_FLASHINFER_SAMPLER=0",
            "no usable nvcc (PATH, CUDA_HOME, /usr/local/cuda): FlashInfer's sampler, on by default in vLLM 0.24, "
            "would JIT-compile during engine warm-up and fail"))
        uses_flashinfer_attn = any((g := facts.gpu(i)) is not None and g.compute_capability >= 10.0 for i in gpus)
        if uses_flashinfer_attn:
            host_args += ["--attention-backend", "TRITON_ATTN"]
            workarounds.append(Workaround(
                "--attention-backend TRITON_ATTN",
                "Blackwell GPU: vLLM would choose FlashInfer attention, which would have to JIT-compile without "
                "nvcc; Triton attention needs no nvcc"))
    elif tool.silent_jit_risk:
        warnings.append("nvcc is under /usr/local/cuda but not on PATH and CUDA_HOME is unset: the first start may "
                        "spend minutes JIT-compiling FlashInfer kernels with no output")

    def base_env(role_ov: Any) -> list[tuple[str, str]]:
        env = list(host_env)
        env += list(profile.env)
        for ov in (fam_ov, name_ov, role_ov):
            if ov is not None:
                env += list(ov.env)
        env += list(opts.extra_env)
        return env

    def tail_args(role_ov: Any) -> list[str]:
        args = ["--gpu-memory-utilization", _fmt_float(gmu), "--max-model-len", str(max_len)]
        if profile.trust_remote_code:
            args.append("--trust-remote-code")
        if profile.served_model_name:
            args += ["--served-model-name", profile.served_model_name]
        if profile.load_format:
            args += ["--load-format", profile.load_format]
        args += host_args
        args += list(profile.extra_args)
        for ov in (fam_ov, name_ov, role_ov):
            if ov is not None:
                args += list(ov.args)
        args += list(opts.extra_args)
        return args

    exe = opts.vllm_executable
    servers: list[ServerSpec] = []
    proxy: ProxySpec | None = None
    if topo.kind == "dp" and opts.dp_local is not None:
        servers.append(_dp_part(topo, opts, exe, model, gpus, tail_args(None), base_env(None)))
    elif topo.kind in ("tp", "dp"):
        env = [("CUDA_VISIBLE_DEVICES", ",".join(map(str, gpus))), ("VLLM_ENGINE_READY_TIMEOUT_S", READY_TIMEOUT_ENV)]
        parallel = ["--tensor-parallel-size", str(topo.tp)] if topo.kind == "tp" else \
            ["--data-parallel-size", str(topo.dp)]
        argv = vllmargv.server_argv(exe, model, "--host", opts.host, "--port", str(opts.port), *parallel,
                                    *tail_args(None))
        servers.append(ServerSpec(name="server", role="single", argv=argv, env=tuple(env + base_env(None)),
                                  gpus=gpus, host=opts.host, port=opts.port, tp=topo.tp, dp=topo.dp))
    else:
        if profile.is_hybrid:
            workarounds.append(Workaround(
                "VLLM_SSM_CONV_STATE_LAYOUT=DS",
                "hybrid model behind NIXL: the Mamba-style conv state must use the DS layout for KV transfer",
                "profile"))
        gi = 0
        idx = 0
        for role, count in (("prefill", topo.prefill), ("decode", topo.decode)):
            role_ov = profile.override_for(role)
            for k in range(count):
                if opts.roles and role not in opts.roles:  # another host's part of the layout runs it
                    idx += 1
                    continue
                sg = gpus[gi:gi + topo.tp]
                gi += topo.tp
                port = opts.server_base_port + SERVER_PORT_STEP * idx
                side = opts.side_channel_base + idx
                idx += 1
                kv_role = "kv_producer" if role == "prefill" else "kv_consumer"
                env = [("CUDA_VISIBLE_DEVICES", ",".join(map(str, sg))),
                       ("VLLM_NIXL_SIDE_CHANNEL_PORT", str(side))]
                if opts.advertise:
                    env.append(("VLLM_NIXL_SIDE_CHANNEL_HOST", opts.advertise))
                if profile.is_hybrid:
                    env.append(("VLLM_SSM_CONV_STATE_LAYOUT", "DS"))
                kv_cfg = json.dumps({"kv_connector": "NixlConnector", "kv_role": kv_role}, separators=(",", ":"))
                argv = vllmargv.server_argv(exe, model, "--host", opts.host, "--port", str(port),
                                            "--tensor-parallel-size", str(topo.tp), "--kv-transfer-config", kv_cfg,
                                            *tail_args(role_ov))
                servers.append(ServerSpec(name=f"{role}-{k}", role=role, argv=argv,
                                          env=tuple(env + base_env(role_ov)), gpus=sg, host=opts.host, port=port,
                                          tp=topo.tp, dp=1, side_channel_port=side, kv_role=kv_role))
        if not opts.roles or opts.peers:
            proxy = ProxySpec(host=opts.host, port=opts.port,
                              prefill=(*(s.url for s in servers if s.role == "prefill"),
                                       *(u for r, u in opts.peers if r == "prefill")),
                              decode=(*(s.url for s in servers if s.role == "decode"),
                                      *(u for r, u in opts.peers if r == "decode")))
    result = LaunchPlan(
        profile_id=profile.id, model=model, served_name=profile.served_name, topology=topo.name, gpus=gpus,
        servers=tuple(_dedupe_env(s) for s in servers), proxy=proxy, simulated=facts.simulated,
        vllm_executable=exe, workarounds=tuple(workarounds), warnings=tuple(warnings), host_label=facts.label,
        shared_gpus=shared,
    )
    check_plan(result)
    return result


def _check_sources(profile: ModelProfile, opts: PlanOptions) -> None:
    """Every flag and variable a plan takes from outside the planner, judged by its role where it is used
    (:mod:`tui.core.vllmargv`): the profile's and its overrides' (as a profile's) and the operator's ``--arg``
    and ``--env``. The model is checked by :func:`vllmargv.server_argv` as each argv is built."""
    for a in (*opts.extra_args, *profile.extra_args):
        if a.startswith("--") and is_secret_flag(a):
            raise InputError(f"{a.split('=', 1)[0]} would put a secret on vLLM's command line, which vLLM logs at "
                             "start-up: pass --api-key (it reaches the servers as VLLM_API_KEY) or set HF_TOKEN in "
                             "the environment", field="--arg")
    src = f"profile {profile.id}"
    for key, value in (("vllm.load_format", profile.load_format),
                       ("vllm.served_model_name", profile.served_model_name)):
        if value is not None:
            vllmargv.check_value(value, field=key, file=src)
    vllmargv.check_tail(profile.extra_args, vllmargv.Source.PROFILE, field="vllm.args", file=src)
    for k, v in profile.env:
        vllmargv.check_env(k, v, vllmargv.Source.PROFILE, field=f"vllm.env.{k}", file=src)
    for name, ov in profile.overrides:
        vllmargv.check_tail(ov.args, vllmargv.Source.PROFILE, field=f"overrides.{name}.args", file=src)
        for k, v in ov.env:
            vllmargv.check_env(k, v, vllmargv.Source.PROFILE, field=f"overrides.{name}.env.{k}", file=src)
    vllmargv.check_tail(opts.extra_args, vllmargv.Source.OPERATOR, field="--arg")
    for k, v in opts.extra_env:
        vllmargv.check_env(k, v, vllmargv.Source.OPERATOR, field="--env")


def _dp_part(topo: Topology, opts: PlanOptions, exe: str, model: str, gpus: tuple[int, ...], tail: list[str],
             env_tail: list[tuple[str, str]]) -> ServerSpec:
    """This host's ranks of data parallel across hosts (vLLM's multi-node DP): the head (start rank 0) runs the API
    server and its local engines; another host runs engines only (``--headless``), which reach the head's RPC port.
    A headless part has no HTTP endpoint of its own: its URL is the head's, whose ``/health`` answers once every
    host's engines have joined."""
    local, start = opts.dp_local or topo.dp, opts.dp_start_rank
    address = opts.dp_address or opts.host
    env = [("CUDA_VISIBLE_DEVICES", ",".join(map(str, gpus))), ("VLLM_ENGINE_READY_TIMEOUT_S", READY_TIMEOUT_ENV)]
    dp = ["--data-parallel-size", str(topo.dp), "--data-parallel-size-local", str(local)]
    rpc = ["--data-parallel-address", address, "--data-parallel-rpc-port", str(opts.dp_rpc_port)]
    if start == 0:
        argv = vllmargv.server_argv(exe, model, "--host", opts.host, "--port", str(opts.port), *dp, *rpc, *tail)
        return ServerSpec(name="server", role="single", argv=argv, env=tuple(env + env_tail), gpus=gpus,
                          host=opts.host, port=opts.port, tp=topo.tp, dp=local)
    argv = vllmargv.server_argv(exe, model, "--headless", *dp, "--data-parallel-start-rank", str(start), *rpc, *tail)
    return ServerSpec(name=f"engines-{start}", role="headless", argv=argv, env=tuple(env + env_tail),
                      gpus=gpus, host=address, port=opts.port, tp=topo.tp, dp=local)


def _dedupe_env(s: ServerSpec) -> ServerSpec:
    """Later settings of a variable win, keeping the first position (profile env may override host env)."""
    order: list[str] = []
    values: dict[str, str] = {}
    for k, v in s.env:
        if k not in values:
            order.append(k)
        values[k] = v
    return replace(s, env=tuple((k, values[k]) for k in order))


def check_plan(p: LaunchPlan) -> None:
    """Internal consistency: GPUs not shared, HTTP ports and NIXL side-channel ports unique."""
    seen_gpu: dict[int, str] = {}
    for s in p.servers:
        for g in s.gpus:
            if g in seen_gpu and not p.shared_gpus:
                raise PlanRefused(f"GPU {g} assigned to both {seen_gpu[g]} and {s.name}")
            seen_gpu[g] = s.name
    ports: dict[int, str] = {}
    for name, port in [(s.name, s.port) for s in p.servers] + ([("proxy", p.proxy.port)] if p.proxy else []):
        if not 1 <= port <= 65535:
            raise PlanRefused(f"{name} would get port {port}, outside 1..65535; choose a lower --server-port")
        if port in ports:
            raise PlanRefused(f"HTTP port {port} given to both {ports[port]} and {name}: vLLM binds with "
                              "SO_REUSEPORT, so both would start and silently split the traffic")
        ports[port] = name
    side: dict[int, str] = {}
    for s in p.servers:
        for sp in s.side_channel_ports():
            if not 1 <= sp <= 65535:
                raise PlanRefused(f"{s.name} would get NIXL side-channel port {sp}, outside 1..65535; choose a "
                                  "lower --side-channel-port")
            if sp in side:
                raise PlanRefused(f"NIXL side-channel port {sp} given to both {side[sp]} and {s.name}: the second "
                                  "engine would hang forever in init")
            if sp in ports:
                raise PlanRefused(f"port {sp} is both an HTTP port and {s.name}'s NIXL side channel")
            side[sp] = s.name


def _remove_flag(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` in any spelling vLLM reads as it (``-tp``, ``--tensor_parallel_size=2``), its
    values going with it; the executable, ``serve`` and the model are never touched."""
    return vllmargv.without_flags(argv, (vllmargv.flag_of(flag),))


def apply_fix(p: LaunchPlan, fix: PlanFix, label: str) -> LaunchPlan:
    """The plan with ``fix`` applied to every server (or those of ``fix.roles``); recorded as ``label``."""
    servers = []
    for s in p.servers:
        if fix.roles and s.role not in fix.roles:
            servers.append(s)
            continue
        where = f"playbook entry {label}"
        for k, v in fix.set_env:
            vllmargv.check_env(k, v, vllmargv.Source.PLAYBOOK, field=f"fix.set_env.{k}", file=where)
        for k in fix.unset_env:  # filled from a log line: never what the planner placed
            vllmargv.check_unset(k, vllmargv.Source.PLAYBOOK, (name for name, _ in s.env), field="fix.unset_env",
                                 file=where)
        inherited = tuple(k for k in fix.unset_env if k not in dict(s.env))  # taken out of what the server inherits
        for k in inherited:  # only vLLM's own: a name filled from a log line never takes PATH or LD_* away
            if not _VLLM_VAR.fullmatch(k):
                raise InputError(f"{shown(k, 60)}: a fix takes only vLLM's own variables (VLLM_*) out of the "
                                 "environment a server inherits", file=where, field="fix.unset_env")
        env = [(k, v) for k, v in s.env if k not in fix.unset_env]
        set_keys = dict(fix.set_env)
        env = [(k, set_keys.pop(k) if k in set_keys else v) for k, v in env]
        env += list(set_keys.items())
        argv = list(s.argv)
        for flag in fix.remove_args:
            argv = _remove_flag(argv, vllmargv.check_removal(flag, vllmargv.Source.PLAYBOOK, field="fix.remove_args",
                                                             file=where))
        for item in fix.add_args:
            try:
                parts = shlex.split(item)
            except ValueError as exc:  # a placeholder filled from a log line with an unbalanced quote
                raise InputError(f"cannot split {shown(item, 80)!r}: {exc}", file=where, field="fix.add_args") from None
            if not parts:
                continue
            read = vllmargv.check_tail(parts, vllmargv.Source.PLAYBOOK, field="fix.add_args", file=where)
            if len(read) != 1:  # '--max-model-len {estimated}' filled with '8 --enforce-eager': one flag an item
                raise InputError(f"{shown(item, 80)!r} is {len(read)} flags: a fix's item is one flag with its value",
                                 file=where, field="fix.add_args")
            argv = _remove_flag(argv, parts[0])
            argv += parts
        servers.append(replace(s, env=tuple(env), argv=tuple(argv),
                               unset_env=tuple(dict.fromkeys((*s.unset_env, *inherited)))))
    result = replace(p, servers=tuple(servers), fixes_applied=(*p.fixes_applied, label),
                     workarounds=(*p.workarounds, *(Workaround(d, f"playbook entry {label}", f"fix:{label}")
                                                    for d in fix.describe())))
    check_plan(result)
    return result


__all__ = [
    "DEFAULT_PORT", "LaunchPlan", "PlanFix", "PlanOptions", "ProxySpec", "ServerSpec", "Workaround", "apply_fix",
    "check_plan", "plan",
]
