"""What the servers and the machine say about a run: KV transfer, Triton JIT compiles, energy, a fingerprint.

- KV transfer (1P1D): the decode server's ``vllm:prompt_tokens_by_source_total`` counters before and after the
  run. Prompt tokens that came over NIXL count as ``external_kv_transfer``; tokens the decode server computed
  itself count as ``local_compute``. A disaggregated run in which decode computed most prompt tokens itself did
  the prefill twice (the transfer failed or was never asked for) and is flagged.
- Triton JIT: vLLM 0.24 logs ``Triton kernel JIT compilation during inference: <kernel>`` when a kernel compiles
  on first use after warm-up; a run during which a server logged it carries a latency spike and is flagged.
- Prefix cache: every server's ``vllm:prefix_cache_queries_total`` / ``…_hits_total`` before and after the run. A
  run whose prompts the servers had cached (the same seed run again) skipped its prefill and is flagged.
- Simulated pacing: a simulated server exports how many virtual seconds its engines ran steps for
  (``disagg_sim:paced_seconds_total``) and how many its steps ended later than scheduled
  (``disagg_sim:pacing_lag_seconds_total``: the host could not keep ``--sim-clock``). A run during which any engine
  fell behind by more than ``SIM_OVERLOAD_SHARE`` of its time is flagged ``sim-overloaded``: its figures say more
  about this machine's CPUs than about the simulated GPUs. The check also says which clock would have held.
- Energy: a hook giving each GPU's total energy in mJ (NVML ``nvmlDeviceGetTotalEnergyConsumption``); read
  before and after the run, it gives joules per output token.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
import socket
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from tui import __version__
from tui.core import paths, safeio, safewrite
from tui.core.errors import InputError
from tui.core.redact import Redactor
from tui.core.telemetry import prom
from tui.core.telemetry.derive import (
    DEFAULT_MIN_EXTERNAL_SHARE,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_BY_SOURCE,
    RUNNING,
    WAITING,
)

JIT_MARKER = "Triton kernel JIT compilation during inference"
#: decode computing more than this share of the prompt tokens it saw means it did the prefill itself (the live
#: view's verdict uses the same cut)
RECOMPUTE_SHARE = 1.0 - DEFAULT_MIN_EXTERNAL_SHARE
#: prompt tokens served from the prefix cache beyond what the workload shares on purpose before a run is flagged
PREFIX_HIT_MARGIN = 0.05
#: a simulated engine whose steps ran late by more than this share of the run's virtual time distorts the figures
SIM_OVERLOAD_SHARE = 0.05
#: the clock suggested after an overloaded run leaves this much headroom below the pace the host reached
SIM_CLOCK_HEADROOM = 0.7
SIM_PACED = "disagg_sim:paced_seconds_total"
SIM_LAG = "disagg_sim:pacing_lag_seconds_total"
SIM_CLOCK = "disagg_sim:clock"
EnergyReader = Callable[[], Mapping[int, float]]  # GPU index -> total energy since driver load, mJ



def prompt_tokens_by_source(text: str) -> dict[str, float] | None:
    """Sum over engines of ``vllm:prompt_tokens_by_source_total`` per source; None when the server lacks it."""
    found: dict[str, float] = {}
    for sample in prom.parse(text, keep=(PROMPT_BY_SOURCE,)).samples(PROMPT_BY_SOURCE):
        src = sample.label("source") or ""
        found[src] = found.get(src, 0.0) + sample.value
    return found or None


@dataclass(frozen=True, slots=True)
class KvTransferCheck:
    external: float
    local_compute: float
    cache_hit: float
    servers: tuple[str, ...]

    @property
    def transferred(self) -> bool:
        return self.external > 0

    @property
    def local_share(self) -> float:
        total = self.external + self.local_compute
        return self.local_compute / total if total > 0 else 0.0

    @property
    def recomputed(self) -> bool:
        """Decode did (most of) the prefill itself."""
        return self.local_compute > 0 and self.local_share > RECOMPUTE_SHARE

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(transferred=self.transferred, recomputed=self.recomputed, local_share=self.local_share)
        return d

    def line(self) -> str:
        if self.recomputed:
            return (f"decode computed {self.local_compute:,.0f} of {self.external + self.local_compute:,.0f} "
                    f"prompt tokens itself: KV transfer did not happen for most requests (prefill done twice)")
        return (f"KV transfer: {self.external:,.0f} prompt tokens arrived over the connector, "
                f"{self.local_compute:,.0f} computed on decode")


def kv_check(before: Mapping[str, Mapping[str, float] | None], after: Mapping[str, Mapping[str, float] | None]
             ) -> KvTransferCheck | None:
    """Deltas over the run, summed over the decode servers that export the counter (None if none does)."""
    ext = loc = hit = 0.0
    servers = []
    for url, a in after.items():
        b = before.get(url)
        if a is None or b is None:
            continue
        servers.append(url)
        ext += a.get("external_kv_transfer", 0.0) - b.get("external_kv_transfer", 0.0)
        loc += a.get("local_compute", 0.0) - b.get("local_compute", 0.0)
        hit += a.get("local_cache_hit", 0.0) - b.get("local_cache_hit", 0.0)
    if not servers:
        return None
    return KvTransferCheck(ext, loc, hit, tuple(servers))


def prefix_cache_counts(text: str) -> tuple[float, float] | None:
    """``(queries, hits)`` of vLLM's local prefix cache in tokens, summed over engines; None when not exported."""
    exp = prom.parse(text, keep=("vllm:prefix_cache_",))
    queries = exp.total(PREFIX_QUERIES)
    return None if queries is None else (queries, exp.total(PREFIX_HITS) or 0.0)


@dataclass(frozen=True, slots=True)
class PrefixCacheCheck:
    """Prompt tokens the servers took from their prefix cache during a run instead of computing them.

    vLLM caches prefixes by default, and the random dataset with a fixed seed sends the same prompts every time: a
    run repeated on a server that still holds the last run's blocks skips most of its prefill, and its TTFT is
    understated (on the H200, 128 prompts of 512 tokens: mean TTFT ~1.0 s cold, ~0.25 s when cached).
    ``expected`` is the share the workload itself shares on purpose (a common prefix)."""

    queries: float
    hits: float
    expected: float = 0.0

    @property
    def share(self) -> float:
        return self.hits / self.queries if self.queries > 0 else 0.0

    @property
    def unexpected(self) -> bool:
        return self.share > self.expected + PREFIX_HIT_MARGIN

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(share=self.share, unexpected=self.unexpected)
        return d


def prefix_check(before: Mapping[str, tuple[float, float] | None], after: Mapping[str, tuple[float, float] | None],
                 expected: float = 0.0) -> PrefixCacheCheck | None:
    """Deltas over the run, summed over the servers that export the counters (None if none does)."""
    queries = hits = 0.0
    found = False
    for url, a in after.items():
        b = before.get(url)
        if a is None or b is None:
            continue
        found = True
        queries += a[0] - b[0]
        hits += a[1] - b[1]
    return PrefixCacheCheck(queries, hits, expected) if found else None


SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
#: positions of a draft the per-position acceptance is kept for (vLLM exports one series per draft position)
SPEC_POSITIONS = 32


def spec_decode_counts(text: str) -> dict[str, Any] | None:
    """vLLM's speculative-decoding counters (drafts, draft tokens, accepted tokens, accepted per position), summed
    over engines; None when the server exports none (no speculative decoding)."""
    exp = prom.parse(text, keep=("vllm:spec_decode_",))
    drafts = exp.total(SPEC_DRAFTS)
    if drafts is None:
        return None
    per_pos: dict[int, float] = {}
    for smp in exp.samples(SPEC_PER_POS):
        pos = smp.label("position") or ""
        if pos.isdigit() and int(pos) < SPEC_POSITIONS:
            per_pos[int(pos)] = per_pos.get(int(pos), 0.0) + smp.value
    return {"drafts": drafts, "draft_tokens": exp.total(SPEC_DRAFT_TOKENS) or 0.0,
            "accepted_tokens": exp.total(SPEC_ACCEPTED) or 0.0, "per_position": per_pos}


def spec_decode_check(before: Mapping[str, dict[str, Any] | None], after: Mapping[str, dict[str, Any] | None]
                      ) -> dict[str, Any] | None:
    """Over a run, summed over the servers that export the counters: drafts, draft and accepted tokens, vLLM's
    acceptance rate (accepted / draft tokens), mean acceptance length (1 + accepted / drafts: the bonus token
    counted, as vLLM's ``SpecDecoding metrics`` line has it) and the acceptance rate per draft position."""
    drafts = draft_tokens = accepted = 0.0
    per_pos: dict[int, float] = {}
    found = False
    for url, a in after.items():
        b = before.get(url) or {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "per_position": {}}
        if a is None:
            continue
        found = True
        drafts += a["drafts"] - b["drafts"]
        draft_tokens += a["draft_tokens"] - b["draft_tokens"]
        accepted += a["accepted_tokens"] - b["accepted_tokens"]
        for pos, v in a["per_position"].items():
            per_pos[pos] = per_pos.get(pos, 0.0) + v - b["per_position"].get(pos, 0.0)
    if not found:
        return None
    return {"drafts": drafts, "draft_tokens": draft_tokens, "accepted_tokens": accepted,
            "acceptance_rate": accepted / draft_tokens if draft_tokens > 0 else None,
            "mean_acceptance_length": 1.0 + accepted / drafts if drafts > 0 else None,
            "per_position_acceptance": [per_pos.get(i, 0.0) / drafts if drafts > 0 else None
                                        for i in range(max(per_pos) + 1)] if per_pos else []}


def spec_decode_of(texts: Mapping[str, str | None]) -> dict[str, dict[str, Any] | None]:
    return {u: (spec_decode_counts(t) if t is not None else None) for u, t in texts.items()}


Pacing = dict[str, tuple[float, float, float]]  # engine -> (paced virtual s, lag virtual s, clock)


def sim_pacing(text: str) -> Pacing | None:
    """Each simulated engine's pacing counters; None for a server that is not simulated (no such series)."""
    exp = prom.parse(text, keep=("disagg_sim:",))
    out: dict[str, list[float]] = {}
    for i, name in enumerate((SIM_PACED, SIM_LAG, SIM_CLOCK)):
        for sample in exp.samples(name):
            out.setdefault(sample.label("engine") or "0", [0.0, 0.0, 1.0])[i] = sample.value
    return {k: (v[0], v[1], v[2]) for k, v in out.items()} or None


@dataclass(frozen=True, slots=True)
class PacingCheck:
    """How far the simulated servers fell behind their clock during a run: the worst engine's lag share."""

    share: float  # lag / (paced + lag) of the worst engine
    lag_s: float  # virtual seconds that engine ended its steps late
    clock: float
    worst: str  # "<server url> engine <n>"

    @property
    def overloaded(self) -> bool:
        return self.share > SIM_OVERLOAD_SHARE

    @property
    def held_clock(self) -> float:
        """A clock this machine would have kept: the pace it reached, with headroom, never above the one asked."""
        reached = self.clock * (1.0 - self.share)
        if not self.overloaded:
            return self.clock
        return max(1.0, math.floor(reached * SIM_CLOCK_HEADROOM * 10) / 10) if reached >= 1 else reached

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(overloaded=self.overloaded, held_clock=self.held_clock)
        return d

    def line(self) -> str:
        if not self.overloaded:
            return f"the simulated servers kept clock {self.clock:g} (worst lag {self.share:.1%})"
        if self.clock * (1.0 - self.share) < 1.0:
            return (f"the simulated servers fell {self.share:.0%} behind clock {self.clock:g} ({self.worst}): this "
                    "machine cannot pace them even in real time; run fewer servers or requests at once")
        return (f"the simulated servers fell {self.share:.0%} behind clock {self.clock:g} ({self.worst}): on this "
                f"machine --sim-clock {self.held_clock:g} would have held")


def pacing_check(before: Mapping[str, Pacing | None], after: Mapping[str, Pacing | None]) -> PacingCheck | None:
    """Deltas over the run per engine; the worst share (None when no server is simulated)."""
    worst: PacingCheck | None = None
    for url, a in after.items():
        b = before.get(url) or {}
        if a is None:
            continue
        for engine, (paced, lag, clock) in a.items():
            p0, l0, _ = b.get(engine, (0.0, 0.0, clock))
            dp, dl = max(0.0, paced - p0), max(0.0, lag - l0)
            share = dl / (dp + dl) if dp + dl > 0 else 0.0
            if worst is None or share > worst.share:
                worst = PacingCheck(share=share, lag_s=dl, clock=clock, worst=f"{url} engine {engine}")
    return worst


def pacing_of(texts: Mapping[str, str | None]) -> dict[str, Pacing | None]:
    return {u: (sim_pacing(t) if t is not None else None) for u, t in texts.items()}


async def scrape_metrics(urls: Iterable[str], timeout_s: float = 5.0,
                         client: httpx.AsyncClient | None = None) -> dict[str, str | None]:
    """Each server's ``/metrics`` text (None where it did not answer 200), all asked at once (on ``client`` when
    given: a poller keeps its connections)."""
    urls = list(dict.fromkeys(urls))

    async def one(client: httpx.AsyncClient, url: str) -> str | None:
        try:
            r = await client.get(url.rstrip("/") + "/metrics")
        except httpx.HTTPError:
            return None
        return r.text if r.status_code == 200 else None

    if client is not None:
        texts = await asyncio.gather(*(one(client, u) for u in urls))
    else:
        async with httpx.AsyncClient(timeout=timeout_s) as own:
            texts = await asyncio.gather(*(one(own, u) for u in urls))
    return dict(zip(urls, texts, strict=True))


def sources_of(texts: Mapping[str, str | None], urls: Iterable[str]) -> dict[str, dict[str, float] | None]:
    return {u: (prompt_tokens_by_source(t) if (t := texts.get(u)) is not None else None) for u in urls}


def prefix_counts_of(texts: Mapping[str, str | None]) -> dict[str, tuple[float, float] | None]:
    return {u: (prefix_cache_counts(t) if t is not None else None) for u, t in texts.items()}


async def wait_idle(urls: Iterable[str], timeout_s: float = 30.0, poll_s: float = 0.05) -> bool:
    """Wait until no server has a request running or waiting (``vllm:num_requests_running`` and ``_waiting``
    summed over engines), so a run starts on an idle server and not on the tail of its warm-up. Servers that
    export neither gauge are not waited for. False when the deadline passed first."""
    urls = list(urls)
    if not urls:
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with httpx.AsyncClient(timeout=5.0) as client:
        while True:
            busy = 0.0
            for text in (await scrape_metrics(urls, client=client)).values():
                if text is None:
                    continue
                exp = prom.parse(text, keep=(RUNNING, WAITING))
                busy += (exp.total(RUNNING) or 0.0) + (exp.total(WAITING) or 0.0)
            if busy == 0:
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(poll_s)


# --- server logs --------------------------------------------------------------------------------------------


def log_offsets(logs: Iterable[str]) -> dict[str, int]:
    out = {}
    for path in logs:
        try:
            out[path] = os.path.getsize(path)
        except OSError:
            out[path] = 0
    return out


def jit_lines(offsets: Mapping[str, int], limit: int = 20) -> list[str]:
    """Lines a server logged since ``offsets`` that report a Triton JIT compile during inference."""
    found: list[str] = []
    for path, start in offsets.items():
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                data = fh.read()
        except OSError:
            continue
        for raw in data.decode("utf-8", "replace").splitlines():
            if JIT_MARKER in raw:
                found.append(f"{Path(path).name}: {raw.strip()[:300]}")
                if len(found) >= limit:
                    return found
    return found


def copy_logs(logs: Iterable[str], dest: Path, max_bytes: int = 20 * 1024 * 1024) -> list[str]:
    """Copy the servers' logs into the run (the last ``max_bytes`` of each), secrets redacted."""
    copied = []
    root = paths.root_for(dest) or dest
    safewrite.ensure_dir(dest, root=root)
    red = Redactor()
    for path in logs:
        p = Path(path)
        with contextlib.suppress(OSError, InputError, safewrite.UnsafeDir):
            fd, st = safeio.open_regular(p)  # a FIFO or a device named as a log is never read
            with os.fdopen(fd, "rb") as src:
                if st.st_size > max_bytes:
                    src.seek(st.st_size - max_bytes)
                data = src.read(max_bytes)
            safewrite.write_atomic(dest / p.name, red.text(data.decode("utf-8", "replace")), root=root)
            copied.append(p.name)
    return copied


# --- energy and fingerprint -----------------------------------------------------------------------------


def nvml_energy_reader(nvml: Any, gpus: Sequence[int]) -> EnergyReader:
    """An energy hook over an initialised pynvml-compatible module (total energy since driver load, mJ)."""
    handles = {g: nvml.nvmlDeviceGetHandleByIndex(g) for g in gpus}

    def read() -> dict[int, float]:
        return {g: float(nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for g, h in handles.items()}

    read()  # fails now, not mid-run, when the GPU has no energy counter
    return read


def energy_delta(before: Mapping[int, float] | None, after: Mapping[int, float] | None,
                 output_tokens: int) -> dict[str, Any] | None:
    if not before or not after:
        return None
    per_gpu = {int(g): (after[g] - before[g]) / 1000.0 for g in after if g in before}
    total = sum(per_gpu.values())
    return {"joules": total, "per_gpu_joules": per_gpu,
            "joules_per_output_token": total / output_tokens if output_tokens else None}


def read_energy(reader: EnergyReader | None) -> dict[int, float] | None:
    if reader is None:
        return None
    try:
        return {int(k): float(v) for k, v in reader().items()}
    except Exception:  # noqa: BLE001 - telemetry is optional: a failing counter only loses the energy figure
        return None


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def fingerprint(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Hardware and software the run was measured with (the client side; the server side comes in ``extra``)."""
    out: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "client_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "disagg_tui": __version__,
        "httpx": httpx.__version__,
    }
    if extra:
        out.update(extra)
    return out


async def server_info(base_url: str, timeout_s: float = 10.0, *, headers: dict[str, str] | None = None
                      ) -> dict[str, Any]:
    """``/version`` and ``/v1/models`` of an endpoint (what model it serves; empty values when it does not say)."""
    info: dict[str, Any] = {"server_version": None, "models": [], "max_model_len": None}
    async with httpx.AsyncClient(timeout=timeout_s, headers=headers) as client:
        # both at once: a server that accepts and never answers costs one timeout, not two
        version, models = await asyncio.gather(client.get(base_url.rstrip("/") + "/version"),
                                               client.get(base_url.rstrip("/") + "/v1/models"),
                                               return_exceptions=True)
        if isinstance(version, httpx.Response) and version.status_code == 200:
            with contextlib.suppress(ValueError, AttributeError):
                info["server_version"] = version.json().get("version")
        if isinstance(models, BaseException):
            raise models
        models.raise_for_status()
        body = models.json()
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise ValueError("/v1/models did not answer an OpenAI model list")
        info["models"] = [str(m.get("id")) for m in data if isinstance(m, dict)]
        if data and isinstance(data[0], dict):
            info["max_model_len"] = data[0].get("max_model_len")
            info["root"] = data[0].get("root")
    return info
