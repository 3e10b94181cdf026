"""A run's setup includes what its layout served with (issue 23, finding 6): every vLLM flag and variable of its
plan, normalised; runs served differently are rows of their own, the setup column naming the difference; only true
repeats are averaged; runs stored before plans were kept still load, their flags unknown."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.bench.benchpaths import BENCH1
from tests.bench.trustruns import layout_plan, records, write_run
from tui.core.bench import served, table
from tui.core.bench.store import PLAN_FILE, load_run, read_run_served
from tui.core.bench.vllmresult import import_vllm_result


def test_a_command_line_is_read_as_vllm_reads_it() -> None:
    a = served.argv_settings(["vllm", "serve", "org/model", "--max_num_batched_tokens=8192", "--enforce-eager",
                              "--gpu-memory-utilization", "0.90", "--gpu-memory-utilization", "0.95",
                              "--no-enable-prefix-caching", "-tp", "2", "--speculative-config",
                              '{"num_speculative_tokens": 3, "method": "ngram"}'])
    assert a == {"--max-num-batched-tokens": "8192", "--enforce-eager": "true", "--gpu-memory-utilization": "0.95",
                 "--enable-prefix-caching": "false", "--tensor-parallel-size": "2",
                 "--speculative-config": '{"method":"ngram","num_speculative_tokens":3}'}
    b = served.argv_settings(["/venv/bin/vllm", "serve", "/models/m", "--speculative-config",
                              '{"method":"ngram","num_speculative_tokens":3}', "--tensor-parallel-size=2",
                              "--enable-prefix-caching=false", "--max-num-batched-tokens", "8192",
                              "--gpu-memory-utilization=.95", "--enforce-eager"])
    assert a == b  # order, = or a space, - or _, a number's spelling, JSON's key order: one setting each
    kv = served.normal_value("--kv-transfer-config", '{"kv_role": "kv_producer", "kv_connector": "NixlConnector"}')
    assert kv == '{"kv_connector":"NixlConnector"}'  # the role is each server's, not the layout's
    assert served.argv_settings(["vllm", "serve", "m", "--seed", "-1"]) == {"--seed": "-1"}


def test_what_serves_nothing_is_left_out_by_name() -> None:
    s = served.server_settings(
        ["vllm", "serve", "m", "--host", "0.0.0.0", "--port", "8123", "--served-model-name", "my model",
         "--disable-log-requests", "--attention-backend", "TRITON_ATTN"],
        {"CUDA_VISIBLE_DEVICES": "2,3", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5601", "VLLM_ENGINE_READY_TIMEOUT_S": "1800",
         "HF_TOKEN": "<redacted>", "VLLM_USE_FLASHINFER_SAMPLER": "0"})
    assert s == {"--attention-backend": "TRITON_ATTN", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
    merged = served.merge([("prefill", {"--x": "1", "--y": "a"}), ("decode", {"--x": "1", "--y": "b"}),
                           ("decode", {"--x": "1"})])
    assert merged == (("--x", "1"), ("--y", "prefill: a; decode: b/(unset)"))
    assert served.shown("--enforce-eager", "true") == "--enforce-eager"
    assert served.shown("--enable-prefix-caching", "false") == "--no-enable-prefix-caching"
    assert served.shown("VLLM_X", "1") == "VLLM_X=1" and served.shown("--foo", None) == "no --foo"


def test_two_launches_of_one_layout_are_one_setup_and_topologies_differ_only_in_what_they_are() -> None:
    first = served.plan_settings(layout_plan("dp2", port=8000))
    again = served.plan_settings(layout_plan("dp2", port=18400, args=["--gpu-memory-utilization=0.9"]))
    assert first.known and first == again  # other ports, the planner's default given again by the operator
    pd = served.plan_settings(layout_plan("1p1d"))
    assert pd.get("--kv-transfer-config") == '{"kv_connector":"NixlConnector"}'
    assert pd.profile == "qwen3.6-27b-nvfp4"
    differ = {k for k, _ in set(first.settings) ^ set(pd.settings)}
    assert differ and all(served.topology_bound(k) for k in differ)  # dp2 and 1p1d differ in what they are only


# the H200 session: five tp1 layouts of one model, each with its own --arg, one bench each of one workload
VARIANTS = {"base": [], "triton": ["--attention-backend", "TRITON_ATTN"], "batched": ["--max-num-batched-tokens",
            "8192"], "fp8kv": ["--kv-cache-dtype", "fp8"],
            "spec": ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']}


def test_runs_served_differently_are_rows_of_their_own_and_only_true_repeats_are_averaged(tmp_path: Path) -> None:
    runs = [write_run(tmp_path, "c", f"tp1-{name}", "tp1", records(8, gap=0.01 + 0.001 * i),
                      plan_dict=layout_plan("tp1", args=args, port=8000 + 10 * i))
            for i, (name, args) in enumerate(VARIANTS.items())]
    # a true repeat of the first: the same served settings, written otherwise, on other ports
    runs.append(write_run(tmp_path, "c", "tp1-base-again", "tp1", records(8, gap=0.012),
                          plan_dict=layout_plan("tp1", args=["--max-model-len=32768"], port=9000)))
    cells = table.build_cells(runs)
    assert len(cells) == 5
    by_setup = {c.setup: c for c in cells}
    assert by_setup["--attention-backend TRITON_ATTN"].runs[0].id == "c/tp1-triton"
    assert "--max-num-batched-tokens 8192" in by_setup and "--kv-cache-dtype fp8" in by_setup
    assert any(s.startswith('--speculative-config {"method":"ngram"') for s in by_setup)
    base = next(c for c in cells if len(c.runs) == 2)
    assert {r.id for r in base.runs} == {"c/tp1-base", "c/tp1-base-again"}
    assert base.setup == "no --attention-backend/--kv-cache-dtype/--max-num-batched-tokens/--speculative-config"
    assert all(not c.group_setup for c in cells)  # measured alike: one comparison, five configurations in it
    marks = table.best_marks(cells)
    assert sum(1 for (_, col), v in marks.items() if col == "output_throughput" and v) == 1
    note = table.like_for_like_note(runs)
    assert note.startswith("NOT LIKE-FOR-LIKE: these runs differ in serve flag --attention-backend (--attention-"
                           "backend TRITON_ATTN vs no --attention-backend)")
    text = table.render_text(table.comparison_frame(cells))
    assert text.splitlines()[0].split()[:2] == ["topology", "setup"] and "tp1 (n=2)" in text
    # the verdicts compare the configurations as layouts of their own, and say one topology is all there is
    from tui.core.bench import recommend as rec_mod
    from tui.core.models import Workload

    rec = rec_mod.recommend(cells, {"decode-heavy": Workload("decode-heavy", 512, 2048)}, gpus=1)
    v = rec.objectives["max_throughput"][0]
    assert v.winner is None and v.missing == ("only tp1 measured on decode-heavy; its 5 serve configurations are "
                                              "compared in the table")


def test_a_dp2_and_a_1p1d_of_one_request_are_compared_without_a_setup_column(tmp_path: Path) -> None:
    a = write_run(tmp_path, "c", "dp2", "dp2", records(8), plan_dict=layout_plan("dp2"))
    b = write_run(tmp_path, "c", "1p1d", "1p1d", records(8, gap=0.02), plan_dict=layout_plan("1p1d"))
    cells = table.build_cells([a, b])
    assert [c.setup for c in cells] == ["", ""] and table.like_for_like_note([a, b]) == ""
    # the same --arg given to both: still alike; given to one only: named on both rows
    c = write_run(tmp_path, "d", "dp2", "dp2", records(8), plan_dict=layout_plan("dp2", args=["--enforce-eager"]))
    cells = table.build_cells([c, b])
    assert sorted(x.setup for x in cells) == ["--enforce-eager", "no --enforce-eager"]
    assert table.best_marks(cells)  # a configuration still competes with the others


def test_runs_stored_before_plans_were_kept_still_load(tmp_path: Path) -> None:
    old = write_run(tmp_path, "c", "old", "tp1", records(8), plan_dict=None)
    old2 = write_run(tmp_path, "c", "old2", "tp1", records(8, gap=0.011), plan_dict=None)
    assert not old.served.known and old.served.why == "stored without its plan"
    # alone: averaged as before, and said so
    cells = table.build_cells([old, old2])
    assert [(c.setup, len(c.runs)) for c in cells] == [("", 2)]
    assert table.unknown_flags_note([old, old2]).startswith("SERVE FLAGS UNKNOWN: no run compared kept its plan")
    # beside a run whose plan is known: a row of their own, marked as of unknown flags
    new = write_run(tmp_path, "c", "new", "tp1", records(8), plan_dict=layout_plan("tp1"))
    cells = table.build_cells([old, old2, new])
    assert sorted((c.setup, len(c.runs)) for c in cells) == [("", 1), ("serve flags unknown", 2)]
    assert "serve flags (2 of 3 runs stored without their plan: unknown)" in table.like_for_like_note(
        [old, old2, new])
    # an imported result: no plan, or the one 'results import --serve-env' writes, which says it was imported
    imported = import_vllm_result(BENCH1, topology="tp1", workload="decode-heavy", root=tmp_path)
    assert not imported.served.known
    (imported.path / PLAN_FILE).write_text(json.dumps({"imported": True, "topology": "tp1",
                                                       "servers": [{"argv": [], "env": {"VLLM_X": "1"}}]}))
    assert read_run_served(imported.path).why == "imported: the serve flags were not recorded"
    # a plan.json that is no plan, or not a regular file: unknown, never an error
    (old.path / PLAN_FILE).write_text("[1, 2]")
    assert read_run_served(old.path).why == "its plan is not an object"
    (old.path / PLAN_FILE).unlink()
    os.mkfifo(old.path / PLAN_FILE)
    assert read_run_served(old.path).why.startswith("its plan does not read")
    (old.path / PLAN_FILE).unlink()
    (old.path / PLAN_FILE).write_text(json.dumps({"servers": [{"argv": ["vllm", 3], "env": {}}]}))
    assert read_run_served(old.path).why == "its plan has a server whose argv does not read"
    assert load_run(old.path).summary["completed"] == 8
