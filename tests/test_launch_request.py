"""The launch request (tui/core/plan/request.py): one validation naming each flag, every problem at once, to_argv
read back by the real ``up`` parser, and JSON values of vLLM's config flags kept whole from ``--arg`` to the plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.helpers import layout_port_args
from tui.cli.main import build_parser
from tui.core import vllmargv
from tui.core.errors import InputError
from tui.core.launch.state import StateStore
from tui.core.plan.argtext import check_json_flags, quote_words, split_words
from tui.core.plan.request import LaunchRequest, RequestInvalid

ROOT = Path(__file__).resolve().parent.parent
SPEC = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=False)


# --- words ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "words"), [
    (f"--speculative-config {SPEC}", ["--speculative-config", SPEC]),
    (f"--speculative-config={SPEC} --enforce-eager", [f"--speculative-config={SPEC}", "--enforce-eager"]),
    (f"-sc '{SPEC}'", ["-sc", SPEC]),
    ("--chat-template '{% a b %}' --enforce-eager", ["--chat-template", "{% a b %}", "--enforce-eager"]),
    ('--x "a b" c\\ d', ["--x", "a b", "c d"]),
    ("A=1 B='x y' C={\"k\": [1, 2]}", ["A=1", "B=x y", 'C={"k": [1, 2]}']),
    ("{not json} x", ["{not", "json}", "x"]),
])
def test_words_split_as_a_shell_would_keeping_json_whole(text: str, words: list[str]) -> None:
    assert split_words(text, "--arg") == words
    assert split_words(quote_words(words), "--arg") == words


def test_an_unclosed_quote_names_the_flag() -> None:
    with pytest.raises(InputError, match="field '--arg': cannot split"):
        split_words('--served-model-name "x', "--arg")


_PIECES = st.sampled_from(["{", "}", "[", "]", '"', "'", "\\", " ", "a", ":", ",", "=", "--x=", '{"a": 1}', "[1, 2]",
                           "\t", "\n", "\x1c"])


@given(st.lists(st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=12)
                | st.lists(_PIECES, max_size=6).map("".join), max_size=6))
def test_any_words_read_back_as_written(words: list[str]) -> None:
    assert split_words(quote_words(words), "--arg") == words


@pytest.mark.parametrize("words", [
    ["--speculative-config", "{method:ngram,num_speculative_tokens:3}"],
    ["--compilation-config={mode:3}"],
    ["-cc", "'{\"mode\": 3}'"],
    ["--kv_transfer_config", "{"],
    ["--attention-config"],
    ["--hf-overrides", "--enforce-eager"],
])
def test_a_json_flag_whose_value_is_not_json_is_refused_naming_it(words: list[str]) -> None:
    with pytest.raises(InputError) as err:
        check_json_flags(words)
    assert err.value.field == "--arg"
    assert any(name in err.value.title for name in ("--speculative-config", "--compilation-config",
                                                    "--kv-transfer-config", "--attention-config", "--hf-overrides"))


def test_json_values_and_dotted_forms_pass() -> None:
    check_json_flags(["--speculative-config", SPEC, "--compilation-config={\"mode\": 3}", "-O3",
                      "--speculative-config.method", "ngram", "--max-num-seqs", "8"])


# --- one validation, every problem at once ----------------------------------------------------------------------


def test_every_problem_of_a_form_is_reported_at_once_each_naming_its_flag() -> None:
    with pytest.raises(RequestInvalid) as err:
        LaunchRequest.from_text({"model": "m", "topology": "tp1", "gpu_memory_utilization": "1.5",
                                 "max_model_len": "lots", "arg": "--speculative-config {method:ngram}",
                                 "env": "A=1 NOEQUALS", "port": "70000", "host": "bad host"})
    flags = err.value.by_flag()
    assert set(flags) == {"--gpu-memory-utilization", "--max-model-len", "--arg", "--env", "--port", "--host"}
    assert "--speculative-config" in flags["--arg"][0]
    assert err.value.exit_code == 2 and "also" in (err.value.hint or "")


@pytest.mark.parametrize(("kw", "flag"), [
    ({}, "--model"),
    ({"model": "m"}, "--topology"),
    ({"model": "m", "topology": "tp9x"}, "--topology"),
    ({"model": "m", "topology": "tp1", "port": 0}, "--port"),
    ({"model": "m", "topology": "tp1", "side_channel_port": 65536}, "--side-channel-port"),
    ({"model": "m", "topology": "tp1", "gpus": ()}, "--gpus"),
    ({"model": "m", "topology": "tp1", "extra_env": (("1X", "v"),)}, "--env"),
    ({"model": "m", "topology": "tp1", "max_model_len": 10**12}, "--max-model-len"),
    ({"model": "m", "topology": "tp1", "gpu_memory_utilization": float("nan")}, "--gpu-memory-utilization"),
    ({"model": "m", "topology": "tp1", "ready_timeout_s": 0.0}, "--ready-timeout"),
    ({"model": "m", "topology": "tp1", "trust_remote_code": True}, "--trust-remote-code"),
    ({"model": "m", "bundle": "b.yaml"}, "--model"),
    ({"model": "m", "topology": "tp1", "extra_args": ("--x", "a\0b")}, "--arg"),
])
def test_an_invalid_request_cannot_be_made(kw: dict[str, Any], flag: str) -> None:
    with pytest.raises(RequestInvalid) as err:
        LaunchRequest(**kw)
    assert err.value.field == flag


def test_a_host_that_is_not_loopback_is_a_warning_as_data() -> None:
    assert LaunchRequest(model="m", topology="tp1").warnings() == []
    (w,) = LaunchRequest(model="m", topology="tp1", host="0.0.0.0").warnings()
    assert w.startswith("--host 0.0.0.0: the servers and the proxy will accept connections")


# --- to_argv → the real up parser → the same request ----------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), min_size=1,
                max_size=16).filter(str.strip)
#: flags with values that test the quoting (a value is any text vLLM would not read as an option)
_FLAG = st.one_of(st.sampled_from([["--enforce-eager"], ["--speculative-config", SPEC], ["-sc", SPEC],
                                   [f"--compilation-config={json.dumps({'mode': 3})}"]]),
                  st.tuples(st.sampled_from(["--served-model-name", "--max-num-seqs", "--kv-cache-dtype"]),
                            st.one_of(_TEXT, st.sampled_from(["'", '"', "{", "a b"]))
                            .filter(lambda t: not t.startswith("-"))).map(list))


@st.composite
def requests(draw: Any) -> LaunchRequest:
    bundle = draw(st.none() | _TEXT) if draw(st.booleans()) else None
    words = [w for flag in draw(st.lists(_FLAG, max_size=4)) for w in flag]
    assume(_json_ok(words))
    kw: dict[str, Any] = {
        "model": None if bundle is not None else draw(_TEXT),
        "topology": draw(st.sampled_from(["tp1", "tp2", "dp2", "1p1d", "2P1D-TP2", " 1p2d"])
                         | (st.none() if bundle is not None else st.sampled_from(["tp1"]))),
        "gpus": draw(st.none() | st.lists(st.integers(0, 64), min_size=1, max_size=8).map(tuple)),
        "host": draw(st.sampled_from(["127.0.0.1", "0.0.0.0", "::1", "localhost", "gpu-7.example.org"])),
        "port": draw(st.integers(1, 65535)), "server_port": draw(st.integers(1, 65535)),
        "side_channel_port": draw(st.integers(1, 65535)),
        "model_path": draw(st.none() | _TEXT.filter(lambda t: not t.startswith("-") and t.isprintable())),
        "extra_args": tuple(words),
        "extra_env": tuple(draw(st.lists(st.tuples(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
                                                   .filter(lambda k: vllmargv.env_rule(k) is None),
                                                   st.text(st.characters(blacklist_characters="\0",
                                                                         blacklist_categories=("Cs",)),
                                                           max_size=12)), max_size=4))),
        "gpu_memory_utilization": draw(st.none() | st.floats(0.05, 0.99)),
        "max_model_len": draw(st.none() | st.integers(16, 134_217_728)),
        "allow_shared_gpus": draw(st.booleans()),
        "vllm": draw(st.none() | _TEXT),
        "bundle": bundle,
        "allow_env": tuple(draw(st.lists(_TEXT, max_size=3))) if bundle is not None else (),
        "trust_remote_code": draw(st.booleans()) if bundle is not None else False,
        # playbook entry ids, comma-separated (none empty, auto alone), or auto
        "apply_fix": draw(st.none() | st.just("auto") | st.lists(_TEXT.filter(lambda t: "," not in t and t != "auto"),
                                                                 min_size=1, max_size=3).map(",".join)),
        "replace": draw(st.booleans()), "stagger": draw(st.booleans()),
        "ready_timeout_s": draw(st.none() | st.floats(1e-3, 1e7)),
        "stall_timeout_s": draw(st.none() | st.floats(1e-3, 1e7)),
    }
    return LaunchRequest(**kw)


def _json_ok(words: list[str]) -> bool:
    try:
        check_json_flags(words)
    except InputError:
        return False
    return True


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(requests())
def test_any_valid_request_reads_back_through_the_real_up_parser(request: LaunchRequest) -> None:
    argv = request.to_argv()
    args = build_parser().parse_args(["up", *argv])
    assert LaunchRequest.from_args(args) == request
    assert LaunchRequest.from_argv(argv) == request


def test_defaults_are_left_out_of_the_command_line() -> None:
    assert LaunchRequest(model="qwen", topology="1p1d").to_argv() == ["--model", "qwen", "--topology", "1p1d"]
    assert LaunchRequest(model="-odd", topology="tp1", stagger=False, apply_fix="auto").to_argv() == [
        "--model=-odd", "--topology", "tp1", "--apply-fix", "auto", "--no-stagger"]


# --- through the CLI --------------------------------------------------------------------------------------------


def test_a_json_arg_keeps_its_quotes_from_the_cli_to_the_plan() -> None:
    out = _cli("plan", "--sim", "--model", "dummy-qwen3-8b", "--topology", "tp1", "--json", "--no-preflight",
               "--arg", f"--speculative-config {SPEC}", "--arg", "--compilation-config={\"mode\": 3}")
    assert out.returncode == 0, out.stderr
    (server,) = json.loads(out.stdout)["plan"]["servers"]
    argv = server["argv"]
    assert argv[argv.index("--speculative-config") + 1] == SPEC
    assert json.loads(argv[argv.index("--speculative-config") + 1])["method"] == "ngram"
    assert '--compilation-config={"mode": 3}' in argv


def test_a_json_arg_that_lost_its_quotes_is_refused_by_the_cli() -> None:
    out = _cli("plan", "--sim", "--model", "dummy-qwen3-8b", "--topology", "tp1",
               "--arg", "--speculative-config {method:ngram,num_speculative_tokens:3}")
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("disagg-tui: error: field '--arg': --speculative-config takes JSON")
    assert "Traceback" not in out.stderr


def test_the_simulated_vllm_refuses_a_json_flag_that_is_not_json_as_vllm_does() -> None:
    env = {**os.environ, "DISAGG_SIM_STARTUP_S": "0.3"}
    out = subprocess.run([sys.executable, "-m", "tui.sim.vllm", "serve", "/tmp/model", "--speculative-config",
                          "{method:ngram,num_speculative_tokens:3}"], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=60, check=False)
    assert out.returncode == 2
    assert "vllm serve: error: argument --speculative-config: Invalid JSON" in out.stderr


def test_a_json_arg_reaches_the_started_server_whole() -> None:
    try:
        up = _cli("up", "--sim", "--sim-startup", "0.3", "--model", "dummy-qwen3-8b", "--topology", "tp1",
                  *layout_port_args(), "--arg", f"--speculative-config {SPEC}")
        assert up.returncode == 0, up.stderr[-2000:]
        rec = StateStore().active()
        assert rec is not None and rec.status == "ready"
        (server,) = rec.processes
        assert server.argv[server.argv.index("--speculative-config") + 1] == SPEC
    finally:
        _cli("down", "--all")
