"""Miss-ratio curves of an LRU prefix cache, for every capacity at once, in one pass.

The counting rule is the simulator's own (one engine serving requests in arrival order,
an LRU GPU tier, nothing else): a request's hit is the longest prefix of its blocks held in
the cache when it starts, at least one token is always computed, and then all its blocks
are inserted (or refreshed) in order, evicting least-recently-used blocks as needed.

With LRU the cache always holds the longest run of most-recently-used blocks that fits.
So block i of a request is held at capacity C exactly when its *stack distance* - the
tokens of the distinct blocks used since its last use, plus its own - is at most C. The
request hits block i when blocks 0..i all are: when the running maximum m_i of their
distances is at most C. Each block's tokens therefore count as a hit for every capacity
from m_i up, and one sorted pass over the m_i gives the whole curve. Distances come from
a Fenwick tree over use times, each distinct block weighted by its tokens at its last use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kvsim.workload.request import Request


class _Fenwick:
    """Prefix sums over positions 1..n with point updates."""

    __slots__ = ("n", "tree")

    def __init__(self, n: int) -> None:
        self.n = n
        self.tree = [0] * (n + 1)

    def add(self, i: int, v: int) -> None:
        tree, n = self.tree, self.n
        while i <= n:
            tree[i] += v
            i += i & -i

    def prefix(self, i: int) -> int:
        tree = self.tree
        s = 0
        while i > 0:
            s += tree[i]
            i -= i & -i
        return s


@dataclass(frozen=True)
class MissRatioCurve:
    """Hit ratio of an LRU prefix cache as a step function of its capacity (tokens)."""

    thresholds: np.ndarray  # capacities (tokens) where the hit ratio steps up, sorted
    cumulative_hits: np.ndarray  # hit tokens at each threshold and above
    prompt_tokens: int
    block_tokens: int

    def hit_ratio(self, capacity_tokens: float) -> float:
        """Hit ratio (prompt tokens from the cache / all prompt tokens) at a capacity."""
        k = int(np.searchsorted(self.thresholds, capacity_tokens, side="right"))
        hits = self.cumulative_hits[k - 1] if k else 0
        return float(hits) / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def unlimited(self) -> float:
        """Hit ratio with a cache that never evicts."""
        return (
            float(self.cumulative_hits[-1]) / self.prompt_tokens
            if len(self.cumulative_hits) and self.prompt_tokens
            else 0.0
        )

    @property
    def working_set_tokens(self) -> int:
        """The smallest capacity that reaches the unlimited hit ratio."""
        return int(self.thresholds[-1]) if len(self.thresholds) else 0

    def points(self, n: int = 24) -> list[dict[str, float | None]]:
        """Log-spaced points from one block to the working set, then an unlimited cache
        (``capacity_tokens`` None)."""
        top = max(self.working_set_tokens, self.block_tokens)
        caps = np.unique(np.geomspace(self.block_tokens, top, n).round().astype(np.int64))
        out: list[dict[str, float | None]] = [
            {"capacity_tokens": int(c), "hit_ratio": self.hit_ratio(int(c))} for c in caps
        ]
        out.append({"capacity_tokens": None, "hit_ratio": self.unlimited})
        return out


def miss_ratio_curve(requests: Iterable[Request], block_tokens: int) -> MissRatioCurve:
    """The exact LRU hit-ratio curve of a request stream (see the module docstring)."""
    reqs = list(requests)
    uses = sum(len(r.hash_ids) for r in reqs)
    tree = _Fenwick(uses)
    last: dict[int, int] = {}  # block -> position of its last use (1-based)
    size: dict[int, int] = {}  # block -> tokens (fixed by its first use, as in the store)
    total = 0  # sum of the tree: tokens of distinct blocks seen so far
    pos = 0
    thresholds: list[int] = []
    hits: list[int] = []
    prompt = 0
    for r in reqs:
        ids = r.hash_ids
        n_in = r.input_tokens
        prompt += n_in
        nblocks = len(ids)
        # lookup: running max of the stack distances along the prefix
        running = 0
        for i, b in enumerate(ids):
            q = last.get(b)
            if q is None:
                break
            d = total - tree.prefix(q) + size[b]  # distinct tokens used since, plus its own
            if d > running:
                running = d
            tok = block_tokens if i < nblocks - 1 else n_in - (nblocks - 1) * block_tokens
            if i == nblocks - 1:
                tok -= 1  # a whole-prompt hit still computes its last token
            if tok > 0:
                thresholds.append(running)
                hits.append(tok)
        # the request's blocks are then used in order
        for i, b in enumerate(ids):
            pos += 1
            q = last.get(b)
            if q is None:
                s = block_tokens if i < nblocks - 1 else n_in - (nblocks - 1) * block_tokens
                size[b] = s
                total += s
            else:
                s = size[b]
                tree.add(q, -s)
            tree.add(pos, s)
            last[b] = pos
    order = np.argsort(np.asarray(thresholds, dtype=np.int64), kind="stable")
    th = np.asarray(thresholds, dtype=np.int64)[order]
    cum = np.cumsum(np.asarray(hits, dtype=np.int64)[order])
    # keep the last cumulative value at each distinct threshold
    if th.size:
        keep = np.append(th[1:] != th[:-1], True)
        th, cum = th[keep], cum[keep]
    return MissRatioCurve(th, cum, prompt, block_tokens)
