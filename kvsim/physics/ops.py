"""A step as the sum of its operations, each on its own roofline (the per-operation model).

What this module owns: :func:`efficiency` (a kernel's achieved fraction of peak as a
function of its size), :class:`Curve` (one operation kind's efficiency: its best fraction
of the FLOP peak ``e_max``, the size ``half`` at which it reaches half of that, and the
fraction of HBM bandwidth its memory-bound form reaches ``e_mem``), :class:`Launches`
(the host's kernel launches and per-step CPU work), and :class:`OpRoofline`, the step
model of a composed profile (docs/engine-model.md, "The per-operation roofline").

Per GPU (every GPU of the node in lockstep), a step of chunks ``(n, c)`` (n new tokens
after c in HBM), T = sum n tokens, on ``gpus`` = tp x pcp GPUs (one pipeline stage's)::

    dense GEMMs   max(T f_dense / gpus / (P e(M)),        W_dense / (B e_mem))   M = T / pcp
    expert GEMMs  max(T f_exp / gpus / (P e(m_e)),        W_exp cover(T) / (B e_mem))
                  m_e = T k / (E cover(T)): tokens per expert touched
    attention     max(sum pairs_i p / gpus / (P e(S_i)),  sum (n_i + c_i) kv / gpus / (B e_mem))
                  S_i = c_i + n_i / 2: keys a query sees on average
    comm          bytes moved / link + collectives x latency
                  + (pp - 1) (T h / (tp pcp) / stage link + stage latency)
    GPU time      = dense + experts + attention + comm
    step          = cpu_step + cpu_request x requests + max(GPU time, launches)

with ``e(x) = e_max x / (x + half)`` for each operation kind (P: the dense peak per GPU of
the dtype its kernels compute in: the model's for dense GEMMs, the experts' kernel's for
expert GEMMs, BF16 for attention; B: HBM bandwidth per GPU). The memory term is what makes
the GPU card's balance matter: a GEMM of 64 tokens reads all its weights for little work
and is bound by HBM on an H100 but not on an H20. ``launches`` is the host's time to launch
the step's kernels: in eager mode every kernel (``kernels x per_kernel``); with CUDA graphs
a step of at most ``graph_max_tokens`` replays its graphs (``graph_s``), a larger one
launches per kernel. When the launches take longer than the GPU's work the GPU waits (a
small step in eager mode is launch-bound). The CPU work of a step (scheduling, input
preparation, sampling) runs in series with it (a synchronous scheduler: an upper bound
where the engine overlaps it).

With ``pp`` pipeline stages a step runs through the stages one after another: its work is
one stage's GPUs doing all the layers, plus pp - 1 hand-offs of the activations (h bytes
per token: hidden states and residual, each GPU sending its 1/(tp pcp)). kvsim runs one
step at a time, as vLLM with one batch in flight: a lone request's time is right, while
under load vLLM keeps up to pp batches in flight, so kvsim's throughput is a lower bound
(up to pp times low).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from kvsim.physics.shapes import Chunk, dense_pairs, expert_coverage, sparse_pairs

#: the parts of a step, in the order :meth:`OpRoofline.parts` gives them
PARTS: Final = ("dense", "experts", "attention", "comm", "launch_wait", "cpu")


def efficiency(x: float, e_max: float, half: float) -> float:
    """A kernel's achieved fraction of peak at size ``x`` (tokens, tokens per expert, keys
    per query): ``e_max x / (x + half)``; 0 for nothing to do."""
    if x <= 0.0:
        return 0.0
    return e_max * x / (x + half)


def roof_seconds(flops: float, nbytes: float, peak: float, e: float, bw: float) -> float:
    """One operation's time on its roofline: its FLOPs at ``peak x e`` or its bytes at
    ``bw`` (already times its memory efficiency), whichever is longer."""
    compute = flops / (peak * e) if flops > 0.0 and e > 0.0 else 0.0
    memory = nbytes / bw if nbytes > 0.0 else 0.0
    return compute if compute > memory else memory


class Curve:
    """One operation kind's roofline on one GPU (see the module docstring): the dense peak
    FLOP/s of the dtype its kernels compute in, and its efficiency curve."""

    __slots__ = ("e_max", "e_mem", "half", "peak")

    def __init__(self, peak: float, e_max: float, half: float, e_mem: float) -> None:
        self.peak = peak  # dense peak FLOP/s of one GPU in the kernels' dtype
        self.e_max = e_max  # the best fraction of the dense FLOP peak it reaches
        self.half = half  # the size at which it reaches half of e_max
        self.e_mem = e_mem  # the fraction of HBM bandwidth its memory-bound form reaches


class Launches:
    """The host's side of a step: CPU work and kernel launches (see the module docstring)."""

    __slots__ = (
        "cpu_request",
        "cpu_step",
        "eager_s",
        "graph_max_tokens",
        "graph_s",
        "graphs",
        "kernel_s",
    )

    def __init__(
        self,
        *,
        cpu_step: float,
        cpu_request: float,
        kernel_s: float,
        graphs: bool,
        eager_s: float | None = None,
        graph_s: float,
        graph_max_tokens: int,
    ) -> None:
        self.cpu_step = cpu_step  # scheduling, input preparation, sampling: per step
        self.cpu_request = cpu_request  # ... and per request in the step
        # launching the step's kernels one by one: compiled code too large a step for its
        # graphs, and (eager_s) eager mode, which runs the model's PyTorch code op by op
        self.kernel_s = kernel_s
        self.eager_s = kernel_s if eager_s is None else eager_s
        self.graphs = graphs  # CUDA graphs (false: eager mode)
        self.graph_s = graph_s  # replaying a step's graphs
        self.graph_max_tokens = graph_max_tokens  # the largest step captured in graphs

    def launch_seconds(self, tokens: int) -> float:
        """Host time to launch a step of ``tokens`` tokens' kernels."""
        if not self.graphs:
            return self.eager_s
        if tokens <= self.graph_max_tokens:
            return self.graph_s
        return self.kernel_s

    def cpu_seconds(self, requests: int) -> float:
        return self.cpu_step + self.cpu_request * requests


class OpRoofline:
    """The per-operation step model (see the module docstring). Per-GPU quantities: the
    weights each GPU reads, the FLOP peak and HBM bandwidth of one GPU."""

    def __init__(
        self,
        *,
        hbm: float,
        gpus: int,
        pcp: int,
        dense_flops_per_token: float,
        dense_weight_bytes: float,
        dense: Curve,
        expert_flops_per_token: float,
        expert_weight_bytes: float,
        experts: int,
        experts_per_token: int,
        expert: Curve,
        pair_flops: float,
        kv_bytes_per_token: float,
        attention: Curve,
        sparse_top_k: int | None = None,
        indexer_pair_flops: float = 0.0,
        window: int = 128,
        window_pair_flops: float = 0.0,
        comm_bytes_per_token: float = 0.0,
        comm_context_bytes_per_token: float = 0.0,
        comm_bandwidth: float = 1.0,
        collectives: int = 0,
        collective_latency: float = 0.0,
        stage_bytes_per_token: float = 0.0,
        stage_bandwidth: float = 1.0,
        stage_latency: float = 0.0,
        launches: Launches,
        scale: float = 1.0,
    ) -> None:
        self.hbm = hbm
        self.gpus = gpus
        self.pcp = pcp
        self.f_dense = dense_flops_per_token
        self.w_dense = dense_weight_bytes  # per GPU
        self.dense = dense
        self.f_exp = expert_flops_per_token
        self.w_exp = expert_weight_bytes  # per GPU, every expert it holds
        self.experts = experts
        self.k = experts_per_token
        self.expert = expert
        self.pair = pair_flops
        self.kv = kv_bytes_per_token  # node-wide; a GPU reads its share
        self.attention = attention
        self.top_k = sparse_top_k
        self.indexer = indexer_pair_flops
        self.window = window
        self.window_pair = window_pair_flops
        # communication per GPU: bytes per new token (TP all-reduce, EP all-to-all) and per
        # token of context (the PCP KV exchange), over the link the group spans
        self.comm_tokens = comm_bytes_per_token
        self.comm_context = comm_context_bytes_per_token
        self.comm_bw = comm_bandwidth
        self.collectives = collectives  # collective calls per step (each pays the latency)
        self.collective_latency = collective_latency
        # pipeline stages: bytes per new token each GPU hands to the next stage (all the
        # hand-offs of a step) and their fixed time
        self.stage_tokens = stage_bytes_per_token
        self.stage_bw = stage_bandwidth
        self.stage_latency = stage_latency
        self.talks = collectives > 0 or stage_bytes_per_token > 0.0 or stage_latency > 0.0
        self.launches = launches
        self.scale = scale
        self.fixed_s = scale * launches.cpu_step  # the part of every step that is not GPU
        self.extrapolations = 0  # a model does not extrapolate

    # ---- the parts of a step ----------------------------------------------------------

    def dense_seconds(self, tokens: int) -> float:
        c = self.dense
        e = efficiency(tokens / self.pcp, c.e_max, c.half)
        flops = tokens * self.f_dense / self.gpus
        return roof_seconds(flops, self.w_dense, c.peak, e, self.hbm * c.e_mem)

    def expert_seconds(self, tokens: int) -> float:
        if self.f_exp <= 0.0 or tokens <= 0:
            return 0.0
        c = self.expert
        cover = expert_coverage(tokens, self.experts, self.k)
        per_expert = tokens * self.k / (self.experts * cover)
        e = efficiency(per_expert, c.e_max, c.half)
        flops = tokens * self.f_exp / self.gpus
        return roof_seconds(flops, self.w_exp * cover, c.peak, e, self.hbm * c.e_mem)

    def attention_seconds(self, chunks: Sequence[Chunk]) -> float:
        c = self.attention
        top_k = self.top_k
        peak = c.peak * c.e_max
        compute = 0.0
        read = 0.0
        for new, ctx in chunks:
            if new <= 0:
                continue
            seen = ctx + new / 2.0  # keys a query of the chunk sees, on average
            if top_k is None:
                flops = dense_pairs(new, ctx) * self.pair
            else:
                flops = sparse_pairs(new, ctx, top_k) * self.pair
                flops += dense_pairs(new, ctx) * self.indexer
                if seen > top_k:
                    seen = float(top_k)
            if self.window_pair:
                flops += sparse_pairs(new, ctx, self.window) * self.window_pair
            # at efficiency e_max seen / (seen + half): flops / (peak e) in one step
            compute += flops / self.gpus * (seen + c.half) / (peak * seen)
            read += (new + ctx) * self.kv / self.gpus
        memory = read / (self.hbm * c.e_mem)
        return compute if compute > memory else memory

    def comm_seconds(self, chunks: Sequence[Chunk]) -> float:
        if not self.talks:
            return 0.0
        tokens = 0
        context = 0
        for new, ctx in chunks:
            tokens += new
            context += new + ctx
        moved = tokens * self.comm_tokens + context * self.comm_context
        handed = tokens * self.stage_tokens / self.stage_bw + self.stage_latency
        return moved / self.comm_bw + self.collectives * self.collective_latency + handed

    def parts(self, chunks: Sequence[Chunk]) -> dict[str, float]:
        """The step's time by part (:data:`PARTS`), seconds; they sum to :meth:`step`."""
        tokens = 0
        for new, _ in chunks:
            tokens += new
        s = self.scale
        dense = self.dense_seconds(tokens)
        experts = self.expert_seconds(tokens)
        attention = self.attention_seconds(chunks)
        comm = self.comm_seconds(chunks)
        gpu = dense + experts + attention + comm
        wait = self.launches.launch_seconds(tokens) - gpu
        return {
            "dense": s * dense,
            "experts": s * experts,
            "attention": s * attention,
            "comm": s * comm,
            "launch_wait": s * wait if wait > 0.0 else 0.0,
            "cpu": s * self.launches.cpu_seconds(len(chunks)),
        }

    # ---- the step model's interface (kvsim.physics.step.StepModel) --------------------

    def compute_share(self, chunks: Sequence[Chunk]) -> float:
        tokens = 0
        for new, _ in chunks:
            tokens += new
        gpu = (
            self.dense_seconds(tokens)
            + self.expert_seconds(tokens)
            + self.attention_seconds(chunks)
            + self.comm_seconds(chunks)
        )
        return self.scale * gpu

    def overhead(self, chunks: Sequence[Chunk], compute: float) -> float:
        """The step's time that is not GPU work, given its ``compute`` (compute_share): its
        CPU work, and the wait for launches that outlast the GPU's work."""
        tokens = 0
        for new, _ in chunks:
            tokens += new
        launch = self.scale * self.launches.launch_seconds(tokens)
        cpu = self.scale * self.launches.cpu_seconds(len(chunks))
        return cpu + (launch - compute if launch > compute else 0.0)

    def step(self, chunks: Sequence[Chunk]) -> float:
        compute = self.compute_share(chunks)
        return self.overhead(chunks, compute) + compute
