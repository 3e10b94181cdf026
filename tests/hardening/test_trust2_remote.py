"""Issue 32, "bounded remote answers": a broken or hostile remote host, behind a fake ``ssh`` on this machine.

The fake ``ssh`` (:func:`fake_ssh`) takes OpenSSH's options up to ``--``, drops the destination and runs the remote
command with ``sh -c`` here, so the inventory entry's ``disagg_tui`` (a script of the test's) is what the "remote
host" answers. Each class is one rule:

- :class:`TestBoundedAnswers`: every SSH answer is read as it comes with its cap applied while reading (a 50 MiB
  answer, an endless line, a flood on stderr): memory stays bounded, the error is one line naming the command and
  the host, and it comes at once, not when the remote side is done.
- :class:`TestTypedRemoteData`: a remote tick, ``hosts facts --json``, ``plan --json`` and ``status --json`` of
  the wrong type, out of range, or with a control character in a name are refused in one line naming the host and
  the field; the stream stays up (the next good tick shows).
- :class:`TestWildcardAddresses`: the wildcard is recognised as the OS reads it (``0``, ``0x0``, ``::0``, ``[::]``,
  ``::ffff:0.0.0.0``...), checked against ``getaddrinfo`` itself, and refused wherever another host is told an
  address.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.hardening.cli import no_traceback, run_cli
from tui.console.remotetick import TickError, read_tick
from tui.core import netaddr
from tui.core.errors import AppError, InputError
from tui.core.plan.preflight import FAIL, PASS, WARN
from tui.core.remote import cluster as cluster_mod
from tui.core.remote.check import Reference, _host_line, check_host, read_clock
from tui.core.remote.cluster import bounded_lines, read_remote_plan
from tui.core.remote.events import HostUnreachable, RemoteTick
from tui.core.remote.host import RemoteHost, read_facts
from tui.core.remote.inventory import HostEntry
from tui.core.remote.ssh import AnswerTooLarge, SshTransport, Unreachable
from tui.core.remote.stream import RemoteFollow, RemoteWatch

MiB = 1024 * 1024
FAKE_SSH = """#!/bin/sh
# OpenSSH's options up to '--', then the destination, then the remote command (one word, for the remote shell)
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift 2
exec /bin/sh -c "${1:-true}"
"""


def fake_ssh(folder: Path) -> Path:
    path = folder / "ssh"
    path.write_text(FAKE_SSH)
    path.chmod(0o755)
    return path


def remote(tmp_path: Path, body: str, *, name: str = "gpu-b", python: bool = True) -> SshTransport:
    """A transport to a fake host whose ``disagg-tui`` is ``body`` (Python, or sh when ``python`` is False)."""
    script = tmp_path / f"remote-{name}"
    script.write_text((f"#!{sys.executable}\nimport sys, os, time, json\n" if python else "#!/bin/sh\n") + body)
    script.chmod(0o755)
    control = tmp_path / "ctl"
    control.mkdir(mode=0o700, exist_ok=True)
    return SshTransport(HostEntry(name=name, ssh=name, disagg_tui=(str(script),)), ssh=str(fake_ssh(tmp_path)),
                        control=control)


def peak_during(fn: Callable[[], Any]) -> tuple[Any, float, int]:
    """``fn()``'s result (or the exception it raised), its seconds, and the most memory Python held meanwhile."""
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        try:
            out: Any = fn()
        except Exception as exc:  # what the rule is about: the error, as a value
            out = exc
        return out, time.monotonic() - t0, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def one_line(err: BaseException) -> str:
    text = err.one_line() if isinstance(err, AppError) else str(err)
    assert "\n" not in text and "\x1b" not in text, text
    return text


def good_tick(host: str = "gpu-b", ts: float = 1.7e9) -> dict[str, Any]:
    return {"time": ts, "host": {"label": f"SIMULATED host {host}: 2× NVIDIA B200", "simulated": True,
                                 "hostname": host},
            "layout": None,
            "gpus": [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA B200", "utilization_gpu": 40.0,
                      "memory_used": 1 << 30, "memory_total": 192 << 30, "power_w": 500.0, "temperature_c": 50.0,
                      "processes": [{"pid": 100 + i, "name": "vllm", "memory": 1 << 30}]} for i in range(2)],
            "servers": [{"name": "prefill-0", "endpoint": "http://10.0.0.2:8100", "role": "prefill",
                         "health": "up", "latency_ms": 2.0, "status_code": 200, "version": "0.24.0",
                         "metrics": {"kv_cache_usage": 0.5, "prompt_tokens_per_s": 1000.0}}],
            "errors": []}


def good_facts(**over: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "simulated": True, "hostname": "gpu-b", "driver": "570.1", "cuda_driver": "12.8",
        "gpus": [{"index": i, "name": "NVIDIA B200", "uuid": f"GPU-{i}", "memory_total_mib": 183359,
                  "compute_capability": 10.0} for i in range(2)],
        "toolchain": {"nvcc_on_path": "/usr/local/cuda/bin/nvcc"},
        "vllm": {"executable": "vllm", "resolved": "/opt/vllm/bin/vllm", "version": "0.24.0", "nixl": "1.5.1"},
        "nvlink": [["X", "NV18"], ["NV18", "X"]]}
    facts.update(over)
    return facts


def facts_text(facts: Any) -> str:
    return json.dumps({"format": 1, "facts": facts})


def plan_answer(url: str = "http://10.0.0.2:8100", **server: Any) -> dict[str, Any]:
    s = {"name": "prefill-0", "role": "prefill", "url": url, "shell": "vllm serve m", "argv": ["vllm", "serve", "m"],
         "env": {"CUDA_VISIBLE_DEVICES": "0"}, "gpus": [0]}
    s.update(server)
    return {"plan": {"servers": [s], "proxy": None, "warnings": [], "simulated": True},
            "preflight": [{"name": "ports", "status": "pass", "reason": "free"}]}


# --- rule 1 --------------------------------------------------------------------------------------------------------

class TestBoundedAnswers:
    """A remote answer is read in chunks with its cap applied while reading; past it ssh is killed and the error is
    one line naming the command and the host."""

    def test_a_50_mib_facts_answer_is_stopped_at_its_cap(self, tmp_path: Path) -> None:
        t = remote(tmp_path, "exec head -c 52428800 /dev/urandom\n", python=False)
        err, seconds, peak = peak_during(lambda: RemoteHost(t).facts)
        assert isinstance(err, AnswerTooLarge), err
        assert one_line(err).startswith("answer of `hosts facts --json` from gpu-b exceeded 1 MiB")
        assert seconds < 5, seconds  # at the cap, not when the remote side is done
        assert peak < 6 * MiB, peak  # the answer's first MiB and one chunk, never the 50

    def test_an_endless_answer_is_stopped_not_waited_for(self, tmp_path: Path) -> None:
        t = remote(tmp_path, "exec yes junk\n", python=False)  # never ends on its own
        err, seconds, peak = peak_during(lambda: t.run(t.entry.remote_cli("plan", "--json"), timeout_s=60,
                                                       max_bytes=256 * 1024))
        assert isinstance(err, AnswerTooLarge) and "`plan --json` from gpu-b exceeded 256 KiB" in one_line(err)
        assert seconds < 5 and peak < 4 * MiB, (seconds, peak)

    def test_a_flood_on_stderr_is_stopped_too(self, tmp_path: Path) -> None:
        t = remote(tmp_path, "exec head -c 52428800 /dev/zero >&2\n", python=False)
        err, seconds, peak = peak_during(lambda: RemoteHost(t).facts)
        assert isinstance(err, AnswerTooLarge), err
        assert one_line(err).startswith("errors of `hosts facts --json` from gpu-b exceeded 1 MiB")
        assert seconds < 5 and peak < 6 * MiB, (seconds, peak)

    def test_a_long_stderr_keeps_its_last_lines(self, tmp_path: Path) -> None:
        t = remote(tmp_path, "sys.stderr.write('noise\\n' * 30000 + 'the real reason\\n'); sys.exit(3)\n")
        res = t.run(t.entry.remote_cli("x"))
        assert res.rc == 3 and len(res.stderr) <= 64 * 1024 and res.stderr.endswith("the real reason\n")
        with pytest.raises(AppError) as caught:
            _ = RemoteHost(t).facts
        assert "failed there: the real reason" in one_line(caught.value)

    def test_a_silent_host_is_a_timeout_in_time(self, tmp_path: Path) -> None:
        t = remote(tmp_path, "exec sleep 30\n", python=False)
        t0 = time.monotonic()
        with pytest.raises(Unreachable) as caught:
            t.run(t.entry.remote_cli("x"), timeout_s=0.5)
        assert caught.value.reason == "timeout" and time.monotonic() - t0 < 5

    def test_a_version_answer_of_megabytes_fails_the_check_in_one_line(self, tmp_path: Path) -> None:
        t = remote(tmp_path, "exec head -c 8388608 /dev/zero\n", python=False)
        checks = check_host(t, Reference(disagg_tui=None, vllm=None), timeout_s=20)
        assert [(c.name, c.status) for c in checks] == [("reach", FAIL)]
        assert checks[0].reason == "answer of `--version` from gpu-b exceeded 64 KiB"

    def test_a_clock_that_answers_an_endless_line_is_refused_at_once(self, tmp_path: Path) -> None:
        # the remote shell's 'date' loop replaced by one that never ends its line
        t = remote(tmp_path, "", python=False)
        t.open = lambda words, **_: SshTransport.open(t, ["sh", "-c", "tr -d '\\n' < /dev/zero"])  # type: ignore
        err, seconds, peak = peak_during(lambda: read_clock(t, timeout_s=30))
        assert isinstance(err, InputError) and "'date +%s.%N' answered" in one_line(err), err
        assert seconds < 5 and peak < 2 * MiB, (seconds, peak)

    def test_a_watch_line_without_end_ends_the_session_with_one_line(self, tmp_path: Path) -> None:
        t = remote(tmp_path, "exec tr -d '\\n' < /dev/zero\n", python=False)

        async def first() -> Any:
            async for ev in RemoteWatch(t, rate_hz=2, stall_s=5, backoff_first_s=0.01).events(seconds=10):
                return ev
            return None
        ev, seconds, peak = peak_during(lambda: asyncio.run(first()))
        assert isinstance(ev, HostUnreachable) and ev.reason == "too-large", ev
        assert ev.detail == "a line of `watch --json --rate 2` from gpu-b exceeded 1 MiB"
        assert seconds < 5 and peak < 8 * MiB, (seconds, peak)

    def test_a_remote_that_floods_stderr_does_not_stall_its_ticks(self, tmp_path: Path) -> None:
        # 8 MiB of warnings on stderr first: an undrained pipe would block the remote side before its first tick
        body = ("sys.stderr.write(('warning ' * 1000 + '\\n') * 1000); sys.stderr.flush()\n"
                f"for i in range(3): print({json.dumps(good_tick())!r}, flush=True)\n"
                "time.sleep(30)\n")
        t = remote(tmp_path, body)

        async def ticks() -> list[Any]:
            out = []
            async for ev in RemoteWatch(t, rate_hz=2, stall_s=10).events(seconds=20):
                out.append(ev)
                if len(out) == 3:
                    break
            return out
        evs, _, peak = peak_during(lambda: asyncio.run(ticks()))
        assert [type(e).__name__ for e in evs] == ["RemoteTick"] * 3, evs
        assert peak < 8 * MiB, peak

    def test_a_follow_line_past_its_cap_ends_the_session(self, tmp_path: Path) -> None:
        t = remote(tmp_path, "sys.stdout.write('{\"kind\": \"heartbeat\"}\\n' + 'x' * (5 << 20)); sys.stdout.flush();"
                             " time.sleep(30)\n")

        async def first() -> Any:
            async for ev in RemoteFollow(t, backoff_first_s=0.01).events(seconds=10):
                return ev
            return None
        ev = asyncio.run(first())
        assert isinstance(ev, HostUnreachable) and ev.reason == "too-large"
        assert ev.detail == "a line of `follow --json` from gpu-b exceeded 4 MiB"

    def test_up_progress_lines_are_cut_and_the_rest_skipped(self, tmp_path: Path) -> None:
        body = ("sys.stdout.write('step 1\\n' + 'A' * (20 << 20) + '\\n\\x1b]52;c;AAAA\\x07 step 2\\n'); "
                "sys.stdout.flush()\n")
        t = remote(tmp_path, body)
        lines: list[str] = []
        res, _, peak = peak_during(lambda: asyncio.run(cluster_mod._run_streaming(
            t, t.entry.remote_cli("up"), lambda h, line: lines.append(line), 30)))
        assert res.rc == 0 and len(lines) == 3, (res, [ln[:40] for ln in lines])
        assert lines[0] == "step 1" and lines[1] == "A" * 4096 + " …(cut)"
        assert "\x1b" not in lines[2] and lines[2].endswith("step 2")
        assert peak < 8 * MiB, peak

    def test_an_up_that_never_stops_talking_is_stopped(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
        monkeypatch.setattr(cluster_mod, "MAX_PROGRESS", 2 * MiB)
        t = remote(tmp_path, "exec yes 'starting...'\n", python=False)
        res = asyncio.run(cluster_mod._run_streaming(t, t.entry.remote_cli("up"), lambda h, line: None, 30))
        assert res.rc == 125 and res.last == "the output of `up` from gpu-b exceeded 2 MiB: stopped"

    @pytest.mark.parametrize("chunk", [1, 3, 64, 100_000])
    def test_bounded_lines_is_what_splitlines_is_with_each_line_capped(self, chunk: int) -> None:
        rng = random.Random(chunk)
        for _ in range(200):
            data = bytes(rng.choice(b"ab\n") for _ in range(rng.randint(0, 60)))

            async def read(data: bytes = data) -> list[tuple[bytes, bool]]:
                r = asyncio.StreamReader()
                for i in range(0, len(data), chunk):
                    r.feed_data(data[i:i + chunk])
                r.feed_eof()
                return [x async for x in bounded_lines(r, 5)]
            parts = data.split(b"\n")
            want = [(p[:5], len(p) > 5) for p in (parts[:-1] if parts[-1] == b"" else parts)]
            assert asyncio.run(read()) == want, data


# --- rule 2 --------------------------------------------------------------------------------------------------------

def _at(tick: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``tick`` with the value at ``path`` (``gpus.0.index``) replaced (``...`` removes the key)."""
    out = json.loads(json.dumps(tick))
    cur: Any = out
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    for k in keys[:-1]:
        cur = cur[k]
    if value is ...:
        del cur[keys[-1]]
    else:
        cur[keys[-1]] = value
    return out


BAD_TICKS = [
    ("a list where the tick is", None, [good_tick()], ""),
    ("a number", None, 7, ""),
    ("gpus a mapping", "gpus", {"0": {}}, "gpus"),
    ("a string GPU index", "gpus.0.index", "0", "gpus[0].index"),
    ("a boolean GPU index", "gpus.0.index", True, "gpus[0].index"),
    ("a negative GPU index", "gpus.0.index", -1, "gpus[0].index"),
    ("a GPU index of 2**64", "gpus.0.index", 2**64, "gpus[0].index"),
    ("a GPU listed twice", "gpus.1.index", 0, "gpus[1].index"),
    ("a missing GPU index", "gpus.0.index", ..., "gpus[0].index"),
    ("utilisation of 1e17 %", "gpus.0.utilization_gpu", 1e17, "gpus[0].utilization_gpu"),
    ("negative memory", "gpus.0.memory_used", -1, "gpus[0].memory_used"),
    ("an exabyte GPU", "gpus.0.memory_total", 10**18, "gpus[0].memory_total"),
    ("a temperature of the sun", "gpus.0.temperature_c", 5778.0, "gpus[0].temperature_c"),
    ("a power of -1e17 W", "gpus.0.power_w", -1e17, "gpus[0].power_w"),
    ("a pid of 0xffffffff", "gpus.0.processes.0.pid", 2**32 - 1, "gpus[0].processes[0].pid"),
    ("a process that is a string", "gpus.0.processes.0", "vllm", "gpus[0].processes[0]"),
    ("a time of 1e300", "time", 1e300, "time"),
    ("a time as text", "time", "1700000000", "time"),
    ("a negative time", "time", -5, "time"),
    ("a host that is a list", "host", ["gpu-b"], "host"),
    ("simulated as text", "host.simulated", "false", "host.simulated"),
    ("an escape in the hostname", "host.hostname", "gpu-b\x1b]0;owned\x07", "host.hostname"),
    ("OSC 52 in the label", "host.label", "x\x1b]52;c;cm0gLXJmIH4=\x07", "host.label"),
    ("a bidi override in a GPU name", "gpus.0.name", "NVIDIA \u202eB200", "gpus[0].name"),
    ("a newline in a GPU UUID", "gpus.0.uuid", "GPU-0\nGPU-1", "gpus[0].uuid"),
    ("a 10k-character hostname", "host.hostname", "h" * 10_000, "host.hostname"),
    ("an escape in a server name", "servers.0.name", "prefill\x1b[2J", "servers[0].name"),
    ("an escape in a vLLM version", "servers.0.version", "0.24.0\x1b[31m", "servers[0].version"),
    ("a carriage return in a role", "servers.0.role", "prefill\rdecode", "servers[0].role"),
    ("a status code of 1e18", "servers.0.status_code", 10**18, "servers[0].status_code"),
    ("KV usage of 150 %", "servers.0.metrics.kv_cache_usage", 1.5, "servers[0].metrics.kv_cache_usage"),
    ("metrics that are a list", "servers.0.metrics", [1, 2], "servers[0].metrics"),
    ("a throttle reason with a bell", "gpus.0.throttle", ["hw_slowdown\x07"], "gpus[0].throttle[0]"),
    ("errors as a string", "errors", "boom", "errors"),
    ("an error that is a number", "errors", [404], "errors[0]"),
    ("layout.exited as a string", "layout", {"id": "x", "exited": "prefill-0"}, "layout.exited"),
]


class TestTypedRemoteData:
    """Every remote tick and fact is typed, ranged, and its names printable: one line naming the host and the field,
    never a traceback; the stream stays up."""

    @pytest.mark.parametrize(("what", "path", "value", "field"), BAD_TICKS, ids=[b[0] for b in BAD_TICKS])
    def test_a_tick_of_the_wrong_type_is_one_line_naming_host_and_field(self, what: str, path: str | None,
                                                                         value: Any, field: str) -> None:
        data = value if path is None else _at(good_tick(), path, value)
        with pytest.raises(TickError) as caught:
            read_tick(data, "gpu-b")
        text = one_line(caught.value)
        assert text.startswith("gpu-b: " + (f"field '{field}': " if field else "")), text
        assert len(text) < 400

    def test_a_good_tick_with_extra_fields_and_messages_with_escapes_is_drawn(self) -> None:
        tick = good_tick()
        tick["from_a_newer_version"] = {"deep": [[[1]]]}
        tick["gpus"][0]["processes"][0]["name"] = "python\x1b]0;x\x07"  # any user there names their process
        tick["servers"][0]["error"] = "refused\r\n\x1b[2J"
        tick["errors"] = ["NVML: \x1b[31mlost\x1b[0m"]
        t = read_tick(tick, "gpu-b")
        shown = t.gpus[0].processes[0].name + (t.servers[0].health.error or "") + t.errors[0]
        assert "\x1b" not in shown and "\r" not in shown and "\x07" not in shown

    def test_the_stream_stays_up_and_the_next_good_tick_shows(self, tmp_path: Path) -> None:
        from tui.console import remotes
        from tui.console.state import ConsoleState

        lines = [json.dumps(_at(good_tick(), "gpus.0.index", "0")), "not json at all", "[1, 2, 3]",
                 "{\"time\": NaN}", "[" * 10_000 + "]" * 10_000, json.dumps(_at(good_tick(), "host", [])),
                 json.dumps(good_tick(ts=1.7e9 + 1))]
        body = "".join(f"print({line!r}, flush=True)\n" for line in lines) + "time.sleep(30)\n"
        t = remote(tmp_path, body)

        async def until_good() -> list[Any]:
            out = []
            async for ev in RemoteWatch(t, rate_hz=2, stall_s=10).events(seconds=20):
                out.append(ev)
                if isinstance(ev, RemoteTick) and ev.tick.get("time") == 1.7e9 + 1:
                    break
            return out
        evs = asyncio.run(until_good())
        assert all(isinstance(e, RemoteTick) for e in evs), evs  # the session never ended
        state = ConsoleState()
        for ev in evs:
            remotes.apply_tick(state, ev)
        view = state.remotes["gpu-b"]
        assert view.bad == 2 and view.tick is not None and view.tick.time == 1.7e9 + 1
        notes = [(title, body) for title, body, _ in state.host_notes]
        assert notes == [("gpu-b: a tick skipped", "field 'gpus[0].index': expected a whole number, got the text "
                                                   "'0'"),
                         ("gpu-b: a tick skipped", "field 'host': expected a mapping, got a list")], notes

    def test_hosts_watch_prints_a_refused_tick_in_one_line(self, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
        bad = _at(good_tick(), "gpus", 5)  # len(5) was the traceback
        body = "".join(f"print({json.dumps(x)!r}, flush=True)\n" for x in (bad, good_tick())) + "time.sleep(30)\n"
        script = tmp_path / "remote-disagg-tui"
        script.write_text(f"#!{sys.executable}\nimport time\n" + body)
        script.chmod(0o755)
        fake_ssh(tmp_path)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
        config = Path(os.environ["DISAGG_TUI_CONFIG_DIR"])
        (config / "hosts.yaml").write_text(f"hosts:\n  gpu-b:\n    ssh: gpu-b\n    disagg_tui: {script}\n")
        res = run_cli(["hosts", "watch", "gpu-b", "--seconds", "2"])
        assert no_traceback(res), res.err
        out = res.out.splitlines()
        assert out[:2] == ["gpu-b: a tick refused: gpu-b: field 'gpus': expected a list, got 5",
                           "gpu-b: 2 GPUs, 1 servers"], res.out

    @pytest.mark.parametrize(("what", "facts", "field"), [
        ("a list where the facts are", [good_facts()], "facts"),
        ("an ANSI hostname", good_facts(hostname="gpu-b\x1b[2J"), "facts.hostname"),
        ("OSC 52 in a GPU name", good_facts(gpus=[{"index": 0, "name": "B200\x1b]52;c;AAAA\x07", "uuid": "u",
                                                   "memory_total_mib": 1, "compute_capability": 10.0}]),
         "facts.gpus[0].name"),
        ("a bidi mark in the vLLM version", good_facts(vllm={"executable": "vllm", "resolved": None,
                                                             "version": "0.24.0\u202e"}), "facts.vllm.version"),
        ("a control char in nvcc's path", good_facts(toolchain={"cuda_home": "/usr/\x08local"}),
         "facts.toolchain.cuda_home"),
        ("a string GPU index", good_facts(gpus=[{"index": "0", "name": "B200", "uuid": "u", "memory_total_mib": 1,
                                                 "compute_capability": 10.0}]), "facts.gpus[0].index"),
        ("a compute capability of 1e18", good_facts(gpus=[{"index": 0, "name": "B200", "uuid": "u",
                                                           "memory_total_mib": 1, "compute_capability": 1e18}]),
         "facts.gpus[0].compute_capability"),
        ("negative memory", good_facts(gpus=[{"index": 0, "name": "B200", "uuid": "u", "memory_total_mib": -1,
                                              "compute_capability": 9.0}]), "facts.gpus[0].memory_total_mib"),
        ("a GPU twice", good_facts(gpus=[{"index": 0, "name": "B200", "uuid": "u", "memory_total_mib": 1,
                                          "compute_capability": 9.0}] * 2), "facts.gpus[1].index"),
        ("a thousand GPUs", good_facts(gpus=[{"index": i, "name": "B200", "uuid": "u", "memory_total_mib": 1,
                                              "compute_capability": 9.0} for i in range(1000)]), "facts.gpus"),
        ("an escape in the NVLink matrix", good_facts(nvlink=[["X", "NV18\x1b[5m"]]), "facts.nvlink[0][1]"),
        ("simulated as text", good_facts(simulated="no"), "facts.simulated"),
        ("a missing GPU list", {k: v for k, v in good_facts().items() if k != "gpus"}, "facts.gpus"),
    ])
    def test_facts_are_typed_ranged_and_printable(self, what: str, facts: Any, field: str) -> None:
        with pytest.raises(InputError) as caught:
            read_facts(facts_text(facts), "gpu-b: hosts facts --json")
        text = one_line(caught.value)
        assert text.startswith("gpu-b: hosts facts --json: ") and caught.value.field == field, (text,
                                                                                                caught.value.field)

    def test_facts_that_are_no_json_or_a_bomb_are_one_line(self) -> None:
        for text in ("\x1b[2J\x1b]0;owned\x07", '{"format": 1, "facts": ' + "[" * 100_000, '{"format": 1e999}',
                     json.dumps({"format": 1, "facts": good_facts()}).replace("183359", "NaN", 1), "\xff\xfe",
                     json.dumps({"format": 1, "facts": good_facts()}).replace("183359", "1" * 5000, 1)):
            with pytest.raises(InputError) as caught:
                read_facts(text, "gpu-b: hosts facts --json")
            assert one_line(caught.value).startswith("gpu-b: hosts facts --json")

    def test_an_error_text_in_the_facts_is_kept_as_data(self) -> None:
        facts = read_facts(facts_text(good_facts(vllm={"executable": "vllm", "resolved": None, "version": None,
                                                       "error": "Traceback\n\x1b[31mImportError\x1b[0m"})), "x")
        assert facts.vllm is not None and facts.vllm.error is not None and "\x1b" in facts.vllm.error
        assert read_facts(facts_text(good_facts(from_a_newer_version=[1])), "x").hostname == "gpu-b"

    def test_facts_through_ssh_with_a_hostile_hostname_are_refused(self, tmp_path: Path) -> None:
        t = remote(tmp_path, f"print({facts_text(good_facts(hostname='a' + chr(27) + ']52;c;AAAA' + chr(7)))!r})\n")
        with pytest.raises(InputError) as caught:
            _ = RemoteHost(t).facts
        assert one_line(caught.value).startswith("gpu-b: hosts facts --json: field 'facts.hostname': a control "
                                                 "character")

    @pytest.mark.parametrize(("what", "answer", "field"), [
        ("an escape in a server name", plan_answer(name="p\x1b[2J"), "plan.servers[0].name"),
        ("a newline in an argv word", plan_answer(argv=["vllm", "serve", "m\n--trust-remote-code"]),
         "plan.servers[0].argv[2]"),
        ("a variable name with '='", plan_answer(env={"A=B": "1"}), "plan.servers[0].env"),
        ("an escape in a variable's value", plan_answer(env={"A": "\x1b]52;c;AA\x07"}), "plan.servers[0].env.A"),
        ("GPUs as text", plan_answer(gpus="0,1"), "plan.servers[0].gpus"),
        ("a GPU twice", plan_answer(gpus=[0, 0]), "plan.servers[0].gpus"),
        ("a URL that is no URL", plan_answer(url="javascript:alert(1)"), "plan.servers[0].url"),
        ("a URL on another host", plan_answer(url="http://169.254.169.254:80"), "plan.servers[0].url"),
        ("simulated as text", {**plan_answer(), "plan": {**plan_answer()["plan"], "simulated": "false"}},
         "plan.simulated"),
        ("a check of no status", {**plan_answer(), "preflight": [{"name": "x", "status": "ok", "reason": ""}]},
         "preflight[0].status"),
        ("a check named with an escape", {**plan_answer(), "preflight": [{"name": "\x1b[8m", "status": "pass",
                                                                          "reason": ""}]}, "preflight[0].name"),
        ("a server twice", {**plan_answer(), "plan": {**plan_answer()["plan"],
                                                      "servers": plan_answer()["plan"]["servers"] * 2}},
         "plan.servers[1].name"),
    ])
    def test_a_plan_answer_is_typed_and_its_names_printable(self, what: str, answer: Any, field: str) -> None:
        with pytest.raises(InputError) as caught:
            read_remote_plan("gpu-b", json.dumps(answer), "10.0.0.2")
        assert caught.value.field == field and one_line(caught.value).startswith("gpu-b: plan --json: "), (
            caught.value.field, one_line(caught.value))

    def test_a_good_plan_answer_reads(self) -> None:
        p = read_remote_plan("gpu-b", json.dumps(plan_answer()), "10.0.0.2")
        assert p.servers[0].url == "http://10.0.0.2:8100" and p.simulated is True
        v6 = read_remote_plan("gpu-b", json.dumps(plan_answer(url="http://[fd00::2]:8100")), "fd00:0::2")
        assert v6.servers[0].url == "http://[fd00::2]:8100"

    def test_a_status_label_with_an_escape_is_a_warning_naming_the_field(self, tmp_path: Path) -> None:
        status = {"snapshot": {"host": {"label": "real host \x1b]0;owned\x07"}}, "layouts": []}
        t = remote(tmp_path, f"print({json.dumps(status)!r})\n")
        check = _host_line(t, 10)
        assert check.status == WARN and "field 'snapshot.host.label': a control character" in check.reason
        good = {"snapshot": {"host": {"label": "real host gpu-b"}}, "layouts": [{}]}
        t2 = remote(tmp_path, f"print({json.dumps(good)!r})\n", name="gpu-c")
        assert _host_line(t2, 10).status == PASS


# --- rule 3 --------------------------------------------------------------------------------------------------------

WILDCARDS = ["0", "0.0.0.0", "::", "::0", "[::]", "0:0::0", "::ffff:0.0.0.0", "::ffff:0:0", "000.0.0.0", "0x0",
             "00", "0.0", "0.0.0", "0x00000000", "0000:0000:0000:0000:0000:0000:0000:0000", "::0.0.0.0", "0::",
             " 0.0.0.0 ", "", "0.00.0.0", "[0::0]", "::%lo", "0X0"]
NOT_WILDCARDS = ["10.0.0.2", "0.0.0.1", "::1", "127.0.0.1", "gpu-b", "0.0.0.0.", "08", "256.0.0.0", "0.0.0.0/0",
                 "1", "::2", "64:ff9b::", "2002::", "fe80::1", "localhost", "0.0.0.0 junk", "zero"]


def _os_address(text: str) -> str | None:
    """What ``getaddrinfo`` reads ``text`` as, numerically (no DNS); None when it reads no address."""
    try:
        return str(socket.getaddrinfo(text, None, flags=socket.AI_NUMERICHOST)[0][4][0])
    except (OSError, UnicodeError, ValueError):
        return None


class TestWildcardAddresses:
    """The wildcard is recognised by parsing, as the OS reads an address, and refused wherever another host is told
    one (the inventory's address, --advertise, --dp-address, --peer, a remote plan's URLs)."""

    @pytest.mark.parametrize("text", WILDCARDS)
    def test_each_spelling_is_the_wildcard(self, text: str) -> None:
        assert netaddr.is_wildcard(text)
        assert netaddr.is_loopback(netaddr.connect_host(text))

    @pytest.mark.parametrize("text", NOT_WILDCARDS)
    def test_what_is_not(self, text: str) -> None:
        assert not netaddr.is_wildcard(text)

    def test_it_agrees_with_getaddrinfo_on_every_numeric_spelling(self) -> None:
        rng = random.Random(32)
        alphabet = "0001x.:f[]7"
        tried = agree = 0
        for _ in range(20_000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
            seen = _os_address(text)
            if seen is None:
                continue
            tried += 1
            os_wild = seen in ("0.0.0.0", "::", "::ffff:0.0.0.0")
            assert netaddr.is_wildcard(text) == os_wild, (text, seen)
            assert netaddr.is_loopback(text) == (seen.startswith("127.") or seen in ("::1", "::ffff:127.0.0.1")
                                                 or seen.startswith("::ffff:127.")), (text, seen)
            agree += 1
        assert tried > 200 and agree == tried

    @pytest.mark.parametrize("text", ["0", "::0", "0x0", "[::]", "::ffff:0.0.0.0"])
    def test_the_inventory_refuses_a_wildcard_address(self, text: str) -> None:
        from tui.core.remote import inventory

        with pytest.raises(InputError) as caught:
            inventory.parse({"hosts": {"gpu-b": {"ssh": "gpu-b", "address": text}}}, Path("hosts.yaml"))
        assert caught.value.field == "hosts.gpu-b.address", one_line(caught.value)
        assert "wildcard" in one_line(caught.value) or "not an IP address or a host name" in one_line(caught.value)
        entry = HostEntry(name="gpu-b", ssh="ops@0.0.0.0")
        with pytest.raises(InputError, match="wildcard"):
            entry.routable_address()

    @pytest.mark.parametrize("text", ["0", "::0", "0.0", "0:0::0"])
    def test_a_layout_across_hosts_refuses_it(self, text: str) -> None:
        from tui.core.plan.cluster import check_address

        with pytest.raises(InputError, match="not an address the other hosts reach"):
            check_address("gpu-b", text)

    @pytest.mark.parametrize(("flag", "value"), [("--advertise", "0"), ("--advertise", "::0"),
                                                 ("--dp-address", "0x0"), ("--dp-address", "::ffff:0.0.0.0"),
                                                 ("--peer", "prefill=http://0:8100"),
                                                 ("--peer", "decode=http://[::]:8200")])
    def test_the_addresses_other_hosts_are_told_refuse_it(self, flag: str, value: str) -> None:
        res = run_cli(["plan", "--sim", "--model", "qwen3.6-27b-nvfp4", "--topology", "1p1d", flag, value])
        assert res.code == 2 and no_traceback(res), res.err
        assert "wildcard" in res.err and len(res.err_lines) <= 2, res.err

    @pytest.mark.parametrize("url", ["http://0:8100", "http://[::]:8100", "http://0x0:8100", "http://[::0]:8100",
                                     "http://0.0:8100", "http://[::ffff:0.0.0.0]:8100"])
    def test_a_remote_plan_that_advertises_it_is_refused(self, url: str) -> None:
        with pytest.raises(InputError) as caught:
            read_remote_plan("gpu-b", json.dumps(plan_answer(url=url)))
        assert caught.value.field == "plan.servers[0].url" and "wildcard" in one_line(caught.value)

    def test_a_server_bound_on_any_spelling_is_reached_on_loopback(self) -> None:
        from tui.core.plan.spec import ProxySpec

        for text in ("0", "0.0.0.0", "", "::0", "[::]"):
            url = ProxySpec(host=text, port=8000, prefill=(), decode=()).url
            assert url in ("http://127.0.0.1:8000", "http://[::1]:8000"), (text, url)
