"""The P/D hand-off: a finished request's KV shipped to the decode pool (``cluster.handoff``).

In disaggregated serving a prefill instance's finished request is read by a decode
instance: vLLM's NixlConnector (the decode side pulls every prompt block it lacks; the
prefill's ``request_finished`` delays freeing the blocks until the decode side has read
them), SGLang's PD disaggregation over Mooncake's transfer engine or NIXL (the prefill
polls its sender and releases the request once the transfer is done), llm-d (vLLM with
NIXL). Here each hand-off is one flow over the engine's ``nic_out`` (shared max-min with
remote puts and peer reads out of this engine) and the decode pool's receive link
(``decode``, one for all engines). It starts when the request's prefill ends (its last
step and staging: not layer by layer), waits ``latency`` (plus a transfer engine's delay,
kvsim.physics.transfer), then moves the prompt's KV, ``input_tokens x kv_bytes``, at its
max-min share of both links (at most the transfer engine's cap). Alone::

    handoff_s = latency [+ delay] + input_tokens x kv_bytes / min(nic_out, decode [, cap])

The request's working KV stays reserved in its engine's pool meanwhile (its blocks joined
the prefix cache at the first token, as without a hand-off); when the last byte is in, the
engine gets the request back (``done``: the working KV is released) and its record is
written, with ``handoff_s`` and ``handoff_bytes``. TTFT is not changed: it ended at the
first token.

An engine that fails loses its hand-offs: the flows are aborted, the requests (which have
their first token) are recorded as finished with ``handoff_s`` NaN and the bytes moved
so far. A run stopped by ``run.max_time`` records the hand-offs still in flight the same
way (``flush``).

What this module owns: :class:`Handoff`, one per engine, which sees its engine as a
:class:`~kvsim.sim.node.Node`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

from kvsim.kernel.fabric import Flow, FlowAborted, Link
from kvsim.physics.transfer import transfer_terms
from kvsim.sim.job import Job
from kvsim.sim.node import Node
from kvsim.sim.shared import Shared

_NAN: Final = math.nan
HANDOFF: Final = "handoff"  # the tag of a hand-off's flow


class Handoff:
    """One engine's hand-offs in flight (see the module docstring)."""

    __slots__ = ("_flows", "ctx", "done", "engine", "link")

    def __init__(self, engine: Node, ctx: Shared, link: Link, done: Callable[[Job], None]) -> None:
        """``link``: the decode pool's receive link; ``done``: what the engine does with a
        request whose hand-off is over (or lost), before its record is written."""
        self.engine = engine
        self.ctx = ctx
        self.link = link
        self.done = done
        self._flows: dict[Flow, Job] = {}  # in flight, in the order they started

    def ship(self, job: Job) -> None:
        """Start the hand-off of a request whose prefill has just ended."""
        ctx = self.ctx
        run = ctx.run
        ho = run.handoff
        assert ho is not None
        n = job.req.input_tokens
        nbytes = n * run.kv_bytes
        delay = ho.latency
        cap: float | None = None
        te = run.handoff_transfer
        if te is not None:  # the transfer engine's setup and batches, its operations' cap
            wait, most = transfer_terms(te, n, nbytes, run.pcp, run.handoff_ops)
            delay += wait
            if most < math.inf:
                cap = most
        job.handoff_s = ctx.env._now  # its start, until it ends (_landed)
        # latency=False: ``latency`` is the whole fixed part, the links' own included
        flow = ctx.fabric.transfer(
            (self.engine.nic_out, self.link),
            nbytes,
            delay=delay,
            latency=False,
            on_done=self._landed,
            tag=HANDOFF,
            cap=cap,
        )
        self._flows[flow] = job

    def _landed(self, flow: Flow) -> None:
        """A hand-off is over, or was aborted (its engine failed)."""
        job = self._flows.pop(flow)
        if flow.state == "finished":
            job.handoff_s = flow.end - job.handoff_s
            job.handoff_bytes = flow.size
        else:
            job.handoff_s = _NAN
            job.handoff_bytes = flow.size - max(flow.remaining, 0.0)
        self.done(job)
        self.ctx.metrics.request(job)

    def fail(self) -> None:
        """The engine went down: its hand-offs are lost (each request is recorded)."""
        if not self._flows:
            return
        error = FlowAborted(f"engine {self.engine.index} went down")
        fabric = self.ctx.fabric
        for flow in list(self._flows):
            fabric.abort(flow, error)

    def flush(self) -> None:
        """The run is over: record the requests whose hand-off is still in flight
        (``handoff_s`` NaN, the bytes moved by now), leaving the engine and links as they are."""
        now = self.ctx.env._now
        for flow, job in self._flows.items():
            moved = flow.size - flow.remaining
            if flow.state == "active" and now > flow.since:
                moved += flow.rate * (now - flow.since)
            job.handoff_s = _NAN
            job.handoff_bytes = min(max(moved, 0.0), flow.size)
            self.ctx.metrics.request(job)
        self._flows = {}

    @property
    def in_flight(self) -> int:
        """Hand-offs in flight."""
        return len(self._flows)
