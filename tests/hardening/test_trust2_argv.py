"""Trust, second pass (issue 32): a value reaches vLLM's argv or environment by its role, whatever brought it.

A hostile teammate's profile, knob catalogue, playbook entry or bundle, and a careless operator's ``--arg``/``--env``,
each tried with the spellings vLLM itself reads (``-tp``, ``--tensor_parallel_size``, ``--tensor-par``,
``--worker_ext``, ``-cc.mode``, ``--x=v``) and with a model that begins with ``-``. Every case is one line naming the
field (and the file and line where there is one), exit 2, and nothing started or written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.hardening.cli import CliResult, run_cli
from tui.core import paths, vllmargv
from tui.core.errors import InputError
from tui.core.models import Catalog
from tui.core.plan.hostfacts import sim_facts
from tui.core.plan.planner import PlanOptions, apply_fix, plan
from tui.core.plan.spec import PlanFix

M = "dummy-qwen3-8b"


def _one_line(r: CliResult) -> str:
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err
    lines = [ln for ln in r.err_lines if not ln.startswith("disagg-tui: warning")]
    assert len(lines) == 1, r.err
    return lines[0]


def _profile(tmp_path: Path, **vllm_extra: object) -> tuple[Path, dict[str, object]]:
    data = Catalog.load().model(M).to_dict()
    vllm = dict(data["vllm"])  # type: ignore[arg-type]
    vllm.update(vllm_extra)
    data["vllm"] = vllm
    data["id"] = "team-profile"
    return tmp_path / "team.yaml", data


def _write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


# spellings vLLM 0.24 reads as a flag the planner owns or a flag that loads code
PLACEMENT_SPELLINGS = [["-tp", "4"], ["--tensor_parallel_size", "4"], ["--tensor-parallel", "4"], ["-tp=4"],
                       ["--tensor-par=4"], ["-dp", "2"], ["--data_parallel_size_local=1"], ["--port=9"],
                       ["--ho", "0.0.0.0"], ["--kv-transfer-config.kv_role", "kv_both"], ["-pp", "2"],
                       ["--headless"], ["--uds", "/tmp/s"]]
CODE_SPELLINGS = [["--worker-extension-cls", "evil.X"], ["--worker_extension_cls=evil.X"], ["--worker-ext", "evil.X"],
                  ["--config", "/tmp/args.yaml"], ["--conf=/tmp/args.yaml"], ["--tool-parser-plugin", "/tmp/p.py"],
                  ["--middleware", "evil.mw"], ["--chat-template", "/tmp/t.jinja"], ["--tokenizer=/tmp/tok"],
                  ["--trust-remote-code"], ["--trust_remote"], ["--hf-overrides", '{"architectures": ["X"]}'],
                  ["--download-dir", "/tmp/cache"], ["--allowed-origins", "*"], ["--ssl-keyfile", "/tmp/k"],
                  ["--otlp-traces-endpoint", "http://10.0.0.1"], ["--logits-processors", "evil.LP"],
                  ["--some-future-plugin-path", "/tmp/x"], ["-h"], ["--hel"]]


class TestArgvByRole:
    """Argv by role: every spelling vLLM reads as a placement or code-loading flag is judged as that flag, from
    every source; a model id or path that vLLM would read as an option is refused where the argv is built."""

    @pytest.mark.parametrize("words", PLACEMENT_SPELLINGS + CODE_SPELLINGS)
    def test_operator_arg(self, words: list[str]) -> None:
        r = run_cli(["plan", "--sim", "--model", M, "--topology", "tp1", "--no-preflight",
                     f"--arg={' '.join(words)}"])
        line = _one_line(r)
        assert "--arg" in line and any(w in line for w in ("placement", "never taken", "exit", "ambiguous")), line

    @pytest.mark.parametrize("words", PLACEMENT_SPELLINGS + CODE_SPELLINGS)
    def test_profile_args_name_file_line_and_field(self, words: list[str], tmp_path: Path) -> None:
        f, data = _profile(tmp_path, args=words)
        _write(f, data)
        line = _one_line(run_cli(["plan", "--sim", "--model", str(f), "--topology", "tp1", "--no-preflight"]))
        assert f"{f}:" in line and "vllm.args" in line, line

    @pytest.mark.parametrize("model", ["--config=/tmp/evil.yaml", "-tp", "--trust-remote-code", "-",
                                       "--worker-extension-cls=evil.X"])
    def test_a_model_that_vllm_would_read_as_an_option(self, model: str, tmp_path: Path) -> None:
        f, data = _profile(tmp_path)
        data["model"] = model
        _write(f, data)
        line = _one_line(run_cli(["plan", "--sim", "--model", str(f), "--topology", "tp1", "--no-preflight"]))
        assert f"{f}:" in line and "'model'" in line and "starts with '-'" in line, line
        line = _one_line(run_cli(["plan", "--sim", "--model", M, "--topology", "tp1", "--no-preflight",
                                  f"--model-path={model}"]))
        assert "--model-path" in line and "starts with '-'" in line, line

    @pytest.mark.parametrize("key", ["served_model_name", "load_format"])
    def test_a_profile_value_after_a_planner_flag_is_never_an_option(self, key: str, tmp_path: Path) -> None:
        f, data = _profile(tmp_path, **{key: "--worker-extension-cls=evil.X"})
        _write(f, data)
        line = _one_line(run_cli(["plan", "--sim", "--model", str(f), "--topology", "tp1", "--no-preflight"]))
        assert f"{f}:" in line and f"vllm.{key}" in line and "not starting with '-'" in line, line

    def test_the_builder_refuses_an_option_shaped_model_whatever_reached_it(self) -> None:
        profile = Catalog.load().model(M)
        for model in ("-tp", "--config=x.yaml"):
            with pytest.raises(InputError, match="starts with '-'"):
                plan(profile, "tp1", sim_facts("h200", 2), PlanOptions(model_path=model))

    @pytest.mark.parametrize("words", [["-tp", "4"], ["--tensor_parallel", "4"], ["--gpu-memory", "0.5"],
                                       ["--max_model_len=1024"], ["--worker_ext", "x"], ["-cc.mode=3", "--config",
                                                                                           "/tmp/x"]])
    def test_operator_knob_catalogue(self, words: list[str], tmp_path: Path) -> None:
        cfg = paths.user_profiles_dir()
        cfg.mkdir(parents=True, exist_ok=True)
        knobs = cfg / "knobs.yaml"
        _write(knobs, {"knobs": {"team": {"title": "t", "vllm": {"since": "0.24.0"},
                                          "values": {"a": {"default": True}, "b": {"args": words}}}}})
        line = _one_line(run_cli(["knobs"]))
        assert "knobs.yaml" in line and "knobs.team.values.b.args" in line, line

    @pytest.mark.parametrize("item", ["--worker-extension-cls evil.X", "-tp 8", "--tensor_parallel_size=8",
                                      "--config /tmp/x.yaml"])
    def test_a_playbook_fix_is_judged_where_it_is_applied(self, item: str) -> None:
        p = plan(Catalog.load().model(M), "tp1", sim_facts("h200", 2), PlanOptions())
        with pytest.raises(InputError) as err:
            apply_fix(p, PlanFix(add_args=(item,)), "team-entry")
        assert "fix.add_args" in err.value.one_line() and "team-entry" in err.value.one_line()
        with pytest.raises(InputError, match="never taken"):
            apply_fix(p, PlanFix(set_env=(("PYTHONPATH", "/tmp/evil"),)), "team-entry")

    def test_a_replaced_flag_goes_in_every_spelling(self) -> None:
        """A fix or knob that sets a flag removes it however it was written before (vLLM keeps the last)."""
        p = plan(Catalog.load().model(M), "tp1", sim_facts("h200", 2),
                 PlanOptions(extra_args=("--max_num_seqs=8", "--max-num-batched", "512")))
        fixed = apply_fix(p, PlanFix(add_args=("--max-num-seqs 64", "--max-num-batched-tokens 1024")), "e")
        flags = [w.flag for w in vllmargv.read_words(fixed.servers[0].argv[3:])]
        assert flags.count("--max-num-seqs") == 1 and flags.count("--max-num-batched-tokens") == 1
        assert fixed.servers[0].argv[-4:] == ("--max-num-seqs", "64", "--max-num-batched-tokens", "1024")

    def test_a_bundles_short_or_abbreviated_placement_is_the_exporters_not_carried(self) -> None:
        from tui.core.plan.allowlist import load_allowlist, split_flags

        def err(m: str) -> InputError:
            return InputError(m, field="argv")

        allow = load_allowlist()
        assert split_flags(["-tp", "8", "--max_num_seqs=4"], allow, error=err) == [
            ("--tensor-parallel-size", "8"), ("--max-num-seqs", "4")]
        for words in (["--worker_extension_cls", "x.Y"], ["--worker-ext", "x.Y"], ["--trust-remote"]):
            with pytest.raises(InputError, match="not a vLLM flag a bundle may carry"):
                allow.check_args(words, error=err)
        with pytest.raises(InputError, match="ambiguous"):
            allow.check_args(["--max-num", "4"], error=err)


NEVER = ["PYTHONPATH", "LD_PRELOAD", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "UCX_MODULE_DIR", "NIXL_PLUGIN_DIR",
         "HTTPS_PROXY", "https_proxy", "NO_PROXY", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "HF_HOME",
         "HF_HUB_CACHE", "VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
         "HF_ENDPOINT", "NCCL_DEBUG_FILE", "VLLM_PLUGINS", "VLLM_ALLOW_INSECURE_SERIALIZATION",
         "CUDA_VISIBLE_DEVICES", "VLLM_HOST_IP"]


class TestNeverMeansNever:
    """Never means never: a variable that loads code or libraries, chooses cache/config/plugin folders, or moves
    traffic and trust is refused from every source, and --allow-env cannot lift it."""

    @pytest.mark.parametrize("name", NEVER)
    def test_operator_env(self, name: str) -> None:
        line = _one_line(run_cli(["plan", "--sim", "--model", M, "--topology", "tp1", "--no-preflight",
                                  f"--env={name}=/tmp/x"]))
        assert "--env" in line and name in line and ("never taken" in line or "placement" in line), line

    @pytest.mark.parametrize("name", NEVER[:12])
    def test_profile_env(self, name: str, tmp_path: Path) -> None:
        f, data = _profile(tmp_path, env={name: "/tmp/x"})
        _write(f, data)
        line = _one_line(run_cli(["plan", "--sim", "--model", str(f), "--topology", "tp1", "--no-preflight"]))
        assert f"{f}:" in line and f"vllm.env.{name}" in line, line

    @pytest.mark.parametrize("name", NEVER)
    def test_allow_env_cannot_lift_it(self, name: str) -> None:
        from tui.core.plan.allowlist import load_allowlist

        with pytest.raises(InputError) as err:
            load_allowlist().check_env(name, "/tmp/x", allow_env=(name,),
                                       error=lambda m: InputError(m, field=f"env.{name}"))
        assert "even with --allow-env" in err.value.one_line()

    def test_the_allow_env_help_says_what_it_lifts(self) -> None:
        r = run_cli(["import", "--help"])
        assert r.code == 0
        text = " ".join(r.out.split())
        assert "only tuning variables" in text and "never" in text

    @pytest.mark.parametrize("name", ["VLLM_PLUGINS", "VLLM_LOGGING_CONFIG_PATH", "VLLM_CACHE_ROOT"])
    def test_knob_env(self, name: str) -> None:
        cfg = paths.user_profiles_dir()
        cfg.mkdir(parents=True, exist_ok=True)
        _write(cfg / "knobs.yaml", {"knobs": {"team": {"title": "t", "vllm": {"since": "0.24.0"},
                                                       "values": {"a": {"default": True},
                                                                  "b": {"env": {name: "/tmp/x"}}}}}})
        line = _one_line(run_cli(["knobs"]))
        assert "knobs.yaml" in line and name in line and "never taken" in line, line


class TestRemotePlanAnswers:
    """Another host's ``plan --json`` answer goes through the same table: its placement is its own planner's, but a
    code-loading flag or variable, an option-shaped model or a bare word is refused naming the host and field."""

    @staticmethod
    def _answer(argv: list[str], env: dict[str, str] | None = None) -> str:
        import json

        return json.dumps({"plan": {"servers": [{"name": "prefill-0", "role": "prefill", "url": "http://10.0.0.2:8100",
                                                 "shell": "x", "argv": argv, "env": env or {}}]},
                           "preflight": []})

    def test_its_own_placement_is_taken(self) -> None:
        from tui.core.remote.cluster import read_remote_plan

        argv = ["vllm", "serve", "m", "--host", "10.0.0.2", "--port", "8100", "--tensor-parallel-size", "1",
                "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}',
                "--trust-remote-code"]
        p = read_remote_plan("b", self._answer(argv, {"CUDA_VISIBLE_DEVICES": "0",
                                                      "VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.2"}), "10.0.0.2")
        assert p.servers[0].argv == tuple(argv)

    @pytest.mark.parametrize(("argv", "env", "says"), [
        (["vllm", "serve", "--config=/tmp/x.yaml"], {}, "starts with '-'"),
        (["vllm", "run-batch", "m"], {}, "vllm serve MODEL"),
        (["vllm", "serve", "m", "--worker_extension_cls", "evil.X"], {}, "never taken"),
        (["vllm", "serve", "m", "-h"], {}, "help"),
        (["vllm", "serve", "m", "stray"], {}, "not a flag"),
        (["vllm", "serve", "m"], {"LD_PRELOAD": "/tmp/evil.so"}, "never taken"),
        (["vllm", "serve", "m"], {"https_proxy": "http://10.9.9.9:3128"}, "never taken"),
    ])
    def test_what_no_host_may_answer(self, argv: list[str], env: dict[str, str], says: str) -> None:
        from tui.core.remote.cluster import read_remote_plan

        with pytest.raises(InputError) as err:
            read_remote_plan("b", self._answer(argv, env), "10.0.0.2")
        line = err.value.one_line()
        assert "b: plan --json" in line and "plan.servers[0]" in line and says in line, line

    def test_a_headless_part_names_its_head_and_no_other_host(self) -> None:
        import json

        from tui.core.remote.cluster import read_remote_plan

        def answer(url: str) -> str:
            return json.dumps({"plan": {"servers": [{"name": "engines-1", "role": "headless", "url": url, "shell": "x",
                                                     "argv": ["vllm", "serve", "m", "--headless"], "env": {}}]},
                               "preflight": []})

        p = read_remote_plan("b", answer("http://10.0.0.1:8000"), "10.0.0.2", head="10.0.0.1")
        assert p.servers[0].url == "http://10.0.0.1:8000"
        with pytest.raises(InputError, match=r"not this host's address 10\.0\.0\.1"):
            read_remote_plan("b", answer("http://10.0.0.7:8000"), "10.0.0.2", head="10.0.0.1")
