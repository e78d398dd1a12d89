"""A run's constants: what the engines need of the scenario, derived once, never changed.

What this module owns: :class:`Constants` (the step model, KV bytes, block size, batching
limits, the HBM working pool, the write and prefetch settings, and the tiers as objects,
:mod:`kvsim.sim.tiers`, with their figures also as lists by tier code for the hot loops)
and :func:`head_share` (the share of a block one tensor-parallel rank holds). Nothing here
depends on the simulation's state: the clock, the engines and the stores live in
:class:`~kvsim.sim.shared.Shared`, which holds one of these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvsim.cache.local import WRITE_POLICIES
from kvsim.config.pools import pools
from kvsim.config.schema import Scenario
from kvsim.physics.step import StepModel, make_step_model, per_step_tokens
from kvsim.sim.tiers import KINDS, Tier, make_tiers


def head_share(sc: Scenario) -> float:
    """The share of a block's KV one tensor-parallel rank holds, by heads: a GQA or MHA
    model's TP ranks split its KV heads (each keeps max(kv_heads // tp, 1) of them, as
    vLLM does), so each copies only its heads when the block is staged for a put; an MLA
    latent (or a KV size given without its layout) is kept whole by every rank; with
    pipeline stages (``timing.roofline.pp``) a rank holds its stage's layers. ``tp``
    is the roofline's, else the node's GPUs per context-parallel rank (a measured
    timing table's engine is the node)."""
    r = sc.timing.roofline
    stages = r.pp if r is not None else 1  # each pipeline stage holds its layers' KV
    layout = sc.model.kv_layout
    if layout is None or layout.kind == "mla":
        return 1.0 / stages
    tp = r.tp if r is not None else max(sc.node.gpus // sc.node.pcp, 1)
    heads = int(getattr(layout, "kv_heads", 1))
    return max(heads // tp, 1) / heads / stages  # kv_copies(layout, tp) / tp / stages


def ops_per_block(sc: Scenario, te: Any) -> int:
    """A transfer engine's operations per block: its own, else one per layer and per K
    and V (one per layer for an MLA latent), a per-layer paged layout's descriptors."""
    if te is None:
        return 0
    if te.ops_per_block is not None:
        return int(te.ops_per_block)
    layout = sc.model.kv_layout
    if layout is None:
        return 1
    return layout.layers * (1 if layout.kind == "mla" else 2)


class Constants:
    """What the engines read of the scenario, derived once (see the module docstring)."""

    def __init__(self, sc: Scenario, kinds: Sequence[type[Tier] | Tier] = KINDS) -> None:
        """``kinds``: the tier kinds by code (kvsim.sim.tiers.make_tiers; docs/extending.md)."""
        self.scenario = sc
        self.steps: StepModel = make_step_model(sc)
        self.kv_bytes: float = sc.model.kv_bytes
        self.block_tokens: int = sc.workload.block_tokens
        # the tiers in their order (gpu, host, nvme, remote, peer), as objects
        self.tiers: tuple[Tier, ...] = make_tiers(sc, kinds)
        tiers = self.tiers
        # ... and their figures by tier code, for the hot loops
        self.t0: list[float] = [t.t0 for t in tiers]
        # the engine's part of each T0 (cross_checks: never more than the T0 itself)
        self.t0_engine: list[float] = [t.t0_engine for t in tiers]
        # KV codecs: stored bytes / raw bytes, and seconds per raw byte to encode (writes
        # into the tier) and decode (restores); a peer serves blocks as its host stores them
        self.ratio: list[float] = [t.ratio for t in tiers]
        self.encode_s: list[float] = [t.encode_s for t in tiers]
        self.decode_s: list[float] = [t.decode_s for t in tiers]
        self.codec_on_gpu: list[bool] = [t.codec_on_gpu for t in tiers]
        # the tiers a restore reads as one transfer over the engine's route (Tier.direct),
        # and of them those a prefetch brings into host instead, under a prefetch policy
        self.direct: list[int] = [t.code for t in tiers if t.direct]
        self.fetched: list[int] = [t.code for t in tiers if t.direct and t.prefetched]
        # by code: read through prefetches into host under a prefetch policy (NVMe, remote)
        self.prefetched: list[bool] = [t.prefetched for t in tiers]
        # the local tiers (a store on each engine), in the lookup and demotion order
        self.chain: list[int] = [
            t.code for t in sorted((t for t in tiers if t.local), key=lambda t: t.order)
        ]
        self.names: list[str] = [t.name for t in tiers]
        rc = sc.remote
        e = sc.engine
        self.serial: bool = e.batching == "serial"
        self.budget: int = 2**62 if self.serial else e.max_batched_tokens
        self.max_requests: int = 1 if self.serial else e.max_batch_requests
        self.per_step: int = per_step_tokens(
            e.batching, e.max_batched_tokens, e.long_prefill_token_threshold
        )
        self.scheduler: str = e.scheduler.name
        # engine.frontend: per-request work outside the kernels (None: none), and the first
        # token's way out, added when a request finishes
        self.frontend = e.frontend
        self.output_s: float = e.frontend.output if e.frontend is not None else 0.0
        self.aging: float = e.sjf_aging
        self.layerwise: bool = e.layerwise
        layout = sc.model.kv_layout
        self.layers: int = layout.layers if layout is not None else 1
        self.max_inflight: int = e.max_inflight_restores or 2**62
        # engine.preemption: recompute allocates working KV chunk by chunk and preempts
        # (kvsim.sim.preempt); hold reserves a request's whole prompt when it is admitted
        self.preempts: bool = e.preemption != "hold"
        # engine.mode colocated: requests decode on the engine after their prefill
        # (kvsim.sim.colocated); swap: a decoding request preempted goes to host memory
        self.colocated: bool = e.mode == "colocated"
        self.swap: bool = e.preemption == "swap"
        # HBM as pools (kvsim.config.pools): the node's KV pool bounds the working KV
        # (running requests' prompts and restores in flight); beyond ``cache_slack`` of it
        # the working KV evicts the prefix cache (tiers.gpu.capacity)
        hbm = pools(sc)
        self.kv_pool: float = hbm.node_kv
        self.cache_slack: float = hbm.slack
        self.timeout: float | None = rc.timeout if rc.enabled else None
        # tiers.peer: a lookup also finds blocks in other engines' host tiers (kvsim.sim.lookup)
        self.peer: bool = sc.tiers.peer.enabled
        # transfer engines' own costs on the peer reads and the remote GETs (None: the
        # links' bytes only; kvsim.physics.transfer), and their operations per block
        self.peer_transfer = sc.tiers.peer.transfer
        self.remote_transfer = rc.transfer if rc.enabled else None
        self.pcp: int = sc.node.pcp
        self.peer_ops: int = ops_per_block(sc, self.peer_transfer)
        self.remote_ops: int = ops_per_block(sc, self.remote_transfer)
        # cluster.handoff: each finished request's KV goes to the decode pool (kvsim.sim.
        # handoff; None: off), through its transfer engine (None: the links' bytes only)
        ho = sc.cluster.handoff
        self.handoff = ho if ho.enabled else None
        self.handoff_transfer = ho.transfer if ho.enabled else None
        self.handoff_ops: int = ops_per_block(sc, self.handoff_transfer)
        # remote.path: a GET lands in HBM by GPUDirect RDMA (NIC only: no host-to-GPU link,
        # no client copy) or through host memory (NIC, then the host-to-GPU link)
        self.remote_gpudirect: bool = rc.enabled and rc.gpudirect
        self.chunk_tokens: int = rc.chunk_tokens  # tokens of one GET/PUT operation
        self.nvme_gds: bool = sc.tiers.nvme.path == "gds"
        self.max_pending_puts: int = rc.max_pending_puts
        # remote write policy, coded as the local tiers' (kvsim.cache.local.BACK, ...)
        self.put_policy: int = WRITE_POLICIES.index(rc.write_policy)
        self.put_threshold: int = rc.write_threshold
        # part of an unsharded GET the issuing rank sends on over NVLink (to every other
        # rank its part of the KV)
        self.handoff_share: float = (sc.node.gpus - 1) / sc.node.gpus
        # copies into HBM by a kernel (node.copy_engine: kernel): the share of the SMs it
        # holds while it copies at the host-to-GPU rate; 0 for the copy engines (dma),
        # which take no SM time (docs/engine-model.md, "Restores cost the GPU")
        node = sc.node
        self.copy_sm_share: float = (
            node.copy_kernel_sm_share if node.copy_engine == "kernel" else 0.0
        )
        self.gpus: int = node.gpus
        pf = sc.prefetch
        self.prefetching: bool = pf.policy.name != "none"  # NVMe and remote reached by prefetch
        self.prefetch_timeout: float | None = pf.timeout if pf.policy.name == "timeout" else None
        self.prefetch_on_session: bool = pf.on_session
        # keys of blocks ever computed and kept are tracked (recomputed_tokens) only where
        # a block can be cached at all (a cluster with no cache evicts nothing)
        self.track_seen: bool = (
            sc.tiers.gpu.capacity > 0
            or sc.remote.enabled
            or any(getattr(t, "enabled", False) for t in tiers[1:] if t.local)
        )
