"""vLLM's automatic prefix caching, as far as it changes what the simulator counts and how long prefills take.

Full 16-token blocks of prompts already computed keep their content hash (chained over the blocks before them) and
stay reusable while their memory is free, least recently used first to go (vLLM evicts cached blocks only when it
reallocates them). A new request whose leading blocks are cached computes only the rest; the hits show up as
``local_cache_hit`` prompt tokens and in the stats line's "Prefix cache hit rate".
"""

from __future__ import annotations

from collections import OrderedDict

from tui.sim.perfmodel import BLOCK_SIZE


def block_hashes(ids: list[int]) -> list[int]:
    out: list[int] = []
    h = 0
    for i in range(0, len(ids) - len(ids) % BLOCK_SIZE, BLOCK_SIZE):
        h = hash((h, tuple(ids[i:i + BLOCK_SIZE])))
        out.append(h)
    return out


class PrefixCache:
    def __init__(self) -> None:
        self._lru: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def match(self, hashes: list[int]) -> int:
        """How many leading blocks of these are cached (and mark them recently used)."""
        n = 0
        for h in hashes:
            if h not in self._lru:
                break
            self._lru.move_to_end(h)
            n += 1
        return n

    def insert(self, hashes: list[int]) -> None:
        for h in hashes:
            self._lru[h] = None
            self._lru.move_to_end(h)

    def shrink(self, capacity: int) -> None:
        """Keep at most ``capacity`` blocks: the memory of the others was handed to new requests."""
        while len(self._lru) > max(0, capacity):
            self._lru.popitem(last=False)
