"""An engine's HBM working pool and its restore slots, as one resource.

What this module owns: :class:`WorkingPool`. The node's KV pool (kvsim.config.pools) bounds
the working KV (running requests' prompts and restores in flight); beyond ``cache_slack``
of it the working KV evicts the prefix cache (the GPU tier's reservation). In-flight
restores also take one of ``engine.max_inflight_restores`` slots. Like SimPy's resources
it has one protocol: ``fits``/``can_restore`` ask, ``take`` (and ``take_slot``) get,
``release`` (and ``free_slot``) put back; what a request holds is ``job.reserved``.
"""

from __future__ import annotations

from kvsim.cache.local import LocalCache
from kvsim.sim.job import Job
from kvsim.sim.metrics import Metrics


class WorkingPool:
    """The working KV an engine's requests hold and its restore slots."""

    __slots__ = ("cache_slack", "inflight", "local", "max_inflight", "size", "used")

    def __init__(self, local: LocalCache, size: float, cache_slack: float, slots: int) -> None:
        self.local = local
        self.size = size  # bytes: the node's KV pool
        self.cache_slack = cache_slack  # working KV the prefix cache does not give up
        self.max_inflight = slots  # restores in flight at once
        self.used = 0.0  # bytes held: running requests' KV and restores in flight
        self.inflight = 0  # restores in flight

    def fits(self, need: float) -> bool:
        """Room for ``need`` more bytes of working KV."""
        return self.used + need <= self.size

    def can_restore(self, need: float) -> bool:
        """Room for another restore: a free slot and room for the request's KV."""
        if self.inflight >= self.max_inflight:
            return False
        return self.used + need <= self.size

    def take_slot(self) -> None:
        """A restore starts: it holds a slot until ``free_slot``."""
        self.inflight += 1

    def free_slot(self) -> None:
        """A restore is over (or abandoned)."""
        self.inflight -= 1

    def take(self, job: Job, need: float, metrics: Metrics) -> None:
        """Hold ``need`` bytes for the request until it finishes; what the reservation
        evicts is the job's (``metrics.cause``, when block events are heard)."""
        job.reserved += need
        self.used += need
        if metrics.blocks:
            metrics.cause = job.req.id
            self.press()
            metrics.cause = -1
        else:
            self.press()

    def release(self, job: Job) -> None:
        """The request's working KV goes back."""
        if job.reserved:
            self.used -= job.reserved
            if self.used < 1.0:  # rounding: the pool is empty
                self.used = 0.0
            job.reserved = 0.0
            self.press()

    def drop(self, jobs: list[Job]) -> None:
        """The engine failed: what ``jobs`` held goes back at once."""
        for job in jobs:
            self.used -= job.reserved
            job.reserved = 0.0
        if self.used < 1.0:
            self.used = 0.0
        self.press()  # asynchronous restores still in flight keep theirs

    def press(self) -> None:
        """The prefix cache holds at most what the working KV leaves of the KV pool: the
        working KV beyond ``cache_slack`` is reserved in the GPU tier (evicting, and
        demoting, its blocks); released, the room goes back to the cache."""
        over = self.used - self.cache_slack
        if over < 0.0:
            over = 0.0
        gpu = self.local.gpu
        delta = over - gpu.reserved
        if delta > 0.0:
            self.local.reserve(delta)
        elif delta < 0.0:
            gpu.unreserve(-delta)
