"""The launch settings as text: extra ``vllm serve`` arguments, ``K=V`` pairs and GPU lists, read and written back.

One reader for both front ends: the CLI's repeatable ``--arg``/``--env``/``--gpus`` values and the console's form
fields go through the same functions, and :func:`quote_words` writes words back so that :func:`split_words` reads
them unchanged (what ``LaunchRequest.to_argv`` relies on).

Splitting is a shell's (quotes, backslashes), with one difference: a JSON object or list (``{...}``, ``[...]``, also
as the value of ``--flag={...}`` or ``NAME={...}``) that parses is one word, kept exactly as written. A shell would
drop its double quotes (``{"method":"ngram"}`` → ``{method:ngram}``), and vLLM would then refuse the value; so
``--arg '--speculative-config {"method": "ngram"}'`` reaches vLLM with its JSON intact.

:func:`check_json_flags` refuses, naming the flag, a value of one of vLLM's JSON-valued flags that does not parse as
JSON (vLLM 0.24 exits 2 on it at start-up; a simulated start used to accept it).
"""

from __future__ import annotations

import io
import json
import re
import shlex
from collections.abc import Sequence

from tui.core.errors import InputError

#: vLLM 0.24.0's ``vllm serve`` flags whose value is JSON (``--help=all``: "Should either be a valid JSON string or
#: JSON keys passed individually", and the dict-valued ``--hf-overrides``, ``--model-loader-extra-config``,
#: ``--additional-config``); the long forms, as ``allowlist.canonical_flag`` writes them
JSON_FLAGS = frozenset({
    "--additional-config", "--attention-config", "--compilation-config", "--default-chat-template-kwargs",
    "--default-mm-loras", "--diffusion-config", "--ec-transfer-config", "--eplb-config", "--hf-overrides",
    "--ir-op-priority", "--kernel-config", "--kv-events-config", "--kv-transfer-config", "--limit-mm-per-prompt",
    "--media-io-kwargs", "--mm-processor-kwargs", "--model-loader-extra-config", "--override-generation-config",
    "--pooler-config", "--profiler-config", "--quantization-config", "--reasoning-config", "--speculative-config",
    "--structured-outputs-config", "--weight-transfer-config",
})
#: their short forms in vLLM 0.24.0
JSON_SHORT_FLAGS = {"-ac": "--attention-config", "-cc": "--compilation-config", "-dc": "--diffusion-config",
                    "-sc": "--speculative-config"}

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: where a word may start a JSON value: at once, or after ``--flag=`` / ``NAME=``
_JSON_START = re.compile(r"(?:--?[A-Za-z0-9][A-Za-z0-9_.+-]*=|[A-Za-z_][A-Za-z0-9_]*=)?(?=[\[{])")
_DECODER = json.JSONDecoder()
#: what separates words: a shell's (and shlex's) blanks
_BLANKS = frozenset(" \t\r\n")


def _shell_word(text: str, start: int, flag: str) -> tuple[str, int]:
    """The shell word that starts at ``start`` (not a blank), and where reading stopped."""
    stream = io.StringIO(text[start:])
    lex = shlex.shlex(stream, posix=True)
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        word = lex.get_token()
    except ValueError as exc:
        raise InputError(f"cannot split {text!r}: {exc}", field=flag,
                         hint="quote a value with spaces: '--flag \"a b\"'") from None
    assert word is not None  # a non-blank character starts a word
    return word, start + stream.tell()


def split_words(text: str, flag: str) -> list[str]:
    """``text`` split into words as a shell would, except that a JSON object or list that parses is one word kept
    as written (see the module's docstring). InputError naming ``flag`` for an unclosed quote."""
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] in _BLANKS:
            i += 1
            continue
        m = _JSON_START.match(text, i)
        if m is not None:
            try:
                _, end = _DECODER.raw_decode(text, m.end())
            except (ValueError, RecursionError):
                end = -1
            if end > 0 and (end == n or text[end] in _BLANKS):
                words.append(text[i:end])
                i = end
                continue
        word, i = _shell_word(text, i, flag)
        words.append(word)
    return words


def quote_words(words: Sequence[str]) -> str:
    """``words`` as one text that :func:`split_words` reads back as the same words: a word is written as it is
    where it reads back alone as itself (``--enforce-eager``, ``{"method": "ngram"}``), else quoted."""
    return " ".join(w if _reads_back(w) else shlex.quote(w) for w in words)


def _reads_back(word: str) -> bool:
    try:
        return bool(word) and split_words(word, "") == [word]
    except InputError:  # an unbalanced quote: quoted
        return False


def split_args(items: Sequence[str], flag: str = "--arg") -> list[str]:
    """The words of a repeatable ``--arg '--flag value'``; an empty (or blank) item is refused: it adds nothing to
    the command line, so it is a mistake (a variable that was not set)."""
    out: list[str] = []
    for item in items:
        words = split_words(item, flag)
        if not words:
            raise InputError(f"empty argument {item!r}; give a vllm serve flag, e.g. {flag} '--enforce-eager'",
                             field=flag)
        out += words
    return out


def parse_pairs(items: Sequence[str], flag: str) -> list[tuple[str, str]]:
    """``K=V`` items of a repeatable flag, as pairs; one clear error naming the flag otherwise."""
    out = []
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise InputError(f"expected K=V, got {item!r}", field=flag)
        out.append((k, v))
    return out


def parse_env(items: Sequence[str] | str, flag: str = "--env") -> list[tuple[str, str]]:
    """Environment pairs from ``K=V`` items, or from one text of them (a form field: ``A=1 B='x y'``, split as
    :func:`split_words` does); a name must be a variable name."""
    pairs = parse_pairs(split_words(items, flag) if isinstance(items, str) else items, flag)
    for k, _ in pairs:
        if not ENV_NAME.match(k):
            raise InputError(f"{k!r} is not an environment variable name (letters, digits and _)", field=flag)
    return pairs


def parse_gpu_list(text: str | None, flag: str = "--gpus") -> tuple[int, ...] | None:
    """``0,1`` → ``(0, 1)``; None stays None (the planner picks the first GPUs)."""
    if text is None:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part.isascii() or not part.isdigit():
            raise InputError(f"expected GPU indices like 0,1; got {text!r}", field=flag)
        out.append(int(part))
    return tuple(out)


def json_flag(word: str) -> tuple[str, str | None] | None:
    """``(long flag, inline value or None)`` when ``word`` is one of vLLM's JSON-valued flags (``--x-config``,
    ``--x_config=...``, ``-sc``), else None. A dotted form (``--speculative-config.method``) sets one key: no JSON."""
    name, eq, inline = word.partition("=")
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    name = JSON_SHORT_FLAGS.get(name, name)
    if name not in JSON_FLAGS:
        return None
    return name, (inline if eq else None)


def check_json_flags(words: Sequence[str], flag: str = "--arg") -> None:
    """Refuse, naming the vLLM flag, a JSON-valued flag of ``words`` whose value is missing or is not JSON."""
    for i, word in enumerate(words):
        found = json_flag(word)
        if found is None:
            continue
        name, value = found
        if value is None:
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None
        if value is None:
            raise InputError(f"{name} takes a JSON value, and none follows", field=flag,
                             hint=f"{flag} '{name} {{\"key\": \"value\"}}'")
        why = _not_json(value)
        if why is not None:
            shown = value if len(value) <= 80 else value[:80] + "…"
            raise InputError(f"{name} takes JSON; {shown!r} is not JSON ({why}), and vLLM would refuse it",
                             field=flag,
                             hint=f"keep the JSON's double quotes: {flag} '{name} {{\"method\": \"ngram\"}}'")


def _not_json(value: str) -> str | None:
    try:
        json.loads(value)
    except json.JSONDecodeError as exc:
        return f"{exc.msg[0].lower()}{exc.msg[1:]} at character {exc.pos + 1}"
    except RecursionError:
        return "nested too deep"
    return None
