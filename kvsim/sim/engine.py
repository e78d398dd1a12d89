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
    record. With a P/D hand-off (cluster.handoff) its KV then goes to the decode pool; its
    working KV stays held, and its record waits, until the hand-off ends.

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

What this module owns: :class:`Engine`, the step loop (its queue, forming a step, timing
it, finishing requests) on top of :class:`~kvsim.sim.node.Node` (its links, tiers and
counters). The rest lives below it: the request record :mod:`kvsim.sim.job`; the lookup
and the plan (which tier serves a block, tokens per tier, the policy's cost estimate)
:mod:`kvsim.sim.lookup`; the working pool and restore slots :mod:`kvsim.sim.pool`;
restores into HBM (and the remote GET's path) :mod:`kvsim.sim.restore`; prefetches into
host :mod:`kvsim.sim.prefetch`; puts to the remote store :mod:`kvsim.sim.puts`; the P/D
hand-off to a decode pool :mod:`kvsim.sim.handoff`; the tiers
as objects :mod:`kvsim.sim.tiers` (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import simpy

from kvsim.cache.local import BACK, GPU, PEER, REMOTE, LocalCache
from kvsim.cache.remote import Batch
from kvsim.kernel.fabric import FlowAborted
from kvsim.physics.frontend import frontend_seconds
from kvsim.physics.step import kernel_copy_seconds
from kvsim.sim.handoff import Handoff
from kvsim.sim.job import LOADING, NEW, READY, Job
from kvsim.sim.lookup import Lookup
from kvsim.sim.node import Links, Node
from kvsim.sim.pool import WorkingPool
from kvsim.sim.preempt import Preemption
from kvsim.sim.prefetch import Fetch
from kvsim.sim.puts import Puts
from kvsim.sim.restore import Restore
from kvsim.sim.scheduler import Waiting
from kvsim.sim.shared import Shared

# what Engine._place says of a request taken from the queue (else: an asynchronous
# restore's lookup cost, >= 0)
PLACE_WAIT: Final = -1.0  # it waits in line (no restore slot)
PLACE_JOIN: Final = -2.0  # it joins the step's batch


class Engine(Node):
    """One prefill instance (a node of ``pcp`` ranks) with its local tiers and links."""

    def __init__(self, ctx: Shared, index: int, local: LocalCache, links: Links) -> None:
        run = ctx.run
        tiers = run.tiers
        super().__init__(
            index,
            local,
            links,
            [t.route(links) for t in tiers],
            [t.fetch_route(links) for t in tiers],
        )
        self.ctx = ctx
        self.env = ctx.env
        self.outstanding = 0  # routed here and not finished
        self.blocked = 0.0  # seconds steps waited for synchronous restores or lookups
        self.served = 0
        self.steps = 0
        self._sm_per_token = 0.0  # the step being run: its SM seconds per chunk token
        self.step_spans: list[float] = []  # steps, from forming to the end of staging
        self.blocked_spans: list[float] = []  # a step waiting on restores / lookups
        self.lookup = Lookup(self, ctx)  # which tier serves each block; the plan
        self.puts = Puts(self, ctx)  # to the remote store
        # cluster.handoff: finished requests' KV to the decode pool (None: off)
        self.handoff: Handoff | None = None
        if ctx.decode is not None:
            self.handoff = Handoff(self, ctx, ctx.decode, self._handed_off)
        # the working KV (running requests' prompts, restores in flight) and restore slots
        self.pool = WorkingPool(local, run.kv_pool, run.cache_slack, run.max_inflight)
        custom = ctx.hooks.scheduler(run.scenario.engine.scheduler)  # a plugin's priority, or None
        # a plugin scheduler ranks requests after a lookup: one not looked up yet is
        # peeked at (Lookup.peek) when it joins the queue, and at each pick if dynamic
        self._peeks = custom is not None
        self.waiting = Waiting(
            run.scheduler,
            run.aging,
            self._cached_prefix,
            custom.bind(self) if custom is not None else None,
            custom.dynamic if custom is not None else False,
            self.lookup.peek if custom is not None else None,
        )
        self.running: list[Job] = []  # computing: picked for a step, chunks left
        # engine.preemption recompute: KV allocated chunk by chunk, preemptions (None: hold)
        self.chunks: Preemption | None = (
            Preemption(ctx, local, self.pool, self.waiting, self._tick) if run.preempts else None
        )
        self._fetching: list[Job] = []  # waiting for their prefetch, out of the queue
        self._copy_mark = 0.0  # _copied() when the step computing began (kernel copies)
        # kernel copies may overlap the step being run: restores in flight or copies
        # moving into HBM when it formed (only this engine's steps start restores)
        self._copy_watch = False
        self._syncing: list[Job] = []  # synchronous restores of the step being formed
        self._sync_left = 0
        self._sync_done: simpy.Event | None = None
        self._spare = 0  # budget the step being formed left unused
        self._again = False  # the step just formed preempted requests (recompute)
        self.queue_area = 0.0  # integral of queue length over time (request-seconds)
        self._queue_t = 0.0
        self._wake: simpy.Event | None = None
        # the simulation's memory check, made every 1,024 steps (None: none)
        self.guard: Callable[[], None] | None = None
        # engine.frontend: when each API-server process is free next (None: no frontend)
        fe = run.frontend
        self._front: list[float] | None = [0.0] * fe.servers if fe is not None else None
        if run.put_policy == BACK:
            local.leave = self.puts.put_back
        self.process = self.env.process(self._loop())

    # ---- queue -----------------------------------------------------------------------

    def local_prefix_blocks(self, blocks: Any, at_least: int = 0) -> int:
        return self.local.prefix_blocks(blocks, at_least)

    def _cached_prefix(self, job: Job) -> int:
        return self.local.prefix_blocks(job.keys)

    def submit(self, job: Job) -> None:
        """A request routed here (new, or re-routed from a failed engine): through the
        frontend first, when the engine has one (engine.frontend)."""
        self.outstanding += 1
        now = self.env._now
        job.submitted = now
        if self._front is not None:
            wait = self._frontend(job, now)
            if wait > 0.0:
                self.env.timeout(wait).callbacks.append(lambda _e: self._admit(job))
                return
        self._admit(job)

    def _frontend(self, job: Job, now: float) -> float:
        """The request's time in the frontend (engine.frontend; docs/engine-model.md): the
        first API-server process free serves it (first come, first served), for a time
        by its prompt; returns the seconds until it reaches the engine's queue."""
        fe = self.ctx.run.frontend
        assert fe is not None
        free = self._front
        assert free is not None
        n = job.req.input_tokens
        work = frontend_seconds(fe, n)
        best = 0
        for i in range(1, len(free)):  # the process free first (the lowest index on a tie)
            if free[i] < free[best]:
                best = i
        start = free[best] if free[best] > now else now
        free[best] = start + work
        job.frontend_s = start + work - now
        return job.frontend_s

    def _admit(self, job: Job) -> None:
        """The request reaches the engine: its prefetch (if any), then the queue."""
        job.submitted = self.env._now
        ctx = self.ctx
        if ctx.run.prefetching and self.up:
            fetch = self._prefetch(job, job)
            if fetch is not None:
                job.fetch = fetch
                if ctx.prefetch_waits:  # it joins the queue once its KV is in host
                    self._fetching.append(job)
                    if ctx.run.prefetch_timeout is not None:
                        self.env.timeout(ctx.run.prefetch_timeout).callbacks.append(fetch.expired)
                    return
        self._push(job)

    def _prefetch(self, job: Job, owner: Job | None) -> Fetch | None:
        """Start fetching into host the blocks of the request's prefix that only tiers read
        through prefetches hold (NVMe, the remote store); None when there are none."""
        src = self.lookup.locate(job.keys)
        hook = self.ctx.prefetch_hook
        if hook is not None and owner is not None and src:  # a plugin: how much to fetch
            src = src[: hook.fetch_blocks(job, src)]
        prefetched = self.ctx.run.prefetched
        for t in src:
            if prefetched[t]:
                break
        else:  # no block of a tier read through prefetches (NVMe, remote)
            return None
        sizes = self.ctx.block_sizes(job.req)
        fetch = Fetch(self, self.ctx, owner, job.keys, sizes, src, self._fetched)
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
            self.pool.release(job)
            self.outstanding -= 1
            self.ctx.listener.displace(job, self)
            return
        now = self.env._now
        self._tick(now)
        job.enqueued = now
        if self._peeks:
            self.lookup.peek(job)
        self.waiting.push(job)
        self._poke()

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
        if self.ctx.run.peer:  # other engines' reads from its host memory are lost with it
            fabric = self.ctx.fabric
            error = FlowAborted(f"engine {self.index} went down")
            for flow in fabric.flows_on(self.nic_out):
                if flow.tag == PEER:
                    fabric.abort(flow, error)  # the reader falls back (Lookup.fall_back)
        held = list(self.running)
        for job in self._syncing:  # synchronous restores of the step: abandon them
            if job.state == LOADING:
                if job.restore is not None:
                    job.restore.cancel()
                    job.restore = None
                self.pool.free_slot()
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
        self.pool.drop(held)  # asynchronous restores still in flight keep theirs
        if self.handoff is not None:  # hand-offs in flight are lost (their requests kept)
            self.handoff.fail()
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
                    elif self._again:  # it preempted its only running request and took
                        self._again = False  # no waiting one: its queue may hold some ready
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
        budget = ctx.run.budget
        slots = ctx.run.max_requests
        per = ctx.run.per_step
        batch: list[tuple[Job, int]] = []
        running = self.running
        waiting = self.waiting
        sjf = ctx.run.scheduler == "sjf"
        if sjf and len(running) > 1:
            running.sort(key=waiting.key)
        started: list[Job] = []  # picked from the queue for this step
        aside: list[Job] = []  # requests whose restore must wait for room
        full = False  # a request did not fit the working pool: later ones wait too
        lookups = 0.0
        now = self.env._now
        policy = ctx.policy
        chunks = self.chunks  # engine.preemption recompute (None: hold)
        preempted = False  # a request was preempted: the step takes no waiting one (vLLM)
        ri = 0
        while slots > 0 and budget > 0:
            if ri < len(running) and not (
                sjf and waiting and waiting.first() < waiting.key(running[ri])
            ):
                job = running[ri]
                ri += 1
                n = min(min(job.req.input_tokens - job.cached - job.done, per), budget)
                if chunks is not None:  # its chunk's blocks, preempting the last for them
                    more = job.cached - job.tokens[GPU] + job.done + n - job.kv_tokens
                    if more > 0:
                        left = len(running)
                        fits = chunks.make_room(job, more, running, now)
                        preempted = preempted or len(running) < left
                        if not fits:
                            break
                batch.append((job, n))
                budget -= n
                slots -= 1
                continue
            if not waiting or preempted:
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
                if full:  # behind one that did not fit: not looked up (vLLM stops there)
                    aside.append(job)
                    continue
                self.lookup.plan(job)
                tok = job.tokens
                # its working KV, held from now until it finishes: the whole prompt but
                # the blocks the prefix cache already holds (GPU hits are shared, as vLLM's)
                held = job.req.input_tokens - tok[GPU]
                need = held * ctx.run.kv_bytes
                if not self.pool.fits(need):
                    full = True  # the working pool is full: the queue waits (as vLLM's)
                    aside.append(job)
                    continue
                if chunks is not None and (policy.blocking or job.cached <= tok[GPU]):
                    # recompute: admitted as the whole fits (vLLM's full-ISL check), it
                    # takes its restored tokens and its first chunk (an asynchronous
                    # restore holds the whole prompt, as under hold: kvsim.sim.preempt)
                    held = job.cached - tok[GPU]
                    held += min(min(job.req.input_tokens - job.cached, per), budget)
                    need = held * ctx.run.kv_bytes
                # (once one restore waits for a slot, later ones wait behind it)
                got = self._place(job, need, held, chunks is not None, bool(aside), now)
                if got == PLACE_WAIT:
                    aside.append(job)
                    continue
                if got >= 0.0:  # restoring in the background: a later step computes it
                    lookups = max(lookups, got)
                    continue
            else:
                job.begin = now
            n = min(min(job.req.input_tokens - job.cached, per), budget)
            batch.append((job, n))
            started.append(job)
            budget -= n
            slots -= 1
        running += started
        if chunks is not None:  # (preempted ones back at the front)
            chunks.back_in_line(aside, now)
        else:
            for job in aside:  # back in line, in their order
                job.enqueued = now
                waiting.push(job)
        self._spare = budget
        if preempted and not batch:  # (form the next step at once: _loop)
            self._again = True
        return batch, lookups

    def _place(
        self, job: Job, need: float, held: int, tracked: bool, queued: bool, now: float
    ) -> float:
        """Give a request taken from the queue its HBM: ``need`` bytes (``held`` tokens,
        recorded where the pool is tracked per chunk: ``tracked``) and, where a lower tier
        serves some of its prefix, a restore slot. Returns :data:`PLACE_WAIT` where it must
        wait (no restore slot, or a restore ahead of it waits: ``queued``),
        :data:`PLACE_JOIN` where it joins this step's batch (its compute begins, or its
        synchronous restore runs in the step), else the lookup's cost of the asynchronous
        restore it started (a later step computes it)."""
        ctx = self.ctx
        restore = job.cached > job.tokens[GPU]
        if restore:
            if queued or not self.pool.can_restore(need):
                return PLACE_WAIT
            self.pool.take_slot()
        self.pool.take(job, need, ctx.metrics)
        if tracked:
            job.kv_tokens = held
            job.requeued = False
        if not restore:
            job.begin = now
            return PLACE_JOIN
        job.state = LOADING
        if ctx.policy.blocking:
            self._syncing.append(job)
            return PLACE_JOIN
        cost = self.lookup.cost(job)
        Restore(self, ctx, job, self._restored_async, self.lookup.fall_back)
        return cost

    def _restored_async(self, job: Job) -> None:
        """An asynchronous restore is in: the request re-joins the queue for its prefill."""
        self.pool.free_slot()
        job.state = READY
        self._push(job)

    def _restore_in_step(self, step_start: float) -> Any:
        """The step's synchronous restores, which the whole batch waits for: one after
        another (LMCache's connector retrieves request by request before the forward
        pass), or, layer-wise, all at once (layer l of every request, then l + 1)."""
        env = self.env
        jobs = self._syncing
        if self.ctx.run.layerwise:
            self._sync_left = len(jobs)
            self._sync_done = env.event()
            for job in jobs:
                Restore(self, self.ctx, job, self._restored_sync, self.lookup.fall_back)
            yield self._sync_done
            return
        for job in jobs:
            job.queue_wait += env._now - step_start  # behind the step's earlier restores
            self._sync_left = 1
            self._sync_done = done = env.event()
            Restore(self, self.ctx, job, self._restored_sync, self.lookup.fall_back)
            yield done

    def _restored_sync(self, job: Job) -> None:
        """A synchronous restore of the step being formed is in."""
        self.pool.free_slot()
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
        steps = ctx.run.steps
        sm = steps.compute_share(chunks)
        step_tokens = 0
        for n, _ in chunks:
            step_tokens += n
        # each request's share of the step's SM time, by its chunk's tokens (_complete)
        self._sm_per_token = sm / step_tokens if step_tokens > 0 else 0.0
        fixed = steps.overhead(chunks, sm)  # CPU work (and a launch wait): not SM work
        c = fixed + sm
        share = ctx.run.copy_sm_share
        if share > 0.0:
            # stores out of HBM (demotions and write-through into host, copies for
            # write-back puts) run as copy kernels too: while those queued before the step
            # run (r seconds of them past its fixed part), its SM work moves at 1 - share
            r = self.d2h.backlog(now) - fixed
            if r > 0.0 and sm > 0.0:
                slow = (1.0 - share) * r  # SM work done while the stores run
                c += (sm / (1.0 - share) if sm <= slow else r + sm - slow) - sm
        L = ctx.run.layers
        # T0 of the slowest tier a synchronous restore streamed from; -1 when none did (a
        # restore that timed out fell back to compute: nothing arrives layer by layer)
        t0 = -1.0
        if ctx.run.layerwise:
            for j in self._syncing:
                for t in j.src:
                    if t != GPU and ctx.run.t0[t] > t0:
                        t0 = ctx.run.t0[t]
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
        self._copy_watch = ctx.run.copy_sm_share > 0.0 and (
            self.pool.inflight > 0 or bool(self.h2d.members)
        )
        if self._copy_watch:
            self._copy_mark = self._copied(end - sm)
        self.busy += sm
        self.gpu_spans.append(end - sm)
        self.gpu_spans.append(end)
        # staging of the blocks the remote store lacks, for requests this step finishes:
        # a copy on rank 0's GPU-to-host link, in line behind the demotions queued there
        stage = 0.0
        if ctx.remote is not None and ctx.run.max_pending_puts and ctx.run.put_policy != BACK:
            for job, n in batch:
                left = job.req.input_tokens - job.cached - job.done  # (colocated: decode <= 0)
                if 0 < left <= n:
                    job.puts = self.puts.stage(job)
                    stage += job.puts.total_bytes()
        if stage <= 0:
            return end, end
        d2h = self.d2h
        share = ctx.stage_share
        encode = 0.0  # the store's codec: bytes so far are as stored
        if ctx.run.codec_on_gpu[REMOTE]:  # the GPU encodes first (the step waits), GPU work
            encode = stage / ctx.run.ratio[REMOTE] * ctx.run.encode_s[REMOTE] * share
            if encode > 0:
                self.busy += encode
                self.gpu_spans.append(end)
                self.gpu_spans.append(end + encode)
        else:  # raw KV is copied; the CPU encodes it in host memory afterwards
            stage /= ctx.run.ratio[REMOTE]
        alone = stage * share / d2h.bandwidth
        if ctx.run.layerwise:  # layer l is stored while layer l+1 computes
            copied = d2h.send(compute_start + c / L + encode, stage, share)
            stage_end = max(copied, end + encode + alone / L)
        else:
            copied = d2h.send(end + encode, stage, share)
            stage_end = copied
        if ctx.run.copy_sm_share == 0.0:  # the copy engines (a kernel's is SM work: below)
            self.copy_spans.append(copied - alone)
            self.copy_spans.append(copied)
        if ctx.run.copy_sm_share > 0.0:  # a kernel gathers the blocks out of HBM: SM work
            work = kernel_copy_seconds(stage * share, d2h.bandwidth, ctx.run.copy_sm_share)
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
        alone = float(self.ctx.run.gpus)
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
            now - self._copy_mark, self.h2d.bandwidth, self.ctx.run.copy_sm_share
        )
        self._copy_mark = now
        return lost

    def _regrow(self, batch: list[tuple[Job, int]]) -> None:
        """A synchronous restore that fell back (timeout, lost server) left more to
        compute than its chunk was sized for: grow the chunk into the unused budget."""
        per = self.ctx.run.per_step
        for i, (job, n) in enumerate(batch):
            if job.state == READY and job.done == 0 and self._spare > 0:
                more = min(min(job.req.input_tokens - job.cached - n, per - n), self._spare)
                if self.chunks is not None:  # recompute: within the blocks it holds
                    more = min(more, job.kv_tokens - (job.cached - job.tokens[GPU] + n))
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
            job.compute_s += end - job.begin  # (a preempted attempt's added before)
            self._finish(job)

    # ---- finish ----------------------------------------------------------------------------

    def _finish(self, job: Job) -> None:
        """Its first token is out: its blocks join the prefix cache, its puts leave. With a
        P/D hand-off its working KV stays held until the hand-off ends (``_handed_off``)."""
        ctx = self.ctx
        handoff = self.handoff
        if handoff is None:
            self.pool.release(job)
        puts = job.puts
        job.puts = None
        if ctx.listener.keeps(job):
            sizes = job.sizes if job.sizes is not None else ctx.block_sizes(job.req)
            metrics = ctx.metrics
            if metrics.blocks:  # block events: what its admission does is the job's
                metrics.cause = job.req.id
                self.local.admit(job.keys, sizes)
                metrics.cause = -1
            else:
                self.local.admit(job.keys, sizes)
            # computed and kept: a later compute is a recompute (the blocks it found were
            # seen before: only the computed ones are new)
            if ctx.run.track_seen:
                seen = ctx.seen
                keys = job.keys
                for i in range(len(job.src), len(keys)):
                    seen[keys[i]] = None
            if puts:
                self.puts.put(puts)
            if ctx.run.prefetch_on_session and job.req.session >= 0 and not job.req.last_turn:
                self._prefetch(job, None)  # the session's KV up to host for its next turn
        elif puts:  # its tenant was deleted while it ran: nothing of it is kept
            ctx.remote.release(puts)  # type: ignore[union-attr]
        self.outstanding -= 1
        self.served += 1
        ctx.listener.finished(self, job)
        if handoff is not None:
            handoff.ship(job)

    def _handed_off(self, job: Job) -> None:
        """Its P/D hand-off is over (or lost with the engine): its working KV goes back,
        and a prompt waiting for the room may start."""
        self.pool.release(job)
        self._poke()

    def put_queue(self) -> tuple[Batch, ...]:
        """Puts queued or in flight, oldest first."""
        return self.puts.queue()
