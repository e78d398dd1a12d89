"""The request record inside the simulator: a request plus what happened to it.

A :class:`Job` carries one request through an engine (states ``NEW`` -> ``LOADING`` ->
``READY``), collects its times and its tokens and bytes per tier, and, once finished (or
dropped), is one record of the per-request table: :mod:`kvsim.sim.rows` declares each
column by the attribute it reads here. Per-tier fields are lists indexed by tier code
(kvsim.sim.tiers: GPU, HOST, NVME, REMOTE, PEER, then a user's tier kinds; the computed
tokens last).
"""

from __future__ import annotations

import math
from typing import ClassVar, Final, Protocol

from kvsim.cache.eviction import Key
from kvsim.cache.local import TIERS
from kvsim.cache.remote import Batch
from kvsim.workload.request import Request

_NAN: Final = math.nan
NEW: Final = 0  # job states
LOADING: Final = 1
READY: Final = 2
# a job with no peer blocks shares these (Lookup.assign_peers replaces, never mutates them)
_NONE_HELD: Final[list[int]] = []
_NO_PEERS: Final[dict[int, int]] = {}


class Restoring(Protocol):
    """A restore in flight (kvsim.sim.restore.Restore), as its job sees it."""

    def cancel(self) -> None: ...


class Fetching(Protocol):
    """A prefetch in flight (kvsim.sim.prefetch.Fetch), as its job sees it."""

    def stop(self, land: bool = True) -> None: ...


class Job:
    """A request inside the simulator: the request plus what happened to it."""

    __slots__ = (
        "begin",
        "bytes",
        "cached",
        "compute_s",
        "decision",
        "done",
        "drop_reason",
        "enqueued",
        "fetch",
        "finish",
        "frontend_s",
        "gpu_s",
        "handoff_bytes",
        "handoff_s",
        "holders",
        "keys",
        "kv_tokens",
        "load_s",
        "lost_s",
        "peers",
        "preempted_tokens",
        "preemptions",
        "prefetch_s",
        "puts",
        "queue_wait",
        "recomputed",
        "remote_get_s",
        "remote_ssd_s",
        "remote_ssd_tokens",
        "req",
        "requeued",
        "reserved",
        "restore",
        "restore_h2d",
        "restore_lookup",
        "restore_queue",
        "restore_read",
        "retries",
        "served_by",
        "sizes",
        "src",
        "stalled",
        "start",
        "state",
        "steps",
        "store_s",
        "submitted",
        "tier_s",
        "timed_out",
        "tokens",
        "warm",
        "warmup",
    )

    def __init__(
        self,
        req: Request,
        warmup: bool,
        keys: tuple[Key, ...],
        tiers: int = TIERS,
        warm: bool = False,
    ) -> None:
        """``tiers``: the run's tier count (its per-tier lists' length)."""
        self.req = req
        self.keys = keys  # cache keys of its blocks (hash ids, namespaced by tenant)
        self.warmup = warmup
        # not the first request of its session (or, without one, of its first block's
        # prefix) in arrival order: decided at arrival (Simulation._arrivals)
        self.warm = warm
        self.retries = 0  # times re-routed after an engine failure
        self.lost_s = 0.0  # time spent on engines that failed under it
        self.bytes = [0.0] * tiers  # read per tier, over all attempts
        # engine.preemption recompute (kvsim.sim.preempt): times preempted, and the prompt
        # tokens computed in the attempts preempted (their work lost), over all attempts
        self.preemptions = 0
        self.preempted_tokens = 0
        # its record's last fields: the engine that served it (-1: dropped), when its first
        # token came out (NaN: dropped), and why it was dropped
        self.served_by = -1
        self.finish = _NAN
        self.drop_reason = ""
        # cluster.handoff: its KV's hand-off to the decode pool, from its start (the prefill's
        # end) to its last byte (NaN: lost with its engine, or the run stopped first), and
        # the bytes it moved (kvsim.sim.handoff); read only when the hand-off is on
        self.handoff_s = 0.0
        self.handoff_bytes = 0.0
        self.reset()

    def reset(self) -> None:
        """A fresh attempt (on arrival, or after its engine failed)."""
        self.state = NEW
        self.submitted = self.enqueued = self.req.arrival
        self.queue_wait = 0.0
        self.start = _NAN
        self.load_s = 0.0
        self.prefetch_s = 0.0  # waited for its prefetch into host, out of the queue
        self.compute_s = 0.0
        self.store_s = 0.0  # GPU-to-host staging of blocks to put (the engine waits)
        # engine.frontend: time in the frontend before the engine's queue (its queue
        # included), plus the first token's way out once finished
        self.frontend_s = 0.0
        self.remote_get_s = 0.0
        # remote.ssd: of the GET, the wait for the servers' SSDs, and the tokens of its
        # blocks read off them (kvsim.sim.get)
        self.remote_ssd_s = 0.0
        self.remote_ssd_tokens = 0
        n = len(self.bytes)
        self.tier_s = [0.0] * n  # restore wall time per tier (T0 included)
        self.tokens = [0] * (n + 1)  # per tier code (gpu, host, ...), then computed
        self.src: list[int] = []  # tier of each restored block
        # tiers.peer: the engine serving each block of src (-1: not a peer block), and
        # holder engine index -> tokens it serves (Lookup.plan, after the policy's cut)
        self.holders: list[int] = _NONE_HELD  # replaced, never changed in place
        self.peers: dict[int, int] = _NO_PEERS
        self.cached = 0
        self.decision = "cold"
        self.stalled = False
        self.timed_out = False
        self.restore: Restoring | None = None  # the restore in progress
        self.done = 0  # prompt tokens computed so far (chunks)
        self.steps = 0  # steps it took part in
        self.begin = _NAN  # when its compute could start (first step, after its restore)
        self.reserved = 0.0  # GPU HBM held for its restore
        # engine.preemption recompute: working KV tokens it holds (allocated chunk by
        # chunk), and whether it waits at the front of the queue after a preemption
        self.kv_tokens = 0
        self.requeued = False
        self.puts: Batch | None = None  # staged for the remote store in its last step
        self.sizes: list[float] | None = None  # bytes of its blocks, once computed
        self.fetch: Fetching | None = None  # its prefetch into host, while one runs
        # computed tokens in blocks computed or stored before (evicted since, out of the
        # lookup's reach, or skipped by the load policy): Lookup.account
        self.recomputed = 0
        self.gpu_s = 0.0  # its share of the SM time of the steps it took part in
        # the restore's time in parts (Restore._record; they sum to load_s): the critical
        # tier's T0 and path latency, queueing, its unloaded read, host-to-GPU and after
        self.restore_lookup = 0.0
        self.restore_queue = 0.0
        self.restore_read = 0.0
        self.restore_h2d = 0.0

    #: what :meth:`record` returns, in its order: the fields the per-request columns read
    #: (kvsim.sim.rows names each column's source among them; tests/test_job.py checks the
    #: two agree)
    RECORD: ClassVar[tuple[str, ...]] = (
        "req",
        "served_by",
        "start",
        "finish",
        "queue_wait",
        "load_s",
        "compute_s",
        "store_s",
        "lost_s",
        "frontend_s",
        "tier_s",
        "prefetch_s",
        "remote_get_s",
        "remote_ssd_s",
        "remote_ssd_tokens",
        "restore_lookup",
        "restore_queue",
        "restore_read",
        "restore_h2d",
        "tokens",
        "recomputed",
        "preemptions",
        "preempted_tokens",
        "gpu_s",
        "bytes",
        "decision",
        "stalled",
        "timed_out",
        "retries",
        "drop_reason",
        "warmup",
        "warm",
        "steps",
        "handoff_s",
        "handoff_bytes",
    )

    def record(self) -> tuple:
        """The values of :attr:`RECORD`'s fields: the row table reads a finished request
        with this one call (compiled: a native read per field), not a getattr a column."""
        return (
            self.req,
            self.served_by,
            self.start,
            self.finish,
            self.queue_wait,
            self.load_s,
            self.compute_s,
            self.store_s,
            self.lost_s,
            self.frontend_s,
            self.tier_s,
            self.prefetch_s,
            self.remote_get_s,
            self.remote_ssd_s,
            self.remote_ssd_tokens,
            self.restore_lookup,
            self.restore_queue,
            self.restore_read,
            self.restore_h2d,
            self.tokens,
            self.recomputed,
            self.preemptions,
            self.preempted_tokens,
            self.gpu_s,
            self.bytes,
            self.decision,
            self.stalled,
            self.timed_out,
            self.retries,
            self.drop_reason,
            self.warmup,
            self.warm,
            self.steps,
            self.handoff_s,
            self.handoff_bytes,
        )

    def drop(self, reason: str) -> None:
        """No attempt will finish: no times, no tokens (bytes already read stay)."""
        nan = _NAN
        self.start = self.queue_wait = self.load_s = self.compute_s = nan
        self.store_s = self.remote_get_s = self.prefetch_s = self.frontend_s = nan
        self.remote_ssd_s = nan
        self.remote_ssd_tokens = 0
        self.restore_lookup = self.restore_queue = self.restore_read = self.restore_h2d = nan
        self.gpu_s = self.handoff_s = nan
        self.recomputed = 0
        n = len(self.bytes)
        self.tier_s = [nan] * n
        self.tokens = [0] * (n + 1)
        self.steps = 0
        self.decision = "dropped"
        self.stalled = self.timed_out = False
        self.served_by = -1
        self.finish = nan
        self.drop_reason = reason
