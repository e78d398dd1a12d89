"""The engine's hardware, the served model and the prefill step-time model (normally from a
profile): :class:`Node`, :class:`Model` with its KV layout, :class:`Roofline` (with its
per-operation form, :class:`Ops`), :class:`Timing`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kvsim.config.schema.fields import (
    Bandwidth,
    Bounded,
    Duration,
    Label,
    NonNegInt,
    PosInt,
    PositiveSize,
    Record,
    Size,
    Tokens,
)


class Node(Record):
    """One prefill engine: a node of GPUs running one context-parallel prefill instance."""

    gpu: Label(200) = Field(description="GPU model name, for reports")
    gpus: Bounded(4096) = Field(description="GPUs in the node")
    pcp: Bounded(4096) = Field(
        description="prefill context-parallel degree (ranks sharing a request)"
    )
    hbm_per_gpu: PositiveSize = Field(description="HBM per GPU")
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = Field(
        0.9,
        description="share of HBM the engine uses (vLLM's gpu_memory_utilization, default "
        "0.9); weights, the activation reserve and the KV pool share it",
    )
    activation_reserve: Size = Field(
        "5 GB",
        description="HBM per GPU kept for activations of a full step, CUDA graphs and "
        "PCP buffers (what vLLM's profiling run measures); L, 2-20 GB",
    )
    kv_per_gpu: PositiveSize | None = Field(
        None,
        description="KV pool per GPU as an explicit override (null: hbm_per_gpu x "
        "gpu_memory_utilization - weights / gpus - activation_reserve)",
    )
    host_dram: PositiveSize = Field(description="host DRAM per node")
    nvme_drives: Annotated[int, Field(ge=0, le=4096, strict=True)] = Field(
        description="local NVMe drives per node"
    )
    nvme_drive_capacity: Size = Field(description="capacity of one NVMe drive")
    nvme_read_per_drive: Bandwidth = Field(description="sequential read bandwidth per drive")
    nvme_latency: Duration = Field("80 us", description="NVMe read latency")
    nvme_write_per_drive: Bandwidth = Field(
        "7 GB/s", description="sequential write bandwidth per drive (host-to-NVMe demotions)"
    )
    h2d_per_gpu: Bandwidth = Field(description="pinned host-to-GPU bandwidth per GPU")
    h2d_latency: Duration = Field("10 us", description="host-to-GPU copy latency")
    d2h_per_gpu: Bandwidth = Field(
        "25 GB/s",
        description="GPU-to-host bandwidth of the KV store path per GPU: demotions to host "
        "and the staging copy before a put (the engine waits for that one, as vLLM's "
        "connector wait_for_save does)",
    )
    nvlink_per_gpu: Bandwidth = Field(
        "900 GB/s",
        description="NVLink bandwidth out of one GPU (one direction, half the bidirectional "
        "figure): with an unsharded remote store, the rank that issued a GET hands the "
        "other ranks their parts over it",
    )
    hbm_bandwidth_per_gpu: Bandwidth | None = Field(
        None, description="HBM bandwidth per GPU (the roofline step model's memory roof)"
    )
    nic_per_gpu: Bandwidth = Field(description="network bandwidth per GPU")
    network_latency: Duration = Field("50 us", description="one-way network latency to a server")
    gpudirect_rdma: bool = Field(
        True,
        description="the NICs can write into HBM (GPUDirect RDMA: NICs and GPUs under common "
        "PCIe switches); false: no NIC path into HBM, so remote.path: gpudirect is refused",
    )
    copy_engine: Literal["dma", "kernel"] = Field(
        "dma",
        description="what moves restored KV into HBM: the GPU's copy engines (dma, vLLM's "
        "offloading connector: no SM time) or a copy kernel (kernel, LMCache's "
        "multi_layer_kv_transfer: SM time that slows a step computing meanwhile)",
    )
    copy_kernel_sm_share: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] = Field(
        1.0,
        description="with copy_engine: kernel, the share of a GPU's SMs the copy kernel holds "
        "while it copies at the host-to-GPU rate (1: its grid fills every SM, as LMCache's)",
    )


class MlaLayout(Record):
    """Multi-head latent attention: one compressed latent (+ rope key) per token per layer."""

    kind: Literal["mla"]
    layers: Bounded(100_000) = Field(description="layers with a KV cache")
    latent_dim: PosInt = Field(description="compressed KV latent width (kv_lora_rank)")
    rope_dim: NonNegInt = Field(description="decoupled rope key width")
    latent_dtype_bytes: Annotated[float, Field(gt=0)] = Field(description="bytes per latent value")
    rope_dtype_bytes: Annotated[float, Field(gt=0)] = Field(description="bytes per rope value")
    extra_bytes_per_layer: Annotated[float, Field(ge=0)] = Field(
        0.0, description="per token and layer, e.g. FP8 scales"
    )

    def bytes_per_token(self) -> float:
        per_layer = (
            self.latent_dim * self.latent_dtype_bytes
            + self.rope_dim * self.rope_dtype_bytes
            + self.extra_bytes_per_layer
        )
        return self.layers * per_layer


class HeadsLayout(Record):
    """MHA or GQA: a key and a value vector per KV head per token per layer."""

    kind: Literal["mha", "gqa"]
    layers: Bounded(100_000) = Field(description="layers with a KV cache")
    kv_heads: PosInt = Field(description="key/value heads (= attention heads for MHA)")
    head_dim: PosInt = Field(description="width of one head")
    dtype_bytes: Annotated[float, Field(gt=0)] = Field(description="bytes per cached value")
    extra_bytes_per_layer: Annotated[float, Field(ge=0)] = Field(
        0.0, description="per token and layer, e.g. quantisation scales"
    )

    def bytes_per_token(self) -> float:
        return self.layers * (
            2 * self.kv_heads * self.head_dim * self.dtype_bytes + self.extra_bytes_per_layer
        )


KvLayout = Annotated[MlaLayout | HeadsLayout, Field(discriminator="kind")]


class Model(Record):
    """The served model, as far as the KV cache is concerned."""

    name: Label(200) = Field(description="model name, for reports")
    kv_bytes_per_token: PositiveSize | None = Field(
        None, description="KV bytes per token; derived from kv_layout when omitted"
    )
    kv_layout: KvLayout | None = Field(None, description="architecture fields giving KV bytes")
    weight_bytes: Size | None = Field(
        None,
        description="weights on one node, all GPUs (null: the roofline's dense + expert "
        "weight bytes); they size the KV pool",
    )

    @property
    def kv_bytes(self) -> float:
        """KV cache bytes per token (explicit value, else from the layout)."""
        if self.kv_bytes_per_token is not None:
            return self.kv_bytes_per_token
        assert self.kv_layout is not None  # guaranteed by cross_checks
        return self.kv_layout.bytes_per_token()


class OpCurve(Record):
    """One operation kind's roofline (kvsim/physics/ops.py): it reaches ``e_max x /
    (x + half)`` of ``peak_flops`` at size x, and ``e_mem`` of HBM bandwidth when bound by
    its bytes."""

    peak_flops: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        description="dense peak FLOP/s of one GPU in the dtype its kernels compute in"
    )
    e_max: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = Field(
        description="the best fraction of the dense FLOP peak it reaches"
    )
    half: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        description="the size at which it reaches half of e_max (dense GEMMs: tokens per "
        "GPU; expert GEMMs: tokens per expert; attention: keys per query)"
    )
    e_mem: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = Field(
        description="the fraction of HBM bandwidth it reaches when bound by its bytes"
    )


class Ops(Record):
    """The per-operation roofline (docs/engine-model.md, "The per-operation roofline"): a
    step is the sum of its dense GEMMs, expert GEMMs, attention and communication, each on
    its own roofline with its own efficiency curve, plus the host's CPU work and any wait
    for kernel launches. It replaces ``fixed + max(FLOPs / achievable_flops, bytes / HBM)``
    (``fixed``, ``achievable_flops`` and ``hbm_efficiency`` are then unused)."""

    expert_flops_per_token: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        0.0, description="of linear_flops_per_token, the routed experts' (the rest is dense)"
    )
    dense: OpCurve = Field(description="dense GEMMs (projections, dense and shared MLPs)")
    experts: OpCurve = Field(description="the routed experts' grouped GEMMs")
    attention: OpCurve = Field(description="attention prefill (FlashAttention-class kernels)")
    collectives: NonNegInt = Field(
        0, description="collective calls per step (TP all-reduces, EP all-to-alls, PCP)"
    )
    collective_latency: Duration = Field("0 s", description="fixed time of one collective call")
    comm_bandwidth: Bandwidth | None = Field(
        None,
        description="per-GPU bandwidth the collectives reach (null: node.nvlink_per_gpu)",
    )
    cpu_step: Duration = Field(
        "0 s", description="host CPU per step: scheduling, input preparation, sampling"
    )
    cpu_request: Duration = Field("0 s", description="host CPU per request in a step")
    kernels: NonNegInt = Field(0, description="kernels one step launches (all layers)")
    kernel_launch: Duration = Field(
        "0 s",
        description="host time to launch one kernel of a step its CUDA graphs do not cover "
        "(larger than graph_max_tokens), from the compiled model's code",
    )
    eager_launch: Duration | None = Field(
        None,
        description="engine.cuda_graphs false (eager mode, vLLM's --enforce-eager, which "
        "also turns torch.compile off): host time per kernel as the model's PyTorch code "
        "runs op by op, Python included (null: kernel_launch)",
    )
    graph_replay: Duration = Field(
        "0 s", description="host time to replay a step's CUDA graphs (engine.cuda_graphs)"
    )
    graph_max_tokens: Tokens = Field(
        512, description="the largest step captured in CUDA graphs (vLLM: 512)"
    )
    stage_bandwidth: Bandwidth | None = Field(
        None,
        description="pp > 1: per-GPU bandwidth of the hand-off between pipeline stages "
        "(null: comm_bandwidth)",
    )
    stage_latency: Duration = Field(
        "0 s", description="pp > 1: fixed time of one hand-off between pipeline stages"
    )


class Roofline(Record):
    """Step time of the node from its architecture and hardware (see docs/engine-model.md):
    ``fixed + max(FLOPs / achievable_flops, bytes / HBM bandwidth)`` per step."""

    fixed: Duration = Field("20 ms", description="fixed time per step (scheduling, launches)")
    achievable_flops: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        None,
        description="FLOP/s the node sustains in prefill (calibrated; the compute roof); "
        "needed unless `ops` gives the per-operation model",
    )
    linear_flops_per_token: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        description="FLOPs per token in linear and MoE layers (2 x active parameters)"
    )
    attention: Literal["dense", "sparse"] = Field(
        "dense", description="dense: every query sees every earlier key; sparse: top-k keys"
    )
    pair_flops: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        description="attention FLOPs per query-key pair, all layers"
    )
    sparse_top_k: PosInt = Field(2048, description="sparse: keys each query attends to")
    indexer_pair_flops: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        0.0, description="sparse: indexer FLOPs per query-key pair (it scores every key)"
    )
    dense_weight_bytes: Size = Field(description="weights every step reads (all but experts)")
    expert_weight_bytes: Size = Field(0.0, description="routed experts' weights, all layers")
    experts: PosInt = Field(1, description="routed experts per MoE layer")
    experts_per_token: PosInt = Field(1, description="experts each token is routed to")
    # sliding-window layers (gpt-oss): each query sees at most `window` earlier keys
    window: PosInt = Field(128, description="sliding-window layers: keys each query sees")
    window_pair_flops: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        0.0, description="sliding-window layers' attention FLOPs per query-key pair"
    )
    # parallelism (docs/engine-model.md, "Parallelism"); the defaults are a node-level
    # roofline: weights and KV spread evenly over the node's GPUs, no communication term
    hbm_efficiency: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = Field(
        1.0, description="share of HBM bandwidth a step reaches (the memory roof's factor)"
    )
    dense_weight_shards: PosInt | None = Field(
        None,
        description="GPUs the dense weights are split over (tp; null: all the node's GPUs, "
        "a node-level roofline)",
    )
    expert_weight_shards: PosInt | None = Field(
        None, description="GPUs the routed experts are split over (ep; null: all)"
    )
    tp: PosInt = Field(1, description="tensor-parallel degree (an all-reduce per layer)")
    ep: PosInt = Field(1, description="expert-parallel degree (an all-to-all per MoE layer)")
    pp: PosInt = Field(
        1,
        description="pipeline stages (the layers split into pp groups of GPUs a step runs "
        "through one after another; needs `ops`)",
    )
    allreduce_bytes_per_token: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        0.0, description="a token's activations through the TP all-reduces, all layers"
    )
    alltoall_bytes_per_token: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        0.0, description="a token's routed activations, dispatch + combine, all MoE layers"
    )
    pcp_exchange_bytes_per_token: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        0.0,
        description="KV bytes per token (per GPU) that PCP ranks exchange so each sees the "
        "whole context (0: the exchange is in `fixed`)",
    )
    pp_bytes_per_token: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        0.0,
        description="pp > 1: a token's activations one stage hands to the next (hidden "
        "states and residual), all its GPUs together",
    )
    ops: Ops | None = Field(
        None, description="the per-operation roofline (null: the one roofline above)"
    )


class Timing(Record):
    """Prefill time of the node: a roofline step model, or a measured single-request grid
    t(new_tokens, cached_tokens) from which batched steps are formed.

    Written in YAML as ``roofline: {...}``, as ``table: FILE.csv`` (columns new_tokens,
    cached_tokens, seconds; resolved by the loader), or inline as ``new_tokens``/
    ``cached_tokens``/``seconds`` (seconds[i][j] for new_tokens[i], cached_tokens[j]).
    """

    roofline: Roofline | None = Field(None, description="step time from the architecture")
    new_tokens: list[PosInt] | None = Field(None, description="grid of new (computed) tokens")
    cached_tokens: list[NonNegInt] | None = Field(
        None, description="grid of cached (restored) tokens"
    )
    seconds: list[list[Annotated[float, Field(gt=0, allow_inf_nan=False)]]] | None = Field(
        None, description="seconds[i][j] = t(new_tokens[i], cached_tokens[j]), node-wide"
    )
    scale: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        1.0, description="multiply every time (what-if faster or slower compute)"
    )
    table: str | None = Field(None, description="CSV file the grid was read from, if any")
