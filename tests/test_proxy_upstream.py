"""The proxy's pure parts: request rewriting, server choice, URL and option checks, the metrics exposition."""

from __future__ import annotations

import argparse
import asyncio
import copy

import httpx
import pytest

from tui.core.errors import InputError
from tui.core.proxy.main import add_proxy_arguments, server_url, settings_from_args
from tui.core.proxy.metrics import Histogram, ProxyMetrics
from tui.core.proxy.upstream import (
    HealthCache,
    UpstreamPool,
    decode_body,
    describe_transport_error,
    kv_params_of,
    prefill_body,
)

P_KV = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None, "remote_block_ids": None,
        "remote_host": None, "remote_port": None}


def test_prefill_body_of_a_streamed_completion() -> None:
    client = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 128, "min_tokens": 16, "stream": True,
              "stream_options": {"include_usage": True, "continuous_usage_stats": True}, "ignore_eos": True,
              "temperature": 0.7}
    before = copy.deepcopy(client)
    assert prefill_body(client) == {"model": "m", "prompt": [1, 2, 3], "max_tokens": 1, "stream": False,
                                    "ignore_eos": True, "temperature": 0.7, "kv_transfer_params": P_KV}
    assert client == before  # the client's body is left as it was, for D


def test_prefill_body_of_a_chat_request_caps_both_token_limits() -> None:
    client = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 50,
              "min_completion_tokens": 5, "kv_transfer_params": {"client": "value"}}
    assert prefill_body(client) == {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                    "max_completion_tokens": 1, "max_tokens": 1, "stream": False,
                                    "kv_transfer_params": P_KV}


def test_prefill_kv_request_is_a_fresh_dict_each_time() -> None:
    a = prefill_body({"prompt": "x"})
    a["kv_transfer_params"]["remote_host"] = "mutated"
    assert prefill_body({"prompt": "x"})["kv_transfer_params"] == P_KV


def test_decode_body_adds_the_prefill_params_verbatim_and_keeps_everything_else() -> None:
    client = {"model": "m", "prompt": "p", "max_tokens": 9, "min_tokens": 3, "stream": True,
              "stream_options": {"include_usage": True}}
    kv = {"do_remote_prefill": True, "remote_block_ids": [[1, 2]], "remote_engine_id": "e", "remote_port": 5600}
    d = decode_body(client, kv)
    assert d == {**client, "kv_transfer_params": kv}
    assert d["kv_transfer_params"] is kv
    assert "kv_transfer_params" not in client
    assert decode_body(client, None) is client


@pytest.mark.parametrize(("answer", "expected"), [
    ({"kv_transfer_params": {"a": 1}}, {"a": 1}),
    ({"kv_transfer_params": None}, None),
    ({"choices": []}, None),
    ({"kv_transfer_params": "nonsense"}, None),
    ([1, 2], None),
])
def test_kv_params_of(answer: object, expected: object) -> None:
    assert kv_params_of(answer) == expected


def test_round_robin_takes_servers_in_turn_whatever_their_load() -> None:
    pool = UpstreamPool("decode", ("a", "b", "c"), "round-robin")
    pool.servers[1].outstanding = 5
    assert [pool.pick().url for _ in range(6)] == ["a", "b", "c", "a", "b", "c"]


def test_least_outstanding_takes_the_least_busy_and_breaks_ties_in_turn() -> None:
    pool = UpstreamPool("prefill", ("a", "b", "c"), "least-outstanding")
    assert [pool.pick().url for _ in range(3)] == ["a", "b", "c"]  # idle: round robin
    pool.servers[0].outstanding = 2
    pool.servers[1].outstanding = 1
    pool.servers[2].outstanding = 3
    assert pool.pick().url == "b"
    pool.servers[1].outstanding = 2
    assert pool.pick().url == "a"  # a and b tie at 2: the turn after b is c (3), then a
    assert [s.picked for s in pool.servers] == [2, 2, 1]


def test_a_pool_needs_servers_and_a_known_policy() -> None:
    with pytest.raises(ValueError, match="no decode server"):
        UpstreamPool("decode", (), "round-robin")
    with pytest.raises(ValueError, match="unknown balance"):
        UpstreamPool("decode", ("a",), "random")  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "url"), [
    ("http://127.0.0.1:8100", "http://127.0.0.1:8100"),
    ("http://127.0.0.1:8100/", "http://127.0.0.1:8100"),
    ("127.0.0.1:8200", "http://127.0.0.1:8200"),
    ("http://[::1]:8100", "http://[::1]:8100"),
    ("https://gpu-node-3:443", "https://gpu-node-3:443"),
])
def test_server_url_accepts_base_urls(text: str, url: str) -> None:
    assert server_url(text, "--prefill") == url


@pytest.mark.parametrize("text", ["http://127.0.0.1:8100/v1", "ftp://h:1", "http://:8100", "http://h:99999",
                                  "http://h:1?x=1"])
def test_server_url_refuses_anything_else(text: str) -> None:
    with pytest.raises(InputError) as info:
        server_url(text, "--decode")
    assert info.value.field == "--decode"


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_proxy_arguments(parser)
    return parser.parse_args(list(argv))


def test_settings_defaults_bind_loopback_port_8000() -> None:
    s = settings_from_args(_args("--prefill", "127.0.0.1:8100", "--decode", "http://127.0.0.1:8200/"))
    assert (s.host, s.port, s.balance, s.access_log) == ("127.0.0.1", 8000, "round-robin", True)
    assert s.prefill == ("http://127.0.0.1:8100",) and s.decode == ("http://127.0.0.1:8200",)


@pytest.mark.parametrize(("argv", "field"), [
    (("--port", "70000"), "--port"),
    (("--health-timeout", "-1"), "--health-timeout"),
    (("--prefill", "http://127.0.0.1:8100"), "--prefill"),  # given twice
])
def test_settings_refuse_bad_values(argv: tuple[str, ...], field: str) -> None:
    with pytest.raises(InputError) as info:
        settings_from_args(_args("--prefill", "http://127.0.0.1:8100", "--decode", "http://127.0.0.1:8200", *argv))
    assert info.value.field == field


def test_histogram_exposition_is_cumulative() -> None:
    h = Histogram((0.01, 0.1, 1.0))
    for v in (0.005, 0.05, 0.05, 5.0):
        h.observe(v)
    assert list(h.lines("x_seconds", 'server="s"')) == [
        'x_seconds_bucket{server="s",le="0.01"} 1',
        'x_seconds_bucket{server="s",le="0.1"} 3',
        'x_seconds_bucket{server="s",le="1.0"} 3',
        'x_seconds_bucket{server="s",le="+Inf"} 4',
        'x_seconds_sum{server="s"} 5.105',
        'x_seconds_count{server="s"} 4',
    ]


def test_metrics_name_every_server_and_escape_labels() -> None:
    p = UpstreamPool("prefill", ('http://a"b:1',), "round-robin")
    d = UpstreamPool("decode", ("http://c:2",), "round-robin")
    m = ProxyMetrics(p.servers + d.servers)
    m.requests[("/v1/completions", 200)] += 3
    text = m.render()
    assert 'disagg_proxy_upstream_outstanding{role="prefill",server="http://a\\"b:1"} 0' in text
    assert 'disagg_proxy_requests_total{route="/v1/completions",code="200"} 3' in text
    assert 'disagg_proxy_decode_seconds_bucket{server="http://c:2",le="+Inf"} 0' in text
    assert text.endswith("\n")


@pytest.mark.parametrize(("exc", "text"), [
    (httpx.ConnectError("All connection attempts failed"), "connection refused"),
    (httpx.ConnectError("[Errno -2] Name or service not known"),
     "cannot connect ([Errno -2] Name or service not known)"),
    (httpx.ConnectTimeout("x"), "timed out"),
    (httpx.RemoteProtocolError("peer closed"), "connection broken (peer closed)"),
])
def test_transport_errors_read_as_short_reasons(exc: httpx.TransportError, text: str) -> None:
    assert describe_transport_error(exc) == text


async def test_health_cache_single_flight_and_ttl() -> None:
    calls: list[str] = []
    release = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        await release.wait()
        return httpx.Response(200)

    now = [100.0]
    pool = UpstreamPool("decode", ("http://d:1",), "round-robin")
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        cache = HealthCache(lambda: client, pool.servers, timeout=1.0, ttl=0.5, clock=lambda: now[0])
        waiters = [asyncio.ensure_future(cache.get()) for _ in range(3)]
        await asyncio.sleep(0)
        release.set()
        results = await asyncio.gather(*waiters)
        assert calls == ["http://d:1/health"]  # three callers, one check
        assert all(r[0].ok for r in results)
        now[0] += 0.4
        await cache.get()
        assert len(calls) == 1
        now[0] += 0.2
        await cache.get()
        assert len(calls) == 2


async def test_health_cache_reports_a_slow_server_as_down() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    pool = UpstreamPool("prefill", ("http://p:1",), "round-robin")
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        (check,) = await HealthCache(lambda: client, pool.servers, timeout=0.25, ttl=0).get()
    assert not check.ok and check.status is None
    assert check.describe() == "prefill server http://p:1 is down: no answer within 0.25 s"

