"""How fast the playbook matches log lines, on the real vLLM 0.24 logs of the fixtures.

    python benchmarks/playbook_match.py [--repeat N] [LOG...]

For each log: lines, bytes, and lines/s and MB/s through ``Matcher.feed`` (a fresh matcher per pass, every line,
then ``finish``), best of N passes; also the cost of loading and compiling the playbook, and, for comparison,
the same lines through the startup-phase tracker alone (which the matcher runs on every line too) and through
the line rules with the literal prefilter switched off.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.core.launch.phases import PhaseTracker  # noqa: E402
from tui.core.playbook import Playbook, load_playbook, read_log_lines  # noqa: E402

H200 = ROOT / "tests" / "fixtures" / "vllm-0.24.0-h200"
DEFAULT_LOGS = [
    H200 / "failures" / "fail_flashinfer_cudahome_empty.log",
    H200 / "startup" / "main.log",
    H200 / "failures" / "fail_engine_ready_timeout.log",
]


def best_of(repeat: int, fn: object) -> float:
    assert callable(fn)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def without_prefilter(book: Playbook) -> Playbook:
    entries = []
    for e in book.entries:
        if e.lines is not None:
            pats = tuple(dataclasses.replace(p, literals=()) for p in e.lines.patterns)
            e = dataclasses.replace(e, lines=dataclasses.replace(e.lines, patterns=pats))
        entries.append(e)
    return Playbook(entries)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="*", type=Path, default=DEFAULT_LOGS)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()

    t_load = best_of(5, lambda: load_playbook(operator=False))
    book = load_playbook(operator=False)
    plain = without_prefilter(book)
    patterns = sum(len(e.lines.patterns) for e in book.entries if e.lines)
    print(f"playbook: {len(book)} entries, {patterns} line patterns; load + compile {t_load * 1e3:.1f} ms")
    print(f"{'log':<40} {'lines':>6} {'kB':>6} {'lines/s':>10} {'MB/s':>6} {'µs/line':>8} "
          f"{'tracker only':>13} {'no prefilter':>13}")
    for path in args.logs:
        lines = read_log_lines(path)
        size = sum(len(ln.encode()) + 1 for ln in lines)

        def run(pb: Playbook = book, lines: list[str] = lines) -> None:
            m = pb.matcher("bench")
            for n, line in enumerate(lines, 1):
                m.feed(line, n)
            m.finish()

        def track(lines: list[str] = lines) -> None:
            t = PhaseTracker()
            for line in lines:
                t.feed(line)

        t = best_of(args.repeat, run)
        t_track = best_of(args.repeat, track)
        t_plain = best_of(max(3, args.repeat // 4), lambda: run(plain))
        n = len(lines)
        print(f"{path.name:<40} {n:>6} {size / 1e3:>6.0f} {n / t:>10,.0f} {size / t / 1e6:>6.1f} "
              f"{t / n * 1e6:>8.1f} {n / t_track:>10,.0f}/s {n / t_plain:>10,.0f}/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
