"""Which engine matches playbook patterns from others: stdlib ``re``, the ``regex`` module, or RE2 (``google-re2``).

    python benchmarks/playbook_regex.py [--cap S] [--repeat N]

(results and the choice they made: benchmarks/results/playbook-regex.md)

Cases (one row each; every engine is measured in the same run, so the ratios against ``re`` hold on this machine):

- the shipped playbook through ``Matcher.feed`` over real vLLM 0.24 logs (every line of tests/fixtures/
  vllm-0.24.0-h200*: the largest log alone, then all 23), with every probe compiled by the engine;
- every shipped pattern searched once over a 1 MiB line (a real log's lines joined by spaces: every literal
  occurs, so nothing is skipped), without the matcher's cut at ``MAX_MATCH_CHARS``;
- patterns that backtrack polynomially, which ``redos.explosive`` does not refuse, on 10k- and 100k-character
  lines: ``\\s*\\s*\\s*x``, ``.*.*.*=``, ``(\\w|\\d)+$``, ``a*a*a*a*b``.

A measurement runs in a child process killed after ``--cap`` seconds (shown as ``> cap``); an engine past the cap
at 10k is not run at 100k. ``regex`` is measured without ``timeout=``: its timeout bounds one search, not a
diagnose (every line that near-misses costs the whole timeout, and the match is given up). ``regex`` is not a
dependency: ``pip install regex`` to measure it (else its column says so).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.core.playbook import Playbook, load_playbook, read_log_lines  # noqa: E402
from tui.core.playbook.linear import compile_linear  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
LARGEST = FIXTURES / "vllm-0.24.0-h200-knobs" / "logs" / "bench_console.log"
ENGINES = ("re", "regex", "re2")
#: (pattern, the subject of n characters): an ordinary line shape each backtracks on
POLY = (
    (r"\s*\s*\s*x", lambda n: " " * (n - 2) + "yx"),  # a run of spaces (an aligned table), an 'x' later
    (r".*.*.*=", lambda n: "=" + "v" * (n - 1)),  # a key=value line with a long value
    (r"(\w|\d)+$", lambda n: "1" * (n - 1) + "!"),  # a long number then punctuation
    (r"a*a*a*a*b", lambda n: "a" * (n - 2) + "cb"),  # a run of one letter
)
SIZES = (10_000, 100_000)
MiB = 1 << 20


def compiler(engine: str) -> Callable[[str], Any]:
    if engine == "re":
        import re

        return re.compile
    if engine == "regex":
        import regex  # type: ignore[import-not-found,unused-ignore]

        return regex.compile  # type: ignore[no-any-return]
    return compile_linear


def available(engine: str) -> bool:
    try:
        compiler(engine)
    except ImportError:
        return False
    return True


def with_engine(book: Playbook, engine: str) -> Playbook:
    """The playbook with every probe compiled by ``engine`` (the loader compiles with RE2)."""
    comp = compiler(engine)

    def probe(p: Any) -> Any:
        return dataclasses.replace(p, regex=comp(p.text))

    entries = []
    for e in book.entries:
        if e.lines is not None:
            e = dataclasses.replace(e, lines=dataclasses.replace(
                e.lines, patterns=tuple(map(probe, e.lines.patterns)), after=tuple(map(probe, e.lines.after))))
        if e.end is not None:
            e = dataclasses.replace(e, end=dataclasses.replace(
                e.end, seen=tuple(map(probe, e.end.seen)), not_seen=tuple(map(probe, e.end.not_seen))))
        entries.append(e)
    return Playbook(entries)


def shipped_patterns(book: Playbook) -> list[str]:
    out: dict[str, None] = {}
    for e in book.entries:
        for p in (*(e.lines.patterns + e.lines.after if e.lines else ()),
                  *(e.end.seen + e.end.not_seen if e.end else ())):
            out.setdefault(p.text)
    return list(out)


def fixture_logs() -> list[Path]:
    return sorted(p for d in FIXTURES.glob("vllm-0.24.0-h200*") for p in d.rglob("*.log"))


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if times[-1] > 1.0:  # a slow case once is enough
            break
    return min(times)


def measure(engine: str, case: str, repeat: int) -> float:
    """Seconds for one case (run in the child process)."""
    book = load_playbook(operator=False)
    if case.startswith("feed:"):
        logs = [LARGEST] if case == "feed:largest" else fixture_logs()
        texts = [read_log_lines(p) for p in logs]
        pb = with_engine(book, engine)

        def feed() -> None:
            for lines in texts:
                m = pb.matcher("bench")
                for n, line in enumerate(lines, 1):
                    m.feed(line, n)
                m.finish()

        return best_of(repeat, feed)
    if case == "mib-line":
        comp = compiler(engine)
        regexes = [comp(p) for p in shipped_patterns(book)]
        line = " ".join(read_log_lines(LARGEST))
        line = (line * (MiB // len(line) + 1))[:MiB]
        return best_of(max(1, repeat // 4), lambda: [r.search(line) for r in regexes])
    index, n = (int(x) for x in case.split(":")[1:])
    pattern, subject = POLY[index]
    r = compiler(engine)(pattern)
    text = subject(n)
    return best_of(3, lambda: r.search(text))


def run_one(engine: str, case: str, cap: float, repeat: int) -> float | None:
    """Seconds, or None past ``cap`` (the child is killed)."""
    try:
        out = subprocess.run([sys.executable, __file__, "--one", engine, case, "--repeat", str(repeat)],
                             capture_output=True, text=True, timeout=cap, check=True)
    except subprocess.TimeoutExpired:
        return None
    return float(json.loads(out.stdout.strip().splitlines()[-1])["s"])


def fmt(s: float | None, cap: float) -> str:
    if s is None:
        return f"> {cap:g} s"
    if s < 1e-3:
        return f"{s * 1e6:,.1f} µs"
    return f"{s * 1e3:,.2f} ms" if s < 10 else f"{s:,.1f} s"


def ratio(s: float | None, base: float | None, cap: float) -> str:
    if s is None:
        return "—" if base is None else f"≥ {cap / base:,.0f}×"
    if base is None:
        return f"≤ 1/{cap / s:,.0f}"
    return f"{s / base:,.2f}×" if s / base >= 0.01 else f"1/{base / s:,.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", type=float, default=10.0, help="seconds one measurement may take (default 10)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--one", nargs=2, metavar=("ENGINE", "CASE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps({"s": measure(args.one[0], args.one[1], args.repeat)}))
        return 0

    book = load_playbook(operator=False)
    logs = fixture_logs()
    lines_all = sum(len(read_log_lines(p)) for p in logs)
    cases: list[tuple[str, str]] = [
        ("feed:largest", f"shipped playbook, {LARGEST.name} ({len(read_log_lines(LARGEST)):,} lines)"),
        ("feed:all", f"shipped playbook, all {len(logs)} h200 fixture logs ({lines_all:,} lines)"),
        ("mib-line", f"all {len(shipped_patterns(book))} shipped patterns, one 1 MiB line"),
    ]
    cases += [(f"poly:{i}:{n}", f"{pat}  on {n // 1000}k chars") for i, (pat, _) in enumerate(POLY) for n in SIZES]
    engines = [e for e in ENGINES if available(e)]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"Python {sys.version.split()[0]}; cap {args.cap:g} s per measurement; engines: {', '.join(engines)}"
          + ("" if len(engines) == len(ENGINES) else " (regex not installed)"))
    results: dict[tuple[str, str], float | None] = {}
    over: set[tuple[str, int]] = set()
    for case, _label in cases:
        for engine in engines:
            if case.startswith("poly:"):
                index = int(case.split(":")[1])
                if (engine, index) in over:  # past the cap at 10k: 100k is not run
                    results[(engine, case)] = None
                    continue
            s = run_one(engine, case, args.cap, args.repeat)
            results[(engine, case)] = s
            if s is None and case.startswith("poly:"):
                over.add((engine, int(case.split(":")[1])))
    width = max(len(label) for _, label in cases)
    head = f"{'case':<{width}}" + "".join(f"  {e:>12}  {'vs re':>9}" for e in engines)
    print()
    print(head)
    print("-" * len(head))
    for case, label in cases:
        base = results[("re", case)]
        row = f"{label:<{width}}"
        for e in engines:
            s = results[(e, case)]
            row += f"  {fmt(s, args.cap):>12}  {ratio(s, base, args.cap) if e != 're' else '1.00×':>9}"
        print(row)
    print()
    print("> cap: killed at the cap (at 100k: not run, the 10k case was already past it). A ratio ≥ N× or")
    print("≤ 1/N is a bound: the engine (or re) was past the cap.")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
