"""The scenario as typed, immutable records (pydantic models), with units and help text.

A scenario is a profile (node, model, timing, tier defaults) with the user's scenario file
merged over it. Every field carries its unit in its type (``Bandwidth`` is bytes/s parsed
from "12 GB/s"), a default where one is sensible, and a one-line description. Unknown keys
are refused. Rules that tie fields together (a tier larger than the memory it lives in, a
per-rank store on a node without ranks) are in :func:`cross_checks`, which reports field
paths so that the loader can point at the right line.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from kvsim.config import pools
from kvsim.errors import UNSAFE_CATEGORIES, shown
from kvsim.physics.timing import TimingTable
from kvsim.plugins import LABELS, ParamError, check_name, check_params, plain_params
from kvsim.units import parse_bandwidth, parse_duration, parse_rate, parse_size

# ---- unit-carrying field types -------------------------------------------------------


def _unit(parse: Callable[[object], float], unit: str) -> BeforeValidator:
    """A validator that parses unit strings; it carries the unit's kind for the tools that
    write scenarios back (kvsim.config.dump) and document them (kvsim.config.reference)."""

    def check(value: object) -> float:
        return parse(value)

    check.unit = unit  # type: ignore[attr-defined]
    return BeforeValidator(check)


def field_unit(annotation: Any, metadata: list[Any] | None = None) -> str | None:
    """The unit kind ("size", "bandwidth", "duration", "rate") of a field, or None."""
    for m in metadata or []:
        unit = getattr(getattr(m, "func", None), "unit", None)
        if unit:
            return unit
    for arg in get_args(annotation):
        found = field_unit(arg, list(getattr(arg, "__metadata__", ())))
        if found:
            return found
    return None


Size = Annotated[float, _unit(parse_size, "size"), Field(ge=0)]
PositiveSize = Annotated[float, _unit(parse_size, "size"), Field(gt=0)]
Bandwidth = Annotated[float, _unit(parse_bandwidth, "bandwidth"), Field(gt=0)]
Duration = Annotated[float, _unit(parse_duration, "duration"), Field(ge=0)]
PositiveDuration = Annotated[float, _unit(parse_duration, "duration"), Field(gt=0)]
Rate = Annotated[float, _unit(parse_rate, "rate"), Field(gt=0)]
PosInt = Annotated[int, Field(gt=0, strict=True)]


def Bounded(high: int) -> Any:
    """A positive integer with a sanity ceiling (a value past it is a typo, not a plan,
    and would otherwise run for days or exhaust memory)."""
    return Annotated[int, Field(gt=0, le=high, strict=True)]


def _one_line(text: str) -> str:
    """Text that reports print: one line, no control characters (an escape sequence in a
    scenario name would otherwise be run by the terminal of whoever reads the summary)."""
    text = text.strip()
    bad = next((c for c in text if unicodedata.category(c) in UNSAFE_CATEGORIES), None)
    if bad is not None:
        raise ValueError(
            f"must be one line of printable text; found the control character U+{ord(bad):04X}"
        )
    return text


def Label(max_length: int) -> Any:
    """One line of printable text of at most ``max_length`` characters."""
    return Annotated[str, Field(max_length=max_length), AfterValidator(_one_line)]


Tokens = Bounded(2**24)  # 16.7M tokens in one prompt or block
MAX_TENANTS = 65535  # a sanity ceiling on tenants
NonNegInt = Annotated[int, Field(ge=0, strict=True)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class Record(BaseModel):
    """Base of every config record: immutable, unknown keys refused, every float finite
    (a value that overflows to infinity, such as 1e999, is refused, never run)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False
    )


# ---- hardware and model (normally from a profile) -----------------------------------


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


class Roofline(Record):
    """Step time of the node from its architecture and hardware (see docs/engine-model.md):
    ``fixed + max(FLOPs / achievable_flops, bytes / HBM bandwidth)`` per step."""

    fixed: Duration = Field("20 ms", description="fixed time per step (scheduling, launches)")
    achievable_flops: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        description="FLOP/s the node sustains in prefill (calibrated; the compute roof)"
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


# ---- cache tiers -------------------------------------------------------------------


class PolicyRef(Record):
    """A policy a scenario names: a built-in one or a plugin's, with the keyword
    parameters its class is made with. YAML gives ``NAME`` or ``{name: NAME, params:
    {...}}``; the params are checked against the class's ``__init__`` (kvsim.plugins)."""

    name: str = Field(description="the policy's name: a built-in one or a plugin's")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="keyword arguments of the plugin class's __init__ (the built-in "
        "policies take none)",
    )

    def __str__(self) -> str:
        """``name``, or ``name(k=v, ...)`` with its params (for reports and messages)."""
        return policy_text({"name": self.name, "params": self.params}) or self.name


def policy_text(value: Any) -> str | None:
    """A swept policy given with its params (``{name, params}``, kept in a sweep's tables
    as JSON text) as a scenario's summary names it: ``s3fifo(small_frac=0.1)``; None for
    any other value."""
    if isinstance(value, str) and value.startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not (isinstance(value, dict) and isinstance(value.get("name"), str)):
        return None
    params = value.get("params") or {}
    if not isinstance(params, dict) or set(value) - {"name", "params"}:
        return None
    inner = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return f"{value['name']}({inner})" if inner else value["name"]


def _ref(name: str) -> PolicyRef:
    """A policy field's default: the built-in policy ``name``, no params."""
    return PolicyRef(name=name)


# the name a policy field of each kind takes by default (when the field is not given)
POLICY_DEFAULTS: dict[str, str] = {
    "eviction": "lru",
    "admission": "all",
    "router": "round_robin",
    "scheduler": "fcfs",
    "load_policy": "sync",
    "prefetch": "none",
}


def _a(noun: str) -> str:
    """``noun`` with its indefinite article: "an eviction policy", "a router"."""
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def _promote(kind: str) -> Callable[[Any], Any]:
    """A policy field's YAML as a PolicyRef's: ``NAME`` is ``{name: NAME}``. A mapping
    must name its policy: params without a name (``{params: {...}}``, or an override of one
    parameter where no layer names the policy) are for no policy in particular, and are
    refused rather than given to the kind's default."""

    def promote(value: Any) -> Any:
        if isinstance(value, str):
            return {"name": value}
        if isinstance(value, dict):
            if value.get("name") is None:
                keys = ", ".join(sorted(str(k) for k in value if k != "name"))
                given = f"a mapping of {keys}" if keys else "an empty mapping"
                given += " with name null" if "name" in value else " without a name"
                raise ValueError(
                    f"given {given}; {_a(LABELS[kind])} mapping names the "
                    "policy its params are for: {name: NAME, params: {...}} (a field left "
                    f"out is {POLICY_DEFAULTS[kind]!r})"
                )
            return value
        if isinstance(value, PolicyRef):
            return value
        raise ValueError(
            f"expected {_a(LABELS[kind])}'s name or a mapping "
            f"{{name: NAME, params: {{...}}}}, got {shown(value)}"
        )

    return promote


def _checked(kind: str) -> Callable[[PolicyRef], PolicyRef]:
    """The check of a policy field: the name must be a built-in one or one a loaded plugin
    registered (the scenario's ``plugins`` are imported before it is validated); the
    params must fit its class, coerced to its annotations (an error names the parameter:
    ``tiers.host.eviction.params.small_frac``)."""

    def check(ref: PolicyRef) -> PolicyRef:
        check_name(kind, ref.name)
        try:
            checked = check_params(kind, ref.name, ref.params)
        except ParamError as e:
            detail = InitErrorDetails(
                type=PydanticCustomError("value_error", "{reason}", {"reason": str(e)}),
                loc=("params", e.param) if e.param is not None else ("params",),
                input=ref.params.get(e.param) if e.param is not None else ref.params,
            )
            raise ValidationError.from_exception_data("PolicyRef", [detail]) from None
        if not ref.params:
            return ref
        return ref.model_copy(update={"params": plain_params(checked, ref.params)})

    return check


# a policy field: NAME or {name: NAME, params: {...}}, held as a PolicyRef
EvictionName = Annotated[
    PolicyRef, BeforeValidator(_promote("eviction")), AfterValidator(_checked("eviction"))
]
AdmissionName = Annotated[
    PolicyRef, BeforeValidator(_promote("admission")), AfterValidator(_checked("admission"))
]
RouterName = Annotated[
    PolicyRef, BeforeValidator(_promote("router")), AfterValidator(_checked("router"))
]
SchedulerName = Annotated[
    PolicyRef, BeforeValidator(_promote("scheduler")), AfterValidator(_checked("scheduler"))
]
LoadPolicyName = Annotated[
    PolicyRef, BeforeValidator(_promote("load_policy")), AfterValidator(_checked("load_policy"))
]
PrefetchName = Annotated[
    PolicyRef, BeforeValidator(_promote("prefetch")), AfterValidator(_checked("prefetch"))
]

# every policy field of a scenario, by path, and its kind
POLICY_FIELDS: dict[tuple[str, ...], str] = {
    **{("tiers", t, k): k for t in ("gpu", "host", "nvme") for k in ("eviction", "admission")},
    ("remote", "eviction"): "eviction",
    ("remote", "admission"): "admission",
    ("cluster", "router"): "router",
    ("cluster", "load_policy"): "load_policy",
    ("engine", "scheduler"): "scheduler",
    ("prefetch", "policy"): "prefetch",
}


WritePolicy = Literal["write_back", "write_through", "write_through_selective"]


class Codec(Record):
    """KV compression for a tier (CacheGen-like, or FP8 -> FP4): stored and moved bytes
    shrink; encoding is paid on each write into the tier, decoding on each restore."""

    ratio: Annotated[float, Field(gt=0, le=1)] = Field(
        description="stored bytes / raw bytes (0.5 halves them; above 1 or 0 is refused)"
    )
    encode_bandwidth: Bandwidth = Field(description="raw bytes encoded per second")
    decode_bandwidth: Bandwidth = Field(description="raw bytes decoded per second")
    on: Literal["gpu", "cpu"] = Field(
        "gpu", description="where it runs: gpu (counts as GPU work) or cpu"
    )

    @model_validator(mode="before")
    @classmethod
    def _yaml_on(cls, data: Any) -> Any:
        """YAML 1.1 reads a bare ``on:`` key as the boolean true: take it as ``on``."""
        if isinstance(data, dict) and True in data and "on" not in data:
            return {("on" if k is True else k): v for k, v in data.items()}
        return data


class GpuTier(Record):
    """Prefix cache in HBM (vLLM-style); hits cost nothing to load."""

    capacity: Size = Field(description="KV capacity per engine (all GPUs of the node)")
    eviction: EvictionName = Field(
        _ref("lru"), description="eviction policy: lru | fifo | a plugin's"
    )
    admission: AdmissionName = Field(
        _ref("all"),
        description="all: cache every block offered; second_hit: only one offered before "
        "(a ghost list as long as the tier holds blocks remembers first sightings); or a "
        "plugin's name",
    )


class LocalTier(Record):
    """A tier local to the node (host DRAM or NVMe)."""

    enabled: bool = Field(True, description="false: the tier does not exist")
    capacity: Size = Field(description="KV capacity per engine")
    t0: Duration = Field(description="fixed cost per request that hits this tier")
    t0_engine: Duration = Field(
        "0 s",
        description="the part of t0 the engine pays (lookup work; at most t0); the "
        "rest only the request waits. sync: the engine waits all of t0",
    )
    streams: bool = Field(True, description="restores can be read layer by layer (layerwise)")
    eviction: EvictionName = Field(
        _ref("lru"), description="eviction policy: lru | fifo | a plugin's"
    )
    admission: AdmissionName = Field(
        _ref("all"),
        description="all: cache every block offered; second_hit: only one offered before "
        "(a ghost list as long as the tier holds blocks remembers first sightings); or a "
        "plugin's name",
    )
    write_policy: WritePolicy = Field(
        "write_back",
        description="how blocks reach this tier from the one above: write_back (when "
        "evicted there), write_through (when stored there), write_through_selective (once "
        "hit write_threshold times)",
    )
    write_threshold: Bounded(2**31) = Field(
        2, description="write_through_selective: hits before a block is written (>= 1)"
    )
    write_queue: Size | None = Field(
        "5 GB",
        description="staging buffer: bytes that may wait on the link that writes into this "
        "tier (default 5 GB, LMCache's max_local_cpu_size; L, 1-40 GB); past it, on_backlog "
        "applies. A block is readable from the tier once its write lands. null: the "
        "optimistic write path (no bound, readable as soon as queued)",
    )
    codec: Codec | None = Field(None, description="KV compression in this tier (null: none)")
    on_backlog: Literal["drop", "block"] = Field(
        "block",
        description="write queue full: drop (new blocks are not written; counted) or block "
        "(the engine waits before its next step until the queue is back under the bound)",
    )


class NvmeTier(LocalTier):
    """The node's NVMe drives as a tier."""

    path: Literal["gds", "bounce"] = Field(
        "bounce",
        description="gds: GPUDirect Storage reads straight into HBM; bounce: into a host "
        "buffer, then over the host-to-GPU link",
    )
    promote: bool | None = Field(
        None,
        description="blocks a restore reads from NVMe are also stored into host (LMCache and "
        "HiCache promote); null: true when the host tier is enabled",
    )


class PeerTier(Record):
    """KV held in other engines' host DRAM, fetched over the holder's and the reader's NICs
    (LMCache P2P, Mooncake's transfer engine, vLLM's remote peer). Its capacity is the
    other engines' host tiers: nothing is copied for it."""

    enabled: bool = Field(
        False, description="true: a lookup also finds blocks in other engines' host tiers"
    )
    # L (order of magnitude, not measured): LMCache's P2P backend asks its controller
    # which instance holds the chunks (batched_p2p_lookup over ZMQ/TCP), then the peer,
    # then reads by NIXL (docs.lmcache.ai/kv_cache/p2p_sharing.html; its example polls the
    # lookup every 1 ms, lookup_backoff_time: 0.001); two RPCs in one data centre are
    # 0.1-0.5 ms each. The read's own round trip is the two NICs' network_latency.
    t0: Duration = Field(
        "1 ms",
        description="fixed cost per request that reads from a peer: the cluster index lookup "
        "and the read's setup (default 1 ms: LMCache P2P's controller lookup and its 1 ms "
        "lookup_backoff_time; L, 0.2-5 ms). The read also crosses both NICs' latency",
    )
    t0_engine: Duration = Field(
        "0 s",
        description="the part of t0 the engine pays (lookup work; at most t0); the "
        "rest only the request waits. sync: the engine waits all of t0",
    )
    streams: bool = Field(
        False,
        description="restores can be read layer by layer (layerwise); false: LMCache's P2P "
        "backend retrieves whole chunks",
    )


class Tiers(Record):
    gpu: GpuTier = Field(description="HBM prefix cache")
    host: LocalTier = Field(description="host DRAM tier")
    nvme: NvmeTier = Field(description="local NVMe tier")
    peer: PeerTier = Field(PeerTier(), description="other engines' host DRAM, over the network")


class StallModel(Record):
    """Remote GETs that hang (client bugs): probability per GET and how long it hangs."""

    probability: Fraction = Field(0.0, description="chance that one GET flow stalls")
    duration: Duration = Field("0 s", description="stall length (the mean if exponential)")
    distribution: Literal["fixed", "exponential"] = Field(
        "exponential", description="stall length distribution"
    )


class RemoteClient(Record):
    """One rank's store client: how fast it pulls a GET's chunks (kvsim/physics/client.py;
    docs/data-path.md, "The single-client GET")."""

    connections: Bounded(4096) = Field(1, description="connections to each server (>= 1)")
    round_trip: Duration = Field(
        "100 us", description="per operation: request out, first byte back (>= 0)"
    )
    pipeline_depth: Bounded(4096) = Field(
        4, description="operations in flight on each connection (>= 1)"
    )
    copy_bandwidth: Bandwidth = Field(
        "5 GB/s",
        description="receive and copy into pinned host memory, serial on the rank (> 0); "
        "no copy (and no bound) for a shared_nvme store read by GPUDirect (remote.path)",
    )
    connection_bandwidth: Bandwidth | None = Field(
        None,
        description="most one connection moves (an object store's per-connection rate, e.g. "
        "85-90 MB/s to S3): each operation also takes chunk bytes / this on its connection, "
        "so N connections pull at most N x this (null: unlimited)",
    )


REMOTE_KINDS = ("kv_server", "object_store", "shared_nvme")


class Remote(Record):
    """Remote KV store shared by all engines: a KV server (LMCache over Valkey), an object
    store (S3-like) or a shared NVMe store (WEKA's Augmented Memory Grid-like); each kind
    has a shipped profile (kvsim/profiles/remote/KIND.yaml; docs/data-path.md, "Remote
    store kinds")."""

    kind: Literal["kv_server", "object_store", "shared_nvme"] = Field(
        "kv_server",
        description="kv_server: memory servers (Valkey); object_store: S3-like (first-byte "
        "latency, per-connection rate, per-request price); shared_nvme: NVMe servers over RDMA "
        "(GPUDirect into HBM). A kind other than the profile's starts the remote section from "
        "kvsim/profiles/remote/KIND.yaml",
    )
    path: Literal["gpudirect", "bounce"] | None = Field(
        None,
        description="how a GET reaches HBM: bounce (through pinned host memory: the NIC, the "
        "client's copy, then the host-to-GPU link) or gpudirect (RDMA from the NIC straight "
        "into HBM: no host-to-GPU link, no client copy; needs node.gpudirect_rdma, and not an "
        "object_store). null: gpudirect for shared_nvme, bounce otherwise",
    )
    enabled: bool = Field(True, description="false: no remote tier")
    servers: Bounded(4096) = Field(1, description="server instances")
    sharding: Literal["none", "per_rank"] = Field(
        "none", description="none: whole blocks per key; per_rank: each PCP rank its own shard"
    )
    bandwidth: Bandwidth = Field(description="payload bandwidth of one server")
    client: RemoteClient = Field(
        RemoteClient(),
        description="each rank's store client (connections, round trip, pipelining, copy "
        "rate): caps a GET at what its clients can pull",
    )
    op_overhead: Duration = Field("0 s", description="server time per GET/PUT operation")
    chunk_tokens: Tokens = Field(256, description="tokens per stored chunk (one op each)")
    capacity: Size = Field(description="KV capacity per server")
    t0: Duration = Field(description="fixed cost per request that hits the remote tier")
    t0_engine: Duration = Field(
        "0 s",
        description="the part of t0 the engine pays (lookup work; at most t0); the "
        "rest only the request waits. sync: the engine waits all of t0",
    )
    streams: bool = Field(
        False,
        description="GETs can be read layer by layer (LMCache's remote connectors cannot)",
    )
    eviction: EvictionName = Field(
        _ref("lru"), description="eviction policy of each server: lru | fifo | a plugin's"
    )
    admission: AdmissionName = Field(
        _ref("all"),
        description="all: store every block a request computed; second_hit: only blocks "
        "offered to the store before (a ghost list as long as the store holds blocks); or a "
        "plugin's name",
    )
    write_policy: WritePolicy = Field(
        "write_through",
        description="when blocks are put: write_through (every prefill's blocks the store "
        "lacks, staged from HBM), write_through_selective (only blocks hit write_threshold "
        "times on the engine), write_back (blocks leaving the engine's last local tier)",
    )
    write_threshold: Bounded(2**31) = Field(
        2, description="write_through_selective: hits before a block is put (>= 1)"
    )
    codec: Codec | None = Field(None, description="KV compression in the store (null: none)")
    timeout: PositiveDuration | None = Field(
        None, description="client timeout on a GET; on expiry the request recomputes"
    )
    max_pending_puts: NonNegInt = Field(
        64,
        description="puts queued or in flight per engine; further puts are dropped (0 = no puts)",
    )
    stall: StallModel = Field(StallModel(), description="GETs that hang (client bugs)")

    @property
    def gpudirect(self) -> bool:
        """True when a GET lands in HBM by GPUDirect RDMA (``path``; null: shared_nvme)."""
        return self.path == "gpudirect" or (self.path is None and self.kind == "shared_nvme")


# Fields that were removed, by (record, field): what replaces each (the loader says so)
REMOVED_FIELDS: dict[tuple[str, str], str] = {
    ("remote", "client_bandwidth"): "removed: the client is now modelled by remote.client "
    "(connections, round_trip, pipeline_depth, copy_bandwidth; docs/data-path.md); the old "
    "8 GiB/s cap is about remote.client.connections: 8 and copy_bandwidth: 8 GiB/s",
}


# ---- cluster --------------------------------------------------------------------------


class Cluster(Record):
    engines: Bounded(4096) = Field(1, description="prefill engines (nodes)")
    router: RouterName = Field(
        _ref("round_robin"), description="round_robin | least_loaded | cache_affinity | a plugin's"
    )
    load_policy: LoadPolicyName = Field(
        _ref("sync"), description="sync | async | recompute | auto | a plugin's"
    )
    affinity_slack: NonNegInt = Field(
        4, description="cache_affinity: max extra queued requests accepted for a better hit"
    )


class Prefetch(Record):
    """Bringing KV from NVMe or the remote store up to host memory ahead of its use
    (SGLang HiCache's prefetch; docs/data-path.md)."""

    policy: PrefetchName = Field(
        _ref("none"),
        description="none: restores read NVMe and remote directly. Otherwise a request's "
        "blocks in NVMe or remote are fetched into host when it reaches its engine, and "
        "its restore reads GPU and host only: best_effort (uses what has arrived when "
        "the request is scheduled, recomputes the rest), wait_complete (the request waits "
        "for its prefetch), timeout (waits at most prefetch.timeout); or a plugin's name",
    )
    timeout: PositiveDuration | None = Field(
        None,
        description="policy timeout: the longest a request waits for its prefetch (other "
        "policies ignore it)",
    )
    on_session: bool = Field(
        False,
        description="when a turn of a multi-turn session ends, fetch its blocks held in "
        "NVMe or remote up to host memory during the think time",
    )


class Engine(Record):
    """How one prefill engine forms its steps (see docs/engine-model.md)."""

    batching: Literal["chunked", "serial"] = Field(
        "chunked",
        description="chunked: iteration-level batches under a token budget (vLLM); "
        "serial: one whole prompt at a time",
    )
    max_batched_tokens: Tokens = Field(
        8192, description="token budget of one step (vLLM max_num_batched_tokens)"
    )
    max_batch_requests: Bounded(1_000_000) = Field(
        1024, description="requests in one step (vLLM max_num_seqs)"
    )
    long_prefill_token_threshold: NonNegInt = Field(
        0, description="most tokens one prompt may take per step (0: no cap; vLLM's knob)"
    )
    scheduler: SchedulerName = Field(
        _ref("fcfs"),
        description="fcfs: arrival order; lpm: longest cached prefix first; "
        "sjf: shortest remaining prompt first, with aging; or a plugin's name",
    )
    sjf_aging: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        50_000.0, description="sjf: tokens of priority a request gains per second it waits"
    )
    layerwise: bool = Field(
        False, description="restores and stores stream layer by layer, overlapping compute"
    )
    max_inflight_restores: PosInt | None = Field(
        None, description="restores in flight per engine (null: bounded by GPU HBM only)"
    )


# ---- workloads --------------------------------------------------------------------


class FixedDist(Record):
    dist: Literal["fixed"]
    value: Tokens = Field(description="every draw")


class UniformDist(Record):
    dist: Literal["uniform"]
    low: Tokens = Field(description="smallest draw")
    high: Tokens = Field(description="largest draw")


class LogNormalDist(Record):
    dist: Literal["lognormal"]
    median: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(description="median")
    sigma: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        description="standard deviation of the log"
    )
    min: PosInt = Field(1, description="draws are clipped to [min, max]")
    max: Tokens = Field(1_000_000, description="draws are clipped to [min, max]")


class GeometricDist(Record):
    dist: Literal["geometric"]
    mean: Annotated[float, Field(ge=1, le=1e6, allow_inf_nan=False)] = Field(
        description="mean of a geometric draw on 1, 2, ..."
    )


class ChoiceDist(Record):
    dist: Literal["choice"]
    values: list[Tokens] = Field(min_length=1, description="the possible draws")
    weights: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        None, description="relative weights (default: equal)"
    )


IntDist = Annotated[
    FixedDist | UniformDist | LogNormalDist | GeometricDist | ChoiceDist,
    Field(discriminator="dist"),
]


class PoissonArrivals(Record):
    process: Literal["poisson"]
    rate: Rate = Field(description="mean arrivals per second")


class ConstantArrivals(Record):
    process: Literal["constant"]
    rate: Rate = Field(description="arrivals per second, evenly spaced")


class BurstyArrivals(Record):
    """Gamma renewal process: mean rate ``rate``, inter-arrival coefficient of variation ``cv``."""

    process: Literal["bursty"]
    rate: Rate = Field(description="mean arrivals per second")
    cv: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        3.0, description="coefficient of variation of the gaps (1 = Poisson)"
    )


Arrivals = Annotated[
    PoissonArrivals | ConstantArrivals | BurstyArrivals, Field(discriminator="process")
]


class SystemPrompts(Record):
    """Shared system prompts: a fraction of sessions starts with one of ``count`` prompts."""

    count: Bounded(1_000_000) = Field(description="distinct system prompts (equally popular)")
    tokens: Tokens = Field(description="length of each")
    share: Fraction = Field(1.0, description="fraction of sessions that use one")


class Documents(Record):
    """Shared documents: each first turn starts with ``fraction`` of its prompt from one."""

    count: Bounded(1_000_000) = Field(description="distinct documents")
    fraction: Fraction = Field(description="share of a first turn's new tokens from the document")
    share: Fraction = Field(1.0, description="fraction of sessions that start with a document")
    popularity: Literal["uniform", "zipf"] = Field("uniform", description="document popularity")
    zipf_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        1.0, description="Zipf exponent when popularity is zipf"
    )


class Tenants(Record):
    """Each session belongs to one of ``count`` tenants (drawn by ``weights``)."""

    count: Bounded(MAX_TENANTS) = Field(description="number of tenants")
    weights: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        None, description="relative share of sessions per tenant (default: equal)"
    )


class Sessions(Record):
    """Multi-turn sessions: each turn's prompt is the previous prompt + answer + new text."""

    turns: IntDist = Field(description="turns per session")
    think_time: Duration = Field("30 s", description="mean gap between turns (exponential)")


class Window(Record):
    start: Duration = Field("0 s", description="first source time kept (the new zero)")
    end: Duration | None = Field(None, description="source time where the replay stops")


class _Common(Record):
    time_scale: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        1.0, description="multiply arrival times (0.5 = twice as fast)"
    )
    limit: PosInt | None = Field(None, description="keep at most this many requests")
    window: Window = Field(Window(), description="keep arrivals in [start, end) of the source")


class _Trace(_Common):
    resample: Literal["auto", "none", "windows", "sessions"] = Field(
        "auto",
        description="sessions: replay a bootstrap of the trace drawn by the seed (whole "
        "sessions, or prefix chains where the trace has no session ids, drawn with "
        "replacement and laid at the trace's session start times; keeps prefix reuse); "
        "windows: its span cut into 40 windows, as many drawn with replacement (cuts reuse "
        "across window edges); none: the trace as it is; auto: sessions when a sweep, "
        "capacity search or baseline runs several seeds (so replications differ), none in "
        "a single run",
    )


class MooncakeWorkload(_Trace):
    kind: Literal["mooncake"]
    path: str = Field(description="Mooncake JSONL trace (relative to the scenario file)")
    block_tokens: Tokens = Field(512, description="tokens per hash_ids block")
    bucket_spread: PositiveDuration | None = Field(
        None, description="spread requests sharing a timestamp evenly over this interval"
    )


class AzureWorkload(_Trace):
    kind: Literal["azure"]
    path: str = Field(description="Azure LLM inference CSV (relative to the scenario file)")
    block_tokens: Tokens = Field(512, description="tokens per (generated, unique) block")


class SyntheticWorkload(_Common):
    kind: Literal["synthetic"]
    # 10 million: the generator draws every arrival up front (at most ~120 bytes a
    # request, ~1.1 GB at the bound); 100 million needed over 8 GB: a MemoryError
    requests: Bounded(10_000_000) = Field(description="requests to generate")
    block_tokens: Tokens = Field(512, description="tokens per hash block (cache granularity)")
    arrivals: Arrivals = Field(description="arrival process of sessions")
    prompt_tokens: IntDist = Field(description="new prompt tokens per turn")
    output_tokens: IntDist = Field(
        FixedDist(dist="fixed", value=256),
        description="answer tokens per turn (they join the history)",
    )
    system_prompts: SystemPrompts | None = Field(None, description="shared system prompts")
    documents: Documents | None = Field(None, description="shared document prefixes")
    sessions: Sessions | None = Field(None, description="multi-turn sessions (default: 1 turn)")
    prestored: bool = Field(
        False,
        description="the remote store holds every system prompt and document prefix at t = 0 "
        "(a long-running system); needs the remote tier",
    )
    tenants: Tenants | None = Field(None, description="sessions belong to tenants")


Workload = Annotated[
    MooncakeWorkload | AzureWorkload | SyntheticWorkload, Field(discriminator="kind")
]


# ---- faults ------------------------------------------------------------------------


class _Fault(Record):
    at: Duration = Field(description="when the fault starts")
    until: Duration | None = Field(None, description="when it ends (null: never)")


class ServerDown(_Fault):
    """A remote server is lost: its index is gone, transfers to it fail; it comes back
    empty at ``until``."""

    kind: Literal["server_down"]
    server: NonNegInt = Field(description="server index")


class SlowLink(_Fault):
    """Links run at ``factor`` times their bandwidth for a while (congestion)."""

    kind: Literal["slow_link"]
    target: Literal["host", "nvme", "network", "remote"] = Field(
        description="host: PCIe host-to-GPU; nvme: drives; network: NICs; remote: servers"
    )
    factor: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        description="bandwidth multiplier, e.g. 0.25"
    )
    engine: NonNegInt | None = Field(None, description="host/nvme/network: one engine (null: all)")
    server: NonNegInt | None = Field(None, description="remote: one server (null: all)")


class EngineDown(_Fault):
    """An engine fails: its work in progress is lost; its queued and running requests are
    re-routed to the other engines (or dropped). It comes back empty at ``until``."""

    kind: Literal["engine_down"]
    engine: NonNegInt = Field(description="engine index")
    requests: Literal["reroute", "drop"] = Field(
        "reroute", description="what happens to the requests it held"
    )


class StallBurst(_Fault):
    """A window in which remote GETs stall more (overrides remote.stall meanwhile)."""

    kind: Literal["stall_burst"]
    probability: Fraction = Field(description="chance that a GET stalls")
    duration: Duration = Field(description="stall length (the mean if exponential)")
    distribution: Literal["fixed", "exponential"] = "exponential"


Fault = Annotated[ServerDown | SlowLink | EngineDown | StallBurst, Field(discriminator="kind")]


# ---- tenancy ------------------------------------------------------------------------


class Deletion(Record):
    tenant: NonNegInt = Field(description="tenant whose blocks are deleted")
    at: Duration = Field(description="when")


class Tenancy(Record):
    """Whose prompt state is where, who can hit it, and when it is deleted."""

    isolation: Literal["tenant", "none"] = Field(
        "tenant", description="tenant: cache keys are namespaced by tenant; none: one cache"
    )
    shared_prefixes: bool = Field(
        False,
        description="opt in: a request's public prefix (a shared system prompt) is shared "
        "across tenants; anyone who sends the same prefix learns that it is cached",
    )
    quota: dict[Literal["gpu", "host", "nvme", "remote"], Size] = Field(
        {}, description="per tenant and tier: bytes a tenant may hold (per engine / server)"
    )
    ttl: PositiveDuration | None = Field(
        None, description="delete blocks not used for this long (>= 1 s), from every tier"
    )
    delete_on_session_end: bool = Field(
        False, description="delete a session's own blocks when its last turn finishes"
    )
    deletions: list[Deletion] = Field([], description="delete all of a tenant's blocks at a time")


# ---- run and scenario -------------------------------------------------------------


def _warmup(value: object) -> float | str:
    """``auto`` or a duration of at least 0."""
    if value == "auto":
        return "auto"
    try:
        seconds = parse_duration(value)
    except ValueError as e:
        msg = str(e)
        shown = (
            msg.replace(", got", ' (or "auto"), got', 1) if ", got" in msg else f"{msg} (or auto)"
        )
        raise ValueError(shown) from None
    if seconds < 0:
        raise ValueError(f'must be >= 0 s or "auto", got {value!r}')
    return seconds


_warmup.unit = "duration"  # type: ignore[attr-defined]
Warmup = Annotated[Literal["auto"] | float, BeforeValidator(_warmup)]


_PROMPT_BOUND = r"([-+]?[0-9][0-9_]*(?:\.[0-9]+)?)([kKM]?)"  # matched with spaces removed
_PROMPT_RANGE = re.compile(rf"^(?:{_PROMPT_BOUND})?\.\.(?:{_PROMPT_BOUND})?$")
PROMPT_RANGE_EXAMPLE = '"0..32k", "32k.." or "8k..64k" (tokens; k = 1,000, M = 1,000,000)'


def prompt_bounds(text: str) -> tuple[int, int | None]:
    """``run.prompt_range`` as token bounds: "0..32k" -> (0, 32000), "32k.." -> (32000,
    None) (no upper bound), "..8k" -> (0, 8000). Both bounds are inclusive; k is 1,000 and
    M 1,000,000 (as kvsim's kB). ValueError, saying what a valid range looks like, for
    anything else: a negative or fractional token count, LO above HI, no bound at all."""
    m = _PROMPT_RANGE.match("".join(text.split())) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"expected a token range LO..HI such as {PROMPT_RANGE_EXAMPLE}")
    bounds: list[int | None] = []
    for number, suffix in (m.group(1, 2), m.group(3, 4)):
        if number is None:
            bounds.append(None)
            continue
        value = float(number.replace("_", "")) * {"": 1, "k": 1e3, "K": 1e3, "M": 1e6}[suffix]
        if value < 0:
            raise ValueError(f"a prompt has at least 0 tokens, not {number}{suffix}")
        if value > 2**53:
            raise ValueError(f"{number}{suffix} tokens is past any prompt (at most 2**53)")
        if value != int(value):
            raise ValueError(f"{number}{suffix} is not a whole number of tokens")
        bounds.append(int(value))
    lo, hi = bounds
    if lo is None and hi is None:
        raise ValueError(f"give at least one bound, e.g. {PROMPT_RANGE_EXAMPLE}")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"empty range: {lo} tokens is above {hi}")
    return lo or 0, hi


def _prompt_range(value: object) -> object:
    """The range as the user wrote it (spaces dropped), after checking it parses."""
    if not isinstance(value, str):
        raise ValueError(
            f"expected a token range LO..HI in quotes such as {PROMPT_RANGE_EXAMPLE}, "
            f"got {shown(value)}"
        )
    prompt_bounds(value)
    return "".join(value.split())


class Run(Record):
    warmup: Warmup = Field(
        "auto",
        description="arrivals before this are left out of stats; auto: the transient "
        "detected in the run (MSER-5 on the requests' TTFT and hit ratio), reported "
        "as summary warmup_s",
    )
    max_time: PositiveDuration | None = Field(
        None, description="stop the clock here; unfinished requests are reported"
    )
    timeseries_window: PositiveDuration = Field(
        "10 s",
        description="width of the windows of timeseries.parquet (kvsim run --out): one row "
        "per window of measured requests' arrival times",
    )
    prompt_range: Annotated[str, BeforeValidator(_prompt_range), Field(max_length=200)] | None = (
        Field(
            None,
            description="measure only prompts of this many tokens, LO..HI inclusive (e.g. "
            "0..32k, 32k..; k = 1,000): the summary's request outcomes (TTFT, queueing, "
            "hit ratio, counts) cover only measured requests in range; throughput and "
            "prices still count every request the cluster served. null: every prompt",
        )
    )


MAX_PRICE = 1e9  # US dollars per unit: past any real price (a typo, or an overflow)
MAX_USD_PER_HOUR = 1e15  # a layout's price past this is a typo, and its costs could overflow


def _price(value: object) -> object:
    """A price is a number: YAML's true/false is not read as 1/0 dollars."""
    if isinstance(value, bool):
        raise ValueError(f"must be a price in US dollars (a number), not {str(value).lower()}")
    return value


def _price_bound(value: float) -> float:
    if value > MAX_PRICE:
        raise ValueError(
            f"{value:g} is past any real price (at most {MAX_PRICE:g} US dollars a unit)"
        )
    return value


Price = Annotated[
    float,
    BeforeValidator(_price),
    Field(ge=0.0, allow_inf_nan=False),
    AfterValidator(_price_bound),
]


class Cost(Record):
    """Prices in US dollars, for the summary's usd_per_hour and
    usd_per_million_prompt_tokens and ``kvsim capacity --cheapest``. A month is 730 hours;
    a GB is 10^9 bytes. Memory is priced as provisioned (the tiers' capacities), not as
    used."""

    gpu_node_hour: Price = Field(0.0, description="per engine (one GPU node) per hour")
    dram_gb_month: Price = Field(
        0.0, description="per GB-month of host DRAM for the host tier (its capacity per engine)"
    )
    nvme_gb_month: Price = Field(
        0.0, description="per GB-month of NVMe for the NVMe tier (its capacity per engine)"
    )
    remote_memory_gb_month: Price = Field(
        0.0,
        description="per GB-month of remote store capacity (remote.capacity per server): "
        "memory of a kv_server, drives of a shared_nvme store, the bytes kept in an "
        "object_store (S3 Standard: $0.023)",
    )
    object_store_get_per_1k: Price = Field(
        0.0,
        description="object_store: per 1,000 GET requests (one per chunk operation; S3 "
        "Standard: $0.0004), at the run's measured rate",
    )
    object_store_put_per_1k: Price = Field(
        0.0,
        description="object_store: per 1,000 PUT requests (one per chunk operation; S3 "
        "Standard: $0.005), at the run's measured rate",
    )
    remote_server_hour: Price = Field(0.0, description="per remote store server per hour")


class ProfileSpec(Record):
    """A profile composed from the catalogue (kvsim/catalogue/compose.py): a model card and
    a GPU card on ``gpus`` GPUs split ``tp`` x ``pcp``, experts over ``ep`` of them."""

    model: Label(4096) = Field(description="model card name (`kvsim profiles`) or config.json path")
    gpu: Label(4096) = Field(description="GPU card name (`kvsim profiles`) or card YAML path")
    gpus: Bounded(4096) | None = Field(None, description="GPUs of the engine (null: tp x pcp)")
    tp: Bounded(4096) = Field(1, description="tensor-parallel degree")
    pcp: Bounded(4096) = Field(1, description="prefill context-parallel degree")
    ep: Bounded(4096) = Field(1, description="expert-parallel degree (GPUs the experts span)")
    dtype: Literal["auto", "bf16", "fp8", "fp4"] = Field(
        "auto",
        description="compute dtype of the matmuls (auto: the weights' dtype where the GPU "
        "has it, else bf16)",
    )
    base: Label(4096) | None = Field(
        None,
        description="named profile or profile YAML whose other sections (tiers, remote, "
        "host and storage) the composition keeps (null: kvsim/catalogue/stack.yaml)",
    )

    def __str__(self) -> str:
        gpus = self.gpus if self.gpus is not None else self.tp * self.pcp
        par = "".join(
            f" {k}{v}" for k, v in (("tp", self.tp), ("pcp", self.pcp), ("ep", self.ep)) if v > 1
        )
        return f"{self.model} on {gpus}x{self.gpu}{par}"


class Scenario(Record):
    """Everything one simulation run needs, validated and immutable."""

    name: Label(200) = Field(description="scenario name, stamped on every result")
    description: Label(2000) = Field("", description="one line for humans")
    profile: Label(4096) | ProfileSpec = Field(
        "b300-pcp8-glm5",
        description="profile name (`kvsim profiles`), a profile YAML path, or a composition "
        "{model, gpu, gpus, tp, pcp, ep} from the catalogue",
    )
    seed: Annotated[int, Field(ge=0, strict=True)] = Field(
        0, description="seed of every random stream (arrivals, lengths, stalls...)"
    )
    plugins: list[Label(4096)] = Field(
        [],
        description="modules (or .py files, relative to the scenario) whose policies the "
        "scenario may name (docs/extending.md)",
    )
    node: Node = Field(description="the engine's hardware (from the profile)")
    model: Model = Field(description="the served model (from the profile)")
    timing: Timing = Field(description="prefill step-time model or table (from the profile)")
    tiers: Tiers = Field(description="GPU, host and NVMe tiers per engine")
    remote: Remote = Field(description="the remote store shared by all engines")
    cluster: Cluster = Field(Cluster(), description="engines, routing, load policy")
    engine: Engine = Field(Engine(), description="how each engine batches and schedules")
    prefetch: Prefetch = Field(
        Prefetch(), description="fetching KV from NVMe or remote into host ahead of use"
    )
    workload: Workload = Field(
        description="where requests come from (kind: mooncake | azure | synthetic)"
    )
    run: Run = Field(Run(), description="warm-up and time limit")
    cost: Cost | None = Field(None, description="prices for the cost summary (null: none)")
    faults: list[Fault] = Field([], description="scheduled faults (times and targets)")
    tenancy: Tenancy = Field(Tenancy(), description="tenant isolation, quotas, deletion")
    source: str | None = Field(None, description="file the scenario was loaded from")


def cross_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """Rules across fields, as (field path, message) pairs; empty when all hold."""
    out: list[tuple[tuple[Any, ...], str]] = []
    n = sc.node
    if n.pcp > n.gpus or n.gpus % n.pcp:
        out.append((("node", "pcp"), f"must divide gpus ({n.gpus}), got {n.pcp}"))
    out += pools.checks(sc)  # weights, reserve, KV pool, prefix cache, largest prompt
    if sc.model.kv_bytes_per_token is None and sc.model.kv_layout is None:
        out.append((("model",), "give kv_bytes_per_token or kv_layout"))
    out += _timing_checks(sc)
    out += _engine_checks(sc)
    out += _peer_checks(sc)
    out += _cost_checks(sc)
    ten = sc.tenancy
    if ten.quota:  # kept by the built-in stores' bookkeeping (a ttl: by plugins' too)
        tiers = [("tiers", t) for t in ("gpu", "host", "nvme")] + [("remote",)]
        for where in tiers:
            tier = sc.remote if where == ("remote",) else getattr(sc.tiers, where[1])
            if tier.eviction.name not in ("lru", "fifo"):
                rule = "quotas"
                out.append(
                    (
                        (*where, "eviction"),
                        f"tenancy {rule} need a built-in eviction policy (lru | fifo); "
                        f"{tier.eviction.name!r} is a plugin's",
                    )
                )
    if sc.tiers.host.enabled and sc.tiers.host.capacity > n.host_dram:
        out.append((("tiers", "host", "capacity"), "exceeds the node's host_dram"))
    nvme_cap = n.nvme_drives * n.nvme_drive_capacity
    pf = sc.prefetch
    if pf.policy.name != "none" or pf.on_session:
        what = ("prefetch", "policy" if pf.policy.name != "none" else "on_session")
        if not sc.tiers.host.enabled:
            out.append((what, "prefetches into host memory, and the host tier is disabled"))
        elif not sc.tiers.nvme.enabled and not sc.remote.enabled:
            out.append((what, "fetches from NVMe or the remote store; both are disabled"))
    if pf.policy.name == "timeout" and pf.timeout is None:
        out.append((("prefetch", "timeout"), "policy timeout needs a timeout (e.g. 200 ms)"))
    if sc.tiers.nvme.path == "gds" and not sc.tiers.nvme.enabled:
        out.append((("tiers", "nvme", "path"), "gds reads from the NVMe tier, which is disabled"))
    if sc.tiers.nvme.promote:
        if not sc.tiers.nvme.enabled:
            out.append(
                (("tiers", "nvme", "promote"), "promotes from NVMe; the NVMe tier is disabled")
            )
        elif not sc.tiers.host.enabled:
            out.append(
                (("tiers", "nvme", "promote"), "promotes into host; the host tier is disabled")
            )
    if sc.tiers.nvme.enabled:
        if n.nvme_drives == 0:
            out.append((("tiers", "nvme", "enabled"), "the node has no NVMe drives"))
        elif sc.tiers.nvme.capacity > nvme_cap:
            out.append(
                (
                    ("tiers", "nvme", "capacity"),
                    f"exceeds the node's drives ({nvme_cap / 1e12:.4g} TB)",
                )
            )
    w = sc.workload
    if isinstance(w, SyntheticWorkload):
        dists = [("prompt_tokens", w.prompt_tokens), ("output_tokens", w.output_tokens)]
        if w.sessions is not None:
            dists.append(("sessions.turns", w.sessions.turns))
        for name, d in dists:
            where = ("workload", *name.split("."))
            if isinstance(d, UniformDist) and d.low > d.high:
                out.append(((*where, "high"), "must be >= low"))
            if isinstance(d, LogNormalDist) and d.min > d.max:
                out.append(((*where, "max"), "must be >= min"))
            if (
                isinstance(d, ChoiceDist)
                and d.weights is not None
                and (len(d.weights) != len(d.values) or sum(d.weights) <= 0)
            ):
                out.append(((*where, "weights"), "need one weight per value, sum > 0"))
    out += _remote_kind_checks(sc)
    if sc.remote.enabled and sc.remote.sharding == "per_rank" and n.pcp == 1:
        out.append((("remote", "sharding"), "per_rank needs ranks: node.pcp is 1"))
    if isinstance(w, SyntheticWorkload) and w.prestored and not sc.remote.enabled:
        out.append((("workload", "prestored"), "needs the remote tier (remote.enabled: true)"))
    for i, f in enumerate(sc.faults):
        where = ("faults", i)
        if f.until is not None and f.until <= f.at:
            out.append(((*where, "until"), "must be after at"))
        if isinstance(f, ServerDown | StallBurst) and not sc.remote.enabled:
            out.append(((*where, "kind"), f"{f.kind} needs the remote tier"))
        if isinstance(f, ServerDown) and f.server >= sc.remote.servers:
            out.append(((*where, "server"), f"no server {f.server} (servers: {sc.remote.servers})"))
        if isinstance(f, SlowLink):
            if f.target == "remote" and not sc.remote.enabled:
                out.append(((*where, "target"), "remote: the remote tier is disabled"))
            if f.target in ("host", "nvme") and not getattr(sc.tiers, f.target).enabled:
                out.append(((*where, "target"), f"{f.target}: that tier is disabled"))
            if f.server is not None and (f.target != "remote" or f.server >= sc.remote.servers):
                out.append(((*where, "server"), "names no remote server of this scenario"))
        engine = getattr(f, "engine", None)
        if engine is not None and engine >= sc.cluster.engines:
            out.append(((*where, "engine"), f"no engine {engine} (engines: {sc.cluster.engines})"))
        if isinstance(f, StallBurst) and f.until is None:
            out.append(((*where, "until"), "a stall burst needs an end"))
    ten = sc.tenancy
    if ten.ttl is not None and ten.ttl < 1.0:
        out.append((("tenancy", "ttl"), "must be at least 1 s (expiry is checked every ttl/4)"))
    if ten.isolation == "none":
        if ten.quota:
            out.append((("tenancy", "quota"), "per-tenant quotas need isolation: tenant"))
        if ten.deletions:
            out.append((("tenancy", "deletions"), "deleting a tenant needs isolation: tenant"))
    if isinstance(w, SyntheticWorkload) and w.tenants is not None and w.tenants.weights is not None:
        tw = w.tenants.weights
        if len(tw) != w.tenants.count or sum(tw) <= 0:
            out.append((("workload", "tenants", "weights"), "need one weight per tenant, sum > 0"))
    if "remote" in sc.tenancy.quota and not sc.remote.enabled:
        out.append((("tenancy", "quota", "remote"), "the remote tier is disabled"))
    if w.window.end is not None and w.window.end <= w.window.start:
        out.append((("workload", "window", "end"), "must be after window.start"))
    return out


def _remote_kind_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """What a remote store kind cannot do (docs/data-path.md, "Remote store kinds")."""
    rc = sc.remote
    if not rc.enabled:
        return []
    out: list[tuple[tuple[Any, ...], str]] = []
    if rc.path == "gpudirect" and rc.kind == "object_store":
        out.append(
            (
                ("remote", "path"),
                "gpudirect: an object store answers over HTTP into host memory; use bounce "
                "(or null)",
            )
        )
    elif rc.gpudirect and not sc.node.gpudirect_rdma:
        out.append(  # named where the user said it (remote.path often comes from the kind)
            (
                ("node", "gpudirect_rdma"),
                f"false: no NIC path into HBM, and the {rc.kind} store reads by GPUDirect "
                "RDMA (remote.path: gpudirect); set remote.path: bounce (through host memory)",
            )
        )
    if rc.gpudirect and rc.codec is not None and rc.codec.on == "cpu":
        out.append(
            (
                ("remote", "codec", "on"),
                "cpu: a GPUDirect GET lands in HBM, out of the CPU's reach; decode on the gpu "
                "or set remote.path: bounce",
            )
        )
    return out


def lookup_order(sc: Scenario) -> list[str]:
    """The tiers a lookup walks, first to last (only those enabled): gpu, host, nvme,
    peer, remote (with its kind). Each block comes from the first tier holding it."""
    t = sc.tiers
    order = ["gpu"]
    if t.host.enabled:
        order.append("host")
    if t.nvme.enabled:
        order.append("nvme")
    if t.peer.enabled:
        order.append("peer")
    if sc.remote.enabled:
        order.append(f"remote ({sc.remote.kind})")
    return order


def _cost_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """The layout's price per hour (as kvsim.results.records.usd_per_hour adds it up)
    must stay below MAX_USD_PER_HOUR: past it the prices are a typo, and the hourly or
    per-token cost could overflow to infinity. Reported at the price of the largest
    part."""
    c = sc.cost
    if c is None:
        return []
    engines, t, rc = sc.cluster.engines, sc.tiers, sc.remote
    gb_hour = 1e-9 / 730.0
    parts = [("gpu_node_hour", f"{engines} engine(s)", engines * c.gpu_node_hour)]
    if t.host.enabled:
        what = f"tiers.host.capacity on {engines} engine(s)"
        parts.append(("dram_gb_month", what, engines * t.host.capacity * gb_hour * c.dram_gb_month))
    if t.nvme.enabled:
        what = f"tiers.nvme.capacity on {engines} engine(s)"
        parts.append(("nvme_gb_month", what, engines * t.nvme.capacity * gb_hour * c.nvme_gb_month))
    if rc.enabled:
        mem = rc.servers * rc.capacity * gb_hour * c.remote_memory_gb_month
        parts.append(("remote_memory_gb_month", f"remote.capacity on {rc.servers} server(s)", mem))
        parts.append(
            ("remote_server_hour", f"{rc.servers} server(s)", rc.servers * c.remote_server_hour)
        )
    total = sum(usd for _, _, usd in parts)
    if total <= MAX_USD_PER_HOUR:  # (False for an overflow to inf or NaN)
        return []
    inf = float("inf")
    name, what, usd = max(parts, key=lambda p: p[2] if p[2] == p[2] else inf)
    shown = f"${usd:.3g}" if usd < inf else "more than any float holds"
    return [
        (
            ("cost", name),
            f"prices the layout ({what}) at {shown} an hour, past any real plan "
            f"(at most ${MAX_USD_PER_HOUR:g} an hour in all): a typo?",
        )
    ]


def _peer_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """The peer tier reads other engines' host tiers: it needs two engines and a host
    tier; its engine part of T0 is at most T0; layer-wise loading needs it to stream."""
    peer = sc.tiers.peer
    if not peer.enabled:
        return []
    out: list[tuple[tuple[Any, ...], str]] = []
    where = ("tiers", "peer", "enabled")
    if sc.cluster.engines < 2:
        out.append((where, "a peer tier needs at least two engines (cluster.engines is 1)"))
    if not sc.tiers.host.enabled:
        out.append(
            (where, "a peer tier reads other engines' host tiers, and the host tier is disabled")
        )
    if peer.t0_engine > peer.t0:
        out.append(
            (("tiers", "peer", "t0_engine"), f"is larger than t0 ({peer.t0:g} s): lower it too")
        )
    if sc.engine.layerwise and sc.cluster.load_policy.name != "recompute" and not peer.streams:
        out.append(
            (
                ("engine", "layerwise"),
                "the peer tier cannot stream layer by layer (tiers.peer.streams: false): set "
                "engine.layerwise: false, tiers.peer.enabled: false, or tiers.peer.streams: "
                "true if its connector loads layer by layer",
            )
        )
    return out


def _timing_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """One time model: a roofline, or a complete grid (which must be a valid table)."""
    t = sc.timing
    grid = (t.new_tokens, t.cached_tokens, t.seconds)
    given = [g is not None for g in grid]
    if t.roofline is not None:
        if any(given):
            return [(("timing", "roofline"), "give a roofline or a table, not both")]
        if sc.node.hbm_bandwidth_per_gpu is None:
            return [(("node", "hbm_bandwidth_per_gpu"), "the roofline step model needs it")]
        return []
    if not all(given):
        names = ("new_tokens", "cached_tokens", "seconds")
        missing = [n for n, g in zip(names, given, strict=True) if not g]
        return [(("timing",), f"give roofline, a table, or the grid ({', '.join(missing)})")]
    try:
        TimingTable(t.new_tokens or [], t.cached_tokens or [], t.seconds or [], t.scale)
    except ValueError as e:  # the table refuses itself; report it at its field
        field, _, reason = str(e).partition(": ")
        return [(("timing", field), reason)]
    return []


def _engine_checks(sc: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    out: list[tuple[tuple[Any, ...], str]] = []
    e = sc.engine
    block = sc.workload.block_tokens
    if e.batching == "chunked" and e.max_batched_tokens < block:
        out.append(
            (
                ("engine", "max_batched_tokens"),
                f"is smaller than a block ({block} tokens, workload.block_tokens)",
            )
        )
    tiers = [("tiers", "host"), ("tiers", "nvme"), ("remote",)]
    for where in tiers:
        tier = sc.remote if where == ("remote",) else getattr(sc.tiers, where[1])
        if tier.t0_engine > tier.t0:
            out.append(((*where, "t0_engine"), f"is larger than t0 ({tier.t0:g} s): lower it too"))
    r = sc.timing.roofline
    if r is not None and r.experts_per_token > r.experts:
        out.append((("timing", "roofline", "experts_per_token"), f"exceeds experts ({r.experts})"))
    if r is not None:
        g = sc.node.gpus
        if r.tp * sc.node.pcp > g or g % (r.tp * sc.node.pcp):
            out.append(
                (
                    ("timing", "roofline", "tp"),
                    f"tp x node.pcp ({r.tp} x {sc.node.pcp}) must divide node.gpus ({g})",
                )
            )
        for name in ("ep", "dense_weight_shards", "expert_weight_shards"):
            v = getattr(r, name)
            if v is not None and (v > g or g % v):
                out.append((("timing", "roofline", name), f"must divide node.gpus ({g}), got {v}"))
    if e.layerwise:
        if sc.model.kv_layout is None:
            out.append((("engine", "layerwise"), "needs model.kv_layout (its layer count)"))
        if sc.cluster.load_policy.name != "recompute":
            for where in tiers:
                tier = sc.remote if where == ("remote",) else getattr(sc.tiers, where[1])
                if tier.enabled and not tier.streams:
                    name = ".".join(where)
                    out.append(
                        (
                            ("engine", "layerwise"),
                            f"the {where[-1]} tier cannot stream layer by layer ({name}.streams: "
                            f"false): set engine.layerwise: false, {name}.enabled: false, or "
                            f"{name}.streams: true if its connector loads layer by layer",
                        )
                    )
    return out
