"""When each request is sent, as ``vllm bench serve`` schedules it (``serve.py:get_request``).

Rate ``inf``: everything at once. Otherwise each inter-arrival gap is drawn from a gamma distribution with shape
``burstiness`` and scale ``1/(rate·burstiness)`` (burstiness 1 is a Poisson process; < 1 burstier, > 1 more
even; ``inf`` a constant gap), the gaps are summed, and — as vllm does, to remove the 1–2 % drift of a random sum
— the cumulative times are rescaled so the last send falls at ``num_requests / rate``.
"""

from __future__ import annotations

import math
import random


def send_offsets(num_requests: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Seconds from the start of the run at which each request is sent (non-decreasing)."""
    if num_requests < 1:
        return []
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if math.isinf(rate):
        return [0.0] * num_requests
    rng = random.Random(seed)
    if math.isinf(burstiness):
        gaps = [1.0 / rate] * num_requests
    else:
        theta = 1.0 / (rate * burstiness)
        gaps = [rng.gammavariate(burstiness, theta) for _ in range(num_requests)]
    offsets = []
    total = 0.0
    for g in gaps:
        total += g
        offsets.append(total)
    if offsets[-1] > 0:
        scale = (num_requests / rate) / offsets[-1]
        offsets = [t * scale for t in offsets]
    return offsets
