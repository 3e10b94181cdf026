"""What a starting server does while its log is silent: compilers in its process tree, caches that grow.

vLLM 0.24 logs nothing while FlashInfer JIT-compiles its sampling kernels (``ninja`` with ``nvcc`` jobs under the
engine, building into ``~/.cache/flashinfer/<ver>/<arch>/cached_ops/sampling``: 94 s on the real H200), while
Triton runs ``ptxas``, or while torch.compile writes ``~/.cache/vllm/torch_compile_cache``. A sub-phase is shown
from its evidence (a compiler in the tree, compiled output written), never because a cache folder was touched.
A sampler reads the server's process tree (psutil) and its cache directories, in a thread;
:class:`SubPhaseTracker` turns the samples into sub-phases, each with its own elapsed time, and says whether the
server made progress (a compiler that used CPU, a cache that grew) since the last sample: the stall detector
counts that as output. A compiler that stops using CPU and writes nothing is no progress.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

COMPILERS = ("nvcc", "cicc", "ptxas", "cudafe++", "fatbinary", "nvlink", "cc1plus")
_FLASHINFER_DIR = re.compile(r"flashinfer/[^ ]*?/cached_ops/(?P<module>[\w.-]+)")
_SNAPSHOT_HEAD = re.compile(r"^\[(?P<clock>[\d:]+) \+(?P<t>\d+)s\] log_bytes=(?P<log>\d+) jit_procs=(?P<n>\d+)")
_SNAPSHOT_PROC = re.compile(r"^\s+(?P<pid>\d+)\s+(?P<ppid>\d+)\s+(?P<age>\d+)\s+(?P<cpu>[\d.]+)\s+(?P<rss>\d+)\s+"
                            r"(?P<cmd>.+)$")
#: cache directories a start writes, by kind (resolved from the server's environment: :func:`cache_dirs`)
CACHE_KINDS = ("flashinfer", "vllm", "triton")
#: bytes a compile folder must have grown by before its writing is shown as a sub-phase (one JIT module is MBs, a
#: torch.compile cache tens of MB; an autotuner's log line or a lock file is not a compile)
MIN_CACHE_GROWTH = 64 * 1024
#: seconds a compile folder that was being written stays still before its sub-phase is said to be done
CACHE_QUIET_S = 5.0


@dataclass(frozen=True, slots=True)
class ProcSample:
    """One process of a server's tree at one moment."""

    pid: int
    ppid: int
    cmdline: str
    cpu_s: float | None = None  # user + system CPU seconds so far (psutil)
    cpu_pct: float | None = None  # CPU % over the last interval (a ps capture)

    @property
    def exe(self) -> str:
        """The program's base name (``/bin/sh -c nvcc ...`` is ``sh``)."""
        first = self.cmdline.split(" ", 1)[0] if self.cmdline else ""
        return os.path.basename(first)


@dataclass(frozen=True, slots=True)
class Activity:
    """One kind of silent work seen in a sample."""

    key: str  # flashinfer_jit | triton_ptxas | inductor_compile | nvcc
    what: str  # "JIT-compiling FlashInfer sampling kernels"
    jobs: int  # compiler processes
    cpu_s: float  # their CPU seconds so far (None summed as 0)
    busy: bool  # a compiler used CPU in this sample (cpu_pct > 0), when only percentages are known
    detail: str = ""


def _descendants(procs: Sequence[ProcSample], root: int) -> list[ProcSample]:
    kids: dict[int, list[ProcSample]] = {}
    for p in procs:
        kids.setdefault(p.ppid, []).append(p)
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c.pid)
    return out


def classify(procs: Sequence[ProcSample]) -> dict[str, Activity]:
    """The activities in one sample of a process tree."""
    out: dict[str, Activity] = {}
    claimed: set[int] = set()

    def add(key: str, what: str, members: list[ProcSample], detail: str = "", jobs_n: int | None = None) -> None:
        jobs = len([m for m in members if m.exe in COMPILERS]) if jobs_n is None else jobs_n
        out[key] = Activity(key, what, jobs, sum(m.cpu_s or 0.0 for m in members),
                            any((m.cpu_pct or 0.0) > 0 for m in members), detail)
        claimed.update(m.pid for m in members)

    for p in procs:
        if p.exe == "ninja" and "flashinfer" in p.cmdline:
            m = _FLASHINFER_DIR.search(p.cmdline)
            module = m.group("module") if m else "kernels"
            # one build edge per direct child of ninja (``/bin/sh -c nvcc ...``, or nvcc itself)
            edges = sum(1 for c in procs if c.ppid == p.pid)
            add("flashinfer_jit", f"JIT-compiling FlashInfer {module} kernels", [p, *_descendants(procs, p.pid)],
                module, jobs_n=edges)
    free = [p for p in procs if p.pid not in claimed]
    ptxas = [p for p in free if p.exe == "ptxas"]
    if ptxas:
        triton = any("triton" in p.cmdline for p in ptxas)
        add("triton_ptxas", "Triton ptxas" if triton else "ptxas (torch inductor)", ptxas)
    inductor = [p for p in free if "compile_worker" in p.cmdline and "_inductor" in p.cmdline]
    if inductor:
        add("inductor_compile", "torch.compile workers", inductor)
    nvcc = [p for p in free if p.exe in ("nvcc", "cicc") and p.pid not in claimed]
    if nvcc:
        add("nvcc", "nvcc", nvcc)
    return out


def label(a: Activity, elapsed_s: float) -> str:
    jobs = ""
    if a.key == "flashinfer_jit":
        n = a.jobs
        jobs = f"{n} nvcc job{'s' * (n != 1)}, "
    elif a.jobs > 1:
        jobs = f"{a.jobs} jobs, "
    return f"{a.what} ({jobs}{elapsed_s:.0f} s)"


@dataclass
class Transition:
    """A sub-phase to publish: started or changed (``running``), or ended (``done``)."""

    key: str
    label: str
    state: str
    elapsed_s: float
    jobs: int = 0
    cpu_s: float = 0.0
    detail: str = ""
    cache_bytes: int = 0


@dataclass
class SubPhaseTracker:
    """Samples in, sub-phases out; ``progress`` says whether the last sample showed work being done."""

    first_seen: dict[str, float] = field(default_factory=dict)
    last: dict[str, Activity] = field(default_factory=dict)
    cache_start: dict[str, int] = field(default_factory=dict)
    cache_last: dict[str, int] = field(default_factory=dict)
    cache_seen: dict[str, float] = field(default_factory=dict)  # kind -> when its writing was first shown
    cache_grew: dict[str, float] = field(default_factory=dict)  # kind -> when it last grew
    progress: bool = False
    history: list[tuple[str, float, float]] = field(default_factory=list)  # (key, first seen, last seen)
    _last_t: dict[str, float] = field(default_factory=dict)

    def feed(self, t: float, procs: Sequence[ProcSample], caches: Mapping[str, tuple[str, int]] | None = None
             ) -> list[Transition]:
        """One sample at ``t`` seconds: the process tree and each cache kind's (directory, bytes)."""
        now = classify(procs)
        out: list[Transition] = []
        progress = False
        for key, a in now.items():
            start = self.first_seen.setdefault(key, t)
            prev = self.last.get(key)
            cpu_moved = prev is not None and a.cpu_s > prev.cpu_s + 0.01
            if a.busy or cpu_moved or (prev is None and a.cpu_s == 0.0 and a.jobs > 0):
                progress = True
            if prev is None or prev.jobs != a.jobs or int((t - start) // 10) != int((self._last_t.get(key, t) -
                                                                                    start) // 10):
                out.append(Transition(key, label(a, t - start), "running", t - start, a.jobs, a.cpu_s, a.detail))
            self._last_t[key] = t
        for key, prev in list(self.last.items()):
            if key not in now:
                start = self.first_seen.pop(key)
                end = self._last_t.pop(key, t)
                self.history.append((key, start, end))
                out.append(Transition(key, label(prev, end - start).replace(" (", " done (", 1), "done", end - start,
                                      prev.jobs, prev.cpu_s, prev.detail))
        self.last = now
        for kind, (path, size) in (caches or {}).items():
            self.cache_start.setdefault(kind, size)
            before = self.cache_last.get(kind, size)
            self.cache_last[kind] = size
            grown = size - self.cache_start[kind]
            if size > before:
                progress = True
                if grown < MIN_CACHE_GROWTH:  # a few bytes are no compile: not shown as one (its time not counted)
                    continue
                first = self.cache_seen.setdefault(kind, t)
                self.cache_grew[kind] = t
                what = {"vllm": "torch.compile (cache miss: writing", "flashinfer": "FlashInfer JIT (writing",
                        "triton": "Triton (writing"}.get(kind, f"{kind} (writing")
                out.append(Transition(f"cache_{kind}", f"{what} {path}, {_size_text(grown)})", "running",
                                      t - first, detail=path, cache_bytes=grown))
            elif kind in self.cache_seen and t - self.cache_grew.get(kind, t) >= CACHE_QUIET_S:
                # the writing stopped: the sub-phase ends (it is not shown through the phases that follow)
                first, last = self.cache_seen.pop(kind), self.cache_grew.pop(kind, t)
                self.history.append((f"cache_{kind}", first, last))
                what = {"vllm": "torch.compile cache written", "flashinfer": "FlashInfer JIT output written",
                        "triton": "Triton cache written"}.get(kind, f"{kind} written")
                out.append(Transition(f"cache_{kind}", f"{what} ({_size_text(grown)} in {last - first:.0f} s)",
                                      "done", last - first, detail=path, cache_bytes=grown))
        self.progress = progress
        return out

    def finish(self, t: float) -> None:
        for key in list(self.first_seen):
            self.history.append((key, self.first_seen.pop(key), self._last_t.pop(key, t)))
        for kind in list(self.cache_seen):
            self.history.append((f"cache_{kind}", self.cache_seen.pop(kind), self.cache_grew.pop(kind, t)))


def _size_text(grown: int) -> str:
    return f"+{grown / 1e6:,.1f} MB" if grown >= 100_000 else f"+{grown / 1e3:,.0f} kB"


# --- sampling a live server (blocking: call from a thread) ---------------------------------------------------


def sample_tree(pid: int) -> list[ProcSample]:
    """The descendants of ``pid`` with their command lines and CPU seconds (the server itself left out)."""
    try:
        root = psutil.Process(pid)
        kids = root.children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for k in kids:
        try:
            with k.oneshot():
                cmd = " ".join(k.cmdline()) or k.name()
                times = k.cpu_times()
                out.append(ProcSample(k.pid, k.ppid(), cmd, cpu_s=float(times.user + times.system)))
        except psutil.Error:
            continue
    return out


def cache_dirs(env: Mapping[str, str]) -> dict[str, Path]:
    """Where FlashInfer's JIT, vLLM's torch.compile and Triton write, for a server with environment ``env`` (its
    own variables first, the home directory's defaults otherwise)."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    xdg = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home / ".cache"
    fi_base = env.get("FLASHINFER_WORKSPACE_BASE")
    return {
        "flashinfer": (Path(fi_base) / ".cache" / "flashinfer") if fi_base else xdg / "flashinfer",
        "vllm": Path(env["VLLM_CACHE_ROOT"]) if env.get("VLLM_CACHE_ROOT") else xdg / "vllm",
        "triton": Path(env["TRITON_CACHE_DIR"]) if env.get("TRITON_CACHE_DIR") else home / ".triton" / "cache",
    }


def dir_bytes(path: Path, limit: int = 50_000) -> int:
    """Bytes of the files under ``path`` (at most ``limit`` files looked at); 0 when it does not exist."""
    total = seen = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            seen += 1
            if seen > limit:
                return total
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                continue
    return total


def compile_dirs(kind: str, root: Path) -> list[Path]:
    """The folders under a cache root that only a compile writes: FlashInfer's JIT build folders
    (``<ver>/<arch>/cached_ops``, not its ``flashinfer_jit.log``, which the autotuner appends to with nothing
    compiled), vLLM's ``torch_compile_cache`` (not ``modelinfos``, written while the model config is resolved, long
    before torch.compile runs), Triton's cache as a whole."""
    if kind == "flashinfer":
        try:
            return sorted(root.glob("*/*/cached_ops"))[:16]
        except OSError:
            return []
    if kind == "vllm":
        return [root / "torch_compile_cache"]
    return [root]


def cache_sizes(dirs: Mapping[str, Path]) -> dict[str, tuple[str, int]]:
    """Each cache kind's (folder shown, bytes of what compiles wrote there: :func:`compile_dirs`)."""
    out = {}
    for kind, root in dirs.items():
        found = compile_dirs(kind, root)
        shown = found[0] if len(found) == 1 else root
        out[kind] = (str(shown), sum(dir_bytes(p) for p in found))
    return out


def cache_state(env: Mapping[str, str], argv: Sequence[str]) -> str:
    """``warm`` when the caches this start would fill are there (FlashInfer's compiled JIT modules when its
    sampler is on; vLLM's torch.compile cache unless ``--enforce-eager``), else ``cold``. A heuristic: it does not
    check that the cached entries match this model and configuration."""
    dirs = cache_dirs(env)
    needs = []
    if env.get("VLLM_USE_FLASHINFER_SAMPLER", "1") not in ("0", "false", "False"):
        needs.append(any((dirs["flashinfer"]).glob("*/*/cached_ops/*/*.so")))
    if "--enforce-eager" not in argv:
        cc = dirs["vllm"] / "torch_compile_cache"
        needs.append(cc.is_dir() and any(cc.iterdir()))
    return "warm" if all(needs) else "cold"


#: what vLLM 0.24 logs when torch.compile compiles (a cache miss) or loads its compiled graphs (a hit): §5
_COMPILED = re.compile(r"Compiling a graph for compile range \S.{0,60} takes [\d.]+ s|saved AOT compiled function to ")
_LOADED = re.compile(r"Directly load the compiled graph\(s\) for compile range .{1,80} from the cache|"
                     r"Directly load AOT compilation from path ")
#: sub-phases that are compiles: a start that had one was not warm
COMPILE_SUBPHASES = ("flashinfer_jit", "triton_ptxas", "inductor_compile", "nvcc", "cache_flashinfer", "cache_vllm",
                     "cache_triton")


@dataclass
class CompileEvidence:
    """What one start's own log and sub-phases say of its compile caches: ``cold`` when it compiled (torch.compile
    "Compiling a graph for compile range … takes" / "saved AOT compiled function", a JIT compiler in its tree,
    compiled output written), ``warm`` when torch.compile loaded from its cache ("Directly load …") and nothing was
    compiled. A non-empty cache folder says neither: each configuration has its own torch.compile cache key."""

    torch_compile: str = ""  # "" (not said) | miss | hit

    def feed(self, line: str) -> None:
        if "Directly load" in line and _LOADED.search(line[:4096]):
            if self.torch_compile != "miss":
                self.torch_compile = "hit"
        elif ("Compiling a graph" in line or "saved AOT compiled" in line) and _COMPILED.search(line[:4096]):
            self.torch_compile = "miss"

    def cache_state(self, subphases: Iterable[str], before: str = "") -> str:
        """The start's cache state from its evidence; ``before`` (the judgment from the folders before it started)
        when it neither compiled nor loaded anything (``--enforce-eager`` with the sampler off)."""
        seen = set(subphases)
        if self.torch_compile == "hit":  # its log says it loaded: what it wrote there is no compile of its own
            seen.discard("cache_vllm")
        if self.torch_compile == "miss" or seen & set(COMPILE_SUBPHASES):
            return "cold"
        if self.torch_compile == "hit":
            return "warm"
        return before


# --- the fixture's capture format (a sampled start, every 3 s) ------------------------------------------------


def parse_snapshots(lines: Iterable[str]) -> list[tuple[float, int, list[ProcSample]]]:
    """``[HH:MM:SS +Ns] log_bytes=B jit_procs=K`` headers, each followed by K ``pid ppid age cpu% rss cmd`` lines:
    (seconds since the start, log bytes, processes)."""
    out: list[tuple[float, int, list[ProcSample]]] = []
    for line in lines:
        h = _SNAPSHOT_HEAD.match(line)
        if h:
            out.append((float(h["t"]), int(h["log"]), []))
            continue
        p = _SNAPSHOT_PROC.match(line)
        if p and out:
            out[-1][2].append(ProcSample(int(p["pid"]), int(p["ppid"]), p["cmd"].strip(), cpu_pct=float(p["cpu"])))
    return out
