"""Restores: moving a request's cached KV from the lower tiers into GPU HBM.

What this module owns: :class:`Restore` (one request's restore in flight), a transfer's
unloaded time (``alone_seconds``) and the bytes each tier served (``count_reads``). It
sees its engine as a :class:`~kvsim.sim.node.Node` (links, tiers, counters) and the run
through :class:`~kvsim.sim.shared.Shared`; the engine hands it two callbacks (``then``,
and ``fall_back`` for a GET or peer read given up), never itself.

A :class:`Restore` starts one transfer per tier the request reads (after that tier's T0)
on the fabric and tells its engine when all of them are in (or the remote part was given
up). The remote GET's transfers are :mod:`kvsim.sim.get`'s plan: the servers holding the
shards, the engine's NIC and PCIe, and (unsharded) the issuing rank's client path; with
the servers' own SSDs, the shards only an SSD holds follow, read off it first.

A tier kind read as one plain transfer (``Tier.direct``: host, NVMe, a user's local kind)
needs nothing here but its route (``Tier.route``, kvsim/sim/tiers.py): its transfer, its
decode, its bytes and its time come from the loops over the tiers. The remote GET and the
peer reads are the two mechanisms of their own. The lookup (``Lookup.locate``,
kvsim/sim/lookup.py) decides which blocks a tier serves.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import simpy

from kvsim.cache.eviction import Key
from kvsim.cache.local import NVME, PEER, REMOTE
from kvsim.kernel.fabric import Flow, Link
from kvsim.physics.step import kernel_copy_seconds
from kvsim.physics.transfer import transfer_terms
from kvsim.sim.get import GetPlan, Stage, remote_plan
from kvsim.sim.job import Job
from kvsim.sim.node import Node
from kvsim.sim.shared import Shared

# an engine's fall back (kvsim.sim.lookup.Lookup.fall_back): the job, the GET's flows, and
# the peer reads as (holder, flow)
FallBack = Callable[[Job, list[Flow], list[tuple[int, Flow]]], None]


class Restore:
    """A request's restore in flight, driven by its transfers' callbacks (no process).

    Per tier, T0 then a transfer on the fabric: host and NVMe each one flow, the remote
    GET one lockstep flow over the servers holding the ranks' shards (it may stall first;
    with the servers' SSDs, its stages one after the other, kvsim.sim.get).
    A client timeout, or the loss of a server mid-GET, abandons the remote part: the rest
    of the prompt from the first remote block on is recomputed. ``then(job)`` runs once
    every transfer is in (or, for an abandoned GET, every local one). With ``tiers.peer``,
    one flow per holder (another engine's host memory) over its NIC out, this engine's NIC
    in and host-to-GPU link; a holder lost mid-read (it went down) abandons the network
    part likewise: peer reads still on their way and the GET are given up, and the prompt
    is recomputed from the first block they were to bring.
    """

    __slots__ = (
        "abandoned",
        "ctx",
        "decoded",
        "decoding",
        "engine",
        "fall_back",
        "holders",
        "job",
        "local",
        "over",
        "plan",
        "remote",
        "ssd_began",
        "stages",
        "start",
        "then",
    )

    def __init__(
        self,
        engine: Node,
        ctx: Shared,
        job: Job,
        then: Callable[[Job], object],
        fall_back: FallBack,
    ) -> None:
        self.engine = engine
        self.ctx = ctx
        self.job = job
        self.then = then
        self.fall_back = fall_back
        self.abandoned = False
        self.decoding = 0  # tiers whose bytes are in and not yet usable (decode, hand-off)
        run = ctx.run
        self.decoded = [0.0] * len(run.t0)  # seconds per tier from arrival to usable
        self.over = True  # until every transfer is started
        fabric = ctx.fabric
        env = ctx.env
        s = run.kv_bytes
        t0 = run.t0
        ratio = run.ratio  # a tier's codec moves fewer bytes
        self.start = env._now
        tokens = job.tokens
        job.restore = self
        self.local: list[tuple[int, Flow]] = []
        routes = engine.routes
        for t in run.direct:  # one transfer over this engine's route (host, NVMe, ...)
            n = tokens[t]
            if n:
                self.local.append(
                    (
                        t,
                        fabric.transfer(
                            routes[t],
                            n * s * ratio[t],
                            delay=t0[t],
                            on_done=self.settled,
                            tag=t,
                        ),
                    )
                )
        # tiers.peer: one read per holder, out of its NIC, into this engine's NIC and over
        # its host-to-GPU link (in ``local`` as PEER; ``holders``: the engine of each)
        self.holders: list[int] = []
        down = False  # a holder went down since the lookup
        if tokens[PEER]:
            engines = ctx.engines
            te = run.peer_transfer
            for h, n in job.peers.items():
                holder = engines[h]
                down = down or not holder.up
                self.holders.append(h)
                nbytes = n * s * ratio[PEER]
                wait, most = 0.0, math.inf
                if te is not None:  # the transfer engine's setup, batches and operations
                    wait, most = transfer_terms(te, n, nbytes, run.pcp, run.peer_ops)
                self.local.append(
                    (
                        PEER,
                        fabric.transfer(
                            (holder.nic_out, *routes[PEER]),
                            nbytes,
                            delay=t0[PEER] + wait,
                            on_done=self.settled,
                            tag=PEER,
                            cap=most if most < math.inf else None,
                        ),
                    )
                )
        self.remote: list[Flow] = []  # the GET's transfers started so far, in order
        self.stages: list[Stage] = []  # and those still to start (remote.ssd)
        self.plan: GetPlan | None = None
        self.ssd_began = 0.0  # when the GET began reading the servers' SSDs
        if tokens[REMOTE]:
            plan = self.plan = remote_plan(ctx, engine, job, count=True)
            job.remote_ssd_tokens = plan.ssd_tokens
            stall = ctx.draw_stall()
            job.stalled = stall > 0
            first = plan.stages[0]
            self.stages = plan.stages[1:]
            self._get(first, t0[REMOTE] + first.delay + stall)
            if run.timeout is not None:
                env.timeout(t0[REMOTE] + run.timeout).callbacks.append(self.timed_out)
        self.over = False
        if down:  # a holder went down since the lookup: its blocks went with it
            for h, f in self._peer_flows():
                if not ctx.engines[h].up:
                    fabric.cancel(f)
            self._abandon()
        self._check()

    def _get(self, stage: Stage, delay: float) -> None:
        """Start a stage of the GET after ``delay``; the last one settles the GET, the
        others start the next."""
        last = not self.stages
        if stage.ssd:
            self.ssd_began = self.ctx.env._now + delay - stage.delay
        self.remote.append(
            self.ctx.fabric.transfer(
                stage.links,
                stage.size,
                costs=stage.costs,
                shares=stage.shares,
                delay=delay,
                on_done=self.settled if last else self._staged,
                cap=stage.cap,
                tag=REMOTE if not stage.ssd else -REMOTE,
            )
        )

    def _staged(self, flow: Flow) -> None:
        """A stage of the GET before its last is in: the next starts (or it was
        aborted: as any transfer, ``settled``)."""
        if self.over or self.abandoned:
            return
        if flow.state != "finished":
            self.settled(flow)
            return
        if flow.tag != REMOTE:  # the servers' SSDs are read
            self.job.remote_ssd_s = self.ctx.env._now - self.ssd_began
        stage = self.stages.pop(0)
        self._get(stage, stage.delay)

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
            ctx = self.ctx.run
            if tier == PEER:  # one of several reads (one per holder): its own bytes
                raw = flow.size / ctx.ratio[PEER]
            else:
                raw = self.job.tokens[tier] * ctx.kv_bytes
            d = raw * ctx.decode_s[tier]  # the tier's codec: decode before it can be used
            now = self.ctx.env._now
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
                # one rank copied the whole GET into its HBM (engine._copied); by GPUDirect
                # its NIC wrote it there, over no host-to-GPU link
                if not ctx.remote_gpudirect:
                    for f in self.remote:  # (one flow, but with the servers' SSDs)
                        if f.tag == REMOTE:
                            assert f.shares is not None
                            engine.copied_alone += (ctx.gpus - 1) * f.size * f.shares[-1]
                d += sent - now
            if d > 0:
                self.decoding += 1
                self.decoded[tier] = d
                self.ctx.env.timeout(d).callbacks.append(self._decoded)
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
        self.stages = []
        fabric = self.ctx.fabric
        for _, f in self.local:
            fabric.cancel(f)
        for f in self.remote:
            fabric.cancel(f)

    def _abandon(self) -> None:
        """Give up what the network has not brought: the remote GET and, with the peer
        tier, the peer reads still on their way (the engine's ``fall_back``)."""
        self.abandoned = True
        self.stages = []
        self.fall_back(self.job, self.remote, self._peer_flows() if self.holders else [])

    def _peer_flows(self) -> list[tuple[int, Flow]]:
        """(holder engine index, read) of each peer read, in the order they started."""
        flows = [f for t, f in self.local if t == PEER]
        holders = self.holders
        return [(holders[i], flows[i]) for i in range(len(flows))]

    def _check(self) -> None:
        if self.decoding:
            return
        for t, f in self.local:
            # peer reads given up (abandoned) are not waited for
            if f.state != "finished" and not (t == PEER and self.abandoned):
                return
        if not self.abandoned:
            if self.stages:
                return
            for f in self.remote:
                if f.state != "finished":
                    return
        self.over = True
        plan = self.plan
        if plan is not None and plan.reads and not self.abandoned:
            remote = self.ctx.remote
            assert remote is not None and remote.ssd is not None
            if remote.ssd.promote:  # Mooncake's promotion on a hit
                remote.promote(plan.reads)
        self.plan = None
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
        run = self.ctx.run
        now = self.ctx.env._now
        start = self.start
        got = [0.0] * len(run.t0)  # bytes per tier
        # the copy engines' time (``gpu_copy_busy_frac``); kernel copies are SM work
        # instead (counted as the engine's ``busy``), so they are left out here
        copies = engine.copy_spans if run.copy_sm_share == 0.0 else []
        for tier, f in self.local:
            if tier == PEER:  # one read per holder: below
                continue
            job.tier_s[tier] = f.end + self.decoded[tier] - start
            got[tier] = f.size
            copies.append(f.start)
            copies.append(f.end)
        if self.holders:
            got[PEER] = self._peer_reads(now, copies)
        remote = self.remote
        if remote:
            end = -math.inf  # when the last part came in (now, if one was given up)
            for f in remote:
                if f.state != "finished":
                    end = now
                    break
                if f.end > end:
                    end = f.end
            job.tier_s[REMOTE] = min(end + self.decoded[REMOTE], now) - start
            t0 = run.t0[REMOTE]
            job.remote_get_s = max(end - start - t0, 0.0)  # 0: abandoned within T0
            moved = 0.0  # bytes that reached the engine: progress x this engine's shares
            for f in remote:
                if f.tag != REMOTE:  # a read of the servers' SSDs: no bytes moved here
                    continue
                assert f.shares is not None  # remote reads are lockstep flows
                # progress x the bytes per unit on the engine's own links (the last ones)
                moved += (f.size - max(f.remaining, 0.0)) * f.shares[-1]
                if f.start == f.start:  # it began moving (NaN: abandoned before)
                    copies.append(f.start)
                    copies.append(f.end if f.state == "finished" else now)
            got[REMOTE] = moved
        job.load_s = now - start
        share = run.copy_sm_share
        if share > 0.0:  # copy kernels moved them into HBM: SM work (not under GDS or
            # GPUDirect RDMA, whose routes skip the host-to-GPU link)
            into = 0.0
            via = engine.via_h2d
            for t in range(1, len(got)):
                if via[t]:
                    into += got[t]
            work = kernel_copy_seconds(into, engine.h2d.bandwidth, share)
            if work > 0.0:
                engine.busy += work
                engine.gpu_spans.append(now - work)
                engine.gpu_spans.append(now)
        read = job.bytes
        for t in range(1, len(got)):
            read[t] += got[t]
        count_reads(self.ctx, engine, got, job)
        self._measure(now, got)

    def _peer_reads(self, now: float, copies: list[float]) -> float:
        """The peer reads are over (or given up): the tier's wall time (until the last
        read's KV is usable, its decode included), their copy spans, and the bytes that
        reached this engine (a read given up: what it had moved)."""
        ctx = self.ctx.run
        per_byte = ctx.decode_s[PEER] / ctx.ratio[PEER]  # decode seconds per stored byte
        usable = -math.inf
        last = 0.0  # the decode of the read usable last
        moved = 0.0
        for t, f in self.local:
            if t != PEER:
                continue
            if f.state == "finished":
                d = f.size * per_byte
                if f.end + d > usable:
                    usable, last = f.end + d, d
                moved += f.size
            else:
                moved += f.size - max(f.remaining, 0.0)
                if f.end > usable:  # given up then
                    usable, last = f.end, 0.0
            if f.start == f.start:  # it began moving (NaN: given up before)
                copies.append(f.start)
                copies.append(f.end if f.state == "finished" else now)
        self.job.tier_s[PEER] = min(usable, now) - self.start
        self.decoded[PEER] = last
        return moved

    def _measure(self, now: float, got: list[float]) -> None:
        """The restore's time in parts (docs: README, Outputs), from its critical transfer
        (the tier whose KV was usable last): lookup (its T0 and its path's latency), read
        or h2d (its time alone on an idle fabric: h2d when the host-to-GPU link is its
        bottleneck; h2d also takes what follows its bytes' arrival: decode, the NVLink
        hand-off), queue (the rest: bandwidth shared, stalls, waiting for other tiers).
        Each part is bounded by what the earlier ones leave, so they sum to the restore
        time. And the bytes read, per engine and tier (the peer that served them too)."""
        job = self.job
        engine = self.engine
        ctx = self.ctx.run
        total = now - self.start
        crit: Flow | None = None
        tier = -1
        usable = -math.inf
        peer_decode = ctx.decode_s[PEER] / ctx.ratio[PEER]  # per stored byte, per read
        for t, f in self.local:
            u = f.end
            if f.state == "finished":
                u += f.size * peer_decode if t == PEER else self.decoded[t]
            if u > usable:
                usable, crit, tier = u, f, t
        for f in self.remote:  # abandoned: usable never (its end: when it was given up)
            u = f.end + (self.decoded[REMOTE] if f.state == "finished" else 0.0)
            if u > usable:
                usable, crit, tier = u, f, REMOTE
        lookup = read = h2d = 0.0
        if crit is not None:
            lookup = ctx.t0[tier]
            for link in crit.links:
                lookup += link.latency
            if crit.state == "finished":
                alone, on_h2d = alone_seconds(crit, engine.h2d)
                if on_h2d:
                    h2d = alone
                else:
                    read = alone
                h2d += usable - crit.end  # decode, the NVLink hand-off
            if tier == REMOTE and len(self.remote) > 1:
                # the GET's earlier stages (remote.ssd): their latency and their time alone
                remote = self.ctx.remote
                assert remote is not None and remote.ssd is not None
                for f in self.remote:
                    if f is crit or f.state != "finished":
                        continue
                    if f.tag == REMOTE:
                        for link in f.links:
                            lookup += link.latency
                    else:  # the SSD read: the RPC to the holder and the first read
                        lookup += remote.ssd.latency
                    alone, on_h2d = alone_seconds(f, engine.h2d)
                    if on_h2d:
                        h2d += alone
                    else:
                        read += alone
        lookup = min(lookup, total)
        read = min(read, total - lookup)
        h2d = min(h2d, total - lookup - read)
        job.restore_lookup = lookup
        job.restore_read = read
        job.restore_h2d = h2d
        queue = total - lookup - read - h2d
        # float rounding of a restore that never waited: below a nanosecond is none
        job.restore_queue = queue if queue > 1e-9 else 0.0
        reads = engine.read_bytes
        for t in range(1, len(got)):
            reads[t] += got[t]
        if self.holders:  # the holders' side: what each served (peer tier served_bytes)
            engines = self.ctx.engines
            for h, f in self._peer_flows():
                moved = f.size if f.state == "finished" else f.size - max(f.remaining, 0.0)
                engines[h].served_bytes += moved


def alone_seconds(flow: Flow, h2d: Link) -> tuple[float, bool]:
    """A transfer's time alone on an idle fabric, latency left out: its size (progress
    units) at the slowest of its links' rates (bandwidth / the flow's cost there) or its
    own cap (a client's rate), whichever is lower; and whether that bottleneck is the
    host-to-GPU link ``h2d`` (on a tie, the other link)."""
    rate = math.inf
    on_h2d = False
    links, costs = flow.links, flow.costs
    for i in range(len(links)):  # (an index loop: compiled, zip(strict=) is a slow call)
        link = links[i]
        r = link.bandwidth / costs[i]
        if r < rate or (r == rate and on_h2d):
            rate = r
            on_h2d = link is h2d
    if flow.cap < rate:  # the flow's own cap binds (a client's per-connection rate)
        rate = flow.cap
        on_h2d = False
    return (flow.size / rate if rate > 0.0 else 0.0), on_h2d


def count_reads(ctx: Shared, engine: Node, got: list[float], job: Job) -> None:
    """A restore finished: count the bytes each tier served (indexed by tier); with
    ``tiers.nvme.promote``, the blocks it read from NVMe are also stored into host."""
    local = engine.local
    reads = local.read_bytes
    for t in local.lower:  # this engine's own lower tiers (host, NVMe, ...)
        reads[t] += got[t]
    if local.promote and got[NVME] > 0:
        sizes = job.sizes if job.sizes is not None else ctx.block_sizes(job.req)
        keys: list[Key] = []
        raw: list[float] = []
        for i, t in enumerate(job.src):  # src is a prefix of the blocks
            if t == NVME:
                keys.append(job.keys[i])
                raw.append(sizes[i])
        local.promoted_from_nvme(keys, raw)
    if ctx.remote is not None:
        ctx.remote.read_bytes += got[REMOTE]
