"""The tiers local to one engine: GPU HBM -> host DRAM -> NVMe (and a user's local tier
kinds in their places: kvsim.sim.tiers), with demotion on eviction.

What this module owns: :class:`LocalCache` (an engine's local block stores in their chain,
their write policies, the writes in flight, the counters) and the tier codes (GPU, HOST,
NVME, REMOTE, PEER; a user's kinds take codes from TIERS on).

All PCP ranks of a node hold their shards of a block in lockstep, so one index per node
stands for all of them. The hierarchy is non-exclusive: a restore copies a block up and
leaves the lower copy in place. How blocks reach a lower tier is that tier's write policy
(SGLang HiCache's terms): ``write_back`` (a block evicted from the tier above is demoted
into it, refreshing it if already there), ``write_through`` (every block stored in the tier
above is written into it at once; evictions from above write nothing) or
``write_through_selective`` (a block is written into it once it has been hit
``write_threshold`` times; evictions from above write nothing). What leaves the last tier
is dropped (or, with a remote write-back policy, handed to ``leave``). Capacities are never
exceeded: each tier is a :class:`~kvsim.cache.eviction.BlockStore`. With ``writes`` set,
every block stored into host or NVMe is a write on its link
(:class:`~kvsim.cache.writes.Writes`), which may drop it when that link's queue is full.
A written block holds its room in the tier from the moment its write is queued (vLLM's
offloading manager allocates the slot in ``prepare_store``) and is readable from it only
once the write has landed (there, ``is_ready`` after ``complete_store``): ``landing``
keeps, per tier, when each write still in flight lands, and :meth:`LocalCache.in_flight`
gives the lookup those not landed yet. With ``promote``, blocks a restore read from NVMe
are also stored into host (LMCache and SGLang HiCache promote on a hit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from kvsim.cache.eviction import BlockStore, Entry, Gate, Key
from kvsim.cache.writes import Writes

# tier codes, fastest first (Final: compiled code inlines them)
GPU: Final = 0
HOST: Final = 1
NVME: Final = 2
REMOTE: Final = 3
PEER: Final = 4  # another engine's host DRAM, over both NICs (tiers.peer)
TIERS: Final = 5  # the built-in tier kinds; a user's kinds take codes 5, 6, ... (kvsim.sim.tiers)
COMPUTED: Final = -1  # the computed tokens' place in a job's per-source token counts: last

# write policies (how blocks reach a tier from the one above)
WRITE_POLICIES: Final = ("write_back", "write_through", "write_through_selective")
BACK: Final = 0
THROUGH: Final = 1
SELECTIVE: Final = 2
# why blocks arrive in a tier
BY_ADMISSION: Final = 0  # computed or restored into HBM
BY_DEMOTION: Final = 1
BY_WRITE_THROUGH: Final = 2  # written through (or selectively)
BY_PREFETCH: Final = 3  # from NVMe or remote (it crossed their links, not D2H)
BY_PROMOTION: Final = 4  # read from NVMe by a restore, kept in host (promote)


class LocalCache:
    """The local block stores of one engine, by tier code: GPU, host and NVMe (host and
    NVMe may be absent) and a user's local tier kinds, chained in their lookup order."""

    __slots__ = (
        "_low",
        "admission",
        "below",
        "chain",
        "demotions",
        "dropped_bytes",
        "fetched",
        "gpu",
        "host",
        "landing",
        "leave",
        "lower",
        "nvme",
        "policy",
        "promote",
        "promoted",
        "promoted_bytes",
        "purge_at",
        "ratio",
        "read_bytes",
        "settled",
        "threshold",
        "through",
        "tiers",
        "uses",
        "writes",
    )

    def __init__(
        self,
        gpu: BlockStore,
        host: BlockStore | None,
        nvme: BlockStore | None,
        admission: Sequence[Gate | None] = (),
        policy: Sequence[str] = (),
        threshold: Sequence[int] = (),
        writes: Writes | None = None,
        count_uses: bool = False,
        ratio: Sequence[float] = (),
        promote: bool = False,
        extra: Sequence[BlockStore | None] = (),
        chain: Sequence[int] = (),
    ) -> None:
        """``gpu``, ``host``, ``nvme``: the stores of tier codes 0, 1 and 2 (None: no
        such tier); ``extra``: those of a user's local tier kinds, by code from
        :data:`PEER` + 1 on (kvsim.sim.tiers; codes 3 and 4 are the remote store's and
        the peers', held elsewhere). ``chain``: the local tiers' codes, fastest first,
        the order blocks demote in and the lookup asks (empty: gpu, host, nvme). The
        per-tier settings are by tier code too (missing ones: admit all, write-back,
        threshold 2, no codec)."""
        self.gpu = gpu
        self.host = host
        self.nvme = nvme
        stores: list[BlockStore | None] = [gpu, host, nvme]
        if extra:
            stores += [None, None, *extra]
        self.tiers: tuple[BlockStore | None, ...] = tuple(stores)
        n = len(stores)
        # per tier: None (admit all) or a filter (second-hit, a plugin)
        self.admission: tuple[Gate | None, ...] = _pad(tuple(admission), n, None)
        # per tier: how blocks reach it from the tier above, and selective's hit threshold
        self.policy: tuple[int, ...] = _pad(tuple(WRITE_POLICIES.index(p) for p in policy), n, BACK)
        self.threshold: tuple[int, ...] = _pad(tuple(threshold), n, 2)
        # the local tiers that exist, fastest first (the demotion chain and the lookup's
        # order), and per tier: the next of them below it (-1: none)
        order = list(chain) if chain else [GPU, HOST, NVME]
        self.chain: list[int] = [t for t in order if stores[t] is not None]
        below = [-1] * n
        for i in range(len(self.chain) - 1):
            below[self.chain[i]] = self.chain[i + 1]
        self.below: tuple[int, ...] = tuple(below)
        # the lower local tiers (all but GPU) in chain order, and their stores
        self.lower: list[int] = self.chain[1:]
        self._low: list[BlockStore] = [s for t in self.lower if (s := stores[t]) is not None]
        self.writes = writes  # None: writes cost nothing and are never dropped
        # per tier: stored bytes / raw bytes (a codec); block sizes passed in and out of
        # this class are raw, each store holds its own (compressed) sizes
        self.ratio: tuple[float, ...] = _pad(tuple(ratio), n, 1.0)
        # hits per block (for selective write-through), when some policy needs them
        selective = any(p == SELECTIVE for p in self.policy)
        self.uses: dict[Key, int] | None = {} if selective or count_uses else None
        # blocks that leave the last tier (a remote write-back takes them), or None
        self.leave: Callable[[Sequence[Key], Sequence[float]], None] | None = None
        self.demotions = [0] * n  # blocks offered to each tier by demotion
        self.through = [0] * n  # blocks offered to each tier by write-through
        self.fetched = [0.0] * n  # bytes stored into each tier by prefetches
        self.dropped_bytes = [0.0] * n  # not written: the tier's write queue was full
        self.read_bytes = [0.0] * n  # bytes restored from each tier
        # per tier: key -> when its write lands, for writes that may still be in flight
        # (entries that have landed are purged lazily), and when the last one lands
        self.landing: list[dict[Key, float]] = [{} for _ in range(n)]
        self.settled = [0.0] * n
        self.purge_at = [1024] * n  # purge landed entries past this many
        # a restore's NVMe blocks are also stored into host (tiers.nvme.promote)
        self.promote = promote and host is not None and nvme is not None
        self.promoted = [0] * n  # blocks stored into each tier by promotion
        self.promoted_bytes = [0.0] * n  # of them, bytes that crossed no write link

    def prefix_blocks(self, blocks: Sequence[Key], at_least: int = 0) -> int:
        """Blocks of the longest prefix held in some local tier (for cache-aware routing);
        -1 when that prefix is shorter than ``at_least`` (known from one lookup: the prefix
        reaches ``at_least`` only if block ``at_least - 1`` is held)."""
        gpu = self.gpu.blocks
        # the lower tiers' blocks: the first two by name (the common case, and fast), any
        # more (a user's tier kinds) in a loop
        low = self._low
        n = len(low)
        a = low[0].blocks if n > 0 else _EMPTY
        b2 = low[1].blocks if n > 1 else _EMPTY
        more = n > 2
        if at_least > 0:
            if at_least > len(blocks):
                return -1
            b = blocks[at_least - 1]
            if not (b in gpu or b in a or b in b2) and not (more and _held(b, low)):
                return -1
        k = 0
        for b in blocks:
            if b in gpu or b in a or b in b2 or (more and _held(b, low)):
                k += 1
            else:
                break
        return k if k >= at_least else -1

    def admit(self, blocks: Sequence[Key], sizes: Sequence[float]) -> None:
        """Make a prompt's blocks resident in GPU HBM (refreshing them); what falls out of
        a tier (or a second-hit tier refuses) goes down as its lower tier's policy says."""
        self._arrive(GPU, blocks, sizes, BY_ADMISSION)

    def prefetched(self, blocks: Sequence[Key], sizes: Sequence[float]) -> None:
        """Blocks a prefetch brought into host memory (their links were the sources')."""
        if self.host is not None:
            self._arrive(HOST, blocks, sizes, BY_PREFETCH)

    def promoted_from_nvme(self, blocks: Sequence[Key], sizes: Sequence[float]) -> None:
        """A restore read these blocks from NVMe: keep a copy in host memory (promote).
        Through a host bounce buffer the bytes are already there (no write link);
        under GPUDirect Storage they went straight to HBM and are copied down over D2H."""
        if self.promote and blocks:
            self._arrive(HOST, blocks, sizes, BY_PROMOTION)

    def in_flight(self, level: int, now: float) -> dict[Key, float] | None:
        """Blocks of tier ``level`` whose write has not landed by ``now`` (key -> when it
        lands; a key also listed that has landed is readable), or None when every write
        into the tier has landed."""
        if now >= self.settled[level]:
            pending = self.landing[level]
            if pending:
                pending.clear()
            return None
        return self.landing[level]

    def reserve(self, nbytes: float) -> None:
        """Hold GPU HBM for blocks on their way in (a restore in flight); what it evicts
        goes down like any eviction."""
        self._fall(GPU, *self.gpu.reserve(nbytes))

    def hit(self, blocks: Sequence[Key], src: Sequence[int]) -> None:
        """A request uses the first ``len(src)`` of its blocks from tiers ``src``: count
        the uses; a block hit ``write_threshold`` times is written into a selective tier
        below the one holding it."""
        uses = self.uses
        if uses is None:
            return
        tiers, below, policy = self.tiers, self.below, self.policy
        n_tiers = len(tiers)
        for key, t in zip(blocks, src):
            n = uses[key] = uses.get(key, 0) + 1
            if t >= n_tiers or tiers[t] is None:  # not a local tier (remote, peer)
                continue
            lower = below[t]
            if lower < 0 or policy[lower] != SELECTIVE or n < self.threshold[lower]:
                continue
            store, dest = tiers[t], tiers[lower]
            if store is not None and dest is not None and key not in dest.blocks:
                raw = store.blocks[key].size / self.ratio[t]
                self._arrive(lower, (key,), (raw,), BY_WRITE_THROUGH)

    def _arrive(self, level: int, keys: Sequence[Key], sizes: Sequence[float], cause: int) -> None:
        """Blocks stored into tier ``level`` (``cause``: admitted to HBM, demoted, written
        through, prefetched): its admission filter, its write link, its evictions."""
        store = self.tiers[level]
        assert store is not None
        gate = self.admission[level]
        refused_k: list[Key] = []
        refused_s: list[float] = []
        if gate is not None:
            keys, sizes, refused_k, refused_s = gate.filter(keys, sizes, store.blocks)
        writes = self.writes
        # blocks that cross a write link on their way in (prefetches crossed the sources'
        # links; a promotion through a host bounce buffer is already in host memory)
        linked = cause != BY_PREFETCH and not (
            cause == BY_PROMOTION and (writes is None or not writes.gds)
        )
        if writes is not None and writes.drops[level] and linked and not writes.room(level):
            held = store.blocks  # a full write queue: only refreshes go through
            kept_k, kept_s = [], []
            for k, sz in zip(keys, sizes):
                if k in held:
                    kept_k.append(k)
                    kept_s.append(sz)
                else:
                    writes.dropped[level] += 1
                    self.dropped_bytes[level] += sz * self.ratio[level]
            keys, sizes = kept_k, kept_s
        if cause == BY_DEMOTION:
            self.demotions[level] += len(keys)
        elif cause == BY_WRITE_THROUGH:
            self.through[level] += len(keys)
        raw = sizes
        r = self.ratio[level]
        if r != 1.0:  # the tier's codec: it stores (and its links move) fewer bytes
            sizes = [x * r for x in sizes]
        before = store.written
        fresh: list[Key] = []
        staged = linked and writes is not None and level != GPU and writes.staged[level]
        if staged:
            held = store.blocks  # blocks new to the tier: readable once their write lands
            fresh = [k for k in keys if k not in held]
        out_k, out_s = store.insert_many(keys, sizes)
        if r != 1.0:
            out_s = [x / r for x in out_s]
        if cause == BY_PROMOTION:
            self.promoted[level] += len(keys)
        if not linked and self.landing[level]:  # their bytes are in: readable at once
            pending = self.landing[level]
            for k in keys:
                pending.pop(k, None)
        if store.written > before and level != GPU:
            if cause == BY_PREFETCH:
                self.fetched[level] += store.written - before
            elif not linked:
                self.promoted_bytes[level] += store.written - before
            elif writes is not None:
                lands = writes.write(level, store.written - before)
                if staged:
                    self._landing(level, fresh, lands)
        lower = self.below[level]
        if lower >= 0 and self.policy[lower] == THROUGH and keys:
            self._arrive(lower, keys, raw, BY_WRITE_THROUGH)
        if refused_k:
            out_k, out_s = [*refused_k, *out_k], [*refused_s, *out_s]
        self._fall(level, out_k, out_s)

    def _landing(self, level: int, keys: list[Key], lands: float) -> None:
        """Blocks whose write into tier ``level`` lands at ``lands`` (unreadable until
        then). Entries that have landed are purged when they pile up (amortised O(1))."""
        if lands > self.settled[level]:
            self.settled[level] = lands
        pending = self.landing[level]
        for k in keys:
            pending[k] = lands
        if len(pending) > self.purge_at[level]:
            assert self.writes is not None
            now = self.writes.clock()
            kept = {k: t for k, t in pending.items() if t > now}
            self.landing[level] = kept
            self.purge_at[level] = 2 * len(kept) + 1024

    def _fall(self, level: int, keys: Sequence[Key], sizes: Sequence[float]) -> None:
        """Blocks leaving tier ``level`` (evicted, refused, or too big for it): demoted into
        the tier below when it is write-back; otherwise (its copy, if any, was written
        before) gone; out of the last tier, to ``leave``."""
        if not keys:
            return
        lower = self.below[level]
        if lower < 0:
            if self.leave is not None:
                self.leave(keys, sizes)
            return
        if self.policy[lower] == BACK:
            self._arrive(lower, keys, sizes, BY_DEMOTION)


# the blocks of a tier an engine lacks (never written)
_EMPTY: Final[dict[Key, Entry]] = {}


def _held(b: Key, low: list[BlockStore]) -> bool:
    """Whether block ``b`` is in one of the stores ``low`` past the first two."""
    return any(b in low[i].blocks for i in range(2, len(low)))


def _pad(values: tuple, n: int, fill: object) -> tuple:
    """``values`` (per tier code) padded with ``fill`` to ``n`` tiers."""
    return values + (fill,) * (n - len(values)) if len(values) < n else values[:n]
