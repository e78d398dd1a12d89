"""Least frequently used eviction: the block used the fewest times goes first (ties: the
one stored or used longest ago). Use it as ``eviction: lfu`` on any tier.

A use is a lookup hit (``hit``); a block stored again after the prefill that found it
(``refreshed``) is the same use, not a second one, so it is not counted.

Counts live as long as a block is resident (a block that comes back starts again at 1),
so a burst of old popularity does not pin a block forever after it has left. A heap
keyed by (uses, last touch) gives the victim in O(log n); entries made stale by a later
use are skipped when they reach the top.
"""

from __future__ import annotations

import heapq
from typing import Any

from kvsim.plugins import Block, EvictionPolicy, TierView, register


@register("lfu")
class LFU(EvictionPolicy):
    def __init__(self) -> None:
        self.uses: dict[Any, int] = {}  # resident key -> uses
        self.stamp: dict[Any, int] = {}  # resident key -> its live heap entry
        self.heap: list[tuple[int, int, Any]] = []  # (uses, stamp, key)
        self.clock = 0

    def _push(self, key: Any) -> None:
        self.clock += 1
        self.stamp[key] = self.clock
        heapq.heappush(self.heap, (self.uses[key], self.clock, key))
        if len(self.heap) > 4 * len(self.uses) + 1024:  # drop stale entries now and then
            self.heap = [(self.uses[k], s, k) for k, s in self.stamp.items()]
            heapq.heapify(self.heap)

    def inserted(self, block: Block) -> None:
        self.uses[block.key] = 1
        self._push(block.key)

    def hit(self, block: Block) -> None:
        self.uses[block.key] += 1
        self._push(block.key)

    def removed(self, key: Any, reason: str) -> None:
        self.uses.pop(key, None)
        self.stamp.pop(key, None)

    def victim(self, tier: TierView) -> Any:
        heap = self.heap
        while True:
            _, stamp, key = heap[0]
            if self.stamp.get(key) == stamp:
                return key
            heapq.heappop(heap)  # stale: used again since, or gone
