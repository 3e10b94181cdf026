"""The planner: golden command lines, topology shapes, refusals and fixes."""

from __future__ import annotations

import json

import pytest

from tui.core.errors import PlanRefused
from tui.core.models import Catalog
from tui.core.plan.hostfacts import sim_facts
from tui.core.plan.planner import LaunchPlan, PlanFix, PlanOptions, apply_fix, plan

CAT = Catalog.load()
QWEN = CAT.model("qwen3.6-27b-nvfp4")
GEMMA = CAT.model("gemma-4-26b-a4b-fp8")
DUMMY = CAT.model("dummy-qwen3-8b")
B200X2 = sim_facts("b200", 2)  # nvcc present


GOLDEN_DP2 = ("CUDA_VISIBLE_DEVICES=0,1 VLLM_ENGINE_READY_TIMEOUT_S=1800 vllm serve nvidia/Qwen3.6-27B-NVFP4 --host "
              "127.0.0.1 --port 8000 --data-parallel-size 2 --gpu-memory-utilization 0.90 --max-model-len 32768 "
              "--trust-remote-code")
GOLDEN_P = ("CUDA_VISIBLE_DEVICES=0 VLLM_NIXL_SIDE_CHANNEL_PORT=5600 VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve "
            "nvidia/Qwen3.6-27B-NVFP4 --host 127.0.0.1 --port 8100 --tensor-parallel-size 1 --kv-transfer-config "
            "'{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_producer\"}'")
GOLDEN_D = ("CUDA_VISIBLE_DEVICES=1 VLLM_NIXL_SIDE_CHANNEL_PORT=5601 VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve "
            "nvidia/Qwen3.6-27B-NVFP4 --host 127.0.0.1 --port 8200 --tensor-parallel-size 1 --kv-transfer-config "
            "'{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_consumer\"}'")


def test_golden_dp2() -> None:
    p = plan(QWEN, "dp2", B200X2)
    assert len(p.servers) == 1 and p.proxy is None
    assert p.servers[0].shell().startswith(GOLDEN_DP2)
    assert p.endpoint == "http://127.0.0.1:8000"


def test_golden_tp2() -> None:
    p = plan(QWEN, "tp2", B200X2)
    assert p.servers[0].shell().startswith(GOLDEN_DP2.replace("--data-parallel-size 2", "--tensor-parallel-size 2"))


def test_golden_1p1d() -> None:
    p = plan(QWEN, "1p1d", B200X2)
    prefill, decode = p.servers
    assert prefill.shell().startswith(GOLDEN_P)
    assert decode.shell().startswith(GOLDEN_D)
    for s in p.servers:
        assert "--gpu-memory-utilization 0.90 --max-model-len 32768 --trust-remote-code" in s.shell()
        assert "VLLM_ATTENTION_BACKEND" not in s.shell()
    assert p.proxy is not None
    assert (p.proxy.host, p.proxy.port) == ("127.0.0.1", 8000)
    assert p.proxy.prefill == ("http://127.0.0.1:8100",) and p.proxy.decode == ("http://127.0.0.1:8200",)
    kv = json.loads(prefill.argv[prefill.argv.index("--kv-transfer-config") + 1])
    assert kv == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}


def test_no_workarounds_when_host_has_nvcc() -> None:
    for topo in ("dp2", "tp2", "1p1d"):
        p = plan(QWEN, topo, B200X2)
        for s in p.servers:
            assert "VLLM_USE_FLASHINFER_SAMPLER" not in dict(s.env)
            assert "--attention-backend" not in s.argv


def test_no_nvcc_blackwell_gets_sampler_off_and_triton_attention() -> None:
    facts = sim_facts("b200", 2, nvcc=False)
    p = plan(QWEN, "tp2", facts)
    s = p.servers[0]
    assert dict(s.env)["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert s.argv[s.argv.index("--attention-backend") + 1] == "TRITON_ATTN"
    assert {w.change for w in p.workarounds} >= {"VLLM_USE_FLASHINFER_SAMPLER=0", "--attention-backend TRITON_ATTN"}


def test_no_nvcc_hopper_keeps_flash_attention() -> None:
    p = plan(DUMMY, "tp1", sim_facts("h200", 1, nvcc=False))
    s = p.servers[0]
    assert dict(s.env)["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert "--attention-backend" not in s.argv


def test_dense_full_attention_1p1d_has_no_ssm_layout() -> None:
    p = plan(DUMMY, "1p1d", sim_facts("h200", 2))
    for s in p.servers:
        assert "VLLM_SSM_CONV_STATE_LAYOUT" not in dict(s.env)
        assert "--served-model-name" in s.argv and "--load-format" in s.argv


def test_2p2d_on_four_gpus() -> None:
    p = plan(QWEN, "2p2d", sim_facts("b200", 4))
    assert [s.role for s in p.servers] == ["prefill", "prefill", "decode", "decode"]
    assert [s.gpus for s in p.servers] == [(0,), (1,), (2,), (3,)]
    assert [s.port for s in p.servers] == [8100, 8200, 8300, 8400]
    assert [s.side_channel_port for s in p.servers] == [5600, 5601, 5602, 5603]
    assert p.proxy is not None and len(p.proxy.prefill) == 2 and len(p.proxy.decode) == 2


def test_1p1d_tp2_on_four_gpus() -> None:
    p = plan(QWEN, "1p1d-tp2", sim_facts("b200", 4))
    assert [s.gpus for s in p.servers] == [(0, 1), (2, 3)]
    assert all("--tensor-parallel-size" in s.argv and s.argv[s.argv.index("--tensor-parallel-size") + 1] == "2"
               for s in p.servers)
    assert dict(p.servers[1].env)["CUDA_VISIBLE_DEVICES"] == "2,3"


@pytest.mark.parametrize("topo", ["tp4", "dp4"])
def test_four_gpu_single_endpoint(topo: str) -> None:
    p = plan(QWEN, topo, sim_facts("b200", 4))
    assert dict(p.servers[0].env)["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


def test_gpus_option_selects_devices() -> None:
    p = plan(QWEN, "1p1d", sim_facts("b200", 4), PlanOptions(gpus=(2, 3)))
    assert [s.gpus for s in p.servers] == [(2,), (3,)]


@pytest.mark.parametrize(
    ("profile", "topo", "facts", "needle"),
    [
        (QWEN, "tp4", B200X2, "needs 4 GPUs; this host has 2"),
        (QWEN, "2p2d", B200X2, "needs 4 GPUs"),
        (QWEN, "tp2", sim_facts("h200", 2), "needs compute capability 10.0"),
    ],
)
def test_refusals(profile: object, topo: str, facts: object, needle: str) -> None:
    with pytest.raises(PlanRefused, match=needle):
        plan(profile, topo, facts)  # type: ignore[arg-type]


def test_model_that_does_not_fit_is_refused() -> None:
    big = CAT.model("dummy-qwen3-8b")
    from dataclasses import replace

    huge = replace(big, weights_gib=400.0)
    with pytest.raises(PlanRefused, match="does not fit"):
        plan(huge, "tp1", sim_facts("h200", 1))


def test_moe_dp_warns() -> None:
    p = plan(GEMMA, "dp2", B200X2)
    assert any("MoE" in w and "--moe-backend triton" in w for w in p.warnings)
    assert not plan(GEMMA, "tp2", B200X2).warnings


def test_clashing_ports_refused() -> None:
    with pytest.raises(PlanRefused, match="SO_REUSEPORT"):
        plan(QWEN, "1p1d", B200X2, PlanOptions(port=8100))
    with pytest.raises(PlanRefused, match=r"side.channel"):
        plan(QWEN, "1p1d", B200X2, PlanOptions(side_channel_base=8200 - 1))


def test_apply_fix_sets_env_and_replaces_args() -> None:
    p = plan(QWEN, "tp2", B200X2)
    fixed = apply_fix(p, PlanFix(set_env=(("VLLM_USE_FLASHINFER_SAMPLER", "0"),),
                                 add_args=("--gpu-memory-utilization 0.80",)), "test-fix")
    s = fixed.servers[0]
    assert dict(s.env)["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert s.argv.count("--gpu-memory-utilization") == 1
    assert s.argv[s.argv.index("--gpu-memory-utilization") + 1] == "0.80"
    assert fixed.fixes_applied == ("test-fix",)
    undo = PlanFix(remove_args=("--trust-remote-code",), unset_env=("VLLM_USE_FLASHINFER_SAMPLER",))
    removed = apply_fix(fixed, undo, "undo")
    assert "--trust-remote-code" not in removed.servers[0].argv
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in dict(removed.servers[0].env)


def test_plan_round_trips_through_dict() -> None:
    p = plan(QWEN, "1p1d", B200X2)
    again = LaunchPlan.from_dict(json.loads(json.dumps(p.to_dict())))
    assert again.servers == p.servers and again.proxy == p.proxy and again.topology == "1p1d"


def test_shared_gpu_only_when_asked_and_within_memory() -> None:
    h200 = sim_facts("h200", 1)
    from tui.core.errors import InputError

    with pytest.raises(InputError, match="--allow-shared-gpus"):
        plan(DUMMY, "1p1d", h200, PlanOptions(gpus=(0, 0)))
    with pytest.raises(PlanRefused, match="lower --gpu-memory-utilization"):
        plan(DUMMY, "1p1d", h200, PlanOptions(gpus=(0, 0), allow_shared_gpus=True))
    p = plan(DUMMY, "1p1d", h200, PlanOptions(gpus=(0, 0), allow_shared_gpus=True, gpu_memory_utilization=0.4))
    assert [s.gpus for s in p.servers] == [(0,), (0,)] and p.shared_gpus
    assert any("functional check" in w for w in p.warnings)
    with pytest.raises(PlanRefused, match="cannot share"):
        plan(DUMMY, "tp2", sim_facts("h200", 2), PlanOptions(gpus=(0, 0), allow_shared_gpus=True,
                                                             gpu_memory_utilization=0.4))
