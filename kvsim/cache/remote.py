"""The remote KV store shared by all engines: servers, their indexes, and sharding.

``sharding: none`` stores each block whole under one key, on server ``block % servers``.
``sharding: per_rank`` stores each PCP rank's 1/P shard under its own key on that rank's
server (``(rank + P*block) % servers``: with one server per rank, rank r always uses server
r) with no coordination between ranks, so ranks' indexes can disagree; a block is usable
only when every rank still holds its shard, i.e. the usable hit is the minimum over ranks
of each rank's own longest prefix.

Puts are asynchronous: keys are "pending" while their transfer runs and enter the index
(evicting by the server's policy) when it lands.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsim.cache.eviction import BlockStore
from kvsim.kernel.fabric import Link


class RemoteStore:
    """Index and links of the remote servers."""

    def __init__(
        self, stores: Sequence[BlockStore], links: Sequence[Link], *, per_rank: bool, ranks: int
    ) -> None:
        if len(stores) != len(links) or not stores:
            raise ValueError("one store and one link per server are required")
        self.stores = list(stores)
        self.links = list(links)
        self.servers = len(stores)
        self.shards = ranks if per_rank else 1
        self._index = [s.blocks for s in self.stores]
        self.pending: list[set[int]] = [set() for _ in self.stores]  # keys being put, per server
        self.puts = 0  # put transfers started
        self.put_bytes = 0.0
        self.puts_dropped = 0  # block shards not stored because a put queue was full

    def place(self, block: int, shard: int) -> tuple[int, int]:
        """(server, key) of one shard of a block."""
        if self.shards == 1:
            return block % self.servers, block
        return (shard + self.shards * block) % self.servers, block * self.shards + shard

    def has(self, block: int) -> bool:
        """True when every shard of the block is in its server's index."""
        if self.shards == 1:
            return block in self._index[block % self.servers]
        index = self._index
        for shard in range(self.shards):
            server, key = self.place(block, shard)
            if key not in index[server]:
                return False
        return True

    def shard_prefixes(self, blocks: Sequence[int]) -> list[int]:
        """Each shard's own longest prefix (in blocks) of ``blocks`` in the remote index."""
        out = []
        for shard in range(self.shards):
            k = 0
            for b in blocks:
                server, key = self.place(b, shard)
                if key not in self._index[server]:
                    break
                k += 1
            out.append(k)
        return out

    def touch(self, block: int) -> None:
        """Record a read of every shard of a block."""
        for shard in range(self.shards):
            server, key = self.place(block, shard)
            self.stores[server].touch(key)

    def missing(
        self, blocks: Sequence[int], sizes: Sequence[float]
    ) -> dict[int, tuple[list[int], list[float]]]:
        """Shards of ``blocks`` (of ``sizes`` bytes whole) neither stored nor being put,
        grouped by server as (keys, shard sizes)."""
        index, pending = self._index, self.pending
        groups: dict[int, tuple[list[int], list[float]]] = {}
        if self.shards == 1:
            n = self.servers
            for b, size in zip(blocks, sizes, strict=True):
                server = b % n
                if b not in index[server] and b not in pending[server]:
                    keys, out = groups.setdefault(server, ([], []))
                    keys.append(b)
                    out.append(size)
            return groups
        for b, size in zip(blocks, sizes, strict=True):
            part = size / self.shards
            for shard in range(self.shards):
                server, key = self.place(b, shard)
                if key not in index[server] and key not in pending[server]:
                    keys, out = groups.setdefault(server, ([], []))
                    keys.append(key)
                    out.append(part)
        return groups

    def land(self, server: int, keys: list[int], sizes: list[float]) -> None:
        """A put to ``server`` finished: index its keys (evicting as the policy says)."""
        self.pending[server].difference_update(keys)
        self.stores[server].insert_many(keys, sizes)
