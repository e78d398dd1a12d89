"""The remote KV store shared by all engines: servers, their indexes, and sharding.

Keys and placement: shard ``r`` of block ``b`` has key ``b*S + r`` (S = shards: 1 when
unsharded, the PCP degree when per rank) and lives on server ``key % servers``. Unsharded,
a block is one key on server ``b % servers``; per rank with one server per rank, rank r
always uses server r. Ranks do not coordinate, so their indexes can disagree; a block is
usable only when every rank still holds its shard, i.e. the usable hit is the minimum over
ranks of each rank's own longest prefix.

Puts are asynchronous: keys are "pending" while their transfer runs and enter the index
(evicting by the server's policy) when it lands.

Mirroring. With one server per rank, and ranks that read and write in lockstep, every
server sees the same keys (shifted by its rank) in the same order, so all the indexes are
the same. While that holds the store keeps server 0's index only and applies each
operation once (8x less work at PCP8); the first event that treats one server differently
(a fault) copies that index to every server and the store carries on per server. The
fabric does the same with bandwidth: while mirrored, transfers go over one ``group`` link
with the servers' combined bandwidth, which is exact because every lockstep transfer puts
the same bytes on every server.

The servers' own SSDs (``remote.ssd``, :mod:`kvsim.cache.store_ssd`): what a server's
DRAM evicts is demoted to its SSD, a shard held there (its write landed) counts as held,
and :meth:`RemoteStore.split` tells a GET which shards each server reads off its SSD.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from kvsim.cache.eviction import BlockStore, Entry, Key
from kvsim.cache.store_ssd import StoreSsd
from kvsim.kernel.fabric import Link

# the SSD index of a store without SSDs (never changed)
_NO_INDEX: dict[Key, Entry] = {}


class Batch:
    """Shards to put: keys and bytes per server. A mirrored batch lists server 0's keys,
    which stand for every server's (key + rank on server rank)."""

    __slots__ = ("_total", "keys", "mirrored", "on_land", "servers", "sizes", "skip")

    def __init__(
        self,
        keys: dict[int, list[Key]],
        sizes: dict[int, list[float]],
        mirrored: bool,
        servers: int,
    ) -> None:
        self.keys = keys
        self.sizes = sizes
        self.mirrored = mirrored
        self.servers = servers
        self.skip: Callable[[Key], bool] | None = None  # keys not to index when it lands
        self.on_land: list[Callable[[], None]] = []  # called when settled (landed or not)
        # float sums start at 0.0 here and below: the compiled core mistypes the
        # ``float | int`` that sum() returns from an int start when it is multiplied
        if mirrored:
            self._total = sum(sizes[0], 0.0) * servers if sizes else 0.0
        else:
            self._total = sum((sum(v, 0.0) for v in sizes.values()), 0.0)

    def __bool__(self) -> bool:
        return bool(self.keys)

    def bytes_by_server(self) -> dict[int, float]:
        if not self.keys:
            return {}
        if self.mirrored:
            return dict.fromkeys(range(self.servers), sum(self.sizes[0], 0.0))
        return {s: sum(v, 0.0) for s, v in self.sizes.items()}

    def total_bytes(self) -> float:
        """Bytes of the whole batch, all servers."""
        return self._total

    def count(self) -> int:
        """Shards in the batch."""
        n = sum(len(v) for v in self.keys.values())
        return n * self.servers if self.mirrored else n


class RemoteStore:
    """Index and links of the remote servers."""

    def __init__(
        self,
        stores: Sequence[BlockStore],
        links: Sequence[Link],
        *,
        per_rank: bool,
        ranks: int,
        group: Link | None = None,
        mirror: bool = True,
        ssd: StoreSsd | None = None,
    ) -> None:
        """``mirror``: keep one index while the servers see the same keys (see the
        module docstring); off for stores whose eviction keeps state of its own.
        ``ssd``: the servers' own SSDs below their DRAM (None: none)."""
        if len(stores) != len(links) or not stores:
            raise ValueError("one store and one link per server are required")
        self.stores = list(stores)
        self.links = list(links)
        self.servers = len(stores)
        self.shards = ranks if per_rank else 1
        self.mirrored = mirror and per_rank and ranks == self.servers and ranks > 1
        self.group = group if self.mirrored else None  # all servers as one link, mirrored
        self.pending: list[set[Key]] = [set() for _ in self.stores]  # keys being put
        self.down: set[int] = set()  # servers that are lost now
        self.read_bytes = 0.0  # bytes GETs moved
        self.puts = 0  # put transfers started
        self.get_ops = 0  # operations (chunk requests, shards of chunks) GETs made
        self.put_ops = 0  # operations puts made (one per chunk on each server it writes)
        self.put_bytes = 0.0
        self.landed_bytes = 0.0  # bytes puts stored (each server's shards, all servers)
        self.puts_dropped = 0  # block shards not stored because a put queue was full
        self.ssd = ssd

    # ---- placement and lookup -------------------------------------------------------

    def place(self, block: int, shard: int) -> tuple[int, int]:
        """(server, key) of one shard of a block."""
        key = block * self.shards + shard
        return key % self.servers, key

    def __contains__(self, block: object) -> bool:
        return self.has(block)

    def has(self, block: Key) -> bool:
        """True when every shard of the block is in its server's index (or, with the
        servers' SSDs, readable from its server's SSD)."""
        if self.ssd is not None:
            return self._has_either(block, self.ssd)
        stores, n, shards = self.stores, self.servers, self.shards
        b = cast(int, block)
        if self.down:
            base = b * shards
            if any(key % n in self.down for key in range(base, base + shards)):
                return False
        if shards == 1:
            return block in stores[b % n].blocks
        base = b * shards
        if self.mirrored:
            return base in stores[0].blocks
        return all(key in stores[key % n].blocks for key in range(base, base + shards))

    def _has_either(self, block: Key, ssd: StoreSsd) -> bool:
        """``has`` with the servers' SSDs: each shard in its server's DRAM or SSD."""
        stores, n, shards = self.stores, self.servers, self.shards
        base = cast(int, block) * shards
        if self.down and any(key % n in self.down for key in range(base, base + shards)):
            return False
        if self.mirrored:
            return base in stores[0].blocks or ssd.readable(0, base)
        for key in range(base, base + shards):
            server = key % n
            if key not in stores[server].blocks and not ssd.readable(server, key):
                return False
        return True

    def shard_prefixes(self, blocks: Sequence[Key]) -> list[int]:
        """Each shard's own longest prefix (in blocks) of ``blocks`` in the remote index."""
        out = []
        ssd = self.ssd
        for shard in range(self.shards):
            k = 0
            for b in blocks:
                server, key = self.place(cast(int, b), shard)
                if self.mirrored:
                    server, key = 0, key - shard
                if key not in self.stores[server].blocks and (
                    ssd is None or not ssd.readable(server, key)
                ):
                    break
                k += 1
            out.append(k)
        return out

    def touch(self, blocks: Sequence[Key]) -> None:
        """Record a read of every shard of these blocks (where it is read: its server's
        DRAM, or else its SSD)."""
        stores, n, shards = self.stores, self.servers, self.shards
        ssd = self.ssd
        if ssd is not None:
            for b in blocks:
                base = cast(int, b) * shards
                for key in range(base, base + (1 if self.mirrored else shards)):
                    server = 0 if self.mirrored else key % n
                    held = stores[server] if key in stores[server].blocks else ssd.stores[server]
                    held.touch((key,))
            return
        if self.mirrored:
            stores[0].touch([cast(int, b) * shards for b in blocks])
            return
        for b in blocks:
            base = cast(int, b) * shards
            for key in range(base, base + shards):
                stores[key % n].touch((key,))

    def tokens_by_server(self, blocks: Sequence[Key], tokens: Sequence[int]) -> dict[int, int]:
        """Tokens each server serves when every shard of ``blocks`` is read (a shard of a
        block counts the block's tokens: its bytes are tokens x KV bytes / shards)."""
        n, S = self.servers, self.shards
        if n == S:  # one server per rank: every server holds one shard of every block
            total = sum(tokens)
            return dict.fromkeys(range(n), total) if total else {}
        out: dict[int, int] = {}
        for block, tok in zip(blocks, tokens, strict=True):
            b = cast(int, block)
            for key in range(b * S, b * S + S):
                out[key % n] = out.get(key % n, 0) + tok
        return out

    def parts(self, bytes_by_server: dict[int, float]) -> list[tuple[Link, float, int]]:
        """(link, bytes, servers behind the link) of a lockstep transfer: the group link
        while mirrored, else each server's own link."""
        if self.mirrored and self.group is not None and bytes_by_server:
            b = bytes_by_server[0]
            return [(self.group, b * self.servers, self.servers)]
        return [(self.links[s], b, 1) for s, b in sorted(bytes_by_server.items())]

    def put_parts(self, batch: Batch) -> list[tuple[Link, float, int]]:
        """``parts`` of a batch's put."""
        if batch.mirrored and self.mirrored and self.group is not None:
            return [(self.group, batch.total_bytes(), self.servers)]
        return self.parts(batch.bytes_by_server())

    # ---- writes -----------------------------------------------------------------------

    def missing(self, blocks: Sequence[Key], sizes: Sequence[float]) -> Batch:
        """Shards of ``blocks`` (of ``sizes`` bytes whole) neither stored nor being put."""
        if len(blocks) != len(sizes):
            raise ValueError(f"{len(blocks)} blocks but {len(sizes)} sizes")
        stores, pending, n, S = self.stores, self.pending, self.servers, self.shards
        keys: dict[int, list[Key]] = {}
        out: dict[int, list[float]] = {}
        down = self.down
        # the servers' SSDs' indexes: a shard held there (landed or not) is not put again
        # (looked up only where there are SSDs: a dict lookup per shard costs)
        ssd = self.ssd
        on_ssd = [st.blocks for st in ssd.stores] if ssd is not None else [_NO_INDEX] * n
        has_ssd = ssd is not None
        if self.mirrored:
            index, pend, disk = stores[0].blocks, pending[0], on_ssd[0]
            ks: list[Key] = []
            ss: list[float] = []
            for b, size in zip(blocks, sizes):
                key: Key = cast(int, b) * S  # one int object, shared by pending and the index
                if key not in index and key not in pend and not (has_ssd and key in disk):
                    ks.append(key)
                    ss.append(size / S)
            if ks:
                keys[0] = ks
                out[0] = ss
            return Batch(keys, out, True, n)
        if S == 1:  # whole blocks (unsharded): a block's key is its one shard's key
            for b, size in zip(blocks, sizes):
                server = cast(int, b) % n
                if server in down:
                    continue  # a lost server takes no writes
                if (
                    b not in stores[server].blocks
                    and b not in pending[server]
                    and not (has_ssd and b in on_ssd[server])
                ):
                    got = keys.get(server)
                    if got is None:
                        keys[server] = [b]
                        out[server] = [size]
                    else:
                        got.append(b)
                        out[server].append(size)
            return Batch(keys, out, False, n)
        for b, size in zip(blocks, sizes):
            part = size / S
            base = cast(int, b) * S
            for shard_key in range(base, base + S):
                server = shard_key % n
                if server in down:
                    continue  # a lost server takes no writes
                k: Key = shard_key
                if (
                    k not in stores[server].blocks
                    and k not in pending[server]
                    and not (has_ssd and k in on_ssd[server])
                ):
                    keys.setdefault(server, []).append(k)
                    out.setdefault(server, []).append(part)
        return Batch(keys, out, False, n)

    def reserve(self, batch: Batch) -> None:
        """Mark a batch's shards as being put (no one else stages them meanwhile)."""
        for server, ks in self._expand(batch).items():
            self.pending[server].update(ks)

    def release(self, batch: Batch) -> None:
        """A batch that will not be put (dropped): its shards are no longer pending."""
        self.puts_dropped += batch.count()
        for server, ks in self._expand(batch).items():
            self.pending[server].difference_update(ks)
        for callback in batch.on_land:
            callback()

    def land(self, batch: Batch) -> None:
        """A put finished: index its shards (evicting as each server's policy says)."""
        sizes = batch.sizes
        skip = batch.skip
        copies = self.servers if self.mirrored else 1  # server 0 stands for every server
        for server, ks in self._expand(batch).items():
            self.pending[server].difference_update(ks)
            if server in self.down:
                continue
            sz = sizes[0 if batch.mirrored else server]
            if skip is not None:
                kept = [(k, z) for k, z in zip(ks, sz) if not skip(k)]
                ks, sz = [k for k, _ in kept], [z for _, z in kept]
            store = self.stores[server]
            before = store.written
            out_k, out_s = store.insert_many(ks, sz)
            self.landed_bytes += (store.written - before) * copies
            if self.ssd is not None and out_k:  # what DRAM evicts goes down to the SSD
                self.ssd.demote(server, out_k, out_s, self.mirrored)
        for callback in batch.on_land:
            callback()

    def prestore(self, blocks: Sequence[Key], size: float) -> None:
        """Put blocks of ``size`` bytes into the store at once (a warm start)."""
        batch = self.missing(blocks, [size] * len(blocks))
        for server, ks in self._expand(batch).items():
            out_k, out_s = self.stores[server].insert_many(
                ks, batch.sizes[0 if batch.mirrored else server]
            )
            if self.ssd is not None and out_k:  # landed on the SSD at once
                self.ssd.demote(server, out_k, out_s, self.mirrored, at_once=True)

    def _expand(self, batch: Batch) -> dict[int, list[Key]]:
        """Per-server keys of a batch in the store's current representation."""
        if not batch.mirrored:
            return batch.keys
        if self.mirrored:
            return {0: batch.keys[0]} if batch.keys else {}
        base = batch.keys.get(0, [])
        return {r: [cast(int, k) + r for k in base] for r in range(self.servers)}

    # ---- the servers' SSDs ------------------------------------------------------------

    def split(
        self, blocks: Sequence[Key], tokens: Sequence[int]
    ) -> tuple[dict[int, int], dict[int, int], list[tuple[int, Key]], list[bool]]:
        """Where a GET of every shard of ``blocks`` (``tokens`` each) reads each shard,
        with the servers' SSDs: (tokens each server serves from its DRAM, tokens each
        serves from its SSD, (server, key) of each shard read off an SSD, and per block
        whether any of its shards is). A shard not in its server's DRAM is read off its
        SSD. Mirrored, server 0's shards stand for every server's (as ``tokens_by_server``)."""
        n, S = self.servers, self.shards
        stores = self.stores
        dram: dict[int, int] = {}
        disk: dict[int, int] = {}
        reads: list[tuple[int, Key]] = []
        on_ssd: list[bool] = []
        if self.mirrored:
            index = stores[0].blocks
            d = s = 0
            for block, tok in zip(blocks, tokens):
                key: Key = cast(int, block) * S
                if key in index:
                    d += tok
                    on_ssd.append(False)
                else:
                    s += tok
                    reads.append((0, key))
                    on_ssd.append(True)
            if d:
                dram = dict.fromkeys(range(n), d)
            if s:
                disk = dict.fromkeys(range(n), s)
            return dram, disk, reads, on_ssd
        for block, tok in zip(blocks, tokens):
            base = cast(int, block) * S
            any_ssd = False
            for shard_key in range(base, base + S):
                server = shard_key % n
                k: Key = shard_key
                if k in stores[server].blocks:
                    dram[server] = dram.get(server, 0) + tok
                else:
                    disk[server] = disk.get(server, 0) + tok
                    reads.append((server, k))
                    any_ssd = True
            on_ssd.append(any_ssd)
        return dram, disk, reads, on_ssd

    def promote(self, reads: Sequence[tuple[int, Key]]) -> None:
        """Store shards read off the servers' SSDs back into their DRAM (Mooncake's
        promotion on a hit): each evicts by its server's policy there, and what that
        evicts goes down to the SSD; the SSD keeps its copy. Shards the SSD dropped
        meanwhile, or whose server is down, are left out."""
        ssd = self.ssd
        assert ssd is not None
        copies = self.servers if self.mirrored else 1
        by_server: dict[int, tuple[list[Key], list[float]]] = {}
        for server, key in reads:
            entry = ssd.stores[server].blocks.get(key)
            if entry is None or server in self.down or key in self.stores[server].blocks:
                continue
            got = by_server.setdefault(server, ([], []))
            got[0].append(key)
            got[1].append(entry.size)
        for server, (ks, sz) in sorted(by_server.items()):
            out_k, out_s = self.stores[server].insert_many(ks, sz)
            ssd.promoted += len(ks) * copies
            if out_k:
                ssd.demote(server, out_k, out_s, self.mirrored)

    def ssd_stores(self) -> list[tuple[int, BlockStore]]:
        """(server, SSD store) of every SSD index kept (one while mirrored; none without
        the servers' SSDs)."""
        if self.ssd is None:
            return []
        if self.mirrored:
            return [(0, self.ssd.stores[0])]
        return list(enumerate(self.ssd.stores))

    # ---- faults -----------------------------------------------------------------------

    def lose(self, server: int) -> None:
        """A server loses everything it held (it restarts empty)."""
        self.unmirror()
        self.stores[server].clear()
        self.pending[server].clear()
        if self.ssd is not None:
            self.ssd.lose(server)

    def all_stores(self) -> list[tuple[int, BlockStore]]:
        """(server, store) of every index kept (one while mirrored)."""
        if self.mirrored:
            return [(0, self.stores[0])]
        return list(enumerate(self.stores))

    def unmirror(self) -> None:
        """Give every server its own copy of the mirrored index (keys shifted by rank), so
        that servers can diverge from here on."""
        if not self.mirrored:
            return
        first = self.stores[0]
        for r, store in enumerate(self.stores):
            if r:
                store.copy_shifted(first, r)
                self.pending[r] = {cast(int, k) + r for k in self.pending[0]}
        if self.ssd is not None:
            self.ssd.unmirror()
        self.mirrored = False

    # ---- counters ---------------------------------------------------------------------

    def server_bytes(self) -> list[float]:
        """Payload each server moved (the group link's share included)."""
        extra = self.group.bytes / self.servers if self.group is not None else 0.0
        return [link.bytes + extra for link in self.links]

    def server_busy(self) -> list[float]:
        """Seconds each server spent with at least one transfer (group link time included:
        an upper bound once the servers stopped mirroring)."""
        extra = self.group.busy_time if self.group is not None else 0.0
        return [link.busy_time + extra for link in self.links]

    def stats(self) -> dict[str, float]:
        """Totals over all servers (a mirrored index counts once per server)."""
        copies = self.servers if self.mirrored else 1
        stores = self.stores[:1] if self.mirrored else self.stores
        return {
            "capacity_bytes": sum((s.capacity for s in self.stores), 0.0),
            "used_bytes": copies * sum((s.used for s in stores), 0.0),
            "blocks": copies * sum(len(s) for s in stores),
            "evictions": copies * sum(s.evictions for s in stores),
        }
