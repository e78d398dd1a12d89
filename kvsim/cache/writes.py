"""The write side of one engine's local tiers: which links a write crosses, its queue.

Every block stored into host DRAM or NVMe is a write on a link (docs/data-path.md):

- into host: the node's GPU-to-host (D2H) copy path, rank 0's link standing for all (every
  rank copies its own shard at once), shared with the staging copy before a remote put;
- into NVMe: the drives' write bandwidth (striped over the drives); when there is no host
  tier the blocks leave HBM too: through a host bounce buffer (D2H, then the drives) or,
  with GPUDirect Storage, straight to the drives.

Each link is a :class:`~kvsim.kernel.pipe.Pipe` (served in order), so each write knows
when it lands (:meth:`Writes.write` returns it): the blocks are readable from the tier
only from then on (:class:`~kvsim.cache.local.LocalCache` keeps the landing times). A
tier's ``write_queue`` is the staging buffer the queued bytes wait in (5 GB by default:
LMCache's local CPU buffer; null: no bound, and blocks readable as soon as their write is
queued, the optimistic write path); when it is over, ``on_backlog`` decides:
``drop`` (the blocks are not written and are counted) or ``block`` (the engine waits
before its next step until the queue is back under the bound).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvsim.kernel.pipe import Pipe

HOST = 1  # tier codes (as kvsim.cache.local; repeated to keep this module's imports light)
NVME = 2


class Writes:
    """One engine's write links, write-queue bounds and drop counters."""

    __slots__ = (
        "blocking",
        "blocks",
        "clock",
        "d2h",
        "dropped",
        "drops",
        "expand",
        "gds",
        "host",
        "limit",
        "nvme",
        "ranks",
        "sm_busy",
        "sm_share",
        "sm_spans",
        "staged",
    )

    def __init__(
        self,
        clock: Callable[[], float],
        d2h: Pipe,
        nvme: Pipe | None,
        ranks: int,
        host: bool,
        gds: bool,
        queues: Sequence[float | None] = (None, None, None),
        block: Sequence[bool] = (False, False, False),
        expand: Sequence[float] = (1.0, 1.0, 1.0),
        sm_share: float = 0.0,
    ) -> None:
        self.clock = clock
        self.d2h = d2h  # rank 0's GPU-to-host link
        self.nvme = nvme  # the drives' write bandwidth
        self.ranks = ranks  # ranks that copy their shards of a block in parallel
        self.host = host  # a host tier exists (NVMe writes come from host memory)
        self.gds = gds
        # per tier: the write queue as seconds of work on its link (None: unbounded), and
        # whether a full queue blocks the engine (else new writes are dropped)
        self.limit: list[float | None] = [None, None, None]
        self.blocks = [False, False, False]
        for level, q in ((HOST, queues[HOST]), (NVME, queues[NVME])):
            if q is not None:
                self.limit[level] = q / self._bandwidth(level)
                self.blocks[level] = block[level]
        # per tier: a staging buffer is modelled, and its blocks are readable only once
        # their write lands (a null queue: kvsim's optimistic write path before issue 25,
        # readable as soon as queued)
        self.staged = [q is not None for q in self.limit]
        self.blocking = any(self.blocks)  # some full queue makes the engine wait
        # per tier: a bounded queue that drops (room() can say no)
        self.drops = [q is not None and not b for q, b in zip(self.limit, self.blocks)]
        self.dropped = [0, 0, 0]  # blocks not written because the queue was full (drop)
        # per tier: raw bytes per stored byte crossing the GPU-to-host link (1 / ratio for
        # a codec that runs on the CPU, in host memory after the copy; else 1)
        self.expand: list[float] = list(expand)
        # node.copy_engine: kernel: the copies out of HBM are copy kernels holding this
        # share of the SMs while they run (0: the copy engines); their SM seconds and spans
        self.sm_share = sm_share
        self.sm_busy = 0.0
        self.sm_spans: list[float] = []

    def _bandwidth(self, level: int) -> float:
        """The tier's write bandwidth in node bytes/s."""
        if level == HOST or self.nvme is None:
            return self.d2h.bandwidth * self.ranks
        return self.nvme.bandwidth

    def _pipe(self, level: int) -> Pipe:
        return self.nvme if level == NVME and self.nvme is not None else self.d2h

    def room(self, level: int) -> bool:
        """False when writes into the tier are to be dropped: its queue is over its bound
        and it drops on backlog."""
        limit = self.limit[level]
        if limit is None or self.blocks[level]:
            return True
        return self._pipe(level).backlog(self.clock()) <= limit

    def write(self, level: int, nbytes: float) -> float:
        """Queue the write of ``nbytes`` (as stored) into tier ``level``: a background copy
        (nobody waits for it, nor for its encoding, which holds no link). Return when it
        lands: the blocks are readable from the tier from then on."""
        now = self.clock()
        if level == HOST:
            return self._out_of_hbm(now, nbytes * self.expand[HOST])
        nvme = self.nvme
        assert nvme is not None
        if self.host or self.gds:
            return nvme.send(now, nbytes)
        # from HBM through a host bounce buffer
        staged = self._out_of_hbm(now, nbytes * self.expand[NVME])
        return nvme.send(staged, nbytes)

    def _out_of_hbm(self, now: float, nbytes: float) -> float:
        """A copy out of HBM on the GPU-to-host link (every rank its shard); a copy kernel
        holds ``sm_share`` of the SMs while it runs."""
        d2h = self.d2h
        lands = d2h.send(now, nbytes, 1.0 / self.ranks)
        if self.sm_share > 0.0:
            work = self.sm_share * nbytes / self.ranks / d2h.bandwidth
            self.sm_busy += work
            self.sm_spans.append(lands - work)
            self.sm_spans.append(lands)
        return lands

    def stall(self) -> float:
        """Seconds the engine must wait for its blocking queues to fall back under their
        bounds (0 when none is over by more than a nanosecond)."""
        now = self.clock()
        wait = 0.0
        for level in (HOST, NVME):
            limit = self.limit[level]
            if limit is not None and self.blocks[level]:
                over = self._pipe(level).backlog(now) - limit
                if over > wait:
                    wait = over
        # under a nanosecond is rounding left by the last wait, not a queue to drain
        return wait if wait > 1e-9 else 0.0
