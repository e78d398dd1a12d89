"""The two-term cost model of a cache hit: restore = T0 + S*s/B versus recompute = S/R.

- s: KV bytes per token; R: prefill rate (tokens/s) at the reference prompt length;
  T0: fixed engine cost per hit; B: the tier's bandwidth; S: prompt tokens.
- B* = s*R: below this bandwidth a restore never beats recompute, whatever T0.
- Crossover length S*(B) = T0 / (1/R - s/B) for B > B*: longer prompts restore faster.
  As B grows without bound S* falls to T0*R, so prompts shorter than T0*R never win.

Assumptions: R is constant (the recompute side is linear in S, true near the reference
length only: attention makes long prefills super-linear), the whole prompt is restored,
and nothing else shares the tier. All functions are pure; units are bytes, seconds,
tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
