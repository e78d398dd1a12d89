"""Build a simulation from a Scenario, run it, and hand back plain records.

Construction wires the physical pieces: per engine a GPU->host->NVMe cache and its links
(host-to-GPU over PCIe, NVMe reads, NIC in and out, each the node's aggregate over its
GPUs/drives), the remote servers (one link each, shared by GETs and PUTs of all engines),
the router and the load policy. ``run`` feeds arrivals from the workload iterator and
returns :class:`SimOutput`: one tuple per finished request plus counters. Nothing here
reads files (the workload iterator does) or writes any.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import simpy

from kvsim.cache.eviction import make_store
from kvsim.cache.local import HOST, NVME, LocalCache
from kvsim.cache.remote import RemoteStore
from kvsim.config.schema import Scenario, SyntheticWorkload
from kvsim.errors import InputError
from kvsim.kernel.fabric import Fabric, Link
from kvsim.physics.timing import TimingTable
from kvsim.rng import stream
from kvsim.sim.engine import Engine, Job
from kvsim.sim.policy import LOAD_POLICIES
from kvsim.sim.router import make_router
from kvsim.workload import open_workload
from kvsim.workload.request import Request, check_request
from kvsim.workload.synthetic import prestored_blocks

Progress = Callable[[int], None]


@dataclass
class SimOutput:
    """What a run produced, before any aggregation."""

    rows: list[tuple]
    engines: list[dict[str, Any]]
    tiers: dict[str, Any]
    end_time: float
    arrived: int
    unfinished: int
    timing_extrapolations: int
    links: dict[str, dict[str, float]] = field(default_factory=dict)


class Simulation:
    """One scenario's engines, tiers, links and router on one SimPy clock."""

    def __init__(
        self,
        scenario: Scenario,
        requests: Iterable[Request] | None = None,
        progress: Progress | None = None,
    ) -> None:
        sc = scenario
        self.scenario = sc
        self.env = simpy.Environment()
        self.fabric = Fabric(self.env)
        t = sc.timing
        self.table = TimingTable(t.new_tokens, t.cached_tokens, t.seconds, t.scale)
        self.policy = LOAD_POLICIES[sc.cluster.load_policy]
        self.kv_bytes = sc.model.kv_bytes
        self.block_tokens = sc.workload.block_tokens
        self.t0 = [0.0, sc.tiers.host.t0, sc.tiers.nvme.t0, sc.remote.t0]
        self.requests = requests if requests is not None else open_workload(sc.workload, sc.seed)
        self.progress = progress
        self.rows: list[tuple] = []
        self.arrived = 0
        self._stall_rng = stream(sc.seed, "stalls")
        node = sc.node
        rc = sc.remote
        self.timeout = rc.timeout if rc.enabled else None
        self.max_pending_puts = rc.max_pending_puts
        self.remote: RemoteStore | None = None
        if rc.enabled:
            links = [self.fabric.link(f"remote{k}", rc.bandwidth) for k in range(rc.servers)]
            stores = [make_store(rc.eviction, rc.capacity) for _ in range(rc.servers)]
            group = None
            if rc.sharding == "per_rank" and rc.servers == node.pcp > 1:
                group = self.fabric.link("remote*", rc.bandwidth * rc.servers)
            self.remote = RemoteStore(
                stores, links, per_rank=rc.sharding == "per_rank", ranks=node.pcp, group=group
            )
            op_bytes = rc.chunk_tokens * self.kv_bytes / self.remote.shards
            self._op_factor = rc.op_overhead * rc.bandwidth
            self._op_bytes = op_bytes
            # unsharded: one rank saves everything through its own link (LMCache's MLA
            # default); per rank: every rank copies its shard in parallel
            self.stage_bandwidth = node.d2h_per_gpu * self.remote.shards
            self._prestore(sc)
        self.engines: list[Engine] = []
        tiers = sc.tiers
        for i in range(sc.cluster.engines):
            local = LocalCache(
                make_store(tiers.gpu.eviction, tiers.gpu.capacity),
                make_store(tiers.host.eviction, tiers.host.capacity)
                if tiers.host.enabled
                else None,
                make_store(tiers.nvme.eviction, tiers.nvme.capacity)
                if tiers.nvme.enabled
                else None,
            )
            link = self.fabric.link
            h2d = link(f"e{i}.h2d", node.h2d_per_gpu * node.gpus, node.h2d_latency)
            nvme = (
                link(f"e{i}.nvme", node.nvme_read_per_drive * node.nvme_drives, node.nvme_latency)
                if tiers.nvme.enabled
                else None
            )
            nic_in = link(f"e{i}.nic_in", node.nic_per_gpu * node.gpus, node.network_latency)
            nic_out = link(f"e{i}.nic_out", node.nic_per_gpu * node.gpus, node.network_latency)
            self.engines.append(Engine(self, i, local, h2d, nvme, nic_in, nic_out))
        self.router = make_router(sc.cluster.router, self.engines, sc.cluster.affinity_slack)
        self.warmup = sc.run.warmup

    # ---- physics helpers used by engines ----------------------------------------------

    def block_sizes(self, req: Request) -> list[float]:
        """Bytes of each block of a prompt (the last one is usually partial)."""
        full = self.block_tokens * self.kv_bytes
        sizes = [full] * len(req.hash_ids)
        sizes[-1] = (req.input_tokens - (len(sizes) - 1) * self.block_tokens) * self.kv_bytes
        return sizes

    def _prestore(self, sc: Scenario) -> None:
        """Fill the remote store with the workload's shared prefixes, if it asks for that."""
        w = sc.workload
        if not isinstance(w, SyntheticWorkload) or not w.prestored:
            return
        assert self.remote is not None
        self.remote.prestore(prestored_blocks(w), self.block_tokens * self.kv_bytes)

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
        total = sum(b for _, b, _ in parts)
        links = tuple(link for link, _, _ in parts) + shared
        costs = tuple(b * self.server_cost(b / n) / size for _, b, n in parts)
        shares = tuple(b / size for _, b, _ in parts)
        rest = (total / size,) * len(shared)
        return links, size, costs + rest, shares + rest

    def draw_stall(self) -> float:
        """Seconds a remote GET hangs before it starts (0 for most GETs)."""
        st = self.scenario.remote.stall
        if st.probability <= 0 or self._stall_rng.random() >= st.probability:
            return 0.0
        if st.distribution == "fixed":
            return st.duration
        return float(self._stall_rng.exponential(st.duration))

    def record(self, engine: Engine, job: Job) -> None:
        self.rows.append(engine.row(job, self.env.now))
        if self.progress is not None and len(self.rows) % 1000 == 0:
            self.progress(1000)

    # ---- running ------------------------------------------------------------------------

    def _arrivals(self, requests: Iterator[Request]) -> Any:
        env = self.env
        router = self.router
        warmup = self.warmup
        block = self.block_tokens
        last = 0.0
        for req in requests:
            if req.arrival < last:
                raise InputError(
                    f"request {req.id}: arrival {req.arrival:g} s is before the previous "
                    f"one ({last:g} s); a workload must be sorted by time"
                )
            check_request(req, block)
            last = req.arrival
            dt = req.arrival - env.now
            if dt > 0:
                yield env.timeout(dt)
            self.arrived += 1
            router.pick(req.hash_ids).submit(Job(req, req.arrival < warmup))

    def run(self) -> SimOutput:
        """Run until every request has finished (or ``run.max_time``)."""
        env = self.env
        env.process(self._arrivals(iter(self.requests)))
        env.run(until=self.scenario.run.max_time)
        if self.progress is not None:
            self.progress(len(self.rows) % 1000)
        return self._output()

    def _output(self) -> SimOutput:
        end = self.env.now
        engines = [
            {
                "engine": e.index,
                "served": e.served,
                "busy_s": e.busy,
                "blocked_s": e.blocked,
                "queue_area": e.queue_area + e.queued * (end - e._queue_t),
                "queued_at_end": e.queued,
                "outstanding_at_end": e.outstanding,
            }
            for e in self.engines
        ]
        tiers: dict[str, Any] = {}
        for name, level in (("gpu", 0), ("host", HOST), ("nvme", NVME)):
            stores = [e.local.tiers[level] for e in self.engines]
            if stores[0] is None:
                continue
            tiers[name] = {
                "capacity_bytes": sum(s.capacity for s in stores),
                "used_bytes": sum(s.used for s in stores),
                "peak_bytes_max_engine": max(s.peak for s in stores),
                "blocks": sum(len(s) for s in stores),
                "evictions": sum(s.evictions for s in stores),
                "demotions_in": sum(e.local.demotions[level] for e in self.engines),
            }
        if self.remote is not None:
            r = self.remote
            tiers["remote"] = {
                "servers": r.servers,
                "shards": r.shards,
                **r.stats(),
                "puts": r.puts,
                "put_bytes": r.put_bytes,
                "puts_dropped_shards": r.puts_dropped,
                "server_bytes": r.server_bytes(),
                "server_busy_s": r.server_busy(),
            }
        links = {
            name: {"bytes": link.bytes, "busy_s": link.busy_time}
            for name, link in self.fabric.links.items()
        }
        unfinished = self.arrived - len(self.rows)
        return SimOutput(
            self.rows,
            engines,
            tiers,
            end,
            self.arrived,
            unfinished,
            self.table.extrapolations,
            links,
        )
