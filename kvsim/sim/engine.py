"""A prefill engine: a SimPy process that runs steps, each a batch of prompt chunks.

One request's path through an engine::

    submit -> waiting (ordered by the scheduler: fcfs | lpm | sjf) -> picked for a step:
    lookup (longest prefix over GPU, host, NVMe, remote; each block from the fastest tier
    holding it) -> policy picks what to restore -> restore (reserves GPU HBM for what it
    brings; per tier, T0 then a transfer on the fabric; the remote GET may stall, time out
    or lose a server, and the rest is recomputed) -> its new tokens are computed in chunks,
    one per step, under the step's token budget -> blocks the remote store lacks are staged
    to host memory (the engine waits for this copy) -> blocks admitted to GPU HBM
    (evictions demote), staged blocks put to the remote store in the background -> one
    record.

Each step the engine forms a batch (docs/engine-model.md): requests already computing
first, each its next chunk, then waiting requests in scheduler order, while the token
budget (``engine.max_batched_tokens``) and ``engine.max_batch_requests`` allow; a prompt
takes at most ``engine.long_prefill_token_threshold`` tokens a step when that is set. The
step takes the step model's time for its chunks. ``serial`` batching is one whole prompt
per step (kvsim's engine before batching).

Under ``sync`` a restore runs inside the step that picked its request: the whole batch
waits for it (layer-wise loading overlaps it with compute). Under ``async`` the request
leaves for its restore (the engine pays only the lookup part of T0, ``t0_engine``) and
re-joins the waiting queue when its KV is in. In-flight restores hold GPU HBM for what
they bring and are bounded by ``engine.max_inflight_restores``; one that does not fit
waits at the head of the queue.

An engine can fail: the requests it holds go back to the simulation (re-routed or
dropped). Blocks are addressed by ``job.keys``: the request's hash ids, namespaced by
tenant. Invariants: a request's tokens by source sum to its prompt; the chunks computed
sum to its computed tokens; TTFT = lost time (on a failed engine) + queue wait + load (the
wait for its prefetch into host, when the prefetch policy waits, plus its restore) +
compute (from its first step to its last, batch-mates' restores included) + store.

What lives where: the request record is :mod:`kvsim.sim.job`; restores into HBM (and the
remote GET's path) :mod:`kvsim.sim.restore`; prefetches into host :mod:`kvsim.sim.prefetch`;
puts to the remote store :mod:`kvsim.sim.puts`; this module is the step loop, the lookup
and the plan. A new tier kind plugs in at ``Engine._locate`` (which tier serves a block),
``Engine._account`` (tokens per tier) and ``Engine._estimate`` (a policy's cost estimate),
then in the modules above for its transfers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import simpy

from kvsim.cache.eviction import Entry, Key
from kvsim.cache.local import BACK, COMPUTED, GPU, HOST, NVME, PEER, REMOTE, LocalCache
from kvsim.cache.remote import Batch
from kvsim.kernel.fabric import Flow, FlowAborted, Link
from kvsim.kernel.pipe import Pipe
from kvsim.physics.step import kernel_copy_seconds, lone_seconds
from kvsim.sim.job import LOADING, NEW, READY, Job
from kvsim.sim.prefetch import Fetch
from kvsim.sim.puts import Puts
from kvsim.sim.restore import Restore, remote_get
from kvsim.sim.scheduler import Waiting
from kvsim.sim.shared import Shared


def cached_tokens(blocks: int, block_tokens: int, prompt_tokens: int) -> int:
    """Tokens a usable prefix of ``blocks`` blocks serves (as ``Engine._account``
    counts them: the prompt's last token is always computed)."""
    if blocks <= 0:
        return 0
    return min(blocks * block_tokens, prompt_tokens - 1)


class Engine:
    """One prefill instance (a node of ``pcp`` ranks) with its local tiers and links."""

    def __init__(
        self,
        ctx: Shared,
        index: int,
        local: LocalCache,
        h2d: Link,
        nvme: Link | None,
        nic_in: Link,
        nic_out: Link,
        client: Link,
        d2h: Pipe,
        nvlink: Pipe | None = None,
    ) -> None:
        self.ctx = ctx
        self.env = ctx.env
        self.index = index
        self.local = local
        self.h2d = h2d
        self.nvme = nvme
        self.nic_in = nic_in
        self.nic_out = nic_out
        self.client = client  # the NIC and PCIe of the rank that issues an unsharded GET
        self.d2h = d2h  # rank 0's GPU-to-host link: demotions to host and staging copies
        # unsharded remote store: the NVLink out of the rank that issues each GET, which
        # then hands the other ranks their parts (None: per-rank shards, or one GPU)
        self.nvlink = nvlink
        # an NVMe restore: GPUDirect Storage straight into HBM, or the drives into a host
        # bounce buffer, then host to GPU
        self.nvme_path: tuple[Link, ...] = ()
        if nvme is not None:
            self.nvme_path = (nvme,) if ctx.nvme_gds else (nvme, h2d)
        self.up = True
        self.failure_mode = "reroute"  # what happens to its requests if it fails
        self.outstanding = 0  # routed here and not finished
        self.busy = 0.0  # seconds the GPUs computed (SM work of steps)
        self.blocked = 0.0  # seconds steps waited for synchronous restores or lookups
        self.served = 0
        self.steps = 0
        # lookups per tier code (gpu, host, nvme, remote, peer), over the whole run: blocks
        # a tier asked held in the usable prefix (hits) or not (misses); bytes its restores
        # read per tier; bytes its host served to other engines (peer); bytes its puts
        # stored in the remote store (Engine._count_lookup, Restore._record, Puts)
        self.hits = [0, 0, 0, 0, 0]
        self.misses = [0, 0, 0, 0, 0]
        self.read_bytes = [0.0, 0.0, 0.0, 0.0, 0.0]
        self.served_bytes = 0.0
        self.landed_bytes = 0.0
        self._peer_asked = ctx.scenario.tiers.peer.enabled
        self._sm_per_token = 0.0  # the step being run: its SM seconds per chunk token
        # tiers.peer: the holder of each block the last lookup found (-1: not a peer block)
        self._holders: list[int] = []
        # activity as flat [start, end, start, end, ...] lists (the summary windows them)
        self.step_spans: list[float] = []  # steps, from forming to the end of staging
        self.gpu_spans: list[float] = []  # SM work
        self.blocked_spans: list[float] = []  # a step waiting on restores / lookups
        self.copy_spans: list[float] = []  # copy engines: restores into HBM, staging out
        self.puts = Puts(self)  # to the remote store
        custom = ctx.hooks.scheduler(ctx.scenario.engine.scheduler)  # a plugin's priority, or None
        # a plugin scheduler ranks requests after a lookup: one not looked up yet is
        # peeked at (Engine._peek) when it joins the queue, and at each pick if dynamic
        self._peeks = custom is not None
        self.waiting = Waiting(
            ctx.scheduler,
            ctx.aging,
            self._cached_prefix,
            custom.bind(self) if custom is not None else None,
            custom.dynamic if custom is not None else False,
            self._peek if custom is not None else None,
        )
        self.running: list[Job] = []  # computing: picked for a step, chunks left
        self._fetching: list[Job] = []  # waiting for their prefetch, out of the queue
        self.inflight = 0  # restores in flight
        self._copy_mark = 0.0  # _copied() when the step computing began (kernel copies)
        # kernel copies may overlap the step being run: restores in flight or copies
        # moving into HBM when it formed (only this engine's steps start restores)
        self._copy_watch = False
        # unsharded GETs over: (GPUs - 1) x their bytes (one rank copied them alone)
        self.copied_alone = 0.0
        # bytes of the working pool held: running requests' KV and restores in flight
        # (kvsim.config.pools; each request holds ``job.reserved`` until it finishes)
        self.working = 0.0
        self._syncing: list[Job] = []  # synchronous restores of the step being formed
        self._sync_left = 0
        self._sync_done: simpy.Event | None = None
        self._spare = 0  # budget the step being formed left unused
        self.queue_area = 0.0  # integral of queue length over time (request-seconds)
        self._queue_t = 0.0
        self._wake: simpy.Event | None = None
        # the simulation's memory check, made every 1,024 steps (None: none)
        self.guard: Callable[[], None] | None = None
        if ctx.put_policy == BACK:
            local.leave = self.puts.put_back
        self.process = self.env.process(self._loop())

    # ---- queue -----------------------------------------------------------------------

    def local_prefix_blocks(self, blocks: Any, at_least: int = 0) -> int:
        return self.local.prefix_blocks(blocks, at_least)

    def _cached_prefix(self, job: Job) -> int:
        return self.local.prefix_blocks(job.keys)

    def submit(self, job: Job) -> None:
        """A request routed here (new, or re-routed from a failed engine)."""
        self.outstanding += 1
        job.submitted = self.env._now
        ctx = self.ctx
        if ctx.prefetching and self.up:
            fetch = self._prefetch(job, job)
            if fetch is not None:
                job.fetch = fetch
                if ctx.prefetch_waits:  # it joins the queue once its KV is in host
                    self._fetching.append(job)
                    if ctx.prefetch_timeout is not None:
                        self.env.timeout(ctx.prefetch_timeout).callbacks.append(fetch.expired)
                    return
        self._push(job)

    def _prefetch(self, job: Job, owner: Job | None) -> Fetch | None:
        """Start fetching into host the blocks of the request's prefix that only NVMe or
        the remote store hold; None when there are none."""
        src = self._locate(job.keys)
        hook = self.ctx.prefetch_hook
        if hook is not None and owner is not None and src:  # a plugin: how much to fetch
            src = src[: hook.fetch_blocks(job, src)]
        if NVME not in src and REMOTE not in src:
            return None
        sizes = self.ctx.block_sizes(job.req)
        fetch = Fetch(self, owner, job.keys, sizes, src)
        return None if fetch.over else fetch

    def _fetched(self, fetch: Fetch) -> None:
        """A prefetch is over (in, or stopped by its timeout): a request that waited for
        it joins the queue, in its arrival place."""
        job = fetch.job
        if job is None or job.fetch is not fetch:
            return
        job.fetch = None
        if job in self._fetching:
            self._fetching.remove(job)
            job.prefetch_s += self.env._now - job.submitted  # part of its load time
            self._push(job)

    def _push(self, job: Job) -> None:
        if not self.up:  # an async restore finished after its engine failed
            self._release(job)
            self.outstanding -= 1
            self.ctx.displace(job, self)
            return
        now = self.env._now
        self._tick(now)
        job.enqueued = now
        if self._peeks:
            self._peek(job)
        self.waiting.push(job)
        self._poke()

    def _peek(self, job: Job) -> None:
        """``job.cached`` of a request not looked up yet, as the lookup ``_plan`` would
        make now would find it, for a plugin scheduler's priority: the same tiers asked,
        no block touched, no hit counted, no load policy's cut. A request looked up
        already (back from an asynchronous restore) keeps the tokens it restored."""
        if job.state != NEW:
            return
        ctx = self.ctx
        local = self.local
        host = local.host is not None
        nvme = local.nvme is not None
        remote = ctx.remote is not None
        if not ctx.policy.lower_tiers:
            host = nvme = remote = False
        elif ctx.prefetching:  # as _plan: NVMe and remote are read through prefetches
            nvme = remote = False
        holders = self._holders  # (_locate_peers sets them: the last real lookup's)
        src = self._locate(job.keys, host, nvme, remote, ctx.peer and host)
        self._holders = holders
        job.cached = cached_tokens(len(src), ctx.block_tokens, job.req.input_tokens)

    def _tick(self, now: float) -> None:
        """Add the queue's length since the last change to its time integral."""
        self.queue_area += len(self.waiting) * (now - self._queue_t)
        self._queue_t = now

    def _poke(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.succeed()

    @property
    def queued(self) -> int:
        return len(self.waiting)

    # ---- failure -------------------------------------------------------------------------

    def fail(self) -> list[Job]:
        """The node goes down: local tiers are lost; return the jobs it held (those in a
        step first, then its queue) for the simulation to re-route or drop."""
        self.up = False
        for store in self.local.tiers:
            if store is not None:
                store.clear()
        if self.ctx.peer:  # other engines' reads from its host memory are lost with it
            fabric = self.ctx.fabric
            error = FlowAborted(f"engine {self.index} went down")
            for flow in fabric.flows_on(self.nic_out):
                if flow.tag == PEER:
                    fabric.abort(flow, error)  # the reader falls back (Engine._fall_back)
        held = list(self.running)
        for job in self._syncing:  # synchronous restores of the step: abandon them
            if job.state == LOADING:
                if job.restore is not None:
                    job.restore.cancel()
                    job.restore = None
                self.inflight -= 1
        self._tick(self.env._now)
        held += self.waiting.jobs()
        held += self._fetching
        self._fetching = []
        for job in held:
            if job.fetch is not None:
                job.fetch.stop(land=False)
                job.fetch = None
        self.waiting.clear()
        self.running = []
        self._syncing = []
        self._sync_left = 0
        self._sync_done = None
        for job in held:
            self.working -= job.reserved
            job.reserved = 0.0
        if self.working < 1.0:
            self.working = 0.0
        self._press()  # asynchronous restores still in flight keep theirs
        self.outstanding -= len(held)
        if self.process.is_alive and self.process.target is not None:
            self.process.interrupt("engine failed")
        return held

    def recover(self) -> None:
        """The node is back, with empty local tiers."""
        self.up = True
        self._poke()

    # ---- the process ---------------------------------------------------------------------

    def _loop(self) -> Any:
        env = self.env
        while True:
            try:
                if not self.up or not (self.running or self.waiting):
                    self._wake = env.event()
                    yield self._wake
                    continue
                writes = self.local.writes
                wait = writes.stall() if writes is not None and writes.blocking else 0.0
                if wait > 0:  # a full write queue that blocks: let it drain first
                    self._hold(env._now, env._now + wait)
                    yield env.timeout(wait)
                    continue
                step_start = env._now
                batch, lookups = self._form()
                if self._syncing:
                    yield from self._restore_in_step(step_start)
                if not batch:
                    if lookups > 0:  # only lookups for asynchronous restores this step
                        self._hold(step_start, step_start + lookups)
                        yield env.timeout(lookups)
                    elif not self._syncing:
                        self._wake = env.event()  # everything left is waiting on restores
                        yield self._wake
                    self._syncing = []
                    continue
                end, stage_end = self._times(step_start, batch, lookups)
                self._syncing = []
                self.step_spans.append(step_start)
                if self._copy_watch:  # kernel copies took SMs from the step
                    yield env.timeout(end - env._now)
                    lost = self._copy_lost()
                    rounds = 0
                    while lost > 1e-9 and rounds < 64:  # copies during the extra time too
                        yield env.timeout(lost)
                        rounds += 1
                        lost = self._copy_lost()
                    if rounds:  # held longer: so is its staging copy's wait
                        stage_end += env._now - end
                        end = env._now
                self.step_spans.append(stage_end)
                yield env.timeout(max(stage_end - env._now, 0.0))
                self._complete(batch, end, stage_end)
                if not self.steps & 1023 and self.guard is not None:
                    self.guard()  # raises MemoryError before the process runs out
            except simpy.Interrupt:
                self._wake = None  # fail() took the jobs; wait to be recovered

    # ---- forming a step --------------------------------------------------------------------

    def _form(self) -> tuple[list[tuple[Job, int]], float]:
        """The step's batch as (job, chunk tokens) and the seconds of lookup work that
        asynchronous restores started here cost the engine. Requests already computing
        come first (fcfs, lpm: as vLLM, so a started prompt is never starved); under sjf
        they take their turn by the same key as the waiting ones."""
        ctx = self.ctx
        budget = ctx.budget
        slots = ctx.max_requests
        per = ctx.per_step
        batch: list[tuple[Job, int]] = []
        running = self.running
        waiting = self.waiting
        sjf = ctx.scheduler == "sjf"
        if sjf and len(running) > 1:
            running.sort(key=waiting.key)
        started: list[Job] = []  # picked from the queue for this step
        aside: list[Job] = []  # requests whose restore must wait for room
        full = False  # a request did not fit the working pool: later ones wait too
        lookups = 0.0
        now = self.env._now
        policy = ctx.policy
        ri = 0
        while slots > 0 and budget > 0:
            if ri < len(running) and not (
                sjf and waiting and waiting.first() < waiting.key(running[ri])
            ):
                job = running[ri]
                ri += 1
                n = min(job.req.input_tokens - job.cached - job.done, per, budget)
                batch.append((job, n))
                budget -= n
                slots -= 1
                continue
            if not waiting:
                break
            self._tick(now)
            job = waiting.pop()
            job.queue_wait += now - job.enqueued
            if job.state == NEW:
                if job.start != job.start:  # NaN: first time out of the queue
                    job.start = now
                if job.fetch is not None:  # best effort: go with what has arrived
                    job.fetch.stop()
                    job.fetch = None
                self._plan(job)
                tok = job.tokens
                # its working KV, held from now until it finishes: the whole prompt but
                # the blocks the prefix cache already holds (GPU hits are shared, as vLLM's)
                need = (job.req.input_tokens - tok[GPU]) * ctx.kv_bytes
                if full or self.working + need > ctx.kv_pool:
                    full = True  # the working pool is full: the queue waits (as vLLM's)
                    aside.append(job)
                    continue
                if tok[HOST] or tok[NVME] or tok[REMOTE] or tok[PEER]:
                    # once one restore waits for a slot, later ones wait behind it
                    if aside or not self._can_restore(need):
                        aside.append(job)
                        continue
                    self._reserve(job, need)
                    job.state = LOADING
                    if not policy.blocking:
                        lookups = max(lookups, self._lookup_cost(job))
                        Restore(self, job, self._restored_async)
                        continue
                    self._syncing.append(job)
                else:
                    self._take(job, need)
                    job.begin = now
            else:
                job.begin = now
            n = min(job.req.input_tokens - job.cached, per, budget)
            batch.append((job, n))
            started.append(job)
            budget -= n
            slots -= 1
        running += started
        for job in aside:  # back in line, in their order
            job.enqueued = now
            waiting.push(job)
        self._spare = budget
        return batch, lookups

    def _lookup_cost(self, job: Job) -> float:
        """The engine's part of T0 for a restore (the largest over the tiers it reads)."""
        t0e = self.ctx.t0_engine
        tok = job.tokens
        return max(
            t0e[HOST] if tok[HOST] else 0.0,
            t0e[NVME] if tok[NVME] else 0.0,
            t0e[REMOTE] if tok[REMOTE] else 0.0,
            t0e[PEER] if tok[PEER] else 0.0,
        )

    def _can_restore(self, need: float) -> bool:
        """Room for another restore: a free slot (``engine.max_inflight_restores``) and
        room in the working pool for the request's KV."""
        if self.inflight >= self.ctx.max_inflight:
            return False
        return self.working + need <= self.ctx.kv_pool

    def _reserve(self, job: Job, need: float) -> None:
        """A restore starts: a slot, and the request's working KV."""
        self.inflight += 1
        self._take(job, need)

    def _take(self, job: Job, need: float) -> None:
        """Hold ``need`` bytes of the working pool for the request until it finishes."""
        job.reserved += need
        self.working += need
        rec = self.ctx.recorder
        if rec is not None:  # the access log: what the reservation evicts is the job's
            rec.request = job.req.id
            self._press()
            rec.request = -1
        else:
            self._press()

    def _release(self, job: Job) -> None:
        if job.reserved:
            self.working -= job.reserved
            if self.working < 1.0:  # rounding: the pool is empty
                self.working = 0.0
            job.reserved = 0.0
            self._press()

    def _press(self) -> None:
        """The prefix cache holds at most what the working KV leaves of the KV pool: the
        working KV beyond ``cache_slack`` is reserved in the GPU tier (evicting, and
        demoting, its blocks); released, the room goes back to the cache."""
        over = self.working - self.ctx.cache_slack
        if over < 0.0:
            over = 0.0
        gpu = self.local.gpu
        delta = over - gpu.reserved
        if delta > 0.0:
            self.local.reserve(delta)
        elif delta < 0.0:
            gpu.unreserve(-delta)

    def _restored_async(self, job: Job) -> None:
        """An asynchronous restore is in: the request re-joins the queue for its prefill."""
        self.inflight -= 1
        job.state = READY
        self._push(job)

    def _restore_in_step(self, step_start: float) -> Any:
        """The step's synchronous restores, which the whole batch waits for: one after
        another (LMCache's connector retrieves request by request before the forward
        pass), or, layer-wise, all at once (layer l of every request, then l + 1)."""
        env = self.env
        jobs = self._syncing
        if self.ctx.layerwise:
            self._sync_left = len(jobs)
            self._sync_done = env.event()
            for job in jobs:
                Restore(self, job, self._restored_sync)
            yield self._sync_done
            return
        for job in jobs:
            job.queue_wait += env._now - step_start  # behind the step's earlier restores
            self._sync_left = 1
            self._sync_done = done = env.event()
            Restore(self, job, self._restored_sync)
            yield done

    def _restored_sync(self, job: Job) -> None:
        """A synchronous restore of the step being formed is in."""
        self.inflight -= 1
        job.state = READY
        job.begin = self.env._now
        self._sync_left -= 1
        if self._sync_left == 0 and self._sync_done is not None:
            done, self._sync_done = self._sync_done, None
            done.succeed()

    # ---- timing a step ----------------------------------------------------------------------

    def _times(
        self, step_start: float, batch: list[tuple[Job, int]], lookups: float
    ) -> tuple[float, float]:
        """When the step's compute ends and when its staging copies end (the engine is
        held until then), recording GPU, blocked and copy activity."""
        ctx = self.ctx
        now = self.env._now  # synchronous restores (if any) are in
        if self._syncing:
            self._regrow(batch)
        chunks = [(n, job.cached + job.done) for job, n in batch]
        steps = ctx.steps
        sm = steps.compute_share(chunks)
        step_tokens = 0
        for n, _ in chunks:
            step_tokens += n
        # each request's share of the step's SM time, by its chunk's tokens (_complete)
        self._sm_per_token = sm / step_tokens if step_tokens > 0 else 0.0
        c = steps.fixed_s + sm
        share = ctx.copy_sm_share
        if share > 0.0:
            # stores out of HBM (demotions and write-through into host, copies for
            # write-back puts) run as copy kernels too: while those queued before the step
            # run (r seconds of them past its fixed part), its SM work moves at 1 - share
            r = self.d2h.backlog(now) - steps.fixed_s
            if r > 0.0 and sm > 0.0:
                slow = (1.0 - share) * r  # SM work done while the stores run
                c += (sm / (1.0 - share) if sm <= slow else r + sm - slow) - sm
        L = ctx.layers
        # T0 of the slowest tier a synchronous restore streamed from; -1 when none did (a
        # restore that timed out fell back to compute: nothing arrives layer by layer)
        t0 = -1.0
        if ctx.layerwise:
            for j in self._syncing:
                for t in j.src:
                    if t != GPU and ctx.t0[t] > t0:
                        t0 = ctx.t0[t]
        if t0 >= 0:
            # loads streamed layer by layer: layer l computes while layer l+1 arrives
            xfer = max(now - step_start - t0, 0.0)
            first = step_start + min(t0, now - step_start) + xfer / L
            end = max(now + c / L, first + c)
        else:
            end = now + c
        end = max(end, step_start + lookups + c)
        compute_start = end - c
        if compute_start > step_start:
            self._hold(step_start, compute_start)
        # kernel copies from here on take SMs from the step (none can start during it
        # unless a restore is in flight or a copy is moving now: no need to look)
        self._copy_watch = ctx.copy_sm_share > 0.0 and (self.inflight > 0 or bool(self.h2d.members))
        if self._copy_watch:
            self._copy_mark = self._copied(end - sm)
        self.busy += sm
        self.gpu_spans.append(end - sm)
        self.gpu_spans.append(end)
        # staging of the blocks the remote store lacks, for requests this step finishes:
        # a copy on rank 0's GPU-to-host link, in line behind the demotions queued there
        stage = 0.0
        if ctx.remote is not None and ctx.max_pending_puts and ctx.put_policy != BACK:
            for job, n in batch:
                if job.done + n >= job.req.input_tokens - job.cached:
                    job.puts = self.puts.stage(job)
                    stage += job.puts.total_bytes()
        if stage <= 0:
            return end, end
        d2h = self.d2h
        share = ctx.stage_share
        encode = 0.0  # the store's codec: bytes so far are as stored
        if ctx.codec_on_gpu[REMOTE]:  # the GPU encodes first (the step waits), GPU work
            encode = stage / ctx.ratio[REMOTE] * ctx.encode_s[REMOTE] * share
            if encode > 0:
                self.busy += encode
                self.gpu_spans.append(end)
                self.gpu_spans.append(end + encode)
        else:  # raw KV is copied; the CPU encodes it in host memory afterwards
            stage /= ctx.ratio[REMOTE]
        alone = stage * share / d2h.bandwidth
        if ctx.layerwise:  # layer l is stored while layer l+1 computes
            copied = d2h.send(compute_start + c / L + encode, stage, share)
            stage_end = max(copied, end + encode + alone / L)
        else:
            copied = d2h.send(end + encode, stage, share)
            stage_end = copied
        if ctx.copy_sm_share == 0.0:  # the copy engines (a kernel's is SM work: below)
            self.copy_spans.append(copied - alone)
            self.copy_spans.append(copied)
        if ctx.copy_sm_share > 0.0:  # a kernel gathers the blocks out of HBM: SM work
            work = kernel_copy_seconds(stage * share, d2h.bandwidth, ctx.copy_sm_share)
            self.busy += work
            self.gpu_spans.append(copied - work)
            self.gpu_spans.append(copied)
        return end, stage_end

    def _copied(self, at: float) -> float:
        """Bytes copied into HBM by time ``at`` (now, or a moment later at the current
        rates), weighted by the rank that copies most of them: every flow over the node's
        host-to-GPU link once, an unsharded GET (which one rank copies alone, over its
        ``client`` link) GPUs times, so that / the node's h2d bandwidth is the busiest
        rank's copy time."""
        link = self.h2d
        client = self.client
        alone = float(self.ctx.gpus)
        moved = link.bytes + self.copied_alone  # flows over: their payload
        for f, k in link.members.items():  # flows moving: progress x payload per unit
            done = f.size - f.remaining + f.rate * (at - f.since)
            part = (done if done < f.size else f.size) * k
            moved += part * alone if f.links[-1] is client else part
        return moved

    def _copy_lost(self) -> float:
        """SM seconds the busiest rank's copy kernels took since the last mark (the step
        computing meanwhile lost them, and makes them up); moves the mark to now."""
        now = self._copied(self.env._now)
        lost = kernel_copy_seconds(
            now - self._copy_mark, self.h2d.bandwidth, self.ctx.copy_sm_share
        )
        self._copy_mark = now
        return lost

    def _regrow(self, batch: list[tuple[Job, int]]) -> None:
        """A synchronous restore that fell back (timeout, lost server) left more to
        compute than its chunk was sized for: grow the chunk into the unused budget."""
        per = self.ctx.per_step
        for i, (job, n) in enumerate(batch):
            if job.state == READY and job.done == 0 and self._spare > 0:
                more = min(job.req.input_tokens - job.cached - n, per - n, self._spare)
                if more > 0:
                    batch[i] = (job, n + more)
                    self._spare -= more

    def _hold(self, start: float, end: float) -> None:
        self.blocked += end - start
        self.blocked_spans.append(start)
        self.blocked_spans.append(end)

    def _complete(self, batch: list[tuple[Job, int]], end: float, stage_end: float) -> None:
        """The step is over: advance every chunk; finish the requests that are done."""
        self.steps += 1
        finished = []
        per = self._sm_per_token
        for job, n in batch:
            job.done += n
            job.steps += 1
            job.gpu_s += per * n
            if job.done >= job.req.input_tokens - job.cached:
                finished.append(job)
        if not finished:
            return
        running = self.running
        if len(finished) == len(running):
            self.running = []
        else:
            self.running = [j for j in running if j.done < j.req.input_tokens - j.cached]
        for job in finished:  # the step's staging holds all of them (wait_for_save)
            job.store_s = stage_end - end
            job.compute_s = end - job.begin
            self._finish(job)

    # ---- lookup and plan -----------------------------------------------------------------

    def _plan(self, job: Job) -> None:
        """Longest usable prefix, each block from its fastest tier; the policy may cut it."""
        ctx = self.ctx
        blocks = job.keys
        local = self.local
        gpu, host, nvme = local.gpu, local.host, local.nvme
        remote = ctx.remote
        if not ctx.policy.lower_tiers:
            host = nvme = remote = None
        elif ctx.prefetching:  # NVMe and remote are read through prefetches into host
            nvme = remote = None
        # other engines' host tiers: looked at with this engine's own (tiers.peer)
        peer = ctx.peer and host is not None
        src = self._locate(blocks, host is not None, nvme is not None, remote is not None, peer)
        self._count_lookup(
            src, len(blocks), host is not None, nvme is not None, remote is not None, job
        )
        lower = src.count(GPU) != len(src)
        if lower:
            src = src[: ctx.policy.restore_blocks(src, lambda k: self._estimate(job, src, k), job)]
        self._account(job, src)
        if peer:  # which engine serves each peer block (after the policy's cut)
            self._assign_peers(job)
        if lower and job.decision in ("gpu", "cold"):
            job.decision = "skipped"  # the policy chose to recompute what a lower tier held
        if local.uses is not None:
            local.hit(blocks, src)
        # a hit refreshes the blocks in their tiers (a run of blocks from one tier at once)
        stores = (gpu, host, nvme, remote)
        n = len(src)
        i = 0
        while i < n:
            t = src[i]
            j = i + 1
            while j < n and src[j] == t:
                j += 1
            if t == PEER:  # in the holders' host tiers
                self._touch_peers(blocks, job.holders, i, j)
            else:
                stores[t].touch(blocks[i:j])  # type: ignore[union-attr]
            i = j
        if ctx.recorder is not None:  # the lookup's own events are over (_count_lookup)
            ctx.recorder.request = -1

    def _assign_peers(self, job: Job) -> None:
        """The holders of the job's peer blocks (``job.holders``, one per block of
        ``job.src``) and the tokens each serves (``job.peers``), from the last lookup."""
        src = job.src
        if PEER not in src:
            job.holders = []
            job.peers = {}
            return
        holders = self._holders[: len(src)]
        job.holders = holders
        job.peers = self._peer_tokens(job, src, holders)

    def _peer_tokens(self, job: Job, src: list[int], holders: list[int]) -> dict[int, int]:
        """Holder engine index -> tokens its host tier serves for blocks ``src`` (as
        ``_account`` counts them: the prompt's last token is always computed)."""
        B = self.ctx.block_tokens
        last = job.req.input_tokens - 1
        out: dict[int, int] = {}
        for i, t in enumerate(src):
            if t == PEER:
                tok = min(B, last - i * B)
                if tok > 0:
                    h = holders[i]
                    out[h] = out.get(h, 0) + tok
        return out

    def _touch_peers(self, blocks: Sequence[Key], holders: list[int], i: int, j: int) -> None:
        """A hit on blocks ``i:j`` (all peer blocks) refreshes them in their holders' host
        tiers, a run of blocks of one holder at once."""
        engines = self.ctx.engines
        while i < j:
            h = holders[i]
            k = i + 1
            while k < j and holders[k] == h:
                k += 1
            store = engines[h].local.host
            if store is not None:
                store.touch(blocks[i:k])
            i = k

    def _locate(
        self,
        blocks: Sequence[Key],
        host: bool = True,
        nvme: bool = True,
        remote: bool = True,
        peer: bool = True,
    ) -> list[int]:
        """The tier of each block of the longest prefix held anywhere (the fastest tier
        holding it), looking only in the tiers asked for. A block whose write into host or
        NVMe has not landed is not read from there (docs/data-path.md). With
        ``tiers.peer`` (and ``peer``), the lookup order is gpu, host, nvme, peer, remote."""
        if peer and self.ctx.peer:
            return self._locate_peers(blocks, host, nvme, remote)
        local = self.local
        store = self.ctx.remote if remote else None
        in_gpu = local.gpu.blocks
        in_host = local.host.blocks if host and local.host is not None else ()
        in_nvme = local.nvme.blocks if nvme and local.nvme is not None else ()
        now = self.env._now
        # writes still in flight (key -> when it lands); None: all have landed
        wait_h = local.in_flight(HOST, now) if in_host else None
        wait_n = local.in_flight(NVME, now) if in_nvme else None
        src: list[int] = []
        for b in blocks:
            if b in in_gpu:
                src.append(GPU)
            elif b in in_host and (wait_h is None or wait_h.get(b, now) <= now):
                src.append(HOST)
            elif b in in_nvme and (wait_n is None or wait_n.get(b, now) <= now):
                src.append(NVME)
            elif store is not None and store.has(b):
                src.append(REMOTE)
            else:
                break
        return src

    def _locate_peers(
        self, blocks: Sequence[Key], host: bool, nvme: bool, remote: bool
    ) -> list[int]:
        """``_locate`` with the peer tier: a block in none of this engine's tiers asked is
        looked up in the host tiers of the other engines that are up (landed writes only:
        the cluster-wide index sees a block once it is readable), before the remote store.
        Its holder is the first such engine in the order index + 1, index + 2, ... (mod
        engines); the holders go to ``self._holders`` (-1 for a block of another tier)."""
        local = self.local
        store = self.ctx.remote if remote else None
        in_gpu = local.gpu.blocks
        in_host = local.host.blocks if host and local.host is not None else ()
        in_nvme = local.nvme.blocks if nvme and local.nvme is not None else ()
        now = self.env._now
        wait_h = local.in_flight(HOST, now) if in_host else None
        wait_n = local.in_flight(NVME, now) if in_nvme else None
        engines = self.ctx.engines
        n = len(engines)
        # the other engines' host tiers, in the order they are asked
        peers: list[tuple[int, dict[Key, Entry], dict[Key, float] | None]] = []
        for step in range(1, n):
            e = engines[(self.index + step) % n]
            peer_host = e.local.host
            if e.up and peer_host is not None and peer_host.blocks:
                peers.append((e.index, peer_host.blocks, e.local.in_flight(HOST, now)))
        src: list[int] = []
        holders: list[int] = []
        for b in blocks:
            if b in in_gpu:
                src.append(GPU)
            elif b in in_host and (wait_h is None or wait_h.get(b, now) <= now):
                src.append(HOST)
            elif b in in_nvme and (wait_n is None or wait_n.get(b, now) <= now):
                src.append(NVME)
            else:
                holder = -1
                for index, held, wait in peers:
                    if b in held and (wait is None or wait.get(b, now) <= now):
                        holder = index
                        break
                if holder >= 0:
                    src.append(PEER)
                    holders.append(holder)
                    continue
                if store is not None and store.has(b):
                    src.append(REMOTE)
                else:
                    break
            holders.append(-1)
        self._holders = holders
        return src

    def _count_lookup(
        self, src: list[int], n: int, host: bool, nvme: bool, remote: bool, job: Job
    ) -> None:
        """Count one lookup's hits and misses per tier, in blocks. The tiers asked are
        walked in the lookup order (gpu, host, nvme, peer, remote); a block reaches a tier
        when no earlier one served it, and is a hit there when that tier serves it in the
        located prefix ``src`` (before the load policy's cut), else a miss: a block past
        the prefix misses in every tier asked. One pass over ``src``. With
        ``--record-accesses``, the same rows go to the access log (kvsim.results.accesses)."""
        if self.ctx.recorder is not None:
            self._record_lookup(src, host, nvme, remote, job)
        g = h = v = p = r = 0  # blocks found per tier: one pass, no temporaries
        for t in src:
            if t == GPU:
                g += 1
            elif t == HOST:
                h += 1
            elif t == NVME:
                v += 1
            elif t == PEER:
                p += 1
            else:
                r += 1
        hits, misses = self.hits, self.misses
        left = n - g  # blocks that reach the next tier asked
        hits[GPU] += g
        misses[GPU] += left
        if host:
            hits[HOST] += h
            left -= h
            misses[HOST] += left
        if nvme:
            hits[NVME] += v
            left -= v
            misses[NVME] += left
        if host and self._peer_asked:
            hits[PEER] += p
            left -= p
            misses[PEER] += left
        if remote:
            hits[REMOTE] += r
            left -= r
            misses[REMOTE] += left

    def _record_lookup(
        self, src: list[int], host: bool, nvme: bool, remote: bool, job: Job
    ) -> None:
        """The lookup's rows in the access log; its request is the cause of what the
        lookup does to the stores until ``_plan`` ends."""
        ctx = self.ctx
        asked = [GPU]
        if host:
            asked.append(HOST)
        if nvme:
            asked.append(NVME)
        if host and self._peer_asked:
            asked.append(PEER)
        if remote:
            asked.append(REMOTE)
        rec = ctx.recorder
        sizes = job.sizes if job.sizes is not None else ctx.block_sizes(job.req)
        shards = ctx.remote.shards if ctx.remote is not None else 1
        rec.lookup(self.index, job.req.id, job.keys, sizes, src, asked, ctx.ratio, shards)
        rec.request = job.req.id

    def _account(self, job: Job, src: list[int]) -> None:
        """Tokens per source for restoring the blocks ``src`` (at least one token computed),
        and how many of the computed ones are recomputed: in blocks past ``src`` that were
        computed (or prestored) before (``Shared.seen``)."""
        req = job.req
        B = self.ctx.block_tokens
        n_in = req.input_tokens
        tokens = [0, 0, 0, 0, 0, 0]
        for t in src:
            tokens[t] += B
        k = len(src)
        if k:
            last = src[-1]
            overshoot = k * B - n_in  # the last block of a prompt is usually partial
            if overshoot >= 0:
                tokens[last] -= overshoot + 1  # and one token is always computed
        cached = tokens[GPU] + tokens[HOST] + tokens[NVME] + tokens[REMOTE] + tokens[PEER]
        tokens[COMPUTED] = n_in - cached
        keys = job.keys
        nb = len(keys)
        seen = self.ctx.seen
        again = 0
        if k < nb and seen:
            hit = 0  # blocks computed here, seen before (a loop: no set built)
            for i in range(k, nb):
                if keys[i] in seen:
                    hit += 1
            if hit:
                again = hit * B
                if keys[nb - 1] in seen:  # the last block is usually partial
                    again -= nb * B - n_in
                if again > tokens[COMPUTED]:  # (a key repeated in a prompt)
                    again = tokens[COMPUTED]
        job.recomputed = again
        job.src = src
        job.tokens = tokens
        job.cached = cached
        if tokens[HOST] or tokens[NVME] or tokens[REMOTE] or tokens[PEER]:
            job.decision = "restore"
        elif tokens[GPU]:
            job.decision = "gpu"
        else:
            job.decision = "cold"

    def _estimate(self, job: Job, src: list[int], k: int) -> float:
        """Live estimate of restore + compute time when restoring the first ``k`` blocks."""
        ctx = self.ctx
        probe = Job(job.req, job.warmup, job.keys)
        self._account(probe, src[:k])
        s = ctx.kv_bytes
        ratio, decode = ctx.ratio, ctx.decode_s
        worst = 0.0
        tok = probe.tokens
        if tok[HOST]:
            rate = ctx.fabric.estimate_rate((self.h2d,))
            worst = max(worst, ctx.t0[HOST] + tok[HOST] * s * (ratio[HOST] / rate + decode[HOST]))
        if tok[NVME] and self.nvme is not None:
            rate = ctx.fabric.estimate_rate(self.nvme_path)
            worst = max(worst, ctx.t0[NVME] + tok[NVME] * s * (ratio[NVME] / rate + decode[NVME]))
        if tok[REMOTE]:
            links, size, costs, _, cap = remote_get(self, probe)
            rate = ctx.fabric.estimate_rate(links, costs)
            if cap is not None and cap < rate:
                rate = cap
            after = tok[REMOTE] * s * decode[REMOTE]
            if self.nvlink is not None:  # the hand-off to the other ranks
                after += (
                    self.nvlink.backlog(self.env._now)
                    + tok[REMOTE] * s * ratio[REMOTE] * ctx.handoff_share / self.nvlink.bandwidth
                )
            worst = max(worst, ctx.t0[REMOTE] + size / rate + after)
        if tok[PEER]:  # one read per holder, out of its NIC and into this engine's
            engines = ctx.engines
            for h, n in self._peer_tokens(probe, probe.src, self._holders).items():
                rate = ctx.fabric.estimate_rate((engines[h].nic_out, self.nic_in, self.h2d))
                worst = max(worst, ctx.t0[PEER] + n * s * (ratio[PEER] / rate + decode[PEER]))
        new = job.req.input_tokens - probe.cached
        return worst + lone_seconds(ctx.steps, new, probe.cached, ctx.per_step)

    # ---- restore -------------------------------------------------------------------------

    def _fall_back(
        self, job: Job, remote: list[Flow], peers: Sequence[tuple[int, Flow]] = ()
    ) -> None:
        """Client timeout (or a lost server, or a lost peer): give up what the network
        has not brought yet (the GET, and peer reads still on their way), recompute from
        the first block it was to bring on: the first remote block, or the first block of
        a holder whose read did not finish, whichever comes first."""
        fabric = self.ctx.fabric
        for f in remote:
            if f.state != "finished":
                fabric.cancel(f)
        src = job.src
        cut = src.index(REMOTE) if REMOTE in src else len(src)
        if peers:
            lost: list[int] = []
            for h, f in peers:
                if f.state != "finished":
                    fabric.cancel(f)
                    lost.append(h)
            if lost:
                holders = job.holders
                for i in range(cut):
                    if src[i] == PEER and holders[i] in lost:
                        cut = i
                        break
        self._account(job, src[:cut])
        if self.ctx.peer:
            self._assign_peers_cut(job)
        job.decision = "fallback"

    def _assign_peers_cut(self, job: Job) -> None:
        """After a fall back cut ``job.src``: its holders and peer tokens, cut alike."""
        src = job.src
        holders = job.holders[: len(src)]
        job.holders = holders
        job.peers = self._peer_tokens(job, src, holders) if PEER in src else {}

    # ---- finish ----------------------------------------------------------------------------

    def _finish(self, job: Job) -> None:
        ctx = self.ctx
        self._release(job)
        puts = job.puts
        job.puts = None
        if ctx.keeps(job):
            sizes = job.sizes if job.sizes is not None else ctx.block_sizes(job.req)
            rec = ctx.recorder
            if rec is not None:  # the access log: what its admission does is the job's
                rec.request = job.req.id
                self.local.admit(job.keys, sizes)
                rec.request = -1
            else:
                self.local.admit(job.keys, sizes)
            # computed and kept: a later compute is a recompute (the blocks it found were
            # seen before: only the computed ones are new)
            if ctx.track_seen:
                seen = ctx.seen
                keys = job.keys
                for i in range(len(job.src), len(keys)):
                    seen[keys[i]] = None
            if puts:
                self.puts.put(puts)
            if ctx.prefetch_on_session and job.req.session >= 0 and not job.req.last_turn:
                self._prefetch(job, None)  # the session's KV up to host for its next turn
        elif puts:  # its tenant was deleted while it ran: nothing of it is kept
            ctx.remote.release(puts)  # type: ignore[union-attr]
        self.outstanding -= 1
        self.served += 1
        ctx.finished(self, job)

    @property
    def put_queue(self) -> tuple[Batch, ...]:
        """Puts queued or in flight, oldest first."""
        return self.puts.queue()
