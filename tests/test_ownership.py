"""Every layout has an owner and its launch request (issue 23): the state file records who started a layout (with
its process and the time) and the exact request, reads both back with the strict readers, and says who holds a
layout now (a running campaign, a benchmark); failed layouts move into a history; a start whose launcher is gone is
followed by its servers' health. Unit tests on the core, with real processes where liveness matters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tui.core.errors import EXIT_BAD_INPUT, InputError
from tui.core.events import EventBus
from tui.core.follow import LayoutFollower, shown_layout
from tui.core.launch import failures, ownership
from tui.core.launch.adopt import follow_orphans, launcher_gone
from tui.core.launch.events import LayoutChanged
from tui.core.launch.state import LayoutOwner, LayoutRecord, LayoutUser, ProcessRecord, StateStore, drain_notes
from tui.core.launch.supervisor import create_time
from tui.core.plan.request import LaunchRequest

T0 = 1_800_000_000.0


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process of our own (a campaign's, a benchmark's, a server's stand-in)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def _gone_pid() -> tuple[int, float]:
    """The pid and start time of a process that has ended."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    ct = create_time(p.pid)
    p.wait()
    return p.pid, ct or T0


def _record(lid: str = "L", *, status: str = "ready", created: float = T0, **kw: Any) -> LayoutRecord:
    return LayoutRecord(id=lid, created=created, simulated=True, status=status,
                        plan={"topology": "dp2", "profile_id": "m", "servers": [{"name": "server"}]},
                        processes=kw.pop("processes", []), endpoint="http://127.0.0.1:1", **kw)


def _proc(name: str, pid: int, ct: float, **kw: Any) -> ProcessRecord:
    return ProcessRecord(name=name, role="single", pid=pid, pgid=pid, create_time=ct, log="", url=kw.pop("url", ""),
                         **kw)


# --- the record ----------------------------------------------------------------------------------------------


def test_owner_request_and_users_survive_the_state_file_and_an_old_record_still_loads(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    request = LaunchRequest(model="dummy-qwen3-8b", topology="tp1", gpu_memory_utilization=0.95, max_model_len=65536,
                            extra_args=("--served-model-name", "my model"), extra_env=(("MY_VAR", "x y"),))
    with store.locked() as layouts:
        layouts["L"] = _record(started_by=LayoutOwner(kind="campaign", pid=4242, create_time=T0, since=T0 + 1,
                                                      name="sweep"),
                               request=ownership.request_to_store(replace(request, replace=True)),
                               users=[LayoutUser(kind="bench", pid=77, create_time=T0, since=T0, what="decode-heavy")])
        layouts["old"] = _record("old")
    raw = json.loads(store.file.read_text())
    for key in ("started_by", "request", "users", "fix_basis", "owner_create_time"):
        del raw["layouts"]["old"][key]  # as a disagg-tui before owners were recorded wrote it
    store.file.write_text(json.dumps(raw))
    got = store.read()
    rec = got["L"]
    assert rec.started_by == LayoutOwner(kind="campaign", pid=4242, create_time=T0, since=T0 + 1, name="sweep")
    assert rec.users[0].what == "decode-heavy"
    assert rec.launch_request() == request  # read back with the request's own parser; --replace is not kept
    assert "--replace" not in (rec.request or [])
    old = got["old"]
    assert old.started_by is None and old.request is None and old.users == [] and old.launch_request() is None
    assert ownership.started_by_text(old) == ""


@pytest.mark.parametrize(("field", "value", "where"), [
    ("started_by", {"kind": "campaign", "pid": -1}, "started_by.pid"),
    ("started_by", {"kind": "\x1b[31mx", "pid": 1}, "started_by.kind"),
    ("started_by", {"kind": "cli", "pid": 1, "since": 1e300}, "started_by.since"),
    ("request", ["--model", "m\x1b[2J"], "request[1]"),
    ("request", "--model m", "request"),
    ("users", [{"kind": "bench", "pid": "1"}], "users[0].pid"),
    ("users", [{"kind": "bench", "pid": 1}] * 65, "users"),
])
def test_a_hostile_owner_request_or_user_is_one_line_naming_its_field(tmp_path: Path, field: str, value: Any,
                                                                      where: str) -> None:
    store = StateStore(tmp_path)
    with store.locked() as layouts:
        layouts["L"] = _record()
    raw = json.loads(store.file.read_text())
    raw["layouts"]["L"][field] = value
    store.file.write_text(json.dumps(raw))
    # the record is quarantined, the others kept (issue 32): a one-line warning names the layout and the field
    assert "L" not in store.read()
    notes = drain_notes()
    assert len(notes) == 1 and f"layout L, field '{where}'" in notes[0] and "\n" not in notes[0]


def test_a_stored_request_that_does_not_parse_says_so_and_a_secret_comes_from_the_environment() -> None:
    rec = _record(request=["--model", "m", "--topology", "tp9x"])
    with pytest.raises(InputError, match="stored launch request of layout L does not parse"):
        ownership.stored_request(rec)
    secret = LaunchRequest(model="m", topology="tp1", extra_env=(("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz12"),
                                                                ("A", "1")))
    from tui.core.redact import redact_data

    stored = _record(request=redact_data(ownership.request_to_store(secret)))
    assert "hf_abcdefghijklmnopqrstuvwxyz12" not in json.dumps(stored.request)
    with pytest.raises(InputError, match="HF_TOKEN"):
        ownership.stored_request(stored, environ={})
    back = ownership.stored_request(stored, environ={"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz12"})
    assert back == secret


def test_fixes_are_stored_as_the_request_asks_for_them() -> None:
    r = LaunchRequest(model="m", topology="tp1", apply_fix="auto")
    assert "--apply-fix" in ownership.request_to_store(r) and "auto" in ownership.request_to_store(r)
    stored = LaunchRequest.from_argv(ownership.request_to_store(r, ["a-fix", "b-fix"]))
    assert stored.apply_fix == "a-fix,b-fix" and ownership.fix_ids(stored) == ["a-fix", "b-fix"]
    assert ownership.with_fix(stored, "c-fix").apply_fix == "a-fix,b-fix,c-fix"
    assert ownership.with_fix(stored, "a-fix").apply_fix == "a-fix,b-fix"
    with pytest.raises(InputError, match="auto"):
        LaunchRequest(model="m", topology="tp1", apply_fix="auto,a-fix")


# --- who holds a layout ---------------------------------------------------------------------------------------


def test_a_running_campaign_or_benchmark_holds_a_layout_and_a_dead_one_does_not(
        sleeper: subprocess.Popen[bytes]) -> None:
    pid, ct = sleeper.pid, create_time(sleeper.pid)
    campaign = _record(started_by=LayoutOwner(kind="campaign", pid=pid, create_time=ct, since=time.time(),
                                              name="sweep"))
    (h,) = ownership.holders(campaign)
    assert h.kind == "campaign" and f"campaign sweep (pid {pid})" in h.text
    assert ownership.holders(campaign, me=(pid,)) == []  # the campaign itself
    with pytest.raises(ownership.LayoutInUse) as err:
        ownership.check_free(campaign, "stop it")
    assert err.value.exit_code == EXIT_BAD_INPUT
    assert "dp2 of m (layout L) is in use by campaign sweep" in err.value.one_line()
    assert "--force to stop it anyway" in err.value.one_line()
    assert ownership.check_free(campaign, "stop it", force=True) == [h]
    # the same pid with another start time is another process: no holder
    recycled = _record(started_by=LayoutOwner(kind="campaign", pid=pid, create_time=ct - 1000, name="sweep"))
    assert ownership.holders(recycled) == []
    dead_pid, dead_ct = _gone_pid()
    ended = _record(started_by=LayoutOwner(kind="campaign", pid=dead_pid, create_time=dead_ct, since=T0,
                                           name="sweep"))
    assert ownership.holders(ended) == []
    assert f"(pid {dead_pid}, ended)" in ownership.started_by_text(ended)
    console = _record(started_by=LayoutOwner(kind="console", pid=pid, create_time=ct, since=T0))
    assert ownership.holders(console) == []  # a console that started it holds nothing
    assert ownership.started_by_text(console).startswith(f"started by the console (pid {pid}) at ")
    cli = _record(started_by=LayoutOwner(kind="cli", pid=dead_pid, create_time=dead_ct, since=T0))
    assert ownership.started_by_text(cli).startswith(f"started by `disagg-tui up` from the CLI (pid {dead_pid}) at")
    bench = _record(users=[LayoutUser(kind="bench", pid=pid, create_time=ct, since=time.time(), what="decode-heavy"),
                           LayoutUser(kind="bench", pid=dead_pid, create_time=dead_ct)])
    (b,) = ownership.holders(bench)
    assert b.kind == "bench" and f"a benchmark (pid {pid}, decode-heavy)" in b.text


def test_a_benchmark_is_a_user_of_the_layout_while_it_runs(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    dead_pid, dead_ct = _gone_pid()
    with store.locked() as layouts:
        layouts["L"] = _record(users=[LayoutUser(kind="bench", pid=dead_pid, create_time=dead_ct)])
    with ownership.using(store, "L", what="decode-heavy, runs/bench"):
        (me,) = store.read()["L"].users  # the dead one dropped
        assert me.pid == os.getpid() and me.what == "decode-heavy, runs/bench"
        (held,) = ownership.holders(store.read()["L"])  # another command sees this benchmark hold it
        assert held.kind == "bench" and held.pid == os.getpid()
        assert ownership.holders(store.read()["L"], me=(os.getpid(),)) == []  # the caller leaves itself out
    assert store.read()["L"].users == []


# --- failed layouts are history -----------------------------------------------------------------------------


def test_a_failure_moves_into_the_history_when_dismissed_and_stays_listed(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    diag = {"kind": "diagnosis", "ts": T0, "server": "server", "entry_id": "e1", "title": "boom", "severity": "error",
            "fix": "do x", "line_no": 3}
    with store.locked() as layouts:
        layouts["F1"] = _record("F1", status="failed", created=T0, diagnoses=[diag], note="exited")
        layouts["F2"] = _record("F2", status="failed", created=T0 + 10)
    with store.locked() as layouts:  # what a new start does: every failure out of the state file
        assert sorted(failures.retire_failed(store, layouts, keep="F2")) == ["F1"]
    assert set(store.read()) == {"F2"}
    assert failures.dismiss(store, "F2") and store.read() == {}
    assert not failures.dismiss(store, "F2")  # not in the state file any more
    past = failures.past_failures(store)
    assert [f.layout_id for f in past] == ["F2", "F1"] and not any(f.current for f in past)
    assert past[1].record is not None and past[1].record.diagnoses[0]["entry_id"] == "e1"
    assert failures.fix_diagnoses(store, "e1", "m")[0]["line_no"] == 3  # a fix's values found in the history
    assert failures.fix_diagnoses(store, "e1", "other") == []
    # a damaged history file is listed with its one-line error, never a traceback
    failures.failed_file(store, "F3").parent.mkdir(parents=True)
    failures.failed_file(store, "F3").write_text('{"version": 1, "layout": {"id": 3}}')
    bad = next(f for f in failures.past_failures(store) if f.layout_id == "F3")
    assert bad.record is None and "failed.json" in bad.error


def test_a_running_layouts_fix_basis_gives_a_restart_the_same_values(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    old = {"kind": "diagnosis", "ts": T0, "server": "s", "entry_id": "e1", "title": "t", "severity": "error",
           "fix": "f", "line_no": 1, "captures": {"estimated": "1000"}}
    newer = {**old, "line_no": 2, "captures": {"estimated": "2000"}}
    with store.locked() as layouts:
        layouts["F"] = _record("F", status="failed", created=T0, diagnoses=[old])
        layouts["R"] = _record("R", status="ready", created=T0 + 60, fix_basis=[newer])
    assert failures.fix_diagnoses(store, "e1", "m")[0]["captures"] == {"estimated": "2000"}


def test_stopping_a_layout_never_gives_the_screen_back_to_an_older_failure(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    with store.locked() as layouts:
        layouts["F"] = _record("F", status="failed", created=T0)
        layouts["H"] = _record("H", status="ready", created=T0 + 100)
    assert shown_layout(store.read()).id == "H"  # type: ignore[union-attr]
    bus = EventBus()
    seen: list[Any] = []
    bus.subscribe(seen.append)
    follower = LayoutFollower(bus, store)
    follower.poll_once()
    with store.locked() as layouts:
        del layouts["H"]  # stopped
    follower.poll_once()
    changed = [e for e in seen if isinstance(e, LayoutChanged)]
    assert [(e.layout_id, e.status) for e in changed] == [("H", "ready"), ("H", "stopped")]
    assert shown_layout(store.read(), since=T0 + 100) is None
    assert shown_layout(store.read()).id == "F"  # type: ignore[union-attr]  # a new console sees the last failure


# --- a start whose launcher is gone --------------------------------------------------------------------------


def test_a_start_whose_launcher_is_gone_follows_its_servers(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    store = StateStore(tmp_path)
    dead, dead_ct = _gone_pid()
    alive = _proc("server", sleeper.pid, create_time(sleeper.pid), url="http://127.0.0.1:9")
    with store.locked() as layouts:
        layouts["L"] = _record(status="starting", owner_pid=dead, owner_create_time=dead_ct, processes=[alive])
    assert launcher_gone(store.read()["L"])
    answers = {"http://127.0.0.1:9": False}
    assert follow_orphans(store, probe=lambda url: answers[url]) == ["L"]
    rec = store.read()["L"]
    assert rec.status == "starting" and f"its launcher (pid {dead}) is gone" in rec.note
    answers["http://127.0.0.1:9"] = True
    follow_orphans(store, probe=lambda url: answers[url])
    rec = store.read()["L"]
    assert rec.status == "ready" and rec.processes[0].ready_at is not None
    assert follow_orphans(store, probe=lambda url: True) == []  # ready: nothing left to follow
    # a launcher that is alive is left to do its own work
    with store.locked() as layouts:
        layouts["L"] = _record(status="starting", owner_pid=os.getpid(), owner_create_time=create_time(os.getpid()),
                               processes=[alive])
    assert follow_orphans(store, probe=lambda url: True) == [] and store.read()["L"].status == "starting"
    # every process gone with the launcher: failed
    gone = _proc("server", dead, dead_ct, url="http://127.0.0.1:9")
    with store.locked() as layouts:
        layouts["L"] = _record(status="starting", owner_pid=dead, owner_create_time=dead_ct, processes=[gone])
    follow_orphans(store, probe=lambda url: True)
    assert store.read()["L"].status == "failed"
