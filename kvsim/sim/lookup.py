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
from kvsim.cache.local import COMPUTED, GPU, HOST, NVME, PEER, REMOTE
from kvsim.kernel.fabric import Flow
from kvsim.physics.step import lone_seconds
from kvsim.sim.job import NEW, Job
from kvsim.sim.node import Node
from kvsim.sim.restore import remote_get
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
        self._found = [0, 0, 0, 0, 0]  # count's tally, per tier code
        # the tiers a lookup asks, by which of host, nvme and remote it asks (count)
        self._asked = [
            self.asked(h == 1, v == 1, r == 1) for h in (0, 1) for v in (0, 1) for r in (0, 1)
        ]

    def peek(self, job: Job) -> None:
        """``job.cached`` of a request not looked up yet, as the lookup ``_plan`` would
        make now would find it, for a plugin scheduler's priority: the same tiers asked,
        no block touched, no hit counted, no load policy's cut. A request looked up
        already (back from an asynchronous restore) keeps the tokens it restored."""
        if job.state != NEW:
            return
        ctx = self.ctx
        local = self.local
        host = local.host is not None
        nvme = local.nvme is not None
        remote = ctx.remote is not None
        if not ctx.policy.lower_tiers:
            host = nvme = remote = False
        elif ctx.run.prefetching:  # as _plan: NVMe and remote are read through prefetches
            nvme = remote = False
        holders = self.holders  # (locate sets them: the last real lookup's)
        src = self.locate(job.keys, host, nvme, remote, ctx.run.peer and host)
        self.holders = holders
        job.cached = cached_tokens(len(src), ctx.run.block_tokens, job.req.input_tokens)

    def cost(self, job: Job) -> float:
        """The engine's part of T0 for a restore (the largest over the tiers it reads)."""
        t0e = self.ctx.run.t0_engine
        tok = job.tokens
        return max(
            t0e[HOST] if tok[HOST] else 0.0,
            t0e[NVME] if tok[NVME] else 0.0,
            t0e[REMOTE] if tok[REMOTE] else 0.0,
            t0e[PEER] if tok[PEER] else 0.0,
        )

    def plan(self, job: Job) -> None:
        """Longest usable prefix, each block from its fastest tier; the policy may cut it."""
        ctx = self.ctx
        blocks = job.keys
        local = self.local
        gpu, host, nvme = local.gpu, local.host, local.nvme
        remote = ctx.remote
        if not ctx.policy.lower_tiers:
            host = nvme = remote = None
        elif ctx.run.prefetching:  # NVMe and remote are read through prefetches into host
            nvme = remote = None
        # other engines' host tiers: looked at with this engine's own (tiers.peer)
        peer = ctx.run.peer and host is not None
        src = self.locate(blocks, host is not None, nvme is not None, remote is not None, peer)
        self.count(src, len(blocks), host is not None, nvme is not None, remote is not None, job)
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
        stores = (gpu, host, nvme, remote)
        n = len(src)
        i = 0
        while i < n:
            t = src[i]
            j = i + 1
            while j < n and src[j] == t:
                j += 1
            if t == PEER:  # in the holders' host tiers
                self.touch_peers(blocks, job.holders, i, j)
            else:
                stores[t].touch(blocks[i:j])  # type: ignore[union-attr]
            i = j
        if ctx.recorder is not None:  # the lookup's own events are over (Lookup.count)
            ctx.recorder.request = -1

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
        host: bool = True,
        nvme: bool = True,
        remote: bool = True,
        peer: bool = True,
    ) -> list[int]:
        """The tier of each block of the longest prefix held anywhere (the fastest tier
        holding it), looking only in the tiers asked for. A block whose write into host or
        NVMe has not landed is not read from there (docs/data-path.md). With
        ``tiers.peer`` (and ``peer``), the lookup order is gpu, host, nvme, peer, remote: a
        block in none of this engine's tiers asked is looked up in the host tiers of the
        other engines that are up (landed writes only: the cluster-wide index sees a block
        once it is readable), before the remote store. Its holder is the first such engine
        in the order index + 1, index + 2, ... (mod engines); the holders go to
        ``self.holders`` (-1 for a block of another tier)."""
        local = self.local
        store = self.ctx.remote if remote else None
        in_gpu = local.gpu.blocks
        in_host = local.host.blocks if host and local.host is not None else ()
        in_nvme = local.nvme.blocks if nvme and local.nvme is not None else ()
        now = self.ctx.env._now
        # writes still in flight (key -> when it lands); None: all have landed
        wait_h = local.in_flight(HOST, now) if in_host else None
        wait_n = local.in_flight(NVME, now) if in_nvme else None
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
            elif b in in_host and (wait_h is None or wait_h.get(b, now) <= now):
                src.append(HOST)
            elif b in in_nvme and (wait_n is None or wait_n.get(b, now) <= now):
                src.append(NVME)
            else:
                if peers:
                    holder = -1
                    for index, held, wait in peers:
                        if b in held and (wait is None or wait.get(b, now) <= now):
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

    def count(self, src: list[int], n: int, host: bool, nvme: bool, remote: bool, job: Job) -> None:
        """Count one lookup's hits and misses per tier, in blocks. The tiers asked are
        walked in the lookup order (gpu, host, nvme, peer, remote); a block reaches a tier
        when no earlier one served it, and is a hit there when that tier serves it in the
        located prefix ``src`` (before the load policy's cut), else a miss: a block past
        the prefix misses in every tier asked. One pass over ``src``. With
        ``--record-accesses``, the same rows go to the access log (kvsim.results.accesses)."""
        if self.ctx.recorder is not None:
            self.record(src, host, nvme, remote, job)
        found = self._found  # blocks found per tier code: one pass (all 0 between lookups)
        for t in src:
            found[t] += 1
        hits, misses = self.node.hits, self.node.misses
        left = n  # blocks that reach the next tier asked
        for t in self._asked[host * 4 + nvme * 2 + remote]:
            k = found[t]
            found[t] = 0
            hits[t] += k
            left -= k
            misses[t] += left

    def asked(self, host: bool, nvme: bool, remote: bool) -> list[int]:
        """The tiers a lookup asks, in the lookup order (gpu, host, nvme, peer, remote)."""
        asked = [GPU]
        if host:
            asked.append(HOST)
        if nvme:
            asked.append(NVME)
        if host and self.peer_asked:
            asked.append(PEER)
        if remote:
            asked.append(REMOTE)
        return asked

    def record(self, src: list[int], host: bool, nvme: bool, remote: bool, job: Job) -> None:
        """The lookup's rows in the access log; its request is the cause of what the
        lookup does to the stores until ``_plan`` ends."""
        ctx = self.ctx
        asked = self.asked(host, nvme, remote)
        rec = ctx.recorder
        sizes = job.sizes if job.sizes is not None else ctx.block_sizes(job.req)
        shards = ctx.remote.shards if ctx.remote is not None else 1
        rec.lookup(self.node.index, job.req.id, job.keys, sizes, src, asked, ctx.run.ratio, shards)
        rec.request = job.req.id

    def account(self, job: Job, src: list[int]) -> None:
        """Tokens per source for restoring the blocks ``src`` (at least one token computed),
        and how many of the computed ones are recomputed: in blocks past ``src`` that were
        computed (or prestored) before (``Shared.seen``)."""
        req = job.req
        B = self.ctx.run.block_tokens
        n_in = req.input_tokens
        tokens = [0, 0, 0, 0, 0, 0]
        for t in src:
            tokens[t] += B
        k = len(src)
        if k:
            last = src[-1]
            overshoot = k * B - n_in  # the last block of a prompt is usually partial
            if overshoot >= 0:
                tokens[last] -= overshoot + 1  # and one token is always computed
        cached = tokens[GPU] + tokens[HOST] + tokens[NVME] + tokens[REMOTE] + tokens[PEER]
        tokens[COMPUTED] = n_in - cached
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
                if again > tokens[COMPUTED]:  # (a key repeated in a prompt)
                    again = tokens[COMPUTED]
        job.recomputed = again
        job.src = src
        job.tokens = tokens
        job.cached = cached
        if tokens[HOST] or tokens[NVME] or tokens[REMOTE] or tokens[PEER]:
            job.decision = "restore"
        elif tokens[GPU]:
            job.decision = "gpu"
        else:
            job.decision = "cold"

    def estimate(self, job: Job, src: list[int], k: int) -> float:
        """A live estimate of restore + compute time when restoring the first ``k`` blocks."""
        ctx = self.ctx
        probe = Job(job.req, job.warmup, job.keys)
        self.account(probe, src[:k])
        s = ctx.run.kv_bytes
        ratio, decode = ctx.run.ratio, ctx.run.decode_s
        worst = 0.0
        tok = probe.tokens
        if tok[HOST]:
            rate = ctx.fabric.estimate_rate((self.node.h2d,))
            worst = max(
                worst, ctx.run.t0[HOST] + tok[HOST] * s * (ratio[HOST] / rate + decode[HOST])
            )
        if tok[NVME] and self.node.nvme is not None:
            rate = ctx.fabric.estimate_rate(self.node.nvme_path)
            worst = max(
                worst, ctx.run.t0[NVME] + tok[NVME] * s * (ratio[NVME] / rate + decode[NVME])
            )
        if tok[REMOTE]:
            links, size, costs, _, cap = remote_get(self.ctx, self.node, probe)
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
            worst = max(worst, ctx.run.t0[REMOTE] + size / rate + after)
        if tok[PEER]:  # one read per holder, out of its NIC and into this engine's
            engines = ctx.engines
            for h, n in self.peer_tokens(probe, probe.src, self.holders).items():
                rate = ctx.fabric.estimate_rate(
                    (engines[h].nic_out, self.node.nic_in, self.node.h2d)
                )
                worst = max(worst, ctx.run.t0[PEER] + n * s * (ratio[PEER] / rate + decode[PEER]))
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
        if self.ctx.run.peer:
            self.assign_peers_cut(job)
        job.decision = "fallback"

    def assign_peers_cut(self, job: Job) -> None:
        """After a fall back cut ``job.src``: its holders and peer tokens, cut alike."""
        src = job.src
        holders = job.holders[: len(src)]
        job.holders = holders
        job.peers = self.peer_tokens(job, src, holders) if PEER in src else {}
