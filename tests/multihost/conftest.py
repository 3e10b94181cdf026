"""Test hosts as network namespaces on this machine: each its own loopback and a veth pair to the root namespace
(``10.X.N.2`` there; every veth on one bridge here, ``10.X.0.1``, X free on this host, so the hosts reach
each other too), an OpenSSH ``sshd`` on that address with a throwaway
host key and a key made for the test, and the simulated host (``--sim``) with its own state, data and config dirs,
run by this checkout's ``disagg-tui`` over SSH. Needs root, ``ip netns`` and ``sshd``; skipped otherwise, except
under ``CI=true`` (then a missing piece fails, so CI cannot skip these silently). Everything made is torn down in
finalizers: the processes in each namespace, the namespaces (and with them the veth pairs), the SSH masters.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
DISAGG_TUI = REPO / ".venv" / "bin" / "disagg-tui"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"multihost tests cannot run under CI=true: {reason}")
    pytest.skip(reason)


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=20)


@dataclass
class NsHost:
    """One test host: a namespace, its address, its sshd (None when not started) and its dirs."""

    name: str
    ns: str
    veth: str  # the root namespace's end
    addr: str
    root: Path
    vllm_version: str | None
    sshd: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    def start_sshd(self, host_key: Path, authorized: Path) -> None:
        cfg = self.root / "sshd_config"
        setenv = " ".join(f"{k}={v}" for k, v in self.env.items())
        cfg.write_text(
            f"ListenAddress {self.addr}\nPort 22\nHostKey {host_key}\nPidFile {self.root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {authorized}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nPubkeyAuthentication yes\n"
            f"ClientAliveInterval 1\nClientAliveCountMax 3\nMaxStartups 50\nSetEnv {setenv}\n")
        log = open(self.root / "sshd.log", "ab")  # noqa: SIM115 - the child holds it
        self.sshd = subprocess.Popen(["ip", "netns", "exec", self.ns, SSHD, "-D", "-e", "-f", str(cfg)],
                                     stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            probe = _sh("ip", "netns", "exec", self.ns, "ss", "-ltnH", "sport = :22", check=False)
            if self.addr in probe.stdout:
                return
            if self.sshd.poll() is not None:
                raise RuntimeError(f"sshd in {self.ns} exited: {(self.root / 'sshd.log').read_text()[-500:]}")
            time.sleep(0.05)
        raise RuntimeError(f"sshd in {self.ns} did not listen within 10 s")

    def kill_all(self) -> None:
        """Every process in this namespace (its sshd, the sessions' sshd children and their remote commands)."""
        if self.sshd is not None and self.sshd.poll() is None:
            self.sshd.kill()
        pids = _sh("ip", "netns", "pids", self.ns, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        if self.sshd is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.sshd.wait(5)
        self.sshd = None


@dataclass
class Lab:
    hosts: dict[str, NsHost]
    tmp: Path
    client_key: Path
    ssh_config: Path
    local_env: dict[str, str]
    host_key: Path
    authorized: Path

    def inventory(self, text: str) -> Path:
        path = Path(self.local_env["DISAGG_TUI_CONFIG_DIR"]) / "hosts.yaml"
        path.write_text(text)
        return path

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True,
                              env=self.local_env, cwd=REPO, timeout=timeout)


def _require() -> None:
    if os.geteuid() != 0:
        _unavailable("not root: network namespaces need it")
    if shutil.which("ip") is None:
        _unavailable("no 'ip' (iproute2)")
    if not os.path.exists(SSHD):
        _unavailable("no OpenSSH server (apt-get install openssh-server)")
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        _unavailable("no OpenSSH client (ssh, ssh-keygen)")
    if not DISAGG_TUI.exists():
        _unavailable(f"no {DISAGG_TUI} (make the venv)")


HOSTS = (("a", 1, "0.24.0"), ("b", 2, "0.23.1"), ("c", 3, None), ("d", 4, "0.24.0"))  # c: no sshd


def _free_net() -> int:
    """A second octet X whose 10.X.0.0/16 no interface of this host uses, starting from this process's own (two
    pytest workers, or two suites, never pick the same one at once)."""
    used = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    start = 64 + os.getpid() % 180
    for k in range(180):
        x = 64 + (start - 64 + k) % 180
        if f" 10.{x}." not in used:
            return x
    _unavailable("no free 10.X.0.0/16 for the namespaces")
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    _require()
    tag = f"{os.getpid() % 100000}"
    net = _free_net()  # each lab its own 10.X.0.0/16: two test workers make a lab each at once
    # short: the SSH control sockets live under the local state dir (a unix socket path is at most 108 bytes)
    tmp = Path(tempfile.mkdtemp(prefix="dtmh"))
    made: list[NsHost] = []
    bridge = f"dtb{tag}"
    try:
        # one L2 segment: every namespace's veth on a bridge here (10.X.0.1), so the hosts reach each other (a layout
        # across hosts) and this namespace reaches them, with no IP forwarding turned on in it
        _sh("ip", "link", "add", bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"10.{net}.0.1/16", "dev", bridge)
        _sh("ip", "link", "set", bridge, "up")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
        host_key = tmp / "host_key"
        client_key = tmp / "client_key"
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key))
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(client_key))
        authorized = tmp / "authorized_keys"
        authorized.write_text((tmp / "client_key.pub").read_text())
        pub = (tmp / "host_key.pub").read_text().split()
        known = []
        cfg_lines = ["Host *", f"  IdentityFile {client_key}", "  IdentitiesOnly yes",
                     f"  UserKnownHostsFile {tmp / 'known_hosts'}", "  StrictHostKeyChecking yes", "  User root",
                     "  GlobalKnownHostsFile /dev/null"]
        for name, n, version in HOSTS:
            ns = f"dtmh{tag}{name}"
            veth = f"dtv{tag}{name}"
            h = NsHost(name=name, ns=ns, veth=veth, addr=f"10.{net}.{n}.2", root=tmp / name, vllm_version=version)
            h.root.mkdir()
            try:
                _sh("ip", "netns", "add", ns)
            except subprocess.CalledProcessError as exc:
                _unavailable(f"ip netns add failed: {exc.stderr.strip()}")
            made.append(h)
            _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _sh("ip", "link", "set", veth, "master", bridge)
            _sh("ip", "link", "set", veth, "up")
            _sh("ip", "-n", ns, "addr", "add", f"10.{net}.{n}.2/16", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            for d in ("state", "data", "config"):
                (h.root / d).mkdir()
            h.env = {"DISAGG_TUI_STATE_DIR": str(h.root / "state"), "DISAGG_TUI_DATA_DIR": str(h.root / "data"),
                     "DISAGG_TUI_CONFIG_DIR": str(h.root / "config"), "PYTHONDONTWRITEBYTECODE": "1",
                     # a home of its own: the root account's shell start-up files are not the test's (bash reads
                     # ~/.bashrc for a command over SSH)
                     "HOME": str(h.root)}
            if version is not None:
                fake = h.root / "vllm"
                fake.write_text(f"#!/bin/sh\necho {version}\n")
                fake.chmod(0o755)
            known.append(f"{h.addr} {pub[0]} {pub[1]}")
            cfg_lines += [f"Host ns-{name}", f"  HostName {h.addr}"]
        (tmp / "known_hosts").write_text("\n".join(known) + "\n")
        ssh_config = tmp / "ssh_config"
        ssh_config.write_text("\n".join(cfg_lines) + "\n")
        for h in made:
            if h.vllm_version is not None:
                h.start_sshd(host_key, authorized)
        local = tmp / "local"
        env = {k: v for k, v in os.environ.items() if not k.startswith("DISAGG_TUI_")}
        for d in ("state", "data", "config"):
            (local / d).mkdir(parents=True)
            env[f"DISAGG_TUI_{d.upper()}_DIR"] = str(local / d)
        env["PYTHONPATH"] = str(REPO)
        yield Lab(hosts={h.name: h for h in made}, tmp=tmp, client_key=client_key, ssh_config=ssh_config,
                  local_env=env, host_key=host_key, authorized=authorized)
    finally:
        for h in made:
            h.kill_all()
            _sh("ip", "netns", "del", h.ns, check=False)
            _sh("ip", "link", "del", h.veth, check=False)  # gone with the namespace; in case it is not
        _sh("ip", "link", "del", bridge, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def inventory_text(lab: Lab, *, rate_names: tuple[str, ...] = ("a", "b", "c")) -> str:
    lines = [f"ssh_config: {lab.ssh_config}", "hosts:"]
    for name in rate_names:
        h = lab.hosts[name]
        lines += [f"  {name}:", f"    ssh: ns-{name}", f"    disagg_tui: {DISAGG_TUI}", "    sim: true"]
        lines += [f"    vllm: {h.root / 'vllm'}"]
    lines += ["    gpus: [0, 1]"]
    return "\n".join(lines) + "\n"
