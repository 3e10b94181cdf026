"""Other hosts over SSH, for real: network namespaces with their own sshd and simulated host (conftest.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

from tests.multihost.conftest import Lab, inventory_text
from tui.core.remote import inventory
from tui.core.remote.events import HostReconnected, HostUnreachable, RemoteTick
from tui.core.remote.host import RemoteHost
from tui.core.remote.ssh import SshTransport
from tui.core.remote.stream import RemoteWatch


def _transport(lab: Lab, name: str) -> SshTransport:
    old = dict(os.environ)
    os.environ.update({k: v for k, v in lab.local_env.items() if k.startswith("DISAGG_TUI_")})
    try:
        inv = inventory.parse(inventory.yamlio.load_text(inventory_text(lab), "hosts.yaml"), Path("hosts.yaml"))
        t = SshTransport(inv.get(name), ssh_config=inv.ssh_config)
        t._control_path()  # the control dir chosen while the lab's state dir is the environment's
        return t
    finally:
        os.environ.clear()
        os.environ.update(old)


def _link(veth: str, state: str, *, check: bool = True) -> None:
    subprocess.run(["ip", "link", "set", veth, state], check=check, timeout=10)


def _lines(res: subprocess.CompletedProcess[str], host: str) -> dict[str, str]:
    out = {}
    for line in res.stdout.splitlines():
        if line.startswith(host + " "):
            rest = line[len(host):].strip()
            name = rest.split("] ", 1)[1].split(":", 1)[0]
            out[name] = rest
    return out


def test_check_reaches_a_host_and_names_why_not_another(lab: Lab) -> None:
    lab.inventory(inventory_text(lab))
    res = lab.cli("hosts", "check", "a", "c", "--sim", "--timeout", "15")
    a, c = _lines(res, "a"), _lines(res, "c")
    assert res.returncode == 1, res.stdout + res.stderr  # c fails
    assert a["reach"].startswith("[ok  ] reach: ssh ns-a"), res.stdout
    assert a["disagg-tui"].startswith("[ok  ] disagg-tui: 0.1.0"), res.stdout
    assert a["vllm"] == "[ok  ] vllm: 0.24.0 (same as here)", res.stdout
    assert "SIMULATED host" in a["host"] and "0 layouts running" in a["host"] and "GPUs 0,1" not in a["host"]
    assert a["clock"].startswith("[ok  ] clock: 0.00"), res.stdout  # one machine: the same clock, within ms
    assert list(c) == ["reach"], res.stdout  # one line, and why
    assert c["reach"].startswith("[FAIL] reach: unreachable (refused)"), res.stdout
    assert f"{lab.hosts['c'].addr} port 22: Connection refused" in c["reach"]


def test_check_reports_a_different_vllm_version(lab: Lab) -> None:
    lab.inventory(inventory_text(lab))
    res = lab.cli("hosts", "check", "b", "--sim", "--json")
    import json

    data = json.loads(res.stdout)
    checks = {c["name"]: c for c in data["hosts"][0]["checks"]}
    assert res.returncode == 0, res.stderr  # a warning, not a failure: the host serves on its own
    assert checks["vllm"]["status"] == "warn"
    assert checks["vllm"]["reason"].startswith("0.23.1 there, 0.24.0 here: versions differ")
    assert checks["reach"]["status"] == "pass"


def test_list_and_a_password_refused(lab: Lab) -> None:
    lab.inventory(inventory_text(lab))
    res = lab.cli("hosts", "list")
    assert res.returncode == 0 and [ln.split()[0] for ln in res.stdout.splitlines()] == ["a", "b", "c"]
    path = lab.inventory("hosts:\n  a:\n    ssh: ns-a\n    password: hunter2\n")
    res = lab.cli("hosts", "list")
    assert res.returncode == 2
    assert res.stderr.strip().startswith(f"disagg-tui: error: {path}:4: field 'hosts.a.password': hosts.yaml never "
                                         "holds a password")
    assert "hunter2" not in res.stderr


def test_remote_host_facts_come_from_the_remote_side(lab: Lab) -> None:
    host = RemoteHost(_transport(lab, "a"))
    try:
        facts = host.facts
        assert facts.simulated and host.simulated
        assert len(facts.gpus) == 2 and facts.vllm is not None and facts.vllm.version == "0.24.0"
    finally:
        host.close()


def test_watch_stream_survives_a_cut_link(lab: Lab) -> None:
    """One session streams ticks; the link goes down mid-stream (unreachable, with the reason, retried with
    backoff), comes back up (reconnected, ticks flow again)."""
    h = lab.hosts["a"]
    watch = RemoteWatch(_transport(lab, "a"), rate_hz=5, stall_s=2.5, backoff_first_s=0.3, backoff_max_s=1.0)
    before: list[RemoteTick] = []
    down: list[HostUnreachable] = []
    after: list[object] = []

    async def scenario() -> float:
        t_cut = 0.0
        cut = False
        try:
            async for ev in watch.events():
                if not cut:
                    assert isinstance(ev, RemoteTick), ev
                    before.append(ev)
                    if len(before) == 3:
                        await asyncio.to_thread(_link, h.veth, "down")
                        t_cut, cut = time.monotonic(), True
                elif len(down) < 2:
                    assert isinstance(ev, HostUnreachable), ev
                    down.append(ev)
                    if len(down) == 2:
                        await asyncio.to_thread(_link, h.veth, "up")
                else:
                    after.append(ev)
                    if sum(isinstance(e, RemoteTick) for e in after) >= 2:
                        return time.monotonic() - t_cut
        finally:
            _link(h.veth, "up", check=False)
        raise AssertionError("the stream ended")

    asyncio.run(asyncio.wait_for(scenario(), 40))  # (its time to reconnect is the stream's backoff, not asserted)
    assert watch.connects >= 3  # the first session, a refused try while down, the reconnect
    assert all("gpus" in t.tick and len(t.tick["gpus"]) == 2 for t in before)
    assert before[0].host == "a"
    # the live session's end: its own stall timer or ssh's keep-alives; then new tries find no route
    assert down[0].reason in {"stalled", "timeout", "closed"}, down
    assert down[1].reason in {"network", "timeout"}, down  # no route, or no answer on a link that is down
    assert all(e.detail and e.retry_in_s > 0 for e in down)
    kinds = [type(e).__name__ for e in after]
    assert "HostReconnected" in kinds and kinds.index("HostReconnected") < kinds.index("RemoteTick"), kinds


def test_watch_stream_reports_sshd_gone_then_reconnects(lab: Lab) -> None:
    h = lab.hosts["b"]
    watch = RemoteWatch(_transport(lab, "b"), rate_hz=5, stall_s=2.5, backoff_first_s=0.3, backoff_max_s=1.0)

    async def scenario() -> tuple[list[object], list[object]]:
        gen = watch.events()
        first = await asyncio.wait_for(gen.__anext__(), 15)
        assert isinstance(first, RemoteTick), first
        h.kill_all()  # the server and every session it had: the stream ends, reconnects are refused
        down: list[object] = []
        try:
            async def until_refused() -> None:
                async for ev in gen:
                    down.append(ev)
                    if isinstance(ev, HostUnreachable) and ev.reason == "refused":
                        return
            await asyncio.wait_for(until_refused(), 15)
        finally:
            h.start_sshd(lab.host_key, lab.authorized)
        up: list[object] = []
        async def until_up() -> None:
            async for ev in gen:
                up.append(ev)
                if isinstance(ev, RemoteTick):
                    return
        await asyncio.wait_for(until_up(), 15)
        await gen.aclose()
        return down, up

    down, up = asyncio.run(scenario())
    first_down = next(e for e in down if isinstance(e, HostUnreachable))
    # kill_all SIGKILLs the remote watch with the sessions: its exit (-9) may be what the stream sees first
    assert first_down.reason in {"closed", "refused", "stalled", "remote-failed"}, down
    assert isinstance(up[-1], RemoteTick)
    assert any(isinstance(e, HostReconnected) for e in up), up
