"""The remote GET's transfers: the links its bytes cross, and in what order.

What this module owns: ``remote_get``/``get_flow`` (a GET of blocks as one lockstep flow
over the servers holding them, then the engine's path: NIC, and PCIe when it lands in
HBM), ``engine_terms`` (a transfer engine's delay and cap on a GET), and the GET as a plan
of stages (:class:`Stage`, :class:`GetPlan`, :func:`get_plan`, :func:`plan_seconds`),
which the restore (:mod:`kvsim.sim.restore`), the prefetch (:mod:`kvsim.sim.prefetch`)
and the load policy's estimate (:mod:`kvsim.sim.lookup`) start one after the other.

Without the servers' SSDs a GET is one stage, built exactly as before they existed. With
``remote.ssd`` (docs/data-path.md, "The store's own SSD") it is Mooncake's batch get
(``RealClient::batch_get_into_internal``): first the shards the servers hold in DRAM, one
lockstep flow as always; then, for the shards only an SSD holds, the holders read them
off their drives into a staging buffer (one flow over the servers' SSD read links, after
``remote.ssd.latency``), and only when that read is done does the network move them (a
second flow over the servers' links and the engine's path). The SSD read and its network
transfer serialise; the servers read their SSDs at once (Mooncake's client visits them
one after the other: the same for one holder).
"""

from __future__ import annotations

import math

from kvsim.cache.eviction import Key
from kvsim.cache.local import REMOTE
from kvsim.kernel.fabric import Fabric, Link
from kvsim.physics.transfer import transfer_terms
from kvsim.sim.constants import Constants
from kvsim.sim.job import Job
from kvsim.sim.node import Node
from kvsim.sim.shared import Shared

GetPath = tuple[tuple[Link, ...], float, tuple, tuple, float | None]


def remote_get(ctx: Shared, engine: Node, job: Job, count: bool = False) -> GetPath:
    """The request's remote GET (its blocks ``job.src`` marks remote) into HBM: over the
    engine's NIC and host-to-GPU link, or the NIC alone when it lands by GPUDirect RDMA
    (``remote.path``). ``count``: a GET that is made (not an estimate): count its
    operations."""
    ids, tokens = get_blocks(ctx, job)
    return get_flow(ctx, engine, ids, tokens, engine.routes[REMOTE], count)


def get_blocks(ctx: Shared, job: Job) -> tuple[list[Key], list[int]]:
    """The keys of a request's remote blocks and the tokens each serves (the always
    computed last token is not read)."""
    B = ctx.run.block_tokens
    last = job.req.input_tokens - 1
    ids: list[Key] = []
    tokens: list[int] = []
    for i, t in enumerate(job.src):
        if t == REMOTE:
            tok = min(B, last - i * B)
            if tok > 0:
                ids.append(job.keys[i])
                tokens.append(tok)
    return ids, tokens


def get_flow(
    ctx: Shared,
    engine: Node,
    ids: list[Key],
    tokens: list[int],
    path: tuple[Link, ...],
    count: bool = False,
) -> GetPath:
    """A GET of blocks ``ids`` (``tokens`` each) as one lockstep flow over the servers
    it reads (its ranks' parts move together), then over the engine's ``path`` (NIC,
    and PCIe when it lands in HBM): (links, size, costs, shares, cap). Unsharded, one
    rank issues the whole GET (then hands the KV to the others over NVLink): it also
    crosses that rank's own NIC and PCIe (``client``). Either way the GET moves at most
    as fast as its clients pull (``Shared.client_cap``, bytes/s of the whole GET, from
    ``remote.client``; kvsim/physics/client.py): the flow's cap, in progress units.
    ``count``: add the GET's operations (a chunk's shard on each server) to the store's."""
    remote = ctx.remote
    assert remote is not None
    return server_flow(ctx, engine, remote.tokens_by_server(ids, tokens), path, count)


def server_flow(
    ctx: Shared,
    engine: Node,
    by_server: dict[int, int],
    path: tuple[Link, ...],
    count: bool = False,
) -> GetPath:
    """``get_flow`` of the tokens each server serves (``by_server``)."""
    remote = ctx.remote
    assert remote is not None
    s = ctx.run.kv_bytes * ctx.run.ratio[REMOTE] / remote.shards  # as stored (its codec)
    if count:
        chunk = ctx.run.chunk_tokens
        remote.get_ops += sum((tok + chunk - 1) // chunk for tok in by_server.values())
    per_server = {srv: tok * s for srv, tok in by_server.items()}
    if remote.shards == 1:  # unsharded: the issuing rank's own NIC and PCIe too
        path = (*path, engine.client)
    links, size, costs, shares = ctx.lockstep(remote.parts(per_server), path)
    # the shared links carry the whole GET per unit of progress: bytes/s -> progress/s
    return links, size, costs, shares, ctx.client_cap / shares[-1]


def engine_terms(
    run: Constants, tokens: int, shares: tuple, cap: float | None
) -> tuple[float, float | None]:
    """A remote GET of ``tokens`` tokens through the store's transfer engine
    (``remote.transfer``; kvsim.physics.transfer): (its delay before the first byte, its
    cap in progress units: the client's and the operations', the lower). Without a
    transfer engine: (0, the client's cap)."""
    te = run.remote_transfer
    if te is None:
        return 0.0, cap
    per_unit = shares[-1]  # bytes of the whole GET per unit of progress (get_flow)
    nbytes = tokens * run.kv_bytes * run.ratio[REMOTE]
    delay, rate = transfer_terms(te, tokens, nbytes, run.pcp, run.remote_ops)
    if rate < math.inf and (cap is None or rate / per_unit < cap):
        cap = rate / per_unit
    return delay, cap


class Stage:
    """One transfer of a GET: its flow (links, size in progress units, costs, shares,
    cap), the delay before it once the stage before it is over (its own: a transfer
    engine's, or the SSD's latency), whether it reads the servers' SSDs (its bytes then
    stay on the servers), and the GET's blocks whose bytes reach the engine when it ends
    (by index; None: all of them)."""

    __slots__ = ("cap", "costs", "delay", "lands", "links", "shares", "size", "ssd")

    def __init__(
        self,
        path: GetPath,
        delay: float,
        ssd: bool = False,
        lands: list[int] | None = None,
    ) -> None:
        self.links: tuple[Link, ...] = path[0]
        self.size: float = path[1]
        self.costs: tuple = path[2]
        self.shares: tuple = path[3]
        self.cap: float | None = path[4]
        self.delay = delay
        self.ssd = ssd
        self.lands = lands


class GetPlan:
    """A GET's stages, in order, and what it reads off the servers' SSDs: (server, key)
    of each shard (for promotion) and the tokens of the blocks any of whose shards is."""

    __slots__ = ("reads", "ssd_tokens", "stages")

    def __init__(
        self, stages: list[Stage], reads: list[tuple[int, Key]], ssd_tokens: int = 0
    ) -> None:
        self.stages = stages
        self.reads = reads
        self.ssd_tokens = ssd_tokens


_NO_READS: list[tuple[int, Key]] = []  # a plan without SSD reads shares it (never changed)


def get_plan(
    ctx: Shared,
    engine: Node,
    ids: list[Key],
    tokens: list[int],
    total: int,
    path: tuple[Link, ...],
    count: bool = False,
) -> GetPlan:
    """The GET of blocks ``ids`` (``tokens`` each, ``total`` in all) as stages over the
    engine's ``path`` (see the module docstring). ``count``: a GET that is made: count its
    operations, and its SSD reads."""
    remote = ctx.remote
    assert remote is not None
    run = ctx.run
    ssd = remote.ssd
    if ssd is None:  # one flow, as ever
        flow = get_flow(ctx, engine, ids, tokens, path, count)
        delay, cap = engine_terms(run, total, flow[3], flow[4])
        return GetPlan([Stage((*flow[:4], cap), delay)], _NO_READS)
    dram, disk, reads, on_ssd = remote.split(ids, tokens)
    stages: list[Stage] = []
    ssd_tokens = 0
    for i in range(len(on_ssd)):
        if on_ssd[i]:
            ssd_tokens += tokens[i]
    if dram:
        flow = server_flow(ctx, engine, dram, path, count)
        delay, cap = engine_terms(run, total - ssd_tokens, flow[3], flow[4])
        lands = [i for i in range(len(on_ssd)) if not on_ssd[i]]
        stages.append(Stage((*flow[:4], cap), delay, lands=lands))
    if disk:
        s = run.kv_bytes * run.ratio[REMOTE] / remote.shards  # as stored (its codec)
        parts = ssd.parts({srv: tok * s for srv, tok in disk.items()}, remote.mirrored)
        size = 0.0
        for _, b in parts:
            if b > size:
                size = b
        shares = tuple([b / size for _, b in parts])  # each SSD moves its own bytes
        read: GetPath = (tuple([link for link, _ in parts]), size, shares, shares, None)
        stages.append(Stage(read, ssd.latency, ssd=True, lands=[]))
        flow = server_flow(ctx, engine, disk, path, count)
        delay, cap = engine_terms(run, ssd_tokens, flow[3], flow[4])
        lands = [i for i in range(len(on_ssd)) if on_ssd[i]]
        stages.append(Stage((*flow[:4], cap), delay, lands=lands))
        if count:
            copies = remote.servers if remote.mirrored else 1
            ssd.reads += len(reads) * copies
            ssd.read_bytes += sum((b for _, b in parts), 0.0)
    return GetPlan(stages, reads, ssd_tokens)


def remote_plan(ctx: Shared, engine: Node, job: Job, count: bool = False) -> GetPlan:
    """The request's remote GET (``remote_get``) as a plan of stages."""
    ids, tokens = get_blocks(ctx, job)
    return get_plan(ctx, engine, ids, tokens, job.tokens[REMOTE], engine.routes[REMOTE], count)


def plan_seconds(fabric: Fabric, plan: GetPlan) -> float:
    """A GET's time after its T0 as the fabric stands now (the load policy's estimate):
    per stage, its delay and its size at the rate it would get (its cap if lower), one
    after the other; links' latencies left out, as for a one-flow GET."""
    total = 0.0
    for st in plan.stages:
        rate = fabric.estimate_rate(st.links, st.costs)
        if st.cap is not None and st.cap < rate:
            rate = st.cap
        total += st.delay + st.size / rate
    return total
