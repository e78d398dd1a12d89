"""Prefetches: moving a request's KV from NVMe or the remote store into host memory.

A :class:`Fetch` runs while its request waits (or, ``prefetch.on_session``, during a
session's think time); the restore that follows reads GPU and host only (and, with
``tiers.peer``, other engines' host tiers: a prefetch leaves peer blocks alone, the
restore reads them from the peer directly). The tiers it reads are those marked
``prefetched`` (kvsim.sim.tiers): a direct tier over its ``fetch_route``, the remote store
as a GET (kvsim.sim.get: with the servers' own SSDs, its stages one after the other). What
this module owns: :class:`Fetch` and its :class:`Part` (one transfer, and for a GET the
stages after it). It sees its engine as a :class:`~kvsim.sim.node.Node` and reports back
through the ``done`` callback it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import simpy

from kvsim.cache.eviction import Key
from kvsim.cache.local import REMOTE
from kvsim.kernel.fabric import Flow
from kvsim.sim.get import Stage, get_plan
from kvsim.sim.job import Job
from kvsim.sim.node import Node
from kvsim.sim.shared import Shared


class Part:
    """One transfer of a prefetch in flight, the blocks it lands in host when it ends
    (keys and raw bytes, in prefix order), and for a GET its stages still to start with
    the blocks each lands (remote.ssd: the SSD read lands none); ``get``: it is the GET."""

    __slots__ = ("flow", "get", "keys", "rest", "sizes")

    def __init__(
        self,
        flow: Flow,
        keys: list[Key],
        sizes: list[float],
        rest: list[tuple[Stage, list[Key], list[float]]] | None = None,
        get: bool = False,
    ) -> None:
        self.flow = flow
        self.keys = keys
        self.sizes = sizes
        self.rest = rest
        self.get = get


class Fetch:
    """A prefetch into host memory in flight, driven by its transfers' callbacks.

    Per source tier (NVMe, remote) one flow, each after that tier's T0: NVMe over the
    drives' read link (a direct tier's ``fetch_route``), remote as a GET over the servers
    and the NIC (not PCIe: it lands in host memory; with the servers' own SSDs, its
    stages one after the other). A flow's blocks land in host when it ends; stopped early
    (best effort, a timeout), each flow lands the share of its blocks it has moved, in
    prefix order (an SSD read moves none into host).
    The engine hears of it (``done``) once everything is in or it was stopped.
    """

    __slots__ = ("ctx", "done", "engine", "job", "over", "parts", "reads")

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
        self.parts: list[Part] = []
        # shards the GET reads off the servers' SSDs, promoted into their DRAM when it is
        # in (remote.ssd.promote; empty otherwise)
        self.reads: list[tuple[int, Key]] = []
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
                self.parts.append(Part(flow, keys_by[t], ns))
        if REMOTE in keys_by:
            rk, rs = keys_by[REMOTE], sizes_by[REMOTE]
            tokens = [round(size / run.kv_bytes) for size in rs]
            plan = get_plan(ctx, engine, rk, tokens, sum(tokens), (engine.nic_in,), count=True)
            stages: list[tuple[Stage, list[Key], list[float]]] = []
            for st in plan.stages:
                lands = st.lands
                if lands is None:
                    stages.append((st, rk, rs))
                else:
                    stages.append((st, [rk[i] for i in lands], [rs[i] for i in lands]))
            first, fk, fs = stages[0]
            flow = self._start(first, run.t0[REMOTE] + first.delay)
            self.parts.append(Part(flow, fk, fs, stages[1:] if len(stages) > 1 else None, get=True))
            remote = ctx.remote
            if plan.reads and remote is not None and remote.ssd is not None and remote.ssd.promote:
                self.reads = plan.reads
        if not self.parts:
            self.over = True

    def _start(self, stage: Stage, delay: float) -> Flow:
        """A transfer of the GET (a stage of its plan) after ``delay``."""
        return self.ctx.fabric.transfer(
            stage.links,
            stage.size,
            costs=stage.costs,
            shares=stage.shares,
            delay=delay,
            on_done=self._in,
            cap=stage.cap,
        )

    def _in(self, flow: Flow) -> None:
        """A transfer is in (or was aborted: a server went down)."""
        if self.over:
            return
        for part in self.parts:
            if part.flow is flow:
                self._land(part)
                rest = part.rest
                if rest and flow.state == "finished":  # the GET's next stage starts
                    stage, keys, sizes = rest[0]
                    part.rest = rest[1:] if len(rest) > 1 else None
                    part.keys, part.sizes = keys, sizes
                    part.flow = self._start(stage, stage.delay)
                    return
                if part.get and flow.state == "finished" and self.reads:
                    remote = self.ctx.remote
                    assert remote is not None
                    remote.promote(self.reads)  # Mooncake's promotion on a hit
                    self.reads = []
        if all(p.flow.state != "waiting" and p.flow.state != "active" for p in self.parts):
            self.over = True
            self.parts = []
            self.done(self)

    def _land(self, part: Part) -> None:
        """A flow's blocks into host: all of them, or the share it moved."""
        flow, keys, sizes = part.flow, part.keys, part.sizes
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
            flow = part.flow
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
