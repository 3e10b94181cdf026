"""Commands on another host over OpenSSH's own ``ssh`` (no new dependency; the operator's keys, agent, known hosts
and ``~/.ssh/config`` apply as they do in a terminal).

Short commands share one connection per host (``ControlMaster=auto``, a socket in a 0700 folder of ours,
``ControlPersist=60``): the first costs a handshake, the next a few milliseconds. ``BatchMode=yes`` (never a
prompt: a missing key is an ``auth`` failure, an unknown host key a ``host-key`` one), ``-T`` (no terminal), the
remote argv quoted with :func:`shlex.join` for the remote shell and the destination after ``--`` (no
inventory value is ever read as an option). A failure to reach the host is an :class:`Unreachable` with a
one-word reason and a one-line detail.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shlex
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tui.core import paths
from tui.core.errors import EXIT_FAILED, AppError, printable
from tui.core.remote.inventory import HostEntry

#: seconds ssh waits for the TCP connection and the SSH handshake
CONNECT_TIMEOUT_S = 5
#: keep-alives: a dead link is noticed after about INTERVAL * COUNT seconds
ALIVE_INTERVAL_S = 1
ALIVE_COUNT = 3
#: seconds an idle shared connection stays open
CONTROL_PERSIST_S = 60
#: bytes of a remote command's answer (stdout) read at most, unless the caller names its own cap: past it the command
#: is stopped (ssh killed) and the answer refused. Checked while reading: nothing beyond the cap is ever held.
MAX_OUTPUT = 1024 * 1024
#: the last bytes of a command's stderr kept (its last lines say why it failed), and the most read of it at all
MAX_STDERR = 64 * 1024
MAX_STDERR_READ = 1024 * 1024
#: bytes read from a pipe at a time
_CHUNK = 64 * 1024
#: the longest a unix socket path may be (sun_path is 108 bytes on Linux; ssh adds a random suffix while binding)
_SOCKET_PATH_MAX = 90

#: ssh's own messages on stderr → the reason, first match wins
_REASONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("host-key", re.compile(r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED|"
                            r"No (?:RSA|ED25519|ECDSA)? ?host key is known", re.I)),
    ("auth", re.compile(r"Permission denied|Too many authentication failures|no mutual signature", re.I)),
    ("refused", re.compile(r"Connection refused", re.I)),
    ("timeout", re.compile(r"timed out|Timeout, server .* not responding", re.I)),
    ("dns", re.compile(r"Could not resolve hostname|Name or service not known|nodename nor servname", re.I)),
    ("network", re.compile(r"No route to host|Network is unreachable|Host is down", re.I)),
    ("closed", re.compile(r"Connection (?:closed|reset)|Broken pipe|kex_exchange_identification|"
                          r"client_loop: send disconnect|Connection to .* closed", re.I)),
)
_WHAT = {
    "host-key": "the host key is unknown or changed (check it, then add it with ssh-keyscan or one ssh login)",
    "auth": "authentication failed (no key the host accepts: ssh-add one, or set IdentityFile in ~/.ssh/config)",
    "refused": "connection refused (no SSH server on that address and port)",
    "timeout": "no answer in time",
    "dns": "the name does not resolve",
    "network": "no route to the host",
    "closed": "the connection was closed",
}


class Unreachable(AppError):
    """A host that ssh could not reach (or lost): ``reason`` one word, ``detail`` ssh's own line."""

    exit_code = EXIT_FAILED

    def __init__(self, host: str, reason: str, detail: str = "") -> None:
        self.host = host
        self.reason = reason
        self.detail = printable(detail)[:300]
        what = _WHAT.get(reason, reason)
        super().__init__(f"{host}: unreachable: {what}" + (f" — {self.detail}" if self.detail else ""))


def size_text(n: int) -> str:
    """``1 MiB``, ``64 KiB``, ``300 bytes``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"


class AnswerTooLarge(AppError):
    """A remote command that said more than its cap (stopped as soon as it did): one line naming the command and
    the host (``answer of `hosts facts --json` from gpu-b exceeded 1 MiB``)."""

    exit_code = EXIT_FAILED

    def __init__(self, host: str, what: str, limit: int, *, stream: str = "answer") -> None:
        self.host = host
        self.what = what
        self.limit = limit
        super().__init__(f"{stream} of `{what}` from {host} exceeded {size_text(limit)}",
                         "the remote side sent far more than this command ever prints: is its disagg-tui of this "
                         "version, and its shell quiet (no banner from .bashrc)?")


def classify(stderr: str) -> tuple[str, str] | None:
    """The reason and the line of ssh's stderr that says why it could not reach the host; None when it says
    nothing of the kind (the remote command's own error)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for reason, pattern in _REASONS:
        for ln in lines:
            if pattern.search(ln):
                return reason, ln
    return None


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return printable(lines[-1])[:300] if lines else ""


@dataclass(frozen=True, slots=True)
class RemoteResult:
    rc: int
    stdout: str
    stderr: str
    seconds: float  # the whole round trip as seen here

    @property
    def ok(self) -> bool:
        return self.rc == 0


def _private_dir(path: Path) -> Path | None:
    """``path`` as a folder of ours alone (made 0700; refused when it is a link, someone else's, or open to
    others)."""
    try:
        paths.make_dirs(path)
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return path


def control_dir(preferred: Path | None = None) -> Path | None:
    """Where the shared connections' sockets live: ``<state>/ssh``, or (when that path is too long for a socket)
    a 0700 folder of ours in the temporary directory; None when neither is safe (then nothing is shared)."""
    for candidate in (preferred or paths.state_dir() / "ssh",
                      Path(tempfile.gettempdir()) / f"disagg-tui-{os.getuid()}-ssh"):
        if len(str(candidate)) + 42 <= _SOCKET_PATH_MAX:  # "/%C": 40 hex digits
            d = _private_dir(candidate)
            if d is not None:
                return d
    return None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Stop a command's ssh (its own process group: a ProxyJump's ssh with it; a shared master has detached into
    its own session and stays) and reap it, its pipes closed: nothing more is read."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            with contextlib.suppress(OSError):
                proc.kill()
    proc.wait()
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()


def read_capped(proc: subprocess.Popen[bytes], max_bytes: int, deadline: float
                ) -> tuple[bytearray, bytearray, str | None]:
    """``proc``'s stdout and stderr read as they come until both end and it exits: at most ``max_bytes`` of stdout
    and :data:`MAX_STDERR_READ` of stderr (its last :data:`MAX_STDERR` kept). The third item says why reading
    stopped early (the caller stops the command): ``"answer"`` or ``"errors"`` past its cap, ``"timeout"`` past
    ``deadline`` (a monotonic time); None when the command ended within both."""
    assert proc.stdout is not None
    assert proc.stderr is not None
    out = bytearray()
    err = bytearray()
    err_total = 0
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, "answer")
        sel.register(proc.stderr, selectors.EVENT_READ, "errors")
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return out, err, "timeout"
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, _CHUNK)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.data == "answer":
                    out += chunk
                    if len(out) > max_bytes:
                        return out, err, "answer"
                else:
                    err_total += len(chunk)
                    err += chunk
                    if len(err) > 2 * MAX_STDERR:
                        del err[:-MAX_STDERR]
                    if err_total > MAX_STDERR_READ:
                        return out, err, "errors"
    try:
        proc.wait(max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        return out, err, "timeout"
    return out, err, None


class SshTransport:
    """One inventory host, reached with ``ssh``."""

    def __init__(self, entry: HostEntry, *, ssh_config: Path | None = None, control: Path | None = None,
                 ssh: str = "ssh", connect_timeout_s: int = CONNECT_TIMEOUT_S) -> None:
        self.entry = entry
        self.ssh_config = ssh_config
        self.ssh = ssh
        self.connect_timeout_s = connect_timeout_s
        self._control = control

    @property
    def name(self) -> str:
        return self.entry.name

    def _control_path(self) -> str | None:
        if self._control is None:
            self._control = control_dir()
        return str(self._control / "%C") if self._control is not None else None

    def base_argv(self, *, shared: bool = True) -> list[str]:
        """ssh and its options up to the destination (``--`` ends them)."""
        argv = [self.ssh, "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s}",
                "-o", f"ServerAliveInterval={ALIVE_INTERVAL_S}", "-o", f"ServerAliveCountMax={ALIVE_COUNT}",
                "-o", "LogLevel=ERROR"]
        if self.ssh_config is not None:
            argv += ["-F", str(self.ssh_config)]
        control = self._control_path() if shared else None
        if control is not None:
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={control}",
                     "-o", f"ControlPersist={CONTROL_PERSIST_S}"]
        else:
            argv += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
        if self.entry.port is not None:
            argv += ["-p", str(self.entry.port)]
        if self.entry.jump is not None:
            argv += ["-J", self.entry.jump]
        return argv

    def argv(self, remote: list[str], *, shared: bool = True) -> list[str]:
        """The local argv that runs ``remote`` (a list of words, quoted here for the remote shell) on the host."""
        return [*self.base_argv(shared=shared), "--", self.entry.ssh, shlex.join(remote)]

    def what(self, remote: list[str]) -> str:
        """A remote command in words for an error (``hosts facts --json``: its own disagg-tui words and ``--sim``
        left out), printable and short."""
        words = list(remote)
        cli = list(self.entry.disagg_tui)
        if words[:len(cli)] == cli and len(words) > len(cli):
            words = words[len(cli):]
            if self.entry.sim and words[-1:] == ["--sim"]:
                words = words[:-1]
        return printable(shlex.join(words))[:80]

    def run(self, remote: list[str], *, timeout_s: float = 20.0, shared: bool = True,
            max_bytes: int = MAX_OUTPUT) -> RemoteResult:
        """Run ``remote`` there and wait for it (at most ``timeout_s``): its exit status and output. Its answer is
        read as it comes, at most ``max_bytes`` of it (and :data:`MAX_STDERR_READ` of its stderr): past that the
        command is stopped and :class:`AnswerTooLarge` raised. Raises :class:`Unreachable` when ssh could not reach
        the host or lost it, or the command did not end in time."""
        argv = self.argv(remote, shared=shared)
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise Unreachable(self.name, "ssh-missing", f"cannot run {self.ssh}: {exc.strerror}") from None
        try:
            out, err, over = read_capped(proc, max_bytes, t0 + timeout_s)
        finally:
            _kill(proc)  # ended already (reaped), or stopped here: past its cap or its time
        if over == "timeout":
            self.drop_shared()  # a master stuck on a dead link would hold every next command too
            found = classify(bytes(err[-MAX_STDERR:]).decode("utf-8", "replace"))
            raise Unreachable(self.name, "timeout", found[1] if found else f"no answer within {timeout_s:g} s")
        if over is not None:
            raise AnswerTooLarge(self.name, self.what(remote), max_bytes if over == "answer" else MAX_STDERR_READ,
                                 stream=over)
        seconds = time.monotonic() - t0
        text_err = bytes(err[-MAX_STDERR:]).decode("utf-8", "replace")
        if proc.returncode == 255:
            found = classify(text_err)
            self.drop_shared()
            if found is not None:
                raise Unreachable(self.name, *found)
            raise Unreachable(self.name, "ssh-failed", last_line(text_err) or "ssh exited 255")
        return RemoteResult(rc=proc.returncode, stdout=bytes(out).decode("utf-8", "replace"),
                            stderr=text_err, seconds=seconds)

    def open(self, remote: list[str], *, shared: bool = True) -> subprocess.Popen[bytes]:
        """Start ``remote`` there with pipes to its stdin and stdout (a conversation: the clock's pings)."""
        try:
            return subprocess.Popen(self.argv(remote, shared=shared), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise Unreachable(self.name, "ssh-missing", f"cannot run {self.ssh}: {exc.strerror}") from None

    def drop_shared(self) -> None:
        """Close this host's shared connection (``ssh -O exit``), if one is open: the next command connects
        afresh."""
        control = self._control_path()
        if control is None:
            return
        argv = [*self.base_argv(shared=True), "-O", "exit"]
        try:
            subprocess.run([*argv, "--", self.entry.ssh], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=5, check=False)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def close(self) -> None:
        self.drop_shared()
