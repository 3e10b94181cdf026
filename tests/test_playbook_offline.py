"""The whole-file diagnosis of a saved log (``diagnose_bytes``: literals searched in the whole file, only the
lines with one fed) gives exactly what feeding every line gives (``diagnose_lines``), on every real capture, on
random mixtures of their lines (blank, ``\\r``, invalid UTF-8, no final newline), in any context, and with a
playbook that has a pattern without a literal (then every line is fed). Its speed: benchmarks/diagnose_speed.py.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tui.core.playbook import MatchContext, Playbook, load_playbook
from tui.core.playbook.loader import merge, parse_playbook_file, shipped_playbook_path
from tui.core.playbook.offline import anchors, diagnose_bytes, diagnose_lines, log_lines, state_literals

FIXTURES = Path(__file__).parent / "fixtures"
LOGS = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix in (".log", ".txt", ".out")
              and p.stat().st_size < 4 << 20)


@pytest.fixture(scope="module")
def book() -> Playbook:
    return load_playbook(operator=False)


def _plain(data: bytes, book: Playbook, context: MatchContext | None = None, *, fast: bool) -> dict[str, Any]:
    r = diagnose_bytes(data, book, context=context) if fast else diagnose_lines(log_lines(data), book,
                                                                                 context=context)
    d = r.to_dict()
    for x in d["diagnoses"]:
        x.pop("ts", None)
    return d


def test_the_captures_are_many_and_some_fail(book: Playbook) -> None:
    assert len(LOGS) >= 20
    assert sum(bool(_plain(p.read_bytes(), book, fast=False)["diagnoses"]) for p in LOGS) >= 8


@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_whole_file_equals_line_by_line_on_every_capture(path: Path, book: Playbook) -> None:
    data = path.read_bytes()
    assert _plain(data, book, fast=True) == _plain(data, book, fast=False)


def test_whole_file_equals_line_by_line_on_mixtures(book: Playbook) -> None:
    pool = [line for p in LOGS for line in p.read_bytes().split(b"\n")]
    odd = [b"", b"   ", b"\r", b"\xff\xfe\x80 not utf-8", "█ version 0.24.0".encode(), b"x\r\ry%|"]
    rng = random.Random(13)
    contexts = [None, MatchContext(topology="pd"), MatchContext(vllm_version="0.24.0", topology="tp")]
    for k in range(150):
        parts = rng.sample(pool, rng.randint(0, 80)) + rng.sample(odd, rng.randint(0, len(odd)))
        rng.shuffle(parts)
        data = b"\n".join(parts) + (b"\n" if k % 2 else b"")
        ctx = contexts[k % len(contexts)]
        assert _plain(data, book, ctx, fast=True) == _plain(data, book, ctx, fast=False), k


def test_a_pattern_without_a_literal_feeds_every_line(tmp_path: Path, book: Playbook) -> None:
    extra = tmp_path / "pb.yaml"
    extra.write_text("version: 1\nentries:\n  - id: any-digit-run\n    title: digits\n    severity: warning\n"
                     "    match: {lines: ['\\d{6,}']}\n    explain: x\n", encoding="utf-8")
    mine = Playbook(merge(parse_playbook_file(p) for p in (shipped_playbook_path(), extra)))
    assert state_literals(mine) is None
    data = b"INFO hello\nINFO 1234567 things\n"
    fast = _plain(data, mine, fast=True)
    assert fast == _plain(data, mine, fast=False)
    assert [d["entry_id"] for d in fast["diagnoses"]][:1] == ["any-digit-run"]


def test_every_state_literal_contains_an_anchor(book: Playbook) -> None:
    wanted = state_literals(book)
    assert wanted is not None
    found = anchors(wanted, b"")
    assert len(found) < len(wanted)
    assert all(any(a in lit for a in found) for lit in wanted)
    frequent = "torch.co"  # shared by several literals; frequent in this sample: its literals are searched instead
    assert frequent in found
    assert frequent not in anchors(wanted, frequent.encode() * 1000)
