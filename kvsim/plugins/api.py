"""What a policy is and what it sees: the six policy interfaces and the read-only views.

This module owns the classes plugin authors subclass (:class:`EvictionPolicy`,
:class:`AdmissionPolicy`, :class:`RoutingPolicy`, :class:`SchedulingPolicy`,
:class:`LoadPolicy`, :class:`PrefetchPolicy`, all on :class:`Policy`), ``INTERFACES``
(each kind's interface), and the views a policy is given (:class:`Block`,
:class:`RequestView`, :class:`TierView`, :class:`EngineView`, :class:`SimView`). It
imports nothing of kvsim: the compiled core calls policies through these interfaces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, NamedTuple

# ---- what policies see -------------------------------------------------------------------


class Block(NamedTuple):
    """One block as an eviction or admission policy sees it."""

    key: Any  # the store's key (an int)
    nbytes: float  # bytes it holds in this store (after the tier's codec)
    depth: int  # its place in its prompt's block chain (0: the first block; -1: unknown)
    # prefill seconds one full block at this depth costs a lone request (NaN: unknown)
    recompute_s: float
    parent: Any  # the store's key of the block before it in its chain (None at depth 0)
    tenant: int  # its tenant (-1: none, or a public prefix)
    now: float  # simulated time of the call (s)


class RequestView:
    """A request, read-only: what routers, schedulers, load and prefetch policies see."""

    __slots__ = ("_job",)

    def __init__(self, job: Any) -> None:
        self._job = job

    @property
    def id(self) -> int:
        return int(self._job.req.id)

    @property
    def arrival(self) -> float:
        """Arrival time (s)."""
        return float(self._job.req.arrival)

    @property
    def prompt_tokens(self) -> int:
        return int(self._job.req.input_tokens)

    @property
    def output_tokens(self) -> int:
        return int(self._job.req.output_tokens)

    @property
    def tenant(self) -> int:
        return int(self._job.req.tenant)

    @property
    def session(self) -> int:
        """Session id (-1: none)."""
        s = getattr(self._job.req, "session", None)
        return -1 if s is None else int(s)

    @property
    def blocks(self) -> tuple[Any, ...]:
        """The cache keys of its prompt's blocks, in prefix order."""
        return tuple(self._job.keys)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens its engine's lookup found cached. Schedulers see it after a
        lookup (a side-effect-free one while a request waits for its first); routers see
        0 for a new request (it has not reached an engine)."""
        return int(self._job.cached)

    @property
    def remaining_tokens(self) -> int:
        """Prompt tokens still to compute."""
        j = self._job
        return int(j.req.input_tokens - j.cached - j.done)

    def __repr__(self) -> str:
        return f"RequestView(id={self.id}, prompt_tokens={self.prompt_tokens})"


class TierView:
    """One block store (a tier of one engine, or one remote server), read-only."""

    __slots__ = ("_store", "name")

    def __init__(self, store: Any, name: str) -> None:
        self._store = store
        self.name = name  # gpu | host | nvme | remote

    @property
    def capacity(self) -> float:
        """Bytes it may hold."""
        return float(self._store.capacity)

    @property
    def used(self) -> float:
        """Bytes held now."""
        return float(self._store.used)

    @property
    def reserved(self) -> float:
        """Bytes held back from the tier: for the GPU tier, what the working KV (running
        requests and restores in flight) takes of the prefix cache's room."""
        return float(self._store.reserved)

    def __len__(self) -> int:
        return len(self._store.blocks)

    def __contains__(self, key: Any) -> bool:
        return key in self._store.blocks

    def __iter__(self) -> Iterator[Any]:
        """Resident keys, in the order they were stored."""
        return iter(self._store.blocks)

    def nbytes(self, key: Any) -> float:
        """Bytes a resident block holds (KeyError if it is not resident)."""
        return float(self._store.blocks[key].size)

    def __repr__(self) -> str:
        return f"TierView({self.name}, {len(self)} blocks, {self.used:.4g}/{self.capacity:.4g} B)"


class EngineView:
    """One prefill engine, read-only and live: its load and its local tiers."""

    __slots__ = ("_engine", "_tiers")

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        names = engine.ctx.run.names  # the run's tier names by code (kvsim.sim.tiers)
        self._tiers = {
            names[t]: TierView(s, names[t])
            for t, s in enumerate(engine.local.tiers)
            if s is not None  # (an empty store is falsy)
        }

    @property
    def index(self) -> int:
        return int(self._engine.index)

    @property
    def up(self) -> bool:
        return bool(self._engine.up)

    @property
    def outstanding(self) -> int:
        """Requests routed here and not finished (queued, loading or computing)."""
        return int(self._engine.outstanding)

    @property
    def queued(self) -> int:
        """Requests waiting for a step."""
        return int(self._engine.queued)

    @property
    def queued_tokens(self) -> int:
        """Prompt tokens still to compute of the waiting requests."""
        e = self._engine
        return sum(j.req.input_tokens - j.cached - j.done for j in e.waiting.jobs())

    @property
    def running(self) -> int:
        """Requests computing (picked for a step, chunks left)."""
        return len(self._engine.running)

    @property
    def tiers(self) -> dict[str, TierView]:
        """Its local tiers by name (gpu, host, nvme; those enabled)."""
        return self._tiers

    def prefix_blocks(self, request: RequestView | Sequence[Any]) -> int:
        """Blocks of the longest prefix of a request (or a key chain) held in its tiers."""
        keys = request.blocks if isinstance(request, RequestView) else request
        return int(self._engine.local.prefix_blocks(keys))

    def __repr__(self) -> str:
        return f"EngineView({self.index}, outstanding={self.outstanding})"


class SimView:
    """The simulation as every policy may see it (given once, to :meth:`Policy.setup`)."""

    def __init__(
        self,
        clock: Callable[[], float],
        engines: list[EngineView],
        remote: Any,
        block_tokens: int,
        block_bytes: float,
        recompute: Callable[[int], float],
    ) -> None:
        self._clock = clock
        self.engines = engines  # every engine, up or not
        self._remote = remote
        self.block_tokens = block_tokens
        self.block_bytes = block_bytes  # bytes of a full block's KV (raw)
        self._recompute = recompute

    @property
    def now(self) -> float:
        """Simulated time (s)."""
        return self._clock()

    def remote_holds(self, key: Any) -> bool:
        """Is the block (a request cache key) usable from the remote store now?"""
        return self._remote is not None and bool(self._remote.has(key))

    def remote_prefix_blocks(self, request: RequestView | Sequence[Any]) -> int:
        """Blocks of the longest prefix of a request (or a key chain) in the remote store."""
        if self._remote is None:
            return 0
        keys = request.blocks if isinstance(request, RequestView) else request
        n = 0
        for k in keys:
            if not self._remote.has(k):
                break
            n += 1
        return n

    def recompute_s(self, depth: int) -> float:
        """Seconds of prefill one full block at ``depth`` costs a lone request."""
        return self._recompute(depth)


# ---- the interfaces ----------------------------------------------------------------------


class Policy:
    """Base of every plugin policy. One instance is made per use (per store for eviction
    and admission, per engine for scheduling, one per simulation otherwise), with the
    scenario's ``params`` as keyword arguments (``{name: NAME, params: {...}}``; none for
    a bare name), checked against ``__init__``'s annotations; ``setup`` is then called
    once with the :class:`SimView`."""

    kind: ClassVar[str] = ""
    required: ClassVar[tuple[str, ...]] = ()

    def setup(self, sim: SimView) -> None:
        """Called once before the run (keep ``sim`` to look at the clock or the engines)."""


class EvictionPolicy(Policy):
    """Which resident block of a store goes first when room is needed (per tier:
    ``tiers.<tier>.eviction``, ``remote.eviction``). The store tells it what comes and
    goes (:meth:`inserted`, :meth:`hit`, :meth:`refreshed`, :meth:`removed`); it answers
    :meth:`victim`.

    Events reach the policy in the order they happened, each before the next
    :meth:`victim` call; those of one store operation (a lookup's hits, a request's
    blocks stored) are told at its end, a run of one kind at a time. A policy may also
    define the batch methods ``inserted_many(blocks)``, ``hit_many(blocks)``,
    ``refreshed_many(blocks)`` (a list of :class:`Block`) and ``removed_many(keys,
    reason)``: kvsim then calls one per run instead of the one-block method per block
    (the same events, fewer interpreted calls). docs/extending.md gives the order of
    events along a request's chain of blocks."""

    kind = "eviction"
    required = ("victim|evict",)

    def inserted(self, block: Block) -> None:
        """A block was stored (it was not held)."""

    def hit(self, block: Block) -> None:
        """A resident block was found by a lookup (a hit in this store)."""

    def refreshed(self, block: Block) -> None:
        """A resident block was stored again: its prompt's blocks admitted after a
        prefill, a demotion or write-through into a tier that still holds it."""

    def removed(self, key: Any, reason: str) -> None:
        """A block left the store: ``reason`` is ``evicted`` (this policy's victim, to
        make room), ``deleted`` (its tenant or session deleted, or the store emptied by a
        failure) or ``expired`` (the tenant's TTL). A ``removed(self, key)`` written
        before reasons existed is still called, without the reason."""

    def victim(self, tier: TierView) -> Any:
        """The key of a resident block to evict now (the policy then hears it
        ``removed``). A policy may define ``evict(tier)`` instead: the key of the block
        to evict, which it forgets itself, so kvsim does not tell it the removal (one
        interpreted call less per eviction)."""
        raise NotImplementedError


class AdmissionPolicy(Policy):
    """Whether a block offered to a tier is stored there (``tiers.<tier>.admission``,
    ``remote.admission``); a refused block goes on down as an evicted one would."""

    kind = "admission"
    required = ("admit",)

    def admit(self, block: Block, tier: TierView) -> bool:
        raise NotImplementedError


class RoutingPolicy(Policy):
    """Which engine a new request joins (``cluster.router``)."""

    kind = "router"
    required = ("route",)

    def route(self, request: RequestView, engines: list[EngineView]) -> EngineView | int:
        """One of ``engines`` (those up), or its index."""
        raise NotImplementedError


class SchedulingPolicy(Policy):
    """The order of an engine's waiting queue (``engine.scheduler``): a request's
    priority is computed when it joins the queue, after a lookup under every load
    policy (a request not looked up yet is looked up without side effects first, so
    ``request.cached_tokens`` is what its engine's tiers hold of its prefix now);
    smaller goes first, ties in arrival order. Requests already computing keep their
    place, as under fcfs. ``dynamic``: every waiting request's priority is computed
    again at each pick (after a fresh lookup for those not looked up yet; a request back
    from an asynchronous restore keeps the tokens it restored), at one call per waiting
    request per pick."""

    kind = "scheduler"
    required = ("priority",)
    dynamic: ClassVar[bool] = False

    def priority(self, request: RequestView, engine: EngineView) -> float:
        raise NotImplementedError


class LoadPolicy(Policy):
    """How much of an available hit to restore (``cluster.load_policy``). ``sources``
    names the tier of each block of the usable prefix (gpu, host, nvme, remote);
    ``estimate(k)`` is the live estimate (s) of restoring the first ``k`` and computing
    the rest. ``blocking``: the engine waits for the restore (as sync) or serves others
    (as async); ``lower_tiers``: look below GPU at all."""

    kind = "load_policy"
    required = ("restore_blocks",)
    blocking: ClassVar[bool] = True
    lower_tiers: ClassVar[bool] = True

    def restore_blocks(
        self, request: RequestView, sources: list[str], estimate: Callable[[int], float]
    ) -> int:
        raise NotImplementedError


class PrefetchPolicy(Policy):
    """Which of a request's NVMe and remote blocks are fetched into host memory when it
    reaches its engine (``prefetch.policy``). ``wait``: the request stays out of the queue
    until its prefetch is in (as wait_complete); otherwise it stops when the request is
    picked (as best_effort)."""

    kind = "prefetch"
    required = ("fetch_blocks",)
    wait: ClassVar[bool] = False

    def fetch_blocks(self, request: RequestView, sources: list[str]) -> int:
        """How many of the first blocks of the usable prefix to fetch (those in NVMe or
        remote are moved; ``sources`` names each block's tier)."""
        raise NotImplementedError


INTERFACES: dict[str, type[Policy]] = {
    c.kind: c
    for c in (
        EvictionPolicy,
        AdmissionPolicy,
        RoutingPolicy,
        SchedulingPolicy,
        LoadPolicy,
        PrefetchPolicy,
    )
}
