"""Reuse distances: the LRU stack distance of every block a stream's lookups ask for.

This module owns :class:`ReuseHistogram` (distances binned by powers of two, first uses
apart) and :func:`reuse_histogram` (one Fenwick tree over use positions), what ``kvsim
trace reuse`` prints for a trace or a recorded run's streams.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kvsim.analysis.streams import LOOKUP, STORE, Stream


@dataclass(frozen=True)
class ReuseHistogram:
    """LRU stack distances of the blocks asked: for each block a lookup asks for, the
    distinct blocks used (asked or stored) since its last use, itself included. An LRU
    store of C equal blocks holds it exactly when the distance is at most C (ignoring
    the prefix rule). ``bins[i]`` counts distances in [2**i, 2**(i+1)); ``cold``: first
    uses (no distance)."""

    bins: list[int]
    cold: int

    @property
    def references(self) -> int:
        return sum(self.bins) + self.cold

    def rows(self) -> list[dict[str, Any]]:
        """One row a bin: ``low``, ``high`` (distances low..high), ``count``, ``share``
        (of all references); then ``cold`` as a row with ``low`` None."""
        n = self.references
        out: list[dict[str, Any]] = [
            {"low": 1 << i, "high": (1 << (i + 1)) - 1, "count": c, "share": c / n if n else 0.0}
            for i, c in enumerate(self.bins)
        ]
        out.append(
            {"low": None, "high": None, "count": self.cold, "share": self.cold / n if n else 0.0}
        )
        return out


def reuse_histogram(streams: Iterable[Stream]) -> ReuseHistogram:
    """Stack distances of every stream's lookups (each stream its own store), binned by
    powers of two. A trace's store of a request's chain right after its lookup changes no
    distance, so a trace counts its lookups alone. One Fenwick tree over use positions
    (each distinct block marked at its last use): O(log n) a use."""
    bins = [0] * 64
    cold = 0
    for stream in streams:
        keys = stream.keys
        uses = sum(
            e - s for k, s, e in stream.ops() if k == LOOKUP or (k == STORE and not stream.tokens)
        )
        size = uses + 1
        tree = [0] * (size + 1)
        last: dict[int, int] = {}
        t = 0
        marked = 0  # distinct blocks marked in the tree
        for k, s, e in stream.ops():
            if k == STORE and stream.tokens:
                continue
            if k not in (LOOKUP, STORE):
                continue
            asked = k == LOOKUP
            for p in range(s, e):
                b = keys[p]
                t += 1
                q = last.get(b)
                if q is None:
                    marked += 1
                    if asked:
                        cold += 1
                else:
                    if asked:  # distinct blocks marked after q: marked - prefix(q) + 1
                        x, before = q, 0
                        while x > 0:
                            before += tree[x]
                            x &= x - 1
                        d = marked - before + 1  # marks after q, and itself
                        bins[d.bit_length() - 1] += 1
                    x = q
                    while x <= size:
                        tree[x] -= 1
                        x += x & -x
                last[b] = t
                x = t
                while x <= size:
                    tree[x] += 1
                    x += x & -x
    while len(bins) > 1 and bins[-1] == 0:
        bins.pop()
    return ReuseHistogram(bins, cold)
