"""A prefill engine: a SimPy process serving its queue one prefill at a time.

One request's path through an engine::

    submit -> queue (ordered by arrival) -> lookup (longest prefix over GPU, host, NVMe,
    remote; each block from the fastest tier holding it) -> policy picks what to restore
    -> restore: per tier, T0 then a transfer on the fabric (remote: one lockstep GET over
    the servers holding the ranks' shards; it may stall; a client timeout, or the loss of
    a server, abandons it and the rest is recomputed) -> compute the suffix, t(new, cached)
    from the timing table -> blocks the remote store lacks are staged to host memory (the
    engine waits for this copy) -> blocks admitted to GPU HBM (evictions demote), staged
    blocks put to the remote store in the background -> one record.

Under ``sync`` the engine waits through the restore (GPU idle); under ``async`` it serves
others and the request re-joins the queue once its KV is in. An engine can fail: the
request it was working on and its queue go back to the simulation (re-routed or
dropped). Blocks are addressed by ``job.keys``: the request's hash ids, namespaced by
tenant. Invariants: a request's tokens by source sum to its prompt, and TTFT = lost time
(on a failed engine) + queue wait + restore + compute + store.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Final

import simpy

from kvsim.cache.eviction import Key
from kvsim.cache.local import GPU, HOST, NVME, REMOTE, LocalCache
from kvsim.cache.remote import Batch
from kvsim.kernel.fabric import Flow, Link
from kvsim.workload.request import Request

if TYPE_CHECKING:
    from kvsim.sim.simulation import Simulation

_NAN: Final = math.nan
NEW: Final = 0  # job states
LOADING: Final = 1
READY: Final = 2


class Job:
    """A request inside the simulator: the request plus what happened to it."""

    __slots__ = (
        "bytes",
        "cached",
        "compute_s",
        "decision",
        "enqueued",
        "keys",
        "load_s",
        "lost_s",
        "queue_wait",
        "remote_get_s",
        "req",
        "restore",
        "retries",
        "src",
        "stalled",
        "start",
        "state",
        "store_s",
        "submitted",
        "tier_s",
        "timed_out",
        "tokens",
        "warmup",
    )

    def __init__(self, req: Request, warmup: bool, keys: tuple[Key, ...]) -> None:
        self.req = req
        self.keys = keys  # cache keys of its blocks (hash ids, namespaced by tenant)
        self.warmup = warmup
        self.retries = 0  # times re-routed after an engine failure
        self.lost_s = 0.0  # time spent on engines that failed under it
        self.bytes = [0.0, 0.0, 0.0, 0.0]  # read per tier, over all attempts
        self.reset()

    def reset(self) -> None:
        """A fresh attempt (on arrival, or after its engine failed)."""
        self.state = NEW
        self.submitted = self.enqueued = self.req.arrival
        self.queue_wait = 0.0
        self.start = _NAN
        self.load_s = 0.0
        self.compute_s = 0.0
        self.store_s = 0.0  # GPU-to-host staging of blocks to put (the engine waits)
        self.remote_get_s = 0.0
        self.tier_s = [0.0, 0.0, 0.0, 0.0]  # restore wall time per tier (T0 included)
        self.tokens = [0, 0, 0, 0, 0]  # gpu, host, nvme, remote, computed
        self.src: list[int] = []  # tier of each restored block
        self.cached = 0
        self.decision = "cold"
        self.stalled = False
        self.timed_out = False
        self.restore: Restore | None = None  # the restore in progress

    def drop(self) -> None:
        """No attempt will finish: no times, no tokens (bytes already read stay)."""
        nan = _NAN
        self.start = self.queue_wait = self.load_s = self.compute_s = nan
        self.store_s = self.remote_get_s = nan
        self.tier_s = [nan, nan, nan, nan]
        self.tokens = [0, 0, 0, 0, 0]
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
            self.load_s,
            self.compute_s,
            self.store_s,
            self.lost_s,
            ts[HOST],
            ts[NVME],
            ts[REMOTE],
            self.remote_get_s,
            req.input_tokens,
            req.output_tokens,
            tok[GPU],
            tok[HOST],
            tok[NVME],
            tok[REMOTE],
            tok[4],
            byt[HOST],
            byt[NVME],
            byt[REMOTE],
            self.decision,
            self.stalled,
            self.timed_out,
            self.retries,
            reason,
            self.warmup,
        )


class Restore:
    """A request's restore in flight, driven by its transfers' callbacks (no process).

    Per tier, T0 then a transfer on the fabric: host and NVMe each one flow, the remote
    GET one lockstep flow over the servers holding the ranks' shards (it may stall first).
    A client timeout, or the loss of a server mid-GET, abandons the remote part: the rest
    of the prompt from the first remote block on is recomputed. ``then(job)`` runs once
    every transfer is in (or, for an abandoned GET, every local one).
    """

    __slots__ = ("abandoned", "engine", "job", "local", "over", "remote", "start", "then")

    def __init__(self, engine: Engine, job: Job, then: Callable[[Job], object]) -> None:
        self.engine = engine
        self.job = job
        self.then = then
        self.abandoned = False
        self.over = True  # until every transfer is started
        sim = engine.sim
        fabric = sim.fabric
        env = engine.env
        s = sim.kv_bytes
        t0 = sim.t0
        self.start = env.now
        tokens = job.tokens
        job.restore = self
        self.local: list[tuple[int, Flow]] = []
        if tokens[HOST]:
            self.local.append(
                (
                    HOST,
                    fabric.transfer(
                        (engine.h2d,), tokens[HOST] * s, delay=t0[HOST], on_done=self.settled
                    ),
                )
            )
        if tokens[NVME]:
            assert engine.nvme is not None
            self.local.append(
                (
                    NVME,
                    fabric.transfer(
                        (engine.nvme, engine.h2d),
                        tokens[NVME] * s,
                        delay=t0[NVME],
                        on_done=self.settled,
                    ),
                )
            )
        self.remote: list[Flow] = []
        if tokens[REMOTE]:
            links, size, costs, shares = engine._remote_get(job)
            stall = sim.draw_stall()
            job.stalled = stall > 0
            self.remote.append(
                fabric.transfer(
                    links,
                    size,
                    costs=costs,
                    shares=shares,
                    delay=t0[REMOTE] + stall,
                    on_done=self.settled,
                )
            )
            if sim.timeout is not None:
                env.timeout(t0[REMOTE] + sim.timeout).callbacks.append(self.timed_out)
        self.over = False
        self._check()

    def settled(self, flow: Flow) -> None:
        """A transfer is in, or was aborted (a server holding the shards went down)."""
        if self.over:
            return
        if flow.state != "finished" and not self.abandoned:
            self._abandon()
        self._check()

    def timed_out(self, _event: simpy.Event) -> None:
        """The client timeout: give up the GET if anything is still on its way."""
        if self.over or self.abandoned:
            return
        self.job.timed_out = True
        self._abandon()
        self._check()

    def cancel(self) -> None:
        """Its engine failed: stop every transfer; ``then`` never runs."""
        self.over = True
        fabric = self.engine.sim.fabric
        for _, f in self.local:
            fabric.cancel(f)
        for f in self.remote:
            fabric.cancel(f)

    def _abandon(self) -> None:
        self.abandoned = True
        self.engine._fall_back(self.job, self.remote)

    def _check(self) -> None:
        for _, f in self.local:
            if f.state != "finished":
                return
        if not self.abandoned:
            for f in self.remote:
                if f.state != "finished":
                    return
        self.over = True
        self._record()
        # drop the flows: each holds this restore's callback, and the reference cycle
        # would leave every restore to the garbage collector
        self.local, self.remote = [], []
        self.then(self.job)

    def _record(self) -> None:
        """The restore is over: its times and the bytes each tier served."""
        job = self.job
        job.restore = None
        engine = self.engine
        now = engine.env.now
        start = self.start
        got = [0.0, 0.0, 0.0, 0.0]
        for tier, f in self.local:
            job.tier_s[tier] = f.end - start
            got[tier] = f.size
        remote = self.remote
        if remote:
            ends = [f.end for f in remote if f.state == "finished"]
            end = max(ends) if len(ends) == len(remote) else now
            job.tier_s[REMOTE] = end - start
            t0 = engine.sim.t0[REMOTE]
            job.remote_get_s = max(end - start - t0, 0.0)  # 0: abandoned within T0
            moved = 0.0  # bytes that reached the engine: progress x this engine's shares
            for f in remote:
                assert f.shares is not None  # remote reads are lockstep flows
                moved += (f.size - max(f.remaining, 0.0)) * sum(f.shares[:-2], 0.0)
            got[REMOTE] = moved
        job.load_s = now - start
        for tier in (HOST, NVME, REMOTE):
            job.bytes[tier] += got[tier]
        engine.sim.count_reads(engine, got)


class Engine:
    """One prefill instance (a node of ``pcp`` ranks) with its local tiers and links."""

    def __init__(
        self,
        sim: Simulation,
        index: int,
        local: LocalCache,
        h2d: Link,
        nvme: Link | None,
        nic_in: Link,
        nic_out: Link,
    ) -> None:
        self.sim = sim
        self.env = sim.env
        self.index = index
        self.local = local
        self.h2d = h2d
        self.nvme = nvme
        self.nic_in = nic_in
        self.nic_out = nic_out
        self.up = True
        self.failure_mode = "reroute"  # what happens to its requests if it fails
        self.outstanding = 0  # routed here and not finished
        self.busy = 0.0  # seconds computing (GPU busy)
        self.blocked = 0.0  # seconds held by a synchronous restore (GPU idle)
        self.served = 0
        self.pending_puts = 0  # puts queued or in flight
        self._put_queue: deque[Batch] = deque()
        self._heap: list[tuple[float, int, Job]] = []
        self._seq = 0
        self.queue_area = 0.0  # integral of queue length over time (request-seconds)
        self._queue_t = 0.0
        self._wake: simpy.Event | None = None
        self._current: Job | None = None  # the job the process is working on
        self.process = self.env.process(self._loop())

    # ---- queue -----------------------------------------------------------------------

    def local_prefix_blocks(self, blocks: Any, at_least: int = 0) -> int:
        return self.local.prefix_blocks(blocks, at_least)

    def submit(self, job: Job) -> None:
        """A request routed here (new, or re-routed from a failed engine)."""
        self.outstanding += 1
        job.submitted = self.env.now
        self._push(job)

    def _push(self, job: Job) -> None:
        if not self.up:  # an async restore finished after its engine failed
            self.outstanding -= 1
            self.sim.displace(job, self)
            return
        now = self.env.now
        self.queue_area += len(self._heap) * (now - self._queue_t)
        self._queue_t = now
        job.enqueued = now
        self._seq += 1
        heapq.heappush(self._heap, (job.req.arrival, self._seq, job))
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.succeed()

    @property
    def queued(self) -> int:
        return len(self._heap)

    # ---- failure -------------------------------------------------------------------------

    def fail(self) -> list[Job]:
        """The node goes down: local tiers are lost; return the jobs it held (the one in
        progress first, then its queue) for the simulation to re-route or drop."""
        self.up = False
        for store in self.local.tiers:
            if store is not None:
                store.clear()
        held = []
        if self._current is not None:
            held.append(self._current)
            if self._current.restore is not None:  # a synchronous restore: abandon it
                self._current.restore.cancel()
            self._current = None
        now = self.env.now
        self.queue_area += len(self._heap) * (now - self._queue_t)
        self._queue_t = now
        held += [job for _, _, job in sorted(self._heap)]
        self._heap.clear()
        self.outstanding -= len(held)
        if self.process.is_alive and self.process.target is not None:
            self.process.interrupt("engine failed")
        return held

    def recover(self) -> None:
        """The node is back, with empty local tiers."""
        self.up = True
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.succeed()

    # ---- the process ---------------------------------------------------------------------

    def _loop(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        heap = self._heap
        sim = self.sim
        policy = sim.policy
        table = sim.table
        while True:
            try:
                if not heap or not self.up:
                    self._wake = env.event()
                    yield self._wake
                    continue
                now = env.now
                self.queue_area += len(heap) * (now - self._queue_t)
                self._queue_t = now
                job = heapq.heappop(heap)[2]
                self._current = job
                job.queue_wait += now - job.enqueued
                if job.state == NEW:
                    job.start = now
                    self._plan(job)
                    if job.src and (job.tokens[HOST] or job.tokens[NVME] or job.tokens[REMOTE]):
                        if not policy.blocking:
                            job.state = LOADING
                            self._current = None
                            Restore(self, job, self._requeue)
                            continue
                        restored = env.event()
                        Restore(self, job, restored.succeed)  # its value: the job
                        yield restored
                        self.blocked += job.load_s
                req = job.req
                t = table(req.input_tokens - job.cached, job.cached)
                job.compute_s = t
                puts = None
                sizes = sim.block_sizes(req)
                if sim.remote is not None and sim.max_pending_puts:
                    # what the store lacks is staged to host after the prefill; the engine
                    # waits for that copy too (one timeout stands for both)
                    puts, nbytes = self._stage(job, sizes)
                    job.store_s = nbytes / sim.stage_bandwidth
                yield env.timeout(t + job.store_s)
                self.busy += t
                self._current = None
                self._finish(job, puts, sizes)
            except simpy.Interrupt:
                self._wake = None  # fail() took the jobs; wait to be recovered

    def _requeue(self, job: Job) -> None:
        """An asynchronous restore is in: the request re-joins the queue for its prefill."""
        job.state = READY
        self._push(job)

    # ---- lookup and plan -----------------------------------------------------------------

    def _plan(self, job: Job) -> None:
        """Longest usable prefix, each block from its fastest tier; the policy may cut it."""
        sim = self.sim
        blocks = job.keys
        local = self.local
        gpu, host, nvme = local.gpu, local.host, local.nvme
        remote = sim.remote
        if not sim.policy.lower_tiers:
            host = nvme = remote = None
        in_gpu = gpu.blocks
        in_host = host.blocks if host is not None else ()
        in_nvme = nvme.blocks if nvme is not None else ()
        src: list[int] = []
        for b in blocks:
            if b in in_gpu:
                src.append(GPU)
            elif b in in_host:
                src.append(HOST)
            elif b in in_nvme:
                src.append(NVME)
            elif remote is not None and remote.has(b):
                src.append(REMOTE)
            else:
                break
        lower = src.count(GPU) != len(src)
        if lower:
            src = src[: sim.policy.restore_blocks(src, lambda k: self._estimate(job, src, k))]
        self._account(job, src)
        if lower and job.decision in ("gpu", "cold"):
            job.decision = "skipped"  # the policy chose to recompute what a lower tier held
        # a hit refreshes the blocks in their tiers (a run of blocks from one tier at once)
        stores = (gpu, host, nvme, remote)
        n = len(src)
        i = 0
        while i < n:
            t = src[i]
            j = i + 1
            while j < n and src[j] == t:
                j += 1
            stores[t].touch(blocks[i:j])  # type: ignore[union-attr]
            i = j

    def _account(self, job: Job, src: list[int]) -> None:
        """Tokens per source for restoring the blocks ``src`` (at least one token computed)."""
        req = job.req
        B = self.sim.block_tokens
        n_in = req.input_tokens
        tokens = [0, 0, 0, 0, 0]
        for t in src:
            tokens[t] += B
        k = len(src)
        if k:
            last = src[-1]
            overshoot = k * B - n_in  # the last block of a prompt is usually partial
            if overshoot >= 0:
                tokens[last] -= overshoot + 1  # and one token is always computed
        cached = tokens[0] + tokens[1] + tokens[2] + tokens[3]
        tokens[4] = n_in - cached
        job.src = src
        job.tokens = tokens
        job.cached = cached
        if tokens[HOST] or tokens[NVME] or tokens[REMOTE]:
            job.decision = "restore"
        elif tokens[GPU]:
            job.decision = "gpu"
        else:
            job.decision = "cold"

    def _estimate(self, job: Job, src: list[int], k: int) -> float:
        """Live estimate of restore + compute time when restoring the first ``k`` blocks."""
        sim = self.sim
        probe = Job(job.req, job.warmup, job.keys)
        self._account(probe, src[:k])
        s = sim.kv_bytes
        worst = 0.0
        if probe.tokens[HOST]:
            rate = sim.fabric.estimate_rate((self.h2d,))
            worst = max(worst, sim.t0[HOST] + probe.tokens[HOST] * s / rate)
        if probe.tokens[NVME] and self.nvme is not None:
            rate = sim.fabric.estimate_rate((self.nvme, self.h2d))
            worst = max(worst, sim.t0[NVME] + probe.tokens[NVME] * s / rate)
        if probe.tokens[REMOTE]:
            links, size, costs, _ = self._remote_get(probe)
            worst = max(worst, sim.t0[REMOTE] + size / sim.fabric.estimate_rate(links, costs))
        return worst + sim.table(job.req.input_tokens - probe.cached, probe.cached)

    # ---- restore -------------------------------------------------------------------------

    def _remote_get(self, job: Job) -> tuple[tuple[Link, ...], float, tuple, tuple]:
        """The request's remote GET as one lockstep flow over the servers it reads (its
        ranks' parts move together): (links, size, costs, shares)."""
        sim = self.sim
        remote = sim.remote
        assert remote is not None
        B = sim.block_tokens
        blocks = job.keys
        last = job.req.input_tokens - 1  # the always-computed last token is not read
        ids, tokens = [], []
        for i, t in enumerate(job.src):
            if t == REMOTE:
                tok = min(B, last - i * B)
                if tok > 0:
                    ids.append(blocks[i])
                    tokens.append(tok)
        s = sim.kv_bytes / remote.shards
        per_server = {srv: tok * s for srv, tok in remote.tokens_by_server(ids, tokens).items()}
        return sim.lockstep(remote.parts(per_server), (self.nic_in, self.h2d))

    def _fall_back(self, job: Job, remote: list[Flow]) -> None:
        """Client timeout (or a lost server): give up the GET, recompute from the first
        remote block on."""
        fabric = self.sim.fabric
        for f in remote:
            if f.state != "finished":
                fabric.cancel(f)
        src = job.src
        cut = src.index(REMOTE)
        self._account(job, src[:cut])
        job.decision = "fallback"

    # ---- finish ----------------------------------------------------------------------------

    def _stage(self, job: Job, sizes: list[float]) -> tuple[Batch, float]:
        """The shards the remote store lacks and their bytes, reserved at once as pending
        so that no other engine stages them too."""
        sim = self.sim
        remote = sim.remote
        assert remote is not None
        batch = remote.missing(job.keys, sizes)
        remote.reserve(batch)
        return batch, batch.total_bytes()

    def _finish(self, job: Job, puts: Batch | None, sizes: list[float]) -> None:
        sim = self.sim
        if sim.tenancy.keeps(job):
            self.local.admit(job.keys, sizes)
            if puts:
                self._put(puts)
        elif puts:  # its tenant was deleted while it ran: nothing of it is kept
            sim.remote.release(puts)  # type: ignore[union-attr]
        self.outstanding -= 1
        self.served += 1
        sim.finished(self, job)

    def _put(self, batch: Batch) -> None:
        """Queue the put of what the remote store lacks: one lockstep flow over the servers
        involved (each rank's part to its own server). Puts leave one at a time, in order
        (an LMCache-style background store); a full queue drops the put."""
        sim = self.sim
        remote = sim.remote
        assert remote is not None
        if self.pending_puts >= sim.max_pending_puts:
            remote.release(batch)
            return
        self.pending_puts += 1
        self._put_queue.append(batch)
        if len(self._put_queue) == 1:  # the connection is idle
            self._start_put()

    def _start_put(self) -> None:
        """Send the oldest queued put."""
        sim = self.sim
        remote = sim.remote
        assert remote is not None
        batch = self._put_queue[0]
        links, size, costs, shares = sim.lockstep(remote.put_parts(batch), (self.nic_out,))
        remote.puts += 1
        remote.put_bytes += batch.total_bytes()
        # a background write: no one waits for it to start, so no latency is charged
        sim.fabric.transfer(
            links, size, costs=costs, shares=shares, latency=False, on_done=self._landed
        )

    def _landed(self, flow: Flow) -> None:
        batch = self._put_queue.popleft()
        self.pending_puts -= 1
        remote = self.sim.remote
        assert remote is not None
        if flow.state == "finished":
            remote.land(batch)
        else:  # aborted: a server it wrote to went down
            remote.release(batch)
        if self._put_queue:
            self._start_put()

    @property
    def put_queue(self) -> tuple[Batch, ...]:
        """Puts queued or in flight, oldest first."""
        return tuple(self._put_queue)

    # ---- record ---------------------------------------------------------------------------
