"""The two-term cost model of a cache hit: restore = T0 + S*s/B versus recompute = S/R.

- s: KV bytes per token; R: prefill rate (tokens/s) at the reference prompt length;
  T0: fixed engine cost per hit; B: the tier's bandwidth; S: prompt tokens.
- B* = s*R: below this bandwidth a restore never beats recompute, whatever T0.
- Crossover length S*(B) = T0 / (1/R - s/B) for B > B*: longer prompts restore faster.
  As B grows without bound S* falls to T0*R, so prompts shorter than T0*R never win.

Assumptions: R is constant (the recompute side is linear in S, true near the reference
length only: attention makes long prefills super-linear), the whole prompt is restored,
and nothing else shares the tier. :func:`timing_crossover` drops the first: it compares
against the engine's own time for the prompt, so "B < B*: never" holds only at the
reference length. All functions are pure; units are bytes, seconds, tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

GIB = 2.0**30


def b_star(kv_bytes: float, rate: float) -> float:
    """Break-even bandwidth s*R (bytes/s)."""
    return kv_bytes * rate


def restore_seconds(tokens: float, bandwidth: float, t0: float, kv_bytes: float) -> float:
    """T0 + S*s/B."""
    return t0 + tokens * kv_bytes / bandwidth


def recompute_seconds(tokens: float, rate: float) -> float:
    """S/R."""
    return tokens / rate


def crossover_tokens(bandwidth: float, t0: float, kv_bytes: float, rate: float) -> float:
    """Shortest prompt whose restore beats recompute at this bandwidth (inf if none)."""
    gain = 1.0 / rate - kv_bytes / bandwidth  # seconds saved per token restored
    return t0 / gain if gain > 0 else math.inf


def timing_crossover(
    bandwidth: float,
    t0: float,
    kv_bytes: float,
    compute: Callable[[int, int], float],
    max_tokens: int = 1 << 20,
) -> float:
    """The crossover under the timing model instead of a constant R: the shortest prompt
    S for which restoring S - 1 tokens and computing the last one, T0 + (S-1)*s/B +
    t(1, S-1), beats computing it all, t(S, 0). ``compute(new, cached)`` is the engine's
    time for one prompt alone. Recompute grows faster than linearly (attention), so a
    tier below B* can still win on long prompts. inf when no prompt up to
    ``max_tokens`` wins. Scans a geometric grid of lengths, then bisects the first
    winning step (one crossing assumed inside it)."""

    def wins(n: int) -> bool:
        return t0 + (n - 1) * kv_bytes / bandwidth + compute(1, n - 1) < compute(n, 0)

    grid = sorted({max(2, round(2 ** (k / 4))) for k in range(4, 4 * max_tokens.bit_length())})
    grid = [n for n in grid if n <= max_tokens]
    prev = 1
    for n in grid:
        if wins(n):
            lo, hi = prev, n  # lo loses (or is 1), hi wins
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if wins(mid) else (mid, hi)
            return float(hi)
        prev = n
    return math.inf


def effective_bandwidth(
    server_bw: float, op_overhead: float, op_bytes: float, servers: int = 1
) -> float:
    """GET bandwidth of ``servers`` servers read in parallel, each op moving ``op_bytes``
    and costing ``op_overhead`` of server time on top of ``op_bytes / server_bw``."""
    return servers * op_bytes / (op_overhead + op_bytes / server_bw)


@dataclass(frozen=True)
class CostModel:
    """The cost model of one engine and tier."""

    kv_bytes: float  # s
    rate: float  # R, tokens/s
    t0: float  # seconds
    reference_tokens: int = 16384  # where R was read off the timing table

    @property
    def b_star(self) -> float:
        return b_star(self.kv_bytes, self.rate)

    @property
    def min_tokens(self) -> float:
        """T0*R: the crossover length at infinite bandwidth."""
        return self.t0 * self.rate

    def restore(self, tokens: float, bandwidth: float) -> float:
        return restore_seconds(tokens, bandwidth, self.t0, self.kv_bytes)

    def recompute(self, tokens: float) -> float:
        return recompute_seconds(tokens, self.rate)

    def crossover(self, bandwidth: float) -> float:
        return crossover_tokens(bandwidth, self.t0, self.kv_bytes, self.rate)

    def table(self, bandwidths: Sequence[float], tokens: int) -> list[dict[str, float]]:
        """One row per bandwidth: crossover length, restore and recompute of ``tokens``."""
        return [
            {
                "bandwidth": bw,
                "crossover_tokens": self.crossover(bw),
                "restore_s": self.restore(tokens, bw),
                "recompute_s": self.recompute(tokens),
            }
            for bw in bandwidths
        ]
