"""What listing and deriving models costs (``list_models``, the console's launch screen), against reading each
model's ``config.json`` alone, measured in the same run.

A fake Hugging Face cache is built in a temporary folder: ``--repos`` repos, half sharded (an index and its
shards), half without an index (``--files`` safetensors files of ``--tensors`` tensors each, header only, so their
headers are read and summed). The table gives the time per model of: json-loading config.json (the reference),
``derive`` on an indexed snapshot, ``derive`` on a header-only snapshot, and a whole ``list_models``, each with its
ratio to the reference. The derivation reads only the 8-byte header lengths and the JSON headers, so its cost grows
with the number of tensors, never with the weights' size.

    python benchmarks/derive_cost.py [--repos 40] [--files 4] [--tensors 300] [--rounds 5]

This machine's cores are shared: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.model_fixtures import MODELS, hf_cache, write_safetensors
from tui.core.models import Catalog
from tui.core.models.hfcache import cached_repos
from tui.core.models.modeldir import derive
from tui.core.models.modelsrc import list_models


def _build(root: Path, repos: int, files: int, tensors: int) -> None:
    for i in range(repos):
        if i % 2 == 0:
            hf_cache(root, f"org{i}/qwen3-8b-{i}", "qwen3-8b")
            continue
        hub = hf_cache(root, f"org{i}/llama-{i}", "llama-3.1-8b-instruct")
        snap = next((hub / f"models--org{i}--llama-{i}" / "snapshots").iterdir())
        for f in range(files):
            names = {f"model.layers.{f}.t{t}.weight": ("BF16", [4096, 1024]) for t in range(tensors)}
            write_safetensors(snap / f"model-{f + 1:05d}-of-{files:05d}.safetensors", names)


def _per_model(fn, items: list[Path], rounds: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for it in items:
            fn(it)
        best = min(best, (time.perf_counter() - t0) / max(1, len(items)))
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repos", type=int, default=40)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--tensors", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _build(root, a.repos, a.files, a.tensors)
        os.environ["HF_HUB_CACHE"] = str(root / "hub")
        snaps = [r.snapshot for r in cached_repos() if r.snapshot is not None]
        indexed = [s for s in snaps if (s / "model.safetensors.index.json").exists()]
        headers = [s for s in snaps if s not in indexed]
        ref = _per_model(lambda s: json.loads((s / "config.json").read_text()), snaps, a.rounds)
        rows = [("json.load config.json (reference)", ref, len(snaps)),
                ("derive, safetensors index", _per_model(derive, indexed, a.rounds), len(indexed)),
                (f"derive, {a.files} header-only files x {a.tensors} tensors",
                 _per_model(derive, headers, a.rounds), len(headers))]
        cat = Catalog.load()
        best = float("inf")
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            entries = list_models(cat)
            best = min(best, time.perf_counter() - t0)
        assert sum(1 for e in entries if e.source == "hf-cache" and e.problem is None) == len(snaps)
        rows.append(("list_models (per model, with the shipped profiles)", best / len(entries), len(entries)))
    print(f"fixtures from {MODELS}")
    print(f"{'what':<56} {'models':>6} {'per model':>11} {'x reference':>12}")
    for what, t, n in rows:
        print(f"{what:<56} {n:>6} {t * 1e3:>8.3f} ms {t / ref:>11.1f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
