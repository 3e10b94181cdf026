"""What a run's layout served with: every vLLM flag and environment variable of its plan, normalised, so that runs
whose servers differ in any of them are never averaged as repeats, and the setup column can say how they differ.

Normalised, as vLLM's own parser reads a command line: ``--flag=value`` and ``--flag value`` are one setting; ``_``
in a flag's name is ``-``; of a flag given twice the last wins (a planner default, then the operator's ``--arg``);
``--no-X`` is ``--X false`` and a flag without a value ``--X true``; a number is its value (``0.90`` is ``0.9``); a
JSON value is its content with the keys sorted. A few short forms are their long ones (:data:`SHORT_FLAGS`).

Left out, explicitly (each list says why): what changes where a server listens, how it logs or where it keeps
files, never what it serves (:data:`NOT_SERVED_FLAGS`, :data:`NOT_SERVED_ENV`, and in ``--kv-transfer-config`` the
keys of :data:`KV_CONFIG_PER_SERVER`). The executable, ``serve`` and the model (the words before the first flag)
are not settings: the model is the setup's own column.

Set by the planner from the topology (:data:`TOPOLOGY_FLAGS`, :data:`TOPOLOGY_ENV`): two topologies differ in them
by definition, so they are compared between runs of one topology only (:func:`topology_bound`).

A layout of several servers has one value per setting when its servers agree, else each role's
(``prefill: X; decode: Y``). A run stored without its plan (before plans were kept, or imported) has unknown flags:
:attr:`ServedSettings.known` is False, and it is a repeat only of runs whose flags are unknown too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: flags that change where a server listens, how it logs or where it keeps files, never what it serves
NOT_SERVED_FLAGS = frozenset({
    "--host", "--port",  # where it listens (the ports differ between every two launches)
    "--served-model-name",  # the name clients ask for; the model served is the run's model
    "--model",  # the model itself (vllm serve's first word): the setup's model column, not a serve flag
    "--api-key",  # who may ask
    "--download-dir",  # where the weights are kept
    "--uvicorn-log-level", "--disable-log-requests", "--enable-log-requests", "--disable-log-stats",
    "--disable-uvicorn-access-log", "--log-config-file", "--max-log-len",  # what it logs
    "--allowed-origins", "--allowed-methods", "--allowed-headers", "--allow-credentials",  # CORS of its API
    "--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs", "--ssl-cert-reqs", "--root-path",  # how it is reached
    "--disable-fastapi-docs",
    "--data-parallel-address", "--data-parallel-rpc-port",  # the DP ranks' addresses
})
#: variables that change where a server listens, how it logs, where it keeps files, or who may ask
NOT_SERVED_ENV = frozenset({
    "CUDA_VISIBLE_DEVICES",  # which GPUs (how many is the topology's; their model is the host's)
    "VLLM_NIXL_SIDE_CHANNEL_PORT", "VLLM_NIXL_SIDE_CHANNEL_HOST",  # the KV side channel's address
    "VLLM_HOST_IP", "VLLM_PORT", "VLLM_DP_MASTER_IP", "VLLM_DP_MASTER_PORT",  # addresses
    "VLLM_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",  # credentials
    "HF_HOME", "HF_HUB_CACHE", "TRANSFORMERS_CACHE", "VLLM_CACHE_ROOT", "XDG_CACHE_HOME",  # where files are kept
    "HF_HUB_OFFLINE",  # whether the weights may be downloaded
    "VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING", "VLLM_LOGGING_CONFIG_PATH", "VLLM_LOGGING_PREFIX",
    "VLLM_LOG_STATS_INTERVAL", "PYTHONUNBUFFERED", "NCCL_DEBUG",  # what it logs
    "VLLM_ENGINE_READY_TIMEOUT_S",  # how long the API server waits for its engine at start-up
})
#: the keys of a ``--kv-transfer-config`` that each server of a layout has its own of (its role in the transfer,
#: its rank and address), not a setting of the layout
KV_CONFIG_PER_SERVER = frozenset({"kv_role", "kv_rank", "kv_ip", "kv_port", "engine_id"})
#: flags the planner sets from the topology (``dp2`` is ``--data-parallel-size 2``; a 1P1D layout has a KV
#: connector): compared between runs of one topology only
TOPOLOGY_FLAGS = frozenset({"--tensor-parallel-size", "--data-parallel-size", "--data-parallel-size-local",
                            "--pipeline-parallel-size", "--kv-transfer-config",
                            # data parallel across hosts: which ranks a host's part runs, and its head's RPC
                            "--headless", "--data-parallel-start-rank", "--data-parallel-address",
                            "--data-parallel-rpc-port"})
#: variables the planner sets from the topology (a hybrid model behind NIXL needs the DS conv-state layout)
TOPOLOGY_ENV = frozenset({"VLLM_SSM_CONV_STATE_LAYOUT"})
#: short forms vLLM takes for its long flags
SHORT_FLAGS = {"-tp": "--tensor-parallel-size", "-dp": "--data-parallel-size", "-pp": "--pipeline-parallel-size",
               "-q": "--quantization"}
#: a plan's servers read at most, words of an argv, variables of an environment, characters of a value (a copied
#: folder's plan.json is hostile: what is past these is not read)
MAX_SERVERS = 256
MAX_WORDS = 4096
MAX_VARS = 1024
MAX_VALUE = 4096
#: what a setting's value is shown as, at most, in the setup column
SHOWN_VALUE = 48


@dataclass(frozen=True, slots=True)
class ServedSettings:
    """The settings a run's layout served with: ``(name, value)`` pairs sorted by name, a flag's name beginning with
    ``--`` (its value ``true``/``false`` for a switch), a variable's without; ``known`` False when the run kept no
    plan that says (``why`` says why)."""

    settings: tuple[tuple[str, str], ...] = ()
    known: bool = True
    why: str = ""
    profile: str = ""  # the plan's profile id (what a suggested command names), "" when unknown

    def get(self, name: str) -> str | None:
        return next((v for k, v in self.settings if k == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.settings)

    @property
    def key(self) -> tuple[bool, tuple[tuple[str, str], ...]]:
        """What two runs must share to be repeats of one cell."""
        return (self.known, self.settings)


def unknown(why: str) -> ServedSettings:
    return ServedSettings(known=False, why=why)


def topology_bound(name: str) -> bool:
    """A setting the planner derives from the topology (compared between runs of one topology only)."""
    return name in TOPOLOGY_FLAGS or name in TOPOLOGY_ENV


def _number(text: str) -> str | None:
    try:
        return str(int(text))
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return repr(value) if math.isfinite(value) else None


def normal_value(name: str, text: str) -> str:
    """A flag's value as vLLM reads it: a number its value, a JSON object or list its content (keys sorted; a
    ``--kv-transfer-config`` without its per-server keys), anything else as written."""
    text = text.strip()
    if text[:1] in ("{", "["):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return text
        if name == "--kv-transfer-config" and isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in KV_CONFIG_PER_SERVER}
        try:
            return json.dumps(data, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            return text
    number = _number(text)
    return number if number is not None else text


def _is_flag(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and _number(word) is None


def argv_settings(argv: Sequence[str]) -> dict[str, str]:
    """The flags of one server's argv (``vllm serve MODEL --flag value ...``), normalised; the words before the first
    flag (the executable, ``serve``, the model) are not settings."""
    words = list(argv)
    i = next((k for k, w in enumerate(words) if _is_flag(w)), len(words))
    out: dict[str, str] = {}
    while i < len(words):
        word = words[i]
        i += 1
        if not _is_flag(word):
            continue  # a stray positional: nothing vLLM would take as a setting of a flag
        name, eq, value = word.partition("=")
        name = SHORT_FLAGS.get(name, name)
        name = "--" + name.lstrip("-").replace("_", "-")
        if not eq:
            if i < len(words) and not _is_flag(words[i]):
                value = words[i]
                i += 1
            elif name.startswith("--no-"):
                name, value = "--" + name[5:], "false"
            else:
                value = "true"
        out[name] = normal_value(name, value)
    return out


def server_settings(argv: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
    """One server's served settings: its flags and variables less the ones that change nothing served."""
    out = {k: v for k, v in argv_settings(argv).items() if k not in NOT_SERVED_FLAGS}
    out.update({k: v for k, v in env.items() if k not in NOT_SERVED_ENV and not k.startswith("-")})
    return out


def merge(servers: Sequence[tuple[str, Mapping[str, str]]]) -> tuple[tuple[str, str], ...]:
    """A layout's settings from its servers' ``(role, settings)``: one value where every server has it alike, else
    each role's (``prefill: X; decode: Y``; a server without it ``(unset)``)."""
    names = sorted({k for _, s in servers for k in s})
    out = []
    for name in names:
        values = [s.get(name) for _, s in servers]
        if len(set(values)) == 1 and values[0] is not None:
            out.append((name, values[0]))
            continue
        by_role: dict[str, list[str]] = {}
        for (role, _), v in zip(servers, values, strict=True):
            shown = v if v is not None else "(unset)"
            if shown not in by_role.setdefault(role, []):
                by_role[role].append(shown)
        out.append((name, "; ".join(f"{role}: {'/'.join(vs)}" for role, vs in by_role.items())))
    return tuple(out)


def _text(value: Any, limit: int) -> str | None:
    return value if isinstance(value, str) and len(value) <= limit and "\x00" not in value else None


def plan_settings(plan: Mapping[str, Any]) -> ServedSettings:
    """The served settings of a stored plan (``plan.json``: a :meth:`LaunchPlan.redacted_dict`, or an imported
    run's partial one). A plan from a copied folder is read as data: a server, a word or a variable of the wrong
    type makes the flags unknown, never an error."""
    raw = plan.get("servers")
    if plan.get("imported") or not isinstance(raw, list) or not raw:
        return unknown("imported: the serve flags were not recorded" if plan.get("imported") else
                       "its plan lists no server")
    if len(raw) > MAX_SERVERS:
        return unknown(f"its plan lists {len(raw):,} servers")
    servers: list[tuple[str, dict[str, str]]] = []
    for s in raw:
        argv, env = (s.get("argv"), s.get("env")) if isinstance(s, dict) else (None, None)
        role = _text(s.get("role"), 64) if isinstance(s, dict) else None
        if not isinstance(argv, list) or len(argv) > MAX_WORDS or not all(_text(w, MAX_VALUE) for w in argv):
            return unknown("its plan has a server whose argv does not read")
        env = env if env is not None else {}
        if not isinstance(env, dict) or len(env) > MAX_VARS or not all(
                _text(k, 256) and _text(v, MAX_VALUE) is not None for k, v in env.items()):
            return unknown("its plan has a server whose environment does not read")
        servers.append((role or "server", server_settings(argv, env)))
    profile = _text(plan.get("profile_id"), 256) or ""
    return ServedSettings(settings=merge(servers), profile=profile)


def shown(name: str, value: str | None) -> str:
    """One setting as the setup column says it: ``--attention-backend TRITON_ATTN``, ``--enforce-eager``,
    ``--no-enable-prefix-caching``, ``VLLM_USE_FLASHINFER_SAMPLER=0``; ``no --X`` where the run did not set it."""
    if value is None:
        return f"no {name}"
    if len(value) > SHOWN_VALUE:
        value = value[:SHOWN_VALUE - 1] + "…"
    if not name.startswith("--"):
        return f"{name}={value}"
    if value == "true":
        return name
    if value == "false":
        return "--no-" + name[2:]
    return f"{name} {value}"
