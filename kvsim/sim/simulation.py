"""Build a simulation from a Scenario, run it, and hand back plain records.

What this module owns: :class:`Simulation` (it builds the run, is the engines' listener and
runs the arrivals), :class:`SimOutput` (what a run produced) and :class:`MemoryGuard`.
Construction wires the physical pieces: per engine its local tiers (each local tier kind
builds its own store, admission filter and links: kvsim.sim.tiers) and its links
(host-to-GPU over PCIe, NIC in and out, each the node's aggregate over its GPUs), the
remote servers (one link each, shared by GETs and PUTs of all engines), the router, the
load policy, the tenants' rules, the scheduled faults and the metrics collector
(kvsim.sim.metrics: every request's record, and its listeners such as the access log).
``run`` feeds arrivals from the workload iterator and returns :class:`SimOutput`: the
requests' records (finished, or dropped with a reason) plus counters. With
``workload.concurrency`` N the clients are a closed loop: at most N requests are in flight
(routed, not yet finished or dropped); one that comes due while N are waits, the later ones
in order behind it, and is sent when one of the N finishes or is dropped, its arrival (and
so its TTFT) counted from that send, as bench_serving's ``--max-concurrency`` measures it.
Nothing here reads files (the workload iterator does) or writes any; a
:class:`MemoryGuard` reads the process's own size from ``/proc`` to stop a run cleanly
before it runs out of memory.
"""

from __future__ import annotations

import gc
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import simpy

from kvsim.cache.eviction import POLICIES, BlockStore, Gate, Key, make_store
from kvsim.cache.local import GPU, HOST, NVME, REMOTE, SELECTIVE, TIERS, LocalCache
from kvsim.cache.remote import RemoteStore
from kvsim.cache.store_ssd import StoreSsd
from kvsim.cache.writes import Writes
from kvsim.config.pools import too_large
from kvsim.config.schema import Scenario, SyntheticWorkload
from kvsim.errors import InputError
from kvsim.kernel.fabric import Fabric, Link
from kvsim.kernel.pipe import Pipe
from kvsim.sim import faults
from kvsim.sim.colocated import ColocatedEngine
from kvsim.sim.constants import Constants
from kvsim.sim.decoding import DecodeJob
from kvsim.sim.engine import Engine
from kvsim.sim.hooks import Hooks
from kvsim.sim.job import Job
from kvsim.sim.metrics import Metrics, OnRecords
from kvsim.sim.node import Links, Node
from kvsim.sim.recorder import AccessRecorder
from kvsim.sim.rows import RowTable, columns
from kvsim.sim.shared import Listener, Shared
from kvsim.sim.tenancy import Tenancy
from kvsim.sim.tiers import KINDS, LocalTier, Tier
from kvsim.workload import open_workload
from kvsim.workload.request import Request, check_request
from kvsim.workload.synthetic import prestored_blocks

Progress = Callable[[int], None]

# the most steps a long-prefill threshold may split one prompt into (a silly but legal
# threshold, 1 token, would otherwise make a million-token prompt a million steps, each
# kept in the engines' activity records)
MAX_PROMPT_STEPS = 1 << 16
# memory checks: every 1,000 recorded requests, every 1,024 steps of each engine
# (Engine._loop), and every 1,024 arrivals or GUARD_BLOCKS prompt blocks arrived
GUARD_BLOCKS = 1 << 16  # prompt blocks arrived between memory checks
_MIB = 1 << 20


def _rlimit(name: str) -> int:
    """The soft limit ``resource.<name>`` in bytes; -1 when none is set (or unknown)."""
    try:
        import resource
    except ImportError:  # not a Unix
        return -1
    soft = resource.getrlimit(getattr(resource, name))[0]
    return -1 if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def _meminfo(field: str) -> int:
    """A ``/proc/meminfo`` field in bytes; -1 when it cannot be read."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(field.encode() + b":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return -1


class MemoryGuard:
    """Stops a run before the process runs out of memory: a MemoryError (the CLI's
    one-line "out of memory", exit 2, no output written) raised from the simulation's
    progress points rather than an allocation failing somewhere (the compiled core can
    crash on one). It checks the process's size (``/proc/self/statm``) against
    RLIMIT_AS (virtual size) and RLIMIT_DATA, less headroom for the results, and, once
    the process holds a quarter of the machine's memory, what the machine still has
    available (the kernel would kill the process outright). Without ``/proc`` it does
    nothing."""

    def __init__(self) -> None:
        self.statm = "/proc/self/statm" if os.path.exists("/proc/self/statm") else ""
        self.page = os.sysconf("SC_PAGE_SIZE") if self.statm else 4096
        self.vm_limit = self._below(_rlimit("RLIMIT_AS"))
        self.data_limit = self._below(_rlimit("RLIMIT_DATA"))
        total = _meminfo("MemTotal") if self.statm else -1
        self.watch_rss = total // 4 if total > 0 else -1  # from this size on, watch the host
        self.reserve = max(128 * _MIB, total // 32)  # memory the machine must keep free

    @staticmethod
    def _below(limit: int) -> int:
        """Where to stop under a limit: headroom for what follows the last check (a
        request's blocks, the results tables)."""
        return -1 if limit < 0 else max(limit - max(128 * _MIB, limit // 8), 0)

    def check(self) -> None:
        if not self.statm:
            return
        try:
            with open(self.statm, "rb") as f:
                fields = f.read().split()
            size = int(fields[0]) * self.page
            rss = int(fields[1]) * self.page
            data = int(fields[5]) * self.page
        except (OSError, ValueError, IndexError):
            return
        if self.vm_limit >= 0 and size > self.vm_limit:
            raise MemoryError(f"{size // _MIB} MiB of address space, near its limit (RLIMIT_AS)")
        if self.data_limit >= 0 and data > self.data_limit:
            raise MemoryError(f"{data // _MIB} MiB of data, near its limit (RLIMIT_DATA)")
        if 0 <= self.watch_rss < rss:
            avail = _meminfo("MemAvailable")
            if 0 <= avail < self.reserve:
                raise MemoryError(f"{rss // _MIB} MiB resident, {avail // _MIB} MiB left")


@dataclass
class SimOutput:
    """What a run produced, before any aggregation."""

    rows: RowTable  # one per request, finished or dropped
    engines: list[dict[str, Any]]
    tiers: dict[str, Any]
    end_time: float
    arrived: int
    unfinished: int
    timing_extrapolations: int
    links: dict[str, dict[str, float]] = field(default_factory=dict)
    dropped: int = 0
    tenancy: dict[str, Any] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    # per engine: flat [start, end, ...] spans of GPU work, blocked steps and copies
    activity: list[dict[str, list[float]]] = field(default_factory=list)
    # tier kinds other than the built-in ones (module.Class, by tier name; kvsim.sim.tiers)
    tier_kinds: dict[str, str] = field(default_factory=dict)
    # workload.concurrency: requests due by the end that were never sent (no slot freed)
    held: int = 0
    # engine.mode colocated: every finished request's gaps between tokens, with its id
    # (each engine's residency and swaps are in ``engines``); None in prefill mode
    itl_ids: Any = None
    itl_s: Any = None


class Simulation(Listener):
    """One scenario's engines, tiers, links and router on one SimPy clock."""

    def __init__(
        self,
        scenario: Scenario,
        requests: Iterable[Request] | None = None,
        progress: Progress | None = None,
        engine_order: Sequence[int] | None = None,
        record_accesses: bool = False,
        tier_kinds: Sequence[type[Tier] | Tier] = KINDS,
    ) -> None:
        """``engine_order`` builds the engines in another order (the results must not
        depend on it; the tests check that). ``record_accesses``: keep the access log
        (``self.recorder``: kvsim.sim.recorder), from before the remote store is
        prestored. ``tier_kinds``: the tier kinds by code, the five built-in ones (or
        subclasses in their places) then a user's (kvsim.sim.tiers; docs/extending.md,
        "Adding a tier kind")."""
        sc = scenario
        self.scenario = sc
        self.env = simpy.Environment(initial_time=0.0)  # float times throughout
        # (the compiled core reads the clock as env._now, the attribute behind SimPy's
        # ``now`` property, which would be a Python call each time)
        self.fabric = Fabric(self.env)
        run = Constants(sc, tier_kinds)
        hooks = Hooks(run, self.env)  # every policy by name: built-in, or a plugin's
        # the load and prefetch policies first (a plugin's instances are set up in order)
        policy = hooks.load_policy(sc.cluster.load_policy)
        prefetch = hooks.prefetch(sc.prefetch.policy)
        self.requests = requests if requests is not None else open_workload(sc.workload, sc.seed)
        self.progress = progress
        self.arrived = 0  # requests sent (routed)
        self.dropped = 0
        # closed-loop clients (workload.concurrency; 0: open loop): the requests in flight,
        # the event the arrival process waits on while they are at the cap, and the request
        # it holds meanwhile (the later ones wait in the workload iterator, in order)
        self.cap = sc.workload.concurrency or 0
        self.in_flight = 0
        self._slot: simpy.Event | None = None
        self._held: Request | None = None
        self._pending: Iterator[Request] = iter(())
        self.guard = MemoryGuard()
        # the memory check the run makes at its progress points; tests may swap it
        self.check_memory: Callable[[], None] = self.guard.check
        node = sc.node
        rc = sc.remote
        self.remote: RemoteStore | None = None
        admission = None
        ssd_pipes: list[Pipe] = []  # the servers' SSDs' write links (remote.ssd)
        if rc.enabled:
            links = [self.fabric.link(f"remote{k}", rc.bandwidth) for k in range(rc.servers)]
            shards = node.pcp if rc.sharding == "per_rank" else 1
            stores = [
                hooks.store(rc.eviction, rc.capacity, "remote", shards) for _ in range(rc.servers)
            ]
            # a plugin's eviction keeps its own state per server: no mirrored index
            mirror = rc.eviction.name in POLICIES
            group = None
            if mirror and rc.sharding == "per_rank" and rc.servers == node.pcp > 1:
                group = self.fabric.link("remote*", rc.bandwidth * rc.servers)
            ssd = None
            if rc.ssd.enabled:  # each server's own SSD below its DRAM
                ssd = self._store_ssd(group is not None)
                ssd_pipes = ssd.pipes
            self.remote = RemoteStore(
                stores,
                links,
                per_rank=rc.sharding == "per_rank",
                ranks=node.pcp,
                group=group,
                mirror=mirror,
                ssd=ssd,
            )
            admission = hooks.gate(
                rc.admission, rc.capacity * rc.servers, "remote", None, self.remote.shards
            )
        # the metrics collector: every request's record, and block events for its
        # listeners: the access log (``run --record-accesses``), which hears them from
        # before the remote store is prestored, once the stores are watched
        tiers = run.tiers
        self.metrics = Metrics(
            columns([t.name for t in tiers], run.handoff is not None, run.colocated),
            fields=(DecodeJob if run.colocated else Job).RECORD,
        )
        self.metrics.add(OnRecords(self._records))
        self.recorder: AccessRecorder | None = None
        if record_accesses:
            env = self.env
            self.recorder = AccessRecorder(lambda: env._now, [t.name for t in tiers])
            self.metrics.add(self.recorder)
        # cluster.handoff: the decode pool's receive link, shared by every engine's
        # hand-offs; a request is recorded when its hand-off ends (kvsim.sim.handoff)
        decode = None
        if run.handoff is not None:
            assert run.handoff.bandwidth is not None  # (kvsim.config.checks)
            decode = self.fabric.link("decode", run.handoff.bandwidth)
        self._record_at_finish = decode is None
        self._colocated = run.colocated  # engine.mode colocated (kvsim.sim.colocated)
        # the engines as the parts below them see them (by index, once all are built)
        nodes: list[Node] = []
        ctx = self.shared = Shared(
            run,
            self.env,
            self.fabric,
            hooks,
            policy,
            prefetch,
            nodes,
            self,
            self.metrics,
            self.remote,
            admission,
            decode,
        )
        self.engines: list[Engine] = []
        order = list(engine_order) if engine_order is not None else range(sc.cluster.engines)
        if sorted(order) != list(range(sc.cluster.engines)):
            raise ValueError("engine_order must list every engine once")
        self.pipes: list[Pipe] = list(ssd_pipes)  # write links, in order (not fabric links)
        local_tiers = [t for t in tiers if isinstance(t, LocalTier)]
        for i in order:
            self.engines.append(self._engine(i, local_tiers, hooks))
        self.engines.sort(key=lambda e: e.index)
        for e in self.engines:
            e.guard = self.check_memory
        nodes += self.engines
        self.router = hooks.router(sc.cluster.router, self.engines, sc.cluster.affinity_slack)
        # auto: every request runs as measured; the results cut the transient afterwards
        self.warmup = 0.0 if sc.run.warmup == "auto" else sc.run.warmup
        self.tenancy = Tenancy(ctx, sc.tenancy)
        self.tenancy.install()
        self.metrics.attach(self.engines, self.remote)  # (watches stores if anyone listens)
        if self.remote is not None:
            self._prestore(sc)
        hooks.tenant_of = self.tenancy.key_tenant
        # block depths, for plugin eviction and admission policies (None: none of those)
        self._note: Callable[[Sequence[Key]], None] | None = (
            hooks.note if hooks.depths is not None else None
        )
        hooks.setup(self.engines, self.remote)

    def _store_ssd(self, grouped: bool) -> StoreSsd:
        """The remote servers' own SSDs (``remote.ssd``): per server a store, a read link
        (and, while the store is mirrored, one for all of them) and a write link."""
        rc = self.scenario.remote
        cfg = rc.ssd
        n = rc.servers
        env = self.env
        return StoreSsd(
            [make_store(cfg.eviction, cfg.capacity) for _ in range(n)],
            [self.fabric.link(f"remote_ssd{k}", cfg.read_bandwidth) for k in range(n)],
            [Pipe(f"remote_ssd_write{k}", cfg.write_bandwidth) for k in range(n)],
            lambda: env._now,
            latency=cfg.latency,
            promote=cfg.promote,
            group=self.fabric.link("remote_ssd*", cfg.read_bandwidth * n) if grouped else None,
        )

    def _engine(self, i: int, local_tiers: Sequence[LocalTier], hooks: Hooks) -> Engine:
        """Engine ``i``: its local tiers' stores (each tier builds its own, with its links)
        and its links."""
        sc = self.scenario
        ctx = self.shared
        run = ctx.run
        node = sc.node
        n = len(run.tiers)
        link = self.fabric.link
        # rank 0's GPU-to-host link stands for every rank's (each copies its shard)
        d2h = Pipe(f"e{i}.d2h", node.d2h_per_gpu)
        self.pipes.append(d2h)
        stores: list[BlockStore | None] = [None] * n
        gates: list[Gate | None] = [None] * n
        write_pipes: list[Pipe | None] = [None] * n
        via_d2h = [False] * n
        queues: list[float | None] = [None] * n
        blocking = [False] * n
        policy = ["write_back"] * n
        threshold = [2] * n
        for tier in local_tiers:
            t = tier.code
            pipe = tier.write_pipe(i, sc)
            if pipe is not None:
                write_pipes[t] = pipe
                self.pipes.append(pipe)
            via_d2h[t] = tier.via_d2h(run.tiers)
            queues[t], blocking[t] = tier.write_queue()
            policy[t] = tier.write_policy
            threshold[t] = tier.write_threshold
        for tier in local_tiers:
            stores[tier.code] = tier.store(hooks)
        for tier in local_tiers:
            gates[tier.code] = tier.gate(hooks, stores[tier.code])
        gpu = stores[GPU]
        assert gpu is not None
        extra = stores[TIERS:]  # a user's local tier kinds (kvsim.sim.tiers)
        wide = n if extra else NVME + 1  # the local cache's per-tier lists
        local = LocalCache(
            gpu,
            stores[HOST],
            stores[NVME],
            gates[:wide],
            policy[:wide],
            threshold[:wide],
            Writes(
                lambda: self.env._now,
                d2h,
                node.gpus,
                write_pipes[:wide],
                via_d2h[:wide],
                run.nvme_gds,
                queues[:wide],
                blocking[:wide],
                [1.0 if run.codec_on_gpu[t] else 1.0 / run.ratio[t] for t in range(wide)],
                run.copy_sm_share,
            ),
            count_uses=run.put_policy == SELECTIVE,
            ratio=run.ratio[:wide],
            # null: promote whenever both tiers exist (LMCache and HiCache do)
            promote=sc.tiers.nvme.promote is not False,
            extra=extra,
            chain=run.chain,
        )
        h2d = link(f"e{i}.h2d", node.h2d_per_gpu * node.gpus, node.h2d_latency)
        own: list[Link | None] = [None] * n
        for tier in local_tiers:
            own[tier.code] = tier.read_link(self.fabric, i, sc)
        nic_in = link(f"e{i}.nic_in", node.nic_per_gpu * node.gpus, node.network_latency)
        nic_out = link(f"e{i}.nic_out", node.nic_per_gpu * node.gpus, node.network_latency)
        # one rank's own path (its NIC and its PCIe link): an unsharded GET's client
        client = link(f"e{i}.client", min(node.nic_per_gpu, node.h2d_per_gpu))
        # unsharded remote store: the issuing rank's NVLink carries the hand-off
        nvlink = None
        if self.remote is not None and self.remote.shards == 1 and node.gpus > 1:
            nvlink = Pipe(f"e{i}.nvlink", node.nvlink_per_gpu)
            self.pipes.append(nvlink)
        kind = ColocatedEngine if run.colocated else Engine  # (engine.mode)
        return kind(ctx, i, local, Links(h2d, own, nic_in, nic_out, client, d2h, nvlink))

    def _prestore(self, sc: Scenario) -> None:
        """Fill the remote store with the workload's shared prefixes, if it asks for that."""
        w = sc.workload
        if not isinstance(w, SyntheticWorkload) or not w.prestored:
            return
        assert self.remote is not None
        tenants = w.tenants.count if w.tenants is not None else 1
        blocks = prestored_blocks(w)
        keys: list[Key] = []
        for tenant in range(tenants):  # every tenant's copy: keys are namespaced
            keys += self.tenancy.keys(
                Request(
                    -1,
                    0.0,
                    len(blocks) * self.shared.run.block_tokens,
                    0,
                    tuple(blocks),
                    tenant=tenant,
                )
            )
        ctx = self.shared
        full = (
            ctx.run.block_tokens * ctx.run.kv_bytes * ctx.run.ratio[REMOTE]
        )  # as stored (its codec)
        self.remote.prestore(list(dict.fromkeys(keys)), full)
        seen = ctx.seen
        for k in keys:  # stored before: computing them is a recompute
            seen[k] = None

    # ---- what engines report ------------------------------------------------------------

    def keeps(self, job: Job) -> bool:
        """Does a finishing request keep its blocks (kvsim.sim.tenancy)?"""
        return self.tenancy.keeps(job)

    def finished(self, engine: Node, job: Job) -> None:
        """A request's first token is out: record it; a session may end here. (Co-located
        mode: its last token is out; the engine stamped its first.)"""
        if self._colocated:
            self.metrics.request(job)
            self.tenancy.session_ended(job)
            if self.cap:
                self._release()
            return
        job.served_by = engine.index
        out = self.shared.run.output_s  # the first token's way out (engine.frontend)
        job.finish = self.env._now + out
        job.frontend_s += out
        if self._record_at_finish:  # (else once its hand-off is over: kvsim.sim.handoff)
            self.metrics.request(job)
        self.tenancy.session_ended(job)
        if self.cap:
            if out > 0:  # the client has its token (and frees its slot) once it is out
                self.env.timeout(out).callbacks.append(self._released)
            else:
                self._release()

    def _released(self, _: Any) -> None:
        self._release()

    def displace(self, job: Job, engine: Node) -> None:
        """A request whose engine failed: re-route it (a fresh attempt, the time lost
        kept), or drop it, as the fault says."""
        job.lost_s += self.env._now - job.submitted
        if engine.failure_mode == "drop":
            self.drop(job, f"engine {engine.index} failed")
            return
        job.retries += 1
        job.reset()
        self._route(job)

    def engines_changed(self) -> None:
        """An engine went down or came back."""
        self.router.engines = [e for e in self.engines if e.up]

    def _route(self, job: Job) -> None:
        if not self.router.engines:
            self.drop(job, "no engine is up")
            return
        if self._note is not None:
            self._note(job.keys)
        engine = cast(Engine, self.router.pick(job.keys, job))
        engine.submit(job)

    def drop(self, job: Job, reason: str) -> None:
        """A request that will never get its first token, with the reason."""
        self.dropped += 1
        job.drop(reason)
        self.metrics.request(job)
        if self.cap:
            self._release()

    def _release(self) -> None:
        """A request in flight is out (finished or dropped): a held request may go. (The
        arrival process resumes at this time, after the events already due now.)"""
        self.in_flight -= 1
        slot = self._slot
        if slot is not None:
            self._slot = None
            slot.succeed()

    def _records(self, n: int) -> None:
        """``n`` more requests were recorded: check memory, report progress."""
        if n == 1000:
            self.check_memory()
        if self.progress is not None:
            self.progress(n)

    # ---- running ------------------------------------------------------------------------

    def _arrivals(self, requests: Iterator[Request]) -> Any:
        env = self.env
        warmup = self.warmup
        block = self.shared.run.block_tokens
        keys = self.tenancy.keys
        tiers = len(self.shared.run.tiers)
        last = 0.0
        per = self.shared.run.per_step
        capped = 0 < self.scenario.engine.long_prefill_token_threshold < self.shared.run.budget
        # a prompt over this many tokens would take more than MAX_PROMPT_STEPS steps
        most = per * MAX_PROMPT_STEPS if capped else -1
        # a prompt over this many tokens cannot fit the node's KV pool (kvsim.config.pools)
        fits = int(self.shared.run.kv_pool // self.shared.run.kv_bytes)
        # engine.mode colocated: the request's KV grows by its output (the last token's
        # KV is never computed); the job records its decode
        colocated = self.shared.run.colocated
        kind = DecodeJob if colocated else Job
        blocks = 0  # prompt blocks since the last memory check
        # cold or warm (Job.warm): sessions seen, and the first block of each prompt seen
        # (dicts of ints: the garbage collector leaves them alone, unlike sets)
        sessions: dict[int, None] = {}
        firsts: dict[Key, None] = {}
        cap = self.cap
        # behind its schedule: a request waited for a slot since the clock last waited
        # for a due time, so the requests now due are sent late (their arrival: the send)
        behind = False
        for req in requests:
            if req.arrival < last:
                raise InputError(
                    f"request {req.id}: arrival {req.arrival:g} s is before the previous "
                    f"one ({last:g} s); a workload must be sorted by time"
                )
            check_request(req, block)
            if most >= 0 and req.input_tokens > most:
                raise InputError(
                    f"request {req.id}: its {req.input_tokens:,} prompt tokens would take "
                    f"{-(-req.input_tokens // per):,} steps at {per:,} a step; at most "
                    f"{MAX_PROMPT_STEPS:,} a prompt: raise it to at least "
                    f"{-(-req.input_tokens // MAX_PROMPT_STEPS):,} (or 0: no cap)",
                    where="engine.long_prefill_token_threshold",
                )
            if req.input_tokens > fits:
                why = too_large(self.scenario, req.input_tokens)
                raise InputError(f"request {req.id}: {why}", where="workload")
            if colocated and req.input_tokens + req.output_tokens - 1 > fits:
                raise InputError(
                    f"request {req.id}: its {req.input_tokens:,} prompt and "
                    f"{req.output_tokens:,} output tokens need more KV than the node's pool "
                    f"holds ({fits:,} tokens) under engine.mode colocated",
                    where="workload",
                )
            blocks += len(req.hash_ids)
            if blocks >= GUARD_BLOCKS or not self.arrived & 1023:
                blocks = 0
                self.check_memory()
            last = req.arrival
            dt = req.arrival - env._now
            if dt > 0:
                yield env.timeout(dt)
                behind = False
            if cap:
                if self.in_flight >= cap:
                    self._held = req
                    self._slot = slot = env.event()
                    yield slot
                    self._held = None
                    behind = True
                if behind:
                    req = req._replace(arrival=env._now)
                self.in_flight += 1
            self.arrived += 1
            ks = keys(req)
            first = ks[0] if ks else None
            if req.session >= 0:  # warm: a later turn of its session
                warm = req.session in sessions
                sessions[req.session] = None
            else:  # warm: a later request on a prefix (its first block) seen before
                warm = first in firsts
            firsts[first] = None
            job = kind(req, req.arrival < warmup, ks, tiers, warm)
            self._route(job)

    def run(self) -> SimOutput:
        """Run until every request has finished (or ``run.max_time``)."""
        # a run makes millions of short-lived objects and few reference cycles: the
        # collector's default pace (every 700 allocations) costs ~5% for nothing
        thresholds = gc.get_threshold()
        if thresholds[0]:  # 0: the caller switched automatic collection off; keep it so
            gc.set_threshold(max(thresholds[0], 100_000), 20, 100)
        try:
            return self._run()
        finally:
            gc.set_threshold(*thresholds)

    def _run(self) -> SimOutput:
        env = self.env
        self._pending = iter(self.requests)
        self._arrivals_proc = env.process(self._arrivals(self._pending))
        faults.schedule(self.shared)
        if self.scenario.tenancy.ttl is not None:
            env.process(self.tenancy.sweep())
        for d in self.scenario.tenancy.deletions:
            env.process(self._delete_later(d.tenant, d.at))
        if self.scenario.tenancy.ttl is None:
            env.run(until=self.scenario.run.max_time)
        else:  # the sweeper never stops: run until the last request is out
            self._run_until_done()
        for e in self.engines:  # hand-offs still in flight at run.max_time: recorded
            if e.handoff is not None:
                e.handoff.flush()
        self.metrics.done()  # the records since the last progress report
        out = self._output()
        # the keys ever kept (recomputed_tokens) are of no use past the run, and may be
        # millions: freed now, not when the collector reaches the simulation's cycles
        self.shared.seen.clear()
        return out

    def _delete_later(self, tenant: int, at: float) -> Any:
        yield self.env.timeout(at)
        self.tenancy.delete_tenant(tenant)

    def _run_until_done(self) -> None:
        """Step the clock until every arrived request is recorded (or max_time)."""
        env = self.env
        limit = self.scenario.run.max_time
        arrivals = self._arrivals_proc
        while env.peek() != math.inf:
            if limit is not None and env.peek() > limit:
                if env._now < limit:
                    env.run(until=limit)
                return
            env.step()
            if arrivals.triggered and len(self.metrics.rows) >= self.arrived:
                return

    def _output(self) -> SimOutput:
        end = self.env._now
        engines = [
            {
                "engine": e.index,
                "served": e.served,
                "busy_s": e.busy + (e.local.writes.sm_busy if e.local.writes is not None else 0.0),
                "blocked_s": e.blocked,
                "steps": e.steps,
                "queue_area": e.queue_area + e.queued * (end - e._queue_t),
                "queued_at_end": e.queued,
                "outstanding_at_end": e.outstanding,
                **_colocated_output(e, end),
            }
            for e in self.engines
        ]
        tiers: dict[str, Any] = {}
        for tier in self.shared.run.tiers:  # each tier's own figures (kvsim.sim.tiers)
            entry = tier.summary(self.engines, self.remote)
            if entry is not None:
                tiers[tier.name] = entry
        links = {
            name: {"bytes": link.bytes, "busy_s": link.busy_time}
            for name, link in self.fabric.links.items()
        }
        for pipe in self.pipes:  # writes still queued at the end keep it busy past `end`
            late = max(pipe.free_at - end, 0.0)
            links[pipe.name] = {"bytes": pipe.bytes, "busy_s": max(pipe.busy_time - late, 0.0)}
        activity = [
            {
                "steps": e.step_spans,
                "gpu": e.gpu_spans
                + (e.local.writes.sm_spans if e.local.writes is not None else []),
                "blocked": e.blocked_spans,
                "copy": e.copy_spans,
            }
            for e in self.engines
        ]
        unfinished = self.arrived - len(self.metrics.rows)
        held = 0
        if self._held is not None:  # the clock stopped with requests waiting for a slot
            held = 1
            for req in self._pending:  # (sorted by due time)
                if req.arrival > end:
                    break
                held += 1
        t = self.tenancy
        tenancy = {
            "deletions": t.deletions,
            "ttl_retention_max_s": t.retention,
            # a scan of every store: only when there are tenants to report on
            "stored_bytes": t.stored_bytes() if t.reporting(self.metrics.rows) else {},
        }
        return SimOutput(
            self.metrics.rows,
            engines,
            tiers,
            end,
            self.arrived,
            unfinished,
            self.shared.run.steps.extrapolations,
            links,
            self.dropped,
            tenancy,
            self.shared.fault_log,
            activity,
            {
                t.name: f"{type(t).__module__}.{type(t).__qualname__}"
                for t in self.shared.run.tiers
                if type(t) not in KINDS
            },
            held,
            *_itls(self.engines),
        )


def _colocated_output(e: Engine, end: float) -> dict[str, float]:
    """An engine's co-located figures (none in prefill mode): the integral of requests on
    it over time (to the end of the run), and the bytes it swapped out and in."""
    if not isinstance(e, ColocatedEngine):
        return {}
    return {
        "resident_area": e.resident_area + e.outstanding * (end - e._res_t),
        "swapped_out_bytes": e.swapped_out_bytes,
        "swapped_in_bytes": e.swapped_in_bytes,
    }


def _itls(engines: Sequence[Engine]) -> tuple[Any, Any]:
    """Every finished request's gaps between tokens, and its id (None, None in prefill
    mode)."""
    coloc = [e for e in engines if isinstance(e, ColocatedEngine)]
    if not coloc:
        return None, None
    ids = np.fromiter((i for e in coloc for i in e.itl_ids), np.int64)
    values = np.fromiter((v for e in coloc for v in e.itl_values), np.float64)
    return ids, values
