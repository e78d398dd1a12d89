"""Cost-aware eviction: evict the block that is cheapest to recompute per byte it frees,
among the blocks no other resident block depends on (ties: least recently used first).

A block's recompute cost is ``Block.recompute_s``, the prefill seconds it saves a lone
request (from the engine's step model): with attention's cost growing with context, a
block deep in a long prompt costs more to recompute than one near the start. Evicting
only "leaves" (blocks whose chain has no resident successor, as SGLang's radix cache
does) matters: a prefix is usable only up to its first missing block, so evicting a
cheap block at the start of a long chain would waste every expensive block after it.
Use it as ``eviction: cost_aware``.
"""

from __future__ import annotations

import heapq
from typing import Any

from kvsim.plugins import Block, EvictionPolicy, TierView, register


@register("cost_aware")
class CostAware(EvictionPolicy):
    def __init__(self) -> None:
        self.score: dict[Any, float] = {}  # resident key -> recompute seconds per byte
        self.parent: dict[Any, Any] = {}  # resident key -> the block before it (or None)
        self.children: dict[Any, int] = {}  # resident key -> resident blocks after it
        self.stamp: dict[Any, int] = {}  # resident leaf -> its live heap entry
        self.heap: list[tuple[float, int, Any]] = []  # (score, stamp, key) of leaves
        self.clock = 0

    def _leaf(self, key: Any) -> None:
        """(Re)enter a block that nothing resident depends on among the candidates."""
        self.clock += 1
        self.stamp[key] = self.clock
        heapq.heappush(self.heap, (self.score[key], self.clock, key))

    def inserted(self, block: Block) -> None:
        key, parent = block.key, block.parent
        self.score[key] = block.recompute_s / max(block.nbytes, 1.0)
        self.children[key] = 0
        self.parent[key] = parent if parent in self.score else None
        if self.parent[key] is not None:
            self.children[parent] += 1
            self.stamp.pop(parent, None)  # no longer a leaf
        self._leaf(key)

    def hit(self, block: Block) -> None:
        if block.key in self.stamp:  # a use makes it the last of its score to go
            self._leaf(block.key)

    refreshed = hit  # stored again (its prompt's blocks, after a prefill): a use as well

    def removed(self, key: Any, reason: str) -> None:
        parent = self.parent.pop(key, None)
        self.score.pop(key, None)
        self.children.pop(key, None)
        self.stamp.pop(key, None)
        if parent is not None and parent in self.children:
            self.children[parent] -= 1
            if self.children[parent] == 0:
                self._leaf(parent)

    def victim(self, tier: TierView) -> Any:
        heap = self.heap
        while True:
            _, stamp, key = heap[0]
            if self.stamp.get(key) == stamp:
                return key
            heapq.heappop(heap)
