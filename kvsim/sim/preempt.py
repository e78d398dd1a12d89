"""``engine.preemption: recompute``: vLLM V1's KV allocation chunk by chunk, and its
preemption of the last running request when a chunk's blocks do not fit.

What this module owns: :class:`Preemption`, one per engine under ``recompute`` (none under
``hold``, which reserves a request's whole prompt when it is admitted: the engine's
default, untouched). The rule (docs/engine-model.md, "Preemption"; vLLM's
``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule`` and ``_preempt_request``):

- a request is admitted when its whole working KV fits what the pool has free (vLLM's
  full-sequence check, ``scheduler_reserve_full_isl``), and holds working KV for what it
  has computed and what it computes next: admitted, its restored tokens and its first
  chunk (GPU hits are shared, as under ``hold``); each later step, its next chunk
  (``KVCacheManager.allocate_slots``). An asynchronous restore holds its request's whole
  prompt from its start, as under ``hold``: a request waiting for its load cannot be
  preempted, and holding less could deadlock the engine;
- when the pool cannot give a running request's next chunk its blocks, the last request in
  the running list is preempted (``self.running.pop()``; the engine's order: start order,
  under sjf its key), again until the chunk fits or the request itself was preempted
  (then the step takes no more); a step that preempted takes no waiting request (vLLM
  schedules the waiting queue only in a step without preemptions);
- a preempted request's blocks go back to the pool; its full blocks (hits, restored and
  computed ones) are kept as a finished request's are, in the GPU prefix cache (vLLM frees
  them into its prefix cache, where a re-run finds those not evicted since); it goes to
  the front of the waiting queue with nothing computed, and is looked up again when picked.

Its records: ``preemptions`` and ``preempted_tokens`` (the tokens its preempted attempts
computed, work lost); its compute time counts the preempted attempts' too, and its restore
time every restore, so its TTFT still decomposes (tests/test_preemption.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

from kvsim.cache.local import LocalCache
from kvsim.sim.job import NEW, Job
from kvsim.sim.pool import WorkingPool
from kvsim.sim.scheduler import Waiting
from kvsim.sim.shared import Shared

_NAN: Final = math.nan


class Preemption:
    """One engine's chunk-by-chunk KV allocation and its preemptions (module docstring)."""

    __slots__ = ("block_tokens", "ctx", "kv_bytes", "local", "pool", "tick", "waiting")

    def __init__(
        self,
        ctx: Shared,
        local: LocalCache,
        pool: WorkingPool,
        waiting: Waiting,
        tick: Callable[[float], None],
    ) -> None:
        """``tick(now)``: the engine's queue-length integral, brought up to ``now`` before
        a preempted request joins its queue."""
        self.ctx = ctx
        self.local = local
        self.pool = pool
        self.waiting = waiting
        self.tick = tick
        self.kv_bytes: float = ctx.run.kv_bytes
        self.block_tokens: int = ctx.run.block_tokens

    def allocate(self, job: Job, tokens: int) -> None:
        """``tokens`` more tokens of working KV for the request (the pool has room)."""
        self.pool.take(job, tokens * self.kv_bytes, self.ctx.metrics)
        job.kv_tokens += tokens

    def make_room(self, job: Job, more: int, running: list[Job], now: float) -> bool:
        """Blocks for ``more`` tokens of a running request's next chunk: while the pool
        lacks them, preempt the last request of ``running`` (``job`` itself when it is
        the last). True when the chunk got its blocks."""
        need = more * self.kv_bytes
        pool = self.pool
        while not pool.fits(need):
            victim = running.pop()
            self.preempt(victim, now)
            if victim is job:
                return False
        self.allocate(job, more)
        return True

    def back_in_line(self, aside: list[Job], now: float) -> None:
        """Requests a step set aside (no room, or waiting for a restore slot) go back in
        line in their order; preempted ones waiting to be computed again, at the front."""
        waiting = self.waiting
        front: list[Job] = []
        for job in aside:
            job.enqueued = now
            if job.requeued:
                front.append(job)
            else:
                waiting.push(job)
        for job in reversed(front):
            waiting.push_front(job)

    def preempt(self, job: Job, now: float) -> None:
        """Free the request's working KV, keep its full blocks in the prefix cache, and put
        it at the front of the queue to be computed again."""
        ctx = self.ctx
        # its full blocks (engine.mode colocated: of its prompt; decoded tokens have no keys)
        full = min((job.cached + job.done) // self.block_tokens, len(job.keys))
        self.pool.release(job)  # first: the room goes back to the prefix cache
        job.kv_tokens = 0
        if full > 0 and ctx.listener.keeps(job):
            keys = job.keys
            sizes = job.sizes if job.sizes is not None else ctx.block_sizes(job.req)
            # last block first, so that the prefix cache evicts the tail first (vLLM frees
            # a request's blocks in reverse order for this)
            tail = keys[full - 1 :: -1]
            metrics = ctx.metrics
            if metrics.blocks:  # block events: what the admission does is the job's
                metrics.cause = job.req.id
                self.local.admit(tail, sizes[full - 1 :: -1])
                metrics.cause = -1
            else:
                self.local.admit(tail, sizes[full - 1 :: -1])
            if ctx.run.track_seen:  # computed and kept: a later compute is a recompute
                seen = ctx.seen
                for i in range(len(job.src), full):
                    seen[keys[i]] = None
        job.preemptions += 1
        job.preempted_tokens += job.done
        job.compute_s += now - job.begin  # the attempt's compute, up to its preemption
        job.begin = _NAN
        job.done = 0
        job.state = NEW
        job.requeued = True
        self.tick(now)
        job.enqueued = now
        self.waiting.push_front(job)
