"""Layouts across hosts, for real: each part planned, preflighted, started and stopped by its namespace host's own
``disagg-tui`` over SSH, benchmarked from here through the one endpoint (conftest.py makes the hosts)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import httpx
import polars

from tests.multihost.conftest import DISAGG_TUI, REPO, Lab
from tui.core.launch.events import LayoutChanged, LogLine
from tui.core.playbook import Diagnosis
from tui.core.remote import inventory
from tui.core.remote.events import RemoteEvent
from tui.core.remote.ssh import SshTransport
from tui.core.remote.stream import RemoteFollow

MODEL = "dummy-qwen3-8b"


def across_inventory(lab: Lab, names: tuple[str, ...] = ("a", "b", "d")) -> str:
    lines = [f"ssh_config: {lab.ssh_config}", "hosts:"]
    for name in names:
        h = lab.hosts[name]
        lines += [f"  {name}:", f"    ssh: ns-{name}", f"    address: {h.addr}", f"    disagg_tui: {DISAGG_TUI}",
                  "    sim: true", f"    vllm: {h.root / 'vllm'}"]
    return "\n".join(lines) + "\n"


def _ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout


def _bench(lab: Lab, endpoint: str | None) -> dict[str, object]:
    where = ["--endpoint", endpoint] if endpoint else []
    out = _ok(lab.cli("bench", *where, "--input-len", "64", "--output-len", "16", "--num-prompts",
                      "12", "--rate", "inf", "--warmup", "0", "--json", "--quiet", "--sim", timeout=120))
    summary: dict[str, object] = json.loads(out)
    return summary


def _roles(lab: Lab, host: str) -> list[str]:
    """The roles of the processes of the layout up on that host, as its own ``status --json`` says."""
    res = subprocess.run(["ssh", "-F", str(lab.ssh_config), f"ns-{host}", f"{DISAGG_TUI} status --json --sim"],
                         capture_output=True, text=True, timeout=30)
    layouts = json.loads(_ok(res))["layouts"]
    return sorted(p["role"] for lay in layouts for p in lay["processes"])


def test_plan_across_hosts_shows_each_hosts_commands_and_refuses_a_different_vllm(lab: Lab) -> None:
    lab.inventory(across_inventory(lab))
    a, b = lab.hosts["a"], lab.hosts["b"]
    res = lab.cli("plan", "--hosts", "a,b", "-m", MODEL, "-t", "1p1d", "--sim", timeout=90)
    out = _ok(res)
    # each host's own planner wrote its part: prefill (and the proxy) on a, decode on b, by their addresses
    assert f"## on a ({a.addr}): prefill servers (1) and the proxy" in out, out
    assert f"## on b ({b.addr}): decode servers (1)" in out, out
    assert f"VLLM_NIXL_SIDE_CHANNEL_HOST={a.addr}" in out and f"--host {a.addr} --port 8100" in out, out
    assert f"--prefill http://{a.addr}:8100 --decode http://{b.addr}:8200" in out, out
    assert "[FAIL] vllm across hosts: vLLM differs: a 0.24.0, b 0.23.1" in res.stderr, res.stderr
    assert f"KV: b pulls from a {a.addr}:5600" in res.stderr, res.stderr
    # up refuses it before anything starts there
    res = lab.cli("up", "--hosts", "a,b", "-m", MODEL, "-t", "1p1d", "--sim", timeout=90)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "error: preflight failed: vllm across hosts: vLLM differs: a 0.24.0, b 0.23.1" in res.stderr
    # TP across hosts is refused with the reason, in one line
    res = lab.cli("plan", "--hosts", "a,d", "-m", MODEL, "-t", "tp2", "--sim", timeout=60)
    assert res.returncode == 2 and "needs vLLM's Ray backend" in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1


def test_1p1d_with_prefill_and_decode_on_two_hosts_up_bench_cut_down(lab: Lab) -> None:
    lab.inventory(across_inventory(lab))
    a = lab.hosts["a"]
    try:
        res = lab.cli("up", "--hosts", "a,d", "-m", MODEL, "-t", "1p1d", "--sim", timeout=180)
        out = _ok(res)
        assert f"endpoint: http://{a.addr}:8000" in out, out
        assert "[a] layout" in res.stderr and "[d] layout" in res.stderr, res.stderr
        # each host runs its part: a the prefill server and the proxy, d the decode server
        assert _roles(lab, "a") == ["prefill", "proxy"] and _roles(lab, "d") == ["decode"]
        status = _ok(lab.cli("status", "--sim", timeout=60))
        assert "1p1d of dummy-qwen3-8b across a, d SIMULATED, endpoint http://" in status, status
        # nothing is up here: bench finds the layout across hosts, and its run keeps both hosts' fingerprints
        summary = _bench(lab, None)
        assert summary["completed"] == 12 and summary["failed"] == 0, summary
        assert summary["total_output_tokens"] == 12 * 16, summary
        metas = list((lab.tmp / "local" / "data").rglob("run.json"))
        assert len(metas) == 1, metas
        fp = json.loads(metas[0].read_text())["fingerprint"]
        assert [h["name"] for h in fp["hosts"]] == ["a", "d"] and fp["simulated"] is True, fp
        assert fp["hosts"][1]["does"] == "decode servers (1)" and fp["hosts"][1]["gpu_count"] == 2, fp
        plan = json.loads((metas[0].parent / "plan.json").read_text())  # both hosts' servers: its serve flags
        assert [s["name"] for s in plan["servers"]] == ["a/prefill-0", "d/decode-0"], plan
        _cut_mid_benchmark(lab)
    finally:
        res = lab.cli("down", "--hosts", "a,d", "--sim", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "stopped on a, d" in res.stdout


def test_dp2_across_two_hosts_head_and_headless_engines_up_bench_down(lab: Lab) -> None:
    lab.inventory(across_inventory(lab))
    a = lab.hosts["a"]
    try:
        res = lab.cli("up", "--hosts", "a,d", "-m", MODEL, "-t", "dp2", "--sim", timeout=180)
        out = _ok(res)
        assert "## on a" in out and "head: the API server and DP rank 0" in out, out
        assert "--headless --data-parallel-size 2 --data-parallel-size-local 1 --data-parallel-start-rank 1 " \
               f"--data-parallel-address {a.addr} --data-parallel-rpc-port 29550" in out, out
        assert f"endpoint: http://{a.addr}:8000" in out, out
        assert _roles(lab, "a") == ["single"] and _roles(lab, "d") == ["headless"]
        summary = _bench(lab, f"http://{a.addr}:8000")
        assert summary["completed"] == 12 and summary["failed"] == 0, summary
        # both ranks served: rank 1's engines run on d, and the head's /metrics counts each engine's requests
        done = _success_by_engine(httpx.get(f"http://{a.addr}:8000/metrics", timeout=10).text)
        assert set(done) == {"0", "1"} and all(n > 0 for n in done.values()) and sum(done.values()) >= 12, done
        _follow_headless_logs(lab)
    finally:
        res = lab.cli("down", "--hosts", "a,d", "--sim", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def _follow_headless_logs(lab: Lab) -> None:
    """d's layout as its own follower sees it, over SSH: the headless engines' log from its first line; after the
    session is cut and made again, no line comes twice."""
    old = dict(os.environ)
    os.environ.update({k: v for k, v in lab.local_env.items() if k.startswith("DISAGG_TUI_")})
    try:  # the transport's control dir chosen while the lab's state dir is the environment's
        inv = inventory.load()
        transport = SshTransport(inv.get("d"), ssh_config=inv.ssh_config)
        transport._control_path()
    finally:
        os.environ.clear()
        os.environ.update(old)
    follow = RemoteFollow(transport, backoff_first_s=0.2, backoff_max_s=0.5)
    got: list[RemoteEvent] = []

    async def scenario() -> None:
        cut = False
        async for ev in follow.events(seconds=20):
            if isinstance(ev, RemoteEvent):
                got.append(ev)
            logs = [e for e in got if e.event["kind"] == "log_line"]
            if not cut and any("headless mode" in e.event["text"] for e in logs):
                assert follow._proc is not None
                follow._proc.kill()  # the session ends: the stream reconnects, d sends its logs again
                cut = True
            elif cut and follow.connects >= 2 and isinstance(ev, RemoteEvent) and ev.event["kind"] == "server_ready":
                return

    asyncio.run(scenario())
    inner = [e.inner() for e in got]
    assert all(e.host == "d" for e in got) and follow.connects >= 2
    assert follow.skipped == 0, follow.last_skipped
    lines = [(ev.server, ev.lineno) for ev in inner if isinstance(ev, LogLine)]
    assert lines and len(lines) == len(set(lines)), lines[:20]  # every line once, across the reconnect
    assert any(isinstance(ev, LayoutChanged) and ev.status == "ready" for ev in inner)
    assert any(isinstance(ev, Diagnosis) for ev in inner)  # the playbook's, as d's follower matched its log


def _success_by_engine(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total{"):
            labels, value = line.rsplit(" ", 1)
            engine = labels.split('engine="', 1)[1].split('"', 1)[0]
            out[engine] = out.get(engine, 0.0) + float(value)
    return out


def _cut_mid_benchmark(lab: Lab) -> None:
    """Decode's host loses its link for 5 s while a benchmark runs through the proxy on the other host: its watch
    stream reports it unreachable (with the reason) and reconnected, and the benchmark's records are all kept."""
    d = lab.hosts["d"]
    env, cmd = lab.local_env, [sys.executable, "-m", "tui"]
    watch = subprocess.Popen([*cmd, "hosts", "watch", "d", "--json", "--rate", "5", "--seconds", "20", "--sim"],
                             env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    bench = subprocess.Popen([*cmd, "bench", "--input-len", "64", "--output-len", "48", "--num-prompts", "28",
                              "--rate", "4", "--warmup", "0", "--json", "--quiet", "--sim", "--campaign", "cut"],
                             env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the link goes down once the benchmark is sending (a fixed 2 s was, on a loaded machine, before it had
        # asked the endpoint for its model: a 502 then, and no benchmark); its journal's first lines say it is
        runs = lab.tmp / "local" / "data" / "runs" / "cut"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and bench.poll() is None and not any(
                j.stat().st_size for j in runs.rglob("requests.jsonl")):
            time.sleep(0.1)
        time.sleep(0.5)
        subprocess.run(["ip", "link", "set", d.veth, "down"], check=True, timeout=10)
        time.sleep(5.0)
        subprocess.run(["ip", "link", "set", d.veth, "up"], check=True, timeout=10)
        out, err = bench.communicate(timeout=120)
        assert bench.returncode in (0, 1), err[-2000:]
        summary = json.loads(out)
        records = polars.read_parquet(next((lab.tmp / "local" / "data" / "runs" / "cut").rglob("requests.parquet")))
        # every request that ended is kept, finished or failed, and the summary counts the same ones
        assert len(records) == summary["completed"] + summary["failed"] == 28, (summary, len(records))
        assert summary["completed"] >= 14, summary  # (most finish; on a loaded machine fewer before the cut)
        w_out, _ = watch.communicate(timeout=40)
        kinds = [json.loads(line).get("kind") for line in w_out.splitlines() if line.startswith("{")]
        assert "host_unreachable" in kinds, kinds
        assert kinds.index("host_unreachable") < kinds.index("host_reconnected") < len(kinds) - 1, kinds
    finally:
        subprocess.run(["ip", "link", "set", d.veth, "up"], check=False, timeout=10)
        for p in (bench, watch):
            if p.poll() is None:
                p.kill()


def test_a_campaign_across_two_hosts_compares_dp2_with_1p1d_and_recommends(lab: Lab) -> None:
    """``run --hosts a,d``: each topology brought up across both hosts in turn, benchmarked, torn down; the table
    and the recommendation of a one-host campaign, every run with both hosts' fingerprints."""
    lab.inventory(across_inventory(lab))
    wl = lab.tmp / "local" / "small.yaml"
    wl.write_text("name: small\ninput_len: 64\noutput_len: 32\nnum_prompts: 8\n")
    res = lab.cli("run", "--hosts", "a,d", "-m", MODEL, "-t", "dp2,1p1d", "--workload", str(wl), "--campaign",
                  "across", "--json", "--quiet", "--sim", timeout=240)
    data = json.loads(_ok(res))
    rows = data["rows"]
    assert {r["topology"] for r in rows} == {"dp2", "1p1d"}, rows
    assert all(r["completed"] == 8 and r["failed"] == 0 for r in rows), rows
    assert data["host"] == "2 hosts: a,d" and data["recommendation"]["objectives"]
    runs = sorted((lab.tmp / "local" / "data" / "runs" / "across").glob("*/run.json"))
    assert len(runs) == 2
    for f in runs:
        fp = json.loads(f.read_text())["fingerprint"]
        assert [h["name"] for h in fp["hosts"]] == ["a", "d"], fp
    # nothing is left up on either host, and the campaign's records say so
    assert _roles(lab, "a") == [] and _roles(lab, "d") == []
    status = _ok(lab.cli("status", "--sim", timeout=60))
    assert "across a, d" not in status, status
