"""Prefetches: moving a request's KV from NVMe or the remote store into host memory.

A :class:`Fetch` runs while its request waits (or, ``prefetch.on_session``, during a
session's think time); the restore that follows reads GPU and host only (and, with
``tiers.peer``, other engines' host tiers: a prefetch leaves peer blocks alone, the
restore reads them from the peer directly). The tiers it reads are those marked
``prefetched`` (kvsim.sim.tiers): a direct tier over its ``fetch_route``, the remote store
as a GET. What this module owns: :class:`Fetch`. It sees its engine as a
:class:`~kvsim.sim.node.Node` and reports back through the ``done`` callback it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import simpy

from kvsim.cache.eviction import Key
from kvsim.cache.local import REMOTE
from kvsim.kernel.fabric import Flow
from kvsim.sim.job import Job
from kvsim.sim.node import Node
from kvsim.sim.restore import engine_terms, get_flow
from kvsim.sim.shared import Shared


class Fetch:
    """A prefetch into host memory in flight, driven by its transfers' callbacks.

    Per source tier (NVMe, remote) one flow, each after that tier's T0: NVMe over the
    drives' read link (a direct tier's ``fetch_route``), remote as a GET over the servers
    and the NIC (not PCIe: it lands in host memory). A flow's blocks land in host when it
    ends; stopped early (best effort, a timeout), each flow lands the share of its blocks
    it has moved, in prefix order.
    The engine hears of it (``done``) once everything is in or it was stopped.
    """

    __slots__ = ("ctx", "done", "engine", "job", "over", "parts")

    def __init__(
        self,
        engine: Node,
        ctx: Shared,
        job: Job | None,
        keys: Sequence[Key],
        sizes: Sequence[float],
        src: Sequence[int],
        done: Callable[[Fetch], None],
    ) -> None:
        self.engine = engine
        self.ctx = ctx
        self.job = job
        self.done = done
        self.over = False
        run = ctx.run
        fabric = ctx.fabric
        self.parts: list[tuple[Flow, list[Key], list[float]]] = []
        # the blocks of each tier it reads (by tier code), in prefix order
        fetched = run.prefetched
        keys_by: dict[int, list[Key]] = {}
        sizes_by: dict[int, list[float]] = {}
        for key, size, t in zip(keys, sizes, src, strict=False):  # src: the prefix
            if fetched[t]:
                if t in keys_by:
                    keys_by[t].append(key)
                    sizes_by[t].append(size)
                else:
                    keys_by[t] = [key]
                    sizes_by[t] = [size]
        routes = engine.fetch_routes
        for t in run.fetched:  # a direct tier: one flow over its route into host memory
            if t in keys_by and routes[t]:
                ns = sizes_by[t]
                size = sum(ns) * run.ratio[t]  # as stored (its codec)
                flow = fabric.transfer(routes[t], size, delay=run.t0[t], on_done=self._in)
                self.parts.append((flow, keys_by[t], ns))
        if REMOTE in keys_by:
            rk, rs = keys_by[REMOTE], sizes_by[REMOTE]
            tokens = [round(size / run.kv_bytes) for size in rs]
            links, size, costs, shares, cap = get_flow(
                ctx, engine, rk, tokens, (engine.nic_in,), count=True
            )
            delay, cap = engine_terms(run, sum(tokens), shares, cap)
            flow = fabric.transfer(
                links,
                size,
                costs=costs,
                shares=shares,
                delay=run.t0[REMOTE] + delay,
                on_done=self._in,
                cap=cap,
            )
            self.parts.append((flow, rk, rs))
        if not self.parts:
            self.over = True

    def _in(self, flow: Flow) -> None:
        """A transfer is in (or was aborted: a server went down)."""
        if self.over:
            return
        for part in self.parts:
            if part[0] is flow:
                self._land(part)
        if all(f.state != "waiting" and f.state != "active" for f, _, _ in self.parts):
            self.over = True
            self.parts = []
            self.done(self)

    def _land(self, part: tuple[Flow, list[Key], list[float]]) -> None:
        """A flow's blocks into host: all of them, or the share it moved."""
        flow, keys, sizes = part
        n = len(keys)
        if flow.state != "finished":
            moved = flow.size - max(flow.remaining, 0.0)  # 0 if it never started
            n = int(n * moved / flow.size + 1e-9) if flow.size > 0 else n
        if n:
            self.engine.local.prefetched(keys[:n], sizes[:n])

    def stop(self, land: bool = True) -> None:
        """Stop the transfers still going; what they moved lands (unless ``land`` is
        false: the engine failed). The engine is not told."""
        if self.over:
            return
        self.over = True
        fabric = self.ctx.fabric
        for part in self.parts:
            flow = part[0]
            if flow.state == "waiting" or flow.state == "active":
                fabric.cancel(flow)
                if land:
                    self._land(part)
        self.parts = []

    def expired(self, _event: simpy.Event) -> None:
        """``prefetch.timeout`` is up: go with what has arrived."""
        if not self.over:
            self.stop()
            self.done(self)
