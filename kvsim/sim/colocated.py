"""A co-located engine (``engine.mode: colocated``): prefill and decode share its steps.

What this module owns: :class:`ColocatedEngine`, an :class:`~kvsim.sim.engine.Engine`
whose requests (:class:`~kvsim.sim.decoding.DecodeJob`) decode one token a step after
their prefill until their output is out. The simulation picks this class once, when the
mode is colocated; prefill mode runs the engine's own step loop, untouched. The rules
(docs/engine-model.md, "Co-located serving"):

- **Steps** (vLLM's chunked prefill: decode first): each step gives every decoding request
  its token, in the running list's order, then the running prompts their next chunks, then
  (under ``swap``: after swapped requests are brought back) waiting requests in the
  scheduler's order, within ``engine.max_batched_tokens`` and ``engine.max_batch_requests``.
  A decode token is the chunk ``(1, context)``: the step model prices its weight reads and
  its attention over its whole context like any chunk.
- **HBM**: a decoding request holds its prompt's and its output's KV. Under ``hold`` a
  request reserves its prompt and its whole output when admitted (SGLang reserves the
  output too), so nothing is preempted. Under ``recompute`` and ``swap`` KV is allocated as
  tokens are scheduled (a decode step: one token) and the last running request is preempted
  when a request's tokens do not fit (never one already in the step); under ``swap`` a
  preempted decoding request's KV is copied to host memory over the GPU-to-host link (each
  GPU its share), and back over the host-to-GPU link when the pool has room for it
  (swapped requests come back before waiting ones are admitted); otherwise it is
  recomputed (``kvsim.sim.preempt``: its prompt looked up again, then its output tokens).
- **Records**: the first token stamps ``finish_s`` (TTFT) and sends the remote puts; the
  request's record is written, its blocks join the prefix cache and its working KV goes
  back when its last token is out (``e2e_s``, ``tpot_s``, ``itl_p99_s``).
"""

from __future__ import annotations

from typing import Any, Final, cast

import numpy as np

from kvsim.cache.local import GPU, LocalCache
from kvsim.kernel.fabric import Flow
from kvsim.sim.decoding import DecodeJob
from kvsim.sim.engine import PLACE_WAIT, Engine
from kvsim.sim.job import NEW, Job
from kvsim.sim.node import Links
from kvsim.sim.shared import Shared

SWAP: Final = "swap"  # the tag of a swap-in's flow


class ColocatedEngine(Engine):
    """An engine whose requests decode after their prefill (see the module docstring)."""

    def __init__(self, ctx: Shared, index: int, local: LocalCache, links: Links) -> None:
        super().__init__(ctx, index, local, links)
        self.swapped: list[DecodeJob] = []  # swapped out, in the order they left
        self._swapping: dict[Flow, DecodeJob] = {}  # swap-ins in flight
        self.resident_area = 0.0  # integral of requests on the engine over time
        self._res_t = 0.0
        self.itl_ids: list[int] = []  # every finished request's gaps between tokens
        self.itl_values: list[float] = []
        self.swapped_out_bytes = 0.0  # over the d2h link
        self.swapped_in_bytes = 0.0  # over the h2d link

    # ---- residency (Little's law: mean_resident_requests) --------------------------------

    def _resident(self, now: float) -> None:
        """Add the requests on the engine since the last change to their time integral."""
        self.resident_area += self.outstanding * (now - self._res_t)
        self._res_t = now

    def submit(self, job: Job) -> None:
        self._resident(self.env._now)
        super().submit(job)

    def fail(self) -> list[Job]:
        """As an engine's, plus its swapped requests and swap-ins in flight."""
        self._resident(self.env._now)
        held = super().fail()
        extra: list[Job] = [*self.swapped, *self._swapping.values()]
        self.swapped = []
        self._swapping = {}
        self.pool.drop(extra)
        self.outstanding -= len(extra)
        return held + extra

    # ---- forming a step ------------------------------------------------------------------

    def _form(self) -> tuple[list[tuple[Job, int]], float]:
        """The step: decode tokens, then running prompts' chunks, then (swapped requests
        back first) waiting requests; (job, tokens) and the lookup seconds of asynchronous
        restores started (as the engine's)."""
        ctx = self.ctx
        run = ctx.run
        budget = run.budget
        slots = run.max_requests
        per = run.per_step
        kv = run.kv_bytes
        batch: list[tuple[Job, int]] = []
        taken: set[Job] = set()
        running = self.running
        waiting = self.waiting
        chunks = self.chunks  # recompute or swap (None: hold)
        now = self.env._now
        preempted = False
        stop = False  # a request's tokens found no room: the step takes no more
        for decode in (True, False):  # decode tokens first, then prompt chunks
            i = 0
            while not stop and i < len(running) and slots > 0 and budget > 0:
                job = cast(DecodeJob, running[i])
                i += 1
                left = job.left()
                if job in taken or (decode != (job.decoded > 0 and left == 1)):
                    continue
                n = min(min(left, per), budget)
                if chunks is not None:  # its tokens' KV, preempting the last for it
                    more = job.cached - job.tokens[GPU] + job.done + n - job.kv_tokens
                    if more > 0:
                        before = len(running)
                        fits = self._room(job, more, taken, now)
                        preempted = preempted or len(running) < before
                        if not fits:
                            stop = True
                            break
                batch.append((job, n))
                taken.add(job)
                budget -= n
                slots -= 1
        if self.swapped and not preempted and not stop:
            self._swap_in(now)  # (before any waiting request: vLLM v0)
        started: list[Job] = []
        aside: list[Job] = []
        full = False
        lookups = 0.0
        policy = ctx.policy
        while waiting and slots > 0 and budget > 0 and not (preempted or stop or self.swapped):
            self._tick(now)
            job = cast(DecodeJob, waiting.pop())
            job.queue_wait += now - job.enqueued
            if job.state == NEW:
                if job.start != job.start:  # NaN: first time out of the queue
                    job.start = now
                if job.fetch is not None:
                    job.fetch.stop()
                    job.fetch = None
                if full:  # behind one that did not fit: not looked up (vLLM stops there)
                    aside.append(job)
                    continue
                self.lookup.plan(job)
                tok = job.tokens
                # its whole working KV: prompt (less its GPU hits) and output tokens to
                # compute again (recompute); under hold its whole output as well
                held = job.req.input_tokens - tok[GPU] + job.decoded
                if chunks is None:
                    held += job.out_target - 1
                need = held * kv
                if not self.pool.fits(need):
                    full = True
                    aside.append(job)
                    continue
                if chunks is not None and (policy.blocking or job.cached <= tok[GPU]):
                    held = job.cached - tok[GPU] + min(min(job.left(), per), budget)
                    need = held * kv
                got = self._place(job, need, held, chunks is not None, bool(aside), now)
                if got == PLACE_WAIT:
                    aside.append(job)
                    continue
                if got >= 0.0:  # restoring in the background: a later step computes it
                    lookups = max(lookups, got)
                    continue
            else:
                job.begin = now
            n = min(min(job.left(), per), budget)
            batch.append((job, n))
            started.append(job)
            budget -= n
            slots -= 1
        running += started
        if chunks is not None:
            chunks.back_in_line(aside, now)
        else:
            for back in aside:
                back.enqueued = now
                waiting.push(back)
        self._spare = budget
        if preempted and not batch:
            self._again = True
        return batch, lookups

    def _room(self, job: DecodeJob, more: int, taken: set[Job], now: float) -> bool:
        """KV for ``more`` tokens of a running request: while the pool lacks it, preempt the
        last running request (never one already in the step: then the request waits).
        True when it got them."""
        pool = self.pool
        need = more * self.ctx.run.kv_bytes
        running = self.running
        while not pool.fits(need):
            victim = cast(DecodeJob, running[-1])
            if victim is not job and victim in taken:
                return False
            running.pop()
            self._preempt(victim, now)
            if victim is job:
                return False
        chunks = self.chunks
        assert chunks is not None
        chunks.allocate(job, more)
        return True

    def _preempt(self, job: DecodeJob, now: float) -> None:
        """Swap a decoding request out (``swap``), or free it to be computed again."""
        if self.ctx.run.swap and job.decoded > 0 and job.left() == 1:
            self._swap_out(job, now)
            return
        self._send_puts(job)  # a re-run staged them again: they leave, not leak
        chunks = self.chunks
        assert chunks is not None
        chunks.preempt(job, now)

    def _send_puts(self, job: DecodeJob) -> None:
        """The remote puts the request staged leave now (dropped if its tenant is gone)."""
        puts = job.puts
        if not puts:
            return
        job.puts = None
        ctx = self.ctx
        if ctx.listener.keeps(job):
            self.puts.put(puts)
        elif ctx.remote is not None:
            ctx.remote.release(puts)

    # ---- swap -----------------------------------------------------------------------------

    def _swap_out(self, job: DecodeJob, now: float) -> None:
        """Its KV goes to host memory over the GPU-to-host link, each GPU its share (the
        room in HBM is free at once); it may come back once the copy is over."""
        tokens = job.kv_tokens
        nbytes = tokens * self.ctx.run.kv_bytes
        self.pool.release(job)
        job.kv_tokens = 0
        job.swap_tokens = tokens
        job.swap_ready = self.d2h.send(now, nbytes, 1.0 / self.ctx.run.gpus)
        job.swapped_bytes += nbytes
        job.preemptions += 1
        self.swapped_out_bytes += nbytes
        self.swapped.append(job)
        wait = job.swap_ready - now
        self.env.timeout(wait if wait > 0.0 else 0.0).callbacks.append(self._swap_copied)

    def _swap_copied(self, _event: Any) -> None:
        if self.up:
            self._swap_in(self.env._now)

    def _swap_in(self, now: float) -> None:
        """Bring swapped requests back, oldest first, while the pool has room for each and
        for the next decode token of it and of every running request (a watermark, as vLLM
        v0 keeps one, so that it is not swapped out again at once); over the host-to-GPU
        link, it decodes again once its KV is in."""
        kv = self.ctx.run.kv_bytes
        while self.swapped:
            job = self.swapped[0]
            need = job.swap_tokens * kv
            room = need + (1 + len(self.running) + len(self._swapping)) * kv
            if job.swap_ready > now or not self.pool.fits(room):
                return
            self.swapped.pop(0)
            self.pool.take(job, need, self.ctx.metrics)
            job.kv_tokens = job.swap_tokens
            job.swapped_bytes += need
            self.swapped_in_bytes += need
            flow = self.ctx.fabric.transfer((self.h2d,), need, on_done=self._swapped_in, tag=SWAP)
            self._swapping[flow] = job

    def _swapped_in(self, flow: Flow) -> None:
        job = self._swapping.pop(flow, None)
        if job is None or not self.up:  # (lost with its engine: fail took it)
            return
        self.running.append(job)
        self._poke()

    # ---- a step is over ------------------------------------------------------------------

    def _complete(self, batch: list[tuple[Job, int]], end: float, stage_end: float) -> None:
        """Advance every request; a request whose computed tokens reach its next token
        samples it (its prompt's end: the first, TTFT); one with all its tokens out ends."""
        self.steps += 1
        per = self._sm_per_token
        now = self.env._now
        ended: list[DecodeJob] = []
        for item, n in batch:
            job = cast(DecodeJob, item)
            job.done += n
            job.steps += 1
            job.gpu_s += per * n
            if job.cached + job.done < job.req.input_tokens + job.decoded:
                continue
            job.decoded += 1
            if job.decoded == 1:
                self._first(job, end, stage_end)
            else:
                job.itls.append(end - job.last_t)
                job.last_t = end
            if job.decoded >= job.out_target:
                ended.append(job)
        if not ended:
            return
        gone = set(ended)
        self.running = [j for j in self.running if j not in gone]
        for job in ended:
            self._end(job, now)
        if self.swapped:
            self._swap_in(now)

    def _first(self, job: DecodeJob, end: float, stage_end: float) -> None:
        """Its first token: TTFT ends here (its staging copy held the step); its remote
        puts leave; what its TTFT was made of is kept for its record."""
        ctx = self.ctx
        out = ctx.run.output_s
        job.store_s = stage_end - end
        job.compute_s += end - job.begin
        job.served_by = self.index
        job.finish = stage_end + out
        job.frontend_s += out
        job.first_t = job.last_t = stage_end
        self._send_puts(job)
        job.snapshot()

    def _end(self, job: DecodeJob, now: float) -> None:
        """Its last token is out: its record's decode figures, then as a prefill engine's
        request finishes (its KV back, its blocks into the prefix cache)."""
        out = self.ctx.run.output_s
        job.e2e = job.last_t + out - job.req.arrival
        k = job.decoded - 1
        if k > 0:
            job.tpot = (job.last_t - job.first_t) / k
            job.itl_p99 = float(np.percentile(job.itls, 99))
            self.itl_ids += [job.req.id] * k
            self.itl_values += job.itls
        job.itls = []
        job.restore_first()
        self._resident(now)
        self._finish(job)
