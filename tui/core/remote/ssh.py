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

import os
import re
import shlex
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
#: bytes of a remote command's output kept (stdout; stderr keeps its last 64 KiB)
MAX_OUTPUT = 16 * 1024 * 1024
MAX_STDERR = 64 * 1024
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

    def run(self, remote: list[str], *, timeout_s: float = 20.0, shared: bool = True) -> RemoteResult:
        """Run ``remote`` there and wait for it (at most ``timeout_s``): its exit status and output. Raises
        :class:`Unreachable` when ssh could not reach the host or lost it, or the command did not end in time."""
        argv = self.argv(remote, shared=shared)
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise Unreachable(self.name, "ssh-missing", f"cannot run {self.ssh}: {exc.strerror}") from None
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            self.drop_shared()  # a master stuck on a dead link would hold every next command too
            found = classify(err.decode("utf-8", "replace"))
            raise Unreachable(self.name, "timeout", found[1] if found else f"no answer within {timeout_s:g} s") \
                from None
        seconds = time.monotonic() - t0
        text_err = err[-MAX_STDERR:].decode("utf-8", "replace")
        if proc.returncode == 255:
            found = classify(text_err)
            self.drop_shared()
            if found is not None:
                raise Unreachable(self.name, *found)
            raise Unreachable(self.name, "ssh-failed", last_line(text_err) or "ssh exited 255")
        return RemoteResult(rc=proc.returncode, stdout=out[:MAX_OUTPUT].decode("utf-8", "replace"),
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
