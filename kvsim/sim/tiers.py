"""The tier kinds as objects: each tier's place, its store, its links, T0, codec and summary.

What this module owns: one :class:`Tier` class per tier kind (gpu, host, nvme, remote,
peer) and :func:`make_tiers`, the run's tiers (index = tier code, as the per-tier lists
of jobs, engines and the records are indexed). A tier reads its own part of the scenario
(its T0, the engine's part of it, its codec: stored bytes / raw bytes, seconds per raw
byte to encode and decode, on the GPU or not) and says:

- where it is looked up (``order``: gpu 0, host 1, nvme 2, peer 3, remote 4);
- for a tier each engine holds (:class:`LocalTier`: gpu, host, nvme, and a user's kinds),
  how an engine builds it: its block store and admission filter, its own read link and
  write link, its write policy and write queue; blocks demote down the local tiers in
  ``order``;
- the links a restore's bytes from it cross into HBM (:meth:`Tier.route`) and, for a tier
  read as one plain transfer (``direct``), into host memory for a prefetch
  (:meth:`Tier.fetch_route`);
- its entry of the run's summary (:meth:`Tier.summary`).

The run constants (:mod:`kvsim.sim.constants`) hold the tiers, and their figures as lists
by code for the hot loops; the simulation builds each engine's stores and links by asking
the local tiers; the lookup, restores, prefetches, accounting, records and summaries loop
over the tiers. The remote store's GET and the peer reads are mechanisms of their own
(kvsim.sim.restore); every other tier is ``direct``.

Adding a tier kind: a :class:`LocalTier` subclass with its profile and its place in the
order, given to the simulation after the five built-in kinds (docs/extending.md walks
through a CXL memory tier between host DRAM and NVMe). This module is left interpreted in
the compiled core (pyproject's ``[tool.kvsim]``) so that such a class can subclass these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from kvsim.cache.eviction import BlockStore, Gate
from kvsim.cache.local import GPU, HOST, NVME, PEER, REMOTE
from kvsim.cache.remote import RemoteStore
from kvsim.config.schema import Codec, PolicyRef, Scenario
from kvsim.kernel.fabric import Fabric, Link
from kvsim.kernel.pipe import Pipe
from kvsim.sim.node import Links, Node


class Policies(Protocol):
    """What a tier asks of the run's policies (kvsim.sim.hooks.Hooks): a block store
    with the named eviction policy, and an admission filter."""

    def store(self, ref: PolicyRef, capacity: float, tier: str, shards: int = 1) -> BlockStore: ...

    def gate(
        self,
        ref: PolicyRef,
        capacity: float,
        tier: str,
        store: BlockStore | None = None,
        shards: int = 1,
    ) -> Gate | None: ...


class Tier:
    """One tier of the hierarchy (see the module docstring)."""

    #: its place in the lookup order (and, for local tiers, in the demotion chain)
    order = 0.0
    #: each engine holds a block store of it (:class:`LocalTier`)
    local = False
    #: a restore reads it as one transfer over :meth:`route` (its tokens x KV bytes x its
    #: codec's ratio, after its T0): the restore, its estimate and its records need
    #: nothing else of the kind. False: a mechanism of its own (the remote GET, the peer
    #: reads), which uses :meth:`route` as the engine's end of its path.
    direct = False
    #: under a prefetch policy, its blocks are brought into host memory by prefetches
    #: (over :meth:`fetch_route`, or the remote GET) instead of being restored
    prefetched = False

    def __init__(
        self,
        code: int,
        name: str,
        t0: float = 0.0,
        t0_engine: float = 0.0,
        codec: Codec | None = None,
    ) -> None:
        self.code = code  # its index in the run's tiers (kvsim.cache.local: GPU, HOST, ...)
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

    def route(self, links: Links) -> tuple[Link, ...]:
        """The links on one engine that a restore's bytes from this tier cross into HBM,
        in order (empty: no restore reads it, or the engine lacks it)."""
        return ()

    def fetch_route(self, links: Links) -> tuple[Link, ...]:
        """The links a prefetch of its blocks into host memory crosses (a ``prefetched``
        direct tier; empty: none)."""
        return ()

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
    """A tier each engine holds as a block store of its own (gpu, host, nvme, a user's
    kind). ``config``: its scenario section (kvsim.config.schema's ``LocalTier``:
    enabled, capacity, eviction, admission, write policy, threshold and queue, T0, codec)."""

    local = True
    direct = True

    def __init__(self, code: int, name: str, config: Any) -> None:
        super().__init__(code, name, config.t0, config.t0_engine, config.codec)
        self.config = config
        self.enabled: bool = config.enabled
        # how blocks reach it from the tier above (kvsim.cache.local.WRITE_POLICIES), and
        # write_through_selective's hit threshold
        self.write_policy: str = config.write_policy
        self.write_threshold: int = config.write_threshold

    def store(self, hooks: Policies) -> BlockStore | None:
        """An engine's block store of the tier (None: the tier is disabled)."""
        if not self.enabled:
            return None
        c = self.config
        return hooks.store(c.eviction, c.capacity, self.name)

    def gate(self, hooks: Policies, store: BlockStore | None) -> Gate | None:
        """Its admission filter on one engine (None: admit all)."""
        c = self.config
        return hooks.gate(c.admission, c.capacity, self.name, store)

    def write_queue(self) -> tuple[float | None, bool]:
        """Its write queue in bytes (None: unbounded) and whether a full one blocks the
        engine (else new writes are dropped)."""
        return self.config.write_queue, self.config.on_backlog == "block"

    def read_link(self, fabric: Fabric, index: int, sc: Scenario) -> Link | None:
        """Engine ``index``'s own link that reads the tier (None: none: GPU, host)."""
        return None

    def write_pipe(self, index: int, sc: Scenario) -> Pipe | None:
        """Engine ``index``'s own link that writes into the tier (None: none; a write into
        host is the GPU-to-host copy alone)."""
        return None

    def via_d2h(self, tiers: Sequence[Tier]) -> bool:
        """Whether a write into it leaves HBM over the GPU-to-host link first."""
        return False

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
    """GPU HBM: the prefix cache itself (no T0, no codec, never restored from; blocks
    arrive when a request finishes). ``config``: ``tiers.gpu``."""

    direct = False

    def __init__(self, code: int, name: str, config: Any) -> None:
        Tier.__init__(self, code, name)
        self.config = config
        self.enabled = True
        self.write_policy = "write_back"
        self.write_threshold = 1

    @classmethod
    def of(cls, sc: Scenario) -> Tier:
        return cls(GPU, "gpu", sc.tiers.gpu)

    def write_queue(self) -> tuple[float | None, bool]:
        return None, False


class HostTier(LocalTier):
    """The engine's host DRAM, over its host-to-GPU link."""

    order = 1.0

    @classmethod
    def of(cls, sc: Scenario) -> Tier:
        return cls(HOST, "host", sc.tiers.host)

    def route(self, links: Links) -> tuple[Link, ...]:
        return (links.h2d,)

    def via_d2h(self, tiers: Sequence[Tier]) -> bool:
        return True


class NvmeTier(LocalTier):
    """The engine's NVMe drives (through a host bounce buffer, or GPUDirect Storage)."""

    order = 2.0
    prefetched = True

    def __init__(self, code: int, name: str, config: Any) -> None:
        super().__init__(code, name, config)
        # GPUDirect Storage: the drives read into (and write from) HBM, no bounce buffer
        self.gds: bool = config.path == "gds"

    @classmethod
    def of(cls, sc: Scenario) -> Tier:
        return cls(NVME, "nvme", sc.tiers.nvme)

    def route(self, links: Links) -> tuple[Link, ...]:
        own = links.own[self.code]
        if own is None:
            return ()
        return (own,) if self.gds else (own, links.h2d)

    def fetch_route(self, links: Links) -> tuple[Link, ...]:
        own = links.own[self.code]
        return () if own is None else (own,)

    def read_link(self, fabric: Fabric, index: int, sc: Scenario) -> Link | None:
        if not self.enabled:
            return None
        n = sc.node
        return fabric.link(f"e{index}.nvme", n.nvme_read_per_drive * n.nvme_drives, n.nvme_latency)

    def write_pipe(self, index: int, sc: Scenario) -> Pipe | None:
        if not self.enabled:
            return None
        n = sc.node
        return Pipe(f"e{index}.nvme_write", n.nvme_write_per_drive * n.nvme_drives)

    def via_d2h(self, tiers: Sequence[Tier]) -> bool:
        # from host memory when a host tier holds the blocks; else out of HBM through a
        # host bounce buffer, unless GPUDirect Storage writes the drives from HBM
        host = tiers[HOST]
        return not (isinstance(host, LocalTier) and host.enabled) and not self.gds


class RemoteTier(Tier):
    """The remote store: its servers, over the engine's NIC (a lockstep GET over the
    servers holding the shards, kvsim.sim.get; with ``remote.ssd``, its servers' own
    SSDs below their DRAM, whose figures are its summary's ``ssd``)."""

    order = 4.0
    prefetched = True

    def __init__(self, code: int, name: str, sc: Scenario) -> None:
        rc = sc.remote
        super().__init__(code, name, rc.t0, rc.t0_engine, rc.codec)
        self.gpudirect = rc.enabled and rc.gpudirect  # remote.path: the NIC writes into HBM

    @classmethod
    def of(cls, sc: Scenario) -> Tier:
        return cls(REMOTE, "remote", sc)

    def route(self, links: Links) -> tuple[Link, ...]:
        return (links.nic_in,) if self.gpudirect else (links.nic_in, links.h2d)

    def summary(self, engines: Sequence[Node], remote: RemoteStore | None) -> dict[str, Any] | None:
        if remote is None:
            return None
        r = remote
        ssd = {"ssd": r.ssd.stats(r.mirrored)} if r.ssd is not None else {}
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
                    "read_bytes": e.read_bytes[self.code],
                    "write_bytes": e.landed_bytes,
                }
                for e in engines
            ],
            **ssd,
        }


class PeerTier(Tier):
    """Other engines' host DRAM, over both NICs; blocks as their host tier stores them."""

    order = 3.0

    def __init__(self, code: int, name: str, sc: Scenario) -> None:
        p = sc.tiers.peer
        super().__init__(code, name, p.t0, p.t0_engine, sc.tiers.host.codec)
        self.enabled = p.enabled

    @classmethod
    def of(cls, sc: Scenario) -> Tier:
        return cls(PEER, "peer", sc)

    def route(self, links: Links) -> tuple[Link, ...]:
        """This engine's end of a peer read (the holder's NIC out comes first)."""
        return (links.nic_in, links.h2d)

    def summary(self, engines: Sequence[Node], remote: RemoteStore | None) -> dict[str, Any] | None:
        if not self.enabled:  # other engines' host tiers: no store of its own
            return None
        code = self.code
        return {
            "read_bytes": sum((e.read_bytes[code] for e in engines), 0.0),
            "served_bytes": sum((e.served_bytes for e in engines), 0.0),
            "write_bytes": 0.0,
            **self.lookups(engines),
            "engines": [
                {
                    **self.counts(e),
                    "read_bytes": e.read_bytes[code],
                    "served_bytes": e.served_bytes,
                }
                for e in engines
            ],
        }


#: The built-in kinds, one per tier code 0-4 (gpu, host, nvme, remote, peer).
KINDS: tuple[type[Tier], ...] = (GpuTier, HostTier, NvmeTier, RemoteTier, PeerTier)


def make_tiers(sc: Scenario, kinds: Sequence[type[Tier] | Tier] = KINDS) -> tuple[Tier, ...]:
    """The run's tiers by code: the five built-in kinds (each may be replaced by a
    subclass of it in its place), then a user's local tier kinds (codes 5, 6, ...). A
    kind is a class (made by its ``of(scenario)``) or a tier already made."""
    if len(kinds) < len(KINDS):
        raise ValueError(f"tier kinds: the {len(KINDS)} built-in kinds come first, in order")
    tiers: list[Tier] = []
    for i, kind in enumerate(kinds):
        tier = kind if isinstance(kind, Tier) else kind.of(sc)
        if i < len(KINDS):
            if not isinstance(tier, KINDS[i]):
                raise ValueError(
                    f"tier kind {type(tier).__name__} in place {i}: expected a "
                    f"{KINDS[i].__name__} (or a subclass of it)"
                )
        elif not isinstance(tier, LocalTier):
            raise ValueError(
                f"tier kind {type(tier).__name__}: a new kind must be a LocalTier (a store on "
                "each engine); the remote store and the peers are mechanisms of their own"
            )
        elif not GpuTier.order < tier.order < PeerTier.order:
            raise ValueError(
                f"tier kind {type(tier).__name__}: order {tier.order:g} is not between GPU "
                f"HBM's ({GpuTier.order:g}) and the peers' ({PeerTier.order:g}): a local tier "
                "is looked up after HBM and before the other engines and the remote store"
            )
        if tier.local and tier.t0_engine > tier.t0:
            raise ValueError(
                f"tier {tier.name!r}: t0_engine ({tier.t0_engine:g} s) is larger than its t0 "
                f"({tier.t0:g} s)"
            )
        if tier.name in {t.name for t in tiers}:
            raise ValueError(f"two tiers are named {tier.name!r}")
        tier.code = i
        tiers.append(tier)
    return tuple(tiers)
