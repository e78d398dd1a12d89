"""LRU eviction written as a plugin: the built-in ``lru`` in Python, to measure what
calling a Python policy costs (benchmarks/README.md). Use it as ``eviction: python_lru``.

A use is a lookup hit or a block stored again (the built-in LRU refreshes on both). Besides
the one-block methods it defines the optional batch methods (``inserted_many``,
``hit_many``, ``refreshed_many``, ``removed_many``), which kvsim calls once per run of
events of one kind instead of once per block, and names its victims with ``evict``
(which forgets the victim itself) rather than ``victim`` (which would then hear
``removed``): the same policy, fewer interpreted calls.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from kvsim.plugins import Block, EvictionPolicy, TierView, register


@register("python_lru")
class PythonLRU(EvictionPolicy):
    def __init__(self) -> None:
        self.order: OrderedDict[Any, None] = OrderedDict()  # least recently used first

    def inserted(self, block: Block) -> None:
        self.order[block.key] = None

    def hit(self, block: Block) -> None:
        self.order.move_to_end(block.key)

    def refreshed(self, block: Block) -> None:
        self.order.move_to_end(block.key)

    def removed(self, key: Any, reason: str) -> None:
        self.order.pop(key, None)

    def inserted_many(self, blocks: list[Block]) -> None:
        order = self.order
        for b in blocks:
            order[b.key] = None

    def hit_many(self, blocks: list[Block]) -> None:
        move = self.order.move_to_end
        for b in blocks:
            move(b.key)

    refreshed_many = hit_many

    def removed_many(self, keys: list[Any], reason: str) -> None:
        pop = self.order.pop
        for k in keys:
            pop(k, None)

    def evict(self, tier: TierView) -> Any:
        # (rather than victim(): the block to evict, forgotten here at once, so kvsim
        # does not call removed_many for it: one interpreted call less per eviction)
        return self.order.popitem(last=False)[0]
