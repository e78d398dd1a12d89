"""The tiers local to one engine: GPU HBM -> host DRAM -> NVMe, with demotion on eviction.

All PCP ranks of a node hold their shards of a block in lockstep, so one index per node
stands for all of them. The hierarchy is non-exclusive: a restore copies a block up and
leaves the lower copy in place; a block evicted from a tier is demoted to the next enabled
tier (refreshing it if already there) and, from the last tier, dropped. Capacities are
never exceeded: each tier is a :class:`~kvsim.cache.eviction.BlockStore`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from kvsim.cache.eviction import BlockStore, Key, SecondHit

# tier codes, fastest first (Final: compiled code inlines them)
GPU: Final = 0
HOST: Final = 1
NVME: Final = 2
REMOTE: Final = 3


class LocalCache:
    """GPU, host and NVMe block stores of one engine (host/NVMe may be absent)."""

    __slots__ = ("admission", "demotions", "gpu", "host", "nvme", "read_bytes", "tiers")

    def __init__(
        self,
        gpu: BlockStore,
        host: BlockStore | None,
        nvme: BlockStore | None,
        admission: Sequence[SecondHit | None] = (None, None, None),
    ) -> None:
        self.gpu = gpu
        self.host = host
        self.nvme = nvme
        self.tiers: tuple[BlockStore | None, ...] = (gpu, host, nvme)
        # per tier: None (admit all) or a second-hit filter
        self.admission: tuple[SecondHit | None, ...] = tuple(admission)
        self.demotions = [0, 0, 0]  # blocks written into each tier by demotion
        self.read_bytes = [0.0, 0.0, 0.0]  # bytes restored from each tier

    def prefix_blocks(self, blocks: Sequence[Key], at_least: int = 0) -> int:
        """Blocks of the longest prefix held in some local tier (for cache-aware routing);
        -1 when that prefix is shorter than ``at_least`` (known from one lookup: the prefix
        reaches ``at_least`` only if block ``at_least - 1`` is held)."""
        gpu = self.gpu.blocks
        host = self.host.blocks if self.host is not None else ()
        nvme = self.nvme.blocks if self.nvme is not None else ()
        if at_least > 0:
            if at_least > len(blocks):
                return -1
            b = blocks[at_least - 1]
            if not (b in gpu or b in host or b in nvme):
                return -1
        k = 0
        for b in blocks:
            if b in gpu or b in host or b in nvme:
                k += 1
            else:
                break
        return k if k >= at_least else -1

    def admit(self, blocks: Sequence[Key], sizes: Sequence[float]) -> None:
        """Make a prompt's blocks resident in GPU HBM (refreshing them), demoting what falls
        out of each tier into the next (a second-hit GPU tier keeps only blocks it has seen
        before; the ones it refuses go down like evicted ones)."""
        gate = self.admission[GPU]
        if gate is None:
            self._demote(*self.gpu.insert_many(blocks, sizes))
            return
        keys, ks, refused, rs = gate.filter(blocks, sizes, self.gpu.blocks)
        out_k, out_s = self.gpu.insert_many(keys, ks)
        self._demote([*refused, *out_k], [*rs, *out_s])

    def reserve(self, nbytes: float) -> None:
        """Hold GPU HBM for blocks on their way in (a restore in flight); what it evicts is
        demoted like any eviction."""
        self._demote(*self.gpu.reserve(nbytes))

    def _demote(self, keys: Sequence[Key], sizes: Sequence[float]) -> None:
        """Blocks evicted from a tier go to the next one; what a second-hit tier refuses
        falls through with what it evicts."""
        level = HOST
        while keys and level <= NVME:
            store = self.tiers[level]
            if store is not None:
                gate = self.admission[level]
                refused_k: list[Key] = []
                refused_s: list[float] = []
                if gate is not None:
                    keys, sizes, refused_k, refused_s = gate.filter(keys, sizes, store.blocks)
                self.demotions[level] += len(keys)
                out_k, out_s = store.insert_many(keys, sizes)
                keys, sizes = [*refused_k, *out_k], [*refused_s, *out_s]
            level += 1
