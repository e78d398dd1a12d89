"""What the engines, the tenancy rules and the faults share: one narrow interface.

:class:`Shared` holds the clock, the fabric, the remote store, the engines, the physics
constants an engine needs (KV bytes, T0s, the step model, the batching limits) and the
few things an engine reports back (a request finished, a request lost its engine). The
:class:`~kvsim.sim.simulation.Simulation` builds it and fills in those callbacks; the
engine, tenancy and fault modules import this module only, never the simulation, so the
dependency runs one way: simulation -> engine, tenancy, faults -> shared.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import simpy

from kvsim.cache.eviction import Gate, Key
from kvsim.cache.local import HOST, NVME, REMOTE, WRITE_POLICIES
from kvsim.cache.remote import RemoteStore
from kvsim.config.pools import pools
from kvsim.config.schema import Scenario
from kvsim.kernel.fabric import Fabric, Link
from kvsim.physics.client import Client, client_rate, put_rate
from kvsim.physics.step import StepModel, make_step_model, per_step_tokens
from kvsim.rng import stream
from kvsim.sim.hooks import Hooks, PrefetchHook
from kvsim.sim.policy import LoadPolicy
from kvsim.workload.request import Request

if TYPE_CHECKING:
    from kvsim.sim.engine import Engine
    from kvsim.sim.job import Job


def head_share(sc: Scenario) -> float:
    """The share of a block's KV one tensor-parallel rank holds, by heads: a GQA or MHA
    model's TP ranks split its KV heads (each keeps max(kv_heads // tp, 1) of them, as
    vLLM does), so each copies only its heads when the block is staged for a put; an MLA
    latent (or a KV size given without its layout) is kept whole by every rank. ``tp``
    is the roofline's, else the node's GPUs per context-parallel rank (a measured
    timing table's engine is the node)."""
    layout = sc.model.kv_layout
    if layout is None or layout.kind == "mla":
        return 1.0
    r = sc.timing.roofline
    tp = r.tp if r is not None else max(sc.node.gpus // sc.node.pcp, 1)
    heads = int(getattr(layout, "kv_heads", 1))
    return max(heads // tp, 1) / heads


def _unset(*_args: Any) -> Any:
    raise RuntimeError("Shared callback used before the simulation set it")


class Shared:
    """The pieces of one simulation that its parts share (see the module docstring)."""

    def __init__(self, sc: Scenario, env: simpy.Environment, fabric: Fabric) -> None:
        self.scenario = sc
        self.env = env
        self.fabric = fabric
        self.engines: list[Engine] = []
        self.remote: RemoteStore | None = None
        self.steps: StepModel = make_step_model(sc)
        self.kv_bytes: float = sc.model.kv_bytes
        self.block_tokens: int = sc.workload.block_tokens
        # every policy the scenario names, built-in or a plugin's (kvsim.sim.hooks)
        self.hooks: Hooks = Hooks(self)
        self.policy: LoadPolicy = self.hooks.load_policy(sc.cluster.load_policy)
        tiers, rc = sc.tiers, sc.remote
        # per tier code (kvsim.cache.local: gpu, host, nvme, remote, peer)
        self.t0: list[float] = [0.0, tiers.host.t0, tiers.nvme.t0, rc.t0, tiers.peer.t0]
        # the engine's part of each T0 (cross_checks: never more than the T0 itself)
        self.t0_engine: list[float] = [
            0.0,
            tiers.host.t0_engine,
            tiers.nvme.t0_engine,
            rc.t0_engine,
            tiers.peer.t0_engine,
        ]
        e = sc.engine
        self.serial: bool = e.batching == "serial"
        self.budget: int = 2**62 if self.serial else e.max_batched_tokens
        self.max_requests: int = 1 if self.serial else e.max_batch_requests
        self.per_step: int = per_step_tokens(
            e.batching, e.max_batched_tokens, e.long_prefill_token_threshold
        )
        self.scheduler: str = e.scheduler.name
        self.aging: float = e.sjf_aging
        self.layerwise: bool = e.layerwise
        layout = sc.model.kv_layout
        self.layers: int = layout.layers if layout is not None else 1
        self.max_inflight: int = e.max_inflight_restores or 2**62
        # HBM as pools (kvsim.config.pools): the node's KV pool bounds the working KV
        # (running requests' prompts and restores in flight); beyond ``cache_slack`` of it
        # the working KV evicts the prefix cache (tiers.gpu.capacity)
        hbm = pools(sc)
        self.kv_pool: float = hbm.node_kv
        self.cache_slack: float = hbm.slack
        self.timeout: float | None = rc.timeout if rc.enabled else None
        # tiers.peer: a lookup also finds blocks in other engines' host tiers (Engine._locate)
        self.peer: bool = tiers.peer.enabled
        # the GET's client cap (bytes/s of the whole GET: its clients together), set
        # with the remote store (kvsim.physics.client)
        self.client_cap: float = math.inf
        # a put's client cap (bytes/s of the whole put), when the connections have a rate of
        # their own (an object store); None: uncapped (kvsim.physics.client.put_rate)
        self.put_cap: float | None = None
        # remote.path: a GET lands in HBM by GPUDirect RDMA (NIC only: no host-to-GPU link,
        # no client copy) or through host memory (NIC, then the host-to-GPU link)
        self.remote_gpudirect: bool = rc.enabled and rc.gpudirect
        self.chunk_tokens: int = rc.chunk_tokens  # tokens of one GET/PUT operation
        self._op_stored = 1.0  # bytes one operation moves, as stored (its codec)
        self.nvme_gds: bool = tiers.nvme.path == "gds"
        self.remote_admission: Gate | None = None
        self.max_pending_puts: int = rc.max_pending_puts
        # remote write policy, coded as the local tiers' (kvsim.cache.local.BACK, ...)
        self.put_policy: int = WRITE_POLICIES.index(rc.write_policy)
        self.put_threshold: int = rc.write_threshold
        self.stage_share: float = 1.0  # part of a staging copy rank 0's D2H link carries
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
        # KV codecs per tier (gpu, host, nvme, remote, peer): stored bytes / raw bytes, and
        # seconds per raw byte to encode (writes into the tier) and decode (restores); a
        # peer serves blocks as its host tier stores them
        codecs = (None, tiers.host.codec, tiers.nvme.codec, rc.codec, tiers.host.codec)
        self.ratio: list[float] = [c.ratio if c is not None else 1.0 for c in codecs]
        self.encode_s: list[float] = [
            1.0 / c.encode_bandwidth if c is not None else 0.0 for c in codecs
        ]
        self.decode_s: list[float] = [
            1.0 / c.decode_bandwidth if c is not None else 0.0 for c in codecs
        ]
        self.codec_on_gpu: list[bool] = [c is not None and c.on == "gpu" for c in codecs]
        pf = sc.prefetch
        self.prefetching: bool = pf.policy.name != "none"  # NVMe and remote reached by prefetch
        # a plugin's prefetch policy (None: a built-in one)
        self.prefetch_hook: PrefetchHook | None = self.hooks.prefetch(pf.policy)
        self.prefetch_waits: bool = pf.policy.name in ("wait_complete", "timeout") or (
            self.prefetch_hook is not None and self.prefetch_hook.wait
        )
        self.prefetch_timeout: float | None = pf.timeout if pf.policy.name == "timeout" else None
        self.prefetch_on_session: bool = pf.on_session
        self._op_factor = 0.0
        self._op_bytes = 1.0
        self._stall_rng = stream(sc.seed, "stalls")
        self.stall_override: tuple[float, float, str] | None = None  # a stall burst
        self.fault_log: list[dict[str, Any]] = []
        # keys of blocks ever computed and kept, or prestored: recomputed_tokens (a dict of
        # int keys, not a set: the garbage collector leaves such a dict alone, while it
        # would walk a set of a million keys at every full collection)
        self.seen: dict[Key, None] = {}
        # ... kept only where a block can be cached at all (a cluster with no cache evicts
        # nothing, so recomputes nothing): a key costs ~70 bytes, a run's every block
        self.track_seen: bool = (
            sc.tiers.gpu.capacity > 0
            or sc.tiers.host.enabled
            or sc.tiers.nvme.enabled
            or sc.remote.enabled
        )
        # the access log (kvsim.results.accesses.AccessRecorder; run --record-accesses),
        # or None: the engines test it once per lookup, reservation and admission
        self.recorder: Any = None
        # set by the simulation
        self.finished: Callable[[Engine, Job], None] = _unset
        self.displace: Callable[[Job, Engine], None] = _unset
        self.keeps: Callable[[Job], bool] = _unset
        self.engines_changed: Callable[[], None] = _unset

    def set_remote(self, remote: RemoteStore, op_bytes: float, op_factor: float) -> None:
        self.remote = remote
        self._op_bytes = op_bytes
        self._op_factor = op_factor
        # the part of a staged block rank 0 copies on its own GPU-to-host link: its
        # shard of the tokens (per-rank sharding: 1/shards; unsharded: one rank saves
        # every token, LMCache's MLA default) times its share of the heads
        # (:func:`head_share`: 1/tp of a GQA/MHA model's KV heads, whole for MLA)
        self.stage_share = head_share(self.scenario) / remote.shards
        # what the GET's clients can pull, equation (2) of kvsim.physics.client: one
        # rank's client unsharded (whole chunks), every rank's own per rank (its shard
        # of each chunk), once per run; the server's part stays on the fabric
        rc = self.scenario.remote
        client = Client.of(rc.client)
        if self.remote_gpudirect:  # RDMA into HBM: no receive copy on the rank
            client = replace(client, copy_bandwidth=math.inf)
        stored = op_bytes * self.ratio[REMOTE]  # bytes one operation moves (its codec)
        self._op_stored = stored
        self.client_cap = remote.shards * client_rate(stored, client, rc.bandwidth, rc.op_overhead)
        put = put_rate(stored, client, rc.bandwidth, rc.op_overhead)
        self.put_cap = remote.shards * put if put < math.inf else None

    # ---- physics helpers ---------------------------------------------------------------

    def put_ops(self, parts: list[tuple[Link, float, int]]) -> int:
        """Operations (chunks, one request each) a put makes: per part (a link with the
        bytes it carries for ``k`` servers), k x the chunks of one server's bytes."""
        op = self._op_stored
        ops = 0
        for _, b, k in parts:
            if b > 0:
                ops += k * max(1, math.ceil(b / k / op - 1e-9))
        return ops

    def block_sizes(self, req: Request) -> list[float]:
        """Bytes of each block of a prompt (the last one is usually partial)."""
        full = self.block_tokens * self.kv_bytes
        sizes = [full] * len(req.hash_ids)
        sizes[-1] = (req.input_tokens - (len(sizes) - 1) * self.block_tokens) * self.kv_bytes
        return sizes

    def server_cost(self, nbytes: float) -> float:
        """Server work per payload byte of one GET/PUT part: 1 + ops x overhead x bw / bytes
        (one operation per chunk, each costing ``op_overhead`` of server time)."""
        if nbytes <= 0:
            return 1.0
        ops = max(1, math.ceil(nbytes / self._op_bytes - 1e-9))
        return 1.0 + ops * self._op_factor / nbytes

    def lockstep(
        self, parts: list[tuple[Link, float, int]], shared: tuple[Link, ...]
    ) -> tuple[tuple[Link, ...], float, tuple[float, ...], tuple[float, ...]]:
        """One flow for parts that move together, each over its own server link, and all
        over the ``shared`` links (NIC, PCIe): (links, size, costs, shares). ``parts`` are
        (link, bytes, servers behind it); progress is counted in bytes of the largest part,
        and a server's cost includes its per-op time for the part it holds."""
        size = max(b for _, b, _ in parts)
        links: list[Link] = []
        costs: list[float] = []
        shares: list[float] = []
        total = 0.0
        for link, b, n in parts:  # a plain loop: this runs for every GET and put
            links.append(link)
            costs.append(b * self.server_cost(b / n) / size)
            shares.append(b / size)
            total += b
        rest = (total / size,) * len(shared)
        return (*links, *shared), size, (*costs, *rest), (*shares, *rest)

    def draw_stall(self) -> float:
        """Seconds a remote GET hangs before it starts (0 for most GETs)."""
        st = self.scenario.remote.stall
        p, duration, dist = self.stall_override or (st.probability, st.duration, st.distribution)
        if p <= 0 or self._stall_rng.random() >= p:
            return 0.0
        if dist == "fixed":
            return duration
        return float(self._stall_rng.exponential(duration))

    def count_reads(self, engine: Engine, got: list[float], job: Job | None = None) -> None:
        """A restore finished: count the bytes each tier served (indexed by tier); with
        ``tiers.nvme.promote``, the blocks it read from NVMe are also stored into host."""
        local = engine.local
        reads = local.read_bytes
        reads[HOST] += got[HOST]
        reads[NVME] += got[NVME]
        if local.promote and got[NVME] > 0 and job is not None:
            sizes = job.sizes if job.sizes is not None else self.block_sizes(job.req)
            keys: list[Key] = []
            raw: list[float] = []
            for i, t in enumerate(job.src):  # src is a prefix of the blocks
                if t == NVME:
                    keys.append(job.keys[i])
                    raw.append(sizes[i])
            local.promoted_from_nvme(keys, raw)
        if self.remote is not None:
            self.remote.read_bytes += got[REMOTE]
