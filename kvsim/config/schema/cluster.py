"""How engines are laid out and run: :class:`Cluster` (engines, routing, load policy, the
P/D hand-off to a decode pool: :class:`Handoff`), :class:`Prefetch` and :class:`Engine`
(batching and scheduling, and the work a request pays outside the GPU kernels:
:class:`Frontend`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kvsim.config.schema.fields import (
    Bandwidth,
    Bounded,
    Duration,
    NonNegInt,
    PosInt,
    PositiveDuration,
    Record,
    Tokens,
)
from kvsim.config.schema.policies import (
    LoadPolicyName,
    PrefetchName,
    RouterName,
    SchedulerName,
    policy_named,
)
from kvsim.config.schema.tiers import TransferEngine


class Handoff(Record):
    """Disaggregated serving's hand-off (docs/engine-model.md, "P/D hand-off"): when a
    request's prefill ends, its whole KV goes to a decode pool over the engine's NIC out
    (shared max-min with remote puts and peer reads) and the decode pool's receive link
    (one for all engines); the request's working KV stays in the engine's HBM until the
    hand-off ends (vLLM's NixlConnector frees a prefill's blocks once the decode instance
    has read them). TTFT still ends at the first token; ``handoff_s`` records the rest."""

    enabled: bool = Field(
        False, description="true: ship every finished request's KV to the decode pool"
    )
    bandwidth: Bandwidth | None = Field(
        None,
        description="the decode pool's receive bandwidth, one link all engines' hand-offs "
        "share (its instances' NICs together, e.g. 400 GB/s for one 8xH200 node with a 400 "
        "Gb/s NIC per GPU); required when enabled",
    )
    # L: the orchestration before the decode instance's read starts (the router's dispatch,
    # the decode scheduler's next step boundary) and the completion notice back to the
    # prefill; vLLM PR #51919 measured a 197 ms p50 hand-over on a loaded 3P1D setup, of
    # which 29 ms was the transfer and 58 ms the decode's recompute of token 1
    latency: Duration = Field(
        "20 ms",
        description="fixed time per hand-off before its first byte: the decode instance's "
        "pickup (dispatch, its next scheduler step) and the notice back, the links' own "
        "latency included (L: 5-110 ms)",
    )
    transfer: TransferEngine | None = Field(
        None,
        description="the transfer engine's own costs on each hand-off (NIXL, Mooncake's "
        "transfer engine; null: the links' bytes only)",
    )


class Cluster(Record):
    engines: Bounded(4096) = Field(1, description="prefill engines (nodes)")
    router: RouterName = Field(
        policy_named("round_robin"),
        description="round_robin | least_loaded | cache_affinity | a plugin's",
    )
    load_policy: LoadPolicyName = Field(
        policy_named("sync"), description="sync | async | recompute | auto | a plugin's"
    )
    affinity_slack: NonNegInt = Field(
        4, description="cache_affinity: max extra queued requests accepted for a better hit"
    )
    handoff: Handoff = Field(
        Handoff(), description="P/D hand-off of each finished request's KV to a decode pool"
    )


class Prefetch(Record):
    """Bringing KV from NVMe or the remote store up to host memory ahead of its use
    (SGLang HiCache's prefetch; docs/data-path.md)."""

    policy: PrefetchName = Field(
        policy_named("none"),
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


class Frontend(Record):
    """What a request pays outside the GPU kernels (docs/engine-model.md, "The frontend"):
    before the scheduler sees it, in one of the engine's ``servers`` (API-server
    processes, each serving one request at a time, first come first served: vLLM's
    asyncio loop with its one-thread tokenizer), then prefix hashing in the engine's input
    thread; and after its last prefill step, its first token's way out."""

    servers: Bounded(4096) = Field(1, description="API-server processes per engine")
    per_request: Duration = Field(
        "0 s", description="HTTP, request objects and validation, per request"
    )
    per_token: Duration = Field(
        "0 s",
        description="per prompt token: JSON parsing, validation, the message to the engine",
    )
    tokenize_per_request: Duration = Field("0 s", description="tokenizer call, per request")
    tokenize_per_token: Duration = Field(
        "0 s", description="tokenizing, per prompt token (0: the client sends token ids)"
    )
    hash_per_block: Duration = Field(
        "0 s", description="prefix hashing and the block-table lookup, per engine block"
    )
    block_tokens: Tokens = Field(16, description="the engine's KV block (vLLM: 16 tokens)")
    output: Duration = Field(
        "0 s", description="the first token's way out: sampling, detokenizing, streaming"
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
        policy_named("fcfs"),
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
    mode: Literal["prefill", "colocated"] = Field(
        "prefill",
        description="prefill: the engine serves prompts only (disaggregated prefill; every "
        "result as before); colocated: after its prefill a request decodes one token a step "
        "on the same engine until its output_tokens are out, its KV held in the pool "
        '(docs/engine-model.md, "Co-located serving")',
    )
    preemption: Literal["hold", "recompute", "swap"] = Field(
        "hold",
        description="when prompts in flight outgrow the KV pool. hold: a request reserves "
        "its whole prompt's KV when admitted (colocated: prompt and output), and one that "
        "does not fit waits (SGLang); "
        "recompute: admitted as its whole prompt fits the free pool, a request allocates "
        "KV chunk by chunk, and when a running request's next chunk does not fit the last "
        "running request is preempted (its blocks freed into the prefix cache, recomputed "
        "later; vLLM V1); swap (colocated only): as recompute, but a decoding request "
        "preempted has its KV copied to host memory and back (vLLM v0's swap)",
    )
    cuda_graphs: bool = Field(
        True,
        description="small steps replay CUDA graphs (false: eager mode, vLLM's "
        "--enforce-eager: every kernel launched from Python; timing.roofline.ops)",
    )
    frontend: Frontend | None = Field(
        None, description="per-request work outside the kernels (null: none, as calibrated)"
    )
