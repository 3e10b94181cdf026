"""Secrets never leave: tokens and keys replaced by a marker in recordings, bundles, exported plans and run records.

What counts as a secret:

- environment variables named ``HF_TOKEN``, ``*_TOKEN``, ``*_API_KEY``, ``*SECRET*``, ``*PASSWORD*`` (and
  ``*PASSWD*``, ``*CREDENTIAL*``): their value, wherever it appears (a mapping's value, ``NAME=value`` in a line);
- the value of a command-line flag that names a key or a token (``--api-key``, ``--hf-token``, ``--*-secret``,
  ``--*password*``), but not of flags that merely count tokens (``--max-num-batched-tokens``);
- ``Authorization`` (and ``X-Api-Key``) header values, ``Bearer ...`` in text, and Hugging Face tokens (``hf_...``);
- any string equal to, or containing, the value of a secret variable of this process's environment (so a token
  that leaked into a log line is caught too).

:class:`Redactor` walks plain data (what ``Event.to_dict`` and ``yaml.safe_load`` give) and returns a redacted
copy; :func:`secret_names_in` lists the variables whose values were replaced, so an imported bundle can say which
ones to set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"

_ENV_SECRET = re.compile(r"(^|_)(TOKEN|API_KEY|APIKEY)$|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_FLAG_SECRET = re.compile(r"(^|-)(api-?key|key|token|secret|password|passwd|credentials?)$|secret|password",
                          re.IGNORECASE)
_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "api_key", "proxy-authorization"})
_TEXT_PATTERNS = (
    # NAME=value and NAME: value for secret names (env lines, shell lines)
    re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*(?:TOKEN|API_KEY|APIKEY|SECRET[A-Za-z0-9_]*|PASSWORD[A-Za-z0-9_]*|"
               r"PASSWD[A-Za-z0-9_]*|CREDENTIAL[A-Za-z0-9_]*))(=|:\s*)(?!<redacted>)(\S+)", re.IGNORECASE),
    # --api-key VALUE / --api-key=VALUE / --hf-token VALUE
    re.compile(r"(--(?:[a-z0-9]+-)*(?:api-?key|token|secret|password|passwd))(=|\s+)(?!<redacted>)(?!-)(\S+)",
               re.IGNORECASE),
    # Authorization: Bearer xxx / Bearer xxx
    re.compile(r"(\b(?:authorization|x-api-key)\b[\"']?\s*[:=]\s*[\"']?)(?:bearer\s+|basic\s+)?(?!<redacted>)"
               r"([^\s\"',}]+)", re.IGNORECASE),
    re.compile(r"(\bbearer\s+)(?!<redacted>)([A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE),
)
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{16,}\b")
MIN_VALUE_LEN = 6  # shorter values of secret variables are not searched for in text (too many false hits)


def is_secret_env(name: str) -> bool:
    """A variable name whose value is a secret (``HF_TOKEN``, ``OPENAI_API_KEY``, ``DB_PASSWORD``...)."""
    return bool(_ENV_SECRET.search(name))


def is_secret_flag(flag: str) -> bool:
    """A command-line flag whose value is a secret (``--api-key``, ``--hf-token``); ``--max-num-batched-tokens``
    is not."""
    if not flag.startswith("-"):
        return False
    return bool(_FLAG_SECRET.search(flag.lstrip("-").split("=", 1)[0]))


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of the secret variables of an environment (long enough to search for), longest first."""
    env = os.environ if environ is None else environ
    vals = {v for k, v in env.items() if is_secret_env(k) and len(v) >= MIN_VALUE_LEN}
    return sorted(vals, key=len, reverse=True)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_env(k) and v != "" else v) for k, v in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _value = a.partition("=")
        if flag.startswith("--") and is_secret_flag(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(a)
                hide_next = True
            continue
        out.append(a)
    return out


class Redactor:
    """Replaces secrets in plain data (dicts, lists, strings); made once per recording or bundle."""

    def __init__(self, environ: Mapping[str, str] | None = None, extra_values: Iterable[str] = ()) -> None:
        env = os.environ if environ is None else environ
        self.values = sorted({*secret_values(env), *(v for v in extra_values if len(v) >= MIN_VALUE_LEN)},
                             key=len, reverse=True)
        self.names = sorted(k for k, v in env.items() if is_secret_env(k) and v)

    def text(self, s: str) -> str:
        for v in self.values:
            if v in s:
                s = s.replace(v, REDACTED)
        if "=" in s or ":" in s or "-" in s or " " in s:
            for pat in _TEXT_PATTERNS:
                s = pat.sub(_keep_head, s)
        if "hf_" in s:
            s = _HF_TOKEN.sub(REDACTED, s)
        return s

    def value(self, obj: Any) -> Any:
        """A redacted copy of ``obj`` (the input is never changed)."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            out: dict[str, Any] = {}
            for k, v in obj.items():
                key = str(k)
                if isinstance(v, str) and v and (is_secret_env(key) or key.lower() in _HEADERS):
                    out[key] = REDACTED
                else:
                    out[key] = self.value(v)
            return out
        if isinstance(obj, list | tuple):
            items = [self.value(v) for v in obj]
            if all(isinstance(v, str) for v in items) and any(v.startswith("--") for v in items):
                return redact_argv(items)  # an argv: the value after a secret flag goes
            return items
        return obj


def _keep_head(m: re.Match[str]) -> str:
    """Keep the name and separator of a matched secret, replace the value."""
    groups = m.groups()
    if len(groups) == 3:
        return f"{groups[0]}{groups[1]}{REDACTED}"
    return f"{groups[0]}{REDACTED}"


def secret_names_in(data: Any, prefix: str = "") -> list[str]:
    """Environment variable names whose value is the redaction marker somewhere in ``data`` (an imported bundle
    that needs one says which to set)."""
    found: set[str] = set()

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                if v == REDACTED and is_secret_env(str(k)):
                    found.add(str(k))
                walk(v)
        elif isinstance(obj, list | tuple):
            for v in obj:
                walk(v)
        elif isinstance(obj, str) and REDACTED in obj:
            for m in re.finditer(r"([A-Za-z_][A-Za-z0-9_]*)=" + re.escape(REDACTED), obj):
                if is_secret_env(m.group(1)):
                    found.add(m.group(1))

    walk(data)
    return sorted(found)
