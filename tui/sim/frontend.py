"""The API server in front of an engine, in virtual time (pure): when the requests a client sent reach the engine.

vLLM's API server runs every request's handler on one asyncio loop (one CPU core). A handler runs in two parts with
an ``await`` between them: reading and validating the request (the HTTP body, the pydantic model, the sampling
parameters), then preparing its prompt (tokenisation, the engine request) and handing it to the engine core. The
loop runs ready tasks in the order they became ready, so a burst of requests that arrive together is first read
and validated *all of them*, and only then handed over one by one: with 64 prompts sent at once the engine sees the
first request after 64 reads, and the rest follow it closely (the real tp1 grid: the first token of request 0
after ~100 ms, then 23 and 40 requests in the next two steps, not one step of 64).

A request arriving alone pays both parts back to back; requests spaced further apart than both never wait.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

#: reading one request: HTTP body, validation of the OpenAI request, its sampling parameters (and, on the client's
#: side, building and sending it) [tp1 grid fit: request 0 of a 64-request burst reaches the engine after ~90 ms]
READ_S = 1.3e-3
#: preparing one request's prompt and handing it to the engine core: a fixed part and one per prompt token
#: (tokenising the prompt text) [tp1 grid fit: 23 requests reach the engine during a 5 ms step]
SUBMIT_S = 0.2e-3
SUBMIT_S_PER_TOKEN = 0.0


def admit(arrivals: Sequence[float], prompt_lens: Sequence[int]) -> list[float]:
    """When each request (sent at ``arrivals``, in order) reaches the engine through one API server's loop."""
    n = len(arrivals)
    order = sorted(range(n), key=lambda i: arrivals[i])
    ready: deque[tuple[int, int]] = deque()  # (part, request)
    out = [0.0] * n
    t = 0.0
    j = 0
    while j < n or ready:
        if not ready:
            t = max(t, arrivals[order[j]])
        while j < n and arrivals[order[j]] <= t:
            ready.append((1, order[j]))
            j += 1
        part, k = ready.popleft()
        if part == 1:
            t += READ_S
            while j < n and arrivals[order[j]] <= t:  # those that came in meanwhile are read first
                ready.append((1, order[j]))
                j += 1
            ready.append((2, k))
        else:
            t += SUBMIT_S + SUBMIT_S_PER_TOKEN * prompt_lens[k]
            out[k] = t
    return out
