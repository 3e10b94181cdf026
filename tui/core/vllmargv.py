"""vLLM's command line, read as vLLM reads it, and the one table of rules every flag and variable goes through.

A value reaches ``vllm serve``'s argv or environment from many places: the planner, a profile's ``vllm.args`` and
``vllm.env``, the knob catalogue (shipped and the operator's), ``up --arg``/``--env``, a bundle, another host's
plan answer. Each used to be checked by the reader that brought it, each knowing one spelling. vLLM reads
``--tensor_parallel_size``, ``-tp``, ``--tensor-parallel`` (argparse takes any unambiguous prefix),
``--tensor-parallel-size=2``, ``-tp=2``, ``-q fp8``/``-qfp8``, and ``--compilation-config.mode 3`` (vLLM's dotted
form) all as the flag they name; a model id that starts with ``-`` is read as an option.

Here, once:

- :func:`read_words` reads an argv tail as vLLM's ``FlexibleArgumentParser`` does (underscores to dashes in the
  flag's name, short aliases, unique prefixes, ``=`` and space forms, ``--no-`` forms, dotted keys, ``-O3``), each
  word resolved against the flag table of vLLM 0.24.0 (``profiles/vllm-serve-flags.txt``, made from its
  ``vllm serve --help=all`` by :func:`parse_help`); the preprocessing is ``FlexibleArgumentParser.parse_args`` of
  vLLM 0.24.0 (``vllm/utils/argparse_utils.py``: underscores before the first '.', ``-O``, dotted keys on any word
  that starts with '-'; ``allow_abbrev`` left at argparse's default, so unique prefixes are read);
- :data:`FLAG_RULES` and :func:`flag_rule` say what a flag is to this project (placement the planner sets, the
  planner's memory settings, a secret, or a flag that loads code or files, reads a file, changes who may call the
  server or where traffic goes), and :func:`env_rule` the same of a variable;
- :func:`check_tail` and :func:`check_env` apply them for one :class:`Source`; :func:`check_model` refuses a model
  id or path that vLLM would read as an option; :func:`server_argv` is the one builder of a server's argv.

What "never" means: flags and variables of kind ``code`` (load code or libraries, choose cache, config or plugin
folders, redirect network traffic or trust) are refused from every source, and ``--allow-env`` cannot lift them
(:func:`liftable` is the list it can).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cache
from pathlib import Path

from tui.core import paths
from tui.core.errors import InputError
from tui.core.redact import is_secret_env, is_secret_flag
from tui.core.safeio import read_text, shown

FLAGS_FILE = "vllm-serve-flags.txt"
#: the vLLM version whose parser the table was read from
FLAGS_VERSION = "0.24.0"
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


class Source(Enum):
    """Where a flag or variable came from: the rules are one table, what each source may do differs only where said."""

    OPERATOR = "--arg/--env"  # this host's operator, on the command line or the launch form
    PROFILE = "a profile"  # a model profile (the operator's, or a teammate's file)
    KNOB = "a knob"  # the knob catalogue (shipped or the operator's knobs.yaml)
    PLAYBOOK = "a playbook fix"  # a playbook entry's fix (shipped, the operator's or a teammate's)
    BUNDLE = "a bundle"  # a file made on another host (and the allowlist on top)
    REMOTE = "another host's answer"  # a plan answer read back from another host


class Kind(Enum):
    PLACEMENT = "placement"  # the planner sets it from this host's facts and the topology
    MEMORY = "memory"  # the planner's memory and naming settings: other values may come from some sources
    SECRET = "secret"  # noqa: S105 - its value is a secret: never on vLLM's command line
    CODE = "code"  # loads code or libraries, chooses files or folders, or moves traffic or trust: never
    HELP = "help"  # makes vllm print and exit


@dataclass(frozen=True, slots=True)
class Rule:
    kind: Kind
    why: str


_PLACE = "the planner sets it from this host and the topology"
_TRUST = "loads code or files"
_ROUTE = "changes who may call the server or where its traffic goes"
#: every vLLM 0.24.0 ``serve`` flag this project has a rule for (long forms); flags not listed are looked at by
#: name (:func:`flag_rule`), so a flag a newer vLLM adds that chooses a path or a class is refused as well
FLAG_RULES: dict[str, Rule] = {
    **{f: Rule(Kind.PLACEMENT, _PLACE) for f in (
        "--host", "--port", "--uds", "--model", "--tensor-parallel-size", "--pipeline-parallel-size",
        "--data-parallel-size", "--data-parallel-size-local", "--data-parallel-start-rank", "--data-parallel-rank",
        "--data-parallel-address", "--data-parallel-rpc-port", "--data-parallel-backend",
        "--data-parallel-external-lb", "--no-data-parallel-external-lb", "--data-parallel-hybrid-lb",
        "--no-data-parallel-hybrid-lb", "--data-parallel-multi-port-external-lb", "--headless", "--api-server-count",
        "--kv-transfer-config", "--device-ids", "--distributed-executor-backend", "--nnodes", "--node-rank",
        "--master-addr", "--master-port", "--data-parallel-supervisor-port", "--decode-context-parallel-size",
        "--prefill-context-parallel-size", "--grpc")},
    **{f: Rule(Kind.MEMORY, "the planner's own setting (a profile field or an up flag)") for f in (
        "--gpu-memory-utilization", "--max-model-len", "--served-model-name", "--load-format")},
    "--api-key": Rule(Kind.SECRET, "a secret on vLLM's command line, which vLLM logs at start-up: pass --api-key "
                                   "to disagg-tui (it reaches the servers as VLLM_API_KEY)"),
    "--hf-token": Rule(Kind.SECRET, "a secret on vLLM's command line, which vLLM logs at start-up: set HF_TOKEN in "
                                    "this host's environment"),
    "--trust-remote-code": Rule(Kind.CODE, "runs the model repository's own Python: a profile's "
                                           "trust_remote_code: true asks for it, and the trust check decides"),
    "--no-trust-remote-code": Rule(Kind.CODE, "the planner decides trust from the profile"),
    "-h": Rule(Kind.HELP, "makes vllm print its help and exit"),
    "--help": Rule(Kind.HELP, "makes vllm print its help and exit"),
    **{f: Rule(Kind.CODE, _TRUST) for f in (
        "--config", "--worker-cls", "--worker-extension-cls", "--scheduler-cls", "--middleware",
        "--tool-parser-plugin", "--reasoning-parser-plugin", "--io-processor-plugin", "--logits-processors",
        "--chat-template", "--trust-request-chat-template", "--tokenizer", "--tokenizer-revision", "--revision",
        "--code-revision", "--hf-config-path", "--hf-overrides", "--generation-config", "--download-dir",
        "--model-loader-extra-config", "--lora-modules", "--default-mm-loras", "--allowed-local-media-path",
        "--log-config-file", "--spec-model", "--mm-encoder-fp8-scale-path", "--mm-encoder-fp8-scale-save-path",
        "--profiler-config", "--ec-transfer-config", "--weight-transfer-config", "--additional-config",
        "--pt-load-map-location", "--tool-server", "--model-impl", "--kv-events-config", "--ignore-patterns")},
    **{f: Rule(Kind.CODE, _ROUTE) for f in (
        "--allowed-origins", "--allowed-methods", "--allowed-headers", "--allow-credentials",
        "--no-allow-credentials", "--allowed-media-domains", "--root-path", "--ssl-keyfile", "--ssl-certfile",
        "--ssl-ca-certs", "--ssl-cert-reqs", "--ssl-ciphers", "--enable-ssl-refresh", "--otlp-traces-endpoint",
        "--enable-tokenizer-info-endpoint", "--disable-fastapi-docs", "--enable-offline-docs")},
}
#: a flag not in the table is looked at by its words: one that names a path, a class, a plugin, a template, a file
#: or a folder, or a route (the flags a newer vLLM adds)
_CODE_FLAG_WORDS = ("cls", "class", "plugin", "plugins", "template", "path", "dir", "file", "module", "modules",
                    "endpoint", "url", "ssl", "origins", "middleware", "extension", "revision", "tokenizer")

_LIBRARIES = "loads code or libraries, or moves the files a process reads"
_TRAFFIC = "redirects network traffic or what is trusted (proxies, CA bundles, endpoints)"
#: variables, by glob pattern (matched without regard to case): placement first, then never
ENV_RULES: tuple[tuple[str, Rule], ...] = (
    *((p, Rule(Kind.PLACEMENT, _PLACE)) for p in (
        "CUDA_VISIBLE_DEVICES", "VLLM_NIXL_SIDE_CHANNEL_PORT", "VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_HOST_IP",
        "VLLM_PORT", "VLLM_DP_*", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
        "LOCAL_WORLD_SIZE", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")),
    ("VLLM_API_KEY", Rule(Kind.SECRET, "a secret: pass --api-key to disagg-tui")),
    *((p, Rule(Kind.CODE, _LIBRARIES)) for p in (
        "PYTHON*", "LD_*", "DYLD_*", "PATH", "*PATH", "*_PATHS", "*_HOME", "*PRELOAD*", "BASH_ENV", "ENV", "SHELL",
        "IFS", "PS4", "PERL5*", "NODE_OPTIONS", "RUBYOPT", "MALLOC_*", "GCONV_*", "*PLUGIN*", "*_DIR", "*_DIRS",
        "*_ROOT", "*_FILE", "*_FILES", "*_LIB", "*_LIBS", "*_LIBRARY", "*_MODULE_*", "*_MODULES", "*_CACHE_HOME",
        "*CACHE_DIR*", "*_CONFIG_PATH", "*_CONFIG_FILE", "HF_HUB_CACHE", "TRANSFORMERS_CACHE", "*_PREFIX",
        "TMPDIR", "TEMP", "TMP", "XDG_*", "DISAGG_*", "TORCHINDUCTOR_*", "TRITON_*", "VLLM_PLUGINS",
        "VLLM_SERVER_DEV_MODE", "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_ALLOW_INSECURE_SERIALIZATION",
        "VLLM_USE_PRECOMPILED", "VLLM_TORCH_PROFILER*", "VLLM_RPC_BASE_PATH", "TRANSFORMERS_*",
        "HF_DATASETS_*", "HF_MODULES*", "TORCH_EXTENSIONS_DIR", "CUDA_CACHE_*", "NCCL_NET", "NCCL_TOPO_*",
        "NCCL_GRAPH_*", "UCX_MODULE*", "NIXL_*", "OPENSSL_*", "GIT_*", "HOME", "USER", "LOGNAME", "PWD")),
    *((p, Rule(Kind.CODE, _TRAFFIC)) for p in (
        "*PROXY*", "*_CA_*", "*CA_BUNDLE*", "*CA_CERT*", "SSL_*", "*CERT*", "CURL_*", "REQUESTS_*", "HF_ENDPOINT",
        "*_ENDPOINT*", "*_URL", "*_URI", "*_HOST", "*_HOSTS", "*_ADDR", "*_ADDRESS", "*_SERVER", "OTEL_*")),
)
#: what ``--allow-env NAME`` may lift (a bundle's variable the allowlist does not name): tuning variables of the
#: libraries under vLLM, and only when :func:`env_rule` has no rule for them
LIFTABLE_ENV = ("VLLM_*", "NCCL_*", "UCX_*", "CUDA_*", "TORCH_*", "PYTORCH_*", "OMP_*", "MKL_*", "GLOO_*",
                "TOKENIZERS_*", "HF_HUB_*", "NVIDIA_TF32_OVERRIDE", "CUBLAS_*", "CUDNN_*")


# --- the flag table ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Flag:
    """One option as vLLM's parser holds it: its strings, how many values it takes, its long name."""

    canonical: str
    strings: tuple[str, ...]
    nargs: str  # "0", "1", "?", "+", "*"


@dataclass(frozen=True, slots=True)
class FlagTable:
    flags: tuple[Flag, ...]
    version: str = FLAGS_VERSION

    @property
    def by_string(self) -> dict[str, Flag]:
        return _index(self)


@cache
def _index(table: FlagTable) -> dict[str, Flag]:
    return {s: f for f in table.flags for s in f.strings}


def parse_help(text: str) -> tuple[Flag, ...]:
    """The options of a ``vllm serve --help=all`` text: each line that starts an option (``  --a A, -b A``), with
    ``--x, --no-x`` split into two switches, and the values each takes read from its metavar."""
    out: list[Flag] = []
    for line in text.splitlines():
        if not line.startswith("  -"):
            continue
        head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        strings: list[str] = []
        nargs = "0"
        for part in head.split(", "):
            word, _, metavar = part.partition(" ")
            if not word.startswith("-"):
                break
            strings.append(word)
            if metavar:
                nargs = "+" if metavar.endswith("...]") and not metavar.startswith("[") else \
                    "?" if metavar.startswith("[") and not metavar.startswith("['") else "1"
        negated = [s for s in strings if s.startswith("--no-")]
        kept = tuple(s for s in strings if s not in negated)
        out.append(Flag(kept[0] if kept[0].startswith("--") else next((s for s in kept if s.startswith("--")),
                                                                       kept[0]), kept, nargs))
        out.extend(Flag(s, (s,), "0") for s in negated)
    return tuple(out)


def format_table(flags: Iterable[Flag]) -> str:
    lines = [f"# vLLM {FLAGS_VERSION} `vllm serve --help=all`, one option a line: its strings, then how many values "
             "it takes (0, 1, ?, +, *).", "# Made by tui.core.vllmargv.parse_help; tests/test_vllmargv.py "
             "holds it equal to the captured help."]
    lines += [" ".join((*f.strings, f.nargs)) for f in flags]
    return "\n".join(lines) + "\n"


def parse_table(text: str) -> tuple[Flag, ...]:
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        *strings, nargs = line.split()
        long = next((s for s in strings if s.startswith("--")), strings[0])
        out.append(Flag(long, tuple(strings), nargs))
    return tuple(out)


@cache
def flag_table(path: Path | None = None) -> FlagTable:
    """The table shipped with the project (vLLM 0.24.0's options), read once."""
    file = path or paths.shipped_profiles_dir() / FLAGS_FILE
    return FlagTable(parse_table(read_text(file, kind="vllm flag table")))


# --- reading words as vLLM does ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Word:
    """One option of an argv tail as vLLM reads it: the flag it names (its long form; None for a word vLLM does not
    know), the value(s) it takes, and the words as written."""

    flag: str | None
    values: tuple[str, ...]
    written: tuple[str, ...]
    problem: str | None = None  # why vLLM would refuse it or read it as no option (ambiguous, a bare word, ...)

    @property
    def value(self) -> str | None:
        return " ".join(self.values) if self.values else None


def _looks_like_option(word: str, table: dict[str, Flag]) -> bool:
    """Whether argparse would take ``word`` as an option (not a value): it starts with '-', is not a negative
    number and holds no space."""
    if not word.startswith("-") or word == "-":
        return False
    if _NEGATIVE_NUMBER.match(word):
        return False
    return " " not in word or word.split("=", 1)[0] in table


def _dashed(key: str) -> str:
    """vLLM's own preprocessing of a ``--`` word: underscores in the flag's name (before any '.') become dashes."""
    base, dot, sub = key.partition(".")
    return "--" + base[2:].replace("_", "-") + dot + sub


def resolve(word: str, table: FlagTable | None = None) -> tuple[Flag | None, str | None, str | None]:
    """The option ``word`` names as vLLM's parser resolves it: ``(flag, inline value, problem)``."""
    index = (table or flag_table()).by_string
    if word.startswith("--"):
        key, eq, inline = word.partition("=")
        key = _dashed(key)
        base = key.split(".", 1)[0]  # vLLM's dotted form (--x.key v) sets a key of the JSON-valued flag it names
        flag = index.get(base)
        if flag is None:
            hits = {f.canonical: f for s, f in index.items() if s.startswith(base) and s.startswith("--")}
            hits_by_string = [s for s in index if s.startswith(base) and s.startswith("--")]
            if len(hits_by_string) > 1:
                return None, inline if eq else None, (f"{base} is ambiguous to vLLM (it could be "
                                                      f"{', '.join(sorted(hits_by_string)[:4])}...)")
            if not hits:
                return None, inline if eq else None, None
            flag = next(iter(hits.values()))
        return flag, (inline if eq else None), None
    # one dash: exact, then "-x=value", then vLLM's dotted form (-cc.mode), then argparse's short prefix with its
    # value glued on, then a prefix
    if "." in word and word.split(".", 1)[0] in index:
        key, eq, inline = word.partition("=")
        return index[key.split(".", 1)[0]], (inline if eq else None), None
    if word in index:
        return index[word], None, None
    key, eq, inline = word.partition("=")
    if eq and key in index:
        return index[key], inline, None
    if word.startswith("-O") and len(word) > 2:  # vLLM's own: -O3, -O=3, -Odecode are --optimization-level
        return index.get("--optimization-level"), word[3:] if word[2] == "=" else word[2:], None
    short = [(f, s) for s, f in index.items() if s == word[:2] or (s.startswith(word) and not s.startswith("--"))]
    if len(short) > 1:
        return None, None, f"{word} is ambiguous to vLLM"
    if short:
        found, string = short[0]
        return found, (word[2:] if string == word[:2] and len(word) > 2 else None), None
    return None, None, None


def read_words(words: Sequence[str], table: FlagTable | None = None) -> list[Word]:
    """An argv tail (after the model) as vLLM's parser reads it, one :class:`Word` per option (or stray word)."""
    tab = table or flag_table()
    index = tab.by_string
    out: list[Word] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            out.append(Word(None, tuple(words[i + 1:]), tuple(words[i:]), "'--' ends vLLM's options: what follows "
                                                                          "would be read as the model"))
            break
        if not _looks_like_option(w, index):
            out.append(Word(None, (w,), (w,), f"{shown(w, 60)!r} is not a flag: vLLM would read it as a second "
                                              "model and refuse to start"))
            i += 1
            continue
        flag, inline, problem = resolve(w, tab)
        if problem is not None or flag is None:
            # an unknown flag: its value, if any, is what follows when that is no option
            j = i + 1
            values: tuple[str, ...] = (inline,) if inline is not None else ()
            if inline is None and j < len(words) and not _looks_like_option(words[j], index):
                values, j = (words[j],), j + 1
            out.append(Word(_dashed(w.split("=", 1)[0]).split(".", 1)[0] if w.startswith("--") else None,
                            values, tuple(words[i:j]), problem or "unknown"))
            i = j
            continue
        j = i + 1
        if inline is not None:
            vals: tuple[str, ...] = (inline,)
        elif flag.nargs == "0":
            vals = ()
        elif flag.nargs in ("1",):
            vals = (words[j],) if j < len(words) and not _looks_like_option(words[j], index) else ()
            j += len(vals)
        else:  # ?, + and * take every following word that is no option
            k = j
            while k < len(words) and not _looks_like_option(words[k], index):
                k += 1
            vals = tuple(words[j:k]) if flag.nargs != "?" else tuple(words[j:min(k, j + 1)])
            j += len(vals)
        if flag.nargs == "0" and inline is not None and "." not in w:
            out.append(Word(flag.canonical, vals, tuple(words[i:j]), f"{flag.canonical} takes no value"))
        else:
            out.append(Word(flag.canonical, vals, tuple(words[i:j])))
        i = j
    return out


def flag_of(word: str, table: FlagTable | None = None) -> str:
    """The long name vLLM reads ``word`` as (``-tp`` → ``--tensor-parallel-size``); the word itself, dashed, when
    vLLM does not know it."""
    flag, _, _ = resolve(word, table)
    if flag is not None:
        return flag.canonical
    return _dashed(word.split("=", 1)[0]).split(".", 1)[0] if word.startswith("--") else word.split("=", 1)[0]


def without_flags(argv: Sequence[str], flags: Iterable[str], table: FlagTable | None = None) -> list[str]:
    """A server's ``argv`` without every word vLLM reads as one of ``flags`` (long names, as :func:`flag_of` gives
    them), each with its values; the executable, ``serve`` and the model are never touched."""
    drop = set(flags)
    out = list(argv[:3])
    for word in read_words(argv[3:], table):
        if word.flag not in drop:
            out += word.written
    return out


# --- the rules -----------------------------------------------------------------------------------------------------


def flag_rule(flag: str) -> Rule | None:
    """What ``flag`` (a long name, as :func:`flag_of` gives it) is to this project; None for an ordinary flag. A
    flag vLLM 0.24.0 does not have is also judged by the words of its name."""
    rule = FLAG_RULES.get(flag)
    if rule is not None:
        return rule
    if is_secret_flag(flag):
        return Rule(Kind.SECRET, "a secret on vLLM's command line, which vLLM logs at start-up")
    if flag in flag_table().by_string:
        return None
    words = flag.lstrip("-").split("-")
    if any(w in _CODE_FLAG_WORDS for w in words):
        return Rule(Kind.CODE, f"{_TRUST} (by its name: a path, class, plugin, template, file or route)")
    return None


def env_rule(name: str) -> Rule | None:
    """What the variable ``name`` is to this project: placement, a secret, never (code, files, traffic), or None."""
    upper = name.upper()
    for pattern, rule in ENV_RULES:
        if fnmatch.fnmatchcase(upper, pattern):
            return rule
    if is_secret_env(name):
        return Rule(Kind.SECRET, "a secret: its value comes from this host's environment")
    return None


def liftable(name: str) -> bool:
    """Whether ``--allow-env NAME`` may let a bundle set ``name`` (a tuning variable with no rule against it)."""
    return env_rule(name) is None and any(fnmatch.fnmatchcase(name, p) for p in LIFTABLE_ENV)


def _refusal(flag: str, rule: Rule, source: Source) -> str:
    if rule.kind is Kind.PLACEMENT:
        return f"{flag} is placement ({rule.why}): {source.value} may not set it"
    if rule.kind is Kind.SECRET:
        return f"{flag}: {rule.why}"
    if rule.kind is Kind.HELP:
        return f"{flag} {rule.why}: no server would start"
    return f"{flag} is never taken from {source.value} ({rule.why})"


def check_tail(words: Sequence[str], source: Source, *, field: str, file: str | Path | None = None,
               line: int | None = None, table: FlagTable | None = None) -> list[Word]:
    """The words as vLLM reads them, each allowed for ``source``; InputError naming ``field`` (and the file and line
    where given) for the first that is not: a bare word, an ambiguous abbreviation, a placement flag, a secret, a
    flag that loads code or files, or (from a knob) one of the planner's memory settings. A word spelled in a form
    vLLM reads as another flag (``-tp``, ``--tensor_parallel``) is judged as that flag."""
    read = read_words(words, table)
    for w in read:
        written = " ".join(w.written)
        if w.problem is not None and w.problem != "unknown":
            raise InputError(f"{shown(written, 80)}: {w.problem}", file=file, line=line, field=field)
        if w.flag is None:
            raise InputError(f"{shown(w.written[0], 60)}: vLLM {FLAGS_VERSION} has no such option (write a flag's "
                             "long form, as --max-num-seqs)", file=file, line=line, field=field)
        flag = w.flag
        rule = flag_rule(flag)
        if rule is None and w.problem == "unknown":
            rule = _rule_by_prefix(flag)
        if rule is None:
            continue
        if rule.kind is Kind.MEMORY and source is not Source.KNOB:
            continue
        if source is Source.REMOTE and (rule.kind is Kind.PLACEMENT or flag == "--trust-remote-code"):
            continue  # another host's planner placed its servers and judged its own profile's trust
        shown_flag = flag if flag == w.written[0].split("=", 1)[0] else \
            f"{shown(w.written[0].split('=', 1)[0], 60)} (vLLM reads it as {flag})"
        raise InputError(_refusal(shown_flag, rule, source), file=file, line=line, field=field)
    return read


def _rule_by_prefix(word: str) -> Rule | None:
    """A flag vLLM 0.24 does not know, that a vLLM with more flags could still read as a ruled one by its prefix."""
    if not word.startswith("--") or len(word) < 4:
        return None
    for flag, rule in FLAG_RULES.items():
        if flag.startswith(word):
            return rule
    return None


def check_env(name: str, value: str, source: Source, *, field: str, file: str | Path | None = None,
              line: int | None = None) -> None:
    """``name=value`` allowed for ``source``: a variable name, no NUL, not placement, never a variable that loads
    code or moves files or traffic (whatever the source), and a secret's value never from a file."""
    if not _ENV_NAME.match(name):
        raise InputError(f"{shown(name, 60)!r} is not an environment variable name", file=file, line=line,
                         field=field)
    if "\0" in value:
        raise InputError(f"{name}: a NUL character cannot be in the environment", file=file, line=line, field=field)
    rule = env_rule(name)
    if rule is None:
        return
    if rule.kind is Kind.PLACEMENT and source is Source.REMOTE:
        return  # another host's planner placed its own servers
    if rule.kind is Kind.SECRET and name != "VLLM_API_KEY" and source in (Source.OPERATOR, Source.PROFILE,
                                                                          Source.BUNDLE, Source.REMOTE):
        return  # this host's own value (redacted wherever it is written); a bundle's is the allowlist's to judge
    if rule.kind is Kind.CODE:
        raise InputError(f"{name} is never taken from {source.value}, even with --allow-env ({rule.why}): set it in "
                         "your own environment if you mean it", file=file, line=line, field=field)
    what = "is placement" if rule.kind is Kind.PLACEMENT else "is a secret"
    raise InputError(f"{name} {what} ({rule.why}): {source.value} may not set it", file=file, line=line, field=field)


def check_removal(word: str, source: Source, *, field: str, file: str | Path | None = None,
                  line: int | None = None) -> str:
    """A flag ``source`` takes off a server's argv (a playbook fix's ``remove_args``, filled from a log line): the
    long name vLLM reads it as, never a placement flag the planner wrote (``--host`` gone, vLLM binds every
    interface; ``--kv-transfer-config`` gone, a disaggregated server no longer transfers)."""
    words = word.split()
    if len(words) != 1 or not words[0].startswith("-"):
        raise InputError(f"{shown(word, 60)!r}: name one flag to remove", file=file, line=line, field=field)
    flag = flag_of(words[0])
    rule = flag_rule(flag)
    if rule is not None and rule.kind is Kind.PLACEMENT:
        shown_flag = flag if flag == words[0] else f"{shown(words[0], 60)} (vLLM reads it as {flag})"
        raise InputError(f"{shown_flag} is placement ({rule.why}): {source.value} may not remove it", file=file,
                         line=line, field=field)
    return flag


def check_unset(name: str, source: Source, placed: Iterable[str], *, field: str, file: str | Path | None = None,
                line: int | None = None) -> None:
    """A variable ``source`` takes out of a server's environment (a fix's ``unset_env``): never a placement variable
    the planner set (``placed``): without ``CUDA_VISIBLE_DEVICES`` a server takes every GPU of the host, without
    ``VLLM_NIXL_SIDE_CHANNEL_PORT`` two servers share vLLM's default port."""
    rule = env_rule(name)
    if rule is not None and rule.kind is Kind.PLACEMENT and name in set(placed):
        raise InputError(f"{shown(name, 60)} is placement ({rule.why}): {source.value} may not unset it", file=file,
                         line=line, field=field)


def check_model(model: str, *, field: str = "model", file: str | Path | None = None, line: int | None = None) -> str:
    """A model id or folder as the first word after ``vllm serve``: never option-shaped (vLLM would read
    ``--config=x.yaml`` or ``-tp`` there as an option), never empty, printable, one line."""
    if not model or not model.strip():
        raise InputError("empty: expected a model id or folder", file=file, line=line, field=field)
    if model.startswith("-"):
        raise InputError(f"{shown(model, 80)!r} starts with '-': vLLM would read it as an option, not a model "
                         "(write a path such as ./-model for a folder named so)", file=file, line=line, field=field)
    if not model.isprintable() or len(model) > 4096:
        raise InputError(f"{shown(model, 80)!r} is not one printable line of at most 4096 characters", file=file,
                         line=line, field=field)
    return model


def check_value(value: str, *, field: str, file: str | Path | None = None, line: int | None = None) -> str:
    """A value the planner writes after its own flag (a profile's ``served_model_name``, ``load_format``): one
    printable line that vLLM's parser cannot take for an option (``--load-format --worker-extension-cls=x``)."""
    if not value or value.startswith("-") or not value.isprintable() or len(value) > 256:
        raise InputError(f"{shown(value, 80)!r}: expected printable text of at most 256 characters, not starting "
                         "with '-' (vLLM would read it as an option)", file=file, line=line, field=field)
    return value


def server_argv(exe: str, model: str, *words: str) -> tuple[str, ...]:
    """The one builder of a server's argv: ``EXE serve MODEL WORDS…``, the model checked by :func:`check_model`.
    The words are the planner's own (placement) and the tails each source's :func:`check_tail` let through."""
    check_model(model)
    return (exe, "serve", model, *words)
