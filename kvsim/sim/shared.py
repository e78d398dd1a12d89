"""What the engines, the tenancy rules and the faults share while a simulation runs.

What this module owns: :class:`Shared` (the clock, the fabric, the engines, the remote
store and its GET/put physics, the decode pool's link, the policies, the stall draws, the
blocks seen, the metrics collector and the listener) and :class:`Listener`, what the
engines report back (a request finished, a request lost its engine, whether a finished
request's blocks are kept, the engines up changed). The run's constants are
:class:`~kvsim.sim.constants.Constants` (``Shared.run``). The
:class:`~kvsim.sim.simulation.Simulation` builds everything first
(the remote store included) and hands it in whole; it is the listener. The engine,
tenancy and fault modules import this module, never the simulation, so the dependency
runs one way: simulation -> engine, tenancy, faults -> shared -> node.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import simpy

from kvsim.cache.eviction import Gate, Key
from kvsim.cache.local import REMOTE
from kvsim.cache.remote import RemoteStore
from kvsim.kernel.fabric import Fabric, Link
from kvsim.physics.client import Client, client_rate, put_rate
from kvsim.rng import stream
from kvsim.sim.constants import Constants, head_share
from kvsim.sim.hooks import Hooks, PrefetchHook
from kvsim.sim.job import Job
from kvsim.sim.metrics import Metrics
from kvsim.sim.node import Node
from kvsim.sim.policy import LoadPolicy
from kvsim.workload.request import Request


class Listener:
    """What the engines report to the simulation (it implements these)."""

    def finished(self, engine: Node, job: Job) -> None:
        """A request's first token is out."""
        raise NotImplementedError

    def displace(self, job: Job, engine: Node) -> None:
        """A request whose engine failed under it."""
        raise NotImplementedError

    def keeps(self, job: Job) -> bool:
        """Whether a finished request's blocks are kept (its tenant may be gone)."""
        raise NotImplementedError

    def engines_changed(self) -> None:
        """An engine went down or came back."""
        raise NotImplementedError


class Shared:
    """The pieces of one simulation that its parts share (see the module docstring)."""

    def __init__(
        self,
        run: Constants,
        env: simpy.Environment,
        fabric: Fabric,
        hooks: Hooks,
        policy: LoadPolicy,
        prefetch_hook: PrefetchHook | None,
        engines: list[Node],
        listener: Listener,
        metrics: Metrics,
        remote: RemoteStore | None = None,
        remote_admission: Gate | None = None,
        decode: Link | None = None,
    ) -> None:
        """``decode``: the decode pool's receive link, which every engine's P/D hand-offs
        cross (cluster.handoff; None: off)."""
        sc = run.scenario
        self.run = run
        self.env = env
        self.fabric = fabric
        # the engines, by index (the simulation adds them as it builds them)
        self.engines = engines
        self.listener = listener
        # every policy the scenario names, built-in or a plugin's (kvsim.sim.hooks)
        self.hooks = hooks
        self.policy = policy  # the load policy (what a request restores)
        pf = sc.prefetch
        # a plugin's prefetch policy (None: a built-in one)
        self.prefetch_hook = prefetch_hook
        self.prefetch_waits: bool = pf.policy.name in ("wait_complete", "timeout") or (
            self.prefetch_hook is not None and self.prefetch_hook.wait
        )
        self.remote = remote
        self.remote_admission = remote_admission
        self.decode = decode
        # the GET's client cap (bytes/s of the whole GET: its clients together)
        # (kvsim.physics.client); a put's, when the connections have a rate of their own
        # (an object store), else None: uncapped (kvsim.physics.client.put_rate)
        self.client_cap: float = math.inf
        self.put_cap: float | None = None
        self._op_stored = 1.0  # bytes one operation moves, as stored (its codec)
        self._op_factor = 0.0
        self._op_bytes = 1.0
        self.stage_share: float = 1.0  # part of a staging copy rank 0's D2H link carries
        if remote is not None:
            self._remote_physics(remote)
        self._stall_rng = stream(sc.seed, "stalls")
        self.stall_override: tuple[float, float, str] | None = None  # a stall burst
        self.fault_log: list[dict[str, Any]] = []
        # keys of blocks ever computed and kept, or prestored: recomputed_tokens (a dict of
        # int keys, not a set: the garbage collector leaves such a dict alone, while it
        # would walk a set of a million keys at every full collection); kept only where a
        # block can be cached at all (Constants.track_seen)
        self.seen: dict[Key, None] = {}
        # the run's metrics collector: the requests' records, and block events for its
        # listeners (the access log, run --record-accesses): the engines test
        # ``metrics.blocks`` once per lookup, reservation and admission
        self.metrics = metrics

    def _remote_physics(self, remote: RemoteStore) -> None:
        """The remote store's operations and its clients' caps, once per run."""
        run = self.run
        rc = run.scenario.remote
        self._op_bytes = rc.chunk_tokens * run.kv_bytes / remote.shards
        self._op_factor = rc.op_overhead * rc.bandwidth
        # the part of a staged block rank 0 copies on its own GPU-to-host link: its
        # shard of the tokens (per-rank sharding: 1/shards; unsharded: one rank saves
        # every token, LMCache's MLA default) times its share of the heads
        # (:func:`head_share`: 1/tp of a GQA/MHA model's KV heads, whole for MLA)
        self.stage_share = head_share(run.scenario) / remote.shards
        # what the GET's clients can pull, equation (2) of kvsim.physics.client: one
        # rank's client unsharded (whole chunks), every rank's own per rank (its shard
        # of each chunk), once per run; the server's part stays on the fabric
        client = Client.of(rc.client)
        if run.remote_gpudirect:  # RDMA into HBM: no receive copy on the rank
            client = replace(client, copy_bandwidth=math.inf)
        stored = self._op_bytes * run.tiers[REMOTE].ratio  # bytes one operation moves (its codec)
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
        run = self.run
        block_tokens = run.block_tokens
        kv_bytes = run.kv_bytes
        full = block_tokens * kv_bytes
        sizes = [full] * len(req.hash_ids)
        sizes[-1] = (req.input_tokens - (len(sizes) - 1) * block_tokens) * kv_bytes
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
        size = 0.0
        for _, b, _ in parts:  # (a loop: max() over a generator is a slow call compiled)
            if b > size:
                size = b
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
        st = self.run.scenario.remote.stall
        p, duration, dist = self.stall_override or (st.probability, st.duration, st.distribution)
        if p <= 0 or self._stall_rng.random() >= p:
            return 0.0
        if dist == "fixed":
            return duration
        return float(self._stall_rng.exponential(duration))
