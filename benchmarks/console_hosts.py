"""The console over several hosts: its CPU and key-to-paint latency with 1, 2, 4 and 8 remote hosts.

Each remote host is a network namespace on this machine with its own sshd and simulated host (the multihost
tests' lab, ``tests/multihost/conftest.py``): the console follows each over one SSH session streaming its
``disagg-tui watch --json --sim`` at 2 Hz (``--hosts``' own path: ``RemoteHost.watch()``), its two simulated GPUs
grouped under the host's header line. This host runs a simulated 1P1D layout (two GPUs sampled at 4 Hz, three
servers polled at 1 Hz) so the servers table has rows to move the cursor over. The console is headless at 160×48
(``App.run_test``: the same app, the same 4 Hz drawing), measured in its own process, with
``benchmarks/console_load.py``'s method:

- key-to-paint latency: from a key (a cursor move in the servers table, which redraws the table, the band and the
  log pane) until the screen is painted with the moved cursor, p50/p99 over the presses;
- CPU: the console process's CPU time per wall second while the operator watches (no key) and while a key is
  pressed every 0.25 s, in alternating blocks over the same stretch.

The reference is the same console with one remote host, measured in the same run; "this host only" (no
``--hosts``) is shown for context. The remote hosts' own processes (their sshd, their ``watch``) share this
machine's cores and are not the console's CPU; their CPU is shown apart. Needs root (namespaces) and sshd.

    sudo .venv/bin/python benchmarks/console_hosts.py [--seconds 20] [--hosts 1,2,4,8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import console_load  # noqa: E402 - the method: _phase, _free_ports, _cli

from tests.multihost.conftest import DISAGG_TUI, SSHD, NsHost, _free_net, _sh  # noqa: E402


class Lab:
    """``n`` namespace hosts h1..hn, each with sshd and a simulated host; torn down by ``close``."""

    def __init__(self, n: int) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="dtch"))
        self.hosts: list[NsHost] = []
        tag = f"{os.getpid() % 100000}"
        net = _free_net()
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        host_key, client_key = self.tmp / "host_key", self.tmp / "client_key"
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key))
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(client_key))
        authorized = self.tmp / "authorized_keys"
        authorized.write_text((self.tmp / "client_key.pub").read_text())
        pub = (self.tmp / "host_key.pub").read_text().split()
        cfg = ["Host *", f"  IdentityFile {client_key}", "  IdentitiesOnly yes",
               f"  UserKnownHostsFile {self.tmp / 'known_hosts'}", "  StrictHostKeyChecking yes", "  User root",
               "  GlobalKnownHostsFile /dev/null"]
        known = []
        try:
            for k in range(1, n + 1):
                name = f"h{k}"
                h = NsHost(name=name, ns=f"dtch{tag}{name}", veth=f"dtc{tag}{name}", addr=f"10.{net}.{k}.2",
                           root=self.tmp / name, vllm_version="0.24.0")
                h.root.mkdir()
                _sh("ip", "netns", "add", h.ns)
                self.hosts.append(h)
                _sh("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
                _sh("ip", "addr", "add", f"10.{net}.{k}.1/24", "dev", h.veth)
                _sh("ip", "link", "set", h.veth, "up")
                _sh("ip", "-n", h.ns, "addr", "add", f"10.{net}.{k}.2/24", "dev", "eth0")
                _sh("ip", "-n", h.ns, "link", "set", "eth0", "up")
                _sh("ip", "-n", h.ns, "link", "set", "lo", "up")
                for d in ("state", "data", "config"):
                    (h.root / d).mkdir()
                h.env = {"DISAGG_TUI_STATE_DIR": str(h.root / "state"), "DISAGG_TUI_DATA_DIR": str(h.root / "data"),
                         "DISAGG_TUI_CONFIG_DIR": str(h.root / "config"), "PYTHONDONTWRITEBYTECODE": "1",
                         "HOME": str(h.root)}
                known.append(f"{h.addr} {pub[0]} {pub[1]}")
                cfg += [f"Host ns-{name}", f"  HostName {h.addr}"]
            (self.tmp / "known_hosts").write_text("\n".join(known) + "\n")
            self.ssh_config = self.tmp / "ssh_config"
            self.ssh_config.write_text("\n".join(cfg) + "\n")
            for h in self.hosts:
                h.start_sshd(host_key, authorized)
        except BaseException:
            self.close()
            raise

    def inventory(self) -> str:
        lines = [f"ssh_config: {self.ssh_config}", "hosts:"]
        for h in self.hosts:
            lines += [f"  {h.name}:", f"    ssh: ns-{h.name}", f"    disagg_tui: {DISAGG_TUI}", "    sim: true"]
        return "\n".join(lines) + "\n"

    def remote_cpu_s(self) -> float:
        """CPU seconds of every process in the namespaces so far (their sshd, sessions and watches)."""
        import psutil

        total = 0.0
        for h in self.hosts:
            for pid in _sh("ip", "netns", "pids", h.ns, check=False).stdout.split():
                try:
                    t = psutil.Process(int(pid)).cpu_times()
                    total += t.user + t.system
                except (psutil.Error, ValueError):
                    continue
        return total

    def close(self) -> None:
        for h in self.hosts:
            h.kill_all()
            _sh("ip", "netns", "del", h.ns, check=False)
            _sh("ip", "link", "del", h.veth, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


async def measure(n: int, lab: Lab, ports: tuple[int, int, int], seconds: float) -> dict[str, float]:
    from tui.cli.cmd_console import remote_hosts
    from tui.console.app import make_console
    from tui.core.host.base import HostOptions

    names = [h.name for h in lab.hosts[:n]]
    hosts = remote_hosts(",".join(names)) if names else []
    app = make_console(HostOptions(sim=True), ports=ports, record=False,
                       remotes={h.name: h.watch(rate_hz=2.0) for h in hosts})
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            t_end = time.monotonic() + 60
            while not (app.state.layout is not None and app.state.layout.status == "ready"
                       and len(app.state.gpus) == 2 and len(app.state.servers) >= 3
                       and all(v.tick is not None and len(v.gpus) == 2 for v in app.state.remotes.values())):
                if time.monotonic() > t_end:
                    raise SystemExit(f"{n} hosts: the console never saw every host "
                                     f"({[(k, v.down) for k, v in app.state.remotes.items()]})")
                await pilot.pause(0.2)
            await pilot.pause(3.0)  # settled: drawn, the start-up objects frozen
            remote0 = lab.remote_cpu_s()
            t0 = time.monotonic()
            row = await console_load._phase(app, pilot, seconds, f"{n} remote host{'s' if n != 1 else ''}",
                                            block_s=seconds / 2)
            row["remote_cpu"] = (lab.remote_cpu_s() - remote0) / (time.monotonic() - t0)
            row["hosts"] = n
            row["ticks"] = sum(1 for v in app.state.remotes.values() if v.tick is not None)
    finally:
        for h in hosts:
            h.close()
    return row


async def main_async(a: argparse.Namespace) -> int:
    counts = [int(x) for x in a.hosts.split(",")]
    lab = Lab(max(counts))
    ports = console_load._free_ports()
    rows: list[dict[str, float]] = []
    try:
        (Path(os.environ["DISAGG_TUI_CONFIG_DIR"]) / "hosts.yaml").write_text(lab.inventory())
        up = console_load._cli("up", "--sim", "--sim-startup", "1", "--model", "qwen3.6-27b-nvfp4", "--topology",
                               "1p1d", "--port", str(ports[0]), "--server-port", str(ports[1]),
                               "--side-channel-port", str(ports[2]))
        if up.returncode != 0:
            print(up.stderr[-2000:], file=sys.stderr)
            return 1
        for n in ([0] if a.local else []) + counts:
            rows.append(await measure(n, lab, ports, a.seconds))
            print(f"measured {n} remote hosts", file=sys.stderr)
    finally:
        console_load._cli("down", "--all")
        lab.close()
    ref = next((r for r in rows if r["hosts"] == 1), rows[0])
    print(f"console over several hosts: each remote host 2 simulated GPUs streamed at 2 Hz over SSH; this host a "
          f"simulated 1P1D (2 GPUs at 4 Hz, 3 servers at 1 Hz); 160×48 headless; {a.seconds:g} s per row "
          f"(half watching, half a key every 0.25 s); {os.cpu_count()} CPUs")
    print(f"{'hosts shown':<24} {'presses':>7} {'p50 ms':>7} {'p99 ms':>7} {'CPU % watching':>15} "
          f"{'CPU % keys':>11} {'p99 ×ref':>9} {'CPU ×ref':>9} {'remote CPU %':>13}")
    for r in rows:
        label = "this host only" if r["hosts"] == 0 else f"this + {r['hosts']:g} remote"
        if r is ref:
            label += " (ref)"
        print(f"{label:<24} {r['presses']:>7} {r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f} {r['cpu_watch'] * 100:>15.1f} "
              f"{r['cpu_keys'] * 100:>11.1f} {r['p99_ms'] / max(ref['p99_ms'], 1e-9):>8.2f}× "
              f"{r['cpu_watch'] / max(ref['cpu_watch'], 1e-9):>8.2f}× {r['remote_cpu'] * 100:>13.1f}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=20.0, help="per row (half watching, half pressing keys)")
    p.add_argument("--hosts", default="1,2,4,8", help="remote host counts (the first 1 is the reference)")
    p.add_argument("--no-local", dest="local", action="store_false", help="leave out the 'this host only' row")
    a = p.parse_args()
    if os.geteuid() != 0 or not os.path.exists(SSHD):
        print("needs root (network namespaces) and sshd", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="console-hosts-") as tmp:
        for name in ("state", "data", "config"):
            os.environ[f"DISAGG_TUI_{name.upper()}_DIR"] = str(Path(tmp) / name)
            (Path(tmp) / name).mkdir()
        return asyncio.run(main_async(a))


if __name__ == "__main__":
    sys.exit(main())
