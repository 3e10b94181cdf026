"""Disaggregated prefill/decode between two simulated servers, by hand with httpx (the proxy's flow, VLLM-0.24.md §7):
prefill with max_tokens 1 and ``do_remote_decode``, then decode with the prefill's ``kv_transfer_params``."""

from __future__ import annotations

import json
import re
import time

import httpx

from tests.simserver import SimServer, SimServers, free_port

PRODUCER = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
CONSUMER = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
ASK_REMOTE_DECODE = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                     "remote_block_ids": None, "remote_host": None, "remote_port": None}
KV_PARAM_KEYS = ["do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id",
                 "remote_request_id", "remote_host", "remote_port", "tp_size", "remote_num_tokens"]


def metric(s: SimServer, name: str, **labels: str) -> float:
    text = httpx.get(s.url + "/metrics").text
    want = {"engine": "0", "model_name": "dummy-qwen3-8b", **labels}
    inner = ",".join(f'{k}="{want[k]}"' for k in sorted(want))
    m = re.search(rf"^{re.escape(name)}\{{{re.escape(inner)}\}} (\S+)$", text, re.M)
    assert m, f"{name}{{{inner}}} not in /metrics"
    return float(m.group(1))


def pair(sims: SimServers, *, producer_extra: str = "") -> tuple[SimServer, SimServer, int]:
    side = free_port()
    kv = PRODUCER if not producer_extra else PRODUCER[:-1] + "," + producer_extra + "}"
    p = sims.start("--kv-transfer-config", kv, devices="0", clock=20.0,
                   env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(side)})
    d = sims.start("--kv-transfer-config", CONSUMER, devices="1", clock=20.0,
                   env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())})
    p.wait_ready()
    d.wait_ready()
    return p, d, side


def prefill(p: SimServer, ids: list[int], rid: str) -> dict[str, object]:
    body = {"model": "dummy-qwen3-8b", "prompt": ids, "max_tokens": 1, "stream": False,
            "kv_transfer_params": ASK_REMOTE_DECODE}
    r = httpx.post(p.url + "/v1/completions", json=body, headers={"X-Request-Id": rid}, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["usage"]["completion_tokens"] == 1
    kv = out["kv_transfer_params"]
    assert isinstance(kv, dict)
    return kv


def decode(d: SimServer, ids: list[int], rid: str, kv: dict[str, object] | None) -> httpx.Response:
    body: dict[str, object] = {"model": "dummy-qwen3-8b", "prompt": ids, "max_tokens": 20, "stream": True,
                               "stream_options": {"include_usage": True}, "ignore_eos": True}
    if kv is not None:
        body["kv_transfer_params"] = kv
    return httpx.post(d.url + "/v1/completions", json=body, headers={"X-Request-Id": rid}, timeout=30)


def test_prefill_then_decode_with_kv_transfer(sims: SimServers) -> None:
    p, d, side = pair(sims)
    ids = list(range(100, 1100))
    kv = prefill(p, ids, "pd-1")
    assert list(kv) == KV_PARAM_KEYS
    assert kv["do_remote_prefill"] is True and kv["do_remote_decode"] is False
    assert (kv["remote_host"], kv["remote_port"], kv["tp_size"], kv["remote_num_tokens"]) == \
        ("localhost", side, 1, 1000)
    assert str(kv["remote_request_id"]).startswith("cmpl-pd-1-0-")
    blocks = kv["remote_block_ids"]
    assert isinstance(blocks, list) and len(blocks) == 1 and len(blocks[0]) == 63  # ceil(1000 / 16)
    assert metric(p, "vllm:kv_cache_usage_perc") > 0  # the prefill side holds the blocks for the decode side
    r = decode(d, ids, "pd-1", kv)
    events = [e[6:] for e in r.text.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]"
    usage = json.loads(events[-2])["usage"]
    assert usage == {"prompt_tokens": 1000, "total_tokens": 1020, "completion_tokens": 20}
    # whole blocks came over NIXL; the decode side computed only the last, partial one
    assert metric(d, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 992
    assert metric(d, "vllm:prompt_tokens_by_source_total", source="local_compute") == 8
    assert metric(d, "vllm:nixl_xfer_time_seconds_count") == 1
    assert metric(d, "vllm:nixl_bytes_transferred_sum") == 1000 * 36 * 2 * 8 * 128 * 2
    assert metric(p, "vllm:prompt_tokens_by_source_total", source="local_compute") == 1000
    assert metric(p, "vllm:kv_cache_usage_perc") == 0  # read, so freed
    # the blocks are gone: a second pull fails like a NIXL transfer failure with kv_load_failure_policy=fail
    again = decode(d, ids, "pd-1b", kv)
    assert again.status_code == 500 and again.json()["error"]["type"] == "InternalServerError"
    assert metric(d, "vllm:nixl_num_failed_transfers_total") == 1
    assert "NIXL transfer failure: transfer_failed" in d.stdout()
    # without parameters the decode side prefills locally (another prompt: this one's blocks are cached there now)
    plain = decode(d, list(range(5000, 6000)), "pd-2", None)
    assert plain.status_code == 200
    assert metric(d, "vllm:prompt_tokens_by_source_total", source="local_compute") == 1008


def test_held_blocks_expire_after_the_lease(sims: SimServers) -> None:
    p, d, _ = pair(sims, producer_extra='"kv_connector_extra_config":{"kv_lease_duration":2}')
    kv = prefill(p, list(range(2000)), "lease-1")
    deadline = time.monotonic() + 5
    while metric(p, "vllm:kv_cache_usage_perc") > 0 and time.monotonic() < deadline:
        time.sleep(0.05)  # 2 s of virtual time at clock 20
    assert metric(p, "vllm:nixl_num_kv_expired_reqs_total") == 1
    assert "Releasing expired KV blocks for request" in p.stdout()
    assert decode(d, list(range(2000)), "lease-1", kv).status_code == 500


def test_shared_side_channel_port_hangs_the_second_engine(sims: SimServers) -> None:
    side = free_port()
    first = sims.start("--kv-transfer-config", PRODUCER, devices="0", startup_s=0.3,
                       env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(side)})
    first.wait_ready()
    second = sims.start("--kv-transfer-config", CONSUMER, devices="1", startup_s=0.3,
                        env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(side)})
    deadline = time.monotonic() + 10
    while "ZMQError" not in second.stderr() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert "Exception in thread nixl_handshake_listener:" in second.stderr()
    assert f"zmq.error.ZMQError: Address already in use (addr='tcp://localhost:{side}')" in second.stderr()
    assert second.proc.poll() is None and second.health() is None  # hangs in init, no error exit
    assert "init engine" not in second.stdout()
    assert first.health() == 200
