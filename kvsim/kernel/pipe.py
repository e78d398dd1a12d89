"""A write link served in order: the copy engines and drives that carry KV down the tiers.

Writes down the hierarchy (GPU -> host demotions and staging copies, host -> NVMe
demotions) go through one queue per link, first come first served: a write starts when
the link has finished everything queued before it and takes ``bytes / bandwidth``. That is
a DMA copy stream or a drive's submission queue; it needs no events, because when each
write ends follows from the writes before it. ``free_at`` is when the link falls idle; the
backlog at time t is the work still ahead of a new write, ``free_at - t`` seconds.

The NVLink hand-off after an unsharded remote GET (the rank that read the KV sends the
other ranks their parts) is served the same way, one queue per issuing GPU.

Restores (reads up the hierarchy) and remote GETs and puts share their links fairly
instead and run on the fabric (:mod:`kvsim.kernel.fabric`).
"""

from __future__ import annotations


class Pipe:
    """One write link of ``bandwidth`` bytes/s, writes served in order."""

    __slots__ = ("bandwidth", "busy_time", "bytes", "free_at", "name")

    def __init__(self, name: str, bandwidth: float) -> None:
        if not bandwidth > 0:
            raise ValueError(f"link {name}: bandwidth must be > 0, got {bandwidth}")
        self.name = name
        self.bandwidth = float(bandwidth)
        self.free_at = 0.0  # when everything queued so far is written
        self.bytes = 0.0  # bytes written through it
        self.busy_time = 0.0  # seconds spent writing

    def backlog(self, now: float) -> float:
        """Seconds of queued work a write given at ``now`` waits behind."""
        return max(self.free_at - now, 0.0)

    def send(self, at: float, nbytes: float, share: float = 1.0) -> float:
        """Queue ``nbytes`` ready at time ``at``; return when the last byte is written.
        A pipe may stand for one of several identical links that work in parallel (rank
        0's of a node's GPUs, each rank writing its own shard): ``share`` is the part of
        the write that crosses this one (1 / ranks for a write every rank shares, 1 for
        one rank's whole copy)."""
        work = nbytes * share / self.bandwidth
        start = at if at > self.free_at else self.free_at
        self.free_at = start + work
        self.bytes += nbytes
        self.busy_time += work
        return self.free_at
