"""Check tui.core.vllmargv against vLLM's own FlexibleArgumentParser, without a GPU stack.

vLLM's parser class (``vllm/utils/argparse_utils.py``) needs only argparse, ``regex``, ``yaml`` and vLLM's logger, so
it is loaded on its own from a vLLM wheel, given the options of the shipped flag table (``vllm serve --help=all``),
and asked how it reads every spelling of every option (long, underscores, ``=VALUE``, short aliases, prefixes cut
2/4/7/11 characters short, ``-O3``, dotted keys). Never run in CI (it needs the wheel).

    python -m pip download --no-deps vllm==0.24.0 -d /tmp/vw
    unzip -o /tmp/vw/vllm-0.24.0-*.whl vllm/utils/argparse_utils.py -d /tmp/vw/src
    python tools/vllm_argv_check.py /tmp/vw/src/vllm/utils/argparse_utils.py

Prints each spelling read differently and the count (vLLM 0.24.0, 2026-12-07: 2,304 spellings, 4 differ, all
harness artefacts: ``--config`` reads its value as a YAML file, and a prefix equal to a switch's name given a value).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import re
import sys
import types
from pathlib import Path
from typing import Any

from tui.core import vllmargv


def _load(path: Path) -> Any:
    sys.modules.setdefault("regex", re)
    logger = types.ModuleType("vllm.logger")
    logger.init_logger = logging.getLogger  # type: ignore[attr-defined]
    sys.modules.setdefault("vllm", types.ModuleType("vllm"))
    sys.modules["vllm.logger"] = logger
    spec = importlib.util.spec_from_file_location("vllm_argparse_utils", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(path: str) -> int:
    fap = _load(Path(path))

    class Parser(fap.FlexibleArgumentParser):  # type: ignore[misc, name-defined]
        def error(self, message: str) -> Any:
            raise argparse.ArgumentError(None, message)

    table = vllmargv.flag_table()
    p = Parser(add_help=False)
    p.add_argument("model_tag", nargs="?")
    for f in table.flags:
        nargs = {"0": 0, "1": None, "?": "?", "+": "+", "*": "*"}[f.nargs]
        kw: dict[str, Any] = {"dest": "D" + f.canonical}
        kw.update({"action": "store_const", "const": True} if nargs == 0 else {"nargs": nargs})
        p.add_argument(*f.strings, **kw)

    def real(word: str, takes: bool) -> str | None:
        argv = ["m", word] + (["1"] if takes and "=" not in word and not word.startswith("-O") else [])
        try:
            ns = p.parse_args(argv)
        except (argparse.ArgumentError, ValueError):
            return None
        seen = [k[1:] for k, val in vars(ns).items() if k.startswith("D") and val is not None]
        return seen[0] if len(seen) == 1 else None

    n = differ = 0
    for f in table.flags:
        long = f.canonical
        spellings = [long, long.replace("-", "_").replace("__", "--", 1), long + "=1" if f.nargs != "0" else long]
        spellings += [s for s in f.strings if not s.startswith("--")]
        spellings += [long[:-k] for k in (2, 4, 7, 11) if len(long) > k + 3]
        for word in spellings:
            ours, _, problem = vllmargv.resolve(word)
            mine = None if ours is None or problem else ours.canonical
            theirs = real(word, f.nargs != "0")
            n += 1
            if mine != theirs:
                differ += 1
                print(f"differs: {word}: ours {mine}, vLLM's {theirs}")
    print(f"{n} spellings, {differ} read differently")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
