"""``vllm serve``'s command line as vLLM 0.24 parses it: every real flag, ``_``/``-`` interchangeable, unique
prefixes, ``-O<n>``, dotted JSON sub-keys (``--kv-transfer-config.kv_role kv_producer``) and ``--config x.yaml``.

An unknown flag fails like vLLM: the top-level parser prints its usage and ``vllm: error: unrecognized arguments:
...`` and exits 2. The values stay strings here; :mod:`tui.sim.config` gives them types.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tui.sim.serve_flags import SERVE_FLAGS

SUBCOMMANDS = ("chat", "complete", "serve", "launch", "bench", "collect-env", "run-batch")


def _dest(names: list[str]) -> str:
    long = next(n for n in names if n.startswith("--") and not n.startswith("--no-"))
    return long[2:].replace("-", "_")


def _add_serve_flags(p: argparse.ArgumentParser) -> list[str]:
    order: list[str] = []
    for entry in SERVE_FLAGS:
        spec, kind = entry.split(" ")
        names = spec.split(",")
        dest = _dest(names)
        order.append(dest)
        if kind == "flag":
            p.add_argument(*names, dest=dest, action="store_true", default=None)
        elif kind == "bool":
            pos = [n for n in names if not n.startswith("--no-")]
            neg = [n for n in names if n.startswith("--no-")]
            p.add_argument(*pos, dest=dest, action="store_true", default=None)
            p.add_argument(*neg, dest=dest, action="store_false", default=None)
        elif kind == "list":
            p.add_argument(*names, dest=dest, nargs="+", default=None)
        elif kind == "optional":
            p.add_argument(*names, dest=dest, nargs="?", const="", default=None)
        else:
            p.add_argument(*names, dest=dest, default=None)
    return order


def build_parser(prog: str = "vllm") -> tuple[argparse.ArgumentParser, list[str]]:
    top = argparse.ArgumentParser(prog=prog, description="vLLM CLI")
    top.add_argument("-v", "--version", action="version", version="0.24.0")
    sub = top.add_subparsers(dest="subparser", metavar="{" + ",".join(SUBCOMMANDS) + "}")
    order: list[str] = []
    for name in SUBCOMMANDS:
        if name == "serve":
            serve = sub.add_parser("serve", prog=f"{prog} serve", usage=f"{prog} serve [model_tag] [options]",
                                   description="Launch a local OpenAI-compatible API server to serve LLM completions "
                                               "via HTTP.")
            serve.add_argument("model_tag", nargs="?", default=None, help="The model tag to serve")
            order = _add_serve_flags(serve)
        else:
            sub.add_parser(name)
    return top, order


def _normalise(argv: list[str]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """FlexibleArgumentParser's rewrites: ``--a_b`` → ``--a-b``, ``-O3`` → ``--optimization-level 3``, and the
    dotted sub-keys collected per JSON flag."""
    out: list[str] = []
    dotted: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-O") and len(a) > 2 and a[2:].isdigit():
            out += ["--optimization-level", a[2:]]
            i += 1
            continue
        if a.startswith("--"):
            key, eq, val = a.partition("=")
            key = "--" + key[2:].replace("_", "-")
            if "." in key:
                base, _, sub = key.partition(".")
                if eq:
                    value: str = val
                    i += 1
                elif i + 1 < len(argv):
                    value = argv[i + 1]
                    i += 2
                else:
                    out.append(key)
                    i += 1
                    continue
                node = dotted.setdefault(base[2:].replace("-", "_"), {})
                parts = sub.replace("-", "_").split(".")
                for p in parts[:-1]:
                    node = node.setdefault(p, {})
                node[parts[-1]] = _scalar(value)
                continue
            out.append(key + (eq + val if eq else ""))
        else:
            out.append(a)
        i += 1
    return out, dotted


def _scalar(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _config_file_args(path: str) -> list[str]:
    import yaml

    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping")
    out: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False:
            continue
        elif isinstance(value, list):
            out += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def parse(argv: list[str], prog: str = "vllm"
          ) -> tuple[argparse.ArgumentParser, argparse.Namespace, list[str], list[str]]:
    """Parse ``argv`` (without the program name): (parser, namespace, flag order, unrecognized arguments). The
    caller reports unrecognized arguments with ``parser.error`` (usage, ``vllm: error: ...``, exit 2) after vLLM's
    import delay."""
    args_list, dotted = _normalise(argv)
    if "--config" in args_list:
        k = args_list.index("--config")
        if k + 1 < len(args_list):
            args_list = args_list[:k] + _config_file_args(args_list[k + 1]) + args_list[k:]
    parser, order = build_parser(prog)
    ns, extras = parser.parse_known_args(args_list)
    if ns.subparser != "serve":
        print(f"{prog}: the simulated vLLM implements only 'serve'", file=sys.stderr)
        raise SystemExit(2)
    for dest, extra in dotted.items():
        current = getattr(ns, dest, None)
        base: dict[str, Any] = json.loads(current) if isinstance(current, str) and current.strip() else {}
        base.update(extra)
        setattr(ns, dest, json.dumps(base))
    return parser, ns, order, extras


def serve_parser(top: argparse.ArgumentParser) -> argparse.ArgumentParser:
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices["serve"]
            assert isinstance(sub, argparse.ArgumentParser)
            return sub
    return top
