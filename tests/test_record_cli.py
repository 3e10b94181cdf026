"""The recorded session through the CLI: a simulated campaign recorded by ``run`` replays with ``replay --headless``
to the results it printed, byte for byte (the shipped sample and a fresh run); bundles: export → import on a clean
profile directory → ``plan`` gives the same commands; no secret in a bundle; a malformed bundle is one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import layout_port_args
from tui.cli.main import main
from tui.core import paths
from tui.core.record import Recording

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = "sim-bakeoff-qwen3.6-27b-dp2-tp2-1p1d.dtrec"
LIVE_STDOUT = Path(__file__).parent / "fixtures" / "recordings" / "sim-bakeoff-live-stdout.txt"
TOKEN = "hf_" + "q7" * 14  # a made-up token


def test_shipped_sample_replays_to_the_table_the_live_run_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert (paths.shipped_recordings_dir() / SAMPLE).stat().st_size <= 5_000_000
    assert main(["replay", f"recordings/{SAMPLE}", "--headless"]) == 0
    out = capsys.readouterr().out
    assert LIVE_STDOUT.read_text(encoding="utf-8") in out
    assert re.search(r"dp2 of qwen3.6-27b-nvfp4: ready after \d+\.\d s", out)
    assert "1p1d of qwen3.6-27b-nvfp4: ready after" in out and "runs: 6 finished (6 complete)" in out
    # a bare name is found among the shipped samples; without a terminal (a pipe, CI) replay prints the summary
    # instead of opening the console (tests/console/test_console_replay.py replays it in the console)
    assert main(["replay", SAMPLE]) == 0
    captured = capsys.readouterr()
    assert LIVE_STDOUT.read_text(encoding="utf-8") in captured.out


def test_run_records_by_default_and_replays_byte_for_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    (tmp_path / "wl.yaml").write_text("name: tiny\ninput_len: 32\noutput_len: 64\nnum_prompts: 4\n")
    argv = ["run", "--sim", "--sim-startup", "0.3", "--sim-clock", "20", "--model", "qwen3.6-27b-nvfp4",
            "--topology", "dp2", "--workload", str(tmp_path / "wl.yaml"), *layout_port_args(), "--quiet"]
    assert main(argv) == 0
    live = capsys.readouterr()
    recordings = list(paths.recordings_dir().glob("*.dtrec"))
    assert len(recordings) == 1 and "recording: " in live.err
    assert TOKEN.encode() not in recordings[0].read_bytes()
    with Recording.open(recordings[0]) as rec:
        kinds = {e.kind for e in rec.events()}
        assert rec.ended_cleanly and rec.header.simulated and rec.header.host.get("gpus")
    assert {"plan_launched", "server_phase", "bench_tick", "bench_done", "gpu_sampled", "server_health",
            "results_reported", "operator_action"} <= kinds
    assert main(["replay", str(recordings[0]), "--headless"]) == 0
    assert live.out in capsys.readouterr().out
    # --no-record: nothing new
    assert main([*argv, "--fresh", "--no-record"]) == 0
    capsys.readouterr()
    assert len(list(paths.recordings_dir().glob("*.dtrec"))) == 1


def _profile(config: Path, pid: str) -> None:
    text = (ROOT / "profiles" / "models" / "qwen3.6-27b-nvfp4.yaml").read_text(encoding="utf-8")
    models = config / "profiles" / "models"
    models.mkdir(parents=True, exist_ok=True)
    (models / f"{pid}.yaml").write_text(re.sub(r"(?m)^id: .*$", f"id: {pid}", text), encoding="utf-8")
    (config / "profiles" / "workloads.yaml").write_text(
        "workloads:\n  team-tiny: {input_len: 32, output_len: 48, num_prompts: 4}\n", encoding="utf-8")


def test_bundle_export_import_plan_up(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch, isolated_dirs: Path) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    _profile(isolated_dirs / "config", "teammate-qwen")
    ports = layout_port_args()
    sim = ["--sim", "--sim-startup", "0.3", "--sim-clock", "20"]
    plan_argv = ["plan", "--sim", "--model", "teammate-qwen", "--topology", "dp2", *ports, "--no-preflight"]
    assert main(plan_argv) == 0
    before = capsys.readouterr().out
    bundle = tmp_path / "team.yaml"
    try:
        assert main(["up", *sim, "--model", "teammate-qwen", "--topology", "dp2", *ports, "--record"]) == 0
        layout = re.search(r"layout (\S+) is up", capsys.readouterr().out)
        assert layout is not None
        (recorded,) = paths.recordings_dir().glob("*-up-sim.dtrec")  # up --record: the start, recorded
        with Recording.open(recorded) as rec:
            assert {"plan_launched", "server_ready", "layout_changed"} <= {e.kind for e in rec.events()}
            assert TOKEN.encode() not in recorded.read_bytes()
        assert main(["bench", *sim, "--workload", "team-tiny", "--quiet"]) == 0
        capsys.readouterr()
        assert main(["export", "--sim", "--layout", layout.group(1), "-o", str(bundle)]) == 0
        assert "1 layout(s) (dp2), 1 workload(s), 1 run(s)" in capsys.readouterr().out
    finally:
        assert main(["down", "--all"]) == 0
    text = bundle.read_text(encoding="utf-8")
    assert TOKEN not in text and TOKEN[3:12] not in text  # no trace of the value
    assert "team-tiny" in text and "TPS (tok/s)" in text and "CUDA_VISIBLE_DEVICES" in text

    # a teammate's clean profile directory: the profile is unknown until the bundle is imported
    clean = tmp_path / "teammate-config"
    clean.mkdir()
    monkeypatch.setenv("DISAGG_TUI_CONFIG_DIR", str(clean))
    monkeypatch.delenv("HF_TOKEN")
    capsys.readouterr()
    assert main(plan_argv) == 2
    capsys.readouterr()
    assert main(["import", "--sim", str(bundle), "--yes"]) == 0
    shown = capsys.readouterr().out
    # it shows the commands it would run here: this host's defaults (port 8000), the exporting host's port apart
    assert re.sub(r"--port \d+", "--port 8000", before.strip().splitlines()[-1]) in shown
    assert re.search(r"#   server: bound 127\.0\.0\.1:\d+ \(here: 127\.0\.0\.1:8000\)", shown)
    assert "profile teammate-qwen: added" in shown and "workload team-tiny: added" in shown
    assert main(plan_argv) == 0
    assert capsys.readouterr().out == before  # the same commands exactly
    assert main(["import", "--sim", str(bundle), "--yes"]) == 0
    assert "profile teammate-qwen: already there" in capsys.readouterr().out
    # up --bundle launches the plan it carries, after preflight here
    try:
        assert main(["up", *sim, "--bundle", str(bundle), *ports]) == 0
        captured = capsys.readouterr()
        assert "is up (SIMULATED host)" in captured.out and before.strip().splitlines()[-1] in captured.out
        assert "preflight on this host" in captured.err and "matches the bundle's fingerprint" in captured.err
        assert "trust_remote_code: this host's profile qwen3.6-27b-nvfp4 already trusts" in captured.err
    finally:
        assert main(["down", "--all"]) == 0


@pytest.mark.parametrize(("old", "new", "field"), [
    ("bundle: disagg-tui-bundle", "bundle: something-else", "bundle"),
    ("version: 1\n", "version: 7\n", "version"),
    ("  kind: campaign", "  kind: nightly", "source.kind"),
    ("      port: 18000", "      port: eighty", "layouts[0].plan.servers[0].port"),
    ("  max_model_len: 32768", "  max_model_len: lots", "profile.vllm.max_model_len"),
    ("    input_len: 32", "    input_len: -3", "workloads.team-tiny.input_len"),
    ("fingerprint:", "fingerprnt:", "fingerprnt"),
])
def test_malformed_bundle_is_one_line_naming_file_line_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            old: str, new: str, field: str) -> None:
    good = tmp_path / "good.yaml"
    _write_sample_bundle(good)
    assert main(["import", "--sim", str(good), "--yes"]) == 0
    capsys.readouterr()
    text = good.read_text(encoding="utf-8")
    assert old in text, old
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(old, new, 1), encoding="utf-8")
    assert main(["import", "--sim", str(bad), "--yes"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert re.match(rf"disagg-tui: error: {re.escape(str(bad))}:\d+: field '{re.escape(field)}': ", err), err


def _write_sample_bundle(path: Path) -> None:
    """A bundle of a campaign-like source, made by the same code export uses (no servers needed)."""
    from tui.core.models import Catalog, Workload
    from tui.core.plan.hostfacts import sim_facts
    from tui.core.plan.planner import PlanOptions, plan
    from tui.core.record.bundle import build_bundle, write_bundle
    from tui.core.record.fingerprint import host_fingerprint
    from tui.core.topology import parse_topology

    facts = sim_facts("b200", 2)
    profile = Catalog.load().model("qwen3.6-27b-nvfp4")
    p = plan(profile, parse_topology("dp2"), facts, PlanOptions(port=18000, server_base_port=18100,
                                                                extra_env=(("HF_TOKEN", TOKEN),)))
    data = build_bundle(source="campaign", source_id="c1", profile=profile, layouts=[("dp2", p.to_dict())],
                        workloads={"team-tiny": Workload("team-tiny", 32, 48, 4)}, fingerprint=host_fingerprint(facts))
    assert data["secrets_needed"] == ["HF_TOKEN"]
    write_bundle(path, data)
    assert TOKEN not in path.read_text(encoding="utf-8")


def test_bundle_that_needs_a_secret_says_which(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    b = tmp_path / "b.yaml"
    _write_sample_bundle(b)
    assert main(["import", "--sim", str(b), "--yes"]) == 0
    assert "secrets it needs: HF_TOKEN (not set here: HF_TOKEN)" in capsys.readouterr().out
    assert main(["up", "--sim", "--bundle", str(b)]) == 2
    err = capsys.readouterr().err
    assert "needs HF_TOKEN: set it in the environment" in err and len(err.strip().splitlines()) == 1


def test_secrets_never_reach_a_run_directory(tmp_path: Path) -> None:
    from tui.core.bench.store import RunMeta, RunWriter

    d = tmp_path / "run"
    w = RunWriter(d, RunMeta(campaign="c", name="r"), plan={"servers": [{"env": {"HF_TOKEN": TOKEN},
                                                                          "argv": ["vllm", "--api-key", "k" * 12]}]})
    w._journal.close()
    text = (d / "plan.json").read_text(encoding="utf-8")
    assert TOKEN not in text and "k" * 12 not in text and "<redacted>" in text
