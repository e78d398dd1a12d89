"""The tier kinds as objects: each tier's place in the order, its name, T0 and codec.

What this module owns: one :class:`Tier` class per tier kind (gpu, host, nvme, remote,
peer), each reading its own part of the scenario (its T0, the engine's part of it, its
codec: stored bytes / raw bytes, seconds per raw byte to encode and decode, on the GPU or
not), and :func:`make_tiers`, the run's tiers in their order (indexed by the tier codes of
:mod:`kvsim.cache.local`). The run constants (:mod:`kvsim.sim.constants`) hold them; the
engine, restores, prefetches and summaries read a tier's figures from its object.

Adding a tier kind: a code in :mod:`kvsim.cache.local`, a class here reading its profile
(docs/extending.md walks through a CXL memory tier), and its transfer in the restore.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvsim.cache.local import GPU, HOST, NVME, PEER, REMOTE
from kvsim.cache.remote import RemoteStore
from kvsim.config.schema import Codec, Scenario
from kvsim.sim.node import Node


class Tier:
    """One tier of the hierarchy: its code (place in the order), name, T0 and codec."""

    def __init__(
        self,
        code: int,
        name: str,
        t0: float = 0.0,
        t0_engine: float = 0.0,
        codec: Codec | None = None,
    ) -> None:
        self.code = code  # its place in the order (kvsim.cache.local: GPU, HOST, ...)
        self.name = name
        self.t0 = t0  # seconds before its first byte moves (lookup, connection)
        self.t0_engine = t0_engine  # the engine's part of T0 (an asynchronous restore's)
        # its codec: stored / raw bytes, seconds per raw byte to encode (writes into the
        # tier) and decode (restores), and whether the GPU does it (else the host CPU)
        self.ratio = codec.ratio if codec is not None else 1.0
        self.encode_s = 1.0 / codec.encode_bandwidth if codec is not None else 0.0
        self.decode_s = 1.0 / codec.decode_bandwidth if codec is not None else 0.0
        self.codec_on_gpu = codec is not None and codec.on == "gpu"

    @classmethod
    def of(cls, sc: Scenario) -> Tier:
        """The tier as the scenario configures it."""
        raise NotImplementedError

    def summary(self, engines: Sequence[Node], remote: RemoteStore | None) -> dict[str, Any] | None:
        """The tier's part of the run's summary (``summary["tiers"][name]``), or None when
        the run has no such tier."""
        return None

    def counts(self, e: Node) -> dict[str, int]:
        """One engine's lookups of the tier: its index, hits and misses."""
        return {"engine": e.index, "hits": e.hits[self.code], "misses": e.misses[self.code]}

    def lookups(self, engines: Sequence[Node]) -> dict[str, int]:
        """The tier's lookups over all engines: blocks it held (hits) and did not (misses)."""
        code = self.code
        return {
            "hits": sum(e.hits[code] for e in engines),
            "misses": sum(e.misses[code] for e in engines),
        }


class LocalTier(Tier):
    """A tier each engine holds as a block store of its own (gpu, host, nvme)."""

    def summary(self, engines: Sequence[Node], remote: RemoteStore | None) -> dict[str, Any] | None:
        level = self.code
        stores = [s for e in engines if (s := e.local.tiers[level]) is not None]
        if not stores:
            return None
        return {
            "capacity_bytes": sum((s.capacity for s in stores), 0.0),
            "used_bytes": sum((s.used for s in stores), 0.0),
            "peak_bytes_max_engine": max(s.peak for s in stores),
            "blocks": sum(len(s) for s in stores),
            "evictions": sum(s.evictions for s in stores),
            "demotions_in": sum(e.local.demotions[level] for e in engines),
            "written_through_in": sum(e.local.through[level] for e in engines),
            "prefetched_bytes_in": sum((e.local.fetched[level] for e in engines), 0.0),
            "promoted_in": sum(e.local.promoted[level] for e in engines),
            "promoted_bytes_in": sum((e.local.promoted_bytes[level] for e in engines), 0.0),
            "dropped_on_backlog": sum(
                e.local.writes.dropped[level] if e.local.writes is not None else 0 for e in engines
            ),
            "dropped_on_backlog_bytes": sum((e.local.dropped_bytes[level] for e in engines), 0.0),
            "read_bytes": sum((e.local.read_bytes[level] for e in engines), 0.0),
            "write_bytes": sum((s.written for s in stores), 0.0),
            **self.lookups(engines),
            "engines": [
                {
                    **self.counts(e),
                    "evictions": s.evictions,
                    "read_bytes": e.local.read_bytes[level],
                    "write_bytes": s.written,
                }
                for e in engines
                if (s := e.local.tiers[level]) is not None
            ],
        }


class GpuTier(LocalTier):
    """GPU HBM: the prefix cache itself (no T0, no codec)."""

    @classmethod
    def of(cls, sc: Scenario) -> Tier:
        return cls(GPU, "gpu")


class HostTier(LocalTier):
    """The engine's host DRAM, over its host-to-GPU link."""

    @classmethod
    def of(cls, sc: Scenario) -> Tier:
        h = sc.tiers.host
        return cls(HOST, "host", h.t0, h.t0_engine, h.codec)


class NvmeTier(LocalTier):
    """The engine's NVMe drives (through a host bounce buffer, or GPUDirect Storage)."""

    @classmethod
    def of(cls, sc: Scenario) -> Tier:
        v = sc.tiers.nvme
        return cls(NVME, "nvme", v.t0, v.t0_engine, v.codec)


class RemoteTier(Tier):
    """The remote store: its servers, over the engine's NIC."""

    @classmethod
    def of(cls, sc: Scenario) -> Tier:
        rc = sc.remote
        return cls(REMOTE, "remote", rc.t0, rc.t0_engine, rc.codec)

    def summary(self, engines: Sequence[Node], remote: RemoteStore | None) -> dict[str, Any] | None:
        if remote is None:
            return None
        r = remote
        return {
            "servers": r.servers,
            "shards": r.shards,
            **r.stats(),
            "read_bytes": r.read_bytes,
            "puts": r.puts,
            "get_ops": r.get_ops,  # chunk operations (requests to an object store)
            "put_ops": r.put_ops,
            "put_bytes": r.put_bytes,
            "write_bytes": r.landed_bytes,
            "puts_dropped_shards": r.puts_dropped,
            "server_bytes": r.server_bytes(),
            "server_busy_s": r.server_busy(),
            **self.lookups(engines),
            "engines": [
                {
                    **self.counts(e),
                    "read_bytes": e.read_bytes[REMOTE],
                    "write_bytes": e.landed_bytes,
                }
                for e in engines
            ],
        }


class PeerTier(Tier):
    """Other engines' host DRAM, over both NICs; blocks as their host tier stores them."""

    def __init__(self, enabled: bool, t0: float, t0_engine: float, codec: Codec | None) -> None:
        super().__init__(PEER, "peer", t0, t0_engine, codec)
        self.enabled = enabled

    @classmethod
    def of(cls, sc: Scenario) -> Tier:
        p = sc.tiers.peer
        return cls(p.enabled, p.t0, p.t0_engine, sc.tiers.host.codec)

    def summary(self, engines: Sequence[Node], remote: RemoteStore | None) -> dict[str, Any] | None:
        if not self.enabled:  # other engines' host tiers: no store of its own
            return None
        return {
            "read_bytes": sum((e.read_bytes[PEER] for e in engines), 0.0),
            "served_bytes": sum((e.served_bytes for e in engines), 0.0),
            "write_bytes": 0.0,
            **self.lookups(engines),
            "engines": [
                {
                    **self.counts(e),
                    "read_bytes": e.read_bytes[PEER],
                    "served_bytes": e.served_bytes,
                }
                for e in engines
            ],
        }


KINDS: tuple[type[Tier], ...] = (GpuTier, HostTier, NvmeTier, RemoteTier, PeerTier)


def make_tiers(sc: Scenario, kinds: Sequence[type[Tier]] = KINDS) -> tuple[Tier, ...]:
    """The run's tiers, in code order (gpu, host, nvme, remote, peer): one of each kind,
    each as the scenario configures it; a kind's tier must take its place in the order."""
    tiers = tuple(kind.of(sc) for kind in kinds)
    for i, tier in enumerate(tiers):
        if tier.code != i:
            raise ValueError(f"tier {tier.name!r} has code {tier.code}, in place {i}")
    return tiers
