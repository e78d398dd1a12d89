"""S3-FIFO eviction (Yang et al., SOSP 2023), with its small queue's share as a parameter.
Use it as ``eviction: s3fifo`` or ``eviction: {name: s3fifo, params: {small_frac: 0.1}}``,
and sweep it as ``tiers.host.eviction.params.small_frac``.

Three FIFO queues: a small one (``small_frac`` of the tier's bytes) where new blocks land,
a main one, and a ghost list of keys recently evicted from the small queue. A block hit
while in the small queue moves to the main queue when it reaches the small queue's head;
one never hit is evicted (its key remembered in the ghost list). A block stored again
while its key is in the ghost list goes straight to the main queue. The main queue gives
a block hit since it was last at the head another turn (its count minus one), and evicts
one not hit. Hits count only lookups (``hit``): a prompt's blocks stored again after its
prefill (``refreshed``) are the same use, not a second one.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Annotated, Any

from pydantic import Field

from kvsim.plugins import Block, EvictionPolicy, TierView, register


@register("s3fifo")
class S3FIFO(EvictionPolicy):
    """S3-FIFO: a small FIFO filters one-hit blocks out of the main FIFO."""

    # (bounds in the annotations: kvsim checks them when it validates the scenario)
    def __init__(
        self,
        small_frac: Annotated[float, Field(gt=0, lt=1)] = 0.1,
        max_freq: Annotated[int, Field(ge=1)] = 3,
    ) -> None:
        self.small_frac = small_frac
        self.max_freq = max_freq
        self.small: OrderedDict[Any, float] = OrderedDict()  # key -> bytes, oldest first
        self.main: OrderedDict[Any, float] = OrderedDict()
        self.ghost: OrderedDict[Any, None] = OrderedDict()
        self.freq: dict[Any, int] = {}
        self.small_bytes = 0.0

    def inserted(self, block: Block) -> None:
        key = block.key
        self.freq[key] = 0
        if key in self.ghost:
            del self.ghost[key]
            self.main[key] = block.nbytes
        else:
            self.small[key] = block.nbytes
            self.small_bytes += block.nbytes

    def hit(self, block: Block) -> None:
        key = block.key
        self.freq[key] = min(self.freq.get(key, 0) + 1, self.max_freq)

    def removed(self, key: Any, reason: str) -> None:
        # victim() already took an evicted block out of its queue; a deleted or expired one
        # is still in one (and is not remembered in the ghost list)
        self.freq.pop(key, None)
        size = self.small.pop(key, None)
        if size is not None:
            self.small_bytes -= size
        self.main.pop(key, None)

    def victim(self, tier: TierView) -> Any:
        while True:
            if self.small and (
                self.small_bytes >= self.small_frac * tier.capacity or not self.main
            ):
                key, size = self.small.popitem(last=False)
                self.small_bytes -= size
                if self.freq.get(key, 0) > 0:  # used while small: promoted
                    self.freq[key] = 0
                    self.main[key] = size
                    continue
                self.ghost[key] = None
                if len(self.ghost) > max(len(self.small) + len(self.main), 1):
                    self.ghost.popitem(last=False)
                return key
            key, size = self.main.popitem(last=False)
            f = self.freq.get(key, 0)
            if f > 0:  # another turn
                self.freq[key] = f - 1
                self.main[key] = size
                continue
            return key
