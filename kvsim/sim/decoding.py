"""A request that decodes after its prefill (``engine.mode: colocated``): its record.

What this module owns: :class:`DecodeJob`, a :class:`~kvsim.sim.job.Job` with the state
of its decode: tokens out so far (the first one included), the time of each token, its
swap (``engine.preemption: swap``), and what its TTFT was made of when its first token
came out. A request preempted after its first token is looked up, restored and queued
again (recompute) or swapped out and in; its record keeps the TTFT parts as they were at
the first token (``snapshot``, put back by ``restore_first``), so ``ttft_s`` still
decomposes, and counts the later work in ``e2e_s``, ``preemptions``, ``preempted_tokens``
and ``swapped_bytes``. The step loop that drives it is :mod:`kvsim.sim.colocated`.

Token accounting (docs/engine-model.md, "Co-located serving"): ``done`` counts every token
whose KV an attempt computed (prompt chunks, then one a decode step), so ``cached + done``
is the context a decode step's attention reads. A token is sampled when ``cached + done``
reaches ``input_tokens + decoded``: the prompt's end gives the first token, each decode
step one more; after a recompute the prompt and the ``decoded`` tokens are computed again
(the refill), and the step that ends it samples the next.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Final, NamedTuple

from kvsim.cache.eviction import Key
from kvsim.cache.local import TIERS
from kvsim.sim.job import Job
from kvsim.workload.request import Request

_NAN: Final = math.nan


def _copied(value: Any) -> Any:
    """A list copied (the per-tier lists change on a re-run); anything else as is."""
    return list(value) if isinstance(value, list) else value


class TtftParts(NamedTuple):
    """A request's record fields that make up its TTFT, as they were at its first token."""

    queue_wait: float
    load_s: float
    prefetch_s: float
    compute_s: float
    store_s: float
    frontend_s: float
    remote_get_s: float
    remote_ssd_s: float
    remote_ssd_tokens: int
    restore_lookup: float
    restore_queue: float
    restore_read: float
    restore_h2d: float
    tier_s: list[float]
    tokens: list[int]
    decision: str
    recomputed: int
    stalled: bool
    timed_out: bool


class DecodeJob(Job):
    """A request served in co-located mode (see the module docstring)."""

    __slots__ = (
        "decoded",
        "e2e",
        "first_t",
        "itl_p99",
        "itls",
        "last_t",
        "out_target",
        "saved",
        "swap_ready",
        "swap_tokens",
        "swapped_bytes",
        "tpot",
    )

    def __init__(
        self,
        req: Request,
        warmup: bool,
        keys: tuple[Key, ...],
        tiers: int = TIERS,
        warm: bool = False,
    ) -> None:
        # tokens it makes: its output, at least the first token its prefill samples
        self.out_target = req.output_tokens if req.output_tokens > 1 else 1
        super().__init__(req, warmup, keys, tiers, warm)
        self.swapped_bytes = 0.0  # KV copied to host and back (swap), both ways counted
        self.e2e = _NAN  # last token out - arrival
        self.tpot = _NAN  # (last token - first token) / (tokens - 1)
        self.itl_p99 = _NAN  # p99 of its gaps between tokens

    #: Job's fields, then the decode's (kvsim.sim.rows: COLOCATED's columns)
    RECORD: ClassVar[tuple[str, ...]] = (
        *Job.RECORD,
        "e2e",
        "tpot",
        "itl_p99",
        "swapped_bytes",
        "out_target",
    )

    def record(self) -> tuple:
        """Job's record, then the decode's fields."""
        return (
            *Job.record(self),
            self.e2e,
            self.tpot,
            self.itl_p99,
            self.swapped_bytes,
            self.out_target,
        )

    def reset(self) -> None:
        """A fresh attempt (on arrival, or after its engine failed): its output too."""
        super().reset()
        self.decoded = 0  # tokens out so far (the first included)
        self.first_t = _NAN  # when its first token was sampled (before engine.frontend.output)
        self.last_t = _NAN  # when its last token so far was sampled
        self.itls: list[float] = []  # gaps between its tokens, in order
        self.saved: TtftParts | None = None  # TTFT parts at its first token
        self.swap_ready = 0.0  # swapped out: when the copy to host ends
        self.swap_tokens = 0  # swapped out: the KV tokens it has in host memory

    def left(self) -> int:
        """Tokens to compute before its next token is sampled (1 while decoding)."""
        return self.req.input_tokens + self.decoded - self.cached - self.done

    def snapshot(self) -> None:
        """Its first token is out: keep what its TTFT was made of (the per-tier lists
        copied)."""
        self.saved = TtftParts(*[_copied(getattr(self, f)) for f in TtftParts._fields])

    def restore_first(self) -> None:
        """Its last token is out: the TTFT parts as they were at its first token (a
        re-run's lookup, restore and queue wait are after it)."""
        s = self.saved
        if s is None:
            return
        for name, value in zip(TtftParts._fields, s, strict=True):
            setattr(self, name, value)

    def drop(self, reason: str) -> None:
        """No attempt will finish: no decode times either."""
        super().drop(reason)
        self.e2e = self.tpot = self.itl_p99 = _NAN
