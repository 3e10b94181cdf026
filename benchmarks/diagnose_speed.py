"""How fast ``disagg-tui diagnose`` judges a long saved log: the whole-file path against the line-by-line one.

    python benchmarks/diagnose_speed.py [--lines 2000000] [--repeat 1]

Two logs are built from the real vLLM 0.24 startup log of the fixtures (``startup/main.log``), ``--lines`` lines
each: ``long run``, its start once and then its serving lines (request, metrics-scrape and throughput lines)
over and over, as a server's log looks after hours of benchmarks; and ``restarts``, the whole log over and over
(a start every 459 lines: the worst case for the whole-file path, since most lines are then startup lines it
must read). Each is diagnosed, in the same run, by

- ``line by line``: the path ``diagnose`` took before (every line decoded and fed to the matcher, the playbook's
  literals looked for in each line, the phase tracker trying every later phase's pattern on each line: its old
  loop is kept below as the reference);
- ``whole file``: :func:`tui.core.playbook.offline.diagnose_bytes` (the literals of everything that can change
  the matcher searched in the whole file at once, only the lines with one fed).

Both must give the same diagnosis (checked: the ``same`` column). Nothing here is asserted; the times depend on
the host (2 shared cores here), the ratio less so.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.core.launch import phases  # noqa: E402
from tui.core.launch.phases import PHASE_INDEX, PHASES, PhaseTracker, PhaseUpdate, last_tqdm  # noqa: E402
from tui.core.playbook import Playbook, load_playbook  # noqa: E402
from tui.core.playbook.offline import LogDiagnosis, diagnose_bytes, log_lines  # noqa: E402

MAIN_LOG = ROOT / "tests" / "fixtures" / "vllm-0.24.0-h200" / "startup" / "main.log"


class OldTracker(PhaseTracker):
    """The phase tracker's loop before this change (every pattern of every phase tried on every line)."""

    def feed(self, line: str) -> PhaseUpdate | None:
        self.lines_seen += 1
        best: int | None = None
        for key, pattern in phases._PHASE_PATTERNS:
            i = PHASE_INDEX[key]
            if i >= self.index and (best is None or i > best) and pattern.search(line):
                best = i
        detail = ""
        inner = 0.0
        bar = last_tqdm(line) if ("%|" in line) else None
        if bar is not None:
            label, n, total = bar
            detail = f"{label} {n}/{total}"
            inner = n / total if total else 0.0
        if best is None and bar is None:
            return None
        new_index = best if best is not None else self.index
        if new_index < self.index:
            return None
        phase = PHASES[new_index]
        nxt = PHASES[new_index + 1].progress if new_index + 1 < len(PHASES) else 1.0
        progress = phase.progress + (nxt - phase.progress) * inner * 0.95
        if new_index == self.index and progress <= self.progress and not detail:
            return None
        self.index = new_index
        self.progress = max(self.progress, progress)
        self.detail = detail
        return PhaseUpdate(phase, self.progress, detail)


def line_by_line(data: bytes, book: Playbook) -> LogDiagnosis:
    """The old path: decode and split the whole file, feed every line (old tracker loop)."""
    m = book.matcher()
    m.tracker = OldTracker()
    count = 0
    for count, line in enumerate(log_lines(data), start=1):
        m.feed(line, count)
    m.finish()
    return LogDiagnosis(source="", lines=count, ready=m.ready_seen, phase=m.tracker.phase.key,
                        diagnoses=tuple(m.diagnoses))


def build_logs(lines: int) -> dict[str, bytes]:
    src = MAIN_LOG.read_text(encoding="utf-8").splitlines()
    ready = next(i for i, line in enumerate(src) if "Application startup complete" in line) + 1
    start, serving = src[:ready], src[ready:]
    long_run = start + (serving * (lines // len(serving) + 1))[: max(lines - len(start), 0)]
    restarts = (src * (lines // len(src) + 1))[:lines]
    return {"long run": ("\n".join(long_run) + "\n").encode(), "restarts": ("\n".join(restarts) + "\n").encode()}


def best_of(repeat: int, fn: Any) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def same(a: LogDiagnosis, b: LogDiagnosis) -> bool:
    def plain(r: LogDiagnosis) -> dict[str, Any]:
        d = r.to_dict()
        for x in d["diagnoses"]:
            x.pop("ts", None)
        return d

    return plain(a) == plain(b)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2_000_000, help="lines per log (default 2000000)")
    ap.add_argument("--repeat", type=int, default=1, help="passes per path, best kept (default 1)")
    args = ap.parse_args()
    book = load_playbook(operator=False)
    print(f"diagnose speed — {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; playbook of {len(book)} "
          f"entries, {len(book.literals)} literals")
    print(f"{'log':<10} {'lines':>9} {'MB':>7} {'line by line s':>15} {'whole file s':>13} {'ratio':>7}  same")
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in build_logs(args.lines).items():
            path = Path(tmp) / "server.log"
            path.write_bytes(data)  # read back as diagnose does, so both pay the same read
            t_old, old = best_of(args.repeat, lambda p=path: line_by_line(p.read_bytes(), book))
            t_new, new = best_of(args.repeat, lambda p=path: diagnose_bytes(p.read_bytes(), book))
            print(f"{name:<10} {new.lines:>9,} {len(data) / 1e6:>7.1f} {t_old:>15.2f} {t_new:>13.2f} "
                  f"{t_old / t_new:>6.1f}×  {'yes' if same(old, new) else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
