"""One redaction for everything written or shown (issue 21): secrets by name, by value and by flag never reach
stdout, a recording, the state file, a run directory or a log line kept, while the live launch gets the real
environment and argv; non-secrets (``TOKENIZERS_PARALLELISM``, ``--max-num-batched-tokens 8192``, model ids, paths,
vLLM 0.24's own knobs) pass unchanged."""

from __future__ import annotations

import json
import re
import string
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import CPU
from tests.helpers import cli, layout_port_args, layout_processes
from tui.core.errors import InputError
from tui.core.redact import (
    REDACTED,
    Redactor,
    is_secret_env,
    is_secret_flag,
    redact_argv,
    redact_data,
    redact_env,
    redact_text,
    restore_env,
    secret_names_in,
)

GH = "ghp_" + "Q7w3Zr9K" * 4 + "x2Yb"  # a made-up GitHub token (36 characters after ghp_)
SK = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5q"  # a made-up OpenAI-style key
PASSWORD = "hunter2hunter2"
MIRROR = f"https://alice:{PASSWORD}@mirror.example"
SECRETS = (GH, SK, PASSWORD)
SECRET_ENV = ["--env", f"MY_HF_TOKEN_2={GH}", "--env", f"VLLM_TEAM_MIRROR={MIRROR}"]
PLAIN_ENV = ["--env", "TOKENIZERS_PARALLELISM=false", "--arg", "--max-num-batched-tokens 8192"]
MODEL = "qwen3.6-27b-nvfp4"
MODEL_ID = "nvidia/Qwen3.6-27B-NVFP4"

#: vLLM 0.24's environment variables (the fact sheet's table) and the others a plan sets: none is a secret by name
VLLM_ENV = ("VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_ENGINE_ITERATION_TIMEOUT_S", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
            "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", "VLLM_RPC_BASE_PATH", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE",
            "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "VLLM_USE_FLASHINFER_SAMPLER", "VLLM_NIXL_SIDE_CHANNEL_HOST",
            "VLLM_NIXL_SIDE_CHANNEL_PORT", "VLLM_SSM_CONV_STATE_LAYOUT", "VLLM_KV_CACHE_LAYOUT",
            "VLLM_ATTENTION_BACKEND", "VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING", "VLLM_LOGGING_PREFIX",
            "VLLM_LOGGING_STREAM", "VLLM_LOGGING_CONFIG_PATH", "VLLM_LOGGING_COLOR", "NO_COLOR",
            "VLLM_LOG_STATS_INTERVAL", "VLLM_DISABLE_LOG_LOGO", "VLLM_CACHE_ROOT", "VLLM_DISABLE_COMPILE_CACHE",
            "VLLM_USE_AOT_COMPILE", "VLLM_USE_STANDALONE_COMPILE", "VLLM_COMPILE_CACHE_SAVE_FORMAT",
            "VLLM_USE_V2_MODEL_RUNNER", "VLLM_SERVER_DEV_MODE", "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_HOST_IP",
            "VLLM_PORT", "VLLM_LOOPBACK_IP", "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION",
            "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "VLLM_HTTP_MAX_REQUEST_BODY_SIZE", "VLLM_MAX_STOP_STRINGS",
            "VLLM_CHAT_TEMPLATE_RENDER_TIMEOUT", "VLLM_COMPUTE_NANS_IN_LOGITS", "VLLM_MAX_COMPLETION_PROMPTS",
            "TORCHINDUCTOR_CACHE_DIR", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "UCX_TLS", "UCX_NET_DEVICES",
            "UCX_RCACHE_MAX_UNRELEASED", "TOKENIZERS_PARALLELISM", "HF_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE",
            "HF_HUB_DISABLE_IMPLICIT_TOKEN", "PATH", "PYTHONPATH", "MAX_NUM_BATCHED_TOKENS", "VLLM_MAX_TOKENS",
            "PAD_TOKEN_ID", "EOS_TOKEN", "TOKENIZER", "TOKENIZER_MODE", "KV_CACHE_KEY_SIZE",
            # where a secret is kept, not the secret
            "HF_TOKEN_PATH", "SSL_KEY_FILE", "API_KEY_FILE")


def _no_secret(text: str, where: str) -> None:
    for s in SECRETS:
        assert s not in text, f"{s} in {where}"


# --- the rules ----------------------------------------------------------------------------------------------------


def test_secret_names_and_the_knobs_that_are_not() -> None:
    secret = ("HF_TOKEN", "MY_HF_TOKEN_2", "HUGGING_FACE_HUB_TOKEN", "GH_AUTH_TOKEN", "GITHUB_TOKEN", "OPENAI_API_KEY",
              "VLLM_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "PRIVATE_KEY", "SSH_KEY", "DB_PASSWORD",
              "MYSQL_PWD_PASSWD", "GPG_PASSPHRASE", "GOOGLE_APPLICATION_CREDENTIALS", "MY_SECRET_THING", "GITHUB_PAT",
              "BASIC_AUTH", "apiKey", "hfToken", "token")
    assert [n for n in secret if not is_secret_env(n)] == []
    assert [n for n in VLLM_ENV if is_secret_env(n)] == []


def test_of_every_vllm_serve_flag_only_api_key_and_hf_token_are_secret() -> None:
    help_text = (CPU / "vllm-serve-help-all.txt").read_text(encoding="utf-8")
    flags = set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", help_text))
    assert len(flags) > 200 and "--max-num-batched-tokens" in flags and "--allow-credentials" in flags
    assert sorted(f for f in flags if is_secret_flag(f)) == ["--api-key", "--hf-token"]
    assert is_secret_flag("--api_key") and is_secret_flag("--client-secret") and is_secret_flag("--hf-token=x")
    assert not is_secret_flag("--password-file") and not is_secret_flag("api-key")


@pytest.mark.parametrize("secret", [
    "hf_" + "aB3" * 12, GH, "gho_" + "x9Y" * 12, "ghu_" + "Zz1" * 12, "ghs_" + "Qq7" * 12, "ghr_" + "Rr5" * 12,
    "github_pat_11ABCDEFG0" + "aZ9_" * 15, "sk-" + "T3BlbkFJ" * 6, SK, "sk-ant-api03-" + "Xy7_" * 10,
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "AKIAIOSFODNN7EXAMPLE", "ASIAY34FZKBOKMUTVV7A", "xoxb-123456789012-abcdefghijklmnop", "xoxp-1-2-3-abcdef0123"])
def test_a_token_shaped_value_is_redacted_wherever_it_appears(secret: str) -> None:
    for text in (secret, f"log: got {secret}, retrying", f"X={secret}", f"'{secret}'", f"url?t={secret}&x=1",
                 f"[{secret}]", f"prefix{secret}", f"{secret}\n"):
        out = redact_text(text)
        assert secret not in out and REDACTED in out, (text, out)
    assert redact_env({"ANY_NAME": secret}) == {"ANY_NAME": REDACTED}
    assert redact_argv(["vllm", "--served-model-name", secret]) == ["vllm", "--served-model-name", REDACTED]


@pytest.mark.parametrize("text", [
    "TOKENIZERS_PARALLELISM=false", "--max-num-batched-tokens 8192", "--max-num-batched-tokens=8192",
    f"vllm serve {MODEL_ID} --tokenizer {MODEL_ID} --spec-tokens 3 --dbo-decode-token-threshold 32",
    "/home/op/.cache/huggingface/hub/models--nvidia--Qwen3.6-27B-NVFP4/snapshots/0123abc",
    "--disk-cache-dir=/var/cache/task-manager-disk-cache-directory", "ssh://git@github.com/org/repo.git",
    "http://127.0.0.1:8100/v1/completions", "http://[::1]:8000/health",
    "(EngineCore_DP0 pid=1) INFO 11-29 07:27:22 [gpu_model_runner.py:302] Model loading took 15.2 GiB memory",
    "(APIServer pid=1) INFO 11-29 07:26:38 [api_utils.py:273] non-default args: {'model': 'nvidia/Qwen3.6-27B-NVFP4',"
    " 'max_num_batched_tokens': 8192, 'enable_prompt_tokens_details': True}",
    "mean time to first token: 12.5 ms; total_token_throughput: 5000", "prompt_tokens=64 completion_tokens=8",
    "--allow-credentials --port 8000", "scikit-learn sk-learn-style-names", "hf_hub_download", "KeyError: 'x'",
    "Unset VLLM_USE_FLASHINFER_SAMPLER=1.", "VLLM_SSM_CONV_STATE_LAYOUT=DS VLLM_NIXL_SIDE_CHANNEL_PORT=5600"])
def test_what_is_not_a_secret_passes_unchanged(text: str) -> None:
    assert redact_text(text) == text
    assert Redactor({}).text(text) == text


def test_names_flags_and_urls_in_text_argv_and_env() -> None:
    t = redact_text
    assert t("export DB_PASSWORD=abc MY_HF_TOKEN_2='a b'") == f"export DB_PASSWORD={REDACTED} MY_HF_TOKEN_2={REDACTED}"
    assert t("vllm serve m --api-key s3cr3t --port 1") == f"vllm serve m --api-key {REDACTED} --port 1"
    assert t("m --hf-token=abc --api-key 'x y'") == f"m --hf-token={REDACTED} --api-key {REDACTED}"
    assert t("--api-key --port 1") == "--api-key --port 1"  # no value: the next flag is not hidden
    assert t("--db-password-thing s3cr3t") == f"--db-password-thing {REDACTED}"
    assert t("Authorization: Basic dXNlcjpwYXNz, Bearer abcdefgh12345") == \
        f"Authorization: Basic {REDACTED}, Bearer {REDACTED}"
    assert t("HF_ENDPOINT=" + MIRROR + "/api") == f"HF_ENDPOINT=https://{REDACTED}@mirror.example/api"
    assert t("redis://:pw@cache:6379/0") == f"redis://{REDACTED}@cache:6379/0"
    assert t('{"HF_TOKEN": "abc", "key": "flashinfer_jit"}') == f'{{"HF_TOKEN": "{REDACTED}", "key": "flashinfer_jit"}}'
    assert t("non-default args: {'api_key': ['s3cr3t']}") == f"non-default args: {{'api_key': ['{REDACTED}']}}"
    assert t("curl -H 'Authorization: Bearer abcdefgh12'") == f"curl -H 'Authorization: Bearer {REDACTED}'"
    assert t("HF_TOKEN: abc") == f"HF_TOKEN: {REDACTED}" and t("first token: abc") == "first token: abc"
    assert redact_argv(["vllm", "--api-key", "k1", "--max-num-batched-tokens", "8192", "--hf-token=t",
                        "--allow-credentials", "--port", "1", "--env", f"X={GH}", "--arg", "--api-key kk"]) == [
        "vllm", "--api-key", REDACTED, "--max-num-batched-tokens", "8192", f"--hf-token={REDACTED}",
        "--allow-credentials", "--port", "1", "--env", f"X={REDACTED}", "--arg", f"--api-key {REDACTED}"]
    assert redact_env({"MY_HF_TOKEN_2": GH, "HF_ENDPOINT": MIRROR, "TOKENIZERS_PARALLELISM": "false", "E": "",
                       "HF_TOKEN": ""}) == {"MY_HF_TOKEN_2": REDACTED, "HF_ENDPOINT": f"https://{REDACTED}@mirror.example",
                                            "TOKENIZERS_PARALLELISM": "false", "E": "", "HF_TOKEN": ""}


def test_redaction_is_idempotent_so_a_stored_plan_keeps_its_key() -> None:
    from tui.core.launch.history import plan_key
    from tui.core.models import Catalog
    from tui.core.plan.hostfacts import sim_facts
    from tui.core.plan.planner import PlanOptions, plan
    from tui.core.plan.spec import LaunchPlan
    from tui.core.topology import parse_topology

    p = plan(Catalog.load().model(MODEL), parse_topology("1p1d"), sim_facts("b200", 2),
             PlanOptions(extra_env=(("MY_HF_TOKEN_2", GH), ("VLLM_TEAM_MIRROR", MIRROR),
                                    ("TOKENIZERS_PARALLELISM", "false")),
                         extra_args=("--max-num-batched-tokens", "8192")))
    stored = p.redacted_dict()
    _no_secret(json.dumps(stored), "the redacted plan")
    assert redact_data(stored) == stored and redact_text(p.shell()) == p.shell()
    again = LaunchPlan.from_dict(stored)
    assert plan_key(again) == plan_key(p)
    for s in again.servers:
        assert s.env_dict()["TOKENIZERS_PARALLELISM"] == "false" and s.env_dict()["MY_HF_TOKEN_2"] == REDACTED
        assert "8192" in s.argv and MODEL_ID in s.argv


@pytest.mark.parametrize("arg", ["--api-key", "--api-key=x", "--hf-token", "--api_key"])
def test_a_secret_flag_never_reaches_a_servers_command_line(arg: str) -> None:
    """vLLM logs its non-default arguments at start-up: the planner refuses a key given as a flag (the CLI's
    --api-key reaches the servers as VLLM_API_KEY, a token as HF_TOKEN in the environment)."""
    from tui.core.errors import InputError
    from tui.core.models import Catalog
    from tui.core.plan.hostfacts import sim_facts
    from tui.core.plan.planner import PlanOptions, plan
    from tui.core.topology import parse_topology

    with pytest.raises(InputError, match="would put a secret on vLLM's command line"):
        plan(Catalog.load().model(MODEL), parse_topology("tp1"), sim_facts("b200", 2),
             PlanOptions(extra_args=(arg, SK) if "=" not in arg else (arg,)))


def test_secret_names_in_names_only_variables_of_environment_mappings() -> None:
    red = Redactor({"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwx", "HOME": "/root"})
    out = red.value({"env": {"HF_TOKEN": "anything", "A": "1", "HF_ENDPOINT": MIRROR, "X": GH},
                     "headers": {"Authorization": "Bearer xyz"}, "key": "flashinfer_jit", "api_key": True,
                     "note": "export OTHER_TOKEN=abc; see FOO=<redacted>", "message": "hf_abcdefghijklmnopqrstuvwx",
                     "servers": [{"env": {"DB_PASSWORD": "pw"}}], "argv": ["x", "--api-key", "s3cr3tvalue"]})
    text = json.dumps(out)
    assert "abcdefghijklmnop" not in text and "s3cr3tvalue" not in text and "xyz" not in text and GH not in text
    assert out["key"] == "flashinfer_jit" and out["api_key"] is True and out["env"]["A"] == "1"
    assert secret_names_in(out) == ["DB_PASSWORD", "HF_ENDPOINT", "HF_TOKEN", "X"]
    assert secret_names_in(out, "HF_") == ["HF_ENDPOINT", "HF_TOKEN"]
    assert secret_names_in(redact_env({"MY_HF_TOKEN_2": GH, "PATH": "/bin"})) == ["MY_HF_TOKEN_2"]
    assert secret_names_in({"note": f"MY_TOKEN={REDACTED}"}) == []  # a name in free text is not a variable


def test_restore_env_takes_the_values_back_or_names_what_is_missing() -> None:
    stored = redact_env({"MY_HF_TOKEN_2": GH, "HF_ENDPOINT": MIRROR, "TOKENIZERS_PARALLELISM": "false"})
    environ = {"MY_HF_TOKEN_2": GH, "HF_ENDPOINT": MIRROR}
    assert restore_env(stored, environ) == {"MY_HF_TOKEN_2": GH, "HF_ENDPOINT": MIRROR,
                                            "TOKENIZERS_PARALLELISM": "false"}
    with pytest.raises(InputError) as err:
        restore_env(stored, {"MY_HF_TOKEN_2": GH}, what="layout x's plan")
    assert err.value.one_line() == ("layout x's plan needs HF_ENDPOINT: set it in the environment (secrets are never "
                                    "stored)")


# --- any text: a property --------------------------------------------------------------------------------------

_ALNUM = string.ascii_letters + string.digits
_B64URL = _ALNUM + "_-"


def _random(alphabet: str, lo: int, hi: int) -> st.SearchStrategy[str]:
    """Random characters as a real token has them (letters of both cases and a digit among them)."""
    return st.text(alphabet, min_size=lo, max_size=hi).map(lambda s: s[: len(s) // 2] + "aZ7" + s[len(s) // 2:])


_NOTHING = st.just("")


def _token(prefix: st.SearchStrategy[str], body: st.SearchStrategy[str], suffix: st.SearchStrategy[str] = _NOTHING
           ) -> st.SearchStrategy[tuple[str, str]]:
    """(the token, its random part): neither may be left in what is redacted."""
    return st.tuples(prefix, body, suffix).map(lambda t: ("".join(t), t[1]))


_SHAPES = st.one_of(
    _token(st.just("hf_"), _random(_ALNUM, 31, 40)),
    _token(st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]), _random(_ALNUM, 33, 40)),
    _token(st.just("github_pat_"), _random(_ALNUM + "_", 79, 85)),
    _token(st.sampled_from(["sk-", "sk-proj-", "sk-ant-api03-"]), _random(_B64URL, 20, 60)),
    _token(_random(_B64URL, 4, 40).map(lambda h: f"eyJ{h}.eyJ"), _random(_B64URL, 8, 80),
           st.text(_B64URL, max_size=50).map(lambda sig: "." + sig)),
    _token(st.sampled_from(["AKIA", "ASIA"]), st.text(string.ascii_uppercase + string.digits, min_size=16,
                                                      max_size=16)),
    _token(st.sampled_from(["xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-"]), _random(_ALNUM + "-", 10, 50)),
)


@given(token=_SHAPES, before=st.text(max_size=40), after=st.text(max_size=40))
def test_no_token_shape_survives_any_surrounding_text(token: tuple[str, str], before: str, after: str) -> None:
    secret, body = token
    out = Redactor({}).text(before + secret + after)
    assert secret not in out
    assert body not in out or body in before or body in after  # what is left of the text around it is its own


@given(user=st.text(_ALNUM, min_size=1, max_size=12), password=st.text(_ALNUM + "%!$*", min_size=6, max_size=30),
       scheme=st.sampled_from(["https", "http", "postgresql", "redis", "s3"]),
       before=st.text(max_size=40), after=st.text(max_size=40))
def test_no_url_credentials_survive_any_surrounding_text(user: str, password: str, scheme: str, before: str,
                                                         after: str) -> None:
    out = Redactor({}).text(f"{before}{scheme}://{user}:{password}@mirror.example{after}")
    assert f"{user}:{password}@" not in out
    assert password not in out or any(password in t for t in (before, after, f"{scheme}://{REDACTED}@mirror.example"))


# --- through the CLI and the stores ------------------------------------------------------------------------------


def test_plan_prints_no_secret_and_keeps_the_knobs() -> None:
    from tests.hardening.cli import run_cli

    base = ["plan", "--sim", "--model", MODEL, "--topology", "1p1d", *SECRET_ENV, *PLAIN_ENV,
            "--api-key", SK, "--no-preflight"]
    res = run_cli(base)
    assert res.code == 0, res.err
    _no_secret(res.out + res.err, "plan's output")
    assert "MY_HF_TOKEN_2='<redacted>'" in res.out
    assert "VLLM_TEAM_MIRROR='https://<redacted>@mirror.example'" in res.out
    assert "TOKENIZERS_PARALLELISM=false" in res.out and "--max-num-batched-tokens 8192" in res.out
    assert MODEL_ID in res.out
    js = run_cli([*base, "--json"])
    assert js.code == 0, js.err
    _no_secret(js.out, "plan --json")
    servers = json.loads(js.out)["plan"]["servers"]
    assert all(s["env"]["MY_HF_TOKEN_2"] == REDACTED and s["env"]["TOKENIZERS_PARALLELISM"] == "false"
               for s in servers)


@pytest.mark.timeout(180)
def test_up_records_and_stores_no_secret_while_the_server_gets_the_real_ones(tmp_path: Path,
                                                                            isolated_dirs: Path) -> None:
    """``up --sim`` with planted secrets: stdout and stderr (its log lines too), the recording, the state file and
    what a console following the layout sees hold none of them; the server's environment and argv hold all."""
    from tui.core.events import EventBus
    from tui.core.follow import LayoutFollower
    from tui.core.launch.events import LogLine, ServerLaunched
    from tui.core.launch.state import StateStore
    from tui.core.record import Recording

    rec_file = tmp_path / "up.dtrec"
    up = cli("up", "--sim", "--sim-startup", "0.3", "--model", MODEL, "--topology", "tp1", *layout_port_args(),
             *SECRET_ENV, *PLAIN_ENV, "--api-key", SK, "--logs", "--record-to", str(rec_file),
             timeout=150)
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        _no_secret(up.stdout + up.stderr, "up's output")
        assert "MY_HF_TOKEN_2='<redacted>'" in up.stdout and "TOKENIZERS_PARALLELISM=false" in up.stdout
        # the simulated vLLM logs its arguments as vLLM does; the key is not among them (it is in the environment)
        assert "'max_num_batched_tokens': 8192" in up.stderr and "api_key" not in up.stderr

        state = (isolated_dirs / "state" / "layouts.json").read_text(encoding="utf-8")
        _no_secret(state, "the state file")
        (layout,) = StateStore().read().values()
        (server,) = layout.plan["servers"]
        assert server["env"]["MY_HF_TOKEN_2"] == REDACTED and server["env"]["TOKENIZERS_PARALLELISM"] == "false"
        assert server["env"]["VLLM_TEAM_MIRROR"] == f"https://{REDACTED}@mirror.example"
        assert secret_names_in(layout.plan) == ["MY_HF_TOKEN_2", "VLLM_TEAM_MIRROR"]

        # the live process got the real values
        procs = layout_processes(layout.id)
        assert procs
        assert any(p.environ().get("MY_HF_TOKEN_2") == GH and p.environ().get("VLLM_TEAM_MIRROR") == MIRROR
                   and p.environ().get("VLLM_API_KEY") == SK and SK not in p.cmdline() for p in procs)

        with Recording.open(rec_file) as rec:
            events = list(rec.events())
            _no_secret(rec.header.command, "the recording's header")
        _no_secret(json.dumps([e.to_dict() for e in events]), "the recording")
        _no_secret(rec_file.read_bytes().decode("latin-1"), "the recording's bytes")
        assert any(isinstance(e, LogLine) and "'max_num_batched_tokens': 8192" in e.text for e in events)
        launched = [e for e in events if isinstance(e, ServerLaunched)]
        assert launched and "MY_HF_TOKEN_2='<redacted>'" in launched[0].command

        # a console that follows the layout (reads its logs from the first line) sees the lines redacted
        bus = EventBus()
        seen: list[Any] = []
        bus.subscribe(seen.append)
        LayoutFollower(bus, StateStore()).poll_once()
        lines = [e.text for e in seen if isinstance(e, LogLine)]
        assert any("'max_num_batched_tokens': 8192" in t for t in lines), lines[:20]
        _no_secret(json.dumps([e.to_dict() for e in seen]), "the follower's events")
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr


def test_a_start_failure_keeps_no_secret_in_its_events_or_the_state_file(tmp_path: Path,
                                                                        isolated_dirs: Path) -> None:
    """A server that prints secrets and dies: its log lines, the exit's excerpt and the stored layout are redacted
    (the plan's own secret values too, which no shape catches)."""
    import asyncio

    from tests.helpers import ScriptHost, free_port
    from tui.core.events import EventBus
    from tui.core.host.base import Command
    from tui.core.launch.events import LogLine, ServerExited
    from tui.core.launch.lifecycle import StartFailure, UpOptions, bring_up
    from tui.core.launch.state import StateStore
    from tui.core.models import Catalog
    from tui.core.plan.planner import PlanOptions, plan
    from tui.core.topology import parse_topology

    host_key = "hostgivenkey-0123"  # what a host hands a server as VLLM_API_KEY, never part of the plan
    script = (f"print('connecting to {MIRROR} with {GH}'); print('password is {PASSWORD}'); "
              f"print('AWS AKIAIOSFODNN7EXAMPLE'); print('serving with {host_key}'); import sys; sys.exit(3)")

    class LeakyHost(ScriptHost):
        def server_command(self, spec: Any, plan: Any, profile_json: Any = None) -> Command:
            return Command(argv=[sys.executable, "-c", script], env={"PATH": "/usr/bin:/bin",
                                                                       "VLLM_API_KEY": host_key})

    profile = Catalog.load().model("dummy-qwen3-8b")
    p = plan(profile, parse_topology("tp1"), LeakyHost().facts,
             PlanOptions(port=free_port(), extra_env=(("DB_PASSWORD", PASSWORD), ("MY_HF_TOKEN_2", GH))))
    bus = EventBus()
    seen: list[Any] = []
    bus.subscribe(seen.append)
    with pytest.raises(StartFailure):
        asyncio.run(bring_up(profile, p, LeakyHost(), bus, options=UpOptions(
            ready_timeout_s=20, stall_timeout_s=20, probe_interval_s=0.1, skip_preflight=True, watch_interval_s=0)))
    lines = [e.text for e in seen if isinstance(e, LogLine)]
    (exited,) = [e for e in seen if isinstance(e, ServerExited)]
    assert f"password is {REDACTED}" in lines and f"connecting to https://{REDACTED}@mirror.example with " \
        f"{REDACTED}" in lines and f"serving with {REDACTED}" in lines
    assert exited.last_lines == tuple(lines)
    _no_secret(json.dumps([e.to_dict() for e in seen]), "the launch's events")
    assert "AKIAIOSFODNN7EXAMPLE" not in json.dumps([e.to_dict() for e in seen])
    store = StateStore()
    store.update(next(iter(store.read())), diagnoses=[{"kind": "diagnosis", "line": f"token {GH} rejected"}])
    _no_secret((isolated_dirs / "state" / "layouts.json").read_text(encoding="utf-8"), "the state file")


def test_a_stored_run_holds_no_secret(tmp_path: Path) -> None:
    from tui.core.bench.metrics import RequestRecord
    from tui.core.bench.store import RunMeta, RunWriter, load_run

    d = tmp_path / "run"
    meta = RunMeta(campaign="c", name="r", endpoint=f"https://alice:{PASSWORD}@gpu-box:8000", model=MODEL_ID,
                   flags=["--api-key", SK, "--max-num-batched-tokens", "8192"], message=f"server said {GH}")
    w = RunWriter(d, meta, workload={"name": "tiny", "input_len": 32},
                  plan={"servers": [{"env": {"MY_HF_TOKEN_2": GH, "TOKENIZERS_PARALLELISM": "false"},
                                     "argv": ["vllm", "serve", MODEL_ID, "--hf-token", "t" * 12]}]})
    w.add(RequestRecord(index=0, start=0.0, success=False, error=f"401: bad key {SK}"))
    w.add(RequestRecord(index=1, start=0.1, success=True, ttft=0.01, latency=0.1, itl=[0.01], prompt_tokens=32,
                        output_tokens=8))
    journal = (d / "requests.jsonl").read_text(encoding="utf-8")
    _no_secret(journal, "the journal")
    assert '"err":""' in journal and "401: bad key <redacted>" in journal
    w.finish("complete", {"endpoint": f"https://alice:{PASSWORD}@gpu-box:8000", "completed": 1,
                          "model_id": MODEL_ID})
    for f in d.rglob("*"):
        if f.is_file():
            _no_secret(f.read_bytes().decode("latin-1"), f.name)
            assert "t" * 12 not in f.read_text(encoding="utf-8", errors="replace"), f.name
    run = load_run(d)
    assert run.meta.endpoint == f"https://{REDACTED}@gpu-box:8000" and run.meta.model == MODEL_ID
    assert run.meta.flags == ["--api-key", REDACTED, "--max-num-batched-tokens", "8192"]
    assert [r.error for r in run.records()] == ["401: bad key <redacted>", ""]
    plan_json = json.loads((d / "plan.json").read_text(encoding="utf-8"))
    assert plan_json["servers"][0]["env"] == {"MY_HF_TOKEN_2": REDACTED, "TOKENIZERS_PARALLELISM": "false"}


def test_a_log_line_with_tokens_is_recorded_redacted(tmp_path: Path) -> None:
    from tui.core.events import EventBus
    from tui.core.launch.events import LogLine
    from tui.core.record import Recorder, Recording, new_header

    path = tmp_path / "s.dtrec"
    rec = Recorder(path, new_header(f"up --env MY_HF_TOKEN_2={GH}", recorded=("logs",), host={}, simulated=True),
                   redactor=Redactor({})).start()
    bus = EventBus()
    rec.attach(bus)
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    bus.publish(LogLine(server="s", lineno=1, text=f"auth with {GH} and {SK} then {jwt}, AKIAIOSFODNN7EXAMPLE"))
    bus.publish(LogLine(server="s", lineno=2, text="TOKENIZERS_PARALLELISM=false --max-num-batched-tokens 8192"))
    rec.close()
    with Recording.open(path) as r:
        texts = [e.text for e in r.events() if isinstance(e, LogLine)]
        assert GH not in r.header.command
    assert texts == [f"auth with {REDACTED} and {REDACTED} then {REDACTED}, {REDACTED}",
                     "TOKENIZERS_PARALLELISM=false --max-num-batched-tokens 8192"]


def test_a_console_job_shows_its_command_redacted(tmp_path: Path) -> None:
    from tui.console.jobs import Job

    job = Job(name="up", argv=["up", "--model", MODEL, "--env", f"MY_HF_TOKEN_2={GH}", "--env",
                               f"VLLM_TEAM_MIRROR={MIRROR}", "--arg", f"--api-key {SK}"], log=tmp_path / "j.log")
    shown = job.shell()
    _no_secret(shown, "the job's command")
    assert shown.startswith(f"disagg-tui up --model {MODEL} --env 'MY_HF_TOKEN_2=<redacted>'")
    assert job.argv[4] == f"MY_HF_TOKEN_2={GH}"  # what runs keeps the value


async def test_a_vllm_bench_run_against_an_endpoint_with_credentials_keeps_none(tmp_path: Path) -> None:
    from tests.bench.test_bench_vllmbench import _fake, _opts
    from tui.core.bench.runner import BenchTarget
    from tui.core.bench.vllmbench import run_vllm_bench
    from tui.sim.stubserver import StubConfig, StubServer

    srv = StubServer(StubConfig(mode="fast"))
    port = await srv.start("127.0.0.1", 0)
    try:
        target = BenchTarget(endpoint=f"http://alice:{PASSWORD}@127.0.0.1:{port}", topology="tp1", campaign="vb",
                             runs_root=tmp_path)
        run = await run_vllm_bench(_fake(tmp_path), _opts(), target, "/tok")
    finally:
        srv.close()
    assert run.meta.status == "complete"
    assert (run.path / "command.txt").read_text(encoding="utf-8").split()[2:4] == ["bench", "serve"]
    for f in run.path.rglob("*"):
        if f.is_file() and f.suffix != ".parquet":
            assert PASSWORD not in f.read_text(encoding="utf-8", errors="replace"), f.name
    assert f"http://{REDACTED}@127.0.0.1:{port}" in (run.path / "command.txt").read_text(encoding="utf-8")


def test_an_events_file_header_keeps_no_secret_flag_value(tmp_path: Path) -> None:
    from tui.core.bench.eventsfile import EventsWriter

    path = tmp_path / "e.jsonl"
    EventsWriter(path, argv=["bench", "--api-key", "s3cr3tvalue", "--workload", "decode-heavy"]).close()
    text = path.read_text(encoding="utf-8")
    assert "s3cr3tvalue" not in text and '"--workload","decode-heavy"' in text.replace(", ", ",")
