"""Importing a teammate's bundle, second pass (issue 32): what an import checks before it writes, and what it writes.

One class per rule: an import checks the whole bundle before writing anything and writes all or nothing, never
through a link; a fix is recorded as applied only where this host's playbook applied it; a bundle that binds every
interface is said, and this host binds its own address; a layout started with ``--knob`` imports back as the same
plan. Every test goes through the CLI the operator runs (in-process), or the core function it calls, and checks the
files on disk, not a mock of them."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import layout_port_args
from tui.cli.main import main
from tui.core import paths

M = "qwen3.6-27b-nvfp4"


def _plan(topology: str, knobs: Sequence[tuple[str, str]] = (), fixes: Sequence[str] = (),
          **options: Any) -> dict[str, Any]:
    """The plan ``up`` makes on the simulated host ``import --sim`` plans on (2x B200), with knobs and fixes."""
    from tui.core.models import Catalog
    from tui.core.plan.hostfacts import sim_facts
    from tui.core.plan.knobs import KnobCatalog, check_request_knobs
    from tui.core.plan.planner import PlanOptions, apply_fix, plan
    from tui.core.playbook.book import load_playbook
    from tui.core.topology import parse_topology

    facts = sim_facts("b200", 2)
    profile = Catalog.load().model(M)
    p = plan(profile, parse_topology(topology), facts, PlanOptions(**options))
    if knobs:
        p = check_request_knobs(KnobCatalog.load(), knobs, profile, p, facts)
    book = load_playbook(operator=False)
    for fix_id in fixes:
        ((_, fix),) = book.fixes([], fix_id, "blackwell")
        p = apply_fix(p, fix, fix_id)
    out: dict[str, Any] = p.to_dict()
    return out


def _bundle(layouts: Sequence[tuple[str, dict[str, Any]]] | None = None, *, profile_id: str = M,
            workloads: dict[str, Any] | None = None) -> dict[str, Any]:
    """A bundle as ``export`` makes it (the same core code), as plain data to tamper with."""
    from tui.core.models import Catalog, Workload
    from tui.core.plan.hostfacts import sim_facts
    from tui.core.record.bundle import build_bundle
    from tui.core.record.fingerprint import host_fingerprint

    profile = Catalog.load().model(M)
    lays = list(layouts) if layouts is not None else [("dp2", _plan("dp2"))]
    wls = workloads if workloads is not None else {"team-tiny": Workload("team-tiny", 32, 48, 4)}
    data = build_bundle(source="campaign", source_id="c1", profile=profile, layouts=lays, workloads=wls,
                        fingerprint=host_fingerprint(sim_facts("b200", 2)))
    if profile_id != M:
        data["profile"]["id"] = profile_id
        for lay in data["layouts"]:
            lay["plan"]["profile_id"] = profile_id
    return data


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: a file's bytes, a link's target (never followed), a folder as 'dir'."""
    out: dict[str, bytes | str] = {}
    if not os.path.lexists(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            mode = p.lstat().st_mode
            out[str(p.relative_to(root))] = f"-> {os.readlink(p)}" if stat.S_ISLNK(mode) else (
                p.read_bytes() if stat.S_ISREG(mode) else f"mode {mode:o}")
    return out


def _one_error(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("disagg-tui: warning", "warning:"))]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _no_leftovers(folder: Path) -> None:
    """No temporary or kept-aside file of an import stays behind."""
    left = [p.name for p in folder.rglob("*") if p.name.endswith((".tmp", ".old"))] if folder.exists() else []
    assert left == []


class TestAtomicImport:
    """The whole bundle is checked (every layout, every file's place and size) before anything is written; then the
    profile and the workloads file are written all or nothing, never through a link."""

    def test_a_second_file_that_would_not_load_back_leaves_no_profile(self, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
        from tui.core.models import Workload

        profiles = paths.user_profiles_dir()
        profiles.mkdir(parents=True)
        # the operator's workloads file, just under the 1 MiB every command reads: the bundle's would push it over
        pad = "x" * 1000
        body = "workloads:\n" + "".join(f"  w{i}: {{input_len: 8, output_len: 8, num_prompts: 1, "
                                        f"description: {pad}}}\n" for i in range(950))
        (profiles / "workloads.yaml").write_text(body, encoding="utf-8")
        before = _tree(profiles)
        many = {f"team-{i}": Workload(f"team-{i}", 32, 48, 4, description="y" * 900) for i in range(60)}
        b = _write(tmp_path / "b.yaml", _bundle(profile_id="new-one", workloads=many))
        assert main(["import", "--sim", str(b), "--yes"]) == 2
        line = _one_error(capsys.readouterr().err)
        assert "workloads.yaml" in line and "over the 1,048,576" in line and "nothing written" in line
        assert _tree(profiles) == before  # no profile of it either

    @pytest.mark.parametrize("which", ["profile", "workloads", "models-folder"])
    def test_a_symlink_planted_at_a_target_is_refused_and_its_target_untouched(
            self, which: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        profiles = paths.user_profiles_dir()
        (profiles / "models").mkdir(parents=True)
        victim_dir = tmp_path / "victim"
        victim_dir.mkdir()
        shipped = (paths.shipped_profiles_dir() / "models" / f"{M}.yaml").read_text(encoding="utf-8")
        victim = victim_dir / "victim.yaml"
        if which == "workloads":
            victim.write_text("workloads:\n  mine: {input_len: 1, output_len: 1, num_prompts: 1}\n",
                              encoding="utf-8")
            (profiles / "workloads.yaml").symlink_to(victim)
        elif which == "profile":
            victim.write_text(re.sub(r"(?m)^id: .*$", "id: victim-one", shipped), encoding="utf-8")
            (profiles / "models" / "new-one.yaml").symlink_to(victim)
        else:
            (profiles / "models").rmdir()
            (profiles / "models").symlink_to(victim_dir, target_is_directory=True)
        before, outside = _tree(profiles), _tree(victim_dir)
        b = _write(tmp_path / "b.yaml", _bundle(profile_id="new-one"))
        assert main(["import", "--sim", str(b), "--yes"]) == 2
        line = _one_error(capsys.readouterr().err)
        assert "is a symlink" in line and "nothing written" in line
        assert _tree(profiles) == before and _tree(victim_dir) == outside
        _no_leftovers(profiles)

    def test_a_failed_rename_of_the_second_file_puts_the_first_back(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
        """The disk fills between the two renames: the profile already renamed into place is taken back (a new one
        removed, a replaced one restored byte for byte), and no temporary file stays."""
        profiles = paths.user_profiles_dir()
        models = profiles / "models"
        models.mkdir(parents=True)
        shipped = (paths.shipped_profiles_dir() / "models" / f"{M}.yaml").read_text(encoding="utf-8")
        mine = re.sub(r"(?m)^id: .*$", "id: mine-one", shipped)
        (models / "mine-one.yaml").write_text(mine + "# the operator's own comment\n", encoding="utf-8")
        real = os.replace

        def full_disk(src: Any, dst: Any, **kw: Any) -> None:
            if str(dst) == "workloads.yaml":
                raise OSError(28, "No space left on device")
            real(src, dst, **kw)

        monkeypatch.setattr(os, "replace", full_disk)
        for pid, extra in (("new-one", []), ("mine-one", ["--replace"])):
            before = _tree(profiles)
            data = _bundle(profile_id=pid)
            data["profile"]["notes"] = "the teammate's notes"
            b = _write(tmp_path / "b.yaml", data)
            assert main(["import", "--sim", str(b), "--yes", *extra]) == 2
            line = _one_error(capsys.readouterr().err)
            assert "No space left on device" in line and "nothing written" in line
            assert _tree(profiles) == before, pid
            _no_leftovers(profiles)

    def test_every_layout_is_checked_not_only_the_one_launched(self, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
        bad = _plan("tp2")
        bad["servers"][0]["argv"] += ["--worker-extension-cls", "evil.Ext"]
        b = _write(tmp_path / "b.yaml", _bundle([("dp2", _plan("dp2")), ("tp2", bad)], profile_id="new-one"))
        for argv in (["import", "--sim", str(b), "--yes"],
                     ["up", "--sim", "--bundle", str(b), "--topology", "dp2", *layout_port_args()]):
            assert main(argv) == 2
            line = _one_error(capsys.readouterr().err)
            assert "field 'layouts[1].plan.servers[0].argv'" in line and "--worker-extension-cls" in line
        assert _tree(paths.config_dir()) == {}
        assert not (paths.state_dir() / "layouts").exists() or not any((paths.state_dir() / "layouts").iterdir())

    @pytest.mark.parametrize("name", ["../../evil", "a\nb: 1", "x\x1b]52;c;cm0gLXJm\x07", "-rf", "Big", "x" * 97,
                                      "ok name", ".hidden"])
    def test_a_workload_name_the_workloads_file_would_refuse_is_refused_at_its_line(
            self, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        data = _bundle(profile_id="new-one")
        data["workloads"] = {"fine": data["workloads"]["team-tiny"], name: data["workloads"]["team-tiny"]}
        assert main(["import", "--sim", str(_write(tmp_path / "b.yaml", data)), "--yes"]) == 2
        out, err = capsys.readouterr()
        line = _one_error(err)
        assert re.search(r"b\.yaml:\d+: field 'workloads\.", line) and "workload names are" in line, line
        assert out == "" and "\x1b" not in err and "\x07" not in err  # refused before anything is shown
        assert _tree(paths.config_dir()) == {}

    def test_an_import_that_succeeds_leaves_private_complete_files(self, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
        b = _write(tmp_path / "b.yaml", _bundle(profile_id="new-one"))
        assert main(["import", "--sim", str(b), "--yes"]) == 0
        out = capsys.readouterr().out
        assert "profile new-one: added" in out and "workload team-tiny: added" in out
        profiles = paths.user_profiles_dir()
        for f in (profiles / "models" / "new-one.yaml", profiles / "workloads.yaml"):
            assert f.stat().st_mode & 0o077 == 0, f  # this user's alone
        _no_leftovers(profiles)
        assert main(["plan", "--sim", "--model", "new-one", "--topology", "dp2", "--no-preflight"]) == 0

    def test_write_all_refuses_a_special_file_or_folder_at_any_target_and_writes_none(self, tmp_path: Path) -> None:
        from tui.core.errors import InputError
        from tui.core.record.bundle_install import write_all

        root = tmp_path / "root"
        (root / "models").mkdir(parents=True)
        os.mkfifo(root / "fifo.yaml")
        (root / "folder.yaml").mkdir()
        (root / "models" / "up").symlink_to("..")
        for second in ("fifo.yaml", "folder.yaml", "models/up/x.yaml"):
            before = _tree(root)
            with pytest.raises(InputError, match="nothing written"):
                write_all(root, [(root / "models" / "first.yaml", "a: 1\n"), (root / second, "b: 2\n")])
            assert _tree(root) == before, second


class TestFixesApplied:
    """A bundle's ``fixes_applied`` is applied again by this host's playbook; an id it does not know is refused
    (naming the field and the id), so the state file never records a fix that was not applied here."""

    def _with_fixes(self, tmp_path: Path, fixes: list[Any], topology: str = "dp2") -> Path:
        data = _bundle([(topology, _plan(topology))], profile_id="new-one")
        data["layouts"][0]["plan"]["fixes_applied"] = fixes
        return _write(tmp_path / "b.yaml", data)

    @pytest.mark.parametrize(("fix", "says"), [
        ("made-up-fix", "fix made-up-fix is not in this host's playbook"),
        ("Made Up", "is not a playbook entry id"),
        ("x\x1b]52;c;cm0gLXJmIH4=\x07", "is not a playbook entry id"),  # an OSC 52 clipboard write
        ("../../etc/passwd", "is not a playbook entry id"),
        ("gpu-memory-taken", "has no fix on this host"),  # an entry with advice but no fix
    ])
    def test_a_fix_this_host_does_not_have_is_refused_naming_field_and_id(
            self, fix: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        b = self._with_fixes(tmp_path, ["engine-ready-timeout", fix])
        for argv in (["import", "--sim", str(b), "--yes"], ["up", "--sim", "--bundle", str(b), *layout_port_args()]):
            assert main(argv) == 2
            out, err = capsys.readouterr()
            line = _one_error(err)
            assert "field 'layouts[0].plan.fixes_applied[1]'" in line and says in line, line
            assert "\x1b" not in out + err and "\x07" not in out + err
        assert _tree(paths.config_dir()) == {}
        # nothing reached the state file: every layout command still works
        assert main(["status"]) == 0 and main(["down", "--all"]) == 0

    def test_a_fix_listed_twice_is_refused(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        b = self._with_fixes(tmp_path, ["vllm-port-uri", "vllm-port-uri"])
        assert main(["import", "--sim", str(b), "--yes"]) == 2
        assert "fixes_applied[1]'" in _one_error(capsys.readouterr().err)

    def test_a_known_fix_is_applied_by_this_hosts_playbook_not_taken_from_the_bundles_argv(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The bundle says the fix was applied but its servers do not carry it: this host applies its own entry's
        change, and the layout started records the fix."""
        b = self._with_fixes(tmp_path, ["flashinfer-sampler-unavailable"])
        assert all("VLLM_USE_FLASHINFER_SAMPLER" not in s["env"] for s in _plan("dp2")["servers"])
        assert main(["import", "--sim", str(b), "--yes"]) == 0
        out = capsys.readouterr().out
        assert "VLLM_USE_FLASHINFER_SAMPLER=0" in out and "playbook entry flashinfer-sampler-unavailable" in out
        try:
            assert main(["up", "--sim", "--sim-startup", "0.2", "--bundle", str(b), *layout_port_args()]) == 0
            assert "fixes applied: flashinfer-sampler-unavailable" in capsys.readouterr().out
            assert main(["status", "--json"]) == 0
            (lay,) = json.loads(capsys.readouterr().out)["layouts"]
            assert lay["fixes_applied"] == ["flashinfer-sampler-unavailable"]
        finally:
            assert main(["down", "--all"]) == 0

    def test_a_fix_whose_values_came_from_the_exporting_hosts_log_is_not_recorded(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        plan = _plan("dp2")
        for s in plan["servers"]:
            s["argv"] = [a if a != "32768" else "12000" for a in s["argv"]]
        plan["fixes_applied"] = ["kv-cache-too-small-for-max-len"]
        b = _write(tmp_path / "b.yaml", _bundle([("dp2", plan)], profile_id="new-one"))
        assert main(["import", "--sim", str(b), "--yes"]) == 0
        out, err = capsys.readouterr()
        assert "fixes_applied[0]: kv-cache-too-small-for-max-len is not applied here" in err
        assert "--max-model-len 12000" in out  # its value, carried as the allowlist lets it (an int in range)
        assert "playbook fix kv-cache-too-small-for-max-len: applied when the layout was started (not applied " \
               "here)" in out

    def test_the_bundles_own_list_of_fixes_is_only_said_never_applied(self, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
        data = _bundle([("dp2", _plan("dp2", fixes=["vllm-port-uri"]))], profile_id="new-one")
        data["fixes"].append({"change": "playbook fix made-up", "reason": "trust me", "source": "fix:made-up"})
        assert main(["import", "--sim", str(_write(tmp_path / "b.yaml", data)), "--yes"]) == 0
        out = capsys.readouterr().out
        assert "playbook fix made-up: trust me (not applied here)" in out
        assert "playbook fix vllm-port-uri: applied when the layout was started\n" in out


WILDCARDS = ["0.0.0.0", "0", "::", "::0", "[::]", "::ffff:0.0.0.0", "0x0", "000.0.0.0", "0.0", "0:0::0"]


class TestWildcardBind:
    """A bundle that binds every interface imports with a warning naming the field; this host binds its own
    address (127.0.0.1 unless the operator passes --host). Wildcards are recognised by parsing, in any spelling."""

    @pytest.mark.parametrize("host", WILDCARDS)
    def test_a_wildcard_in_any_spelling_is_said_and_never_bound(self, host: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
        data = _bundle()
        data["layouts"][0]["plan"]["servers"][0]["host"] = host
        b = _write(tmp_path / "b.yaml", data)
        assert main(["import", "--sim", str(b), "--yes"]) == 0
        out, err = capsys.readouterr()
        (warning,) = [ln for ln in err.splitlines() if "every interface" in ln]
        assert "field 'layouts[0].plan.servers[0].host'" in warning
        assert "this host binds 127.0.0.1 unless you pass --host" in warning
        assert re.search(r"b\.yaml:\d+: field", warning)  # the bundle's line
        assert "--host 127.0.0.1" in out and f"--host {host} " not in out

    @pytest.mark.parametrize("where", ["argv", "proxy", "side-channel"])
    def test_a_wildcard_anywhere_a_plan_binds_is_said(self, where: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
        plan = _plan("1p1d")
        field = {"argv": "servers[0].argv", "proxy": "proxy.host",
                 "side-channel": "servers[0].env.VLLM_NIXL_SIDE_CHANNEL_HOST"}[where]
        if where == "argv":
            argv = plan["servers"][0]["argv"]
            argv[argv.index("--host") + 1] = "::"
        elif where == "proxy":
            plan["proxy"]["host"] = "0"
        else:
            plan["servers"][0]["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] = "0.0.0.0"
        b = _write(tmp_path / "b.yaml", _bundle([("1p1d", plan)]))
        code = main(["import", "--sim", str(b), "--yes"])
        _out, err = capsys.readouterr()
        assert code == 0, err
        (warning,) = [ln for ln in err.splitlines() if "every interface" in ln]
        assert f"field 'layouts[0].plan.{field}'" in warning

    def test_up_bundle_with_the_operators_host_says_so(self, tmp_path: Path) -> None:
        from tui.core.plan.hostfacts import sim_facts
        from tui.core.plan.request import LaunchRequest
        from tui.core.record.bundle import load_bundle
        from tui.core.record.bundle_plan import plan_here

        data = _bundle()
        data["layouts"][0]["plan"]["servers"][0]["host"] = "::0"
        bundle = load_bundle(_write(tmp_path / "b.yaml", data))
        options = LaunchRequest(bundle=str(tmp_path / "b.yaml"), host="10.1.2.3").plan_options()
        bp = plan_here(bundle, bundle.layouts[0], sim_facts("b200", 2), options)
        (warning,) = bp.warnings
        assert "binds ::0, every interface" in warning and "this host binds 10.1.2.3" in warning
        assert {s.host for s in bp.plan.servers} == {"10.1.2.3"}

    @pytest.mark.parametrize("host", ["127.0.0.1", "10.0.0.5", "0.0.0.1", "::1", "gpu-a.example", "::ffff:10.0.0.1"])
    def test_an_address_that_is_not_a_wildcard_is_not_warned(self, host: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
        data = _bundle()
        data["layouts"][0]["plan"]["servers"][0]["host"] = host
        assert main(["import", "--sim", str(_write(tmp_path / "b.yaml", data)), "--yes"]) == 0
        assert "every interface" not in capsys.readouterr().err


class TestKnobRoundTrip:
    """``up --knob`` then ``export`` then ``import`` gives back the same plan: the bundle's knobs are planned again
    from this host's catalogue; a knob this host does not know is refused naming the field."""

    def test_up_knob_export_import_gives_the_same_plan(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
        ports = layout_port_args()
        plan_argv = ["plan", "--sim", "-m", M, "-t", "tp2", "--knob", "attn=triton", *ports, "--no-preflight"]
        assert main(plan_argv) == 0
        planned = capsys.readouterr().out.strip().splitlines()[-1]
        bundle = tmp_path / "team.yaml"
        try:
            assert main(["up", "--sim", "--sim-startup", "0.2", "-m", M, "-t", "tp2", "--knob", "attn=triton",
                         *ports]) == 0
            layout = re.search(r"layout (\S+) is up", capsys.readouterr().out)
            assert layout is not None
            assert main(["export", "--sim", "--layout", layout.group(1), "-o", str(bundle)]) == 0
        finally:
            assert main(["down", "--all"]) == 0
        capsys.readouterr()
        monkeypatch.setenv("DISAGG_TUI_CONFIG_DIR", str(tmp_path / "teammate"))
        (tmp_path / "teammate").mkdir(mode=0o700)
        assert main(["import", "--sim", str(bundle), "--yes"]) == 0
        out, _err = capsys.readouterr()
        assert re.sub(r"--port \d+", "--port 8000", planned) in out, out
        assert "carried from the bundle" not in out  # nothing beyond what the knob makes here
        try:
            assert main(["up", "--sim", "--sim-startup", "0.2", "--bundle", str(bundle), *ports]) == 0
            assert planned in capsys.readouterr().out
            from tui.core.launch.state import StateStore

            (rec,) = StateStore().read().values()
            assert rec.plan["knobs"] == {"attn": "triton"}
        finally:
            assert main(["down", "--all"]) == 0

    @pytest.mark.parametrize(("knobs", "field", "says"), [
        ({"turbo": "on"}, "knobs.turbo", "unknown knob 'turbo'"),
        ({"attn": "warp-drive"}, "knobs.attn", "warp-drive"),
        ({"prefill.spec": "ngram"}, "knobs.prefill.spec", "may not be set for prefill"),
        ({"attn\x1b[2J": "triton"}, "knobs.attn", "unknown knob"),
    ])
    def test_a_knob_this_host_does_not_know_is_refused_naming_the_field(
            self, knobs: dict[str, str], field: str, says: str, tmp_path: Path,
            capsys: pytest.CaptureFixture[str]) -> None:
        data = _bundle([("dp2", _plan("dp2"))], profile_id="new-one")
        data["layouts"][0]["plan"]["knobs"] = knobs
        assert main(["import", "--sim", str(_write(tmp_path / "b.yaml", data)), "--yes"]) == 2
        out, err = capsys.readouterr()
        line = _one_error(err)
        assert f"field 'layouts[0].plan.{field}" in line and says in line, line
        assert "\x1b" not in out + err
        assert _tree(paths.config_dir()) == {}

    def test_the_bundles_argv_never_overrides_what_a_knob_decides_here(self, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
        plan = _plan("tp2", knobs=[("attn", "triton")])
        argv = plan["servers"][0]["argv"]
        argv[argv.index("TRITON_ATTN")] = "FLASHINFER"  # the file says triton, its argv something else
        b = _write(tmp_path / "b.yaml", _bundle([("tp2", plan)]))
        assert main(["import", "--sim", str(b), "--yes"]) == 0
        out = capsys.readouterr().out
        assert "--attention-backend TRITON_ATTN" in out and "vllm serve" in out
        assert "FLASHINFER (here: --attention-backend TRITON_ATTN, knob attn=triton" in out
        assert not re.search(r"vllm serve .*FLASHINFER", out)


def _result(n: int, **replace: Any) -> dict[str, Any]:
    """A ``vllm bench serve --save-detailed`` result of ``n`` requests (the real H200 one's summary, its per-request
    arrays repeated to ``n``), with fields replaced."""
    from tests.conftest import H200

    real = json.loads((H200 / "bench" / "bench2_in7500_out200_n128.json").read_text(encoding="utf-8"))
    m = len(real["ttfts"])
    out = {k: (v * (n // m + 1))[:n] if isinstance(v, list) and len(v) == m else v for k, v in real.items()}
    out.update(replace)
    return out


class TestResultsImportBounded:
    """``results import`` of a result from anywhere is bounded: at most MAX_REQUESTS requests (a one-line refusal
    before any per-request work: a million requests took 97 s and 1.8 GB), read once, every per-request value
    checked at C speed, a NaN, an infinity or a number out of range named by its field."""

    def _import(self, tmp_path: Path, data: dict[str, Any] | bytes) -> tuple[int, str, str]:
        f = tmp_path / "r.json"
        f.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
        code = main(["results", "import", str(f)])
        return code, *self._out

    @pytest.fixture(autouse=True)
    def _capture(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys

    @property
    def _out(self) -> tuple[str, str]:
        out, err = self._capsys.readouterr()
        return out, err

    def test_a_million_requests_is_refused_in_one_line_within_seconds(self, tmp_path: Path) -> None:
        import time

        n = 1_000_000
        arrays = {"ttfts": "[" + ",".join(["0.25"] * n) + "]", "input_lens": "[" + ",".join(["128"] * n) + "]",
                  "output_lens": "[" + ",".join(["8"] * n) + "]",
                  "start_times": "[" + ",".join(f"{i * 0.001:.3f}" for i in range(n)) + "]"}
        head = json.dumps(_result(0))[:-1]
        raw = (head + "," + ",".join(f'"{k}": {v}' for k, v in arrays.items()) + "}").encode()
        t0 = time.monotonic()
        code, _, err = self._import(tmp_path, raw)
        took = time.monotonic() - t0
        assert code == 2
        line = _one_error(err)
        assert "1,000,000 requests: at most 100,000 are imported" in line and "--save-detailed" in line
        assert took < 15, took  # the issue's bound; ~1 s here
        assert not paths.runs_dir().exists() or not any(paths.runs_dir().rglob("*.json"))

    def test_the_cap_is_exact(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from tui.core.bench import vllmresult

        monkeypatch.setattr(vllmresult, "MAX_REQUESTS", 40)
        code, out, err = self._import(tmp_path, _result(40))
        assert code == 0, err
        assert "40 request records" in out
        code, _, err = self._import(tmp_path, _result(41))
        assert code == 2 and "41 requests: at most 40 are imported" in _one_error(err)

    @pytest.mark.parametrize(("change", "field", "says"), [
        (lambda r: r["itls"].__setitem__(3, "[0.01, NaN]"), "itls[3][1]", "must be a finite number"),
        (lambda r: r["ttfts"].__setitem__(2, "1e400"), "ttfts[2]", "a number of seconds"),
        (lambda r: r["ttfts"].__setitem__(5, "-Infinity"), "ttfts[5]", "must be a finite number"),
        (lambda r: r["input_lens"].__setitem__(7, "true"), "input_lens[7]", "a whole number"),
        (lambda r: r["output_lens"].__setitem__(0, "-1"), "output_lens[0]", "a whole number"),
        (lambda r: r["itls"].__setitem__(9, "[0.1, [0.2]]"), "itls[9]", "a list of seconds"),
        (lambda r: r["errors"].__setitem__(4, "7"), "errors[4]", "a text or null"),
        (lambda r: r["start_times"].__setitem__(1, "1" + "0" * 40), "start_times[1]", "seconds"),
    ])
    def test_a_value_out_of_shape_is_named_by_its_field(self, change: Any, field: str, says: str,
                                                        tmp_path: Path) -> None:
        data = _result(64)
        text: dict[str, Any] = {k: [json.dumps(x) for x in v] if isinstance(v, list) else v for k, v in data.items()}
        change(text)
        raw = "{" + ",".join(f"{json.dumps(k)}: " + ("[" + ",".join(v) + "]" if isinstance(v, list) else json.dumps(v))
                             for k, v in text.items()) + "}"
        code, _, err = self._import(tmp_path, raw.encode())
        assert code == 2
        line = _one_error(err)
        assert f"field '{field}'" in line and says in line, line

    def test_what_is_kept_always_reads_back(self, tmp_path: Path) -> None:
        """A key the import does not read rides along into summary.json: one a later reader refuses (an integer of
        40 digits, nesting past 64) is refused now, so the stored run never breaks ``results``."""
        for extra, says in (("1" + "0" * 40, "an integer of 41 digits"),
                            ("[" * 70 + "]" * 70, "nested deeper than 64 levels")):
            raw = json.dumps(_result(8))[:-1] + f', "x_extra": {extra}}}'
            code, _, err = self._import(tmp_path, raw.encode())
            assert code == 2 and says in _one_error(err), err
        assert self._import(tmp_path, _result(8))[0] == 0
        assert main(["results"]) == 0
    def test_brackets_inside_texts_are_no_nesting(self, tmp_path: Path) -> None:
        data = _result(16)
        data["errors"][3] = "[" * 100 + '\\"{' * 50
        data["model_id"] = "{[" * 60
        code, out, err = self._import(tmp_path, data)
        assert code == 0, err
        assert "16 request records" in out
