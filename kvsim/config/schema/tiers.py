"""The cache tiers a scenario configures: GPU, host, NVMe, peer (:class:`Tiers`), the
remote store with its client (:class:`Remote`) and its servers' own SSDs
(:class:`RemoteSsd`), codecs, transfer engines
(:class:`TransferEngine`), and removed fields' replacements."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from kvsim.config.schema.fields import (
    Bandwidth,
    Bounded,
    Duration,
    Fraction,
    NonNegInt,
    PositiveDuration,
    Record,
    Size,
    Tokens,
)
from kvsim.config.schema.policies import AdmissionName, EvictionName, WritePolicy, policy_named


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


def _t0_engine() -> Any:
    """The engine's part of a tier's T0: the same field on every tier that has a T0."""
    return Field(
        "0 s",
        description="the part of t0 the engine pays (lookup work; at most t0); the "
        "rest only the request waits. sync: the engine waits all of t0",
    )


def _eviction() -> Any:
    """A node tier's eviction policy (the GPU, host and NVMe tiers')."""
    return Field(policy_named("lru"), description="eviction policy: lru | fifo | a plugin's")


def _admission() -> Any:
    """A node tier's admission policy (the GPU, host and NVMe tiers')."""
    return Field(
        policy_named("all"),
        description="all: cache every block offered; second_hit: only one offered before "
        "(a ghost list as long as the tier holds blocks remembers first sightings); or a "
        "plugin's name",
    )


class GpuTier(Record):
    """Prefix cache in HBM (vLLM-style); hits cost nothing to load."""

    capacity: Size = Field(description="KV capacity per engine (all GPUs of the node)")
    eviction: EvictionName = _eviction()
    admission: AdmissionName = _admission()


class LocalTier(Record):
    """A tier local to the node (host DRAM or NVMe)."""

    enabled: bool = Field(True, description="false: the tier does not exist")
    capacity: Size = Field(description="KV capacity per engine")
    t0: Duration = Field(description="fixed cost per request that hits this tier")
    t0_engine: Duration = _t0_engine()
    streams: bool = Field(True, description="restores can be read layer by layer (layerwise)")
    eviction: EvictionName = _eviction()
    admission: AdmissionName = _admission()
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


class TransferEngine(Record):
    """What a transfer engine costs beyond the link's bytes (Mooncake's transfer engine,
    NIXL; docs/data-path.md, "Transfer engines"): per read a setup (the control message,
    the metadata lookup), per batch of operations a submit-and-wait round, and per
    operation (one per block and layer, and per K and V, in vLLM's NIXL connector) the
    software that posts it and reaps its completion, on ``threads`` threads per rank. A
    read of n tokens on each of the ranks that move their parts at once makes ``ops =
    ceil(n / op_tokens / pcp) x ops_per_block`` operations each and takes at least::

        setup + ceil(ops / batch) x per_batch + max(ops x per_op / threads, bytes / link)

    (the operations' cost is a cap on the read's rate; the link's share is the fabric's).
    Memory registration is done once at start-up and is not a per-read cost."""

    setup: Duration = Field("1 ms", description="per read: control message, metadata lookup")
    per_batch: Duration = Field(
        "40 us", description="one submit-and-wait round of a batch of operations"
    )
    batch: NonNegInt = Field(
        0, description="operations per submitted batch (0: a read's operations in one)"
    )
    per_op: Duration = Field(
        "1 us", description="software per operation (post and completion), per thread"
    )
    threads: Bounded(4096) = Field(4, description="threads posting operations, per rank")
    op_tokens: Tokens = Field(16, description="tokens of one block the engine moves (vLLM: 16)")
    ops_per_block: Bounded(1_000_000) | None = Field(
        None,
        description="operations per block (null: one per layer and per K and V, one per "
        "layer for MLA: a per-layer paged layout, vLLM's NIXL connector)",
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
    t0_engine: Duration = _t0_engine()
    streams: bool = Field(
        False,
        description="restores can be read layer by layer (layerwise); false: LMCache's P2P "
        "backend retrieves whole chunks",
    )
    transfer: TransferEngine | None = Field(
        None, description="the transfer engine's own costs (null: the link's bytes only)"
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


class RemoteSsd(Record):
    """Each remote server's own SSD, below its DRAM inside the store (Mooncake Store's SSD
    offload, docs/data-path.md, "The store's own SSD"): what the server's DRAM evicts is
    written to its SSD; a GET of a shard held only there waits for the server to read it
    off the drive, then moves it over the server's link and the engine's path as any
    other. The defaults are one NVMe drive per server (HARDWARE.md) and Mooncake's."""

    enabled: bool = Field(
        False, description="true: each server's DRAM evicts to an SSD of its own (needs remote)"
    )
    # H for Mooncake's default (MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES, 2 TiB per client);
    # one 3.84 TB drive holds it (HARDWARE.md)
    capacity: Size = Field(
        "2 TiB",
        description="KV capacity of one server's SSD (default 2 TiB: Mooncake's "
        "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES)",
    )
    # M: one Gen5 NVMe drive per server, 13-14.5 GB/s sequential read (HARDWARE.md),
    # derated as the profiles' node drives (node.nvme_read_per_drive); L for what
    # Mooncake's file storage (pread or io_uring into its staging buffer) gets of it:
    # range 2-14.5 GB/s (a Gen4 drive, small buckets)
    read_bandwidth: Bandwidth = Field(
        "12 GB/s",
        description="bytes one server reads off its SSD per second, shared by every GET "
        "reading that server's SSD (default: one Gen5 drive, M; L 2-14.5 GB/s)",
    )
    # M: Gen5 enterprise drives write ~6-10 GB/s sequentially (HARDWARE.md), 7 GB/s as the
    # profiles' node.nvme_write_per_drive; range 2-10 GB/s
    write_bandwidth: Bandwidth = Field(
        "7 GB/s",
        description="bytes one server writes to its SSD per second: demotions, in order "
        "(default: one Gen5 drive, M; 2-10 GB/s)",
    )
    # L: the requester's RPC to the holder (batch_get_offload_object: one data-centre RPC,
    # 0.1-0.5 ms, as tiers.peer.t0's) plus the drive's first read (30-80 us, HARDWARE.md, M)
    latency: Duration = Field(
        "300 us",
        description="per GET reading a server's SSD, before its bytes move: the RPC to the "
        "holder and the drive's first read (L, 0.1-1 ms)",
    )
    eviction: Literal["fifo", "lru"] = Field(
        "fifo",
        description="which shard the SSD drops first when full: fifo (Mooncake's bucket "
        "backend default) or lru (least recently read)",
    )
    promote: bool = Field(
        False,
        description="a shard read from the SSD is also stored back into the server's DRAM "
        "when its GET ends (Mooncake's --promotion_on_hit, default false)",
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
    t0_engine: Duration = _t0_engine()
    streams: bool = Field(
        False,
        description="GETs can be read layer by layer (LMCache's remote connectors cannot)",
    )
    eviction: EvictionName = Field(
        policy_named("lru"), description="eviction policy of each server: lru | fifo | a plugin's"
    )
    admission: AdmissionName = Field(
        policy_named("all"),
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
    transfer: TransferEngine | None = Field(
        None,
        description="an RDMA transfer engine's own costs (Mooncake store: null for a "
        "kv_server's client, which remote.client models)",
    )
    ssd: RemoteSsd = Field(
        RemoteSsd(),
        description="each server's own SSD below its DRAM (Mooncake Store's SSD offload; "
        "enabled: false, the default: none)",
    )

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
