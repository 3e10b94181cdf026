"""The bad-input corpus: every command's flags, model profiles, workloads, prompts files, the playbook and operator
entries, ``results import`` files, ``diagnose`` inputs and state files, each run through the CLI in this process.

Each case asserts the exit code (2 bad input, 1 a failure), one error line (warnings aside) that names the file,
flag or field (and line where there is one), and no traceback. ``{T}`` in a case is the case's own folder of
files, ``{U}`` the URL of a well-behaved stub server (for the inputs checked only once a server answers)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.hardening.badserver import MODEL as STUB_MODEL
from tests.hardening.badserver import BadServer
from tests.hardening.cli import CliResult, no_traceback, run_cli
from tests.helpers import expectation

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
M = "qwen3.6-27b-nvfp4"
PLAN = ("plan", "--model", M, "--topology", "tp1")
DEAD = "http://127.0.0.1:9"  # discard port: nothing listens there on a test machine
BIN = bytes(range(256)) * 64


@dataclass(frozen=True)
class Case:
    area: str
    id: str
    argv: tuple[str, ...]
    code: int
    names: tuple[str, ...]  # the error line contains each ({T} is the case's folder)
    files: dict[str, bytes] = field(default_factory=dict)  # written under {T} (paths from ``state:``/``config:``
    # go to the state or config directory instead)


def c(area: str, id: str, argv: tuple[str, ...] | list[str], names: tuple[str, ...] | str, *, code: int = 2,
      files: dict[str, bytes] | None = None) -> Case:
    return Case(area, id, tuple(argv), code, (names,) if isinstance(names, str) else names, files or {})


WORKLOADS = {
    "negative": (b"name: w\ninput_len: -5\noutput_len: 4\n", ("w.yaml:2", "input_len")),
    "wrong-type": (b"name: w\ninput_len: lots\n", ("w.yaml:2", "input_len", "expected an integer")),
    "unknown-key": (b"name: w\ninput_len: 5\noutput_len: 5\nbogus: 1\n", ("w.yaml:4", "bogus", "unknown field")),
    "empty": (b"", ("w.yaml", "expected a mapping")),
    "syntax": (b"name: [\n", ("w.yaml:2", "field 'name'", "YAML syntax")),
    "binary": (BIN, ("w.yaml", "cannot read")),
    "huge-number": (b"name: w\ninput_len: 99999999999999999999\noutput_len: 4\n", ("input_len",)),
    "unicode-name": ("name: wörk🙂\ninput_len: 0\noutput_len: 4\n".encode(), ("w.yaml:2", "input_len")),
    # figures no benchmark can run: refused where they are written (issue 21), not by the runner or never
    "input-len-10e12": (b"name: w\ninput_len: 1000000000000\noutput_len: 4\n", ("w.yaml:2", "input_len")),
    "seed-past-numpy": (b"name: w\ninput_len: 4\noutput_len: 4\nseed: 99999999999\n", ("w.yaml:4", "seed")),
    "rate-400-digits": (b"name: w\ninput_len: 4\noutput_len: 4\nrequest_rate: '" + b"9" * 400 + b"'\n",
                        ("w.yaml:4", "request_rate")),
}
PROMPTS = {
    "not-json": (b'{"prompt": "a"}\nnot json\n', ("p.jsonl:2", "not JSON")),
    "bad-prompt": (b'{"prompt": 5}\n', ("p.jsonl:1", "prompt must be")),
    "empty": (b"", ("p.jsonl", "no prompts")),
    "binary": (b'{"prompt": "a"}\n\xff\xfe\n', ("p.jsonl:2", "not UTF-8")),
    "negative-output": (b'{"prompt": "hi", "output_len": -3}\n', ("p.jsonl:1", "output_len")),
    "bad-token-id": (b'{"prompt": [1, -2]}\n', ("p.jsonl:1", "token ids")),
    # strict JSON per line, bounded figures (issue 21)
    "nan": (b'{"prompt": "a"}\n{"prompt": "b", "temperature": NaN}\n', ("p.jsonl:2", "NaN")),
    "deep": (b'{"prompt": "a", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}\n", ("p.jsonl:1", "nested deeper")),
    "output-len-huge": (b'{"prompt": "a", "output_len": 1000000000000}\n', ("p.jsonl:1", "output_len")),
}
MODELS = {
    "empty": (b"", ("m.yaml", "expected a mapping")),
    "list": (b"- 1\n- 2\n", ("m.yaml:1", "expected a mapping")),
    "binary": (BIN, ("m.yaml", "cannot read")),
    "unicode-id": ("id: mödel\nmodel: org/m\n".encode(), ("m.yaml", "id")),
}
IMPORTS = {
    "empty": (b"", ("r.json", "not a JSON result")),
    "list": (b"[1, 2]", ("r.json", "not a vllm bench serve result")),
    "not-json": (b"{not json", ("r.json", "not a JSON result")),
    "binary": (BIN, ("r.json", "not a JSON result")),
    "other-object": (b'{"foo": 1}', ("r.json", "not a vllm bench serve result")),
    "nan-fields": (b'{"duration": NaN, "completed": "x"}', ("r.json",)),
    "huge": (b" " * (8 << 20) + b"[", ("r.json", "not a JSON result")),
}
STATE = {
    "not-json": (b"{broken", ("layouts.json", "damaged")),
    "binary": (BIN, ("layouts.json", "cannot be read")),
    "other-version": (json.dumps({"version": 99, "layouts": {}}).encode(), ("layouts.json", "version 99")),
    "no-version": (json.dumps({"layouts": {}}).encode(), ("layouts.json", "version None")),
    "a-list": (b"[]", ("layouts.json", "version")),
    "layouts-wrong-type": (json.dumps({"version": 1, "layouts": [1, 2]}).encode(), ("layouts.json", "damaged")),
    "record-wrong-type": (json.dumps({"version": 1, "layouts": {"x": 5}}).encode(), ("layouts.json", "damaged")),
}


def _layouts(record: dict[str, object] | None = None, proc: dict[str, object] | None = None,
             plan: dict[str, object] | None = None) -> bytes:
    """A state file of one layout, with fields of it (or of its one process, or its plan) replaced."""
    p: dict[str, object] = {"name": "server", "role": "single", "pid": 4_000_000, "pgid": 4_000_000,
                            "create_time": 1.8e9, "log": "/nonexistent/server.log", "url": "http://127.0.0.1:9"}
    pl: dict[str, object] = {"topology": "tp1", "profile_id": "m", "gpus": [0], "servers": [{"name": "server",
                                                                                              "gpus": [0]}]}
    r: dict[str, object] = {"id": "x", "created": 1.8e9, "simulated": True, "status": "ready",
                            "plan": {**pl, **(plan or {})}, "processes": [{**p, **(proc or {})}]}
    return json.dumps({"version": 1, "layouts": {"x": {**r, **(record or {})}}}).encode()


# values of the wrong type or range inside an otherwise valid state file (issue 21): the file and field named
STATE.update({
    "pid-text": (_layouts(proc={"pid": "abc"}), ("layouts.json", "pid", "move it aside")),
    "pid-negative": (_layouts(proc={"pid": -1}), ("layouts.json", "pid")),
    "pgid-zero-list": (_layouts(proc={"pgid": [0]}), ("layouts.json", "pgid")),
    "created-text": (_layouts({"created": "yesterday"}), ("layouts.json", "created")),
    "created-huge": (_layouts({"created": 1e300}), ("layouts.json", "created")),
    "created-nan": (_layouts().replace(b'"created": 1800000000.0', b'"created": NaN'), ("layouts.json",
                                                                                          "damaged")),
    "processes-mapping": (_layouts({"processes": {"a": 1}}), ("layouts.json", "processes")),
    "process-missing-pid": (_layouts().replace(b'"pid": 4000000, ', b""), ("layouts.json", "pid")),
    "status-number": (_layouts({"status": 3}), ("layouts.json", "status")),
    "plan-gpus-text": (_layouts(plan={"gpus": ["zero"]}), ("layouts.json", "gpus")),
    "plan-servers-text": (_layouts(plan={"servers": "all"}), ("layouts.json", "servers")),
    "plan-a-list": (_layouts({"plan": [1, 2]}), ("layouts.json", "plan")),
    "huge-int": (_layouts().replace(b'"pid": 4000000', b'"pid": ' + b"9" * 400), ("layouts.json", "damaged")),
    "deep": (b'{"version": 1, "layouts": ' + b"[" * 500 + b"]" * 500 + b"}", ("layouts.json", "damaged")),
    "diagnoses-text": (_layouts({"diagnoses": "none"}), ("layouts.json", "diagnoses")),
    "id-escape": (_layouts({"id": "\x1b[31mred\x1b[0m"}), ("layouts.json", "control character")),
    "note-escape": (_layouts({"note": "\x1b]0;title\x07"}), ("layouts.json", "note")),
    "log-huge": (_layouts(proc={"log": "x" * 100_000}), ("layouts.json", "log")),
    "server-dp-text": (_layouts(plan={"servers": [{"name": "server", "gpus": [0], "dp": "two"}]}),
                       ("layouts.json", "plan.servers[0].dp")),
    "server-port-huge": (_layouts(plan={"servers": [{"name": "server", "gpus": [0], "port": 70000}]}),
                         ("layouts.json", "port")),
    "server-env-list": (_layouts(plan={"servers": [{"name": "server", "gpus": [0], "env": ["A=1"]}]}),
                        ("layouts.json", "env")),
    "version-huge-text": (json.dumps({"version": "v" * 100_000, "layouts": {}}).encode(), ("layouts.json",
                                                                                             "version")),
    "plan-servers-null": (_layouts(plan={"servers": None}), ("layouts.json", "plan.servers")),
    "server-env-null": (_layouts(plan={"servers": [{"name": "server", "gpus": [0], "env": None}]}),
                        ("layouts.json", "plan.servers[0].env")),
})


#: a state file damaged as a whole is refused (exit 2, one line); in every other case of STATE one record does not
#: read back: it is quarantined and the others kept (tests/hardening/test_trust2_disk.py runs those)
STATE_WHOLE = ("not-json", "binary", "other-version", "no-version", "a-list", "layouts-wrong-type", "created-nan",
               "huge-int", "deep", "version-huge-text")


def cases() -> Iterator[Case]:
    # --- global flags ---------------------------------------------------------------------------------------
    yield c("global flags", "sim-gpus-zero", ["--sim-gpus", "0", *PLAN], "--sim-gpus")
    yield c("global flags", "sim-gpus-huge", ["--sim-gpus", "100000", *PLAN], ("--sim-gpus", "72"))
    yield c("global flags", "sim-gpus-word", ["--sim-gpus", "two", *PLAN], ("--sim-gpus", "whole number"))
    yield c("global flags", "sim-gpus-float", ["--sim-gpus", "1e3", *PLAN], "--sim-gpus")
    yield c("global flags", "sim-clock-zero", [*PLAN, "--sim-clock", "0"], "--sim-clock")
    yield c("global flags", "sim-startup-inf", [*PLAN, "--sim-startup", "inf"], ("--sim-startup", "finite"))
    yield c("global flags", "sim-startup-negative", [*PLAN, "--sim-startup", "-1"], "--sim-startup")
    yield c("global flags", "sim-gpu-unknown", [*PLAN, "--sim-gpu", "a100"], ("--sim-gpu", "a100"))
    yield c("global flags", "sim-fault-unknown", [*PLAN, "--sim-fault", "nope"], "--sim-fault")
    yield c("global flags", "unknown-command", ["frobnicate"], "frobnicate")
    # --- plan / up / run: the layout flags --------------------------------------------------------------------
    for topo in ("tp0", "", "tp١", "1p1d-tp", "tp-2", "p1d"):
        yield c("layout flags", f"topology-{topo!r}", ["plan", "--model", M, "--topology", topo], "--topology")
    yield c("layout flags", "topology-more-gpus", ["plan", "--model", M, "--topology", "tp99"], "99 GPUs")
    yield c("layout flags", "topology-huge", ["plan", "--model", M, "--topology", "9" * 20 + "p1d"], "GPUs")
    yield c("layout flags", "model-unknown", ["plan", "--model", "nope", "--topology", "tp1"], ("--model", "nope"))
    yield c("layout flags", "model-empty", ["plan", "--model", "", "--topology", "tp1"], "--model")
    yield c("layout flags", "model-folder", ["plan", "--model", "{T}", "--topology", "tp1"],
            ("{T}", "not a model folder"))
    yield c("layout flags", "gpus-twice", [*PLAN, "--gpus", "0,0"], ("--gpus", "twice"))
    yield c("layout flags", "gpus-absent", [*PLAN, "--gpus", "7"], "GPU 7")
    yield c("layout flags", "gpus-comma", [*PLAN, "--gpus", ","], "--gpus")
    yield c("layout flags", "gpus-word", [*PLAN, "--gpus", "first"], "--gpus")
    yield c("layout flags", "gpus-huge", [*PLAN, "--gpus", "9" * 30], "not present")
    yield c("layout flags", "port-high", [*PLAN, "--port", "70000"], ("--port", "70000"))
    yield c("layout flags", "port-negative", [*PLAN, "--port", "-1"], "--port")
    yield c("layout flags", "port-word", [*PLAN, "--port", "http"], "--port")
    yield c("layout flags", "server-port-overflow", ["plan", "--model", M, "--topology", "1p1d", "--server-port",
                                                     "65535"], "--server-port")
    yield c("layout flags", "side-channel-overflow", ["plan", "--model", M, "--topology", "1p1d",
                                                      "--side-channel-port", "65535"], "--side-channel-port")
    yield c("layout flags", "gmu-high", [*PLAN, "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization")
    yield c("layout flags", "gmu-nan", [*PLAN, "--gpu-memory-utilization", "nan"], "--gpu-memory-utilization")
    yield c("layout flags", "max-model-len-zero", [*PLAN, "--max-model-len", "0"], "--max-model-len")
    yield c("layout flags", "max-model-len-huge", [*PLAN, "--max-model-len", "9" * 20], "max_model_len")
    yield c("layout flags", "env-no-equals", [*PLAN, "--env", "NOEQUALS"], ("--env", "K=V"))
    yield c("layout flags", "env-no-name", [*PLAN, "--env", "=v"], "--env")
    yield c("layout flags", "arg-unclosed-quote", [*PLAN, "--arg", '"unclosed'], "--arg")
    # empty items were skipped silently before (issue 13's open defects)
    yield c("layout flags", "arg-empty", [*PLAN, "--arg", ""], ("--arg", "empty"))
    yield c("layout flags", "arg-blank", [*PLAN, "--arg=--enforce-eager", "--arg", "  "], ("--arg", "empty"))
    yield c("layout flags", "up-topology-blank", ["up", "--sim", "--model", M, "--topology", " "],
            ("--topology", "empty"))
    yield c("layout flags", "doctor-topology-empty", ["doctor", "--topology", ""], ("--topology", "empty"))
    yield c("layout flags", "diagnose-topology-empty", ["diagnose", "--topology", "", "{T}/s.log"],
            ("--topology", "empty"), files={"s.log": b"INFO ok\n"})
    yield c("layout flags", "results-import-topology-empty", ["results", "--topology", "", "import", "{T}/r.json"],
            ("--topology", "empty"), files={"r.json": b"{}"})
    yield c("layout flags", "host-space", [*PLAN, "--host", "bad host"], "--host")
    yield c("layout flags", "host-empty", [*PLAN, "--host", ""], "--host")
    yield c("layout flags", "host-unicode", [*PLAN, "--host", "hôst"], "--host")
    yield c("layout flags", "up-ready-timeout-zero", ["up", "--sim", "--model", M, "--topology", "tp1",
                                                      "--ready-timeout", "0"], "--ready-timeout")
    yield c("layout flags", "up-stall-timeout-word", ["up", "--sim", "--model", M, "--topology", "tp1",
                                                      "--stall-timeout", "x"], "--stall-timeout")
    yield c("layout flags", "up-apply-fix-unknown", ["up", "--sim", "--model", M, "--topology", "tp1",
                                                     "--apply-fix", "no-such-fix"], "no-such-fix")
    yield c("layout flags", "run-workload-unknown", ["run", "--model", M, "--topology", "tp1", "--workload", "nope"],
            ("--workload", "nope"))
    run = ("run", "--model", M, "--topology", "tp1", "-w", "decode-heavy")
    yield c("layout flags", "run-rates-word", [*run, "--rates", "abc"], "--rates")
    yield c("layout flags", "run-rates-zero", [*run, "--rates", "0"], "--rates")
    yield c("layout flags", "run-rates-empty", [*run, "--rates", ""], "--rates")
    yield c("layout flags", "run-rates-empty-item", [*run, "--rates", "1,,2"], ("--rates", "empty item 2"))
    for topo in ("dp2,,tp2", "tp1,", ",tp1"):
        yield c("layout flags", f"run-topology-empty-item-{topo}", ["run", "--model", M, "--topology", topo, "-w",
                                                                     "decode-heavy"], ("--topology", "empty item"))
    yield c("layout flags", "run-workload-empty-item", ["run", "--model", M, "--topology", "tp1", "-w",
                                                        "decode-heavy,"], ("--workload", "empty item 2"))
    # --- status, down, watch, doctor, proxy -----------------------------------------------------------------------
    yield c("other commands", "status-unknown-flag", ["status", "--bogus"], "--bogus")
    yield c("other commands", "down-unknown-flag", ["down", "--json"], "--json")
    yield c("other commands", "watch-rate-zero", ["watch", "--rate", "0"], "--rate")
    yield c("other commands", "watch-rate-high", ["watch", "--rate", "100"], "--rate")
    yield c("other commands", "watch-seconds-negative", ["watch", "--seconds", "-1"], "--seconds")
    yield c("other commands", "watch-window-zero", ["watch", "--window", "0"], "--window")
    yield c("other commands", "watch-endpoint-ipv6", ["watch", "--endpoint", "http://[::1"], "--endpoint")
    yield c("other commands", "watch-endpoint-scheme", ["watch", "--endpoint", "ftp://x:1"], "--endpoint")
    yield c("other commands", "doctor-model-unknown", ["doctor", "--model", "nope"], "--model")
    yield c("other commands", "doctor-topology-unknown", ["doctor", "--topology", "zz"], "--topology")
    yield c("other commands", "doctor-gpus-word", ["doctor", "--gpus", "x"], "--gpus")
    yield c("other commands", "proxy-no-prefill", ["proxy", "--decode", DEAD], "--prefill")
    yield c("other commands", "proxy-ipv6", ["proxy", "--prefill", "http://[::1", "--decode", DEAD], "--prefill")
    yield c("other commands", "proxy-path", ["proxy", "--prefill", DEAD + "/v1", "--decode", DEAD], "--prefill")
    yield c("other commands", "proxy-read-timeout-negative", ["proxy", "--prefill", DEAD, "--decode", DEAD,
                                                              "--read-timeout", "-1"], "--read-timeout")
    yield c("other commands", "proxy-stream-idle-timeout-inf", ["proxy", "--prefill", DEAD, "--decode", DEAD,
                                                                "--stream-idle-timeout", "inf"],
            "--stream-idle-timeout")
    yield c("other commands", "proxy-port-high", ["proxy", "--prefill", DEAD, "--decode", DEAD, "--port", "70000"],
            "--port")
    # --- bench ---------------------------------------------------------------------------------------------------
    b = ("bench", "--endpoint", DEAD)
    yield c("bench flags", "nothing-up", ["bench"], ("--endpoint", "nothing is up"))
    yield c("bench flags", "endpoint-unreachable", [*b, "--num-prompts", "1"], ("--endpoint", "cannot ask"))
    yield c("bench flags", "endpoint-ipv6", ["bench", "--endpoint", "http://[::1"], "--endpoint")
    yield c("bench flags", "endpoint-port", ["bench", "--endpoint", "http://h:99999"], "--endpoint")
    yield c("bench flags", "endpoint-empty", ["bench", "--endpoint", "http://"], "--endpoint")
    yield c("bench flags", "rate-zero", [*b, "--rate", "0"], "--rate")
    yield c("bench flags", "rate-negative", [*b, "--rate", "-1"], "--rate")
    yield c("bench flags", "rate-nan", [*b, "--rate", "nan"], "--rate")
    yield c("bench flags", "range-ratio-one", [*b, "--range-ratio", "1"], "--range-ratio")
    yield c("bench flags", "goodput-no-value", [*b, "--goodput", "ttft"], "--goodput")
    yield c("bench flags", "goodput-unknown-key", [*b, "--goodput", "foo:5"], "--goodput")
    yield c("bench flags", "goodput-negative", [*b, "--goodput", "ttft:-5"], "--goodput")
    yield c("bench flags", "extra-body-not-json", [*b, "--extra-body", "{bad"], "--extra-body")
    yield c("bench flags", "extra-body-list", [*b, "--extra-body", "[1]"], "--extra-body")
    yield c("bench flags", "workload-unknown", [*b, "--workload", "nope"], "--workload")
    yield c("bench flags", "prompts-missing", [*b, "--prompts", "{T}/none.jsonl"], ("none.jsonl", "--prompts"))
    yield c("bench flags", "prompts-with-input-len", [*b, "--prompts", "{T}/p", "--input-len", "5"], "--prompts",
            files={"p": b""})
    yield c("bench flags", "repeat-zero", [*b, "--repeat", "0"], "--repeat")
    yield c("bench flags", "prefix-len-negative", [*b, "--prefix-len", "-1"], "--prefix-len")
    yield c("bench flags", "num-prompts-huge", [*b, "--num-prompts", "9" * 14], "num_prompts")
    yield c("bench flags", "input-len-huge", [*b, "--input-len", "9" * 14], "input_len")
    yield c("bench flags", "prompt-tokens-huge", [*b, "--num-prompts", "2000", "--input-len", "100000"],
            "num_prompts")
    yield c("bench flags", "request-timeout-zero", [*b, "--request-timeout", "0"], "--request-timeout")
    yield c("bench flags", "no-token-timeout-negative", [*b, "--no-token-timeout", "-1"], "--no-token-timeout")
    yield c("bench flags", "vllm-bench-unclosed", [*b, "--runner", "vllm", "--vllm-bench", '"x'], "--vllm-bench")
    yield c("bench flags", "vllm-bench-missing", [*b, "--runner", "vllm", "--vllm-bench", "/nonexistent/vllm"],
            "--vllm-bench")
    yield c("bench flags", "prompt-format-unknown", [*b, "--prompt-format", "xml"], "--prompt-format")
    for name, (data, names) in WORKLOADS.items():
        yield c("workload files", name, [*b, "--workload", "{T}/w.yaml"], names, files={"w.yaml": data})
    for name, (data, names) in PROMPTS.items():
        yield c("prompts files", name, ["bench", "--endpoint", "{U}", "--prompts", "{T}/p.jsonl",
                                        "--served-model", STUB_MODEL], names, files={"p.jsonl": data})
    # --- model profiles --------------------------------------------------------------------------------------------
    for name, (data, names) in MODELS.items():
        yield c("model profiles", name, ["plan", "--model", "{T}/m.yaml", "--topology", "tp1"], names,
                files={"m.yaml": data})
    for path in sorted((FIXTURES / "bad_profiles").glob("*.yaml")):
        line, fld, text = expectation(path)
        # a YAML syntax error names the file, the line and the field it broke in, as any other error
        yield c("model profiles", path.stem, ["plan", "--model", "{T}/m.yaml", "--topology", "tp1"],
                (f"m.yaml:{line}", f"field '{fld}'" if fld else "", text), files={"m.yaml": path.read_bytes()})
    yield c("model profiles", "operator-profile-broken", [*PLAN],
            ("config:profiles/models/mine.yaml"[7:], "expected a mapping"),
            files={"config:profiles/models/mine.yaml": b"[1]\n"})
    # --- the playbook: --playbook files and the operator's own entries ----------------------------------------------
    # every third broken playbook of the loader's corpus (tests/test_playbook_file.py has them all): through the CLI
    # each costs a load of the shipped playbook
    for path in sorted((FIXTURES / "bad_playbooks").glob("*.yaml"))[::3]:
        line, fld, text = expectation(path)
        yield c("playbook files", path.stem, ["diagnose", "{T}/log", "--playbook", "{T}/pb.yaml"],
                (f"pb.yaml:{line}", fld, text), files={"pb.yaml": path.read_bytes(), "log": b"INFO ok\n"})
    for path in sorted((FIXTURES / "bad_playbooks").glob("*.yaml"))[1:8:4]:
        line, fld, text = expectation(path)
        yield c("operator playbook", path.stem, ["playbook", "list"], (f"playbook.yaml:{line}", fld, text),
                files={"config:playbook.yaml": path.read_bytes()})
    yield c("operator playbook", "binary", ["playbook", "list"], ("playbook.yaml", "cannot read"),
            files={"config:playbook.yaml": BIN})
    yield c("playbook commands", "show-unknown", ["playbook", "show", "nope"], "nope")
    yield c("playbook commands", "add-no-title", ["playbook", "add"], "--title")
    yield c("playbook commands", "add-empty-log", ["playbook", "add", "--from", "{T}/log:1", "--title", "T"],
            ("log", "no line 1"), files={"log": b""})
    yield c("playbook commands", "add-binary-line", ["playbook", "add", "--from", "{T}/log:5", "--title", "T"],
            ("log:5", "not a line of text"), files={"log": BIN})
    yield c("playbook commands", "add-bad-from", ["playbook", "add", "--from", "{T}/log:x", "--title", "T"],
            ("--from", "LOG:LINE"), files={"log": b"a\n"})
    yield c("playbook commands", "add-missing-log", ["playbook", "add", "--from", "{T}/none:1", "--title", "T"],
            ("none", "no such file"))
    yield c("playbook commands", "add-from-device", ["playbook", "add", "--from", "/dev/null:1", "--title", "T"],
            ("/dev/null", "device"))
    yield c("operator playbook", "pattern-too-long", ["playbook", "list"],
            ("playbook.yaml:5", "entries[1].match.lines[1]", "at most 1,000"),
            files={"config:playbook.yaml": b"version: 1\nentries:\n- id: x\n  title: X\n  match: {lines: ['"
                   + b"y" * 1500 + b"']}\n  explain: x\n"})
    # --- results ---------------------------------------------------------------------------------------------------
    yield c("results", "run-unknown", ["results", "nope-run"], ("RUN", "nope-run"))
    yield c("results", "format-unknown", ["results", "--format", "xml"], "--format")
    yield c("results", "goodput-word", ["results", "--goodput", "ttft:x"], "--goodput")
    yield c("results import", "missing", ["results", "import", "{T}/none.json"], ("none.json", "no such file"))
    yield c("results import", "folder", ["results", "import", "{T}"], "{T}")
    for name, (data, names) in IMPORTS.items():
        yield c("results import", name, ["results", "import", "{T}/r.json"], names, files={"r.json": data})
    # --- diagnose --------------------------------------------------------------------------------------------------
    yield c("diagnose", "missing", ["diagnose", "{T}/none.log"], ("none.log", "no such file"))
    yield c("diagnose", "folder", ["diagnose", "{T}"], ("{T}", "directory"))
    yield c("diagnose", "device", ["diagnose", "/dev/null"], ("/dev/null", "device"))
    yield c("diagnose", "topology-unknown", ["diagnose", "{T}/l", "--topology", "zz"], "--topology",
            files={"l": b"x\n"})
    yield c("diagnose", "model-unknown", ["diagnose", "{T}/l", "--model", "nope"], "--model", files={"l": b"x\n"})
    yield c("diagnose", "playbook-missing", ["diagnose", "{T}/l", "--playbook", "{T}/none.yaml"], "none.yaml",
            files={"l": b"x\n"})
    yield c("diagnose", "playbook-binary", ["diagnose", "{T}/l", "--playbook", "{T}/pb"], ("pb", "cannot read"),
            files={"l": b"x\n", "pb": BIN})
    # --- state files -----------------------------------------------------------------------------------------------
    for name, (data, names) in STATE.items():
        if name not in STATE_WHOLE:  # a record that does not read is quarantined: test_trust2_disk.py
            continue
        for cmd in (["status"], ["down"]):
            yield c("state files", f"{cmd[0]}-{name}", cmd, names, files={"state:layouts.json": data})


CASES = list(cases())


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    with BadServer("ok") as srv:
        yield srv.url


def _materialise(case: Case, tmp: Path, dirs: Path) -> None:
    for name, data in case.files.items():
        if name.startswith("state:"):
            path = dirs / "state" / name[6:]
        elif name.startswith("config:"):
            path = dirs / "config" / name[7:]
        else:
            path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _error_lines(res: CliResult) -> list[str]:
    return [line for line in res.err_lines if not line.startswith("warning:")]


@pytest.mark.parametrize("case", CASES, ids=lambda k: f"{k.area}/{k.id}")
def test_bad_input_is_one_clear_line(case: Case, tmp_path: Path, isolated_dirs: Path, request: pytest.FixtureRequest
                                     ) -> None:
    folder = tmp_path / "case"
    folder.mkdir()
    _materialise(case, folder, isolated_dirs)
    url = request.getfixturevalue("stub_url") if any("{U}" in a for a in case.argv) else ""
    argv = [a.replace("{T}", str(folder)).replace("{U}", url) for a in case.argv]
    res = run_cli(argv)
    assert no_traceback(res), res.err
    errors = _error_lines(res)
    assert res.code == case.code, f"exit {res.code}: {res.err}"
    assert len(errors) == 1, res.err
    for name in case.names:
        if name:
            assert name.replace("{T}", str(folder)) in errors[0], errors[0]


def test_corpus_size_and_areas() -> None:
    by_area: dict[str, int] = {}
    for k in CASES:
        by_area[k.area] = by_area.get(k.area, 0) + 1
    assert len(CASES) >= 60
    assert len({(k.area, k.id) for k in CASES}) == len(CASES)
    assert {"global flags", "layout flags", "bench flags", "workload files", "prompts files", "model profiles",
            "playbook files", "operator playbook", "results import", "diagnose", "state files"} <= set(by_area)


@pytest.mark.parametrize("kind", ["empty", "binary", "long-line", "many-lines"])
def test_diagnose_takes_any_log_bytes(kind: str, tmp_path: Path) -> None:
    """A log is whatever a server wrote: empty, binary, a 4 MiB line, 30k lines. Each is read and judged (exit
    0, no known failure), never a traceback."""
    data = {"empty": b"", "binary": BIN * 16, "long-line": b"x" * (4 << 20) + b"\n",
            "many-lines": b"INFO 11-29 07:49:29 [core.py:1] nothing to see\n" * 30_000}[kind]
    log = tmp_path / "server.log"
    log.write_bytes(data)
    res = run_cli(["diagnose", str(log)])
    assert res.code == 0, res.err
    assert no_traceback(res)


def test_state_dirs_are_private(isolated_dirs: Path, tmp_path: Path) -> None:
    """State and data folders the app creates are 0700 (logs, plans and results are the operator's alone)."""
    os.environ["DISAGG_TUI_STATE_DIR"] = str(tmp_path / "fresh" / "state")
    from tui.core.launch.state import StateStore

    with StateStore().locked():
        pass
    assert (tmp_path / "fresh" / "state").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o700
