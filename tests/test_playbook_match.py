"""Matching: every real log gets the diagnosis MANIFEST.md's table gives, healthy logs give "no known failure", and
every failure template of VLLM-0.24.md §6 is recognised with other numbers, paths, pids, process names and prefixes.
"""

from __future__ import annotations

import pytest

from tests.conftest import H200
from tui.core.events import EventBus, event_from_dict, registered_kinds
from tui.core.playbook import Diagnosis, MatchContext, Playbook, diagnose_file, diagnose_lines, load_playbook


@pytest.fixture(scope="module")
def book() -> Playbook:
    return load_playbook(operator=False)


# --- the real captures -----------------------------------------------------------------------------------------

# MANIFEST.md "Expected diagnosis per failure log here": (log, the problems expected, in report order)
EXPECTED = [
    ("failures/fail_unknown_flag.log", ["unknown-flag"]),
    ("failures/fail_max_model_len_over_derived.log", ["max-model-len-over-derived"]),
    ("failures/fail_port_in_use_plain_listener.log", ["port-in-use"]),
    ("failures/fail_flashinfer_cudahome_empty.log", ["flashinfer-no-nvcc"]),
    ("failures/fail_flashinfer_no_nvcc.log", ["flashinfer-jit-stall"]),
    ("failures/fail_flashinfer_path_only_rerun.log", ["flashinfer-jit-stall"]),
    ("failures/fail_engine_ready_timeout.log", []),  # that start succeeded
    ("startup/main.log", []),
]


@pytest.mark.parametrize(("name", "expected"), EXPECTED, ids=[n for n, _ in EXPECTED])
def test_real_logs_get_the_manifest_diagnosis(book: Playbook, name: str, expected: list[str]) -> None:
    result = diagnose_file(H200 / name, book)
    assert [d.entry_id for d in result.problems] == expected
    assert result.known_failure == bool(expected)


def test_line_numbers_and_texts_point_at_the_cause(book: Playbook) -> None:
    r = diagnose_file(H200 / "failures/fail_unknown_flag.log", book)
    [d] = r.problems
    assert (d.line_no, d.rule) == (3, "line")
    assert d.line.endswith("main.py: error: unrecognized arguments: --no-such-flag 1")
    assert d.changes == ("remove --no-such-flag",) and not d.auto
    r = diagnose_file(H200 / "failures/fail_flashinfer_cudahome_empty.log", book)
    [d] = r.problems
    assert d.line_no == 106 and "RuntimeError: Ninja build failed. Ninja output:" in d.line
    # a saved log says nothing of the GPU: Triton attention is offered for Blackwell only (the capture is Hopper)
    assert d.auto and d.changes == ("set VLLM_USE_FLASHINFER_SAMPLER=0",)
    assert "add --attention-backend TRITON_ATTN (on blackwell only)" in d.fix
    # the generic "EngineCore failed to start" (line 36, before the cause) and the front end's "Engine core
    # initialization failed" (the last line) do not hide it and are not reported beside it
    assert all(x.entry_id != "engine-core-start-failed" for x in r.diagnoses)
    r = diagnose_file(H200 / "failures/fail_max_model_len_over_derived.log", book)
    assert r.problems[0].line_no == 56


def test_stall_rule_judges_the_whole_log(book: Playbook) -> None:
    r = diagnose_file(H200 / "failures/fail_flashinfer_no_nvcc.log", book)
    [d] = r.problems
    assert d.rule == "end" and not r.ready and r.phase == "graphs_done"
    assert d.line_no == 38 and "Graph capturing finished" in d.line
    assert "without 'Application startup complete.'" in d.detail and "nothing after line 38" in d.detail
    # the same log, but the process exited on its own: not a stall, and nothing else explains it
    m = book.matcher()
    for n, line in enumerate((H200 / "failures/fail_flashinfer_no_nvcc.log").read_text().split("\n"), 1):
        m.feed(line, n)
    assert m.finish(exit_code=1, ready=False) == []
    # given up by the app, which then killed it (SIGKILL): still the stall, not "killed by a signal"
    m = book.matcher()
    for line in (H200 / "failures/fail_flashinfer_no_nvcc.log").read_text().split("\n"):
        m.feed(line)
    assert [d.entry_id for d in m.finish(exit_code=-9, ready=False, stalled_phase="graphs_done")] == \
        ["flashinfer-jit-stall"]
    # and had it become ready, nothing at all
    m = book.matcher()
    for line in (H200 / "failures/fail_flashinfer_no_nvcc.log").read_text().split("\n"):
        m.feed(line)
    assert m.finish(ready=True) == []


def test_healthy_log_has_only_an_info_note_which_is_not_a_failure(book: Playbook) -> None:
    # startup/main.log has vLLM's jit_monitor warning "Triton kernel JIT compilation during inference": the
    # playbook reports it as an info note (warm up before measuring), and info notes are not known failures
    r = diagnose_file(H200 / "startup/main.log", book)
    assert r.ready and not r.known_failure and r.problems == []
    [note] = r.notes
    assert (note.entry_id, note.severity, note.line_no) == ("triton-jit-during-inference", "info", 258)
    assert note.captures == {"kernel": "_topk_topp_kernel"}


def test_live_feed_reports_at_the_line(book: Playbook) -> None:
    m = book.matcher("prefill-0")
    lines = (H200 / "failures/fail_port_in_use_plain_listener.log").read_text().split("\n")
    hits = {n: m.feed(line, n) for n, line in enumerate(lines, 1)}
    [(n, [d])] = [(n, ds) for n, ds in hits.items() if ds]
    assert n == 38 and d.server == "prefill-0" and d.entry_id == "port-in-use"
    assert m.finish(exit_code=1, ready=False) == []
    assert m.finish(exit_code=1, ready=False) == []  # once only
    assert [x.entry_id for x in m.diagnoses] == ["port-in-use"]


# --- the message templates of VLLM-0.24.md §6, with other values -----------------------------------------------

PREFIXES = [
    "",
    "(EngineCore_DP1 pid=48213) ERROR 03-17 22:05:41 [core.py:1231] ",
    "(Worker_TP3 pid=907) ERROR 12-01 00:00:09 [v1/worker/gpu_worker.py:640] ",
    "2027-02-03T04:05:06.789012Z stderr F (ApiServer_1 pid=31337) ",
    "[2027-02-03T04:05:06.789Z +1234.500s] ",
    "Feb  3 04:05:06 gpu-node-17 vllm[2210]: ",
]

TEMPLATES = [
    # engine ready timeout (DP), core_client.py:621, and its elastic variant
    ("engine-ready-timeout", "TimeoutError: Timed out waiting for engine core processes to start. This is often "
     "caused by slow weight loading for large models. Waited 1200s (configured by VLLM_ENGINE_READY_TIMEOUT_S). To "
     "increase the timeout, set the environment variable: VLLM_ENGINE_READY_TIMEOUT_S=<seconds>"),
    ("engine-ready-timeout", "TimeoutError: Timed out waiting for new engine core processes to start. Waited 45s"),
    ("engine-frontend-handshake-timeout", "RuntimeError: Did not receive response from front-end process within 7 "
     "minutes"),
    # FlashInfer without nvcc: flashinfer/jit/cpp_ext.py
    ("flashinfer-no-nvcc", "RuntimeError: Could not find nvcc and default cuda_home='/opt/cuda-12.8' doesn't exist"),
    ("flashinfer-no-nvcc", "RuntimeError: Ninja build failed. Ninja output: [1/7] /srv/cuda/bin/nvcc --generate"),
    ("flashinfer-no-nvcc", "/bin/bash: line 3: /home/op/no-cuda/bin/nvcc: not found"),
    ("flashinfer-sampler-unavailable", "RuntimeError: FlashInfer top-p/top-k sampling unavailable: compute "
     "capability 7.5 not supported. Unset VLLM_USE_FLASHINFER_SAMPLER=1."),
    # SSM conv layout
    ("ssm-conv-layout-nixl", "AssertionError: 3-read Mamba conv transfer requires DS conv state layout. Set "
     "VLLM_SSM_CONV_STATE_LAYOUT=DS"),
    # NIXL
    ("nixl-not-installed", "RuntimeError: NIXL is not available"),
    ("nixl-not-installed", "ERROR 04-05 06:07:08 [base_worker.py:241] NIXL is not available"),
    ("nixl-handshake-failure", "NIXL transfer failure: handshake_failed. timed out after 30 s | Context: "
     "{'remote_engine_id': 'a1b2c3d4-e5f6-7890-abcd-ef0123456789_dp1', 'remote_host': '10.1.2.3'}"),
    ("nixl-handshake-failure", "NIXL transfer failure: handshake_setup_failed | Context: {}"),
    ("nixl-transfer-failure", "NIXL transfer failure: transfer_failed | Context: {'request_id': 'cmpl-9-0-1f2e3d4c'}"),
    ("nixl-transfer-failure", "NIXL transfer failure: notification_failed. peer gone | Context: {}"),
    ("nixl-kv-lease-expired", "Releasing expired KV blocks for request cmpl-77aa-0-0badc0de which were retrieved "
     "by 2 remote worker(s) before lease expired."),
    ("nixl-invalid-kv-params", "Got invalid KVTransferParams: {'do_remote_prefill': True}. This request will not "
     "utilize KVTransfer"),
    # the real H200 line (1P1D on one GPU) and a slow one with other figures
    ("nixl-slow-transfer", "[metrics.py:103] KV Transfer metrics: Num successful transfers=4, Avg xfer time "
     "(ms)=4047.558, P90 xfer time (ms)=4371.605, Avg post time (ms)=4.3, P90 post time (ms)=6.157, Avg MB per "
     "transfer=281.25, Throughput (MB/s)=69.486, Avg number of descriptors=9000.0"),
    ("nixl-slow-transfer", "KV Transfer metrics: Num successful transfers=120, Avg xfer time (ms)=12.5, P90 xfer "
     "time (ms)=20.1, Avg post time (ms)=0.2, P90 post time (ms)=0.3, Avg MB per transfer=9.1, Throughput "
     "(MB/s)=728, Avg number of descriptors=300.0"),
    # memory
    ("no-kv-cache-memory", "ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on the "
     "CPU backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
     "details."),
    ("no-kv-cache-memory", "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single "
     "token. Try increasing `gpu_memory_utilization`."),
    ("kv-cache-too-small-for-max-len", "ValueError: To serve at least one request with the model's max seq len "
     "(65536), (12.75 GiB KV cache is needed, which is larger than the available KV cache memory (3.10 GiB). Based "
     "on the available memory, the estimated maximum model length is 15936. Try increasing `gpu_memory_utilization` "
     "(which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the "
     "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."),
    ("gpu-memory-taken", "ValueError: Free memory on device cuda:3 (41.2/79.18 GiB) on startup is less than desired "
     "GPU memory utilization (0.92, 72.85 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
     "processes."),
    ("memory-profiling-error", "AssertionError: Error in memory profiling. Initial free memory 80.1 GiB, current "
     "free memory 81.0 GiB. This happens when other processes sharing the same container release GPU memory while "
     "vLLM is profiling during initialization."),
    ("cuda-oom-loading", "Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to "
     "free memory for weights, increasing --tensor-parallel-size, or using --quantization. See "
     "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips. (original error: CUDA out of "
     "memory. Tried to allocate 1.50 GiB)"),
    ("cuda-oom-sampler-warmup", "RuntimeError: CUDA out of memory occurred when warming up sampler with 512 dummy "
     "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."),
    # ports and the command line (the program name varies: vllm, main.py, vllm serve)
    ("port-in-use", "OSError: [Errno 98] Address already in use"),
    ("port-in-use", "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 9100): address "
     "already in use"),
    ("unknown-flag", "vllm: error: unrecognized arguments: --tensor-paralel-size 4"),
    ("unknown-flag", "vllm serve: error: ambiguous option: --max-num could match --max-num-batched-tokens, "
     "--max-num-seqs, --max-num-partial-prefills"),
    ("bad-json-config", "vllm serve: error: argument --kv-transfer-config: 1 validation error for KVTransferConfig"),
    ("bad-json-config", "  Unexpected keyword argument [type=unexpected_keyword_argument, input_value=1, "
     "input_type=int]"),
    ("bad-flag-value", "main.py: error: argument --tensor-parallel-size/-tp: invalid int value: 'two'"),
    ("bad-flag-value", "ValueError: `model` should be provided as the first positional argument when using `vllm "
     "serve`. i.e. `vllm serve <model> --<arg> <value>`."),
    ("port-retried", "WARNING 02-03 04:05:06 [parallel.py:624] Address already in use. Retrying with a new port."),
    ("port-retried", "Port 29551 is already in use, trying port 29552"),
    ("vllm-port-uri", "ValueError: VLLM_PORT 'tcp://10.96.14.2:8000' appears to be a URI. This may be caused by a "
     "Kubernetes service discovery issue"),
    ("attention-backend-rejected", "ValueError: Unknown attention backend: 'TRITON'. Valid options are: FLASH_ATTN, "
     "TRITON_ATTN, FLASHINFER"),
    ("attention-backend-rejected", "ValueError: Selected backend AttentionBackendEnum.FLASHMLA is not valid for this "
     "configuration. Reason: ['head_size not supported']"),
    ("non-moe-external-dp", "ValueError: Non-MoE models do not support external data parallel mode. For external "
     "load balancing, launch independent vLLM instances without --data-parallel-* arguments."),
    # environment
    ("vllm-attention-backend-env-ignored", "WARNING 05-06 07:08:09 [envs.py:2004] Unknown vLLM environment "
     "variable detected: VLLM_ATTENTION_BACKEND"),
    ("unknown-vllm-env", "Unknown vLLM environment variable detected: VLLM_USE_V1"),
    ("triton-jit-during-inference", "WARNING 07-08 09:10:11 [jit_monitor.py:106] Triton kernel JIT compilation "
     "during inference: _fused_moe_kernel. This causes a latency spike; consider extending warmup to cover this "
     "shape/config."),
    # MoE (without knowing the topology the DP entry, the more specific one, claims the line)
    ("moe-dp-start-failure", "NotImplementedError: No FP8 MoE backend supports the deployment configuration."),
    ("moe-dp-start-failure", "ValueError: FP8 MoE backend cutlass does not support the deployment configuration "
     "since expert map is unsupported."),
    ("moe-dp-start-failure", "AssertionError: W1 scale shape mismatch"),
    ("moe-dp-start-failure", "RuntimeError: Configuration mismatch detected for engine 1. All DP workers must have "
     "identical configurations for parameters that affect collective communication"),
]
GENERIC = [
    ("engine-core-start-failed", "EngineCore failed to start."),
    ("engine-core-start-failed", "RuntimeError: Engine core initialization failed. See root cause above. Failed "
     "core proc(s): {'EngineCore_DP3': 1}"),
    ("engine-core-start-failed", "WorkerProc failed to start."),
    ("engine-core-start-failed", "Exception: WorkerProc initialization failed due to an exception in a background "
     "process. See stack trace for root cause."),
    ("engine-core-died", "EngineCore encountered a fatal error."),
    ("engine-core-died", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
     "trace (above) for the root cause."),
    ("engine-core-died", "Worker proc VllmWorker-5 died unexpectedly, shutting down executor."),
    ("engine-core-died", "Engine core process EngineCore_DP1 died unexpectedly."),
    ("api-server-died", "Exception occurred while running API servers: Process ApiServer_3 (PID: 90210) died with "
     "exit code 1"),
    # the profile run's raw torch OOM: broad, so it waits for a more specific cause
    ("cuda-oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.02 GiB. GPU 1 has a total "
     "capacity of 139.81 GiB of which 1.20 GiB is free. Process 5521 has 138.6 GiB memory in use."),
    ("cuda-oom", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB."),
]


@pytest.mark.parametrize("prefix", PREFIXES, ids=range(len(PREFIXES)))
@pytest.mark.parametrize(("entry_id", "message"), TEMPLATES, ids=[f"{e}-{i}" for i, (e, _) in enumerate(TEMPLATES)])
def test_template_lines_are_recognised_with_other_values_and_prefixes(book: Playbook, entry_id: str, message: str,
                                                                      prefix: str) -> None:
    m = book.matcher()
    got = m.feed(prefix + message + "\r\n", 412)
    assert [(d.entry_id, d.line_no) for d in got] == [(entry_id, 412)]


@pytest.mark.parametrize("prefix", PREFIXES[:3], ids=range(3))
@pytest.mark.parametrize(("entry_id", "message"), GENERIC, ids=[f"{e}-{i}" for i, (e, _) in enumerate(GENERIC)])
def test_generic_lines_wait_for_the_end_and_then_report(book: Playbook, entry_id: str, message: str,
                                                        prefix: str) -> None:
    m = book.matcher()
    assert m.feed(prefix + message) == []
    assert [d.entry_id for d in m.finish(exit_code=1, ready=False)] == [entry_id]


def test_the_healthy_lines_of_every_real_log_match_nothing_above_info(book: Playbook) -> None:
    for path in [H200 / "startup/main.log", H200 / "failures/fail_engine_ready_timeout.log"]:
        m = book.matcher()
        for line in path.read_text(encoding="utf-8").split("\n"):
            assert all(d.severity == "info" for d in m.feed(line)), line


def test_fast_kv_transfers_are_not_reported(book: Playbook) -> None:
    m = book.matcher()
    line = ("(APIServer pid=9) INFO 11-29 11:09:34 [metrics.py:103] KV Transfer metrics: Num successful transfers=64, "
            "Avg xfer time (ms)=0.853, P90 xfer time (ms)=1.2, Avg post time (ms)=0.1, P90 post time (ms)=0.2, Avg MB "
            "per transfer=35.1, Throughput (MB/s)=41152.3, Avg number of descriptors=342.5")
    assert m.feed(line) == []
    assert m.feed(line.replace("=41152.3", "=1000.0")) == []


def test_nixl_port_clash_needs_the_listener_traceback(book: Playbook) -> None:
    tail = "zmq.error.ZMQError: Address already in use (addr='tcp://10.0.0.5:5731')"
    m = book.matcher()
    assert m.feed(f"(EngineCore pid=8) {tail}") == []
    m = book.matcher()
    m.feed("(EngineCore pid=8) Exception in thread nixl_handshake_listener:")
    m.feed("(EngineCore pid=8) Traceback (most recent call last):")
    m.feed('(EngineCore pid=8)   File "/venv/lib/python3.12/site-packages/zmq/sugar/socket.py", line 311, in bind')
    [d] = m.feed(f"(EngineCore pid=8) {tail}")
    assert d.entry_id == "nixl-side-channel-port-clash" and d.captures == {"port": "5731"}
    # the start then hangs: finishing it as stalled adds nothing, the clash already explains it
    assert m.finish(stalled_phase="engine_init") == []


# --- the kept-aside logs: their texts from MANIFEST.md's failure table, as full log lines ------------------------


def _log(*messages: str, proc: str = "EngineCore", pid: int = 2044) -> list[str]:
    return [f"[2026-11-29T07:40:{i:02d}.000Z + {30 + i}.000s] ({proc} pid={pid}) {m}" for i, m in enumerate(messages)]


def test_kept_aside_port_in_use_is_the_gpu_memory_of_the_other_server(book: Playbook) -> None:
    lines = _log(
        "INFO 11-29 07:40:01 [core.py:114] Initializing a V1 LLM engine (v0.24.0) with config: model='/tmp/model'",
        "ERROR 11-29 07:40:35 [core.py:1231] EngineCore failed to start.",
        "ERROR 11-29 07:40:35 [core.py:1231] ValueError: Free memory on device cuda:0 (18.15/139.8 GiB) on startup "
        "is less than desired GPU memory utilization (0.85, 118.83 GiB). Decrease GPU memory utilization or reduce "
        "GPU memory used by other processes.",
    ) + _log("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
             proc="APIServer", pid=1999)
    r = diagnose_lines(lines, book)
    assert [d.entry_id for d in r.diagnoses] == ["gpu-memory-taken"]


def test_kept_aside_gpu_mem_util_0_05(book: Playbook) -> None:
    lines = _log("INFO 11-29 07:40:02 [gpu_worker.py:508] Available KV cache memory: -9.48 GiB",
                 "ERROR 11-29 07:40:03 [core.py:1231] ValueError: No available memory for the cache blocks. Try "
                 "increasing gpu_memory_utilization when initializing the engine …")
    r = diagnose_lines(lines, book)
    [d] = r.diagnoses
    assert d.entry_id == "no-kv-cache-memory" and d.line_no == 1  # the negative KV memory already says it


def test_kept_aside_kv_cache_too_small_for_max_len(book: Playbook) -> None:
    lines = _log("ERROR 11-29 07:41:45 [core.py:1231] ValueError: To serve at least one request with the model's max "
                 "seq len (1000000), (137.33 GiB KV cache is needed, which is larger than the available KV cache "
                 "memory (102.04 GiB). Based on the available memory, the estimated maximum model length is 743056. "
                 "Try increasing gpu_memory_utilization … or decreasing max_model_len …")
    [d] = diagnose_lines(lines, book).diagnoses
    assert d.entry_id == "kv-cache-too-small-for-max-len" and d.changes == ("add --max-model-len 743056",)


# --- priority, dedupe, conditions, end rules ------------------------------------------------------------------


def test_specific_cause_first_and_broad_ones_dropped(book: Playbook) -> None:
    m = book.matcher()
    m.feed("(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1231] EngineCore failed to start.")
    m.feed("(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1231] Failed to load model - not enough GPU memory. "
           "Try lowering --gpu-memory-utilization (original error: CUDA out of memory)")
    m.feed("(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1231] torch.OutOfMemoryError: CUDA out of memory. "
           "Tried to allocate 2.00 GiB")
    m.feed("(APIServer pid=0) RuntimeError: Engine core initialization failed. See root cause above.")
    assert m.finish(exit_code=1) == []
    assert [d.entry_id for d in m.diagnoses] == ["cuda-oom-loading"]
    # without the specific message, the broad OOM explains it and outranks the generic engine failure
    m = book.matcher()
    m.feed("EngineCore failed to start.")
    m.feed("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert [d.entry_id for d in m.finish(exit_code=1)] == ["cuda-oom"]


def test_report_order_errors_first_then_priority(book: Playbook) -> None:
    m = book.matcher()
    m.feed("WARNING 01-01 00:00:00 [jit_monitor.py:106] Triton kernel JIT compilation during inference: k1.")
    m.feed("WARNING 01-01 00:00:00 [envs.py:2004] Unknown vLLM environment variable detected: VLLM_ATTENTION_BACKEND")
    m.feed("OSError: [Errno 98] Address already in use")
    m.feed("NIXL transfer failure: transfer_failed | Context: {}")
    assert [d.entry_id for d in m.diagnoses] == ["port-in-use", "nixl-transfer-failure",
                                                 "vllm-attention-backend-env-ignored", "triton-jit-during-inference"]


def test_one_diagnosis_per_entry_unless_its_named_groups_differ(book: Playbook) -> None:
    m = book.matcher("decode-0")
    line = "/bin/sh: 1: /tmp/x/bin/nvcc: not found"
    assert len(m.feed(line)) == 1
    assert m.feed(line) == [] and m.feed(line.replace("/tmp/x", "/tmp/y")) == []
    assert [d.captures for d in m.feed("Triton kernel JIT compilation during inference: kern_a. x")] == \
        [{"kernel": "kern_a"}]
    assert m.feed("Triton kernel JIT compilation during inference: kern_a. again") == []
    assert len(m.feed("Triton kernel JIT compilation during inference: kern_b. x")) == 1
    assert len(m.diagnoses) == 3


def test_when_conditions_pick_the_entry_from_context_and_log(book: Playbook) -> None:
    line = "NotImplementedError: No FP8 MoE backend supports the deployment configuration."
    tp = book.matcher(context=MatchContext(family="moe", topology="tp"))
    assert [d.entry_id for d in tp.feed(line)] == ["moe-backend-unsupported"]
    dp = book.matcher(context=MatchContext.for_launch(None, "dp2"))
    assert [d.entry_id for d in dp.feed(line)] == ["moe-dp-start-failure"]
    # read from the log: non-default args without data_parallel_size means not DP
    logged = book.matcher()
    logged.feed("(APIServer pid=3) INFO 01-01 00:00:00 [api_utils.py:273] non-default args: {'model_tag': 'x', "
                "'tensor_parallel_size': 2}")
    assert logged.context.topology == "tp"
    assert [d.entry_id for d in logged.feed(line)] == ["moe-backend-unsupported"]
    dp_log = book.matcher()
    dp_log.feed("INFO 01-01 00:00:00 [api_utils.py:273] non-default args: {'model_tag': 'x', 'data_parallel_size': 2}")
    dp_log.feed("(APIServer pid=3) INFO 01-01 00:00:00 [api_utils.py:339]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.24.0")
    assert (dp_log.context.topology, dp_log.context.vllm_version) == ("dp", "0.24.0")


def test_moe_dp_end_rule_needs_the_facts_known(book: Playbook) -> None:
    # a MoE model under DP on 0.24 that died with only the generic engine failure: the end rule names it
    known = book.matcher(context=MatchContext(family="moe", topology="dp", vllm_version="0.24.0"))
    known.feed("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
               "{'EngineCore_DP0': 1}")
    assert [d.entry_id for d in known.finish(exit_code=1)] == ["moe-dp-start-failure"]
    assert known.diagnoses[0].rule == "end"
    # the same log when nobody knows the model: no guess, only the generic line
    unknown = book.matcher()
    unknown.feed("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    assert [d.entry_id for d in unknown.finish(exit_code=1)] == ["engine-core-start-failed"]


def test_end_rules_on_exit_status_and_stalled_phase(book: Playbook) -> None:
    m = book.matcher()
    m.feed("(EngineCore pid=5) INFO 01-01 00:00:00 [model_runner.py:281] Loading model from scratch...")
    [d] = m.finish(exit_code=-9, ready=False)
    assert d.entry_id == "killed-by-signal" and "exited with status -9" in d.detail
    m = book.matcher()
    m.feed("(EngineCore pid=5) INFO 01-01 00:00:00 [backends.py:1148] Dynamo bytecode transform time: 9.96 s")
    [d] = m.finish(stalled_phase="compiling")
    assert d.entry_id == "start-stalled-compiling" and "given up while still running" in d.detail
    m = book.matcher()
    m.feed("(EngineCore pid=5) INFO 01-01 00:00:00 [model_runner.py:281] Loading model from scratch...")
    assert [d.entry_id for d in m.finish(ready=False, stalled_phase="loading")] == ["start-stalled-loading"]


def test_diagnosis_is_an_event_that_round_trips(book: Playbook) -> None:
    assert registered_kinds()["diagnosis"] is Diagnosis
    [d] = book.matcher("server").feed("vllm: error: unrecognized arguments: --foo 3")
    again = event_from_dict(d.to_dict())
    assert again == d and isinstance(again, Diagnosis)
    bus = EventBus()
    got: list[object] = []
    bus.subscribe(got.append)
    bus.publish(d)
    assert got == [d] and d.is_failure and "unknown-flag" in d.headline()


def test_what_the_log_tells_keeps_the_gpu_architecture(book: Playbook) -> None:
    m = book.matcher(context=MatchContext(gpu_arch="blackwell"))
    m.feed("(APIServer pid=1) INFO 01-02 03:04:05 [api_server.py:1] vLLM server version 0.24.0")
    m.feed("(APIServer pid=1) INFO 01-02 03:04:05 [utils.py:1] non-default args: {'data_parallel_size': 2}")
    assert (m.context.vllm_version, m.context.topology, m.context.gpu_arch) == ("0.24.0", "dp", "blackwell")
