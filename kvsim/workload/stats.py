"""Summary statistics of a request stream, including prefix reuse under an unlimited cache."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvsim.workload.request import Request


def trace_stats(requests: Iterable[Request], block_tokens: int) -> dict[str, Any]:
    """Requests, duration, mean lengths and the token-weighted prefix reuse ratio.

    Reuse ratio: for each request, the tokens covered by the longest prefix of its
    ``hash_ids`` already seen in an earlier request (an unlimited cache that keeps
    everything), less the prompt's last token, which a prefill always computes (it
    yields the first output token); summed over requests and divided by all prompt
    tokens. It is the hit ratio a single engine with an unlimited GPU tier reaches.
    """
    seen: set[int] = set()
    n = 0
    first = last = 0.0
    tokens_in = tokens_out = reused = blocks = 0
    for r in requests:
        if n == 0:
            first = r.arrival
        last = r.arrival
        n += 1
        tokens_in += r.input_tokens
        tokens_out += r.output_tokens
        k = 0
        ids = r.hash_ids
        while k < len(ids) and ids[k] in seen:
            k += 1
        reused += min(k * block_tokens, r.input_tokens - 1)
        seen.update(ids)
        blocks += len(ids)
    duration = last - first
    return {
        "requests": n,
        "duration_s": duration,
        "rate_per_s": (n / duration) if duration > 0 else None,
        "mean_input_tokens": tokens_in / n if n else 0.0,
        "mean_output_tokens": tokens_out / n if n else 0.0,
        "prompt_tokens": tokens_in,
        "prefix_reuse_ratio": reused / tokens_in if tokens_in else 0.0,
        "blocks": blocks,
        "unique_blocks": len(seen),
        "block_tokens": block_tokens,
    }
