"""An engine's waiting queue, ordered by its scheduler (``engine.scheduler``).

- ``fcfs``: arrival order (vLLM's default). A request back from an asynchronous restore
  re-joins at its arrival position.
- ``sjf``: shortest remaining prompt first, with aging so that nothing starves: a request
  that has waited ``w`` seconds counts ``aging x w`` tokens shorter. Its priority
  ``remaining - aging x (now - arrival)`` orders requests the same way at every ``now``
  as the fixed key ``remaining / aging + arrival``, so the queue is a plain heap.
  (``aging: 0`` is pure shortest-first.)
- ``lpm``: longest cached prefix first (SGLang's cache-aware policy): at each pick the
  request whose prompt has the longest prefix in the engine's local tiers goes first,
  ties in arrival order. Like SGLang, a queue longer than 128 falls back to ``fcfs``
  (matching every waiting prompt at every step would cost more than it gains).
- a plugin's name (:class:`kvsim.plugins.SchedulingPolicy`): the priority it gives a
  request when it joins the queue, smaller first, ties in arrival order. A request not
  looked up yet is first looked up without side effects (the engine's ``peek``: its
  cached tokens as the lookup would find them now), so the priority sees its cached
  tokens under every load policy. A policy with ``dynamic = True`` is asked again for
  every waiting request at each pick (with a fresh peek for those not looked up yet; a
  request back from an asynchronous restore keeps the tokens it restored).

Under every order, a request preempted (``engine.preemption: recompute``) goes to the front
of the queue (:meth:`Waiting.push_front`, vLLM's ``prepend_request``): the last one put
there is the first out, and requests already computing still go before it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from kvsim.sim.job import Job

LPM_MAX_QUEUE: Final = 128  # SGLang: above this, lpm falls back to fcfs
# the key (and arrival) of an entry at the front of the queue: before every other
FRONT: Final = -math.inf


class Waiting:
    """Requests waiting for a step, in the scheduler's order."""

    __slots__ = ("_heap", "_seq", "aging", "custom", "dynamic", "kind", "peek", "prefix")

    def __init__(
        self,
        kind: str,
        aging: float,
        prefix: Callable[[Job], int],
        custom: Callable[[Job], float] | None = None,
        dynamic: bool = False,
        peek: Callable[[Job], None] | None = None,
    ) -> None:
        self.kind = kind
        self.aging = aging
        self.prefix = prefix  # lpm: cached prefix blocks of a request on this engine
        # a plugin scheduler: a request's priority when it joins (smaller first)
        self.custom = custom
        # a plugin scheduler asked again at each pick (its ``dynamic``), and the engine's
        # side-effect-free lookup that sets ``job.cached`` of a request not looked up yet
        self.dynamic = dynamic and custom is not None
        self.peek = peek
        self._heap: list[tuple[float, float, int, Job]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def key(self, job: Job) -> tuple[float, float]:
        """A request's place in line: (key, arrival), smaller first."""
        req = job.req
        if self.custom is not None:
            return self.custom(job), req.arrival
        if self.kind == "sjf":
            remaining = req.input_tokens - job.cached - job.done
            key = remaining / self.aging + req.arrival if self.aging > 0 else float(remaining)
            return key, req.arrival
        return req.arrival, req.arrival

    def first(self) -> tuple[float, float]:
        """The place in line of the request :meth:`pop` gives next (fcfs, sjf); a request
        at the front waits for those already computing (as in vLLM): the last place."""
        entry = self._heap[0]
        if entry[0] == FRONT:
            return math.inf, math.inf
        return entry[0], entry[1]

    def push(self, job: Job) -> None:
        key, arrival = self.key(job)
        self._seq += 1
        heappush(self._heap, (key, arrival, self._seq, job))

    def push_front(self, job: Job) -> None:
        """Put a preempted request at the front, before every other (the last one put there
        comes out first)."""
        self._seq += 1
        heappush(self._heap, (FRONT, FRONT, -self._seq, job))

    def pop(self) -> Job:
        heap = self._heap
        if self.dynamic and len(heap) > 1:
            self._rekey()
        if self.kind != "lpm" or len(heap) == 1 or len(heap) > LPM_MAX_QUEUE:
            return heappop(heap)[3]
        if heap[0][0] == FRONT:
            return heappop(heap)[3]
        prefix = self.prefix
        best = 0
        best_len = -1
        for i, entry in enumerate(heap):
            n = prefix(entry[3])
            if n > best_len or (n == best_len and entry[:3] < heap[best][:3]):
                best, best_len = i, n
        entry = heap[best]
        last = heap.pop()
        if best < len(heap):
            heap[best] = last
            heapify(heap)
        return entry[3]

    def _rekey(self) -> None:
        """A dynamic plugin scheduler: every waiting request's priority, now (each
        request not looked up yet peeked again first)."""
        custom, peek = self.custom, self.peek
        assert custom is not None
        heap = self._heap
        for i, (key, arrival, seq, job) in enumerate(heap):
            if key == FRONT:  # at the front: stays there
                continue
            if peek is not None:
                peek(job)
            heap[i] = (custom(job), arrival, seq, job)
        heapify(heap)

    def jobs(self) -> list[Job]:
        """Every waiting request, in queue order (the heap's key order)."""
        return [entry[3] for entry in sorted(self._heap, key=lambda e: e[:3])]

    def clear(self) -> None:
        self._heap.clear()
