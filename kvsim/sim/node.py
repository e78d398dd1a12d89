"""What an engine is to the parts around it: its links, its local tiers, its counters.

What this module owns: :class:`Node`, the side of a prefill engine that restores,
prefetches, puts, lookups, faults and the summary see (its index, local tiers, the links
its transfers cross, whether it is up, and the activity and byte counters they add to).
:class:`~kvsim.sim.engine.Engine` is a Node with a step loop; the modules below the
engine depend on this class only, never on the engine, so the imports run one way.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsim.cache.local import NVME, LocalCache
from kvsim.cache.remote import Batch
from kvsim.kernel.fabric import Link
from kvsim.kernel.pipe import Pipe
from kvsim.sim.job import Job


class Links:
    """The links one engine's transfers cross (fabric links, and pipes served in order)."""

    __slots__ = ("client", "d2h", "h2d", "nic_in", "nic_out", "nvlink", "own")

    def __init__(
        self,
        h2d: Link,
        own: Sequence[Link | None],
        nic_in: Link,
        nic_out: Link,
        client: Link,
        d2h: Pipe,
        nvlink: Pipe | None = None,
    ) -> None:
        self.h2d = h2d
        # by tier code: the link that reads a local tier of the engine's own (the NVMe
        # drives; a user's tier kind's), None for the others (kvsim.sim.tiers)
        self.own: list[Link | None] = list(own)
        self.nic_in = nic_in
        self.nic_out = nic_out
        self.client = client  # the NIC and PCIe of the rank that issues an unsharded GET
        self.d2h = d2h  # rank 0's GPU-to-host link: demotions to host and staging copies
        # unsharded remote store: the NVLink out of the rank that issues each GET, which
        # then hands the other ranks their parts (None: per-rank shards, or one GPU)
        self.nvlink = nvlink


class Node:
    """One prefill instance's links, local tiers and counters (see the module docstring)."""

    def __init__(
        self,
        index: int,
        local: LocalCache,
        links: Links,
        routes: list[tuple[Link, ...]],
        fetch_routes: list[tuple[Link, ...]],
    ) -> None:
        """``routes``: by tier code, the links a restore's transfer from that tier crosses
        on this engine (``Tier.route``, kvsim/sim/tiers.py; empty: none); ``fetch_routes``,
        those a prefetch's into host memory crosses (``Tier.fetch_route``)."""
        self.index = index
        self.local = local
        # its links (see Links), as attributes of its own for the hot paths
        self.h2d = h2d = links.h2d
        own = links.own
        self.nvme = own[NVME] if len(own) > NVME else None  # its drives' read link
        self.nic_in = links.nic_in
        self.nic_out = links.nic_out
        self.client = links.client
        self.d2h = links.d2h
        self.nvlink = links.nvlink
        self.routes = routes
        self.fetch_routes = fetch_routes
        # by tier code: whether a restore's bytes from it enter HBM over the host-to-GPU
        # link (a copy engine's or a copy kernel's work; GPUDirect paths skip it)
        self.via_h2d = [h2d in r for r in routes]
        self.up = True
        self.failure_mode = "reroute"  # what happens to its requests if it fails
        self.busy = 0.0  # seconds the GPUs computed (SM work of steps, decodes, copies)
        # lookups per tier code (gpu, host, nvme, remote, peer, a user's), over the whole
        # run: blocks a tier asked held in the usable prefix (hits) or not (misses); bytes
        # its restores read per tier; bytes its host served to other engines (peer); bytes its puts
        # stored in the remote store (kvsim.sim.lookup, kvsim.sim.restore, kvsim.sim.puts)
        n = len(routes)
        self.hits = [0] * n
        self.misses = [0] * n
        self.read_bytes = [0.0] * n
        self.served_bytes = 0.0
        self.landed_bytes = 0.0
        # unsharded GETs over: (GPUs - 1) x their bytes (one rank copied them alone)
        self.copied_alone = 0.0
        # activity as flat [start, end, start, end, ...] lists (the summary windows them)
        self.gpu_spans: list[float] = []  # SM work
        self.copy_spans: list[float] = []  # copy engines: restores into HBM, staging out

    def fail(self) -> list[Job]:
        """The node goes down: the requests it held, for the simulation to place."""
        raise NotImplementedError

    def recover(self) -> None:
        """The node is back, with empty local tiers."""
        raise NotImplementedError

    def put_queue(self) -> tuple[Batch, ...]:
        """Puts to the remote store queued or in flight, oldest first."""
        raise NotImplementedError
