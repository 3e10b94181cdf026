"""Secrets never leave: one redaction for everything written or shown (recordings, bundles, run records, the
state file, plans shown, logs kept). A secret is replaced by the marker ``<redacted>``.

What counts as a secret:

- **by name**, an environment variable whose name has a word ``TOKEN`` (``HF_TOKEN``, ``MY_HF_TOKEN_2``,
  ``GH_AUTH_TOKEN``; not ``TOKENIZERS_PARALLELISM``, ``MAX_NUM_BATCHED_TOKENS``, ``PAD_TOKEN_ID``), a word ``KEY``
  (``OPENAI_API_KEY``, ``AWS_ACCESS_KEY_ID``, ``PRIVATE_KEY``), ``SECRET``, ``PASSWORD``/``PASSWD``/
  ``PASSPHRASE`` or ``CREDENTIAL`` anywhere, or a last word ``PAT`` or ``AUTH`` (``GITHUB_PAT``, ``BASIC_AUTH``);
  a switch (a name with ``DISABLE``, ``ENABLE``, ``ALLOW``, ``USE``, ``NO``, ``SKIP``) is not a secret;
- the value of a command-line flag that names one (``--api-key``, ``--hf-token``, ``--client-secret``), in an argv
  or in shell text (``--api-key X``, ``--api-key=X``); not flags that count tokens (``--max-num-batched-tokens``),
  switches (``--allow-credentials``) or paths (``--ssl-keyfile``);
- **by value**, wherever a string appears (an env value, an argv item, a log line): strings shaped like known
  tokens (Hugging Face ``hf_…``, GitHub ``ghp_…``/``gho_…``/``ghu_…``/``ghs_…``/``ghr_…``/``github_pat_…``,
  OpenAI-style ``sk-…`` and ``sk-proj-…``, JWTs ``eyJ….eyJ….…``, AWS access key ids ``AKIA…``, Slack ``xox?-…``),
  the credentials of a URL (``https://user:pass@mirror`` becomes ``https://<redacted>@mirror``: the host stays),
  ``Authorization``/``Bearer`` values, and any value of a secret variable of this process's environment (so a
  token that leaked into a log line is caught too).

:func:`redact_env` and :func:`redact_argv` redact a plan's environment and argv (what the state file and a plan
shown hold); :class:`Redactor` walks plain data (what ``Event.to_dict`` and ``yaml.safe_load`` give) and text;
:func:`secret_names_in` lists the environment variables whose values were replaced, and :func:`restore_env` takes
them back from an environment, so a redacted plan can be launched again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tui.core.errors import InputError

REDACTED = "<redacted>"
MIN_VALUE_LEN = 6  # shorter values of secret variables are not searched for in text (too many false hits)

# --- by name ---------------------------------------------------------------------------------------------------

_WORDS = re.compile(r"[A-Z0-9]+")
_TOKEN_WORD = re.compile(r"[A-Z0-9]*TOKEN\d*")  # TOKEN, HF_TOKEN's TOKEN, AUTHTOKEN, TOKEN2; not TOKENS, TOKENIZER
_KEY_WORD = re.compile(r"[A-Z0-9]*KEYS?\d*")  # KEY, APIKEY, KEYS
_ANYWHERE = re.compile(r"SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL")
_LAST_WORDS = frozenset({"PAT", "AUTH", "AUTHORIZATION"})
#: a name with one of these words is a switch (HF_HUB_DISABLE_IMPLICIT_TOKEN=1), not a secret
_SWITCHES = frozenset({"DISABLE", "ENABLE", "ALLOW", "USE", "NO", "SKIP", "IMPLICIT"})
#: TOKEN followed by one of these counts or names tokens (VLLM_..._TOKEN_THRESHOLD, PAD_TOKEN_ID)
_COUNTS = frozenset({"THRESHOLD", "LIMIT", "LIMITS", "COUNT", "COUNTS", "BUDGET", "ID", "IDS", "LEN", "LENGTH",
                     "SIZE", "NUM", "PER", "RATE", "TYPE", "INDEX", "IDX", "MAX", "MIN", "THROUGHPUT", "TIME",
                     "LATENCY", "BLOCK", "BLOCKS", "CHUNK", "RATIO"})
#: TOKEN after one of these is a tokenizer's token or a count (EOS_TOKEN, MAX_TOKEN, FIRST_TOKEN)
_TOKEN_KINDS = frozenset({"MAX", "MIN", "NUM", "PER", "FIRST", "LAST", "NEXT", "EOS", "BOS", "PAD", "SEP", "UNK",
                          "CLS", "MASK", "SPECIAL", "STOP", "END", "START", "DECODE", "PREFILL", "OUTPUT", "INPUT",
                          "TOTAL", "AVG", "MEAN"})
#: a name whose TOKEN or KEY is followed by one of these says where a secret is kept (HF_TOKEN_PATH, SSL_KEY_FILE)
_PLACE_WORDS = frozenset({"PATH", "PATHS", "FILE", "FILES", "FILENAME", "DIR"})
#: KEY followed by one of these is a size or a kind, not a key
_KEY_SIZES = frozenset({"LEN", "LENGTH", "SIZE", "BITS", "COUNT", "NUM", "TYPE", "NAME", "NAMES", "PREFIX",
                        *_PLACE_WORDS})
#: in a plain data field (not an environment mapping), KEY is a secret only after one of these (``api_key``,
#: ``secret_key``): a bare ``key`` or ``plan_key`` names a thing
_KEY_KINDS = frozenset({"API", "ACCESS", "SECRET", "PRIVATE", "SIGNING", "ENCRYPTION", "AUTH", "CLIENT", "MASTER",
                        "SSH", "SERVICE", "LICENSE", "SUBSCRIPTION", "HF", "OPENAI", "ANTHROPIC"})


def _secret_name(name: str, *, strict_key: bool) -> bool:
    upper = name.upper()
    words = _WORDS.findall(upper)
    if not words or any(w in _SWITCHES for w in words):
        return False
    if _ANYWHERE.search(upper) or words[-1] in _LAST_WORDS:
        return True
    for i, w in enumerate(words):
        before = words[i - 1] if i else ""
        after = words[i + 1] if i + 1 < len(words) else ""
        if _TOKEN_WORD.fullmatch(w) and after not in _COUNTS and after not in _PLACE_WORDS \
                and before not in _TOKEN_KINDS:
            return True
        bare = w in ("KEY", "KEYS") and before not in _KEY_KINDS
        if _KEY_WORD.fullmatch(w) and after not in _KEY_SIZES and not (strict_key and bare):
            return True
    return False


def is_secret_env(name: str) -> bool:
    """A variable name whose value is a secret (``HF_TOKEN``, ``MY_HF_TOKEN_2``, ``OPENAI_API_KEY``,
    ``DB_PASSWORD``, ``GITHUB_PAT``); ``TOKENIZERS_PARALLELISM`` and ``MAX_NUM_BATCHED_TOKENS`` are not."""
    return _secret_name(name, strict_key=False)


_FLAG_LAST = frozenset({"token", "key", "apikey", "secret", "password", "passwd", "passphrase", "pat",
                        "credential", "credentials"})
_FLAG_SWITCHES = frozenset({"no", "allow", "enable", "disable", "use", "skip"})
_PLACES = frozenset({"file", "path", "dir", "files", "paths"})


def is_secret_flag(flag: str) -> bool:
    """A command-line flag whose value is a secret (``--api-key``, ``--hf-token``, ``--client-secret``);
    ``--max-num-batched-tokens``, ``--allow-credentials`` and ``--ssl-keyfile`` are not."""
    if not flag.startswith("-"):
        return False
    words = [w for w in flag.lstrip("-").split("=", 1)[0].lower().replace("_", "-").split("-") if w]
    if not words or words[0] in _FLAG_SWITCHES:
        return False
    if words[-1] in _FLAG_LAST:
        return True
    return words[-1] not in _PLACES and any(s in w for w in words for s in ("secret", "password", "passwd"))


# --- by value --------------------------------------------------------------------------------------------------

#: strings shaped like known tokens; no left boundary (a token glued to other text is still caught), greedy (the
#: whole token goes)
_SHAPES = re.compile(
    r"hf_[A-Za-z0-9]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,}"
    r"|eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}")
_SHAPE_HINT = re.compile(r"hf_|gh[pousr]_|github_pat_|sk-|eyJ|AKIA|ASIA|xox[abprs]-")
#: the credentials of a URL: user:password before the last @ of its authority (the host stays)
_URL_CREDS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^\s/@:]*:[^\s/]*)@")
#: one shell word: quoted parts and unquoted characters up to a blank
_WORD = r"""(?:'[^']*'|"(?:[^"\\]|\\.)*"|\\.|[^\s'"\\])+"""
_NOT_DONE = r"""(?!['"]?<redacted>)"""
_FLAG_VALUE = re.compile(r"(?<![A-Za-z0-9_])(--[A-Za-z0-9][A-Za-z0-9_-]*)(=|[ \t]+)" + _NOT_DONE + f"({_WORD})")
_NAME_EQ = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)=" + _NOT_DONE + f"({_WORD})")
#: ``NAME: value``, ``"name": "value"``, ``'name': ['value']`` (YAML, JSON, a Python repr as vLLM logs its args)
_NAME_COLON = re.compile(r"""(?<![A-Za-z0-9_])(["']?)([A-Za-z_][A-Za-z0-9_-]*)\1(\s*:\s*)""" + _NOT_DONE
                         + r"""(\[\s*)?("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,}\]{\['"][^\s,}\]]*)""")
_HEADER = re.compile(r"""(\b(?:proxy-)?(?:authorization|x-api-key)\b["']?\s*[:=]\s*["']?(?:(?:bearer|basic)\s+)?)"""
                     + _NOT_DONE + r"""([^\s"',}]+)""", re.IGNORECASE)
_BEARER = re.compile(r"(\bbearer\s+)" + _NOT_DONE + r"([A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
_CAPS = re.compile(r"[A-Z][A-Z0-9_]*")
#: cheap first looks, on the text in lower case (a case-sensitive search is several times faster): a text without
#: these holds no token shape, URL credentials, secret name or flag
_ANY_HINT = re.compile(r"hf_|gh[pousr]_|github_pat_|sk-|eyj|akia|asia|xox[abprs]-|://"
                       r"|token(?!s|iz|is)|key|secret|passw|passphrase|credential|pat\b|auth|bearer")
_NAME_HINT = re.compile(r"token(?!s|iz|is)|key|secret|passw|passphrase|credential|pat\b|auth")
_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "api_key", "cookie"})
#: a mapping under one of these keys is an environment: every key a variable name
_ENV_KEYS = frozenset({"env", "environ", "environment"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _shape(m: re.Match[str]) -> str:
    s = m.group(0)
    if not s.startswith("sk-"):
        return REDACTED
    # "disk-cache-dir" and "sk-learn-style" are words, not keys: a key is random (letters of both cases and
    # digits), or at least not glued to a word before it nor hyphenated words without a digit
    body = s[3:]
    random = any(c.isdigit() for c in body) and any(c.isupper() for c in body) and any(c.islower() for c in body)
    glued = m.start() > 0 and m.string[m.start() - 1].isalnum()
    words = "-" in body and not any(c.isdigit() for c in body)
    if random or not (glued or words):
        return REDACTED
    return "sk-" + _SHAPES.sub(_shape, body)  # a token inside the words still goes


def _flag_value(m: re.Match[str]) -> str:
    flag, sep, value = m.group(1), m.group(2), m.group(3)
    if not is_secret_flag(flag) or (sep != "=" and value.startswith("-")):
        return m.group(0)
    return f"{flag}{sep}{REDACTED}"


def _name_eq(m: re.Match[str]) -> str:
    return f"{m.group(1)}={REDACTED}" if is_secret_env(m.group(1)) else m.group(0)


def _name_colon(m: re.Match[str]) -> str:
    quote, name, sep, bracket = m.group(1), m.group(2), m.group(3), m.group(4) or ""
    # unquoted lowercase words before a colon are prose ("first token: 12 ms"); quoted keys and NAMES are data
    if not (quote or _CAPS.fullmatch(name)) or not _secret_name(name, strict_key=bool(quote)):
        return m.group(0)
    value = m.group(5)
    q = value[0] if value[0] in "'\"" else ""
    return f"{quote}{name}{quote}{sep}{bracket}{q}{REDACTED}{q}"


def _keep_head(m: re.Match[str]) -> str:
    return f"{m.group(1)}{REDACTED}"


def _text(s: str, values: Sequence[str]) -> str:
    for v in values:
        if v in s:
            s = s.replace(v, REDACTED)
    low = s.lower()
    if not _ANY_HINT.search(low):
        return s  # most log lines
    if _SHAPE_HINT.search(s):
        s = _SHAPES.sub(_shape, s)
    if "://" in s:
        s = _URL_CREDS.sub(lambda m: f"{m.group(1)}{REDACTED}@", s)
    if "authorization" in low or "x-api-key" in low:
        s = _HEADER.sub(_keep_head, s)
    if "bearer" in low:
        s = _BEARER.sub(_keep_head, s)
    if _NAME_HINT.search(low):  # a secret's name: a flag, NAME=value, NAME: value
        if "--" in s:
            s = _FLAG_VALUE.sub(_flag_value, s)
        if "=" in s:
            s = _NAME_EQ.sub(_name_eq, s)
        if ":" in s:
            s = _NAME_COLON.sub(_name_colon, s)
    return s


def redact_text(s: str) -> str:
    """``s`` with every secret it shows replaced (by value, by flag, by ``NAME=value``); the environment's values
    are not looked for (a :class:`Redactor` does that)."""
    return _text(s, ())


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of the secret variables of an environment (long enough to search for), longest first."""
    env = os.environ if environ is None else environ
    vals = {v for k, v in env.items() if is_secret_env(k) and len(v) >= MIN_VALUE_LEN}
    return sorted(vals, key=len, reverse=True)


def argv_secret_values(argv: Sequence[str]) -> list[str]:
    """The values an argv gives its secret flags (``--api-key X``, ``--hf-token=X``), to look for in its logs."""
    out = []
    for i, a in enumerate(argv):
        flag, eq, value = a.partition("=")
        if flag.startswith("--") and is_secret_flag(flag):
            if eq and value:
                out.append(value)
            elif not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                out.append(argv[i + 1])
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """An environment as it may be shown: a secret variable's value is the marker, any other value is redacted
    by value (a token, a URL's credentials)."""
    return {k: (REDACTED if v and is_secret_env(k) else redact_text(v)) for k, v in env.items()}


def _argv(argv: Sequence[str], text: Any) -> list[str]:
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            hide_next = False
            if not a.startswith("-"):
                out.append(REDACTED)
                continue
        flag, eq, value = a.partition("=")
        if flag.startswith("--") and not any(c.isspace() for c in flag) and is_secret_flag(flag):
            if eq:
                out.append(f"{flag}={REDACTED}" if value else a)
            else:
                out.append(a)
                hide_next = True
            continue
        out.append(text(a))
    return out


def redact_argv(argv: Sequence[str]) -> list[str]:
    """An argv as it may be shown: the value of a secret flag is the marker, every item is redacted by value."""
    return _argv(argv, redact_text)


def _secret_field(key: str) -> bool:
    """A key of plain data (not an environment) whose string value is a secret: a header, an ``API_KEY``-style
    NAME, or a snake_case field like ``api_key``, ``hf_token``, ``password`` (never ``key`` or ``max_tokens``)."""
    if key.lower() in _HEADERS:
        return True
    if _CAPS.fullmatch(key):
        return is_secret_env(key)
    return _secret_name(key, strict_key=True)


class Redactor:
    """Replaces secrets in plain data (dicts, lists, strings) and text; made once per recording, bundle or layout.
    ``environ``'s secret values (this process's environment by default) and ``extra_values`` (a plan's secrets)
    are replaced wherever they appear."""

    def __init__(self, environ: Mapping[str, str] | None = None, extra_values: Iterable[str] = ()) -> None:
        env = os.environ if environ is None else environ
        self.values = sorted({*secret_values(env), *(v for v in extra_values if len(v) >= MIN_VALUE_LEN)},
                             key=len, reverse=True)
        self.names = sorted(k for k, v in env.items() if is_secret_env(k) and v)

    def text(self, s: str) -> str:
        return _text(s, self.values)

    def lines(self, lines: Iterable[str]) -> tuple[str, ...]:
        return tuple(self.text(line) for line in lines)

    def value(self, obj: Any) -> Any:
        """A redacted copy of ``obj`` (the input is never changed)."""
        return self._value(obj, env=False)

    def _value(self, obj: Any, *, env: bool) -> Any:
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, Mapping):
            out: dict[str, Any] = {}
            for k, v in obj.items():
                key = str(k)
                if isinstance(v, str) and v and (is_secret_env(key) if env else _secret_field(key)):
                    out[key] = REDACTED
                else:
                    out[key] = self._value(v, env=key.lower() in _ENV_KEYS and isinstance(v, Mapping))
            return out
        if isinstance(obj, list | tuple):
            if obj and all(isinstance(v, str) for v in obj) and any(v.startswith("--") for v in obj):
                return _argv(obj, self.text)  # an argv: the value after a secret flag goes
            return [self._value(v, env=False) for v in obj]
        return obj


_PLAIN = Redactor(environ={})


def redact_data(obj: Any) -> Any:
    """A redacted copy of plain data by name and by value, as :meth:`Redactor.value` gives it, without looking for
    this process's environment's values (the same data gives the same result in every process)."""
    return _PLAIN.value(obj)


def _env_mappings(data: Any) -> Iterable[Mapping[Any, Any]]:
    """The environment mappings in plain data: every mapping under an ``env`` key, or ``data`` itself when it is
    one (``NAME`` to string, as :func:`redact_env` gives)."""
    if isinstance(data, Mapping) and data and all(isinstance(k, str) and _CAPS.fullmatch(k)
                                                  and isinstance(v, str) for k, v in data.items()):
        yield data
        return
    stack = [data]
    while stack:
        obj = stack.pop()
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                if str(k).lower() in _ENV_KEYS and isinstance(v, Mapping):
                    yield v
                else:
                    stack.append(v)
        elif isinstance(obj, list | tuple):
            stack.extend(obj)


def secret_names_in(data: Any, prefix: str = "") -> list[str]:
    """The environment variables (starting with ``prefix``) whose value holds the redaction marker in an
    environment mapping of ``data`` (a plan's servers' ``env``, a profile's): what an imported bundle or a stored
    plan needs set before it launches. Names that merely appear in text are never listed."""
    found = {str(k) for env in _env_mappings(data) for k, v in env.items()
             if isinstance(v, str) and REDACTED in v and _ENV_NAME.fullmatch(str(k)) and str(k).startswith(prefix)}
    return sorted(found)


def restore_env(env: Mapping[str, str], environ: Mapping[str, str], *, what: str = "the plan") -> dict[str, str]:
    """``env`` with each redacted value (the marker, or a URL whose credentials are the marker) taken from
    ``environ``; an :class:`InputError` naming the variables ``environ`` does not set."""
    missing = sorted(k for k, v in env.items() if REDACTED in v and not environ.get(k))
    if missing:
        raise InputError(f"{what} needs {', '.join(missing)}: set {'it' if len(missing) == 1 else 'them'} in the "
                         "environment (secrets are never stored)")
    return {k: (environ[k] if REDACTED in v else v) for k, v in env.items()}
