"""The remote store's own SSDs, one below each server's DRAM (Mooncake Store's SSD offload).

What this module owns: :class:`StoreSsd`, every server's SSD: its block store (its
eviction order, ``remote.ssd.eviction``), its read link on the fabric (one per server,
shared by every GET that reads that server's SSD), its write link (a
:class:`~kvsim.kernel.pipe.Pipe`: writes served in order), when each write still in
flight lands, and its counters. The remote store (:mod:`kvsim.cache.remote`) hands it
what a server's DRAM evicts and asks it whether a shard its DRAM lacks can be read here;
the GET (:mod:`kvsim.sim.get`) reads a server's SSD before the network moves those bytes.

Demotion, as Mooncake's ``--offload_on_evict``: a shard a server's DRAM evicts is written
to that server's SSD. It takes its room there at once (evicting by the SSD's policy; what
the SSD evicts is gone) and is readable once its write lands, as kvsim's local tiers'
writes are (docs/data-path.md): until then it is a miss. A shard the SSD holds already
is not written again. While the remote store is mirrored (one server per rank, in
lockstep), server 0's store and landing times stand for every server's, and every
server's write link takes the same writes (so each one's busy time is its own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from kvsim.cache.eviction import BlockStore, Key
from kvsim.kernel.fabric import Link
from kvsim.kernel.pipe import Pipe


class StoreSsd:
    """The servers' SSDs below their DRAM (see the module docstring)."""

    __slots__ = (
        "clock",
        "demoted",
        "demoted_bytes",
        "group",
        "landing",
        "latency",
        "links",
        "pipes",
        "promote",
        "promoted",
        "read_bytes",
        "reads",
        "stores",
    )

    def __init__(
        self,
        stores: Sequence[BlockStore],
        links: Sequence[Link],
        pipes: Sequence[Pipe],
        clock: Callable[[], float],
        *,
        latency: float = 0.0,
        promote: bool = False,
        group: Link | None = None,
    ) -> None:
        """``group``: every server's read link as one (their bandwidths summed), used
        while the remote store is mirrored, as the store's own group link."""
        if not stores or len(stores) != len(links) or len(stores) != len(pipes):
            raise ValueError("one store, one read link and one write link per server")
        if latency < 0:
            raise ValueError(f"SSD latency must be >= 0, got {latency}")
        self.stores = list(stores)
        self.links = list(links)
        self.pipes = list(pipes)
        self.group = group
        self.clock = clock
        self.latency = latency  # per GET that reads a server's SSD, before its bytes move
        self.promote = promote  # a shard read is stored back into its server's DRAM
        # per server: key -> when its write lands, for writes that may still be in flight
        self.landing: list[dict[Key, float]] = [{} for _ in self.stores]
        self.demoted = 0  # shards written down from DRAM (one per server while mirrored)
        self.demoted_bytes = 0.0
        self.reads = 0  # shards GETs read off the SSDs (every server's)
        self.read_bytes = 0.0
        self.promoted = 0  # shards stored back into DRAM after a read (every server's)

    def holds(self, server: int, key: Key) -> bool:
        """The server's SSD holds the shard (its write may still be in flight)."""
        return key in self.stores[server].blocks

    def readable(self, server: int, key: Key) -> bool:
        """The server's SSD holds the shard and its write has landed."""
        if key not in self.stores[server].blocks:
            return False
        land = self.landing[server]
        if not land:
            return True
        now = self.clock()
        if self.pipes[server].free_at <= now:  # every write has landed: forget them
            land.clear()
            return True
        at = land.get(key)
        return at is None or at <= now

    def demote(
        self,
        server: int,
        keys: Sequence[Key],
        sizes: Sequence[float],
        mirrored: bool = False,
        at_once: bool = False,
    ) -> None:
        """Write shards the server's DRAM evicted (``at_once``: a warm start, landed at
        once) to its SSD; those it holds already are not written again."""
        store = self.stores[server]
        held = store.blocks
        new_k: list[Key] = []
        new_s: list[float] = []
        for key, size in zip(keys, sizes):
            if key not in held:
                new_k.append(key)
                new_s.append(size)
        if not new_k:
            return
        store.insert_many(new_k, new_s)  # what the SSD evicts to make room is gone
        copies = len(self.stores) if mirrored else 1
        pipes = self.pipes if mirrored else [self.pipes[server]]
        land = self.landing[server]
        now = 0.0 if at_once else self.clock()
        for key, size in zip(new_k, new_s):
            if key not in held:  # it never fit, or a later shard of the call evicted it
                continue
            self.demoted += copies
            self.demoted_bytes += size * copies
            if at_once:
                continue
            at = now
            for pipe in pipes:  # in order: each shard lands when the writes before it have
                at = pipe.send(now, size)
            land[key] = at

    def parts(self, bytes_by_server: dict[int, float], mirrored: bool) -> list[tuple[Link, float]]:
        """(read link, bytes) of a lockstep read of the servers' SSDs: the group link
        while mirrored (every server reads the same bytes), else each server's own."""
        if mirrored and self.group is not None and bytes_by_server:
            return [(self.group, bytes_by_server[0] * len(self.stores))]
        return [(self.links[s], b) for s, b in sorted(bytes_by_server.items())]

    def lose(self, server: int) -> None:
        """The server is lost: its SSD's index goes with it (a replaced server)."""
        self.stores[server].clear()
        self.landing[server].clear()

    def unmirror(self) -> None:
        """Give every server its own copy of server 0's index and landing times (keys
        shifted by its rank): the servers may diverge from here on."""
        first = self.stores[0]
        for r in range(1, len(self.stores)):
            self.stores[r].copy_shifted(first, r)
            self.landing[r] = {cast(int, k) + r: t for k, t in self.landing[0].items()}

    def stats(self, mirrored: bool) -> dict[str, float]:
        """Totals over all servers (a mirrored index counts once per server)."""
        copies = len(self.stores) if mirrored else 1
        stores = self.stores[:1] if mirrored else self.stores
        return {
            "capacity_bytes": sum((s.capacity for s in self.stores), 0.0),
            "used_bytes": copies * sum((s.used for s in stores), 0.0),
            "blocks": copies * sum(len(s) for s in stores),
            "evictions": copies * sum(s.evictions for s in stores),
            "demotions_in": self.demoted,
            "write_bytes": self.demoted_bytes,
            "reads": self.reads,
            "read_bytes": self.read_bytes,
            "promoted": self.promoted,
        }
