"""The write side of one engine's local tiers: which links a write crosses, its queue.

Every block stored into host DRAM or NVMe is a write on a link (docs/data-path.md):

- into host: the node's GPU-to-host (D2H) copy path, rank 0's link standing for all (every
  rank copies its own shard at once), shared with the staging copy before a remote put;
- into NVMe: the drives' write bandwidth (striped over the drives); when there is no host
  tier the blocks leave HBM too: through a host bounce buffer (D2H, then the drives) or,
  with GPUDirect Storage, straight to the drives;
- into a user's local tier kind (kvsim.sim.tiers): its own write link, after the D2H copy
  when its writes leave HBM (the tier's class says).

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
        "levels",
        "limit",
        "pipes",
        "ranks",
        "sm_busy",
        "sm_share",
        "sm_spans",
        "staged",
        "via_d2h",
    )

    def __init__(
        self,
        clock: Callable[[], float],
        d2h: Pipe,
        ranks: int,
        pipes: Sequence[Pipe | None],
        via_d2h: Sequence[bool],
        gds: bool = False,
        queues: Sequence[float | None] = (),
        block: Sequence[bool] = (),
        expand: Sequence[float] = (),
        sm_share: float = 0.0,
    ) -> None:
        """Per tier code (``pipes`` sets how many): ``pipes``, the tier's own write link
        (None: none; a write into host is the GPU-to-host copy alone); ``via_d2h``,
        whether a write into it leaves HBM over the GPU-to-host link first (host; NVMe
        with no host tier above it, through a bounce buffer); ``queues``, its write
        queue in bytes (None or missing: unbounded); ``block``, whether a full queue
        blocks the engine (else new writes are dropped); ``expand``, raw bytes per
        stored byte crossing the GPU-to-host link. ``gds``: NVMe is read by GPUDirect
        Storage (a promotion into host is then copied down over D2H)."""
        self.clock = clock
        self.d2h = d2h  # rank 0's GPU-to-host link
        self.ranks = ranks  # ranks that copy their shards of a block in parallel
        n = len(pipes)
        self.pipes: list[Pipe | None] = list(pipes)
        self.via_d2h: list[bool] = [bool(v) for v in via_d2h] + [False] * (n - len(via_d2h))
        self.gds = gds
        # the tiers written into (a link of their own, or the GPU-to-host copy)
        self.levels = [t for t in range(n) if self.pipes[t] is not None or self.via_d2h[t]]
        # per tier: the write queue as seconds of work on its link (None: unbounded), and
        # whether a full queue blocks the engine (else new writes are dropped)
        self.limit: list[float | None] = [None] * n
        self.blocks = [False] * n
        for level in self.levels:
            q = queues[level] if level < len(queues) else None
            if q is not None:
                self.limit[level] = q / self._bandwidth(level)
                self.blocks[level] = level < len(block) and block[level]
        # per tier: a staging buffer is modelled, and its blocks are readable only once
        # their write lands (a null queue: kvsim's optimistic write path before issue 25,
        # readable as soon as queued)
        self.staged = [q is not None for q in self.limit]
        self.blocking = any(self.blocks)  # some full queue makes the engine wait
        # per tier: a bounded queue that drops (room() can say no)
        self.drops = [q is not None and not b for q, b in zip(self.limit, self.blocks)]
        self.dropped = [0] * n  # blocks not written because the queue was full (drop)
        # per tier: raw bytes per stored byte crossing the GPU-to-host link (1 / ratio for
        # a codec that runs on the CPU, in host memory after the copy; else 1)
        self.expand: list[float] = list(expand) + [1.0] * (n - len(expand))
        # node.copy_engine: kernel: the copies out of HBM are copy kernels holding this
        # share of the SMs while they run (0: the copy engines); their SM seconds and spans
        self.sm_share = sm_share
        self.sm_busy = 0.0
        self.sm_spans: list[float] = []

    def _bandwidth(self, level: int) -> float:
        """The tier's write bandwidth in node bytes/s."""
        pipe = self.pipes[level]
        if pipe is None:
            return self.d2h.bandwidth * self.ranks
        return pipe.bandwidth

    def _pipe(self, level: int) -> Pipe:
        pipe = self.pipes[level]
        return pipe if pipe is not None else self.d2h

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
        pipe = self.pipes[level]
        if self.via_d2h[level]:  # out of HBM first (into host, or a bounce buffer)
            staged = self._out_of_hbm(now, nbytes * self.expand[level])
            return staged if pipe is None else pipe.send(staged, nbytes)
        assert pipe is not None
        return pipe.send(now, nbytes)

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
        for level in self.levels:
            limit = self.limit[level]
            if limit is not None and self.blocks[level]:
                over = self._pipe(level).backlog(now) - limit
                if over > wait:
                    wait = over
        # under a nanosecond is rounding left by the last wait, not a queue to drain
        return wait if wait > 1e-9 else 0.0
