"""A bundle from a teammate is data, never code.

Each test is one hole a hostile teammate's bundle opened (issue 21), through the CLI an operator runs: code run on
the importing host (PYTHONPATH, LD_PRELOAD, a program or argv of its own, a code-loading vLLM flag, a model's remote
code), this host's secrets revealed (``${HF_TOKEN}`` expanded, a planted token printed or stored), a shipped
profile silently replaced, this host's ports and address ignored, an id with a newline that broke every later
``plan``, and a YAML alias bomb. Nothing the bundle may not do is executed, printed or written."""

from __future__ import annotations

import copy
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import cli, layout_port_args
from tui.cli.main import main
from tui.core import paths

TOKEN = "hf_" + "Zx8" * 10  # the importer's own token: must never be printed or written by a bundle's doing
M = "qwen3.6-27b-nvfp4"


def _bundle_data(topology: str = "dp2", server_env: tuple[tuple[str, str], ...] = (),
                 **plan_options: Any) -> dict[str, Any]:
    """A bundle as export makes it (the same core code), as plain data to tamper with; ``server_env`` lands in the
    plan's first server as a layout started before this host's rules would (a plan the planner no longer makes)."""
    from tui.core.models import Catalog, Workload
    from tui.core.plan.hostfacts import sim_facts
    from tui.core.plan.planner import PlanOptions, plan
    from tui.core.record.bundle import build_bundle
    from tui.core.record.fingerprint import host_fingerprint
    from tui.core.topology import parse_topology

    facts = sim_facts("b200", 2)
    profile = Catalog.load().model(M)
    p = plan(profile, parse_topology(topology), facts, PlanOptions(**plan_options)).to_dict()
    p["servers"][0]["env"] = {**dict(p["servers"][0]["env"]), **dict(server_env)}
    return build_bundle(source="campaign", source_id="c1", profile=profile, layouts=[(topology, p)],
                        workloads={"team-tiny": Workload("team-tiny", 32, 48, 4)}, fingerprint=host_fingerprint(facts))


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _server(data: dict[str, Any], i: int = 0) -> dict[str, Any]:
    server: dict[str, Any] = data["layouts"][0]["plan"]["servers"][i]
    return server


def _config_files() -> dict[str, bytes]:
    root = paths.user_profiles_dir()
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} if root.exists() else {}


def _one_error(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("disagg-tui: warning")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def marker_package(tmp_path: Path) -> tuple[Path, Path]:
    """A folder with a sitecustomize.py that leaves a marker file when any Python starts with it on its path."""
    pkg = tmp_path / "evil"
    pkg.mkdir()
    marker = tmp_path / "it-ran"
    (pkg / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n", encoding="utf-8")
    return pkg, marker


@pytest.mark.parametrize("where", ["plan", "profile", "override"])
@pytest.mark.parametrize("allow", [False, True])
def test_a_bundle_cannot_put_python_on_the_path_of_what_it_launches(
        where: str, allow: bool, tmp_path: Path, marker_package: tuple[Path, Path],
        capsys: pytest.CaptureFixture[str]) -> None:
    pkg, marker = marker_package
    data = _bundle_data(port=18000)
    if where == "plan":
        _server(data)["env"]["PYTHONPATH"] = str(pkg)
    elif where == "profile":
        data["profile"]["vllm"]["env"] = {"PYTHONPATH": str(pkg)}
    else:
        data["profile"]["overrides"] = {"dp": {"env": {"PYTHONPATH": str(pkg)}}}
    b = _write(tmp_path / "b.yaml", data)
    extra = ["--allow-env", "PYTHONPATH"] if allow else []
    code = main(["up", "--sim", "--sim-startup", "0.3", "--bundle", str(b), *layout_port_args(), *extra])
    out, err = capsys.readouterr()
    try:
        assert code == 2
        line = _one_error(err)
        assert f"{b}:" in line and "PYTHONPATH is never taken from a " in line and "even with --allow-env" in line
        assert "env.PYTHONPATH" in line
        assert not marker.exists() and "is up" not in out
    finally:
        main(["down", "--all"])


@pytest.mark.parametrize(("name", "value"), [("LD_PRELOAD", "/tmp/x.so"), ("LD_LIBRARY_PATH", "/tmp"),
                                             ("PATH", "/tmp/bin"), ("CUDA_HOME", "/tmp/cuda"),
                                             ("VLLM_PLUGINS", "evil"), ("VLLM_LOGGING_CONFIG_PATH", "/tmp/l.json"),
                                             ("PYTHONSTARTUP", "/tmp/s.py"), ("BASH_ENV", "/tmp/rc")])
def test_variables_that_load_code_or_move_files_are_refused_even_with_allow_env(
        name: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _bundle_data()
    _server(data)["env"][name] = value
    b = _write(tmp_path / "b.yaml", data)
    assert main(["import", "--sim", str(b), "--yes", "--allow-env", name]) == 2
    line = _one_error(capsys.readouterr().err)
    assert f"field 'layouts[0].plan.servers[0].env.{name}'" in line and "never taken from a bundle" in line
    assert _config_files() == {}


def test_an_unlisted_tuning_variable_needs_allow_env_and_is_then_carried(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _bundle_data()
    _server(data)["env"]["NCCL_SOCKET_IFNAME"] = "eth7"
    b = _write(tmp_path / "b.yaml", data)
    assert main(["plan", "--sim", "--model", M, "--topology", "dp2", "--no-preflight"]) == 0
    capsys.readouterr()
    assert main(["import", "--sim", str(b), "--yes"]) == 2
    assert "NCCL_SOCKET_IFNAME is not an environment variable a bundle may set (accept it on this host with " \
           "--allow-env NCCL_SOCKET_IFNAME)" in _one_error(capsys.readouterr().err)
    assert main(["import", "--sim", str(b), "--yes", "--allow-env", "NCCL_SOCKET_IFNAME"]) == 0
    out = capsys.readouterr().out
    assert "#   server: NCCL_SOCKET_IFNAME=eth7" in out and "NCCL_SOCKET_IFNAME=eth7 vllm serve" in out


def test_allow_env_lifts_only_tuning_variables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A variable that is no tuning variable of vLLM or the libraries under it is not lifted, and the refusal does
    not advise a flag that cannot lift it."""
    data = _bundle_data()
    _server(data)["env"]["TEAM_KNOB"] = "7"
    b = _write(tmp_path / "b.yaml", data)
    assert main(["import", "--sim", str(b), "--yes"]) == 2
    line = _one_error(capsys.readouterr().err)
    assert "TEAM_KNOB is not an environment variable a bundle may set" in line and "--allow-env" not in line
    assert main(["import", "--sim", str(b), "--yes", "--allow-env", "TEAM_KNOB"]) == 2
    assert "TEAM_KNOB is not one --allow-env can lift" in _one_error(capsys.readouterr().err)
    assert _config_files() == {}


@pytest.mark.parametrize(("change", "field", "says"), [
    (lambda s: s["argv"].__setitem__(0, "/tmp/evil-vllm"), None, None),  # shown, never run
    (lambda s: s["argv"].__setitem__(1, "run-batch"), "argv", "carries no program or argv of its own"),
    (lambda s: s["argv"].extend(["--config", "/tmp/x.yaml"]), "argv", "--config is not a vLLM flag a bundle may"),
    (lambda s: s["argv"].extend(["--speculative-config", '{"method": "draft_model", "model": "/tmp/d"}']), "argv",
     "key 'method' must be one of"),
    (lambda s: s["argv"].extend(["--speculative-config", '{"method": "ngram", "model": "/tmp/d"}']), "argv",
     "key 'model' is not one a bundle may set"),
    (lambda s: s["argv"].extend(["--tokenizer", "/tmp/tok"]), "argv", "--tokenizer is not a vLLM flag"),
    (lambda s: s["argv"].extend(["--chat-template", "/tmp/t.jinja"]), "argv", "--chat-template is not a vLLM"),
    (lambda s: s["argv"].extend(["--api-key", "k"]), "argv", "--api-key is not a vLLM flag"),
    (lambda s: s["argv"].extend(["-cc.mode", "3"]), "argv", "dotted or appending forms are not taken"),
    (lambda s: s["argv"].extend(["--compilation-config.mode", "3"]), "argv", "dotted or appending forms"),
    (lambda s: s["argv"].extend(["--max-num-seqs", "lots"]), "argv", "--max-num-seqs lots: must be an integer"),
])
def test_a_bundle_runs_no_program_argv_or_code_loading_flag_of_its_own(
        change: Any, field: str | None, says: str | None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    data = _bundle_data()
    change(_server(data))
    b = _write(tmp_path / "b.yaml", data)
    code = main(["import", "--sim", str(b), "--yes"])
    out, err = capsys.readouterr()
    if says is None:  # the executable: this host's own vllm runs, the bundle's is only shown
        assert code == 0, err
        assert "#   server: ran /tmp/evil-vllm (here: vllm)" in out
        assert "/tmp/evil-vllm serve" not in out and "vllm serve nvidia/" in out
        return
    assert code == 2
    line = _one_error(err)
    assert f"field 'layouts[0].plan.servers[0].{field}'" in line and says in line, line
    assert _config_files() == {}


def test_remote_code_of_an_untrusted_model_needs_the_operators_word(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = _bundle_data()
    data["profile"]["id"] = "teammate-model"
    data["profile"]["model"] = "someone/remote-code-model"
    for lay in data["layouts"]:
        lay["plan"]["profile_id"] = "teammate-model"
    b = _write(tmp_path / "b.yaml", data)
    assert main(["import", "--sim", str(b), "--yes"]) == 2
    line = _one_error(capsys.readouterr().err)
    assert "field 'profile.vllm.trust_remote_code'" in line and "--trust-remote-code" in line
    assert _config_files() == {}
    assert main(["import", "--sim", str(b), "--yes", "--trust-remote-code"]) == 0
    out = capsys.readouterr().out
    assert "accepted here (--trust-remote-code)" in out and "profile teammate-model: added" in out


def test_no_variable_of_this_host_is_expanded_from_a_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    for model in ("${HF_TOKEN}", "${HF_TOKEN:-x}", "$HF_TOKEN", "org/${HF_TOKEN}"):
        data = _bundle_data()
        data["profile"]["model"] = model
        b = _write(tmp_path / "b.yaml", data)
        assert main(["import", "--sim", str(b), "--yes"]) == 2
        out, err = capsys.readouterr()
        assert TOKEN not in out + err
        assert "field 'profile.model'" in _one_error(err) and "never expanded" in err
        assert _config_files() == {}


def test_a_token_planted_in_a_bundle_is_refused_never_printed_or_stored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    planted = "hf_" + "Pl4nt" * 6
    data = _bundle_data()
    _server(data)["env"]["HF_TOKEN"] = planted
    b = _write(tmp_path / "b.yaml", data)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    for argv in (["import", "--sim", str(b), "--yes"], ["up", "--sim", "--bundle", str(b), *layout_port_args()]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert planted not in out + err and TOKEN not in out + err
        assert "HF_TOKEN is a secret: a bundle never carries its value" in _one_error(err)
    state = paths.state_dir()
    assert not any(planted.encode() in p.read_bytes() for p in state.rglob("*") if p.is_file())


def test_a_redacted_secret_comes_from_this_hosts_environment_and_is_never_stored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    data = _bundle_data()
    _server(data)["env"]["HF_TOKEN"] = "<redacted>"
    b = _write(tmp_path / "b.yaml", data)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert main(["up", "--sim", "--bundle", str(b), *layout_port_args()]) == 2
    assert "needs HF_TOKEN: set it in the environment" in _one_error(capsys.readouterr().err)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    try:
        assert main(["up", "--sim", "--sim-startup", "0.3", "--bundle", str(b), *layout_port_args()]) == 0
        out, err = capsys.readouterr()
        assert TOKEN not in out + err and "is up" in out
        assert not any(TOKEN.encode() in p.read_bytes() for p in paths.state_dir().rglob("*") if p.is_file())
    finally:
        main(["down", "--all"])


def test_import_never_replaces_a_shipped_profile_without_replace(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    plan_argv = ["plan", "--sim", "--model", M, "--topology", "dp2", "--no-preflight"]
    assert main(plan_argv) == 0
    shipped_plan = capsys.readouterr().out
    data = _bundle_data()
    data["profile"]["vllm"]["env"] = {"VLLM_LOGGING_LEVEL": "DEBUG"}
    data["profile"]["vllm"]["args"] = ["--max-num-seqs", "8"]
    b = _write(tmp_path / "b.yaml", data)
    for yes in ([], ["--yes"]):
        assert main(["import", "--sim", str(b), *yes]) == 2
        out, err = capsys.readouterr()
        assert "profile qwen3.6-27b-nvfp4: differs (shipped" in out
        assert "vllm.env.VLLM_LOGGING_LEVEL: — (here) → DEBUG (bundle)" in out
        assert "vllm.args: [] (here) → ['--max-num-seqs', '8'] (bundle)" in out
        assert "differs from the bundle's" in _one_error(err) and "--replace" in err
        assert _config_files() == {}
    assert main(plan_argv) == 0
    assert capsys.readouterr().out == shipped_plan
    assert main(["import", "--sim", str(b), "--yes", "--replace"]) == 0
    assert "which now overrides the shipped" in capsys.readouterr().out
    assert main(plan_argv) == 0
    now = capsys.readouterr().out
    assert "VLLM_LOGGING_LEVEL=DEBUG" in now and "--max-num-seqs 8" in now


def test_import_without_yes_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _bundle_data()
    data["profile"]["id"] = "new-one"
    for lay in data["layouts"]:
        lay["plan"]["profile_id"] = "new-one"
    b = _write(tmp_path / "b.yaml", data)
    assert main(["import", "--sim", str(b)]) == 2  # stdin is not a terminal under pytest
    out, err = capsys.readouterr()
    assert "profile new-one: new here" in out and "confirm with --yes" in _one_error(err)
    assert _config_files() == {}


def test_up_bundle_takes_this_hosts_address_ports_and_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    data = _bundle_data("1p1d", host="0.0.0.0", port=18000, server_base_port=18100, side_channel_base=15600)
    b = _write(tmp_path / "b.yaml", data)
    from tests.helpers import _is_free

    rng = random.Random()
    port = next(p for p in iter(lambda: rng.randrange(21000, 31000), None)  # every port the layout binds: free now
                if all(_is_free(p + d) for d in (0, 50, 51, 100, 200)))
    argv = ["up", "--sim", "--sim-startup", "0.3", "--bundle", str(b), "--port", str(port),
            "--server-port", str(port + 100), "--side-channel-port", str(port + 50)]
    try:
        assert main(argv) == 0
        out, err = capsys.readouterr()
    finally:
        main(["down", "--all"])
    assert f"endpoint: http://127.0.0.1:{port}" in out
    assert f"--host 127.0.0.1 --port {port + 100}" in out and f"VLLM_NIXL_SIDE_CHANNEL_PORT={port + 50}" in out
    assert "0.0.0.0" not in out
    assert f"#   prefill-0: bound 0.0.0.0:18100 (here: 127.0.0.1:{port + 100})" in err
    assert f"#   prefill-0: VLLM_NIXL_SIDE_CHANNEL_PORT=15600 (here: {port + 50})" in err


@pytest.mark.parametrize(("where", "value", "field"), [
    ("source.id", "c1\n", "source.id"),
    ("source.id", "c1\nid: qwen3.6-27b-nvfp4", "source.id"),
    ("profile.id", "ok\n", "profile.id"),
    ("topology", "dp2\n", "layouts[0].topology"),
])
def test_a_newline_in_an_id_is_refused_and_later_plans_still_work(where: str, value: str, field: str,
                                                                  tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    data = _bundle_data()
    if where == "source.id":
        data["source"]["id"] = value
    elif where == "profile.id":
        data["profile"]["id"] = value
    else:
        data["layouts"][0]["topology"] = value
    b = _write(tmp_path / "b.yaml", data)
    assert main(["import", "--sim", str(b), "--yes", "--replace"]) == 2
    assert f"field '{field}'" in _one_error(capsys.readouterr().err)
    assert _config_files() == {}
    assert main(["plan", "--sim", "--model", M, "--topology", "dp2", "--no-preflight"]) == 0


def test_an_installed_profile_always_loads_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever a bundle's names hold, the file import writes parses, so no later plan breaks."""
    data = _bundle_data()
    data["profile"]["id"] = "odd-one"
    data["profile"]["title"] = "a title\nwith: lines # and # marks\n\x1b[31mred"
    data["source"]["id"] = "team/run@2026:1+x"
    for lay in data["layouts"]:
        lay["plan"]["profile_id"] = "odd-one"
    b = _write(tmp_path / "b\nname.yaml", data)
    assert main(["import", "--sim", str(b), "--yes"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert main(["plan", "--sim", "--model", "odd-one", "--topology", "dp2", "--no-preflight"]) == 0
    assert main(["plan", "--sim", "--model", M, "--topology", "dp2", "--no-preflight"]) == 0


def test_an_alias_bomb_bundle_is_refused_at_once(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    good = yaml.safe_dump(_bundle_data(), sort_keys=False)
    b = tmp_path / "bomb.yaml"
    b.write_text(good.replace("fingerprint:", "fingerprint:\n  x:\n" + "\n".join("    " + ln for ln in lines)
                              + "\n  y: 1\n  z:", 1), encoding="utf-8")
    t0 = time.monotonic()
    res = cli("import", "--sim", str(b), "--yes", timeout=60)
    assert res.returncode == 2
    assert "once its aliases are expanded (an alias bomb?)" in _one_error(res.stderr)
    assert time.monotonic() - t0 < 60


def test_a_bundle_plan_server_of_another_shape_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    for change, says in ((lambda d: _server(d).pop("env"), None),
                         (lambda d: _server(d).__setitem__("host", 8000), "expected a string, got 8000"),
                         (lambda d: _server(d).__setitem__("name", "server-7"), "has servers server-7"),
                         (lambda d: d["layouts"][0]["plan"]["servers"].append(copy.deepcopy(_server(d))),
                          "has servers server, server")):
        data = _bundle_data()
        change(data)
        b = _write(tmp_path / "b.yaml", data)
        code = main(["import", "--sim", str(b), "--yes"])
        _, err = capsys.readouterr()
        if says is None:
            assert code == 0, err  # a server without env: no variables
            continue
        assert code == 2 and says in _one_error(err), err


def test_results_text_from_a_bundle_is_printed_safely(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _bundle_data()
    data["results"] = {"table": "\x1b]0;owned\x07row 1\n" + "\n".join(f"row {i}" for i in range(500))}
    b = _write(tmp_path / "b.yaml", data)
    assert main(["import", "--sim", str(b), "--yes"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "more line(s) not shown" in out and "row 499" not in out
    json.dumps(out)


def test_export_redacts_secrets_of_any_name_and_credentials_in_urls(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from tui.core.record.bundle import write_bundle

    gh = "ghp_" + "Ab3" * 12
    data = _bundle_data(server_env=(("MY_HF_TOKEN_2", gh), ("HF_ENDPOINT", "https://user:pa55word@mirror.example"),
                                    ("TOKENIZERS_PARALLELISM", "false")))
    b = tmp_path / "b.yaml"
    write_bundle(b, data)
    text = b.read_text(encoding="utf-8")
    assert gh not in text and "pa55word" not in text and "user:" not in text
    assert "HF_ENDPOINT: https://<redacted>@mirror.example" in text and "TOKENIZERS_PARALLELISM: 'false'" in text
    assert data["secrets_needed"] == ["HF_ENDPOINT", "MY_HF_TOKEN_2"]
    # on import, a host the bundle names (HF_ENDPOINT) is refused; the secret's name is said, never a value
    assert main(["import", "--sim", str(b), "--yes"]) == 2
    out, err = capsys.readouterr()
    assert "HF_ENDPOINT is never taken from a bundle" in _one_error(err) and gh not in out + err


@pytest.mark.parametrize("recommendation", ["\t" * 1000, ["dp2"], {"objectives": "x"},
                                            {"objectives": {"max_throughput": "dp2"}}])
def test_a_bundles_recommendation_of_the_wrong_shape_picks_the_first_layout(recommendation: object) -> None:
    """The bundle's results are a teammate's file: a recommendation that is text, a list, or objectives of the
    wrong shape (found by the field sweep of tests/hardening: a traceback, 'str' object has no attribute 'get')
    leaves the first layout the one offered."""
    from types import SimpleNamespace

    from tui.core.record.bundle import Bundle

    first, second = SimpleNamespace(topology="tp1"), SimpleNamespace(topology="dp2")
    fake = SimpleNamespace(layouts=[first, second], results={"recommendation": recommendation})
    assert Bundle.layout(fake) is first  # type: ignore[arg-type]


@pytest.mark.parametrize("flag", ["--layout", "--run", "--campaign"])
def test_export_of_an_empty_name_is_one_line(flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--layout ''`` was taken as absent and fell through to the campaign's path: a traceback (TypeError)."""
    assert main(["export", "--sim", flag, "", "-o", str(tmp_path / "b.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"disagg-tui: error: field '{flag}': empty: give a layout id, a run or a campaign name"
    assert not (tmp_path / "b.yaml").exists()
