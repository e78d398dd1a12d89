"""The request record inside the simulator: a request plus what happened to it.

A :class:`Job` carries one request through an engine (states ``NEW`` -> ``LOADING`` ->
``READY``), collects its times and its tokens and bytes per tier, and turns into one row of
the per-request table (:data:`kvsim.sim.rows.COLUMNS`). Per-tier fields are indexed by the
tier constants of :mod:`kvsim.cache.local` (GPU, HOST, NVME, REMOTE, PEER; computed tokens
last, at COMPUTED):
a new tier kind adds its index there and its columns here and in ``rows.py``.
"""

from __future__ import annotations

import math
from typing import Final, Protocol

from kvsim.cache.eviction import Key
from kvsim.cache.local import COMPUTED, GPU, HOST, NVME, PEER, REMOTE
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
        "enqueued",
        "fetch",
        "gpu_s",
        "holders",
        "keys",
        "load_s",
        "lost_s",
        "peers",
        "prefetch_s",
        "puts",
        "queue_wait",
        "recomputed",
        "remote_get_s",
        "req",
        "reserved",
        "restore",
        "restore_h2d",
        "restore_lookup",
        "restore_queue",
        "restore_read",
        "retries",
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
        self, req: Request, warmup: bool, keys: tuple[Key, ...], warm: bool = False
    ) -> None:
        self.req = req
        self.keys = keys  # cache keys of its blocks (hash ids, namespaced by tenant)
        self.warmup = warmup
        # not the first request of its session (or, without one, of its first block's
        # prefix) in arrival order: decided at arrival (Simulation._arrivals)
        self.warm = warm
        self.retries = 0  # times re-routed after an engine failure
        self.lost_s = 0.0  # time spent on engines that failed under it
        self.bytes = [0.0, 0.0, 0.0, 0.0, 0.0]  # read per tier, over all attempts
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
        self.remote_get_s = 0.0
        self.tier_s = [0.0, 0.0, 0.0, 0.0, 0.0]  # restore wall time per tier (T0 included)
        self.tokens = [0, 0, 0, 0, 0, 0]  # gpu, host, nvme, remote, peer, computed
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

    def drop(self) -> None:
        """No attempt will finish: no times, no tokens (bytes already read stay)."""
        nan = _NAN
        self.start = self.queue_wait = self.load_s = self.compute_s = nan
        self.store_s = self.remote_get_s = self.prefetch_s = nan
        self.restore_lookup = self.restore_queue = self.restore_read = self.restore_h2d = nan
        self.gpu_s = nan
        self.recomputed = 0
        self.tier_s = [nan, nan, nan, nan, nan]
        self.tokens = [0, 0, 0, 0, 0, 0]
        self.steps = 0
        self.decision = "dropped"
        self.stalled = self.timed_out = False

    def row(self, engine: int, finish: float, reason: str = "") -> tuple:
        """The per-request record (fields in :data:`kvsim.sim.rows.COLUMNS` order);
        a dropped request has engine -1, no finish and its ``reason``."""
        req = self.req
        tok = self.tokens
        byt = self.bytes
        ts = self.tier_s
        return (
            req.id,
            req.session,
            req.tenant,
            engine,
            req.arrival,
            self.start,
            finish,
            finish - req.arrival,
            self.queue_wait,
            self.load_s + self.prefetch_s,  # waiting for its KV: prefetch, then restore
            self.compute_s,
            self.store_s,
            self.lost_s,
            ts[HOST],
            ts[NVME],
            ts[REMOTE],
            ts[PEER],
            self.prefetch_s,
            self.remote_get_s,
            self.restore_lookup,
            self.restore_queue,
            self.restore_read,
            self.restore_h2d,
            req.input_tokens,
            req.output_tokens,
            tok[GPU],
            tok[HOST],
            tok[NVME],
            tok[REMOTE],
            tok[PEER],
            tok[COMPUTED],
            self.recomputed,
            self.gpu_s,
            byt[HOST],
            byt[NVME],
            byt[REMOTE],
            byt[PEER],
            self.decision,
            self.stalled,
            self.timed_out,
            self.retries,
            reason,
            self.warmup,
            self.warm,
            self.steps,
        )
