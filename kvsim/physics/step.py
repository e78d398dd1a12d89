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
from typing import TYPE_CHECKING, Protocol

from kvsim.physics.timing import TimingTable

if TYPE_CHECKING:
    from kvsim.config.schema import Scenario

Chunk = tuple[int, int]  # (new tokens, context tokens before them)


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
        """Seconds of one step computing ``chunks`` together: ``fixed_s`` +
        :meth:`compute_share`."""
        ...

    def compute_share(self, chunks: Sequence[Chunk]) -> float:
        """Of :meth:`step`, the seconds the GPUs' SMs work (not the fixed part)."""
        ...


def dense_pairs(new: float, context: float) -> float:
    """Causal query-key pairs of ``new`` queries after ``context`` keys (continuous form:
    the integral of (context + x) over x in [0, new])."""
    return new * context + new * new / 2.0


def sparse_pairs(new: float, context: float, top_k: float) -> float:
    """Pairs when each query sees at most ``top_k`` keys: the integral of
    min(context + x, top_k) over x in [0, new]."""
    if context >= top_k:
        return new * top_k
    if context + new <= top_k:
        return dense_pairs(new, context)
    m = top_k - context  # queries before the cap binds
    return dense_pairs(m, context) + (new - m) * top_k


def expert_coverage(tokens: float, experts: int, per_token: int) -> float:
    """Expected share of ``experts`` touched when ``tokens`` tokens each pick ``per_token``
    of them (uniform routing): 1 - (1 - k/E)^T."""
    if tokens <= 0:
        return 0.0
    if per_token >= experts:
        return 1.0
    return 1.0 - (1.0 - per_token / experts) ** tokens


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
        if self.top_k is not None:
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
    )


def scenario_lone_seconds(sc: Scenario, model: StepModel | None = None) -> Callable[..., float]:
    """t(new, cached) of one request alone on the scenario's engine."""
    m = model if model is not None else make_step_model(sc)
    e = sc.engine
    per = per_step_tokens(e.batching, e.max_batched_tokens, e.long_prefill_token_threshold)

    def lone(new: int, cached: int = 0) -> float:
        return lone_seconds(m, new, cached, per)

    return lone
