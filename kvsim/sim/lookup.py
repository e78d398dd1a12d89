"""The lookup and the plan: which tier serves each block, and what a request restores.

What this module owns: :class:`Lookup`, one per engine: the longest prefix held anywhere
(each block from the fastest tier holding it, with the peer tier in other engines' host
tiers), the hits and misses per tier, the access log's lookup rows, the load policy's
cut and its cost estimate, the tokens per source, the blocks a hit refreshes, and the
fall back when a restore's network part is given up; :func:`cached_tokens`. The engine
(:mod:`kvsim.sim.engine`) calls it when it picks a request; restores call ``fall_back``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from kvsim.cache.eviction import Entry, Key
from kvsim.cache.local import GPU, HOST, PEER, REMOTE
from kvsim.kernel.fabric import Flow
from kvsim.physics.step import lone_seconds
from kvsim.physics.transfer import transfer_terms
from kvsim.sim.get import engine_terms, plan_seconds, remote_get, remote_plan
from kvsim.sim.job import NEW, Job
from kvsim.sim.node import Node
from kvsim.sim.shared import Shared


def cached_tokens(blocks: int, block_tokens: int, prompt_tokens: int) -> int:
    """Tokens a usable prefix of ``blocks`` blocks serves (as ``Lookup.account``
    counts them: the prompt's last token is always computed)."""
    if blocks <= 0:
        return 0
    return min(blocks * block_tokens, prompt_tokens - 1)


# the peers and holders of a lookup without the peer tier (never changed)
_NO_PEERS: Final[list[tuple[int, dict[Key, Entry], dict[Key, float] | None]]] = []
_NO_HOLDERS: Final[list[int]] = []


class Lookup:
    """One engine's lookups and plans (see the module docstring)."""

    def __init__(self, node: Node, ctx: Shared) -> None:
        self.node = node
        self.ctx = ctx
        self.local = node.local
        self.peer_asked = ctx.run.peer
        # tiers.peer: the holder of each block the last lookup found (-1: not a peer block)
        self.holders: list[int] = []
        run = ctx.run
        self._found = [0] * len(run.tiers)  # count's tally, per tier code
        # whether a plan's lookup (with the lower tiers) asks the other engines' host tiers
        # (tiers.peer, looked at with this engine's own host) and the remote store (not
        # under a prefetch policy: it is read through prefetches)
        self._peer: bool = run.peer and self.local.host is not None
        self._remote: bool = ctx.remote is not None and not run.prefetching
        # the tiers a plan's lookup asks, in the lookup order, with the lower tiers (the
        # load policy's lower_tiers) and without (GPU alone), and its lower local tiers
        self._asked_deep = self.asked(True)
        self._asked_gpu = self.asked(False)
        self._lower_deep = [t for t in self._asked_deep if t in self.local.lower]
        self._lower_gpu: list[int] = []

    def peek(self, job: Job) -> None:
        """``job.cached`` of a request not looked up yet, as the lookup ``_plan`` would
        make now would find it, for a plugin scheduler's priority: the same tiers asked,
        no block touched, no hit counted, no load policy's cut. A request looked up
        already (back from an asynchronous restore) keeps the tokens it restored."""
        if job.state != NEW:
            return
        ctx = self.ctx
        holders = self.holders  # (locate sets them: the last real lookup's)
        if ctx.policy.lower_tiers:
            src = self.locate(job.keys, self._lower_deep, self._peer, self._remote)
        else:
            src = self.locate(job.keys, self._lower_gpu, False, False)
        self.holders = holders
        job.cached = cached_tokens(len(src), ctx.run.block_tokens, job.req.input_tokens)

    def cost(self, job: Job) -> float:
        """The engine's part of T0 for a restore (the largest over the tiers it reads)."""
        t0e = self.ctx.run.t0_engine
        tok = job.tokens
        worst = 0.0
        for t in range(1, len(t0e)):  # the lower tiers
            if tok[t] and t0e[t] > worst:
                worst = t0e[t]
        return worst

    def plan(self, job: Job) -> None:
        """Longest usable prefix, each block from its fastest tier; the policy may cut it."""
        ctx = self.ctx
        blocks = job.keys
        local = self.local
        if ctx.policy.lower_tiers:
            peer = self._peer
            src = self.locate(blocks, self._lower_deep, peer, self._remote)
            self.count(src, len(blocks), self._asked_deep, job)
        else:
            peer = False
            src = self.locate(blocks, self._lower_gpu, False, False)
            self.count(src, len(blocks), self._asked_gpu, job)
        lower = src.count(GPU) != len(src)
        if lower:
            src = src[: ctx.policy.restore_blocks(src, lambda k: self.estimate(job, src, k), job)]
        self.account(job, src)
        if peer:  # which engine serves each peer block (after the policy's cut)
            self.assign_peers(job)
        if lower and job.decision in ("gpu", "cold"):
            job.decision = "skipped"  # the policy chose to recompute what a lower tier held
        if local.uses is not None:
            local.hit(blocks, src)
        # a hit refreshes the blocks in their tiers (a run of blocks from one tier at once)
        stores = local.tiers
        n = len(src)
        i = 0
        while i < n:
            t = src[i]
            j = i + 1
            while j < n and src[j] == t:
                j += 1
            if t == PEER:  # in the holders' host tiers
                self.touch_peers(blocks, job.holders, i, j)
            elif t == REMOTE:
                ctx.remote.touch(blocks[i:j])  # type: ignore[union-attr]
            else:
                stores[t].touch(blocks[i:j])  # type: ignore[union-attr]
            i = j
        if ctx.metrics.blocks:  # the lookup's own events are over (Lookup.count)
            ctx.metrics.cause = -1

    def assign_peers(self, job: Job) -> None:
        """The holders of the job's peer blocks (``job.holders``, one per block of
        ``job.src``) and the tokens each serves (``job.peers``), from the last lookup."""
        src = job.src
        if PEER not in src:
            job.holders = []
            job.peers = {}
            return
        holders = self.holders[: len(src)]
        job.holders = holders
        job.peers = self.peer_tokens(job, src, holders)

    def peer_tokens(self, job: Job, src: list[int], holders: list[int]) -> dict[int, int]:
        """Holder engine index -> tokens its host tier serves for blocks ``src`` (as
        ``_account`` counts them: the prompt's last token is always computed)."""
        B = self.ctx.run.block_tokens
        last = job.req.input_tokens - 1
        out: dict[int, int] = {}
        for i, t in enumerate(src):
            if t == PEER:
                tok = min(B, last - i * B)
                if tok > 0:
                    h = holders[i]
                    out[h] = out.get(h, 0) + tok
        return out

    def touch_peers(self, blocks: Sequence[Key], holders: list[int], i: int, j: int) -> None:
        """A hit on blocks ``i:j`` (all peer blocks) refreshes them in their holders' host
        tiers, a run of blocks of one holder at once."""
        engines = self.ctx.engines
        while i < j:
            h = holders[i]
            k = i + 1
            while k < j and holders[k] == h:
                k += 1
            store = engines[h].local.host
            if store is not None:
                store.touch(blocks[i:k])
            i = k

    def locate(
        self,
        blocks: Sequence[Key],
        lower: list[int] | None = None,
        peer: bool = True,
        remote: bool = True,
    ) -> list[int]:
        """The tier of each block of the longest prefix held anywhere (the fastest tier
        holding it), looking only in the tiers asked for: ``lower``, this engine's lower
        local tiers in the lookup order (None: all of them), the peers and the remote
        store. A block whose write into a local tier has not landed is not read from there
        (docs/data-path.md). With ``tiers.peer`` (and ``peer``), a block in none of this
        engine's tiers asked is looked up in the host tiers of the other engines that are
        up (landed writes only: the cluster-wide index sees a block once it is readable),
        before the remote store. Its holder is the first such engine in the order index +
        1, index + 2, ... (mod engines); the holders go to ``self.holders`` (-1 for a
        block of another tier)."""
        local = self.local
        store = self.ctx.remote if remote else None
        in_gpu = local.gpu.blocks
        now = self.ctx.env._now
        # this engine's lower tiers asked, in the lookup order: their codes, the blocks
        # each holds, and its writes still in flight (key -> when it lands; None: all have
        # landed)
        codes: list[int] = []
        helds: list[dict[Key, Entry]] = []
        waits: list[dict[Key, float] | None] = []
        stores = local.tiers
        for t in local.lower if lower is None else lower:
            tier = stores[t]
            if tier is not None and tier.blocks:
                codes.append(t)
                helds.append(tier.blocks)
                waits.append(local.in_flight(t, now))
        asked = len(codes)
        # the other engines' host tiers, in the order they are asked (tiers.peer)
        peering = peer and self.ctx.run.peer
        peers = _NO_PEERS  # (shared, never changed: a lookup without the peer tier)
        holders = _NO_HOLDERS
        if peering:
            peers = []
            holders = []
            engines = self.ctx.engines
            n = len(engines)
            for step in range(1, n):
                e = engines[(self.node.index + step) % n]
                peer_host = e.local.host
                if e.up and peer_host is not None and peer_host.blocks:
                    peers.append((e.index, peer_host.blocks, e.local.in_flight(HOST, now)))
        src: list[int] = []
        for b in blocks:
            if b in in_gpu:
                src.append(GPU)
            else:
                found = -1
                for k in range(asked):  # a write not landed is not read there
                    if b in helds[k]:
                        wait = waits[k]
                        if wait is None or wait.get(b, now) <= now:
                            found = codes[k]
                            break
                if found >= 0:
                    src.append(found)
                else:
                    holder = -1
                    for index, in_h, wait in peers:
                        if b in in_h and (wait is None or wait.get(b, now) <= now):
                            holder = index
                            break
                    if holder >= 0:
                        src.append(PEER)
                        holders.append(holder)
                        continue
                    if store is not None and store.has(b):
                        src.append(REMOTE)
                    else:
                        break
            if peering:
                holders.append(-1)
        if peering:
            self.holders = holders
        return src

    def count(self, src: list[int], n: int, asked: list[int], job: Job) -> None:
        """Count one lookup's hits and misses per tier, in blocks. The tiers ``asked``
        are walked in the lookup order (gpu, host, nvme, peer, remote); a block reaches a
        tier when no earlier one served it, and is a hit there when that tier serves it in
        the located prefix ``src`` (before the load policy's cut), else a miss: a block
        past the prefix misses in every tier asked. One pass over ``src``. With
        ``--record-accesses``, the same rows go to the access log (kvsim.results.accesses)."""
        if self.ctx.metrics.blocks:
            self.record(src, asked, job)
        found = self._found  # blocks found per tier code: one pass (all 0 between lookups)
        for t in src:
            found[t] += 1
        hits, misses = self.node.hits, self.node.misses
        left = n  # blocks that reach the next tier asked
        for t in asked:
            k = found[t]
            found[t] = 0
            hits[t] += k
            left -= k
            misses[t] += left

    def asked(self, deep: bool) -> list[int]:
        """The tiers a plan's lookup asks, in the lookup order (gpu, host, nvme, peer,
        remote; a user's local kinds in their places): GPU alone without the lower tiers
        (``deep`` false); under a prefetch policy, not those read through prefetches."""
        run = self.ctx.run
        if not deep:
            return [GPU]
        peer, remote = self._peer, self._remote
        asked: list[int] = []
        for tier in sorted(run.tiers, key=lambda t: t.order):
            t = tier.code
            if tier.local:
                if self.local.tiers[t] is None or (run.prefetching and tier.prefetched):
                    continue
            elif not (peer if t == PEER else remote if t == REMOTE else False):
                continue
            asked.append(t)
        return asked

    def record(self, src: list[int], asked: list[int], job: Job) -> None:
        """The lookup's rows in the access log; its request is the cause of what the
        lookup does to the stores until ``plan`` ends."""
        ctx = self.ctx
        sizes = job.sizes if job.sizes is not None else ctx.block_sizes(job.req)
        shards = ctx.remote.shards if ctx.remote is not None else 1
        metrics = ctx.metrics
        metrics.lookup(
            self.node.index, job.req.id, job.keys, sizes, src, asked, ctx.run.ratio, shards
        )
        metrics.cause = job.req.id

    def account(self, job: Job, src: list[int]) -> None:
        """Tokens per source for restoring the blocks ``src`` (at least one token computed),
        and how many of the computed ones are recomputed: in blocks past ``src`` that were
        computed (or prestored) before (``Shared.seen``)."""
        req = job.req
        B = self.ctx.run.block_tokens
        n_in = req.input_tokens
        tokens = [0] * (len(self._found) + 1)  # per tier code, then the computed ones
        for t in src:
            tokens[t] += B
        k = len(src)
        if k:
            last = src[-1]
            overshoot = k * B - n_in  # the last block of a prompt is usually partial
            if overshoot >= 0:
                tokens[last] -= overshoot + 1  # and one token is always computed
        cached = 0
        computed = len(tokens) - 1
        for t in range(computed):  # every tier's
            cached += tokens[t]
        tokens[computed] = n_in - cached
        keys = job.keys
        nb = len(keys)
        seen = self.ctx.seen
        again = 0
        if k < nb and seen:
            hit = 0  # blocks computed here, seen before (a loop: no set built)
            for i in range(k, nb):
                if keys[i] in seen:
                    hit += 1
            if hit:
                again = hit * B
                if keys[nb - 1] in seen:  # the last block is usually partial
                    again -= nb * B - n_in
                if again > tokens[computed]:  # (a key repeated in a prompt)
                    again = tokens[computed]
        job.recomputed = again
        job.src = src
        job.tokens = tokens
        job.cached = cached
        if cached > tokens[GPU]:  # a lower tier serves some
            job.decision = "restore"
        elif tokens[GPU]:
            job.decision = "gpu"
        else:
            job.decision = "cold"

    def estimate(self, job: Job, src: list[int], k: int) -> float:
        """A live estimate of restore + compute time when restoring the first ``k`` blocks."""
        ctx = self.ctx
        probe = Job(job.req, job.warmup, job.keys, len(self._found))
        self.account(probe, src[:k])
        s = ctx.run.kv_bytes
        ratio, decode = ctx.run.ratio, ctx.run.decode_s
        worst = 0.0
        tok = probe.tokens
        routes = self.node.routes
        for t in ctx.run.direct:  # one transfer over this engine's route (host, NVMe, ...)
            if tok[t] and routes[t]:
                rate = ctx.fabric.estimate_rate(routes[t])
                worst = max(worst, ctx.run.t0[t] + tok[t] * s * (ratio[t] / rate + decode[t]))
        if tok[REMOTE] and ctx.remote is not None and ctx.remote.ssd is not None:
            # the servers' SSDs: the GET's stages one after the other (kvsim.sim.get)
            after = tok[REMOTE] * s * decode[REMOTE]
            if self.node.nvlink is not None:  # the hand-off to the other ranks
                after += (
                    self.node.nvlink.backlog(self.ctx.env._now)
                    + tok[REMOTE]
                    * s
                    * ratio[REMOTE]
                    * ctx.run.handoff_share
                    / self.node.nvlink.bandwidth
                )
            got = plan_seconds(ctx.fabric, remote_plan(self.ctx, self.node, probe))
            worst = max(worst, ctx.run.t0[REMOTE] + got + after)
        elif tok[REMOTE]:
            links, size, costs, shares, cap = remote_get(self.ctx, self.node, probe)
            delay, cap = engine_terms(ctx.run, tok[REMOTE], shares, cap)
            rate = ctx.fabric.estimate_rate(links, costs)
            if cap is not None and cap < rate:
                rate = cap
            after = tok[REMOTE] * s * decode[REMOTE]
            if self.node.nvlink is not None:  # the hand-off to the other ranks
                after += (
                    self.node.nvlink.backlog(self.ctx.env._now)
                    + tok[REMOTE]
                    * s
                    * ratio[REMOTE]
                    * ctx.run.handoff_share
                    / self.node.nvlink.bandwidth
                )
            worst = max(worst, ctx.run.t0[REMOTE] + delay + size / rate + after)
        if tok[PEER]:  # one read per holder, out of its NIC and into this engine's
            engines = ctx.engines
            run = ctx.run
            te = run.peer_transfer
            for h, n in self.peer_tokens(probe, probe.src, self.holders).items():
                rate = ctx.fabric.estimate_rate((engines[h].nic_out, *routes[PEER]))
                delay = 0.0
                if te is not None:  # the transfer engine's setup, batches and operations
                    delay, cap = transfer_terms(te, n, n * s * ratio[PEER], run.pcp, run.peer_ops)
                    rate = cap if cap < rate else rate
                worst = max(
                    worst, run.t0[PEER] + delay + n * s * (ratio[PEER] / rate + decode[PEER])
                )
        new = job.req.input_tokens - probe.cached
        return worst + lone_seconds(ctx.run.steps, new, probe.cached, ctx.run.per_step)

    def fall_back(
        self, job: Job, remote: list[Flow], peers: Sequence[tuple[int, Flow]] = ()
    ) -> None:
        """Client timeout (or a lost server, or a lost peer): give up what the network
        has not brought yet (the GET, and peer reads still on their way), recompute from
        the first block it was to bring on: the first remote block, or the first block of
        a holder whose read did not finish, whichever comes first."""
        fabric = self.ctx.fabric
        for f in remote:
            if f.state != "finished":
                fabric.cancel(f)
        src = job.src
        cut = src.index(REMOTE) if REMOTE in src else len(src)
        if peers:
            lost: list[int] = []
            for h, f in peers:
                if f.state != "finished":
                    fabric.cancel(f)
                    lost.append(h)
            if lost:
                holders = job.holders
                for i in range(cut):
                    if src[i] == PEER and holders[i] in lost:
                        cut = i
                        break
        self.account(job, src[:cut])
        job.remote_ssd_tokens = 0  # none of the GET's tokens are used
        if self.ctx.run.peer:
            self.assign_peers_cut(job)
        job.decision = "fallback"

    def assign_peers_cut(self, job: Job) -> None:
        """After a fall back cut ``job.src``: its holders and peer tokens, cut alike."""
        src = job.src
        holders = job.holders[: len(src)]
        job.holders = holders
        job.peers = self.peer_tokens(job, src, holders) if PEER in src else {}
