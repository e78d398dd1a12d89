"""LRU eviction written as a plugin: the built-in ``lru`` in Python, to measure what
calling a Python policy costs (benchmarks/README.md). Use it as ``eviction: python_lru``.
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

    def removed(self, key: Any) -> None:
        self.order.pop(key, None)

    def victim(self, tier: TierView) -> Any:
        return next(iter(self.order))
