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
The same pass counts the blocks found (``hit_blocks``), for comparing with other policies'
replays (:mod:`kvsim.analysis.replay`, which replays ``lru`` through the simulator's own
store to the same numbers when each block id keeps one size, as a trace's do; this curve
takes a block's size from its first use for good).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kvsim.errors import InputError
from kvsim.workload.request import Request, check_request

MAX_POINTS = 10_000  # points of a printed curve (a curve has at most that many steps to show)


_EMPTY = -1  # a free slot of the block table (block ids are >= 0)
_FIB = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: Fibonacci hashing of block ids
_M64 = (1 << 64) - 1


class _Uses:
    """The last use of every distinct block, as a Fenwick tree of token counts over use
    positions, in memory proportional to the distinct blocks (not to all uses).

    Blocks live in an open-addressing table of flat arrays (id, position of last use,
    tokens: 16 bytes a slot, at most 3/4 full; a dict of Python ints took ~110 bytes a
    block). When the positions run out, the live ones (each block's last use) are
    renumbered 1..D in order, which keeps every distance, and the tree is rebuilt with room
    for as many again."""

    __slots__ = ("at", "cap", "count", "keys", "last", "pos", "shift", "size", "total", "tree")

    MIN_CAP = 1 << 16  # positions and slots at least (tests lower it to compact often)

    def __init__(self) -> None:
        slots = 1 << max(4, (self.MIN_CAP - 1).bit_length())
        self.keys = array("q", [_EMPTY]) * slots  # block id of each slot
        self.last = array("i", bytes(4 * slots))  # position of its last use
        self.size = array("i", bytes(4 * slots))  # its tokens (fixed by its first use)
        self.shift = 64 - (slots.bit_length() - 1)
        self.count = 0  # blocks in the table
        self.cap = cap = self.MIN_CAP
        self.tree = array("q", bytes(8 * (cap + 1)))  # Fenwick sums of tokens by position
        self.at = array("i", bytes(4 * (cap + 1)))  # the slot whose block was used there
        self.pos = 0  # the latest position used
        self.total = 0  # tokens of all distinct blocks seen (the sum of the tree)

    def slot(self, b: int) -> int:
        """The slot holding block ``b``, or the free slot where it would go."""
        keys = self.keys
        mask = len(keys) - 1
        i = ((b * _FIB) & _M64) >> self.shift
        while True:
            k = keys[i]
            if k == b or k == _EMPTY:  # noqa: SIM109 (no tuple per probe)
                return i
            i = (i + 1) & mask

    def feed(self, ids: tuple[int, ...], block: int, tail: int, steps: _Steps) -> None:
        """One request: add the steps of its prefix hit to ``steps``, then use its blocks
        (``distance`` and ``use`` inlined: this loop is the whole cost of a curve)."""
        keys, last, size, tree = self.keys, self.last, self.size, self.tree
        mask, shift, total = len(keys) - 1, self.shift, self.total
        n = len(ids)
        found: list[int] = []  # slots of the blocks of the hit prefix
        running = pending = blocks = 0  # blocks: of the hit prefix, counted with pending
        before = held = -1  # the previous block's position and tree prefix sum there
        for i in range(n):
            b = ids[i]
            j = ((b * _FIB) & _M64) >> shift
            k = keys[j]
            while k != b and k != _EMPTY:
                j = (j + 1) & mask
                k = keys[j]
            if k == _EMPTY:
                break
            found.append(j)
            q = last[j]
            if q == before + 1:  # used right after the previous block: no tree walk
                held += size[j]
            else:
                held = 0
                x = q
                while x > 0:
                    held += tree[x]
                    x &= x - 1
            before = q
            d = total - held + size[j]  # tokens held since its last use, its own included
            if d > running:
                if blocks:
                    steps.add(running, pending, blocks)
                    pending = blocks = 0
                running = d
            pending += block if i < n - 1 else tail - 1  # the last token is computed
            blocks += 1
        if blocks:
            steps.add(running, pending, blocks)
        cap = self.cap
        hits = len(found)
        for i in range(n):
            if self.pos == cap:
                self._compact()
                last, tree, cap = self.last, self.tree, self.cap
            if i < hits:
                j = found[i]
            else:
                b = ids[i]
                j = ((b * _FIB) & _M64) >> shift
                k = keys[j]
                while k != b and k != _EMPTY:
                    j = (j + 1) & mask
                    k = keys[j]
                if k == _EMPTY:
                    if 4 * (self.count + 1) > 3 * len(keys):  # at most 3/4 full
                        self._grow()
                        keys, last, size = self.keys, self.last, self.size
                        mask, shift = len(keys) - 1, self.shift
                        j = self.slot(b)
                    w = block if i < n - 1 else tail
                    keys[j] = b
                    size[j] = w
                    self.count += 1
                    self.total += w
                    j = -1 - j  # new: nothing to take out of the tree
            if j >= 0:
                w = size[j]
                q = last[j]
                while q <= cap:
                    tree[q] -= w
                    q += q & -q
            else:
                j = -1 - j
            self.pos = p = self.pos + 1
            last[j] = p
            self.at[p] = j
            q = p
            while q <= cap:
                tree[q] += w
                q += q & -q

    def _grow(self) -> None:
        """Twice the slots; every block moves to its new slot (and ``at`` follows)."""
        keys, last, size = self.keys, self.last, self.size
        slots = 2 * len(keys)
        self.keys = array("q", [_EMPTY]) * slots
        self.last = array("i", bytes(4 * slots))
        self.size = array("i", bytes(4 * slots))
        self.shift -= 1
        at = self.at
        for old in range(len(keys)):
            b = keys[old]
            if b != _EMPTY:
                s = self.slot(b)
                self.keys[s] = b
                q = self.last[s] = last[old]
                self.size[s] = size[old]
                if q:
                    at[q] = s

    def _compact(self) -> None:
        """Renumber the live positions 1..D in order and rebuild the tree around them."""
        cap = max(2 * self.count, self.MIN_CAP)
        at = array("i", bytes(4 * (cap + 1)))
        tree = array("q", bytes(8 * (cap + 1)))
        old_at, last, size = self.at, self.last, self.size
        n = 0
        for q in range(1, self.pos + 1):
            s = old_at[q]
            if last[s] == q:  # the block's last use (older ones are stale)
                n += 1
                at[n] = s
                last[s] = n
                tree[n] = size[s]
        del old_at
        self.at = at
        for i in range(1, cap + 1):  # linear-time Fenwick build
            j = i + (i & -i)
            if j <= cap:
                tree[j] += tree[i]
        self.tree, self.cap, self.pos = tree, cap, n


@dataclass(frozen=True)
class MissRatioCurve:
    """Hit ratio of an LRU prefix cache as a step function of its capacity (tokens)."""

    thresholds: np.ndarray  # capacities (tokens) where the hit ratio steps up, sorted
    cumulative_hits: np.ndarray  # hit tokens at each threshold and above
    prompt_tokens: int
    block_tokens: int
    cumulative_blocks: np.ndarray | None = None  # hit blocks at each threshold and above
    asked_blocks: int = 0  # blocks of every prompt (each looked up once)

    def hit_ratio(self, capacity_tokens: float) -> float:
        """Hit ratio (prompt tokens from the cache / all prompt tokens) at a capacity."""
        k = int(np.searchsorted(self.thresholds, capacity_tokens, side="right"))
        hits = self.cumulative_hits[k - 1] if k else 0
        return float(hits) / self.prompt_tokens if self.prompt_tokens else 0.0

    def hit_blocks(self, capacity_tokens: float | None) -> int:
        """Blocks found in the cache at a capacity (None: unlimited), over all requests."""
        cum = self.cumulative_blocks
        if cum is None or not len(cum):
            return 0
        if capacity_tokens is None:
            return int(cum[-1])
        k = int(np.searchsorted(self.thresholds, capacity_tokens, side="right"))
        return int(cum[k - 1]) if k else 0

    def capacities(self, n: int = 24) -> list[int]:
        """``n`` log-spaced capacities (tokens) from one block to the working set, rounded
        and without repeats (so maybe fewer); ``n`` from 2 to MAX_POINTS."""
        if not 2 <= n <= MAX_POINTS:
            raise InputError(f"must be between 2 and {MAX_POINTS:,}, got {n}", where="points")
        top = max(self.working_set_tokens, self.block_tokens)
        caps = np.unique(np.geomspace(self.block_tokens, top, n).round().astype(np.int64))
        return [int(c) for c in caps]

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
        (``capacity_tokens`` None); ``n`` from 2 to MAX_POINTS."""
        out: list[dict[str, float | None]] = [
            {"capacity_tokens": c, "hit_ratio": self.hit_ratio(c)} for c in self.capacities(n)
        ]
        out.append({"capacity_tokens": None, "hit_ratio": self.unlimited})
        return out


def miss_ratio_curve(requests: Iterable[Request], block_tokens: int) -> MissRatioCurve:
    """The exact LRU hit-ratio curve of a request stream (see the module docstring).

    The stream is read once and not kept: memory grows with the distinct blocks and the
    distinct thresholds, not with the requests."""
    uses = _Uses()
    steps = _Steps()
    prompt = asked = 0
    for r in requests:
        ids = r.hash_ids
        n_in = r.input_tokens
        prompt += n_in
        nblocks = len(ids)
        asked += nblocks
        tail = n_in - (nblocks - 1) * block_tokens  # tokens of the last block
        if not 0 < tail <= block_tokens:
            check_request(r, block_tokens)  # hash_ids do not fit input_tokens: says so
        uses.feed(ids, block_tokens, tail, steps)
    th, cum, cum_blocks = steps.curve()
    return MissRatioCurve(th, cum, prompt, block_tokens, cum_blocks, asked)


class _Steps:
    """(threshold, hit tokens, hit blocks) triples, merged into sorted distinct thresholds
    in batches so that memory follows the distinct thresholds, not the hits."""

    __slots__ = ("blocks", "hits", "merged", "thresholds")

    BATCH = 1 << 20

    def __init__(self) -> None:
        self.thresholds = array("q")
        self.hits = array("q")
        self.blocks = array("q")
        empty = np.zeros(0, dtype=np.int64)
        self.merged: tuple[np.ndarray, np.ndarray, np.ndarray] = (empty, empty, empty)

    def add(self, threshold: int, tokens: int, blocks: int) -> None:
        self.thresholds.append(threshold)
        self.hits.append(tokens)
        self.blocks.append(blocks)
        if len(self.hits) >= self.BATCH:
            self._merge()

    def _merge(self) -> None:
        def joined(old: np.ndarray, new: array) -> np.ndarray:
            return np.concatenate((old, np.frombuffer(new, dtype=np.int64)))

        th = joined(self.merged[0], self.thresholds)
        hits = joined(self.merged[1], self.hits)
        blocks = joined(self.merged[2], self.blocks)
        self.thresholds, self.hits, self.blocks = array("q"), array("q"), array("q")
        if not th.size:
            return
        order = np.argsort(th, kind="stable")
        th, hits, blocks = th[order], hits[order], blocks[order]
        starts = np.flatnonzero(np.append(True, th[1:] != th[:-1]))
        self.merged = (
            th[starts],
            np.add.reduceat(hits, starts),
            np.add.reduceat(blocks, starts),
        )

    def curve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sorted distinct thresholds, and the hit tokens and hit blocks at each threshold
        and above."""
        self._merge()
        th, hits, blocks = self.merged
        return th, np.cumsum(hits), np.cumsum(blocks)
