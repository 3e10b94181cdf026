"""The CLI's parsers (issue 22, findings 4, 5, 8): a flag is taken only as written, never as a prefix of a longer
one; ``run --record`` is accepted; ``predict`` names its seed table as the README does; a start imports only the
command's module, and ``--version`` none of the console, the simulator, rich, httpx or polars."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tui.cli.main import COMMANDS, build_parser, command_of, main

ROOT = Path(__file__).resolve().parent.parent


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_parser_takes_flags_only_as_written() -> None:
    parsers = list(_parsers(build_parser()))
    assert len(parsers) > len(COMMANDS)  # the commands and their own sub-commands (playbook add, profile new...)
    assert [p.prog for p in parsers if p.allow_abbrev] == []


@pytest.mark.parametrize(("argv", "said"), [
    (["plan", "--mod", "m", "--topology", "tp1"], "required: --model"),
    (["up", "--model", "m", "--topology", "tp1", "--apply", "auto"], "unrecognized arguments: --apply auto"),
    (["run", "--model", "m", "--topology", "tp1", "-w", "w", "--record-t", "x"], "unrecognized arguments: --record-t"),
    (["status", "--sim-g", "h200"], "unrecognized arguments: --sim-g h200"),
    (["--sim-g", "h200", "status"], "invalid choice: 'h200'"),
])
def test_a_prefix_of_a_flag_is_refused(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser(command_of(argv)).parse_args(argv)
    assert done.value.code == 2
    assert said in capsys.readouterr().err


def test_run_takes_record_its_default() -> None:
    base = ["run", "--model", "m", "--topology", "tp1", "-w", "decode-heavy"]
    parse = build_parser("run").parse_args
    assert parse([*base, "--record"]).record is True
    assert parse([*base, "--record", "--record-to", "x.dtrec"]).record_to == "x.dtrec"
    assert parse(base).record is True
    assert parse([*base, "--no-record"]).record is False
    assert build_parser("up").parse_args(["up", "--model", "m", "--topology", "tp1"]).record is False


def test_the_command_table_is_what_the_modules_register() -> None:
    for command, module in COMMANDS.items():
        args = build_parser(command).parse_args([command, *_minimal_args(command)])
        assert args.command == command
        assert args.handler.__module__ == module, command
    full = build_parser()
    (sub,) = [a for a in full._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) == set(COMMANDS)


def _minimal_args(command: str) -> list[str]:
    return {"diagnose": ["x.log"], "playbook": ["list"], "profile": ["list"], "replay": ["x.dtrec"],
            "import": ["x.yaml"], "export": ["--layout", "x", "-o", "x.yaml"], "proxy": ["--prefill", "a:1",
            "--decode", "b:2"], "run": ["--model", "m", "--topology", "tp1", "-w", "w"],
            "plan": ["--model", "m", "--topology", "tp1"], "hosts": ["list"]}.get(command, [])


@pytest.mark.parametrize(("argv", "command"), [
    (["--version"], None), ([], None), (["plan", "--sim"], "plan"), (["--sim", "--sim-gpu", "h200", "up"], "up"),
    (["--api-key", "plan", "status"], "status"), (["--vllm", "/x/vllm", "doctor", "--json"], "doctor"),
])
def test_the_command_is_found_past_the_global_options_and_their_values(argv: list[str], command: str | None) -> None:
    if argv == ["--version"]:
        with pytest.raises(SystemExit):
            command_of(argv)
        return
    assert command_of(argv) == command


def test_version_imports_no_console_simulator_rich_httpx_or_polars() -> None:
    code = ("import sys, contextlib, io\n"
            "from tui.cli.main import main\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['--version'])\n"
            "print(sorted(m for m, mod in sys.modules.items() if mod is not None and (m.split('.')[0] in "
            "('textual', 'rich', 'httpx', 'polars') or m.startswith(('tui.sim', 'tui.console', 'tui.cli.cmd_')))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_a_command_imports_its_own_module_only() -> None:
    code = ("import sys, contextlib, io\n"
            "from tui.cli.main import main\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['plan', '--help'])\n"
            "print(sorted(m for m in sys.modules if m.startswith(('tui.cli.cmd_', 'tui.console')) "
            "or m.split('.')[0] in ('rich', 'polars')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          check=True)
    assert done.stdout.strip() == "['tui.cli.cmd_plan']", done.stdout


def test_predict_names_its_seed_table_as_the_readme_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--sim", "--model", "qwen3.6-27b-nvfp4", "--gpu", "b200", "--no-nvcc",
                 "--isl", "512", "--osl", "2048"]) == 0
    out = capsys.readouterr().out
    assert "seed workloads (the seed's 2× B200 table):" in out
    assert "DESIGN.md" not in out
    readme = (ROOT / "README.md").read_text()
    assert "the seed's 2× B200 table" in readme


def test_each_command_module_registers_with_the_global_options() -> None:
    for module in set(COMMANDS.values()):
        assert hasattr(importlib.import_module(module), "register")
