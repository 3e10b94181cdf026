"""A host whose every file from outside carries terminal escapes and markup: the operator's knobs.yaml and
playbook.yaml, a profile of theirs, hosts.yaml, clusters.json, the state file, a stored run and a recording, each
string field laden with :data:`EVIL` (issue 32, "one printable sink"). Written with the project's own writers where
one exists, then poisoned in place, so each file is otherwise one a reader takes."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

#: what a hostile teammate, a careless colleague or a broken remote host puts in a string (each a way to act on
#: the operator's terminal, or on the console through its markup)
PAYLOADS = (
    "\x1b]52;c;ZXZpbA==\x07",  # OSC 52: writes the operator's clipboard
    "\x1b]0;owned\x1b\\",  # OSC 0 ended by ST: retitles the terminal
    "\x1b[2J\x1b[H\x1bc",  # clear the screen, home, full reset
    "\x1b[6n\x1b[21t",  # answerbacks: the cursor position and the window title typed back as input
    "\x1bP+q544e\x1b\\",  # DCS (XTGETTCAP)
    "\x9b31m\x9d2;t\x9c\x90q\x9c",  # the same as C1 controls: CSI, OSC, ST, DCS
    "\u202e\u2066\u2069\u200b\u200d\ufeff\u00ad",  # bidi override and isolates, zero-width, BOM, soft hyphen
    "\x7f\x08\r\x00\x0b\x0c",  # DEL, backspace, carriage return, NUL, VT, FF
    "\u2028\u2029\u0085",  # line and paragraph separators, NEL
    "\U000e0041\U000f0000",  # a tag character, a private-use one
    "[@click=app.quit]q[/] [link='file:///etc/passwd']l[/link] [on red]x[/on red] [/]",  # markup, actions
)
EVIL = "ev" + "".join(PAYLOADS) + "il"
#: the markup part alone (console texts drawn with markup must show it as written)
MARKUP = PAYLOADS[-1]
#: a short one, for fields with a small length limit
SHORT = "e\x1b]52;c;QQ==\x07\u202e\x9b2J[@click=app.quit]x"

#: a profile's id of the poisoned host (ids themselves are checked words)
MODEL_ID = "evil-model"
ENTRY_ID = "evil-entry"
#: the line of a server log the poisoned playbook entry matches
TRIGGER = "EVILTRIGGER happened"


def bad_chars(text: str) -> list[str]:
    """The characters of ``text`` that must not reach a terminal: every unprintable one but a line break or a
    tab (what a program's own output is made of)."""
    return sorted({ch for ch in text if not ch.isprintable() and ch not in "\n\t"})


def _yaml(text: str) -> str:
    """``text`` as a YAML double-quoted scalar, every unprintable character as YAML's escape of it."""
    out = []
    for ch in text:
        n = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable() and n < 0x10000:
            out.append(ch)
        else:
            out.append(f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}")
    return '"' + "".join(out) + '"'


def _poison(data: Any, keys: set[str]) -> Any:
    """``data`` with every string value under one of ``keys`` (at any depth) ended by :data:`EVIL`."""
    if isinstance(data, dict):
        return {k: (v + EVIL if k in keys and isinstance(v, str) else _poison(v, keys)) for k, v in data.items()}
    if isinstance(data, list):
        return [_poison(v, keys) for v in data]
    return data


def write_knobs(profiles: Path) -> None:
    (profiles / "knobs.yaml").write_text(
        "knobs:\n"
        "  evil:\n"
        f"    title: {_yaml('knob ' + EVIL)}\n"
        f"    description: {_yaml('about ' + EVIL)}\n"
        "    vllm: {since: '0.10.0'}\n"
        "    values:\n"
        f"      auto: {{default: true, note: {_yaml('auto ' + EVIL)}}}\n"
        f"      eager: {{args: ['--enforce-eager'], note: {_yaml('eager ' + EVIL)}}}\n", encoding="utf-8")


def write_profile(profiles: Path) -> None:
    shipped = Path(__file__).resolve().parents[2] / "profiles" / "models" / "dummy-qwen3-8b.yaml"
    text = shipped.read_text(encoding="utf-8")
    lines = []
    for line in text.splitlines():
        if line.startswith("id: "):
            line = f"id: {MODEL_ID}"
        elif line.startswith("title: "):
            line = f"title: {_yaml('Evil ' + EVIL)}"
        elif line.startswith("notes: "):
            line = f"notes: {_yaml('notes ' + EVIL)}"
        elif line.startswith("  ") and lines and lines[-1].startswith("notes: "):
            continue
        lines.append(line)
    (profiles / "models").mkdir(parents=True, exist_ok=True)
    (profiles / "models" / f"{MODEL_ID}.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_playbook(config: Path) -> None:
    (config / "playbook.yaml").write_text(
        "version: 1\n"
        "entries:\n"
        f"  - id: {ENTRY_ID}\n"
        f"    title: {_yaml('title ' + EVIL)}\n"
        "    severity: error\n"
        "    priority: 90\n"
        "    match:\n"
        "      lines: ['EVILTRIGGER']\n"
        f"    explain: {_yaml('line one ' + EVIL + chr(10) + 'line two ' + EVIL)}\n"
        f"    not_fixable: {_yaml('instead ' + EVIL)}\n", encoding="utf-8")


def write_hosts(config: Path, *, sim: bool = True) -> None:
    (config / "hosts.yaml").write_text(
        "hosts:\n"
        "  gpu-a:\n"
        "    ssh: ops@gpu-a\n"
        f"    sim: {'true' if sim else 'false'}\n", encoding="utf-8")


def write_clusters(state: Path, *, endpoint: str = "http://10.0.0.9:8000/" + MARKUP) -> None:
    """clusters.json with one layout across hosts, its names poisoned (its endpoint: ``endpoint``)."""
    host = {"name": "gpu-a" + SHORT, "address": "10.0.0.9" + SHORT, "does": "prefill " + EVIL,
            "argv": ["up", "--model", EVIL], "fingerprint": {"label": EVIL, "gpu": EVIL}}
    record = {"id": "C-" + SHORT, "topology": "1p1d", "model": "m " + EVIL, "endpoint": endpoint,
              "hosts": [host, {**host, "name": "gpu-b"}], "status": "up", "created": time.time() - 60,
              "simulated": True, "plan": None, "owner": "campaign " + EVIL}
    (state / "clusters.json").write_text(json.dumps({"format": 1, "clusters": [record]}), encoding="utf-8")


def write_state(state: Path) -> None:
    """A stopped layout of the state file (no process of it lives: its pid is past any this host gives), its
    texts poisoned."""
    from tests.bench.trustruns import layout_plan

    plan = _poison(layout_plan("tp1"), {"model", "served_model_name", "title", "label", "name", "note"})
    proc = {"name": "server", "role": "single", "pid": 4_194_000, "pgid": 4_194_000, "create_time": 1.0,
            "log": str(state / "layouts" / "L-evil" / "server.log"), "url": "http://127.0.0.1:8000",
            "gpus": [0], "argv": ["vllm", "serve", EVIL], "started": time.time() - 100, "exited": 1}
    diag = {"server": "server", "entry_id": ENTRY_ID, "title": "t " + EVIL, "severity": "error", "priority": 50,
            "line_no": 3, "line": "line " + EVIL, "explanation": "ex " + EVIL, "fix": "fix " + EVIL}
    layout = {"id": "L-evil", "created": time.time() - 100, "simulated": True, "plan": plan, "processes": [proc],
              "status": "failed", "owner_pid": 4_194_000, "owner_user": "mallory" + SHORT, "endpoint":
              "http://127.0.0.1:8000", "note": "note " + EVIL, "diagnoses": [diag], "request": ["--model", EVIL]}
    (state / "layouts" / "L-evil").mkdir(parents=True, exist_ok=True)
    (state / "layouts" / "L-evil" / "server.log").write_text(f"INFO start\n{TRIGGER} {EVIL}\nERROR {EVIL}\n",
                                                             encoding="utf-8")
    (state / "layouts.json").write_text(json.dumps({"version": 1, "layouts": {"L-evil": layout}}), encoding="utf-8")


def write_run(runs: Path) -> Path:
    """Two stored runs: one whose texts carry only markup (printable: its reader takes it), and a copy in a folder
    whose own name carries an escape, its files' texts poisoned (its reader refuses it, naming the folder)."""
    from tests.bench.trustruns import layout_plan, records
    from tests.bench.trustruns import write_run as write

    run = write(runs, "bench", "dp2-evil", "dp2", records(8), plan_dict=layout_plan("dp2"), layout_id="L-evil",
                message="msg " + MARKUP, flags=["--enforce-eager"])
    evil = run.path.parent / ("dp2-" + SHORT.replace("/", "_"))
    shutil.copytree(run.path, evil)
    for p in sorted(evil.glob("*.json")):
        data = json.loads(p.read_text(encoding="utf-8"))
        data = _poison(data, {"model", "served_model_name", "workload", "message", "endpoint", "label", "host",
                              "campaign_label", "note", "title", "request_rate", "topology", "name"})
        p.write_text(json.dumps(data), encoding="utf-8")
    return run.path


def write_recording(recordings: Path) -> Path:
    """A teammate's recording: its header and its events' texts poisoned."""
    from tui.core.launch.events import LogLine, ServerPhase
    from tui.core.playbook import Diagnosis
    from tui.core.record.recorder import Recorder, new_header

    recordings.mkdir(parents=True, exist_ok=True)
    path = recordings / "evil.dtrec"
    header = new_header("disagg-tui up " + EVIL, host={"label": EVIL, "gpu": EVIL})
    rec = Recorder(path, header, flush_s=0.01).start()
    t = time.time()
    rec.record(ServerPhase(ts=t, server="server", phase="loading", label="load " + EVIL, progress=0.3,
                           detail="d " + EVIL))
    for i in range(3):
        rec.record(LogLine(ts=t + i, server="server", lineno=i + 1, text=f"{TRIGGER} {i} {EVIL}"))
    rec.record(Diagnosis(ts=t + 4, server="server", entry_id=ENTRY_ID, title="t " + EVIL, severity="error",
                         priority=50, line_no=2, line="l " + EVIL, explanation="e " + EVIL + "\nsecond " + EVIL,
                         fix="f " + EVIL))
    rec.close()
    return path


def write_log(where: Path) -> Path:
    path = where / "server.log"
    path.write_text(f"INFO {EVIL}\n{TRIGGER} {EVIL}\nERROR x {EVIL}\n", encoding="utf-8")
    return path


def poison_host(tmp: Path) -> dict[str, Path]:
    """Every file from outside of this test's (isolated) config, state and data dirs, poisoned; what was written."""
    from tui.core import paths

    config, state, data = paths.config_dir(), paths.state_dir(), paths.data_dir()
    profiles = paths.user_profiles_dir()
    profiles.mkdir(parents=True, exist_ok=True)
    for d in (config, state, data):
        os.chmod(d, 0o700)
    write_knobs(profiles)
    write_profile(profiles)
    write_playbook(config)
    write_hosts(config)
    write_clusters(state)
    write_state(state)
    run = write_run(paths.runs_dir())
    recording = write_recording(paths.recordings_dir())
    log = write_log(tmp)
    return {"run": run, "recording": recording, "log": log}


#: the text fields of the console's events a teammate's recording or another host's stream fills (a name, a label,
#: a line); what says a state (status, role, phase, severity) stays a word the console knows
EVENT_TEXT_FIELDS = frozenset({"server", "layout_id", "profile_id", "label", "detail", "text", "title", "line",
                               "explanation", "fix", "host", "name", "owner", "layout", "command", "log", "endpoint",
                               "url", "message", "uuid", "topology_label", "hostname", "note"})


def poison_event(ev: Any, tail: str = SHORT) -> Any:
    """``ev`` (an event, or a dataclass inside one) with every text field of :data:`EVENT_TEXT_FIELDS` ended by
    ``tail``, nested dataclasses and tuples of them too: the same server is the same poisoned name everywhere."""
    import dataclasses

    if not dataclasses.is_dataclass(ev) or isinstance(ev, type):
        return ev
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(ev):
        if not f.init:
            continue
        v = getattr(ev, f.name)
        if isinstance(v, str) and f.name in EVENT_TEXT_FIELDS and v:
            changes[f.name] = v + tail
        elif dataclasses.is_dataclass(v):
            changes[f.name] = poison_event(v, tail)
        elif isinstance(v, tuple) and v and all(dataclasses.is_dataclass(x) for x in v):
            changes[f.name] = tuple(poison_event(x, tail) for x in v)
    return dataclasses.replace(ev, **changes) if changes else ev
