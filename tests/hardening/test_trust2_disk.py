"""Issue 32, "Shared directories" and "The state file holds only what it can read back": a careless colleague on a
shared host (a group- or world-writable folder, a folder of theirs), a planted symlink anywhere below the project's
folders, and a state file with one record its reader refuses.

Each class is one rule: :class:`TestWriteSink` (``tui.core.safewrite``: never through a link, all or nothing),
:class:`TestSharedDirs` (a project folder that others can write is refused, one line, exit 2),
:class:`TestPlantedSymlinks` (the app's own writers, through the CLI where one writes), :class:`TestStateReadsBack`
(one schema on write and on read; a record that does not read is quarantined, every other layout kept).
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.hardening.cli import CliResult, no_traceback, run_cli
from tests.hardening.test_corpus import STATE, STATE_WHOLE
from tui.core import paths, safewrite
from tui.core.errors import InputError
from tui.core.launch.state import LayoutRecord, ProcessRecord, StateStore, drain_notes

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RESULT = FIXTURES / "vllm-0.24.0-h200" / "bench" / "bench2_in7500_out200_n128.json"
DEAD_PID = 4_000_000  # above any pid this host has handed out: never signalled (its start time does not match)


def _errors(res: CliResult) -> list[str]:
    return [ln for ln in res.err_lines if not ln.startswith("warning:")]


def _warnings(res: CliResult) -> list[str]:
    return [ln for ln in res.err_lines if ln.startswith("warning:") and "NVML" not in ln]


def _one_error(res: CliResult) -> str:
    assert no_traceback(res), res.err
    errs = _errors(res)
    assert len(errs) == 1, res.err
    return errs[0]


def _tree(root: Path) -> dict[str, bytes | str]:
    """What a folder holds (a link as its target), to show that a refused write changed nothing."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            rel = str(p.relative_to(root))
            out[rel] = ("-> " + os.readlink(p)) if p.is_symlink() else (p.read_bytes() if p.is_file() else "dir")
    return out


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the project's, where a planted link points: nothing may appear or change in it."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "victim").write_text("precious\n")
    return d


# --- the sink itself ---------------------------------------------------------------------------------------------
class TestWriteSink:
    """``safewrite``: a symlink anywhere below the root (the last component or a middle one, to a file, a folder,
    /dev/null, nowhere) is refused, never followed; a FIFO is never waited on; a write is whole or absent."""

    def test_writes_are_private_and_whole(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        safewrite.write_atomic(root / "a" / "b" / "f.json", '{"x": 1}', root=root)
        assert (root / "a" / "b" / "f.json").read_text() == '{"x": 1}'
        for p in (root, root / "a", root / "a" / "b"):
            assert stat.S_IMODE(p.stat().st_mode) == 0o700
        assert stat.S_IMODE((root / "a" / "b" / "f.json").stat().st_mode) == 0o600
        safewrite.write_atomic(root / "a" / "b" / "f.json", b"second", root=root)
        assert (root / "a" / "b" / "f.json").read_bytes() == b"second"
        assert sorted(os.listdir(root / "a" / "b")) == ["f.json"]  # no temporary file left

    @pytest.mark.parametrize("where", ["last", "middle", "first-below-root"])
    def test_a_link_to_a_file_or_folder_is_refused_wherever_it_is(self, tmp_path: Path, outside: Path,
                                                                  where: str) -> None:
        root = tmp_path / "root"
        (root / "a" / "b").mkdir(parents=True)
        before = _tree(outside)
        if where == "last":
            (root / "a" / "b" / "f").symlink_to(outside / "victim")
        elif where == "middle":
            os.rmdir(root / "a" / "b")
            (root / "a" / "b").symlink_to(outside)
        else:
            (root / "a" / "b").rmdir()
            os.rmdir(root / "a")
            (root / "a").symlink_to(outside)
            (outside / "b").mkdir()
            before = _tree(outside)
        for write in (lambda p: safewrite.write_atomic(p, "evil", root=root),
                      lambda p: safewrite.open_append(p, root=root).close(),
                      lambda p: safewrite.open_new(p, root=root).close(),
                      lambda p: safewrite.ensure_dir(p / "sub", root=root)):
            with pytest.raises(safewrite.UnsafeDir) as err:
                write(root / "a" / "b" / "f")
            line = err.value.one_line()
            assert "symlink" in line and "\n" not in line and err.value.exit_code == 2
        assert _tree(outside) == before

    @pytest.mark.parametrize("target", ["/dev/null", "dangling", "fifo-link"])
    def test_special_targets_and_dangling_links(self, tmp_path: Path, outside: Path, target: str) -> None:
        """A link to /dev/null, to a FIFO, or to a path that does not exist yet (creating it would create the
        planter's file): refused, nothing created, nothing waited on."""
        root = tmp_path / "root"
        root.mkdir()
        dest = {"/dev/null": "/dev/null", "dangling": str(outside / "not-yet" / "created-by-us"),
                "fifo-link": str(outside / "fifo")}[target]
        if target == "fifo-link":
            os.mkfifo(dest)
        (root / "state.json").symlink_to(dest)
        for write in (lambda: safewrite.write_atomic(root / "state.json", "x", root=root),
                      lambda: safewrite.open_append(root / "state.json", root=root).close(),
                      lambda: safewrite.open_new(root / "state.json", root=root).close()):
            with pytest.raises(safewrite.UnsafeDir, match="symlink"):
                write()
        assert not (outside / "not-yet").exists()
        assert (root / "state.json").is_symlink()  # left for the operator to see, never replaced silently

    def test_a_hard_to_see_link_is_refused_too(self, tmp_path: Path, outside: Path) -> None:
        """A link whose name differs from the real file by a trailing space or a look-alike letter, planted
        where a writer will look: the writer's own name is a link in its place (here: created as such)."""
        root = tmp_path / "root"
        root.mkdir()
        (root / "layouts.json ").write_text("{}")  # the decoy the operator sees with ls
        (root / "layouts.json").symlink_to(outside / "victim")
        with pytest.raises(safewrite.UnsafeDir, match="symlink"):
            safewrite.write_atomic(root / "layouts.json", "{}", root=root)
        assert (outside / "victim").read_text() == "precious\n"

    def test_a_fifo_or_a_folder_in_the_files_place(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        root.mkdir()
        os.mkfifo(root / "log")
        (root / "dir").mkdir()
        done: list[Any] = []

        def attempt() -> None:  # a FIFO with no reader: never an open that waits
            for name in ("log", "dir"):
                for write in (lambda n: safewrite.open_append(root / n, root=root).close(),
                              lambda n: safewrite.write_atomic(root / n, "x", root=root)):
                    try:
                        write(name)
                    except safewrite.UnsafeDir as exc:
                        done.append(exc.why)
        t = threading.Thread(target=attempt, daemon=True)
        t.start()
        t.join(10)
        assert not t.is_alive() and len(done) == 4, done
        assert any("not a regular file" in w for w in done) and any("directory" in w for w in done)

    def test_a_hard_link_or_a_file_of_another_user_is_not_appended_to(self, tmp_path: Path, outside: Path) -> None:
        root = tmp_path / "root"
        root.mkdir()
        os.link(outside / "victim", root / "server.log")
        with pytest.raises(safewrite.UnsafeDir, match="hard links"):
            safewrite.open_append(root / "server.log", root=root)
        (root / "theirs.log").write_text("")
        os.chown(root / "theirs.log", 1234, 1234)
        with pytest.raises(safewrite.UnsafeDir, match="uid 1234"):
            safewrite.open_append(root / "theirs.log", root=root)
        assert (outside / "victim").read_text() == "precious\n"

    @pytest.mark.parametrize("rel", ["../escape/f", "a/../../f", "a/b/../../../f"])
    def test_a_path_that_leaves_the_root_is_refused(self, tmp_path: Path, rel: str) -> None:
        root = tmp_path / "root"
        root.mkdir()
        with pytest.raises(safewrite.UnsafeDir):
            safewrite.write_atomic(Path(str(root) + "/" + rel), "x", root=root)
        assert not (tmp_path / "escape").exists() and not (tmp_path / "f").exists()

    def test_a_folder_below_the_root_that_others_can_write_is_refused(self, tmp_path: Path) -> None:
        root = tmp_path / "root"
        (root / "layouts").mkdir(parents=True)
        os.chmod(root / "layouts", 0o777)
        with pytest.raises(safewrite.UnsafeDir) as err:
            safewrite.write_atomic(root / "layouts" / "x" / "s.log", "x", root=root)
        assert "world-writable" in err.value.one_line() and "chmod go-w" in err.value.one_line()
        assert not (root / "layouts" / "x").exists()

    def test_a_failed_write_leaves_the_old_file_and_no_temporary(self, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
        root = tmp_path / "root"
        safewrite.write_atomic(root / "f", "old", root=root)

        def full_disk(fd: int) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fsync", full_disk)
        with pytest.raises(safewrite.UnsafeDir, match="No space left"):
            safewrite.write_atomic(root / "f", "new", root=root)
        assert (root / "f").read_text() == "old" and os.listdir(root) == ["f"]


# --- shared folders ----------------------------------------------------------------------------------------------
def _state_dir() -> Path:
    return paths.state_dir()


class TestSharedDirs:
    """A state, data or config folder that a teammate can write (group or world), or that is theirs, is refused
    with one line naming it (exit 2), as OpenSSH refuses such a ``~/.ssh``; ``/tmp``-like sticky folders above a
    private one are fine."""

    @pytest.mark.parametrize(("mode", "word"), [(0o770, "group-writable"), (0o777, "world-writable"),
                                                 (0o1777, "world-writable"), (0o720, "group-writable")])
    def test_status_refuses_a_state_dir_others_can_write(self, mode: int, word: str) -> None:
        sd = _state_dir()
        run_cli(["status"])  # it works while private
        os.chmod(sd, mode)
        res = run_cli(["status"])
        line = _one_error(res)
        assert res.code == 2 and str(sd) in line and word in line and "chmod go-w" in line, line
        res = run_cli(["down", "--all"])
        assert res.code == 2 and str(sd) in _one_error(res)

    def test_a_state_dir_owned_by_another_user(self) -> None:
        sd = _state_dir()
        os.chown(sd, 1234, 1234)
        res = run_cli(["status"])
        line = _one_error(res)
        assert res.code == 2 and "owned by uid 1234" in line and str(sd) in line, line

    def test_results_import_refuses_a_shared_data_dir(self, isolated_dirs: Path) -> None:
        data = isolated_dirs / "data"
        os.chmod(data, 0o1777)  # sticky is no excuse for a project folder itself
        res = run_cli(["results", "import", str(RESULT), "--topology", "tp1"])
        line = _one_error(res)
        assert res.code == 2 and str(data) in line and "world-writable" in line, line
        assert os.listdir(data) == []
        os.chmod(data, 0o700)
        assert run_cli(["results", "import", str(RESULT), "--topology", "tp1"]).code == 0

    def test_a_world_writable_folder_above_the_project_folder(self, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
        """Above the project's folders a sticky world-writable folder (``/tmp``) is fine; one without the sticky
        bit lets anyone rename the project folder away and plant their own."""
        shared = tmp_path / "shared"
        shared.mkdir()
        os.chmod(shared, 0o1777)
        monkeypatch.setenv("DISAGG_TUI_STATE_DIR", str(shared / "mine" / "state"))
        with StateStore().locked():
            pass
        assert stat.S_IMODE((shared / "mine").stat().st_mode) == 0o700  # made private
        assert run_cli(["down", "--all"]).code == 0
        os.chmod(shared, 0o777)
        res = run_cli(["down", "--all"])
        line = _one_error(res)
        assert res.code == 2 and str(shared) in line and "above" in line, line
        monkeypatch.setenv("DISAGG_TUI_STATE_DIR", str(shared / "other" / "state"))
        with pytest.raises(safewrite.UnsafeDir, match="above"), StateStore().locked():
            pass
        assert not (shared / "other").exists()

    def test_an_ancestor_owned_by_another_user(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        theirs = tmp_path / "theirs"
        (theirs / "state").mkdir(parents=True, mode=0o700)
        os.chown(theirs, 1234, 1234)
        monkeypatch.setenv("DISAGG_TUI_STATE_DIR", str(theirs / "state"))
        res = run_cli(["down", "--all"])
        assert res.code == 2 and "owned by uid 1234" in _one_error(res)

    def test_a_root_that_is_a_link(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The project folder itself may be a link the operator made (to a bigger disk) when what it points to is
        theirs and private; a link to a folder of another user is refused by what it points to."""
        real = tmp_path / "big-disk" / "state"
        real.mkdir(parents=True, mode=0o700)
        (tmp_path / "state-link").symlink_to(real)
        monkeypatch.setenv("DISAGG_TUI_STATE_DIR", str(tmp_path / "state-link"))
        assert run_cli(["down", "--all"]).code == 0
        os.chown(real, 1234, 1234)
        res = run_cli(["down", "--all"])
        assert res.code == 2 and "owned by uid 1234" in _one_error(res)

    def test_a_config_dir_others_can_write_is_refused_when_written(self, isolated_dirs: Path) -> None:
        cfg = isolated_dirs / "config"
        os.chmod(cfg, 0o775)
        with pytest.raises(safewrite.UnsafeDir, match="group-writable"):
            paths.make_dirs(paths.user_profiles_dir())
        assert not paths.user_profiles_dir().exists()

    def test_a_mode_changed_after_the_first_check_is_seen(self) -> None:
        sd = _state_dir()
        with StateStore().locked():
            pass
        os.chmod(sd, 0o777)
        with pytest.raises(safewrite.UnsafeDir), StateStore().locked():
            pass

    def test_the_fixture_dirs_are_private(self, isolated_dirs: Path) -> None:
        for name in ("config", "state", "data"):
            assert stat.S_IMODE((isolated_dirs / name).stat().st_mode) == 0o700
        safewrite.check_dir(isolated_dirs / "state")


# --- the app's writers -------------------------------------------------------------------------------------------
class TestPlantedSymlinks:
    """Links planted in the project's folders, met by the app's own writers: the state's layouts folder, a run
    folder, a campaign folder, the state file, its lock, a server log, the startup history, clusters.json."""

    def test_a_layouts_folder_that_is_a_link_gets_no_server_log(self, outside: Path) -> None:
        from tui.core.host.base import Command
        from tui.core.launch.supervisor import spawn

        store = StateStore()
        paths.make_dirs(store.root)
        (store.root / "layouts").symlink_to(outside)
        before = _tree(outside)
        with pytest.raises(safewrite.UnsafeDir, match="symlink"):
            spawn(Command(argv=["true"], env={}), store.logs_dir("L1") / "server.log", "L1", root=store.root)
        assert _tree(outside) == before

    @pytest.mark.parametrize("what", ["/dev/null", "victim", "fifo"])
    def test_a_server_log_that_is_a_link_or_a_fifo(self, outside: Path, what: str) -> None:
        from tui.core.host.base import Command
        from tui.core.launch.supervisor import spawn

        store = StateStore()
        log = store.logs_dir("L1") / "server.log"
        paths.make_dirs(log.parent)
        if what == "fifo":
            os.mkfifo(log)
        else:
            log.symlink_to("/dev/null" if what == "/dev/null" else outside / "victim")
        with pytest.raises(safewrite.UnsafeDir):
            spawn(Command(argv=["true"], env={}), log, "L1", root=store.root)
        assert (outside / "victim").read_text() == "precious\n"

    @pytest.mark.parametrize("planted", ["runs", "campaign", "run"])
    def test_results_import_through_a_planted_link(self, outside: Path, planted: str) -> None:
        runs = paths.runs_dir()
        if planted == "runs":  # data/runs itself a link: refused (DISAGG_TUI_RUNS_DIR is the way to move it)
            paths.make_dirs(paths.data_dir())
            runs.symlink_to(outside)
        elif planted == "campaign":
            paths.make_dirs(runs)
            (runs / "imported").symlink_to(outside)
        else:  # the run's own folder, under the name the import will pick
            paths.make_dirs(runs / "imported")
            first = run_cli(["results", "import", str(RESULT), "--topology", "tp1"])
            assert first.code == 0, first.err
            made = next(p for p in (runs / "imported").iterdir())
            import shutil

            shutil.rmtree(made)
            made.symlink_to(outside)
        before = _tree(outside)
        res = run_cli(["results", "import", str(RESULT), "--topology", "tp1"])
        if planted == "run":  # the import takes the next free name, or refuses the link: never writes through it
            assert res.code in (0, 2) and no_traceback(res), res.err
        else:
            assert res.code == 2 and "symlink" in _one_error(res), res.err
        assert _tree(outside) == before

    def test_the_state_file_and_its_lock_as_links(self, outside: Path) -> None:
        store = StateStore()
        paths.make_dirs(store.root)
        store.file.symlink_to(outside / "victim")
        with pytest.raises(InputError), store.locked() as layouts:  # the file read refuses a text that is no JSON
            layouts.clear()
        assert (outside / "victim").read_text() == "precious\n"
        store.file.unlink()
        (outside / "state.json").write_text('{"version": 1, "layouts": {}}')
        store.file.symlink_to(outside / "state.json")
        with pytest.raises(safewrite.UnsafeDir, match="symlink"), store.locked():
            pass
        assert (outside / "state.json").read_text() == '{"version": 1, "layouts": {}}'
        store.file.unlink()
        store.lock_file.unlink()
        store.lock_file.symlink_to(outside / "victim")
        store.file.write_text('{"version": 1, "layouts": {}}')
        res = run_cli(["down", "--all"])
        line = _one_error(res)
        assert res.code == 2 and "lock file" in line and "symlink" in line, line
        assert (outside / "victim").read_text() == "precious\n"

    def test_startup_history_and_clusters_file_as_links(self, outside: Path) -> None:
        from tui.core.launch.history import StartupHistory
        from tui.core.remote import record

        hist = StartupHistory()
        paths.make_dirs(hist.path.parent)
        hist.path.symlink_to(outside / "victim")
        hist.append(_startup_record())  # no history kept, never written through
        assert (outside / "victim").read_text() == "precious\n"
        clusters = record._file()
        paths.make_dirs(clusters.parent)
        clusters.symlink_to(outside / "nowhere.json")  # dangling: following it would create the planter's file
        with pytest.raises(safewrite.UnsafeDir, match="symlink"):
            record._save_all([], clusters)
        assert not (outside / "nowhere.json").exists()

    def test_a_quarantine_folder_that_is_a_link(self, outside: Path) -> None:
        store = StateStore()
        paths.make_dirs(store.root)
        (store.root / "quarantine").symlink_to(outside)
        store.file.write_text(_state({"bad": _rec("bad", note="\x1b]52;c;aGk=\x07")}))
        res = run_cli(["status"])
        assert res.code == 2 and "symlink" in _one_error(res)
        assert _tree(outside) == {"victim": b"precious\n"}


def _startup_record() -> Any:
    from tui.core.launch.history import StartupRecord

    return StartupRecord(key="k", server="s", startup_s=1.0)


# --- the state file ----------------------------------------------------------------------------------------------
def _rec(lid: str, gpu: int = 0, *, proc: dict[str, Any] | None = None, plan: dict[str, Any] | None = None,
         **fields: Any) -> dict[str, Any]:
    """A ready layout as the state file holds it, its one process long gone (never signalled)."""
    p = {"name": "server", "role": "single", "pid": DEAD_PID, "pgid": DEAD_PID, "create_time": 1.8e9,
         "log": "/nonexistent/server.log", "url": "http://127.0.0.1:9", **(proc or {})}
    pl = {"topology": "tp1", "profile_id": "m", "gpus": [gpu], "servers": [{"name": "server", "gpus": [gpu]}],
          **(plan or {})}
    return {"id": lid, "created": 1.8e9, "simulated": True, "status": "ready", "plan": pl, "processes": [p],
            **fields}


def _state(layouts: dict[str, Any]) -> str:
    return json.dumps({"version": 1, "layouts": layouts})


#: one record that does not read back, each a way the first trust pass's writer (or a hand edit) could leave it
POISONS: dict[str, tuple[dict[str, Any], str]] = {
    "fixes-osc52": (_rec("bad", plan={"fixes_applied": ["\x1b]52;c;cm0gLXJmIH4K\x07"]}), "plan.fixes_applied[0]"),
    "bundle-name-escape": (_rec("bad", note="imported from \x1b[2Jbundle\x1b[0m.json"), "note"),
    "request-escape": (_rec("bad", request=["--model", "m\x1b]0;owned\x07"]), "request[1]"),
    "id-bell": (_rec("bad\x07"), "id"),
    "plan-null": ({**_rec("bad"), "plan": None}, "plan"),
    "processes-null": (_rec("bad", processes=None), "processes"),
    "pid-bool": (_rec("bad", proc={"pid": True}), "processes[0].pid"),
    "pid-float": (_rec("bad", proc={"pid": 1.5}), "processes[0].pid"),
    "gpus-negative": (_rec("bad", plan={"gpus": [-1]}), "plan.gpus[0]"),
    "users-text": (_rec("bad", users="everyone"), "users"),
    "huge-note": (_rec("bad", note="n" * 200_000), "note"),
    "huge-argv": (_rec("bad", request=["--arg"] * 5000), "request"),
    "diagnosis-escape": (_rec("bad", diagnoses=[{"server": "s", "entry_id": "e", "title": "\x9b31mred",
                                                  "severity": "error", "fix": "f"}]), "diagnoses[0].title"),
    "started-by-list": (_rec("bad", started_by=[1, 2]), "started_by"),
    "status-null": (_rec("bad", status=None), "status"),
}


class TestStateReadsBack:
    """One schema (``LayoutRecord.from_dict``) on write and on read. A record that would not read back is refused
    before it is written, naming the field; one that does not read is quarantined (moved, kept, one warning naming
    the layout and the field), and every other layout stays listable (``status``) and stoppable (``down --all``)."""

    def _poison(self, bad_key: str, bad: Any) -> Path:
        store = StateStore()
        paths.make_dirs(store.root)
        store.file.write_text(_state({"good-0": _rec("good-0", 0), bad_key: bad, "good-1": _rec("good-1", 1)}))
        return store.file

    @pytest.mark.parametrize("name", list(POISONS))
    def test_status_and_down_keep_the_other_layouts(self, name: str) -> None:
        bad, field = POISONS[name]
        bad_key = "bad\x07" if name == "id-bell" else "bad"
        state = self._poison(bad_key, bad)
        res = run_cli(["status", "--json"])
        assert res.code == 0 and no_traceback(res), res.err
        assert sorted(lay["id"] for lay in json.loads(res.out)["layouts"]) == ["good-0", "good-1"]
        warned = _warnings(res)
        assert len(warned) == 1, res.err
        if name == "id-bell":  # the key itself: escaped, and why
            assert "layout bad\\x07 does not read back (a control character" in warned[0], warned
        else:
            assert "layout bad" in warned[0] and f"field '{field}'" in warned[0], warned
        assert "quarantine" in warned[0], warned
        assert "\x1b" not in res.err and "\x07" not in res.err and "\x9b" not in res.err
        moved = list((state.parent / "quarantine").iterdir())
        assert len(moved) == 1 and stat.S_IMODE(moved[0].stat().st_mode) == 0o600
        kept = json.loads(moved[0].read_text())
        assert kept["layouts"][bad_key]["record"] == json.loads(json.dumps(bad))  # whole, for the operator
        assert kept["layouts"][bad_key]["field"] == ("" if name == "id-bell" else field)
        assert bad_key not in json.loads(state.read_text())["layouts"]
        res = run_cli(["down", "--all"])
        assert res.code == 0 and "stopped good-0" in res.out and "stopped good-1" in res.out, res.err
        assert _warnings(res) == []  # said once: it is gone from the state file

    @pytest.mark.parametrize("name", [n for n in STATE if n not in STATE_WHOLE])
    def test_the_first_passs_record_corpus_is_quarantined(self, name: str) -> None:
        """The damaged records of the first pass's corpus (tests/hardening/test_corpus.py), now beside a good
        layout: ``down --all`` stops it and names the field of the other."""
        data, names = STATE[name]
        raw = json.loads(data)["layouts"]
        (key, bad), = raw.items()
        self._poison(key, bad)
        res = run_cli(["down", "--all"])
        assert res.code == 0 and "stopped good-0" in res.out and "stopped good-1" in res.out, res.err
        warned = _warnings(res)
        assert len(warned) == 1 and f"layout {key}" in warned[0], res.err
        for n in names:
            if n not in ("move it aside", "damaged"):  # said of a whole file
                assert n in warned[0] or n == "layouts.json", warned

    def test_a_record_that_would_not_read_back_is_never_written(self) -> None:
        store = StateStore()
        with store.locked() as layouts:
            layouts["ok"] = LayoutRecord.from_dict(_rec("ok"))
        before = store.file.read_bytes()
        cases = {"plan.fixes_applied[0]": lambda r: r.plan.update(fixes_applied=["x\x1b[31m"]),
                 "note": lambda r: setattr(r, "note", "n" * 100_000),
                 "processes[1].pid": lambda r: r.processes.append(ProcessRecord(
                     name="p", role="single", pid=-5, pgid=1, create_time=0.0, log="", url="")),
                 "created": lambda r: setattr(r, "created", float("nan")),
                 "owner_user": lambda r: setattr(r, "owner_user", "\x1b]52;c;x\x07")}
        for field, spoil in cases.items():
            rec = LayoutRecord.from_dict(_rec("new"))
            spoil(rec)
            with pytest.raises(InputError) as err, store.locked() as layouts:
                layouts["new"] = rec
            line = err.value.one_line()
            assert "layouts.new" in line and "not written" in line and "\n" not in line, (field, line)
            if field != "created":  # a NaN has no JSON: the layout is named
                assert field in line, line
            assert store.file.read_bytes() == before
        assert list(store.read()) == ["ok"]

    def test_a_key_with_an_escape_is_refused_on_write_and_quarantined_on_read(self) -> None:
        store = StateStore()
        with pytest.raises(InputError, match="not written"), store.locked() as layouts:
            layouts["\x1b[2J"] = LayoutRecord.from_dict(_rec("x"))
        assert not store.file.exists()
        self._poison("\x1b[2J", _rec("x"))
        res = run_cli(["status"])
        assert res.code == 0 and "\x1b" not in res.err + res.out and len(_warnings(res)) == 1, res.err

    def test_a_lock_free_reader_never_writes_and_says_it_once(self) -> None:
        state = self._poison("bad", POISONS["fixes-osc52"][0])
        before = state.read_bytes()
        store = StateStore()
        for _ in range(3):
            assert sorted(store.peek()) == ["good-0", "good-1"]
        assert state.read_bytes() == before and not (state.parent / "quarantine").exists()
        notes = drain_notes()
        assert len(notes) == 1 and "left out" in notes[0] and "plan.fixes_applied[0]" in notes[0]
        store.peek()
        assert drain_notes() == []
        assert sorted(store.read()) == ["good-0", "good-1"]  # the locked reader moves it
        notes = drain_notes()
        assert len(notes) == 1 and "moved to" in notes[0]

    def test_two_bad_records_and_a_third_later(self) -> None:
        store = StateStore()
        paths.make_dirs(store.root)
        store.file.write_text(_state({"a": _rec("a", status=5), "b": [1, 2], "ok": _rec("ok")}))
        with store.locked() as layouts:
            assert list(layouts) == ["ok"]
        assert len(drain_notes()) == 2
        raw = json.loads(store.file.read_text())
        raw["layouts"]["c"] = _rec("c", note="\x00")
        store.file.write_text(json.dumps(raw))
        assert list(store.read()) == ["ok"]
        assert len(list((store.root / "quarantine").iterdir())) == 2  # the earlier move is kept, never merged over

    def test_a_whole_state_beyond_its_limit_is_refused_before_it_is_written(self) -> None:
        from tui.core import safeio

        store = StateStore()
        big = {f"L{i}": LayoutRecord.from_dict(_rec(f"L{i}", note="n" * 4000)) for i in range(10)}
        limit = safeio.LIMITS["state"]
        safeio.LIMITS["state"] = 20_000
        try:
            with pytest.raises(InputError, match="not written"), store.locked() as layouts:
                layouts.update(big)
        finally:
            safeio.LIMITS["state"] = limit
        assert not store.file.exists()

    def test_a_whole_file_that_is_damaged_is_still_one_line(self) -> None:
        store = StateStore()
        paths.make_dirs(store.root)
        store.file.write_text('{"version": 1, "layouts": {"a": ' + "[" * 500 + "]" * 500 + "}}")
        res = run_cli(["status"])
        assert res.code == 2 and "layouts.json" in _one_error(res)


class TestDevicesNeverOpened:
    """A file from outside that is a device (or a link to one) is refused from its stat: a terminal is never
    claimed nor a tape rewound by opening it."""

    @pytest.mark.parametrize("target", ["/dev/null", "/dev/zero", "/dev/tty"])
    def test_a_link_to_a_device_is_refused_unopened(self, target: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
        from tui.core import safeio
        from tui.core.errors import InputError

        link = tmp_path / "session.dtrec"
        link.symlink_to(target)
        opened: list[str] = []
        real_open = os.open

        def spy(path: object, *args: object, **kwargs: object) -> int:
            opened.append(str(path))
            return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "open", spy)
        if not os.path.exists(target):
            pytest.skip(f"{target} is not on this machine")
        with pytest.raises(InputError, match="not a regular file: a device"):
            safeio.read_bytes(link, "recording")
        assert str(link) not in opened
