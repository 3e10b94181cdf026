"""Layouts across hosts, planned (pure): each host's part, the refusals, and what each host's own planner makes of
its part (``tui.core.plan.cluster``, the part fields of ``LaunchRequest`` and the planner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tui.core.errors import InputError, PlanRefused
from tui.core.models import Catalog
from tui.core.plan.cluster import ClusterHost, cross_checks, plan_across
from tui.core.plan.hostfacts import sim_facts
from tui.core.plan.request import LaunchRequest, RequestInvalid, plan_request
from tui.core.remote import record
from tui.core.remote.cluster import read_remote_plan

HOSTS = [ClusterHost("a", "10.0.0.1"), ClusterHost("b", "10.0.0.2"), ClusterHost("c", "10.0.0.3"),
         ClusterHost("d", "10.0.0.4")]
MODEL = "dummy-qwen3-8b"


def _req(topology: str, **kw: object) -> LaunchRequest:
    return LaunchRequest(model=MODEL, topology=topology, **kw)  # type: ignore[arg-type]


def _planned(part_request: LaunchRequest) -> dict[str, object]:
    """What a host's own planner makes of its part (the argv it is given, parsed back as that host would)."""
    again = LaunchRequest.from_argv(part_request.to_argv())
    assert again == part_request
    _profile, p = plan_request(again, Catalog.load(), sim_facts("b200", 2))
    return p.to_dict()


def test_dp4_over_two_hosts_is_a_head_and_headless_engines() -> None:
    plan = plan_across(_req("dp4", port=9000), HOSTS[:2])
    assert plan.endpoint == "http://10.0.0.1:9000" and plan.proxy_on is None
    head, other = (_planned(p.request) for p in plan.parts)
    [h] = head["servers"]  # type: ignore[misc]
    assert h["role"] == "single" and h["url"] == "http://10.0.0.1:9000" and h["gpus"] == [0, 1]
    words = " ".join(h["argv"])
    assert "--data-parallel-size 4 --data-parallel-size-local 2 --data-parallel-address 10.0.0.1 " \
           "--data-parallel-rpc-port 29550" in words and "--headless" not in words
    [e] = other["servers"]  # type: ignore[misc]
    words = " ".join(e["argv"])
    assert e["role"] == "headless" and e["url"] == "http://10.0.0.1:9000"  # ready when the head is
    assert "--headless --data-parallel-size 4 --data-parallel-size-local 2 --data-parallel-start-rank 2 " \
           "--data-parallel-address 10.0.0.1" in words and "--port" not in words
    assert [p.does for p in plan.parts] == ["head: the API server and DP ranks 0-1",
                                            "DP ranks 2-3, engines only (--headless), joining the head"]


def test_2p1d_over_two_hosts_puts_the_proxy_where_asked_with_the_other_hosts_servers() -> None:
    plan = plan_across(_req("2p1d"), HOSTS[:2], proxy_on="b")
    a, b = (_planned(p.request) for p in plan.parts)
    assert [s["name"] for s in a["servers"]] == ["prefill-0", "prefill-1"]  # type: ignore[index]
    assert [s["name"] for s in b["servers"]] == ["decode-0"]  # type: ignore[index]
    assert a["proxy"] is None and plan.endpoint == "http://10.0.0.2:8000"
    assert b["proxy"]["prefill"] == ["http://10.0.0.1:8100", "http://10.0.0.1:8200"]  # type: ignore[index]
    assert b["proxy"]["decode"] == ["http://10.0.0.2:8300"]  # type: ignore[index]
    assert b["servers"][0]["url"] == "http://10.0.0.2:8300"  # type: ignore[index]
    for part, addr in ((a, "10.0.0.1"), (b, "10.0.0.2")):
        for s in part["servers"]:  # type: ignore[attr-defined]
            assert s["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == addr and s["host"] == addr
    assert plan.network[0].startswith("KV: b pulls from a 10.0.0.1:5600-5601")


@pytest.mark.parametrize(("topology", "hosts", "proxy_on", "why"), [
    ("tp2", 2, None, "needs vLLM's Ray backend"),
    ("dp3", 2, None, "must be a multiple of 2"),
    ("1p1d", 3, None, "3 hosts given"),
    ("dp2", 2, "b", "has no proxy"),
    ("1p1d", 2, "z", "not one of --hosts"),
    ("dp2", 1, None, "at least 2 hosts"),
])
def test_what_cannot_span_these_hosts_is_one_line(topology: str, hosts: int, proxy_on: str | None,
                                                  why: str) -> None:
    with pytest.raises(PlanRefused, match=why):
        plan_across(_req(topology), HOSTS[:hosts], proxy_on=proxy_on)


def test_addresses_the_other_hosts_cannot_reach_are_refused() -> None:
    with pytest.raises(InputError, match="not an address the other hosts reach"):
        plan_across(_req("dp2"), [ClusterHost("a", "127.0.0.1"), HOSTS[1]])
    with pytest.raises(PlanRefused, match="same address"):
        plan_across(_req("dp2"), [HOSTS[0], ClusterHost("b", "10.0.0.1")])
    with pytest.raises(PlanRefused, match="drop them"):
        plan_across(_req("dp2", dp_local=1, dp_address="10.0.0.1"), HOSTS[:2])


@pytest.mark.parametrize(("kw", "flag"), [
    ({"advertise": "127.0.0.1"}, "--advertise"),
    ({"roles": ("encode",)}, "--roles"),
    ({"peers": (("decode", "http://x:1/path"),)}, "--peer"),
    ({"peers": (("decode", "file:///etc/passwd"),)}, "--peer"),
    ({"dp_start_rank": -1}, "--dp-start-rank"),
    ({"dp_address": "a b"}, "--dp-address"),
])
def test_a_bad_part_field_names_its_flag(kw: dict[str, object], flag: str) -> None:
    with pytest.raises(RequestInvalid) as err:
        _req("1p1d", **kw)
    assert err.value.field == flag


@pytest.mark.parametrize(("topology", "kw", "why"), [
    ("dp4", {"dp_local": 3, "dp_address": "10.0.0.1"}, "a divisor of 4"),
    ("dp4", {"dp_local": 2, "dp_start_rank": 1, "dp_address": "10.0.0.1"}, "start at 0, 2"),
    ("dp2", {"dp_local": 1}, "needs --dp-address"),
    ("tp2", {"roles": ("prefill",)}, "is not <X>p<Y>d"),
    ("1p1d", {"roles": ("prefill",), "peers": (("prefill", "http://10.0.0.2:8100"),)}, "runs the prefill"),
])
def test_a_part_the_planner_cannot_make_is_refused(topology: str, kw: dict[str, object], why: str) -> None:
    with pytest.raises(PlanRefused, match=why):
        plan_request(_req(topology, **kw), Catalog.load(), sim_facts("b200", 4))


def test_the_preflight_across_hosts_compares_versions() -> None:
    plan = plan_across(_req("1p1d"), HOSTS[:2])
    same = {"a": sim_facts("b200", 2), "b": sim_facts("b200", 2)}
    assert [c[1] for c in cross_checks(plan, same)[:2]] == ["pass", "pass"]
    checks = cross_checks(plan, same, {"a": "0.24.0", "b": "0.23.1"})
    assert checks[0] == ("vllm across hosts", "fail", "vLLM differs: a 0.24.0, b 0.23.1 (every host of one layout "
                                                      "runs the same vLLM)")
    no_nixl = {"a": sim_facts("b200", 2), "b": sim_facts("b200", 2, nixl=False)}
    assert cross_checks(plan, no_nixl)[1] == ("nixl across hosts", "fail", "no NIXL on b")


@pytest.mark.parametrize("text", [
    "[]", '{"plan": {}, "preflight": []}', '{"plan": {"servers": [1]}, "preflight": []}',
    '{"plan": {"servers": [{"name": "s", "role": "x", "url": "u", "shell": "s", "argv": "vllm", "env": {}}]}, '
    '"preflight": []}',
    '{"plan": {"servers": [{"name": "s", "role": "x", "url": "u", "shell": "s", "argv": ["v"], "env": {}}]}, '
    '"preflight": [{"name": "n", "status": "maybe", "reason": "r"}]}',
])
def test_a_hosts_plan_answer_is_hostile_until_checked(text: str) -> None:
    with pytest.raises(InputError) as err:
        read_remote_plan("b", text)
    assert err.value.file == "b: plan --json" and "\n" not in err.value.one_line()


def test_a_hosts_plan_answer_is_printed_safe() -> None:
    # a name with an escape is refused (tests/hardening/test_trust2_remote.py); the texts are made printable
    text = json.dumps({"plan": {"servers": [{"name": "s", "role": "single", "url": "http://x:1",
                                             "shell": "vllm serve \x1b]0;owned\x07", "argv": ["vllm", "serve", "m"],
                                             "env": {}}],
                                "warnings": ["w\x1b[31m"]},
                       "preflight": [{"name": "ports", "status": "fail", "reason": "in use\r\n: 8000"}]})
    p = read_remote_plan("b", text)
    assert "\x1b" not in p.servers[0].name + p.servers[0].shell + p.warnings[0]
    assert p.failed == ["b: ports: in use\\r\\n: 8000"]


def test_the_clusters_file_is_read_as_from_outside(tmp_path: Path) -> None:
    f = tmp_path / "clusters.json"
    f.write_text(json.dumps({"format": 1, "clusters": [{"id": "x", "topology": "dp2", "model": "m",
                                                         "endpoint": 5}]}))
    assert record.load_all(f) == []  # a record that does not read is left out, with a warning naming it
    (note,) = record.drain_notes()
    assert "clusters[0].endpoint" in note and "left out" in note
    good = {"id": "y", "topology": "dp2", "model": "m", "endpoint": "http://10.0.0.2:8000"}
    f.write_text(json.dumps({"format": 1, "clusters": [
        {**good, "id": "x", "endpoint": "http://10.0.0.9:8000/\x1b]52;c;eA==\x07"}, good]}))
    assert [r.id for r in record.load_all(f)] == ["y"]
    assert "not an http URL" in record.drain_notes()[0]
    f.write_text("[1, 2]")
    with pytest.raises(InputError, match="not a clusters file"):
        record.load_all(f)
