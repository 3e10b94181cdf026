"""vLLM's command line read as vLLM reads it (tui.core.vllmargv), checked against the parsers themselves.

Three references: the captured ``vllm serve --help=all`` of 0.24.0 (the shipped flag table must be what it lists),
Python's own argparse built from that table with vLLM's preprocessing in front (every spelling resolves to the
option argparse picks: underscores, short aliases, unique prefixes, ``=`` forms, ambiguity), and, where vLLM is
installed, vLLM's real ``FlexibleArgumentParser``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tui.core import paths, vllmargv
from tui.core.errors import InputError

HELP = Path(__file__).parent / "fixtures" / "vllm-0.24.0-cpu" / "vllm-serve-help-all.txt"
TABLE = vllmargv.flag_table()


def test_the_shipped_table_is_what_vllm_0_24_lists() -> None:
    shipped = (paths.shipped_profiles_dir() / vllmargv.FLAGS_FILE).read_text(encoding="utf-8")
    assert shipped == vllmargv.format_table(vllmargv.parse_help(HELP.read_text(encoding="utf-8")))
    index = TABLE.by_string
    assert index["-tp"].canonical == "--tensor-parallel-size" and index["-ep"].canonical == "--enable-expert-parallel"
    assert index["--no-enable-prefix-caching"].nargs == "0" and index["--cudagraph-capture-sizes"].nargs == "+"
    assert index["--hf-token"].nargs == "?" and index["--config-format"].nargs == "1"
    assert len(TABLE.flags) > 300


class _Recorder(argparse.Action):
    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        namespace.seen.append(self.dest)


class _Quiet(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # type: ignore[override]
        raise argparse.ArgumentError(None, message)


def _argparse_of_table() -> argparse.ArgumentParser:
    """Python's argparse with the table's options, as vLLM's parser holds them (allow_abbrev on, argparse's
    default and vLLM's)."""
    p = _Quiet(add_help=False, exit_on_error=False)
    p.add_argument("model_tag", nargs="?")
    for f in TABLE.flags:
        nargs: Any = {"0": 0, "1": None, "?": "?", "+": "+", "*": "*"}[f.nargs]
        p.add_argument(*f.strings, dest=f.canonical, nargs=nargs, action=_Recorder)
    return p


_PARSER = _argparse_of_table()


def _vllm_preprocess(word: str) -> str:
    """FlexibleArgumentParser's: underscores in a ``--`` flag's name become dashes (before any ``=``)."""
    if not word.startswith("--"):
        return word
    key, eq, value = word.partition("=")
    return key.replace("_", "-") + eq + value


def _argparse_reads(word: str) -> str | None:
    """The option argparse (with vLLM's preprocessing) resolves ``word`` to, or None where it refuses it."""
    ns = argparse.Namespace(seen=[])
    f = TABLE.by_string.get(word.split("=", 1)[0])
    takes = f is None or f.nargs != "0"
    argv = ["m", _vllm_preprocess(word)] + (["1"] if takes and "=" not in word else [])
    try:
        _PARSER.parse_known_args(argv, ns)
    except (argparse.ArgumentError, SystemExit):
        return None
    return ns.seen[0] if ns.seen else None


def _spellings(flag: vllmargv.Flag) -> list[str]:
    long = flag.canonical
    out = [long, long.replace("-", "_").replace("__", "--", 1)]
    out += [s for s in flag.strings if not s.startswith("--")]
    for cut in (3, 6, 10):
        if len(long) > cut + 2:
            out.append(long[:-cut])
    return out


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(TABLE.flags), st.integers(0, 8))
def test_every_spelling_resolves_as_argparse_resolves_it(flag: vllmargv.Flag, which: int) -> None:
    spellings = _spellings(flag)
    word = spellings[which % len(spellings)]
    ours, _, problem = vllmargv.resolve(word)
    theirs = _argparse_reads(word)
    if theirs is None:
        assert ours is None or problem is not None, (word, ours)
    else:
        assert problem is None and ours is not None and ours.canonical == theirs, (word, ours, theirs)


@pytest.mark.parametrize(("words", "flags"), [
    (["-tp", "2"], ["--tensor-parallel-size"]),
    (["--tensor_parallel_size=2"], ["--tensor-parallel-size"]),
    (["--tensor-parallel", "2"], ["--tensor-parallel-size"]),
    (["-tp=2"], ["--tensor-parallel-size"]),
    (["-qfp8", "--enforce-eager"], ["--quantization", "--enforce-eager"]),
    (["--compilation-config.mode", "3"], ["--compilation-config"]),
    (["-cc.mode=3"], ["--compilation-config"]),
    (["-O3"], ["--optimization-level"]),
    (["--cudagraph-capture-sizes", "1", "2", "4", "--max-logprobs", "-1"],
     ["--cudagraph-capture-sizes", "--max-logprobs"]),
    (["--no-enable-prefix-caching", "-ep"], ["--no-enable-prefix-caching", "--enable-expert-parallel"]),
])
def test_words_are_read_as_vllm_reads_them(words: list[str], flags: list[str]) -> None:
    read = vllmargv.read_words(words)
    assert [w.flag for w in read] == flags and all(w.problem is None for w in read)
    assert [x for w in read for x in w.written] == words


def test_values_go_with_their_flag() -> None:
    read = vllmargv.read_words(["--cudagraph-capture-sizes", "1", "2", "--max-num-seqs", "64", "--enforce-eager"])
    assert [(w.flag, w.values) for w in read] == [("--cudagraph-capture-sizes", ("1", "2")),
                                                  ("--max-num-seqs", ("64",)), ("--enforce-eager", ())]


def test_an_ambiguous_abbreviation_is_refused_as_vllm_refuses_it() -> None:
    with pytest.raises(InputError, match="ambiguous to vLLM"):
        vllmargv.check_tail(["--data-parallel-s", "2"], vllmargv.Source.OPERATOR, field="--arg")
    assert _argparse_reads("--data-parallel-s") is None


def _real_vllm_parser() -> Any:
    try:
        from vllm.entrypoints.openai.cli_args import make_arg_parser  # type: ignore[import-not-found]
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]
    except Exception:
        return None
    return make_arg_parser(FlexibleArgumentParser())


def test_the_real_vllm_parser_resolves_every_spelling_as_we_do() -> None:
    """Where vLLM is installed (a GPU host; never in CI), its own parser is the reference."""
    parser = _real_vllm_parser()
    if parser is None:
        pytest.skip("vLLM is not installed here: tests/fixtures' captured help is the reference")
    actions = {s: a for a in parser._actions for s in a.option_strings}
    for flag in TABLE.flags:
        for word in _spellings(flag):
            ours, _, problem = vllmargv.resolve(word)
            try:
                ns, _ = parser.parse_known_args(["m", word, "1"] if flag.nargs != "0" else ["m", word])
            except SystemExit:
                assert ours is None or problem is not None, word
                continue
            if ours is not None and problem is None:
                dest = actions[ours.strings[0]].dest
                assert getattr(ns, dest, None) is not None, (word, ours.canonical)


def test_a_model_is_never_option_shaped() -> None:
    for model in ("-tp", "--config=/tmp/x.yaml", "--trust-remote-code", "-", " ", "", "a\x1b]52;c;eA==\x07"):
        with pytest.raises(InputError):
            vllmargv.check_model(model)
    assert vllmargv.server_argv("vllm", "./-odd", "--port", "1") == ("vllm", "serve", "./-odd", "--port", "1")
    with pytest.raises(InputError, match="starts with '-'"):
        vllmargv.server_argv("vllm", "--worker-extension-cls=evil.X")


def test_a_flag_a_newer_vllm_adds_is_judged_by_its_name() -> None:
    for flag in ("--draft-tokenizer-path", "--kv-connector-module-path", "--custom-plugin", "--exporter-endpoint"):
        assert vllmargv.flag_rule(flag) is not None and vllmargv.flag_rule(flag).kind is vllmargv.Kind.CODE  # type: ignore[union-attr]
    assert vllmargv.flag_rule("--max-num-seqs") is None and vllmargv.flag_rule("--brand-new-batching") is None


@pytest.mark.parametrize("name", ["PYTHONPATH", "LD_PRELOAD", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN",
                                  "UCX_MODULE_DIR", "NIXL_PLUGIN_DIR", "https_proxy", "HTTPS_PROXY", "ALL_PROXY",
                                  "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE", "HF_HOME",
                                  "VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT", "TRITON_CACHE_DIR", "HF_ENDPOINT",
                                  "NCCL_DEBUG_FILE", "NCCL_TOPO_FILE", "VLLM_PLUGINS", "TORCH_EXTENSIONS_DIR",
                                  "VLLM_ALLOW_INSECURE_SERIALIZATION", "XDG_CACHE_HOME", "OTEL_EXPORTER_OTLP_ENDPOINT"])
def test_never_is_never_whatever_the_source(name: str) -> None:
    assert not vllmargv.liftable(name)
    for source in vllmargv.Source:
        with pytest.raises(InputError, match="is never taken"):
            vllmargv.check_env(name, "x", source, field="env")


@pytest.mark.parametrize("name", ["NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "UCX_TLS", "VLLM_LOGGING_LEVEL",
                                  "OMP_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_DEVICE_MAX_CONNECTIONS"])
def test_tuning_variables_are_liftable(name: str) -> None:
    assert vllmargv.liftable(name)


def test_the_help_parser_reads_each_metavar_shape() -> None:
    text = ("  --a A, -a A        x\n  --b, --no-b        y\n  --c C [C ...]       z\n  --d [D]     w\n"
            "  --e ['x', 'y']   v\n  not an option\n")
    flags = {f.canonical: f for f in vllmargv.parse_help(text)}
    assert flags["--a"].strings == ("--a", "-a") and flags["--a"].nargs == "1"
    assert flags["--b"].nargs == "0" and flags["--no-b"].nargs == "0"
    assert flags["--c"].nargs == "+" and flags["--d"].nargs == "?" and flags["--e"].nargs == "1"
    assert re.fullmatch(r"\d+\.\d+\.\d+", vllmargv.FLAGS_VERSION)
