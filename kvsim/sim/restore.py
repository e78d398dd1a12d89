"""Restores: moving a request's cached KV from the lower tiers into GPU HBM.

A :class:`Restore` starts one transfer per tier the request reads (after that tier's T0)
on the fabric and tells its engine when all of them are in (or the remote part was given
up). ``remote_get``/``get_flow`` build the remote GET: the servers holding the shards, the
engine's NIC and PCIe, and (unsharded) the issuing rank's client path.

Where a new tier kind plugs in: its transfer (links, bytes, T0) in ``Restore.__init__``,
what happens once its bytes are in (decode, hand-off) in ``Restore.settled``, and its
bytes and time in ``Restore._record``. The engine's lookup (``Engine._locate``) decides
which blocks a tier serves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import simpy

from kvsim.cache.eviction import Key
from kvsim.cache.local import HOST, NVME, REMOTE
from kvsim.kernel.fabric import Flow, Link
from kvsim.physics.step import kernel_copy_seconds

if TYPE_CHECKING:
    from kvsim.sim.engine import Engine
    from kvsim.sim.job import Job


class Restore:
    """A request's restore in flight, driven by its transfers' callbacks (no process).

    Per tier, T0 then a transfer on the fabric: host and NVMe each one flow, the remote
    GET one lockstep flow over the servers holding the ranks' shards (it may stall first).
    A client timeout, or the loss of a server mid-GET, abandons the remote part: the rest
    of the prompt from the first remote block on is recomputed. ``then(job)`` runs once
    every transfer is in (or, for an abandoned GET, every local one).
    """

    __slots__ = (
        "abandoned",
        "decoded",
        "decoding",
        "engine",
        "job",
        "local",
        "over",
        "remote",
        "start",
        "then",
    )

    def __init__(self, engine: Engine, job: Job, then: Callable[[Job], object]) -> None:
        self.engine = engine
        self.job = job
        self.then = then
        self.abandoned = False
        self.decoding = 0  # tiers whose bytes are in and not yet usable (decode, hand-off)
        self.decoded = [0.0, 0.0, 0.0, 0.0]  # seconds per tier from arrival to usable
        self.over = True  # until every transfer is started
        ctx = engine.ctx
        fabric = ctx.fabric
        env = engine.env
        s = ctx.kv_bytes
        t0 = ctx.t0
        ratio = ctx.ratio  # a tier's codec moves fewer bytes
        self.start = env.now
        tokens = job.tokens
        job.restore = self
        self.local: list[tuple[int, Flow]] = []
        if tokens[HOST]:
            self.local.append(
                (
                    HOST,
                    fabric.transfer(
                        (engine.h2d,),
                        tokens[HOST] * s * ratio[HOST],
                        delay=t0[HOST],
                        on_done=self.settled,
                        tag=HOST,
                    ),
                )
            )
        if tokens[NVME]:
            assert engine.nvme is not None
            self.local.append(
                (
                    NVME,
                    fabric.transfer(
                        engine.nvme_path,
                        tokens[NVME] * s * ratio[NVME],
                        delay=t0[NVME],
                        on_done=self.settled,
                        tag=NVME,
                    ),
                )
            )
        self.remote: list[Flow] = []
        if tokens[REMOTE]:
            links, size, costs, shares, cap = remote_get(engine, job)
            stall = ctx.draw_stall()
            job.stalled = stall > 0
            self.remote.append(
                fabric.transfer(
                    links,
                    size,
                    costs=costs,
                    shares=shares,
                    delay=t0[REMOTE] + stall,
                    on_done=self.settled,
                    cap=cap,
                    tag=REMOTE,
                )
            )
            if ctx.timeout is not None:
                env.timeout(t0[REMOTE] + ctx.timeout).callbacks.append(self.timed_out)
        self.over = False
        self._check()

    def settled(self, flow: Flow) -> None:
        """A transfer is in, or was aborted (a server holding the shards went down)."""
        if self.over:
            return
        if flow.state != "finished":
            if not self.abandoned:
                self._abandon()
        else:
            engine = self.engine
            tier = flow.tag
            assert isinstance(tier, int)
            ctx = engine.ctx
            raw = self.job.tokens[tier] * ctx.kv_bytes
            d = raw * ctx.decode_s[tier]  # the tier's codec: decode before it can be used
            now = engine.env.now
            if d > 0 and ctx.codec_on_gpu[tier]:  # GPU work
                engine.busy += d
                engine.gpu_spans.append(now)
                engine.gpu_spans.append(now + d)
            nvlink = engine.nvlink
            if tier == REMOTE and nvlink is not None:
                # unsharded: the rank that issued the GET hands the others their parts
                stored = raw * ctx.ratio[REMOTE]
                sent = nvlink.send(now, stored, ctx.handoff_share)
                # a collective over NVLink runs as kernels on the GPUs: GPU work for its
                # NVLink time (docs/engine-model.md, "Restores cost the GPU")
                work = stored * ctx.handoff_share / nvlink.bandwidth
                engine.busy += work
                engine.gpu_spans.append(sent - work)
                engine.gpu_spans.append(sent)
                # one rank copied the whole GET into its HBM (engine._copied)
                assert flow.shares is not None
                engine.copied_alone += (ctx.gpus - 1) * flow.size * flow.shares[-1]
                d += sent - now
            if d > 0:
                self.decoding += 1
                self.decoded[tier] = d
                engine.env.timeout(d).callbacks.append(self._decoded)
                return
        self._check()

    def _decoded(self, _event: simpy.Event) -> None:
        self.decoding -= 1
        if not self.over:
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
        fabric = self.engine.ctx.fabric
        for _, f in self.local:
            fabric.cancel(f)
        for f in self.remote:
            fabric.cancel(f)

    def _abandon(self) -> None:
        self.abandoned = True
        self.engine._fall_back(self.job, self.remote)

    def _check(self) -> None:
        if self.decoding:
            return
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
        # the copy engines' time (``gpu_copy_busy_frac``); kernel copies are SM work
        # instead (counted as the engine's ``busy``), so they are left out here
        copies = engine.copy_spans if engine.ctx.copy_sm_share == 0.0 else []
        for tier, f in self.local:
            job.tier_s[tier] = f.end + self.decoded[tier] - start
            got[tier] = f.size
            copies.append(f.start)
            copies.append(f.end)
        remote = self.remote
        if remote:
            ends = [f.end for f in remote if f.state == "finished"]
            end = max(ends) if len(ends) == len(remote) else now
            job.tier_s[REMOTE] = min(end + self.decoded[REMOTE], now) - start
            t0 = engine.ctx.t0[REMOTE]
            job.remote_get_s = max(end - start - t0, 0.0)  # 0: abandoned within T0
            moved = 0.0  # bytes that reached the engine: progress x this engine's shares
            for f in remote:
                assert f.shares is not None  # remote reads are lockstep flows
                # progress x the bytes per unit on the engine's own links (the last ones)
                moved += (f.size - max(f.remaining, 0.0)) * f.shares[-1]
                if f.start == f.start:  # it began moving (NaN: abandoned before)
                    copies.append(f.start)
                    copies.append(f.end if f.state == "finished" else now)
            got[REMOTE] = moved
        job.load_s = now - start
        share = engine.ctx.copy_sm_share
        if share > 0.0:  # copy kernels moved them into HBM: SM work (not under GDS)
            into = got[HOST] + got[REMOTE] + (0.0 if engine.ctx.nvme_gds else got[NVME])
            work = kernel_copy_seconds(into, engine.h2d.bandwidth, share)
            if work > 0.0:
                engine.busy += work
                engine.gpu_spans.append(now - work)
                engine.gpu_spans.append(now)
        for tier in (HOST, NVME, REMOTE):
            job.bytes[tier] += got[tier]
        engine.ctx.count_reads(engine, got, job)


GetPath = tuple[tuple[Link, ...], float, tuple, tuple, float | None]


def remote_get(engine: Engine, job: Job) -> GetPath:
    """The request's remote GET (its blocks ``job.src`` marks remote) into HBM."""
    B = engine.ctx.block_tokens
    last = job.req.input_tokens - 1  # the always-computed last token is not read
    ids, tokens = [], []
    for i, t in enumerate(job.src):
        if t == REMOTE:
            tok = min(B, last - i * B)
            if tok > 0:
                ids.append(job.keys[i])
                tokens.append(tok)
    return get_flow(engine, ids, tokens, (engine.nic_in, engine.h2d))


def get_flow(engine: Engine, ids: list[Key], tokens: list[int], path: tuple[Link, ...]) -> GetPath:
    """A GET of blocks ``ids`` (``tokens`` each) as one lockstep flow over the servers
    it reads (its ranks' parts move together), then over the engine's ``path`` (NIC,
    and PCIe when it lands in HBM): (links, size, costs, shares, cap). Unsharded, one
    rank issues the whole GET (then hands the KV to the others over NVLink): it also
    crosses that rank's own NIC and PCIe (``client``). Either way the GET moves at most
    as fast as its clients pull (``Shared.client_cap``, bytes/s of the whole GET, from
    ``remote.client``; kvsim/physics/client.py): the flow's cap, in progress units."""
    ctx = engine.ctx
    remote = ctx.remote
    assert remote is not None
    s = ctx.kv_bytes * ctx.ratio[REMOTE] / remote.shards  # as stored (its codec)
    per_server = {srv: tok * s for srv, tok in remote.tokens_by_server(ids, tokens).items()}
    if remote.shards == 1:  # unsharded: the issuing rank's own NIC and PCIe too
        path = (*path, engine.client)
    links, size, costs, shares = ctx.lockstep(remote.parts(per_server), path)
    # the shared links carry the whole GET per unit of progress: bytes/s -> progress/s
    return links, size, costs, shares, ctx.client_cap / shares[-1]
