"""Issue 32, "one printable sink": every text from outside (a knob's title, a teammate's playbook entry and
recording, a profile, a stored run, hosts.yaml, clusters.json, the state file, another host's answers, a web
request's path) reaches a terminal, a widget, a log line or a notification through ``tui.core.printable.printable``:
no escape sequence (OSC 52 writes the clipboard, OSC 0 retitles, ``ESC c`` resets), C1 control, DEL or bidi override
is ever written raw, and no markup from outside becomes an action or a link in the console.

A poisoned host (``tests/hardening/poisoned.py``) is walked with every CLI command in-process, and with one console
start that visits every screen."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hardening.cli import CliResult, no_traceback, run_cli
from tests.hardening.poisoned import (
    ENTRY_ID,
    EVIL,
    MARKUP,
    MODEL_ID,
    PAYLOADS,
    SHORT,
    bad_chars,
    poison_event,
    poison_host,
)
from tui.core.printable import escape_char, printable

ALL_BAD = "".join(PAYLOADS[:-1])  # every unprintable payload (the last is markup: printable)


class TestTheSink:
    """One function says what printable is; the others are it."""

    def test_every_control_format_and_separator_character_is_escaped(self) -> None:
        out = printable(EVIL)
        assert out.isprintable() and bad_chars(out) == []
        for ch in set(bad_chars(ALL_BAD)):
            assert escape_char(ch) in out, repr(ch)
        # C1 and DEL as \xNN, format characters as \uNNNN, beyond the BMP as \UNNNNNNNN
        assert "\\x9b" in out and "\\x7f" in out and "\\u202e" in out and "\\ufeff" in out and "\\U000e0041" in out
        assert MARKUP in out  # markup is printable: the console escapes it where it is read as markup

    def test_ordinary_text_of_any_script_is_left_as_it_is(self) -> None:
        for s in ("Qwen3.6 27B NVFP4 — ≥ 2 GPUs", "模型 · модель · نموذج", "✔ ✖ ★ ▌", "emoji 🚀", "tab-free  spaces"):
            assert printable(s) == s

    def test_a_cap_counts_what_it_left_out_and_never_escapes_megabytes(self) -> None:
        out = printable("\x1b" * 10_000_000, 50)
        assert out.startswith("\\x1b" * 12) and out.endswith("…(+9,999,950 characters)") and len(out) < 100
        assert printable("abc", 5) == "abc" and printable("abcdefgh", 5) == "abcde…(+3 characters)"

    def test_keep_lets_only_the_callers_own_line_breaks_through(self) -> None:
        assert printable("a\nb\x1b[2J\r\u2028c", keep="\n") == "a\nb\\x1b[2J\\r\\u2028c"
        assert printable("a\nb") == "a\\nb"

    def test_the_old_names_are_the_sink(self) -> None:
        from tui.core import errors, safeio
        from tui.core.errors import AppError, InputError

        assert errors.printable is printable
        assert safeio.shown(EVIL, 40) == printable(EVIL, 40)
        err = InputError("bad " + EVIL, file="/x/" + SHORT, field="title", hint=EVIL)
        assert bad_chars(err.one_line()) == [] and "\\x1b]52" in err.one_line()
        assert len(AppError("x" * 5000).one_line()) < 1100

    def test_a_diagnosis_from_outside_is_made_printable_explanation_lines_kept(self) -> None:
        from tui.console.views import printable_diagnosis
        from tui.core.playbook import Diagnosis

        d = printable_diagnosis(Diagnosis(server="s", entry_id="e", title="t" + EVIL, severity="error", priority=1,
                                          line_no=1, line=EVIL, explanation=f"one {EVIL}\ntwo", fix=EVIL,
                                          changes=(EVIL,), detail=EVIL))
        for t in (d.title, d.line, d.fix, d.detail, *d.changes, *d.explanation.split("\n")):
            assert bad_chars(t) == [] and "\n" not in t
        assert d.explanation.count("\n") == 1

    def test_json_output_keeps_every_control_escaped_and_reads_back(self) -> None:
        import argparse
        import io

        from tui.cli.context import CliContext
        from tui.cli.output import printable_stream

        buf = io.StringIO()
        ctx = CliContext(args=argparse.Namespace(), out=printable_stream(buf))
        ctx.print_json({"title": EVIL, EVIL: [EVIL]})
        text = buf.getvalue()
        assert bad_chars(text) == [] and text.isascii()  # ensure_ascii: C1, DEL, bidi as \\uXXXX too
        assert json.loads(text) == {"title": EVIL, EVIL: [EVIL]}

    def test_the_progress_line_keeps_its_own_return_and_escapes_the_rest(self) -> None:
        import io

        from tui.cli.output import printable_stream
        from tui.cli.progress import ProgressLine

        class Tty(io.StringIO):
            def isatty(self) -> bool:
                return True

        raw = Tty()

        class Tick:
            @staticmethod
            def line() -> str:
                return "run " + SHORT

        p = ProgressLine(printable_stream(raw))
        p.tick(Tick())  # type: ignore[arg-type]
        p.tick(Tick())  # type: ignore[arg-type]
        out = raw.getvalue()
        assert out.count("\r") == 2 and bad_chars(out.replace("\r", "")) == [] and "\\x1b]52" in out


def _fake_ssh(bin_dir: Path) -> None:
    """An ``ssh`` that answers every remote command as a broken (or hostile) host would: versions, facts, clock
    and watch lines laden with escapes, an error on stderr."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "ssh"
    script.write_text(f"""#!{sys.executable}
import json, sys
EVIL = {EVIL!r}
words = " ".join(sys.argv[1:])
if "date" in words:
    for _ in sys.stdin:
        print("not a clock " + EVIL, flush=True)
elif " watch " in words or words.endswith(" watch"):
    sys.stderr.write("ssh: connect to host gpu-a port 22: " + EVIL + "\\n")
    sys.exit(255)
elif "status" in words:
    print(json.dumps({{"snapshot": {{"host": {{"label": EVIL}}}}, "layouts": []}}))
elif "vllm" in words:
    sys.stderr.write("vllm: " + EVIL + "\\n")
    sys.exit(1)
elif "--version" in words:
    print("disagg-tui 9.9.9 " + EVIL)
else:
    sys.stderr.write(EVIL + "\\n")
    sys.exit(3)
""")
    script.chmod(0o755)


@pytest.fixture
def poisoned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The poisoned host, an ``ssh`` of its own first on PATH (nothing reaches a real host), no model of this
    machine in sight."""
    world = poison_host(tmp_path)
    _fake_ssh(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    (tmp_path / "hub").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("DISAGG_TUI_MODEL_DIRS", raising=False)
    world["tmp"] = tmp_path
    return world


def _commands(w: dict[str, Path]) -> list[list[str]]:
    """Each CLI command at least once, run where it reads what was poisoned (a long-running one bounded, or up to
    the refusal that quotes a value)."""
    tmp = w["tmp"]
    run_id = "bench/" + w["run"].name
    sim = ["--sim"]
    return [
        [],  # the summary of a bare start
        ["console", *sim],  # not on a terminal: the summary too
        ["plan", *sim, "--model", MODEL_ID, "--topology", "tp1", "--knob", "evil=eager"],
        ["up", *sim, "--model", MODEL_ID, "--topology", "tp1", "--gpus", "7"],
        ["status", *sim], ["status", *sim, "--json"], ["status", *sim, "--failed"],
        ["down", *sim, "--all"],
        ["proxy", "--prefill", "http://127.0.0.1:1/" + SHORT, "--decode", "nope" + SHORT],
        ["watch", *sim, "--seconds", "0.3"],
        ["follow", *sim, "--seconds", "0.2"],
        ["bench", *sim, "--num-prompts", "1"],
        ["run", *sim, "--model", MODEL_ID, "--topology", "tp1", "--knob", "evil=eager,bogus"],
        ["results"], ["results", "--format", "md"], ["results", "--format", "csv"], ["results", "--format", "json"],
        ["results", "--format", "md", "--output", str(tmp / "results.md")],
        ["predict", "--model", MODEL_ID, "--gpus", "2", "--isl", "512", "--osl", "128", "--topology", "tp1,dp2",
         "--knob", "evil=auto,eager"],
        ["knobs", *sim, "--model", MODEL_ID, "--topology", "tp1"], ["knobs", *sim, "--json"],
        ["diagnose", str(w["log"])], ["diagnose", "--json", str(w["log"])],
        ["playbook", "list"], ["playbook", "show", ENTRY_ID],
        ["doctor", *sim, "--model", MODEL_ID, "--topology", "tp1"],
        ["profile", "list"], ["profile", "show", MODEL_ID],
        ["replay", str(w["recording"]), "--headless"], ["replay", str(w["recording"]), "--headless", "--markers"],
        ["replay", str(w["recording"]), "--json"],
        ["web", *sim, "--port", "0", "--token-file", str(tmp / ("token" + SHORT))],
        ["export", *sim, "--run", run_id, "-o", str(tmp / "bundle.yaml")],
        ["export", *sim, "--layout", "L-evil", "-o", str(tmp / "layout.yaml")],
        ["import", *sim, str(tmp / "bundle.yaml")],
        ["hosts", "list"], ["hosts", "list", "--json"], ["hosts", "check", "--timeout", "10"],
        ["hosts", "watch", "gpu-a", "--seconds", "1"],
        ["plan", "--model", MODEL_ID, "--topology", "tp1", "--bogus" + SHORT],  # argparse quotes it as it is
    ]


def _json_docs(text: str) -> list[Any]:
    """A command's JSON output: one document, or JSON Lines."""
    try:
        return [json.loads(text)]
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


class TestCliOutput:
    """Every command of the CLI, on a host whose every file from outside is poisoned."""

    def test_every_command_writes_escapes_escaped(self, poisoned: dict[str, Path]) -> None:
        from tui.cli.main import COMMANDS

        commands = _commands(poisoned)
        assert {a[0] for a in commands if a} >= set(COMMANDS)  # every command is walked
        leaks: list[str] = []
        shown: list[str] = []
        for argv in commands:
            res: CliResult = run_cli(argv)
            text = res.out + res.err
            if not no_traceback(res):
                leaks.append(f"{argv}: traceback {res.err[-300:]}")
            if bad_chars(text):
                leaks.append(f"{argv}: {bad_chars(text)}")
            if "\\x1b]52" in text or "\\u001b]52" in text:
                shown.append(" ".join(argv[:2]))
            if "--json" in argv and res.code == 0 and res.out.strip():
                _json_docs(res.out)  # the machine output stays valid: escaped by JSON itself
                if not res.out.isascii():  # ensure_ascii: C1, DEL and bidi as \\uXXXX, not only C0
                    leaks.append(f"{argv}: JSON output not ASCII")
        assert leaks == [], "\n".join(leaks)
        # the payloads were printed (through the sink), not just refused somewhere before anything was written
        for where in ("status --sim", "knobs --sim", "playbook list", "playbook show", "diagnose", "replay",
                      "hosts check", "profile list", "web --sim"):
            assert any(s.startswith(where) for s in shown), (where, shown)

    def test_a_clusters_endpoint_with_an_escape_is_one_line(self, poisoned: dict[str, Path]) -> None:
        from tests.hardening.poisoned import write_clusters
        from tui.core import paths

        write_clusters(paths.state_dir(), endpoint="http://10.0.0.9:8000/" + SHORT)
        res = run_cli(["bench", "--sim", "--num-prompts", "1"])
        assert no_traceback(res) and bad_chars(res.out + res.err) == []

    def test_an_export_for_humans_is_printable_too(self, poisoned: dict[str, Path]) -> None:
        out = poisoned["tmp"] / "results.md"
        assert run_cli(["results", "--format", "md", "--output", str(out)]).code == 0
        assert bad_chars(out.read_text(encoding="utf-8")) == []
        csv = poisoned["tmp"] / "results.csv"
        assert run_cli(["results", "--format", "csv", "--output", str(csv)]).code == 0
        assert bad_chars(csv.read_text(encoding="utf-8")) == []


class TestServerLogs:
    """The lines the web server and the proxy write of a request: its decoded path is anyone's on the port."""

    async def test_a_refused_requests_path_reaches_the_web_servers_log_escaped_on_one_line(self) -> None:
        from aiohttp.test_utils import TestClient, TestServer

        from tui.console.web.server import MAX_LOG_CHARS, WebConfig, WebServer
        from tui.console.web.session import AppCommand

        said: list[str] = []
        web = WebServer(WebConfig(host="127.0.0.1", port=0, token="t" * 20, app=AppCommand(argv=("true",))),
                        say=said.append)
        path = "/%1b]52;c;ZXZpbA==%07%1b]0;owned%07%c2%9b2J%e2%80%ae%0a" + "web:%20console%201%20opened" + "x" * 3000
        async with TestClient(TestServer(web.make_app())) as client:
            r = await client.get(path)
            assert r.status == 403
            r = await client.get("/%0d%0a%1bc")
            assert r.status == 403
        assert len(said) == 2
        for line in said:
            assert bad_chars(line) == [] and "\n" not in line and len(line) <= MAX_LOG_CHARS + 40
        assert "\\x1b]52" in said[0] and "\\x9b" in said[0] and "\\u202e" in said[0] and "\\n" in said[0]

    def test_the_proxys_access_line_escapes_the_path_request_id_and_note(self) -> None:
        from tui.core.proxy.http import Trace, access_line, request_line

        scope = {"method": "POST", "path": "/v1/" + EVIL + "\n200 OK fake", "client": ("127.0.0.1", 5),
                 "http_version": "1.1"}
        line = request_line(scope, 404)
        assert bad_chars(line) == [] and "\n" not in line and "\\x1b]52" in line
        t = Trace(route="/v1/completions", rid=EVIL, status=200, note="upstream said " + EVIL)
        line = access_line(scope, t, 0.1)
        assert bad_chars(line) == [] and "\n" not in line


# --- the console ---------------------------------------------------------------------------------------------

def _screen_text(app: Any) -> tuple[str, list[str]]:
    """What the screen draws now (every strip's segments), and each segment that carries a link or a click action
    not the console's own."""
    strips = app.screen._compositor.render_strips()
    injected = []
    for strip in strips:
        for seg in strip:
            st = seg.style
            if st is None:
                continue
            meta = st.meta or {}
            if st.link or meta.get("@click") == "app.quit":
                injected.append(f"{seg.text!r} link={st.link} meta={meta}")
    return "\n".join("".join(seg.text for seg in strip) for strip in strips), injected


class TestConsole:
    """One console start on the poisoned host, fed a poisoned recording's events and two poisoned remote hosts:
    every screen (and the dialogs the dashboard opens) drawn without a control character and without an action or
    a link from outside; notifications are plain text."""

    def test_the_net_replaces_what_slipped_through_cell_for_cell(self) -> None:
        from rich.cells import cell_len
        from rich.segment import Segment
        from textual.color import Color

        from tui.console.safetext import UnprintableFilter

        segs = [Segment("ok "), Segment(EVIL), Segment("宽" + "\x1b")]
        out = UnprintableFilter().apply(segs, Color(0, 0, 0))
        assert all(bad_chars(s.text) == [] for s in out)
        assert [cell_len(s.text) for s in out] == [cell_len(s.text) for s in segs]
        assert out[0] is segs[0]

    def test_plain_shows_markup_as_written(self) -> None:
        from textual.content import Content

        from tui.console.safetext import plain

        shown = Content.from_markup(plain(EVIL))
        assert MARKUP in shown.plain and bad_chars(shown.plain) == []
        assert all(not (s.style and "@click" in str(s.style)) for s in shown.spans)

    def test_the_net_is_under_every_line_of_the_console(self) -> None:
        from tui.console.app import make_console
        from tui.console.safetext import UnprintableFilter
        from tui.core.host.base import HostOptions

        app = make_console(HostOptions(sim=True), live=False)
        assert any(isinstance(f, UnprintableFilter) for f in app.get_line_filters())

    async def test_every_screen_draws_outside_text_printable_and_inert(self, poisoned: dict[str, Path],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
        """With the net taken away: what every screen draws went through the sink itself (escaped, visible),
        and nothing from outside became a click action or a link."""
        from tests.console import scripted
        from tests.console.remote_fakes import FakeRemote, follow, tick
        from tui.console.app import make_console
        from tui.core.host.base import HostOptions
        from tui.core.launch.events import LogLine
        from tui.core.playbook import Diagnosis, load_playbook
        from tui.core.remote.events import HostUnreachable, RemoteTick
        from tui.sim.host import SimHost

        monkeypatch.setattr("tui.core.plan.preflight.port_free", lambda host, port: True)
        monkeypatch.setattr("tui.console.app.UNPRINTABLE", _NoNet())
        t = tick("a")
        host_a = FakeRemote(RemoteTick(ts=t.ts, host="a", tick=_poison_tick(t.tick)))  # refused: a bad tick
        t = tick("c")
        host_c = FakeRemote(RemoteTick(ts=t.ts, host="c", tick=_poison_tick(t.tick, MARKUP)))  # printable: drawn
        host_b = FakeRemote(HostUnreachable(ts=scripted.T0, host="b", reason="refused" + SHORT, retry_in_s=4.0,
                                            detail="ssh: " + EVIL))
        follows = {"a": FakeRemote(*follow("a", LogLine(ts=scripted.T0, server="decode-0", lineno=1,
                                                        text="remote " + EVIL)))}
        events = [poison_event(e) for e in scripted.ready_under_load()] + [
            LogLine(ts=scripted.T0, server="decode-0" + SHORT, lineno=99, text="log " + EVIL),
            Diagnosis(ts=scripted.T0, server="decode-0" + SHORT, entry_id=ENTRY_ID, title="t " + EVIL,
                      severity="error", priority=90, line_no=99, line="l " + EVIL,
                      explanation="e " + EVIL + "\nsecond " + EVIL, fix="f " + EVIL)]
        options = HostOptions(sim=True)
        app = make_console(options, live=False, clock=scripted.clock, events=events, host=SimHost(options),
                           book=load_playbook(), remotes={"a": host_a, "b": host_b, "c": host_c}, follows=follows)
        problems: list[str] = []
        async with app.run_test(size=(160, 48)) as pilot:
            app.notify("a notice quoting " + EVIL, title="title " + SHORT, timeout=60)

            async def look(where: str) -> None:
                await pilot.pause(0.1)
                text, injected = _screen_text(app)
                if bad_chars(text):
                    lines = [ascii(ln.strip())[:160] for ln in text.splitlines() if bad_chars(ln)]
                    problems.append(f"{where} ({type(app.screen).__name__}): raw {bad_chars(text)} in {lines[:3]}")
                problems.extend(f"{where}: injected {i}" for i in injected)

            await look("dashboard")
            for keys, where in [(("d",), "diagnosis details"), (("escape", "q"), "quit dialog"),
                                (("escape", "l"), "launch"), (("escape", "b"), "bench"),
                                (("escape", "c"), "campaign"), (("escape", "r"), "results"),
                                (("escape", "p"), "playbook"), (("down", "down"), "playbook entries"),
                                (("escape", "question_mark"), "help")]:
                for k in keys:
                    await pilot.press(k)
                await look(where)
            notes = list(app._notifications)
            assert any("\\x1b]52" in n.message for n in notes)
            for n in notes:
                if bad_chars(n.message + n.title) or n.markup:
                    problems.append(f"notification {n.title!r}: {n.message[:80]!r} markup={n.markup}")
        assert problems == [], "\n".join(problems)


class _NoNet:
    """A line filter that changes nothing: the console's net taken away, to see what the sink alone does."""

    enabled = True

    @staticmethod
    def apply(segments: Any, background: Any) -> Any:
        return segments


def _poison_tick(data: Any, tail: str = SHORT) -> Any:
    """A remote tick's texts (names, labels, the model) ended by ``tail``; its figures and states kept."""
    keys = {"hostname", "name", "model", "profile", "id", "label", "endpoint", "uuid", "owner", "layout"}
    if isinstance(data, dict):
        return {k: (v + tail if k in keys and isinstance(v, str) else _poison_tick(v, tail)) for k, v in data.items()}
    if isinstance(data, list):
        return [_poison_tick(v, tail) for v in data]
    return data

