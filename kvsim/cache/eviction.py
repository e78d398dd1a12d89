"""Block stores with a pluggable eviction policy: the capacity bookkeeping of every tier.

A store maps block keys to their size in bytes and never holds more than its capacity:
:meth:`BlockStore.insert` makes room first and returns what it pushed out (or the new
block itself when it can never fit), so the caller can demote it to the next tier. The
policies differ only in which block goes first. ``POLICIES`` is the one place that maps
scenario names to classes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

Key = Hashable
Evicted = list[tuple[Key, float]]


class BlockStore:
    """Capacity-bounded map of block key -> bytes, evicting oldest first.

    ``refresh_on_hit`` says whether a use moves a block to the back of the line (LRU) or
    not (FIFO). Invariant: ``used`` (the sum of held sizes) never exceeds ``capacity``.
    """

    __slots__ = ("blocks", "capacity", "evictions", "peak", "used")
    refresh_on_hit = True

    def __init__(self, capacity: float) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = float(capacity)
        self.used = 0.0
        self.peak = 0.0
        self.evictions = 0
        # key -> bytes, oldest first; read-only outside this class
        self.blocks: OrderedDict[Key, float] = OrderedDict()

    def __contains__(self, key: Key) -> bool:
        return key in self.blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def keys(self) -> list[Key]:
        return list(self.blocks)

    def touch(self, key: Key) -> None:
        """Record a use of a block that is present (a hit)."""
        if self.refresh_on_hit:
            self.blocks.move_to_end(key)

    def insert(self, key: Key, nbytes: float) -> Evicted:
        """Store a block (or refresh it) and return the blocks evicted to make room."""
        return self.insert_many((key,), (nbytes,))

    def insert_many(self, keys: Sequence[Key], sizes: Sequence[float]) -> Evicted:
        """Insert blocks in order (refreshing present ones); return everything evicted on
        the way, including a block that can never fit. A block inserted early in the call
        may be evicted by a later one when the store is small."""
        blocks = self.blocks
        refresh = self.refresh_on_hit
        cap = self.capacity
        used = self.used
        evicted: Evicted = []
        for key, nbytes in zip(keys, sizes, strict=True):
            if key in blocks:
                if refresh:
                    blocks.move_to_end(key)
                continue
            if nbytes > cap:
                evicted.append((key, nbytes))
                continue
            used += nbytes
            while used > cap:
                victim, size = blocks.popitem(last=False)
                used -= size
                evicted.append((victim, size))
                self.evictions += 1
            blocks[key] = nbytes
            if used > self.peak:
                self.peak = used
        self.used = used
        return evicted

    def remove(self, key: Key) -> bool:
        """Drop a block if present; True when it was there."""
        size = self.blocks.pop(key, None)
        if size is None:
            return False
        self.used -= size
        return True

    def clear(self) -> None:
        self.blocks.clear()
        self.used = 0.0


class LRU(BlockStore):
    """Least recently used goes first."""

    __slots__ = ()
    refresh_on_hit = True


class FIFO(BlockStore):
    """Oldest insertion goes first; hits do not refresh a block."""

    __slots__ = ()
    refresh_on_hit = False


POLICIES: dict[str, type[BlockStore]] = {"lru": LRU, "fifo": FIFO}


def make_store(policy: str, capacity: float) -> BlockStore:
    """A store of the named policy; an unknown name lists the choices."""
    try:
        cls = POLICIES[policy]
    except KeyError:
        raise ValueError(
            f"unknown eviction policy {policy!r}; choose one of {sorted(POLICIES)}"
        ) from None
    return cls(capacity)
