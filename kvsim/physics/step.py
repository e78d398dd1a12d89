"""Time of one engine step: a batch of prompt chunks computed together.

A step is a list of chunks ``(new, context)``: ``new`` prompt tokens computed on top of
``context`` tokens already in HBM (cached, restored or computed by earlier chunks). Two
models give its time (docs/engine-model.md has the equations and their sources):

- :class:`Roofline`, from the architecture and the hardware::

      t = fixed + max(FLOPs / achievable FLOP/s, bytes / HBM bandwidth)
      FLOPs = sum over chunks of  new * linear_flops + pairs * pair_flops
                                  (+ all_pairs * indexer_pair_flops, sparse)
      bytes = dense weights + expert weights * coverage(T) + KV read by attention

  where pairs are the causal query-key pairs of the chunk (dense: every earlier key;
  sparse: at most ``top_k`` keys per query, after an indexer that scores every key) and
  coverage(T) = 1 - (1 - k/E)^T is the expected share of E experts that T tokens routed
  top-k touch (uniform routing).
- :class:`TableSteps`, from a measured single-request table t(new, cached): a step costs
  the table's fixed part once (its smallest time, t at the grid's first point) plus each
  chunk's increment t(new, context) - fixed. A batch of one chunk costs exactly the table.

:func:`lone_seconds` is the time of one request alone on an engine, split into chunks as
the engine would (the number the cost model and the ``auto`` policy compare).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from kvsim.physics.ops import Curve, Launches, OpRoofline
from kvsim.physics.shapes import Chunk as Chunk  # re-exported: the step models' vocabulary
from kvsim.physics.shapes import dense_pairs as dense_pairs
from kvsim.physics.shapes import expert_coverage as expert_coverage
from kvsim.physics.shapes import sparse_pairs as sparse_pairs
from kvsim.physics.shapes import step_tokens as step_tokens
from kvsim.physics.timing import TimingTable

if TYPE_CHECKING:
    from kvsim.config.schema import Scenario


class StepModel(Protocol):
    @property
    def extrapolations(self) -> int:
        """Times a time was read off a table beyond its grid (0 for a model)."""
        ...

    @property
    def fixed_s(self) -> float:
        """The fixed part of every step (not GPU work)."""
        ...

    def step(self, chunks: Sequence[Chunk]) -> float:
        """Seconds of one step computing ``chunks`` together: :meth:`overhead` +
        :meth:`compute_share`."""
        ...

    def compute_share(self, chunks: Sequence[Chunk]) -> float:
        """Of :meth:`step`, the seconds the GPUs' SMs work (not the fixed part)."""
        ...

    def overhead(self, chunks: Sequence[Chunk], compute: float) -> float:
        """Of :meth:`step`, the seconds that are not GPU work, given the step's
        ``compute`` (its compute_share): ``fixed_s`` for a roofline or a table; the CPU
        work and any launch wait for the per-operation model."""
        ...


class Parallel:
    """Per-GPU terms of a roofline over ``gpus`` GPUs split ``tp`` x ``pcp`` (attention)
    and ``ep`` (experts): the memory roof of one GPU and the communication a step adds
    (docs/engine-model.md, "Parallelism"). With T the step's tokens and chunks (n, c)::

        memory = (dense / tp + experts x coverage(T) / ep + sum (n + c) x kv / gpus)
                 / (hbm_per_gpu x hbm_efficiency)
        comm   = [ 2 (tp - 1) / tp x (T / pcp) x allreduce        (ring all-reduce, TP)
                 + (pcp - 1) / pcp x sum (n + c) x exchange         (KV each PCP rank lacks)
                 + (ep - 1) / ep x (T / gpus) x alltoall ]          (routed tokens, EP)
                 / nvlink_per_gpu

    Communication is not overlapped with compute (an upper bound; full overlap would
    drop it), and every GPU carries an even share of FLOPs and tokens.
    """

    def __init__(
        self,
        *,
        gpus: int,
        tp: int,
        pcp: int,
        ep: int,
        dense_shards: int,
        expert_shards: int,
        hbm_per_gpu: float,
        nvlink_per_gpu: float,
        allreduce_bytes_per_token: float = 0.0,
        alltoall_bytes_per_token: float = 0.0,
        exchange_bytes_per_token: float = 0.0,
    ) -> None:
        self.gpus = gpus
        self.tp = tp
        self.pcp = pcp
        self.ep = ep
        self.dense_shards = dense_shards
        self.expert_shards = expert_shards
        self.hbm = hbm_per_gpu
        self.nvlink = nvlink_per_gpu
        self.allreduce = allreduce_bytes_per_token
        self.alltoall = alltoall_bytes_per_token
        self.exchange = exchange_bytes_per_token

    def memory_seconds(self, roof: Roofline, chunks: Sequence[Chunk]) -> float:
        tokens, context = step_tokens(chunks)
        cover = expert_coverage(tokens, roof.experts, roof.k)
        nbytes = (
            roof.dense_w / self.dense_shards
            + roof.expert_w * cover / self.expert_shards
            + context * roof.kv / self.gpus
        )
        return nbytes / self.hbm

    def comm_seconds(self, chunks: Sequence[Chunk]) -> float:
        tokens, context = step_tokens(chunks)
        moved = 0.0
        if self.tp > 1:
            moved += 2.0 * (self.tp - 1) / self.tp * (tokens / self.pcp) * self.allreduce
        if self.pcp > 1:
            moved += (self.pcp - 1) / self.pcp * context * self.exchange
        if self.ep > 1:
            moved += (self.ep - 1) / self.ep * (tokens / self.gpus) * self.alltoall
        if not moved:  # one GPU, or nothing to exchange: no link is needed (nor divided by)
            return 0.0
        return moved / self.nvlink


class Roofline:
    """The roofline step model of a node (see the module docstring)."""

    def __init__(
        self,
        *,
        fixed: float,
        achievable_flops: float,
        hbm_bandwidth: float,
        linear_flops_per_token: float,
        pair_flops: float,
        kv_bytes_per_token: float,
        dense_weight_bytes: float,
        expert_weight_bytes: float = 0.0,
        experts: int = 1,
        experts_per_token: int = 1,
        sparse_top_k: int | None = None,
        indexer_pair_flops: float = 0.0,
        scale: float = 1.0,
        window: int = 128,
        window_pair_flops: float = 0.0,
        parallel: Parallel | None = None,
    ) -> None:
        self.fixed = fixed
        self.flops = achievable_flops
        self.hbm = hbm_bandwidth
        self.linear = linear_flops_per_token
        self.pair = pair_flops
        self.kv = kv_bytes_per_token
        self.dense_w = dense_weight_bytes
        self.expert_w = expert_weight_bytes
        self.experts = experts
        self.k = experts_per_token
        self.top_k = sparse_top_k
        self.indexer = indexer_pair_flops
        self.scale = scale
        self.fixed_s = scale * fixed
        self.extrapolations = 0  # a model does not extrapolate; kept for the counter
        self.window = window
        self.window_pair = window_pair_flops
        self.par = parallel

    def flops_of(self, chunks: Sequence[Chunk]) -> float:
        total = 0.0
        top_k = self.top_k
        for new, ctx in chunks:
            total += new * self.linear
            if top_k is None:
                total += dense_pairs(new, ctx) * self.pair
            else:
                total += sparse_pairs(new, ctx, top_k) * self.pair
                total += dense_pairs(new, ctx) * self.indexer
            if self.window_pair:
                total += sparse_pairs(new, ctx, self.window) * self.window_pair
        return total

    def bytes_of(self, chunks: Sequence[Chunk]) -> float:
        tokens = 0
        kv = 0.0
        for new, ctx in chunks:
            tokens += new
            kv += (new + ctx) * self.kv
        cover = expert_coverage(tokens, self.experts, self.k)
        return self.dense_w + self.expert_w * cover + kv

    def compute_share(self, chunks: Sequence[Chunk]) -> float:
        par = self.par
        if par is not None:  # a composed profile: per-GPU memory roof and communication
            return self.scale * (
                max(self.flops_of(chunks) / self.flops, par.memory_seconds(self, chunks))
                + par.comm_seconds(chunks)
            )
        if self.top_k is not None or self.window_pair:
            return self.scale * max(
                self.flops_of(chunks) / self.flops, self.bytes_of(chunks) / self.hbm
            )
        # dense attention, every step of a run: flops_of and bytes_of in one pass (the
        # same operations in the same order, so the same result to the last bit)
        linear, pair, kv_per = self.linear, self.pair, self.kv
        tokens = 0
        flops = 0.0
        kv = 0.0
        for new, ctx in chunks:
            tokens += new
            kv += (new + ctx) * kv_per
            flops += new * linear
            flops += (new * ctx + new * new / 2.0) * pair  # dense_pairs(new, ctx)
        cover = expert_coverage(tokens, self.experts, self.k)
        nbytes = self.dense_w + self.expert_w * cover + kv
        return self.scale * max(flops / self.flops, nbytes / self.hbm)

    def overhead(self, chunks: Sequence[Chunk], compute: float) -> float:
        return self.fixed_s

    def step(self, chunks: Sequence[Chunk]) -> float:
        return self.fixed_s + self.compute_share(chunks)


class TableSteps:
    """Steps formed from a single-request table (see the module docstring)."""

    def __init__(self, table: TimingTable) -> None:
        self.table = table
        self.fixed_s = table.seconds[0][0]

    @property
    def extrapolations(self) -> int:
        return self.table.extrapolations

    def compute_share(self, chunks: Sequence[Chunk]) -> float:
        table = self.table
        fixed = self.fixed_s
        total = 0.0
        for new, ctx in chunks:
            total += table(new, ctx) - fixed
        return total

    def overhead(self, chunks: Sequence[Chunk], compute: float) -> float:
        return self.fixed_s

    def step(self, chunks: Sequence[Chunk]) -> float:
        return self.fixed_s + self.compute_share(chunks)


def kernel_copy_seconds(nbytes: float, bandwidth: float, sm_share: float) -> float:
    """SM seconds a copy kernel takes to move ``nbytes`` at ``bandwidth`` (the host link
    it copies over) while holding ``sm_share`` of the SMs (``node.copy_kernel_sm_share``);
    a step computing meanwhile loses them (docs/engine-model.md, "Restores cost the
    GPU")."""
    if nbytes <= 0.0:
        return 0.0
    return sm_share * nbytes / bandwidth


def lone_seconds(model: StepModel, new: int, cached: int, per_step: int) -> float:
    """Time to prefill one request alone: ``new`` tokens after ``cached``, at most
    ``per_step`` tokens a step (a serial engine: ``per_step`` >= ``new``)."""
    if new <= 0:
        return 0.0
    total = 0.0
    done = 0
    per_step = max(per_step, 1)
    while done < new:
        n = min(per_step, new - done)
        total += model.step(((n, cached + done),))
        done += n
    return total


def per_step_tokens(batching: str, max_batched_tokens: int, threshold: int) -> int:
    """Most tokens of one prompt in one step: the budget (capped by the long-prefill
    threshold when one is set) when chunked; no limit when serial."""
    if batching == "serial":
        return 2**62
    return min(max_batched_tokens, threshold) if threshold > 0 else max_batched_tokens


def make_step_model(sc: Scenario) -> StepModel:
    """The scenario's step model: its roofline, or steps formed from its table."""
    t = sc.timing
    r = t.roofline
    if r is None:
        assert t.new_tokens is not None and t.cached_tokens is not None and t.seconds is not None
        return TableSteps(TimingTable(t.new_tokens, t.cached_tokens, t.seconds, t.scale))
    hbm = sc.node.hbm_bandwidth_per_gpu
    assert hbm is not None  # cross_checks require it with a roofline
    if r.ops is not None:
        return make_op_roofline(sc)
    assert r.achievable_flops is not None  # cross_checks require it without ops
    return Roofline(
        fixed=r.fixed,
        achievable_flops=r.achievable_flops,
        hbm_bandwidth=hbm * sc.node.gpus,
        linear_flops_per_token=r.linear_flops_per_token,
        pair_flops=r.pair_flops,
        kv_bytes_per_token=sc.model.kv_bytes,
        dense_weight_bytes=r.dense_weight_bytes,
        expert_weight_bytes=r.expert_weight_bytes,
        experts=r.experts,
        experts_per_token=r.experts_per_token,
        sparse_top_k=r.sparse_top_k if r.attention == "sparse" else None,
        indexer_pair_flops=r.indexer_pair_flops,
        scale=t.scale,
        window=r.window,
        window_pair_flops=r.window_pair_flops,
        parallel=make_parallel(sc),
    )


def kv_copies(layout: Any, tp: int) -> float:
    """Copies of each token's KV a tensor-parallel group holds: its ranks split the KV
    heads (each keeps max(kv_heads // tp, 1) of them, as vLLM does: more than one copy
    when tp exceeds the KV heads); an MLA latent, or a KV size given without its layout,
    every rank keeps whole (tp copies)."""
    if layout is None or layout.kind == "mla":
        return float(tp)
    heads = int(getattr(layout, "kv_heads", 1))
    return tp * max(heads // tp, 1) / heads


def make_op_roofline(sc: Scenario) -> OpRoofline:
    """The scenario's per-operation step model (``timing.roofline.ops``)."""
    r = sc.timing.roofline
    n = sc.node
    assert r is not None and n.hbm_bandwidth_per_gpu is not None
    return op_roofline(
        r,
        gpus=n.gpus,
        pcp=n.pcp,
        hbm_per_gpu=n.hbm_bandwidth_per_gpu,
        nvlink_per_gpu=n.nvlink_per_gpu,
        # the attention reads every copy the TP ranks keep (each rank reads its own)
        kv_bytes_per_token=sc.model.kv_bytes * kv_copies(sc.model.kv_layout, r.tp),
        cuda_graphs=sc.engine.cuda_graphs,
        scale=sc.timing.scale,
    )


def op_roofline(
    r: Any,
    *,
    gpus: int,
    pcp: int,
    hbm_per_gpu: float,
    nvlink_per_gpu: float,
    kv_bytes_per_token: float,
    cuda_graphs: bool,
    scale: float = 1.0,
) -> OpRoofline:
    """A per-operation step model from a ``timing.roofline`` with ``ops`` (kvsim/physics/
    ops.py): the roofline's work per GPU, each operation kind on its own curve.
    ``kv_bytes_per_token``: the KV the node's GPUs read per token of context, every copy
    (:func:`kv_copies`). The
    catalogue's composition (kvsim/catalogue/compose.py) builds its model the same way."""
    o = r.ops
    assert o is not None
    tp, ep, pp = r.tp, r.ep, r.pp
    # pipeline stages run one after another: a step's work is that of one stage's GPUs
    # over all the layers, plus pp - 1 hand-offs of its activations (each GPU its 1/tp)
    gpus //= pp
    # bytes each GPU moves per new token (TP all-reduces over its tokens, EP's all-to-all
    # of the routed activations) and per token of context (the PCP KV exchange), as
    # Parallel.comm_seconds counts them
    per_token = 0.0
    if tp > 1:
        per_token += 2.0 * (tp - 1) / tp / pcp * r.allreduce_bytes_per_token
    if ep > 1:
        per_token += (ep - 1) / ep / gpus * r.alltoall_bytes_per_token
    per_context = (pcp - 1) / pcp * r.pcp_exchange_bytes_per_token if pcp > 1 else 0.0

    def curve(c: Any) -> Curve:
        return Curve(c.peak_flops, c.e_max, c.half, c.e_mem)

    return OpRoofline(
        hbm=hbm_per_gpu,
        gpus=gpus,
        pcp=pcp,
        dense_flops_per_token=r.linear_flops_per_token - o.expert_flops_per_token,
        dense_weight_bytes=r.dense_weight_bytes / (r.dense_weight_shards or gpus),
        dense=curve(o.dense),
        expert_flops_per_token=o.expert_flops_per_token,
        expert_weight_bytes=r.expert_weight_bytes / (r.expert_weight_shards or gpus),
        experts=r.experts,
        experts_per_token=r.experts_per_token,
        expert=curve(o.experts),
        pair_flops=r.pair_flops,
        kv_bytes_per_token=kv_bytes_per_token,
        attention=curve(o.attention),
        sparse_top_k=r.sparse_top_k if r.attention == "sparse" else None,
        indexer_pair_flops=r.indexer_pair_flops,
        window=r.window,
        window_pair_flops=r.window_pair_flops,
        comm_bytes_per_token=per_token,
        comm_context_bytes_per_token=per_context,
        comm_bandwidth=o.comm_bandwidth or nvlink_per_gpu,
        collectives=o.collectives,
        collective_latency=o.collective_latency,
        stage_bytes_per_token=(pp - 1) * r.pp_bytes_per_token / tp / pcp,
        stage_bandwidth=o.stage_bandwidth or o.comm_bandwidth or nvlink_per_gpu,
        stage_latency=(pp - 1) * o.stage_latency,
        launches=Launches(
            cpu_step=o.cpu_step,
            cpu_request=o.cpu_request,
            kernel_s=o.kernels * o.kernel_launch,
            graphs=cuda_graphs,
            eager_s=None if o.eager_launch is None else o.kernels * o.eager_launch,
            graph_s=o.graph_replay,
            graph_max_tokens=o.graph_max_tokens,
        ),
        scale=scale,
    )


def make_parallel(sc: Scenario) -> Parallel | None:
    """The per-GPU terms of the scenario's roofline, or None for a node-level roofline
    (no shard counts, no communication, full HBM bandwidth: the named profiles)."""
    r = sc.timing.roofline
    n = sc.node
    assert r is not None and n.hbm_bandwidth_per_gpu is not None
    node_level = (
        r.dense_weight_shards is None
        and r.expert_weight_shards is None
        and r.hbm_efficiency == 1.0
        and not (r.allreduce_bytes_per_token or r.alltoall_bytes_per_token)
        and not r.pcp_exchange_bytes_per_token
    )
    if node_level:
        return None
    return Parallel(
        gpus=n.gpus,
        tp=r.tp,
        pcp=n.pcp,
        ep=r.ep,
        dense_shards=r.dense_weight_shards or n.gpus,
        expert_shards=r.expert_weight_shards or n.gpus,
        hbm_per_gpu=n.hbm_bandwidth_per_gpu * r.hbm_efficiency,
        nvlink_per_gpu=n.nvlink_per_gpu,
        allreduce_bytes_per_token=r.allreduce_bytes_per_token,
        alltoall_bytes_per_token=r.alltoall_bytes_per_token,
        exchange_bytes_per_token=r.pcp_exchange_bytes_per_token,
    )


def scenario_lone_seconds(sc: Scenario, model: StepModel | None = None) -> Callable[..., float]:
    """t(new, cached) of one request alone on the scenario's engine."""
    m = model if model is not None else make_step_model(sc)
    e = sc.engine
    per = per_step_tokens(e.batching, e.max_batched_tokens, e.long_prefill_token_threshold)

    def lone(new: int, cached: int = 0) -> float:
        return lone_seconds(m, new, cached, per)

    return lone
