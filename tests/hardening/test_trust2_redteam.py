"""Issue 32, the held-out corpus: the trust pass tried again with shapes nobody listed, as a hostile teammate, a
careless colleague on a shared host and a broken remote host would. One class per kind of hole (argv, terminal,
disk, state, resource); each case checks the real behaviour (the CLI in-process, or the function at the place the
value is used)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.hardening.cli import run_cli
from tui.core.errors import InputError
from tui.core.models import Catalog
from tui.core.plan.hostfacts import sim_facts
from tui.core.plan.planner import PlanOptions, apply_fix, plan
from tui.core.plan.spec import PlanFix

M = "dummy-qwen3-8b"


def _pd_plan():  # type: ignore[no-untyped-def]
    return plan(Catalog.load().model(M), "1p1d", sim_facts("h200", 2), PlanOptions())


class TestArgv:
    """A word reaches vLLM's argv or environment through a playbook fix's placeholder, filled from a LOG LINE: the
    line is the least trusted text of all (a request's prompt can end up in a server's log)."""

    @pytest.mark.parametrize("line", [
        "vllm serve: error: unrecognized arguments: --host",  # vLLM then binds every interface
        "error: unrecognized arguments: --kv-transfer-config",  # a P/D server that no longer transfers
        "error: ambiguous option: --ho could match --host, --hf-token",  # the prefix vLLM reads as --host
        "error: unrecognized arguments: --tensor_parallel_size",
        "error: unrecognized arguments: -tp",
    ])
    def test_the_shipped_unknown_flag_fix_never_removes_placement(self, line: str) -> None:
        from tui.core.playbook.book import load_playbook
        from tui.core.playbook.offline import diagnose_lines

        book = load_playbook(operator=False)
        diags = diagnose_lines([line], book).diagnoses
        assert [d.entry_id for d in diags] == ["unknown-flag"], diags
        (eid, fix), = book.fixes(diags, "unknown-flag")
        with pytest.raises(InputError) as err:
            apply_fix(_pd_plan(), fix, eid)
        msg = err.value.one_line()
        assert "fix.remove_args" in msg and "placement" in msg and "unknown-flag" in msg, msg

    @pytest.mark.parametrize("name", ["CUDA_VISIBLE_DEVICES", "VLLM_NIXL_SIDE_CHANNEL_PORT"])
    def test_the_shipped_unknown_env_fix_never_unsets_what_the_planner_placed(self, name: str) -> None:
        from tui.core.playbook.book import load_playbook
        from tui.core.playbook.offline import diagnose_lines

        book = load_playbook(operator=False)
        diags = diagnose_lines([f"Unknown vLLM environment variable detected: {name}"], book).diagnoses
        (eid, fix), = book.fixes(diags, "unknown-vllm-env")
        with pytest.raises(InputError, match=r"placement.*may not unset it"):
            apply_fix(_pd_plan(), fix, eid)

    def test_a_fix_still_unsets_and_removes_what_is_not_placement(self) -> None:
        p = plan(Catalog.load().model(M), "1p1d", sim_facts("h200", 2),
                 PlanOptions(extra_args=("--max-num-seqs", "8"), extra_env=(("VLLM_ATTENTION_BACKEND", "X"),)))
        fixed = apply_fix(p, PlanFix(unset_env=("VLLM_ATTENTION_BACKEND", "VLLM_PORT"),
                                     remove_args=("--max_num_seqs",)), "e")
        s = fixed.servers[0]
        assert "VLLM_ATTENTION_BACKEND" not in dict(s.env) and "--max-num-seqs" not in s.argv
        assert s.argv[3:5] == ("--host", "127.0.0.1") and dict(s.env)["CUDA_VISIBLE_DEVICES"] == "0"

    @pytest.mark.parametrize("captured", ["8 --enforce-eager", "8 --max-num-seqs 1", "8 --disable-log-stats"])
    def test_a_placeholder_filled_from_a_log_line_is_one_value(self, captured: str) -> None:
        """A teammate's entry '--max-model-len {n}' with a capture that can hold spaces: the log line adds flags."""
        with pytest.raises(InputError, match="one flag with its value"):
            apply_fix(_pd_plan(), PlanFix(add_args=(f"--max-model-len {captured}",)), "team-entry")

    @pytest.mark.parametrize("captured", ['8"', "'8", "8\\"])
    def test_a_placeholder_with_an_unbalanced_quote_is_a_refusal_not_a_traceback(self, captured: str) -> None:
        with pytest.raises(InputError, match="cannot split"):
            apply_fix(_pd_plan(), PlanFix(add_args=(f"--max-model-len {captured}",)), "team-entry")

    @pytest.mark.parametrize("how", ["folder", "config.json", "hf-cache", "discovered"])
    def test_a_model_folder_never_trusts_its_own_code(self, how: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
        """A teammate's folder on a shared disk (or a repo in the HF cache) whose config.json has auto_map: ``--model
        DIR`` derived ``trust_remote_code: true`` on the spot, and vLLM ran the folder's Python with no word."""
        from tests.model_fixtures import hf_cache, model_folder

        if how == "hf-cache":
            monkeypatch.setenv("HF_HUB_CACHE", str(hf_cache(tmp_path / "hf", "team/evil", "deepseek-v2-lite-chat")))
            ref = "team/evil"
        else:
            folder = model_folder(tmp_path / "shared", "deepseek-v2-lite-chat")
            ref = {"folder": str(folder), "config.json": str(folder / "config.json"),
                   "discovered": "deepseek-v2-lite-chat"}[how]
            monkeypatch.setenv("DISAGG_TUI_MODEL_DIRS", str(tmp_path / "shared"))
        r = run_cli(["plan", "--sim", "--model", ref, "--topology", "tp1"])
        assert r.code == 0, r.err
        assert "vllm serve" in r.out and "trust-remote-code" not in r.out, r.out
        assert "ships its own Python code" in r.err


class TestResource:
    """A file under its size cap that still takes seconds or gigabytes."""

    @pytest.mark.parametrize("value", [":".join(["59"] * 290_000), "0x" + "f" * 900_000, "0b" + "1" * 900_000,
                                       "1" + "_0" * 400_000, "1" + "0" * 900_000 + ".5"],
                             ids=["base60", "hex", "binary", "underscored", "long-float"])
    def test_a_number_of_a_megabyte_in_a_teammates_profile_is_refused_at_once(self, value: str,
                                                                               tmp_path: Path) -> None:
        """YAML 1.1 reads '59:59:...' as one base-60 integer, summed in quadratic time: a 0.9 MB profile (under its
        1 MiB cap) held ``plan`` for 18 s before any range check saw the number."""
        import time

        data = Catalog.load().model(M).to_dict()
        data["id"] = "team-profile"
        text = yaml.safe_dump(data, sort_keys=False).replace("max_model_len: ", f"max_model_len: {value} #", 1)
        path = tmp_path / "team.yaml"
        path.write_text(text, encoding="utf-8")
        assert len(text) < 1 << 20
        t0 = time.monotonic()
        r = run_cli(["plan", "--sim", "--model", str(path), "--topology", "tp1"])
        assert time.monotonic() - t0 < 5
        assert r.code == 2 and "Traceback" not in r.err, r.err
        assert "a number written in" in r.err and "team.yaml" in r.err and len(r.err_lines) == 1, r.err

    @pytest.mark.parametrize("line", [b"{}\n", b'{"kind":"notice","ts":1800000001}\n', b"[]\n", b"0\n"])
    def test_a_recording_of_millions_of_tiny_events_is_bounded(self, line: bytes, tmp_path: Path) -> None:
        """A 3 kB recording whose one zstd frame holds 10 million 3-byte lines (under the 32 MiB output floor): each
        line was parsed and refused in turn, and ``replay --headless`` took 41 s."""
        import time

        from tests.hardening.test_hostile_records import T0, _frame, _recording

        n = 30_000_000 // len(line)
        path = _recording(tmp_path / "dense.dtrec", [(T0 + 1, T0 + 3, n, True, _frame(line * n))])
        assert path.stat().st_size < 10_000
        t0 = time.monotonic()
        r = run_cli(["replay", "--headless", str(path)])
        assert time.monotonic() - t0 < 10 and "Traceback" not in r.err, r.err
        assert "no recording is that dense" in r.out + r.err


class TestDisk:
    """Writes that followed a link."""

    @pytest.mark.parametrize("fmt", ["md", "csv", "table", "json"])
    def test_results_output_never_writes_through_a_planted_link(self, fmt: str, tmp_path: Path) -> None:
        """A teammate plants /tmp/report.md -> ~/.bashrc; the operator's 'results -o /tmp/report.md' wrote the table
        into the file the link named."""
        from tests.hardening.poisoned import write_run
        from tui.core import paths

        write_run(paths.runs_dir())
        victim = tmp_path / "bashrc"
        victim.write_text("precious\n", encoding="utf-8")
        link = tmp_path / "report.out"
        link.symlink_to(victim)
        r = run_cli(["results", "--format", fmt, "--output", str(link)])
        assert r.code == 2 and "Traceback" not in r.err and "symlink" in r.err, (r.code, r.err)
        assert victim.read_text(encoding="utf-8") == "precious\n" and link.is_symlink()
        plain = tmp_path / "plain.out"  # an ordinary name is written, whole
        assert run_cli(["results", "--format", fmt, "--output", str(plain)]).code == 0
        assert plain.read_text(encoding="utf-8").strip()

    def test_profile_new_output_never_writes_through_a_planted_link(self, tmp_path: Path) -> None:
        from tests.model_fixtures import model_folder

        folder = model_folder(tmp_path / "m", "qwen3-8b")
        victim = tmp_path / "bashrc"
        victim.write_text("precious\n", encoding="utf-8")
        link = tmp_path / "team.yaml"
        link.symlink_to(victim)
        r = run_cli(["profile", "new", "--from", str(folder), "-o", str(link), "--force"])
        assert r.code == 2 and "Traceback" not in r.err and "symlink" in r.err, (r.code, r.err)
        assert victim.read_text(encoding="utf-8") == "precious\n"


class TestInheritedVariables:
    """A fix's ``unset_env`` of a variable the plan does not set (Kubernetes' ``VLLM_PORT=tcp://...``, inherited
    from the operator's environment) takes it out of what the server starts with (it did nothing before: the
    server started from os.environ), the plan and its shell say so, and a name filled from a log line takes only
    vLLM's own variables away."""

    def test_the_shipped_vllm_port_fix_reaches_the_server(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from tui.core.host.base import HostOptions
        from tui.core.plan.spec import LaunchPlan
        from tui.core.playbook import diagnose_lines, load_playbook
        from tui.sim.host import SimHost

        monkeypatch.setenv("VLLM_PORT", "tcp://10.96.14.2:8000")  # what Kubernetes sets for a service "vllm"
        book = load_playbook(operator=False)
        line = ("ValueError: VLLM_PORT 'tcp://10.96.14.2:8000' appears to be a URI. This may be caused by a "
                "Kubernetes service discovery issue")
        diags = diagnose_lines([line], book).diagnoses
        (eid, fix), = book.fixes(diags, "vllm-port-uri")
        fixed = apply_fix(_pd_plan(), fix, eid)
        assert all(s.unset_env == ("VLLM_PORT",) for s in fixed.servers)
        assert fixed.servers[0].shell().startswith("env -u VLLM_PORT ")
        assert LaunchPlan.from_dict(fixed.to_dict()).servers[0].unset_env == ("VLLM_PORT",)
        host = SimHost(HostOptions(sim=True, sim_gpu="h200", sim_gpus=2))
        assert "VLLM_PORT" in host.server_command(_pd_plan().servers[0], _pd_plan()).env  # inherited, before
        assert "VLLM_PORT" not in host.server_command(fixed.servers[0], fixed).env

    @pytest.mark.parametrize("name", ["PATH", "LD_LIBRARY_PATH", "HOME", "CUDA_HOME"])
    def test_a_log_line_takes_no_other_variable_away(self, name: str) -> None:
        with pytest.raises(InputError, match="only vLLM's own variables"):
            apply_fix(_pd_plan(), PlanFix(unset_env=(name,)), "team-entry")
