"""``hosts check``: is a host of the inventory reachable, which ``disagg-tui`` and ``vllm`` it runs, what it is,
and whether its clock agrees with this one, each as one :class:`~tui.core.plan.preflight.Check`."""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from dataclasses import dataclass

from tui.core import safeio, typedread
from tui.core.errors import InputError
from tui.core.plan.preflight import FAIL, PASS, WARN, Check
from tui.core.remote.ssh import (
    MAX_STDERR,
    AnswerTooLarge,
    RemoteResult,
    SshTransport,
    Unreachable,
    classify,
    last_line,
)

#: clocks further apart than this are a warning (events of two hosts would not line up on one time axis)
CLOCK_WARN_S = 0.5
#: round trips the clock is read over (the shortest is used)
CLOCK_SAMPLES = 5
_VERSION = re.compile(r"\b(\d+\.\d+(?:\.\d+)?(?:[.+-][0-9A-Za-z.+-]*)?)\b")
#: bytes of a ``--version`` answer read at most, of a ``status --json`` answer, of one clock reading's line
MAX_VERSION_ANSWER = 64 * 1024
MAX_STATUS_ANSWER = 4 * 1024 * 1024
MAX_CLOCK_LINE = 64


@dataclass(frozen=True, slots=True)
class Reference:
    """What the remote versions are compared with: this host's (None: not known here, nothing compared)."""

    disagg_tui: str | None
    vllm: str | None


@dataclass(frozen=True, slots=True)
class ClockReading:
    offset_s: float  # remote minus local, at the middle of the round trip
    rtt_s: float


def version_in(text: str) -> str | None:
    line = last_line(text)
    m = _VERSION.search(line)
    return m.group(1) if m else None


def read_clock(transport: SshTransport, samples: int = CLOCK_SAMPLES, timeout_s: float = 10.0) -> ClockReading:
    """The remote clock's offset from this one, as NTP reads it: one remote shell answers each line sent with
    ``date +%s.%N``; the offset is against the middle of that round trip here, over the shortest of ``samples``
    (no process start or SSH handshake inside a round trip: only the link and one ``date``)."""
    proc = transport.open(["sh", "-c", "while read -r _; do date +%s.%N; done"])
    best: ClockReading | None = None
    assert proc.stdin is not None
    assert proc.stdout is not None
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    done = False
    try:
        for _ in range(samples):
            t0 = time.time()
            proc.stdin.write(b"x\n")
            proc.stdin.flush()
            line = proc.stdout.readline(MAX_CLOCK_LINE)  # an endless line is cut here, not held
            t1 = time.time()
            text = line.decode("utf-8", "replace").strip()
            if not line.endswith(b"\n") and line:
                text = text[:20] + "…"  # longer than any date +%s.%N: refused below
            if not re.fullmatch(r"\d{1,12}(?:\.\d{1,9})?", text):
                err = proc.stderr.read(MAX_STDERR).decode("utf-8", "replace") if proc.stderr and not line else ""
                found = classify(err)
                if found is not None:
                    raise Unreachable(transport.name, *found)
                raise InputError(f"{transport.name}: 'date +%s.%N' answered "
                                 f"{safeio.shown(text or last_line(err) or 'nothing', 80)!r}")
            reading = ClockReading(offset_s=float(text) - (t0 + t1) / 2, rtt_s=t1 - t0)
            if best is None or reading.rtt_s < best.rtt_s:
                best = reading
        done = True
    except (BrokenPipeError, OSError):
        raise Unreachable(transport.name, "closed", "the clock's session ended") from None
    finally:
        timer.cancel()
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(2 if done else 0)  # a clock gone wrong is stopped at once
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert best is not None
    return best


def _versions_line(name: str, there: str | None, here: str | None, res: RemoteResult, what: str,
                   *, missing_ok: str | None = None) -> Check:
    if res.rc == 127 or (res.rc != 0 and there is None):
        if missing_ok is not None:
            return Check(name, PASS, missing_ok)
        why = last_line(res.stderr) or f"exit status {res.rc}"
        return Check(name, FAIL, f"{what} does not run there: {why}")
    if there is None:
        return Check(name, WARN, f"{what} answered no version: {safeio.shown(last_line(res.stdout), 80)!r}")
    if here is not None and there != here:
        return Check(name, WARN, f"{there} there, {here} here: versions differ (a layout across these hosts needs "
                                 "the same)")
    return Check(name, PASS, there + (" (same as here)" if here is not None else ""))


def check_host(transport: SshTransport, ref: Reference, *, timeout_s: float = 20.0) -> list[Check]:
    """The checks of one host: ``reach`` first; when it fails, that one line is the whole answer."""
    entry = transport.entry
    t0 = time.monotonic()
    try:
        first = transport.run([*entry.disagg_tui, "--version"], timeout_s=timeout_s, max_bytes=MAX_VERSION_ANSWER)
    except Unreachable as exc:
        return [Check("reach", FAIL, f"unreachable ({exc.reason}): {exc.one_line().split(': ', 2)[-1]}")]
    except AnswerTooLarge as exc:
        return [Check("reach", FAIL, exc.title)]
    dest = entry.ssh + (f" port {entry.port}" if entry.port else "") + (f" via {entry.jump}" if entry.jump else "")
    out = [Check("reach", PASS, f"ssh {dest} in {time.monotonic() - t0:.2f} s")]
    try:
        out.append(_versions_line("disagg-tui", version_in(first.stdout), ref.disagg_tui, first,
                                  f"{' '.join(entry.disagg_tui)}"))
        vres = transport.run([entry.vllm, "--version"], timeout_s=timeout_s, max_bytes=MAX_VERSION_ANSWER)
        out.append(_versions_line("vllm", version_in(vres.stdout), ref.vllm, vres, entry.vllm,
                                  missing_ok="none there (a simulated host needs none)" if entry.sim else None))
        out.append(_host_line(transport, timeout_s))
        out.append(_clock_line(transport))
    except Unreachable as exc:  # lost half-way
        out.append(Check("reach", FAIL, f"lost ({exc.reason}): {exc.one_line().split(': ', 2)[-1]}"))
    except AnswerTooLarge as exc:  # a command that would not stop talking: stopped, and so is the check
        out.append(Check("reach", FAIL, exc.title))
    return out


def _host_line(transport: SshTransport, timeout_s: float) -> Check:
    res = transport.run(transport.entry.remote_cli("status", "--json"), timeout_s=timeout_s,
                        max_bytes=MAX_STATUS_ANSWER)
    if not res.ok:
        return Check("host", FAIL, f"'disagg-tui status --json' failed there: {last_line(res.stderr) or res.rc}")
    try:
        data = safeio.parse_json(res.stdout, f"{transport.name}: status --json")
        label = data["snapshot"]["host"]["label"]
        typedread.check_text(label, ("snapshot.host.label",), limit=1024)
        layouts = data.get("layouts") or []
        n = len(layouts) if isinstance(layouts, list) else 0
    except typedread.FieldError as exc:
        return Check("host", WARN, f"'disagg-tui status --json' answered {exc.text()}")
    except (InputError, KeyError, TypeError, AttributeError):
        return Check("host", WARN, "'disagg-tui status --json' answered what this version does not read")
    gpus = transport.entry.gpus
    use = f"; GPUs {','.join(map(str, gpus))} to use" if gpus else ""
    return Check("host", PASS, f"{safeio.shown(label, 200)}; {n} layout{'s' if n != 1 else ''} running{use}")


def _clock_line(transport: SshTransport) -> Check:
    try:
        c = read_clock(transport)
    except InputError as exc:
        return Check("clock", WARN, exc.one_line())
    ahead = "ahead of" if c.offset_s > 0 else "behind"
    text = f"{abs(c.offset_s):.3f} s {ahead} this host (± {c.rtt_s / 2:.3f} s, round trip {c.rtt_s * 1000:.0f} ms)"
    if abs(c.offset_s) > CLOCK_WARN_S:
        return Check("clock", WARN, text + f": beyond {CLOCK_WARN_S:g} s, the hosts' events will not line up "
                                           "(hint: run chrony or another NTP client on both)")
    if c.rtt_s / 2 > CLOCK_WARN_S:
        return Check("clock", WARN, text + ": the round trip is too slow to tell")
    return Check("clock", PASS, text)
