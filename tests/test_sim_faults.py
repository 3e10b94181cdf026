"""Injected failures: vLLM's own lines in the right process and phase, the exit (or hang), and that the launch with
the fix starts. Each test starts the failing and the fixed server side by side, on different simulated GPUs (on the
same one, the second would fail vLLM's free-memory check, as it does on a real GPU)."""

from __future__ import annotations

import random
import re
import signal
import socket
import time

import httpx

from tests.simserver import SimServer, SimServers, free_port
from tui.core.models import Catalog
from tui.sim.gpustate import SimGpuState

INIT_FAILED = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
NIXL_PRODUCER = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'


def profile(pid: str) -> dict[str, object]:
    return Catalog.load().model(pid).to_dict()


def engine_error(s: SimServer, text: str, proc: str = "EngineCore") -> None:
    """``text`` is in an ERROR record of the engine process (core.py's ``EngineCore failed to start.``)."""
    out = s.stdout()
    pat = rf"^\({proc} pid=\d+\) ERROR \d\d-\d\d [\d:]+ \[core\.py:1231\] "
    assert re.search(pat + r"EngineCore failed to start\.\r?$", out, re.M), out[-3000:]
    assert re.search(pat + re.escape(text), out, re.M), out[-3000:]


def failed_start(s: SimServer) -> None:
    assert s.wait_exit() == 1
    assert INIT_FAILED in s.stderr()
    last = re.sub(r"^\([^)]*\) ", "", s.stderr().rstrip().splitlines()[-1])  # the DP parent has no prefix
    assert last.startswith(INIT_FAILED)


def test_flashinfer_without_nvcc_and_its_fix(sims: SimServers) -> None:
    bad = sims.start(faults="flashinfer-no-nvcc", startup_s=0.3)
    good = sims.start(faults="flashinfer-no-nvcc", startup_s=0.3, env={"VLLM_USE_FLASHINFER_SAMPLER": "0"},
                      devices="1")
    failed_start(bad)
    assert "Using FlashInfer for top-p & top-k sampling." in bad.stdout()
    engine_error(bad, "RuntimeError: Could not find nvcc and default cuda_home='/usr/local/cuda' doesn't exist")
    assert "Available KV cache memory" not in bad.stdout()  # the sampler warm-up runs in the memory profiling
    good.wait_ready()


def test_flashinfer_attention_on_blackwell_needs_another_backend(sims: SimServers) -> None:
    env = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    bad = sims.start(gpu="b200", faults="flashinfer-no-nvcc", startup_s=0.3, env=env)
    good = sims.start("--attention-backend", "TRITON_ATTN", gpu="b200", faults="flashinfer-no-nvcc",
                      startup_s=0.3, env=env, devices="1")
    failed_start(bad)
    out = bad.stdout()
    assert "Using FLASHINFER attention backend out of potential backends" in out
    assert out.index("Available KV cache memory") < out.index("Warming up FlashInfer attention.")
    engine_error(bad, "RuntimeError: Could not find nvcc")
    good.wait_ready()
    assert "Using AttentionBackendEnum.TRITON_ATTN backend." in good.stdout()


def test_flashinfer_jit_stall_hangs_silently_and_ignores_sigterm(sims: SimServers) -> None:
    bad = sims.start(faults="flashinfer-jit-stall", startup_s=0.3)
    good = sims.start(faults="flashinfer-jit-stall", startup_s=0.3, env={"VLLM_USE_FLASHINFER_SAMPLER": "0"},
                      devices="1")
    good.wait_ready()
    deadline = time.monotonic() + 10
    while "Graph capturing finished" not in bad.stdout() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.6)
    out = bad.stdout()
    assert out.rstrip().endswith("took 1.00 GiB")  # then silence
    assert "init engine" not in out and bad.proc.poll() is None and bad.health() is None
    bad.proc.send_signal(signal.SIGTERM)
    time.sleep(0.4)
    assert bad.proc.poll() is None  # as the real stall: SIGTERM ignored, SIGKILL needed


def test_dp_ready_timeout_and_its_fix(sims: SimServers) -> None:
    bad = sims.start("--data-parallel-size", "2", faults="dp-ready-timeout", startup_s=1.0, gpus=4, devices="0,1")
    good = sims.start("--data-parallel-size", "2", faults="dp-ready-timeout", startup_s=1.0, gpus=4, devices="2,3",
                      env={"VLLM_ENGINE_READY_TIMEOUT_S": "1800"})
    assert bad.wait_exit() == 1
    api0 = re.search(r"\(ApiServer_0 pid=(\d+)\) TimeoutError: Timed out waiting for engine core processes to start. "
                     r"This is often caused by slow weight loading for large models. Waited 600s \(configured by "
                     r"VLLM_ENGINE_READY_TIMEOUT_S\)", bad.stderr())
    assert api0, bad.stderr()[-2000:]
    assert re.search(rf"^ERROR .*Exception occurred while running API servers: Process ApiServer_0 \(PID: "
                     rf"{api0.group(1)}\) died with exit code 1$", bad.stdout(), re.M)
    # the timeout fires while the engines are still compiling; the parent reports once they are done
    log = bad.log()
    assert bad.stdout().index("init engine (profile") < bad.stdout().index("Exception occurred")
    assert "torch.compile took" in log
    good.wait_ready()


def test_moe_with_data_parallel_crashes_unless_triton_moe(sims: SimServers) -> None:
    gemma = profile("gemma-4-26b-a4b-fp8")
    bad = sims.start("--data-parallel-size", "2", "--trust-remote-code", gpu="b200", profile=gemma, startup_s=0.3,
                     model="RedHatAI/gemma-4-26B-A4B-it-FP8-Dynamic", defaults=False, gpus=4, devices="0,1")
    good = sims.start("--data-parallel-size", "2", "--moe-backend", "triton", gpu="b200", profile=gemma,
                      startup_s=0.3, defaults=False, gpus=4, devices="2,3")
    failed_start(bad)
    engine_error(bad, "AssertionError: Hidden size mismatch w1", proc="EngineCore_DP0")
    assert "cutlass_moe.py" in bad.stdout()
    good.wait_ready()


def test_kv_cache_too_small_for_max_model_len_and_its_fixes(sims: SimServers) -> None:
    bad = sims.start(faults="kv-too-small", startup_s=0.3)
    shorter = sims.start("--max-model-len", "8000", faults="kv-too-small", startup_s=0.3, defaults=False,
                         devices="1")
    failed_start(bad)
    m = re.search(r"ValueError: To serve at least one request with the model's max seq len \(16384\), \(([\d.]+) GiB "
                  r"KV cache is needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)\. Based on "
                  r"the available memory, the estimated maximum model length is (\d+)\. Try increasing "
                  r"`gpu_memory_utilization`", bad.stdout())
    assert m and float(m.group(1)) > float(m.group(2)) and int(m.group(3)) < 16384
    shorter.wait_ready()
    assert re.search(r"GPU KV cache size: [\d,]+ tokens", shorter.stdout())


def test_gpu_memory_held_by_another_process(sims: SimServers) -> None:
    bad = sims.start(faults="gpu-memory-taken", startup_s=0.3)
    good = sims.start("--gpu-memory-utilization", "0.5", faults="gpu-memory-taken", startup_s=0.3,
                      defaults=False, devices="1")
    failed_start(bad)
    m = re.search(r"ValueError: Free memory on device cuda:0 \(([\d.]+)/139\.8 GiB\) on startup is less than desired "
                  r"GPU memory utilization \(0\.85, 118\.83 GiB\)\. Decrease GPU memory utilization or reduce GPU "
                  r"memory used by other processes\.", bad.stdout())
    assert m and float(m.group(1)) < 0.85 * 139.8
    good.wait_ready()
    names = {c.name for c in SimGpuState(good.state_dir).claims() if 1 in c.gpus}
    assert names == {"python3", "VLLM::EngineCore"}  # the other process shows up on the simulated GPU


def _free_port_below(limit: int) -> int:
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(2000, limit)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port below 9000")


def test_port_taken_fires_below_9000_and_for_a_plain_listener(sims: SimServers) -> None:
    bad = sims.start(faults="port-taken", startup_s=0.3, port=_free_port_below(9000))
    good = sims.start(faults="port-taken", startup_s=0.3, devices="1")
    held = socket.socket()
    held.bind(("127.0.0.1", free_port()))
    held.listen(1)
    try:
        plain = sims.start(startup_s=0.3, port=held.getsockname()[1])
        for s in (bad, plain):
            assert s.wait_exit() == 1
            assert s.stderr().rstrip().endswith("OSError: [Errno 98] Address already in use")
            assert "sock.bind(addr)" in s.stderr() and "Initializing a V1 LLM engine" not in s.stdout()
    finally:
        held.close()
    good.wait_ready()


def test_nixl_missing_only_behind_a_nixl_connector(sims: SimServers) -> None:
    bad = sims.start("--kv-transfer-config", NIXL_PRODUCER, faults="nixl-missing", startup_s=0.3,
                     env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())})
    plain = sims.start(faults="nixl-missing", startup_s=0.3, devices="1")
    failed_start(bad)
    out = bad.stdout()
    assert re.search(r"^\(APIServer pid=\d+\) WARNING .* \[nixl_utils\.py:58\] NIXL is not available$", out, re.M)
    assert re.search(r"^\(EngineCore pid=\d+\) ERROR .* \[base_worker\.py:241\] NIXL is not available$", out, re.M)
    engine_error(bad, "RuntimeError: NIXL is not available")
    plain.wait_ready()


def test_hybrid_model_behind_nixl_needs_the_ds_layout(sims: SimServers) -> None:
    qwen = profile("qwen3.6-27b-nvfp4")
    args = ("--kv-transfer-config", NIXL_PRODUCER, "--trust-remote-code")
    bad = sims.start(*args, gpu="b200", profile=qwen, startup_s=0.3, faults="ssm-layout",
                     env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())})
    good = sims.start(*args, gpu="b200", profile=qwen, startup_s=0.3, faults="ssm-layout", devices="1",
                      env={"VLLM_SSM_CONV_STATE_LAYOUT": "DS", "VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())})
    failed_start(bad)
    engine_error(bad, "AssertionError: 3-read Mamba conv transfer requires DS conv state layout. Set "
                      "VLLM_SSM_CONV_STATE_LAYOUT=DS")
    good.wait_ready()
    assert "Setting SSM conv state layout to DS." in good.stdout()


def test_triton_jit_stalls_the_first_batch_once(sims: SimServers) -> None:
    s = sims.start(faults="triton-jit", startup_s=0.3, clock=5.0)
    s.wait_ready()
    assert "Kernel JIT monitor activated" in s.stdout()
    body = {"prompt": [7] * 64, "max_tokens": 100}  # long enough for concurrent requests to share steps
    with httpx.Client(timeout=30) as c:
        single = time.monotonic()
        c.post(s.url + "/v1/completions", json=body)  # one sequence: no new kernel shape, no stall
        single = time.monotonic() - single
        import concurrent.futures as cf

        with cf.ThreadPoolExecutor(4) as pool:
            start = time.monotonic()
            list(pool.map(lambda _: c.post(s.url + "/v1/completions", json=body), range(4)))
            batch = time.monotonic() - start
            start = time.monotonic()
            list(pool.map(lambda _: c.post(s.url + "/v1/completions", json=body), range(4)))
            again = time.monotonic() - start
    # 8 s of virtual time at clock 5
    assert batch > 8.0 / 5 and again < batch / 2 and single < batch / 2, (single, batch, again)
    assert re.search(r"^\(EngineCore pid=\d+\) WARNING .* \[jit_monitor\.py:106\] Triton kernel JIT compilation "
                     r"during inference: _topk_topp_kernel\. This causes a latency spike", s.stdout(), re.M)
    assert s.stdout().count("Triton kernel JIT compilation during inference") == 1
