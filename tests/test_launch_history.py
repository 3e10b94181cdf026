"""Start-up history: the ETA of the next start of the same plan on this host."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tui.core.launch import history as h
from tui.core.models import Catalog
from tui.core.plan.hostfacts import sim_facts
from tui.core.plan.planner import PlanOptions, plan


def _plan(**kw: object):  # type: ignore[no-untyped-def]
    profile = Catalog.load().model("qwen3.6-27b-nvfp4")
    return plan(profile, "1p1d", sim_facts("b200", 2), PlanOptions(**kw))  # type: ignore[arg-type]


def test_median_of_the_last_starts_of_the_same_plan_and_server(tmp_path: Path) -> None:
    hist = h.StartupHistory(tmp_path)
    p = _plan()
    key = h.plan_key(p)
    assert h.expected_startup(hist, p, "decode-0") is None  # a first start: no ETA
    for s in (100.0, 400.0, 110.0, 120.0, 90.0, 95.0):  # the oldest (100) falls out of the last five
        hist.append(h.StartupRecord(key=key, server="decode-0", startup_s=s, phases=(("loading", s / 10),)))
    hist.append(h.StartupRecord(key=key, server="prefill-0", startup_s=999.0))
    e = h.expected_startup(hist, p, "decode-0")
    assert e is not None and e.samples == 5 and e.seconds == 110.0 and e.source == "history"
    assert dict(e.phases)["loading"] == 11.0
    assert "median of 5 earlier starts" in e.describe()


def test_a_changed_flag_is_another_plan_and_a_damaged_line_is_skipped(tmp_path: Path) -> None:
    hist = h.StartupHistory(tmp_path)
    a, b = _plan(), _plan(gpu_memory_utilization=0.8)
    assert h.plan_key(a) != h.plan_key(b) and h.plan_key(a) == h.plan_key(_plan())
    hist.append(h.StartupRecord(key=h.plan_key(a), server="decode-0", startup_s=50.0))
    with hist.path.open("a") as f:
        f.write('{"key": broken\n')
    assert h.expected_startup(hist, b, "decode-0") is None
    e = h.expected_startup(hist, a, "decode-0")
    assert e is not None and e.seconds == 50.0
    sim = h.expected_startup(hist, b, "decode-0", sim_startup_s=4.0)
    assert sim is not None and sim.source == "simulated start" and sim.seconds == 4.0


def test_the_file_is_trimmed_to_the_recent_starts(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(h, "MAX_BYTES", 2000)
    hist = h.StartupHistory(tmp_path)
    rec = h.StartupRecord(key="k", server="s", startup_s=1.0)
    for i in range(60):
        hist.append(replace(rec, startup_s=float(i)))
    kept = hist.records()
    assert len(kept) <= 5 + 20 and kept[-1].startup_s == 59.0
    assert h.expected_startup(hist, _plan(), "s") is None
