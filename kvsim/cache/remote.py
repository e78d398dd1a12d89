"""The remote KV store shared by all engines: servers, their indexes, and sharding.

Keys and placement: shard ``r`` of block ``b`` has key ``b*S + r`` (S = shards: 1 when
unsharded, the PCP degree when per rank) and lives on server ``key % servers``. Unsharded,
a block is one key on server ``b % servers``; per rank with one server per rank, rank r
always uses server r. Ranks do not coordinate, so their indexes can disagree; a block is
usable only when every rank still holds its shard, i.e. the usable hit is the minimum over
ranks of each rank's own longest prefix.

Puts are asynchronous: keys are "pending" while their transfer runs and enter the index
(evicting by the server's policy) when it lands.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsim.cache.eviction import BlockStore
from kvsim.kernel.fabric import Link

Groups = dict[int, tuple[list[int], list[float]]]  # server -> (keys, bytes of each)


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
        key = block * self.shards + shard
        return key % self.servers, key

    def has(self, block: int) -> bool:
        """True when every shard of the block is in its server's index."""
        index, n, shards = self._index, self.servers, self.shards
        if shards == 1:
            return block in index[block % n]
        base = block * shards
        return all(key in index[key % n] for key in range(base, base + shards))

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
        stores, n, base = self.stores, self.servers, block * self.shards
        for key in range(base, base + self.shards):
            stores[key % n].touch(key)

    def tokens_by_server(self, blocks: Sequence[int], tokens: Sequence[int]) -> dict[int, int]:
        """Tokens each server serves when every shard of ``blocks`` is read (a shard of a
        block counts the block's tokens: its bytes are tokens x KV bytes / shards)."""
        n, S = self.servers, self.shards
        out: dict[int, int] = {}
        if n == S:  # one server per rank: every server holds one shard of every block
            total = sum(tokens)
            return dict.fromkeys(range(n), total) if total else {}
        for b, tok in zip(blocks, tokens, strict=True):
            for key in range(b * S, b * S + S):
                out[key % n] = out.get(key % n, 0) + tok
        return out

    def missing(self, blocks: Sequence[int], sizes: Sequence[float]) -> Groups:
        """Shards of ``blocks`` (of ``sizes`` bytes whole) neither stored nor being put,
        grouped by server as (keys, shard sizes)."""
        index, pending, n, S = self._index, self.pending, self.servers, self.shards
        groups: Groups = {}
        for b, size in zip(blocks, sizes, strict=True):
            part = size / S
            for key in range(b * S, b * S + S):
                server = key % n
                if key not in index[server] and key not in pending[server]:
                    group = groups.get(server)
                    if group is None:
                        group = groups[server] = ([], [])
                    group[0].append(key)
                    group[1].append(part)
        return groups

    def land(self, server: int, keys: list[int], sizes: list[float]) -> None:
        """A put to ``server`` finished: index its keys (evicting as the policy says)."""
        self.pending[server].difference_update(keys)
        self.stores[server].insert_many(keys, sizes)
