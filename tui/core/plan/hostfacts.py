"""Facts about the host that decide a plan: GPUs, the CUDA toolchain FlashInfer would JIT with, vLLM and NIXL.

``HostFacts`` is plain data: the planner is pure over it, the simulated host builds one from a preset, and the
real host fills one by looking (``detect_toolchain``, ``detect_vllm``; GPUs come from NVML through the host).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tui.core.plan.gpuspecs import PRESETS, GpuSpec, spec_for_name

EXPECTED_VLLM = "0.24"


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    memory_total_mib: int
    compute_capability: float

    @property
    def spec(self) -> GpuSpec | None:
        return spec_for_name(self.name)

    @property
    def arch(self) -> str:
        if self.compute_capability >= 10.0:
            return "blackwell"
        if self.compute_capability >= 9.0:
            return "hopper"
        return "ampere-or-older"


@dataclass(frozen=True, slots=True)
class Toolchain:
    """Where FlashInfer would find nvcc. FlashInfer looks at CUDA_HOME/CUDA_PATH, then PATH, then /usr/local/cuda."""

    nvcc_on_path: str | None = None
    cuda_home: str | None = None  # $CUDA_HOME or $CUDA_PATH as set
    nvcc_in_cuda_home: str | None = None
    nvcc_in_default: str | None = None  # /usr/local/cuda/bin/nvcc

    @property
    def nvcc(self) -> str | None:
        """The nvcc FlashInfer would use, or None when its JIT would fail."""
        if self.cuda_home is not None:
            return self.nvcc_in_cuda_home
        return self.nvcc_on_path or self.nvcc_in_default

    @property
    def nvcc_usable(self) -> bool:
        return self.nvcc is not None

    @property
    def silent_jit_risk(self) -> bool:
        """nvcc found only under /usr/local/cuda: FlashInfer JIT-compiles for minutes with no output."""
        return self.cuda_home is None and self.nvcc_on_path is None and self.nvcc_in_default is not None


@dataclass(frozen=True, slots=True)
class VllmInfo:
    executable: str  # as given or found
    resolved: str | None  # absolute path, None when not found
    version: str | None  # e.g. "0.24.0"
    python: str | None = None  # interpreter of its venv
    nixl: str | None = None  # nixl package version in the same environment
    flashinfer_cubin: str | None = None
    flashinfer: str | None = None
    error: str | None = None

    @property
    def found(self) -> bool:
        return self.resolved is not None

    @property
    def version_matches(self) -> bool:
        return self.version is not None and (self.version == EXPECTED_VLLM or
                                             self.version.startswith(EXPECTED_VLLM + "."))


@dataclass(frozen=True, slots=True)
class HostFacts:
    simulated: bool
    gpus: tuple[GpuInfo, ...]
    toolchain: Toolchain = field(default_factory=Toolchain)
    vllm: VllmInfo | None = None
    driver: str | None = None
    cuda_driver: str | None = None
    hostname: str = ""
    nvlink: tuple[tuple[str, ...], ...] = ()  # topo matrix: nvlink[i][j] like "NV18", "SYS", "X"

    def gpu(self, index: int) -> GpuInfo | None:
        for g in self.gpus:
            if g.index == index:
                return g
        return None

    @property
    def label(self) -> str:
        kind = "SIMULATED" if self.simulated else "real"
        names = sorted({g.name for g in self.gpus})
        return f"{kind} host {self.hostname}: {len(self.gpus)}× {', '.join(names) or 'no GPU'}"


def sim_facts(gpu: str = "b200", count: int = 2, *, hostname: str = "sim", nvcc: bool = True,
              vllm_version: str = "0.24.0", nixl: bool = True) -> HostFacts:
    """Facts of the simulated host: ``count`` GPUs of a preset, NVLink between all of them."""
    spec = PRESETS[gpu]
    gpus = tuple(
        GpuInfo(index=i, name=spec.name, uuid=f"GPU-5153494d-{gpu}-{i:04d}-0000-{i:012d}",
                memory_total_mib=spec.memory_total_mib, compute_capability=spec.compute_capability)
        for i in range(count)
    )
    link = f"NV{spec.nvlink_links}"
    matrix = tuple(tuple("X" if i == j else link for j in range(count)) for i in range(count))
    tool = Toolchain(nvcc_on_path="/usr/local/cuda/bin/nvcc" if nvcc else None,
                     nvcc_in_default="/usr/local/cuda/bin/nvcc" if nvcc else None)
    vllm = VllmInfo(executable="vllm", resolved="(simulated)", version=vllm_version,
                    nixl="1.5.1" if nixl else None, flashinfer_cubin="0.6.0")
    return HostFacts(simulated=True, gpus=gpus, toolchain=tool, vllm=vllm, driver="580.95.05 (simulated)",
                     cuda_driver="13.0", hostname=hostname, nvlink=matrix)


def detect_toolchain(env: dict[str, str] | None = None) -> Toolchain:
    env = dict(os.environ) if env is None else env
    on_path = shutil.which("nvcc", path=env.get("PATH"))
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    in_home = None
    if home:
        cand = Path(home) / "bin" / "nvcc"
        in_home = str(cand) if cand.is_file() and os.access(cand, os.X_OK) else None
    default = Path("/usr/local/cuda/bin/nvcc")
    in_default = str(default) if default.is_file() and os.access(default, os.X_OK) else None
    return Toolchain(nvcc_on_path=on_path, cuda_home=home or None, nvcc_in_cuda_home=in_home,
                     nvcc_in_default=in_default)


_VERSIONS_SNIPPET = (
    "import importlib.metadata as m\n"
    "for n in ('vllm','nixl','nixl-cu12','nixl-cu13','flashinfer-cubin','flashinfer-python'):\n"
    "    try: print(n, m.version(n))\n"
    "    except Exception: print(n, '-')\n"
)


def _script_python(path: Path) -> str | None:
    """The interpreter named by a console script's shebang (the venv vLLM lives in)."""
    try:
        with path.open("rb") as fh:
            first = fh.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode(errors="replace").strip().split()
    if not parts:
        return None
    if os.path.basename(parts[0]) == "env" and len(parts) > 1:
        return shutil.which(parts[1])
    return parts[0] if "python" in os.path.basename(parts[0]) else None


def detect_vllm(executable: str | None = None, timeout: float = 20.0) -> VllmInfo:
    """Find ``vllm`` and read its version (and NIXL's, FlashInfer's) from its environment's package metadata.

    Reading metadata takes well under a second; importing vLLM would take ~20 s, so it is avoided. Runs blocking
    subprocesses: call it off the event loop.
    """
    exe = executable or "vllm"
    resolved = shutil.which(exe) if os.sep not in exe else (exe if os.access(exe, os.X_OK) else None)
    if resolved is None:
        return VllmInfo(executable=exe, resolved=None, version=None,
                        error=f"'{exe}' not found" + ("" if executable else " on PATH"))
    python = _script_python(Path(resolved))
    versions: dict[str, str] = {}
    error = None
    if python:
        try:
            out = subprocess.run([python, "-c", _VERSIONS_SNIPPET], capture_output=True, text=True,
                                 timeout=timeout, check=False)
            for line in out.stdout.splitlines():
                name, _, ver = line.partition(" ")
                if ver and ver != "-":
                    versions[name] = ver.strip()
        except (OSError, subprocess.TimeoutExpired) as exc:
            error = f"could not read package versions with {python}: {exc}"
    if "vllm" not in versions and error is None:
        try:
            out = subprocess.run([resolved, "--version"], capture_output=True, text=True, timeout=120,
                                 check=False)
            text = (out.stdout or out.stderr).strip().splitlines()
            if out.returncode == 0 and text:
                versions["vllm"] = text[-1].strip()
        except (OSError, subprocess.TimeoutExpired) as exc:
            error = f"'{resolved} --version' failed: {exc}"
    nixl = versions.get("nixl") or versions.get("nixl-cu13") or versions.get("nixl-cu12")
    return VllmInfo(executable=exe, resolved=resolved, version=versions.get("vllm"), python=python, nixl=nixl,
                    flashinfer_cubin=versions.get("flashinfer-cubin"),
                    flashinfer=versions.get("flashinfer-python"), error=error)
