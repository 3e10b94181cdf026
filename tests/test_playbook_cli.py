"""``disagg-tui diagnose``, ``playbook list|show|add`` and the line generaliser behind ``add``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, H200
from tui.cli.main import main
from tui.core.errors import InputError
from tui.core.playbook import load_playbook, operator_playbook_path
from tui.core.playbook.generalize import generalize, message_of, pattern_for

FAILURES = H200 / "failures"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- diagnose ----------------------------------------------------------------------------------------------------


def test_diagnose_prints_entry_line_explanation_and_fix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "diagnose", str(FAILURES / "fail_flashinfer_cudahome_empty.log"))
    assert code == 0, err
    assert "1 known problem" in out
    assert "ERROR flashinfer-no-nvcc: FlashInfer must JIT-compile kernels and finds no nvcc" in out
    assert "line  106: " in out and "RuntimeError: Ninja build failed. Ninja output:" in out
    assert "why   FlashInfer compiles its CUDA kernels" in out
    assert "fix   set VLLM_USE_FLASHINFER_SAMPLER=0; add --attention-backend TRITON_ATTN" in out
    assert "--apply-fix flashinfer-no-nvcc (or --apply-fix auto)" in out


def test_diagnose_healthy_and_several_files(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "diagnose", str(H200 / "startup/main.log"), str(FAILURES / "fail_unknown_flag.log"),
                        str(FAILURES / "fail_engine_ready_timeout.log"))
    assert code == 0
    heads = [ln for ln in out.splitlines() if ln.startswith("== ")]
    assert len(heads) == 3
    assert "main.log: no known failure (419 lines; became ready)" in heads[0]
    assert "fail_unknown_flag.log: 1 known problem" in heads[1]
    assert "fail_engine_ready_timeout.log: no known failure" in heads[2]
    assert "note triton-jit-during-inference" in out  # shown, but not a failure


def test_diagnose_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "diagnose", "--json", str(FAILURES / "fail_flashinfer_no_nvcc.log"),
                        str(H200 / "startup/main.log"))
    assert code == 0
    files = json.loads(out)["files"]
    assert [f["known_failure"] for f in files] == [True, False]
    [stall] = [d for d in files[0]["diagnoses"] if d["severity"] != "info"]  # (and the FlashInfer warm-up note)
    assert stall["kind"] == "diagnosis" and stall["entry_id"] == "flashinfer-jit-stall" and stall["rule"] == "end"
    assert stall["line_no"] == 38 and stall["auto"] is True and files[0]["phase"] == "graphs_done"
    assert [d["severity"] for d in files[1]["diagnoses"]] == ["info"]


def test_diagnose_with_context_from_a_profile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "dp.log"
    log.write_text("(EngineCore_DP0 pid=9) ERROR 01-01 00:00:00 [core.py:1231] NotImplementedError: No FP8 MoE backend "
                   "supports the deployment configuration.\n")
    _, out, _ = _run(capsys, "diagnose", str(log), "--model", "gemma-4-26b-a4b-fp8", "--topology", "tp2")
    assert "moe-backend-unsupported" in out
    _, out, _ = _run(capsys, "diagnose", str(log), "--model", "gemma-4-26b-a4b-fp8", "--topology", "dp2")
    assert "moe-dp-start-failure" in out and "Serve it with tensor parallelism" in out


def test_diagnose_unreadable_input_exits_2_naming_the_file(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    code, out, err = _run(capsys, "diagnose", str(FAILURES / "fail_unknown_flag.log"), str(missing))
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"disagg-tui: error: {missing}: no such file"]
    code, _, err = _run(capsys, "diagnose", str(tmp_path))
    assert code == 2 and "is a directory" in err


def test_broken_operator_playbook_exits_2_in_one_line(isolated_dirs: Path) -> None:
    target = operator_playbook_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text((FIXTURES / "bad_playbooks" / "bad_regex.yaml").read_text())
    for argv in (["playbook", "list"], ["diagnose", str(FAILURES / "fail_unknown_flag.log")]):
        out = subprocess.run([sys.executable, "-m", "tui", *argv], capture_output=True, text=True, check=False,
                             timeout=60)
        assert out.returncode == 2, out.stderr
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, out.stderr
        assert f"{target}:13: field 'entries[2].match.lines[2]': bad regular expression" in lines[0]


# --- list / show -------------------------------------------------------------------------------------------------


def test_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "playbook", "list")
    assert code == 0
    rows = {ln.split()[0]: ln for ln in out.splitlines()[1:-1]}
    assert rows["engine-ready-timeout"].split()[1:4] == ["error", "auto", "shipped"]
    assert rows["port-in-use"].split()[2] == "advice"
    assert rows["moe-dp-start-failure"].split()[2] == "yes"
    code, out, _ = _run(capsys, "playbook", "list", "--json")
    data = json.loads(out)
    assert len(data["entries"]) == len(load_playbook()) and data["sources"]
    code, out, _ = _run(capsys, "playbook", "show", "ssm-conv-layout-nixl")
    assert code == 0 and out.startswith("# ") and "playbook.yaml:" in out.splitlines()[0]
    assert "VLLM_SSM_CONV_STATE_LAYOUT: DS" in out and "Mamba conv transfer requires DS conv state layout" in out
    code, out, _ = _run(capsys, "playbook", "show", "ssm-conv-layout-nixl", "--json")
    assert json.loads(out)["fix"] == {"set_env": {"VLLM_SSM_CONV_STATE_LAYOUT": "DS"}}
    code, _, err = _run(capsys, "playbook", "show", "no-such-entry")
    assert code == 2 and "no playbook entry 'no-such-entry'" in err


# --- add -----------------------------------------------------------------------------------------------------------


def test_add_from_a_log_line_then_it_matches_next_time(capsys: pytest.CaptureFixture[str], isolated_dirs: Path,
                                                       tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-11-29T07:31:00.000Z +  1.000s] (APIServer pid=10) INFO 11-29 07:31:00 [api_utils.py:273] start\n"
        "[2026-11-29T07:31:05.123Z +  6.123s] (EngineCore pid=4471) ERROR 11-29 07:31:05 [loader.py:88] "
        "OSError: checkpoint shard /models/llama/model-00003-of-00008.safetensors is truncated at byte 52428800\n")
    code, out, err = _run(capsys, "playbook", "add", "--from", f"{log}:2", "--title", "Truncated checkpoint shard",
                          "--explain", "A weight file was only partly downloaded.", "--set-env", "HF_HUB_OFFLINE=0",
                          "--not-fixable", "Delete the shard and download it again.")
    assert code == 0, err
    target = operator_playbook_path()
    assert out.splitlines()[0] == f"added truncated-checkpoint-shard to {target}"
    text = target.read_text()
    assert text.startswith("# Your additions to disagg-tui's troubleshooting playbook")
    assert f"{log}:2" in text  # the line it came from, as a reference
    book = load_playbook()
    entry = book.entry("truncated-checkpoint-shard")
    assert entry.explain == "A weight file was only partly downloaded." and entry.fix is not None
    # the saved entry recognises the original line, and the same failure with other numbers, paths, pids, prefixes
    original = log.read_text().splitlines()[1]
    other = ("2027-01-01T00:00:00Z stderr F (EngineCore_DP1 pid=99) ERROR 01-01 00:00:00 [loader.py:91] OSError: "
             "checkpoint shard /data/other/model-00001-of-00002.safetensors is truncated at byte 7")
    for line in (original, other):
        [d] = book.matcher().feed(line)
        assert d.entry_id == "truncated-checkpoint-shard", line
    assert book.matcher().feed("OSError: checkpoint shard x is complete") == []
    # a second entry appends to the same file, keeping the first and the header
    code, out, err = _run(capsys, "playbook", "add", "--text", "CUDA error: an illegal memory access was encountered",
                          "--title", "Illegal memory access", "--id", "illegal-access", "--severity", "error")
    assert code == 0, err
    again = target.read_text()
    assert again.startswith(text) and "illegal-access" in again
    assert [e.id for e in load_playbook().entries if e.source == str(target)] == ["truncated-checkpoint-shard",
                                                                                  "illegal-access"]
    # the same id again is refused
    code, _, err = _run(capsys, "playbook", "add", "--text", "CUDA error: an illegal memory access was encountered",
                        "--title", "x", "--id", "illegal-access")
    assert code == 2 and "already in this file" in err


def test_add_takes_a_line_from_a_broader_entry(capsys: pytest.CaptureFixture[str], isolated_dirs: Path) -> None:
    line = ("(EngineCore pid=3) ERROR 01-01 00:00:00 [core.py:1231] torch.OutOfMemoryError: CUDA out of memory. "
            "Tried to allocate 96.00 GiB. GPU 0 has a total capacity of 79.19 GiB")
    assert load_playbook().claim(line).id == "cuda-oom"  # type: ignore[union-attr]
    code, out, err = _run(capsys, "playbook", "add", "--text", line, "--title", "Allocation larger than the GPU",
                          "--add-arg=--max-num-batched-tokens 4096")
    assert code == 0, err
    assert "it takes this line from cuda-oom (priority 41 > 40)" in out
    [d] = load_playbook().matcher().feed(line.replace("96.00", "120.50"))
    assert d.entry_id == "allocation-larger-than-the-gpu"
    assert d.changes == ("add --max-num-batched-tokens 4096",)


def test_add_refuses_bad_input(capsys: pytest.CaptureFixture[str], isolated_dirs: Path, tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("one line\n")
    cases = [
        (["--from", f"{log}:5", "--title", "t"], "has 1 lines; there is no line 5"),
        (["--from", "no-colon", "--title", "t"], "expected LOG:LINE"),
        (["--text", "12:34:56 1234 0x7f", "--title", "t"], "too little fixed text"),
        (["--text", "Something specific failed", "--title", "t", "--set-env", "NOEQUALS"], "expected K=V"),
        (["--text", "Something specific failed", "--title", "t", "--set-env", "BAD NAME=1"],
         "bad environment variable name"),
        (["--text", "Something specific failed", "--title", "t", "--auto"], "auto: true needs a fix"),
        (["--text", "Something specific failed", "--title", "!!!"], "the title gives no usable id"),
    ]
    for args, text in cases:
        code, _, err = _run(capsys, "playbook", "add", *args)
        assert code == 2, args
        assert text in err, (args, err)
        assert len(err.strip().splitlines()) == 1
    assert not operator_playbook_path().exists()


def test_add_refuses_to_rewrite_a_file_it_cannot_append_to(capsys: pytest.CaptureFixture[str],
                                                          isolated_dirs: Path) -> None:
    target = operator_playbook_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    original = ("entries:\n  - id: mine\n    title: Mine\n    match: {lines: ['mine failed']}\n    explain: x\n"
                "version: 1\n")
    target.write_text(original)
    code, _, err = _run(capsys, "playbook", "add", "--text", "Something specific failed", "--title", "t")
    assert code == 2 and "add this item to entries by hand: - {id: t," in err
    assert target.read_text() == original


# --- the generaliser ---------------------------------------------------------------------------------------------

GENERALISE = [
    "[2026-11-29T07:31:22.927Z +  19.409s] main.py: error: unrecognized arguments: --no-such-flag 1",
    "[2026-11-29T07:47:39.825Z +  19.643s] (APIServer pid=755) OSError: [Errno 98] Address already in use",
    "(EngineCore pid=973) ERROR 11-29 07:49:29 [core.py:1231] /bin/sh: 1: /tmp/no-cuda/bin/nvcc: not found",
    "(EngineCore pid=880) INFO 11-29 07:28:18 [gpu_worker.py:508] Available KV cache memory: -9.48 GiB",
    "(Worker_TP1 pid=1234) ERROR 11-29 07:28:18 [utils.py:415] ValueError: Free memory on device cuda:0 "
    "(18.15/139.8 GiB) on startup is less than desired GPU memory utilization (0.85, 118.83 GiB).",
    "zmq.error.ZMQError: Address already in use (addr='tcp://localhost:5600')",
    "Feb  3 04:05:06 node7 vllm[2210]: request 4bd9190f9c7016b69e21 failed after 743,120 tokens",
    "(APIServer pid=3) INFO:     127.0.0.1:49956 - \"POST /v1/completions HTTP/1.1\" 500 Internal Server Error",
]


def _other_values(line: str) -> str:
    """The same message with every number changed (and so the pids, ports, sizes, timestamps)."""
    return re.sub(r"\d+", lambda m: str(int(m.group()) * 7 + 3), line)


@pytest.mark.parametrize("line", GENERALISE, ids=range(len(GENERALISE)))
def test_generalised_pattern_matches_the_line_and_other_values(line: str) -> None:
    pattern = pattern_for(line)
    assert re.search(pattern, line)
    assert re.search(pattern, _other_values(line)), pattern
    assert re.search(pattern, "2030-01-01T00:00:00Z collector: " + _other_values(line))


def test_generaliser_strips_prefixes_and_keeps_the_words() -> None:
    assert message_of(GENERALISE[0]) == "error: unrecognized arguments: --no-such-flag 1"
    assert message_of(GENERALISE[1]) == "OSError: [Errno 98] Address already in use"
    assert message_of(GENERALISE[7]).startswith("127.0.0.1:49956 - ")
    nvcc = generalize(GENERALISE[2])
    assert nvcc.endswith("nvcc: not found") and "no-cuda" not in nvcc
    assert not re.search(nvcc, "/bin/sh: 1: /tmp/no-cuda/bin/ptxas: not found")  # the file name is kept
    hexed = generalize(GENERALISE[6])
    assert "4bd9190f" not in hexed and re.search(hexed, "request 0123abcd4567ef89 failed after 5 tokens")
    with pytest.raises(InputError, match="the line is empty"):
        pattern_for("   ")
