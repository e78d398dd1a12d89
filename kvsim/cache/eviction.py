"""Block stores with a pluggable eviction policy: the capacity bookkeeping of every tier.

A store maps block keys to what it holds of them and never holds more than its capacity:
:meth:`BlockStore.insert_many` makes room first and returns what it pushed out (or a new
block that can never fit), so the caller can demote it to the next tier. The
policies differ only in which block goes first. ``POLICIES`` is the one place that maps
scenario names to classes. The built-in admission gates (:class:`Gate`,
:class:`SecondHit`) are here too; a store and a gate that a plugin policy drives are
:mod:`kvsim.cache.delegated`.

Each held block is an :class:`Entry` (its key and bytes), and the eviction order is a log
of entries, not a linked list: ``order`` lists every use of a block (its insertion, and
under LRU each refresh), oldest first, and a block's live position is its last use. An
entry counts its uses still in the log (``uses``), so the oldest block is the first entry
read off the head whose count drops to zero. A use is one dictionary lookup and an
append; an eviction reads the head of a list and deletes one key: plain ``list``
operations and attribute reads, where an ``OrderedDict`` costs about 650 instructions an
operation (the stores are the hottest code of a replay; benchmarks/README.md). The log is
rebuilt from its live entries when the stale ones outnumber them by more than 1,024. An
evicted entry is referred to by nothing else, so the store keeps it on a stack
(``spare``) and reuses it for the next new block instead of allocating one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Container, Iterator, Sequence
from typing import Any, cast

# A block's cache key: an int (a tenant-namespaced hash id, or a server's shard key). It
# is typed ``object`` on purpose: compiled code (see setup.py) then stores the caller's
# int objects as they are, where ``int`` would unbox and re-box them, a new object per
# stored block.
Key = object
Evicted = list[tuple[Key, float]]  # (key, bytes) pairs
Spilled = tuple[list[Key], list[float]]  # keys and their bytes, in eviction order


class Entry:
    """A held block: its key, its bytes, and its uses still in the store's log (the last
    one is its place in the eviction order). ``live`` turns False when it is removed
    while uses of it are still in the log."""

    __slots__ = ("key", "live", "size", "uses")

    def __init__(self, key: Key, size: float) -> None:
        self.key = key
        self.size = size
        self.uses = 1
        self.live = True


class Rules:
    """Per-tenant bookkeeping a store keeps only when a scenario asks for it: a quota of
    bytes per tenant (a tenant over it evicts its own oldest blocks first), and the time
    of each block's last use (for TTL deletion). ``tenant_of(key)`` is -1 for blocks that
    belong to no tenant (a public prefix), which no quota counts."""

    __slots__ = ("clock", "order", "peak", "quota", "stamps", "tenant_of", "used")

    def __init__(
        self,
        tenant_of: Callable[[Key], int],
        quota: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.tenant_of = tenant_of
        self.quota = quota
        self.clock = clock
        self.used: dict[int, float] = {}  # tenant -> bytes held
        self.peak: dict[int, float] = {}  # tenant -> most bytes ever held
        self.order: dict[int, OrderedDict[Key, None]] = {}  # tenant -> its keys, oldest first
        self.stamps: dict[Key, float] = {}  # key -> last use (with a clock)

    def shifted(self, offset: int) -> Rules:
        """A copy for a store whose keys are these keys + ``offset`` (a mirrored server)."""
        out = Rules(self.tenant_of, self.quota, self.clock)
        out.used = dict(self.used)
        out.peak = dict(self.peak)
        out.order = {
            t: OrderedDict((cast(int, k) + offset, None) for k in o) for t, o in self.order.items()
        }
        out.stamps = {cast(int, k) + offset: v for k, v in self.stamps.items()}
        return out


class BlockStore:
    """Capacity-bounded map of block key -> :class:`Entry`, evicting oldest first.

    ``refresh_on_hit`` says whether a use moves a block to the back of the line (LRU) or
    not (FIFO). Invariant: ``used`` (the sum of held sizes) never exceeds ``capacity``;
    an entry appears ``uses`` times in ``order[head:]``, and a held block's entry is live
    with ``uses >= 1``.
    """

    __slots__ = (
        "blocks",
        "capacity",
        "evictions",
        "head",
        "order",
        "peak",
        "reserved",
        "rules",
        "spare",
        "spares",
        "used",
        "watch",
        "written",
    )
    refresh_on_hit = True

    def __init__(self, capacity: float) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = float(capacity)
        self.used = 0.0
        self.reserved = 0.0  # held for blocks on their way in (restores in flight)
        self.written = 0.0  # bytes of blocks stored (not refreshes, not refused as too big)
        self.peak = 0.0
        self.evictions = 0
        # key -> its entry, in the order first stored; read-only outside this class
        self.blocks: dict[Key, Entry] = {}
        self.order: list[Entry] = []  # uses from index ``head`` on, oldest first
        self.head = 0
        # evicted entries, reused for new blocks: a stack, the first ``spares`` of ``spare``
        self.spare: list[Entry] = []
        self.spares = 0
        self.rules: Rules | None = None
        # None, or what hears every event of this store (kvsim.results.accesses): its
        # hit(store, keys), stored(store, keys, sizes, held) and removed(store, keys,
        # sizes, reason); the stores call it from the _watched_* methods below only, so an
        # unwatched store pays one attribute test per call
        self.watch: Any = None

    def __contains__(self, key: Key) -> bool:
        return key in self.blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __iter__(self) -> Iterator[Key]:
        """Held keys, the next to be evicted first (as :meth:`keys`)."""
        return iter(self.keys())

    def size(self, key: Key) -> float:
        """Bytes held of a block (KeyError when it is not held)."""
        return self.blocks[key].size

    def sizes(self) -> dict[Key, float]:
        """Held key -> bytes, in the order first stored."""
        return {k: e.size for k, e in self.blocks.items()}

    def _live(self) -> list[Entry]:
        """Held entries, the next to be evicted first (each at its last use)."""
        order = self.order
        out: list[Entry] = []
        for i in range(self.head, len(order)):  # count each entry's uses down ...
            e = order[i]
            e.uses -= 1
            if not e.uses and e.live:
                out.append(e)
        for i in range(self.head, len(order)):  # ... and back up
            order[i].uses += 1
        return out

    def keys(self) -> list[Key]:
        """Held keys, the next to be evicted first."""
        return [e.key for e in self._live()]

    def _pop_oldest(self) -> Entry:
        """Take the oldest live entry off ``order`` and return it (still held: the caller
        removes it). Stale uses on the way are dropped."""
        order = self.order
        head = self.head
        while True:
            e = order[head]
            head += 1
            e.uses -= 1
            if not e.uses and e.live:
                break
        self.head = head
        return e

    def _tidy(self) -> None:
        """Keep ``order`` short: drop what was read off its head, or, when stale uses
        outnumber the live ones, rebuild it from the live ones (amortised O(1) a use)."""
        order = self.order
        if len(order) - self.head > 2 * len(self.blocks) + 1024:
            live = self._live()
            for e in live:
                e.uses = 1
            self.order = live
            self.head = 0
        elif self.head > 1024 and 2 * self.head > len(order):
            del order[: self.head]
            self.head = 0

    def touch(self, keys: Sequence[Key]) -> None:
        """Record a use of blocks that are present (lookup hits), in order."""
        if self.watch is not None:
            self.watch.hit(self, keys)
        rules = self.rules
        refresh = self.refresh_on_hit
        blocks, order = self.blocks, self.order
        if rules is None:
            if refresh:
                for key in keys:
                    e = blocks.get(key)
                    if e is not None:
                        e.uses += 1
                        order.append(e)
                self._tidy()
            return
        now = rules.clock() if rules.clock is not None else None
        for key in keys:
            e = blocks.get(key)
            if e is None:
                continue
            if refresh:
                e.uses += 1
                order.append(e)
                t = rules.tenant_of(key)
                if t in rules.order:
                    rules.order[t].move_to_end(key)
            if now is not None:
                rules.stamps[key] = now
        self._tidy()

    def insert(self, key: Key, nbytes: float) -> Evicted:
        """Store a block (or refresh it) and return the blocks evicted to make room."""
        keys, sizes = self.insert_many((key,), (nbytes,))
        return list(zip(keys, sizes, strict=True))

    def insert_many(self, keys: Sequence[Key], sizes: Sequence[float]) -> Spilled:
        """Insert blocks in order (refreshing present ones); return everything evicted on
        the way, including a block that can never fit, as (keys, sizes) in eviction order.
        A block inserted early in the call may be evicted by a later one when the store is
        small."""
        if len(keys) != len(sizes):
            raise ValueError(f"{len(keys)} keys but {len(sizes)} sizes")
        if self.watch is not None:
            return self._watched_insert(keys, sizes)
        if self.rules is not None:
            return self._insert_ruled(keys, sizes)
        # the hottest loop of a simulation: counters kept local, eviction inlined
        blocks, order = self.blocks, self.order
        refresh = self.refresh_on_hit
        cap = self.capacity - self.reserved
        used = self.used
        peak = self.peak
        head = self.head
        spare, spares = self.spare, self.spares
        out_keys: list[Key] = []
        out_sizes: list[float] = []
        unfit = 0
        written = 0.0
        for key, nbytes in zip(keys, sizes):  # lengths checked above
            if nbytes <= cap:
                if spares:  # the top evicted entry, reused: no allocation
                    e = spare[spares - 1]
                    e.key, e.size, e.uses = key, nbytes, 1
                else:
                    e = Entry(key, nbytes)
                got = blocks.setdefault(key, e)  # one lookup: stored unless already held
                if got is not e:
                    e = got  # held already (a spare entry taken stays on the stack)
                else:  # a new block: make room behind it
                    if spares:
                        spares -= 1
                    order.append(e)
                    used += nbytes
                    written += nbytes
                    while used > cap and len(blocks) > 1:  # never the new block: it is last
                        while True:  # the oldest live entry
                            v = order[head]
                            head += 1
                            v.uses -= 1
                            if not v.uses and v.live:
                                break
                        del blocks[v.key]
                        used -= v.size
                        out_keys.append(v.key)
                        out_sizes.append(v.size)
                        if spares < len(spare):  # nothing else refers to it any more
                            spare[spares] = v
                        else:
                            spare.append(v)
                        spares += 1
                    if used > peak:
                        peak = used
                    continue
            else:
                held = blocks.get(key)
                if held is None:  # it can never fit
                    out_keys.append(key)
                    out_sizes.append(nbytes)
                    unfit += 1
                    continue
                e = held
            if refresh:  # a held block, used again
                e.uses += 1
                order.append(e)
        self.head = head
        self.spares = spares
        self.used = used
        self.peak = peak
        self.written += written
        self.evictions += len(out_keys) - unfit
        self._tidy()
        return out_keys, out_sizes

    def _insert_ruled(self, keys: Sequence[Key], sizes: Sequence[float]) -> Spilled:
        """insert_many with per-tenant quotas and use stamps."""
        rules = self.rules
        assert rules is not None
        blocks, cap, quota = self.blocks, self.capacity - self.reserved, rules.quota
        now = rules.clock() if rules.clock is not None else None
        evicted: Evicted = []
        for key, nbytes in zip(keys, sizes, strict=True):
            if key in blocks:
                self.touch((key,))
                continue
            t = rules.tenant_of(key)
            limit = quota if t >= 0 else None  # public blocks count against no quota
            if nbytes > cap or (limit is not None and nbytes > limit):
                evicted.append((key, nbytes))
                continue
            if limit is not None:  # the tenant makes room among its own blocks first
                mine = rules.order.get(t)
                while rules.used.get(t, 0.0) + nbytes > limit and mine:
                    victim = next(iter(mine))
                    evicted.append((victim, self._drop(victim)))
                    self.evictions += 1
            while self.used + nbytes > cap and blocks:
                v = self._pop_oldest()
                evicted.append((v.key, self._drop(v.key)))
                self.evictions += 1
            e = blocks[key] = Entry(key, nbytes)
            self.order.append(e)
            self.used += nbytes
            self.written += nbytes
            held = rules.used[t] = rules.used.get(t, 0.0) + nbytes
            if held > rules.peak.get(t, 0.0):
                rules.peak[t] = held
            rules.order.setdefault(t, OrderedDict())[key] = None
            if now is not None:
                rules.stamps[key] = now
            if self.used > self.peak:
                self.peak = self.used
        self._tidy()
        return [k for k, _ in evicted], [size for _, size in evicted]

    def reserve(self, nbytes: float) -> Spilled:
        """Hold ``nbytes`` for blocks on their way in, evicting (oldest first) what no
        longer fits; return what was evicted. A reservation larger than what is free of
        other reservations takes everything there is (the caller admits one at a time)."""
        if self.watch is not None:
            return self._watched_reserve(nbytes)
        self.reserved += nbytes
        out_keys: list[Key] = []
        out_sizes: list[float] = []
        blocks = self.blocks
        if self.rules is None:  # the oldest first, as insert_many evicts
            limit = self.capacity - self.reserved
            used = self.used
            while blocks and used > limit:
                v = self._pop_oldest()
                del blocks[v.key]
                used -= v.size
                out_keys.append(v.key)
                out_sizes.append(v.size)
            self.used = used
            self.evictions += len(out_keys)
        else:
            while blocks and self.used + self.reserved > self.capacity:
                v = self._pop_oldest()
                out_keys.append(v.key)
                out_sizes.append(self._drop(v.key))
                self.evictions += 1
        self._tidy()
        return out_keys, out_sizes

    def unreserve(self, nbytes: float) -> None:
        """Give back a reservation (its blocks arrived, or never will)."""
        self.reserved = max(self.reserved - nbytes, 0.0)

    def _drop(self, key: Key, reason: str = "evicted") -> float:
        """Remove a held block (any uses of it left in ``order`` turn stale); its bytes.
        ``reason``: evicted | deleted | expired (what a plugin policy is told)."""
        e = self.blocks.pop(key)
        e.live = False
        size = e.size
        self.used -= size
        rules = self.rules
        if rules is not None:
            t = rules.tenant_of(key)
            rules.used[t] -= size
            del rules.order[t][key]
            rules.stamps.pop(key, None)
        return size

    def remove(self, key: Key, reason: str = "deleted") -> bool:
        """Drop a block if present (``reason``: deleted, or expired by a TTL); True when
        it was there."""
        e = self.blocks.get(key)
        if e is None:
            return False
        size = e.size
        self._drop(key, reason)
        if self.watch is not None:
            self.watch.removed(self, [key], [size], reason)
        return True

    def clear(self) -> None:
        """Empty the store (its engine failed): every block is deleted."""
        if self.watch is not None and self.blocks:
            self.watch.removed(
                self, list(self.blocks), [e.size for e in self.blocks.values()], "deleted"
            )
        self._clear()

    def _clear(self) -> None:
        self.blocks.clear()
        self.order = []
        self.head = 0
        self.used = 0.0
        self.reserved = 0.0
        if self.rules is not None:
            self.rules.used.clear()
            self.rules.order.clear()
            self.rules.stamps.clear()

    def _watched_insert(self, keys: Sequence[Key], sizes: Sequence[float]) -> Spilled:
        """insert_many, telling the watcher what was stored (each key: held just before
        it was stored, or not) and what was evicted, in the order it happened: one key at
        a time (a block held when the call began may be evicted by an earlier key of the
        call and stored anew), runs of stored keys batched up to each eviction. A block
        refused as too big (or over its tenant's quota) is neither stored nor evicted."""
        watch = self.watch
        blocks = self.blocks
        out_keys: list[Key] = []
        out_sizes: list[float] = []
        run_k: list[Key] = []
        run_s: list[float] = []
        run_h: list[bool] = []
        self.watch = None
        try:
            for key, nbytes in zip(keys, sizes):
                held = key in blocks
                evictions = self.evictions
                ok, os_ = self.insert_many((key,), (nbytes,))
                if ok:
                    out_keys += ok
                    out_sizes += os_
                if len(ok) != self.evictions - evictions:  # refused: the key alone
                    continue
                run_k.append(key)
                run_s.append(nbytes)
                run_h.append(held)
                if ok:
                    watch.stored(self, run_k, run_s, run_h)
                    run_k, run_s, run_h = [], [], []
                    watch.removed(self, ok, os_, "evicted")
            if run_k:
                watch.stored(self, run_k, run_s, run_h)
        finally:
            self.watch = watch
        return out_keys, out_sizes

    def _watched_reserve(self, nbytes: float) -> Spilled:
        """reserve, telling the watcher what it evicted."""
        watch = self.watch
        self.watch = None
        try:
            out_k, out_s = self.reserve(nbytes)
        finally:
            self.watch = watch
        if out_k:
            watch.removed(self, out_k, out_s, "evicted")
        return out_k, out_s

    def copy_shifted(self, other: BlockStore, offset: int) -> None:
        """Become a copy of ``other`` whose keys are its keys + ``offset`` (a mirrored
        server's index, given to a server of its own)."""
        mine = {k: Entry(cast(int, k) + offset, e.size) for k, e in other.blocks.items()}
        self.blocks = {e.key: e for e in mine.values()}
        self.order = [mine[e.key] for e in other._live()]
        self.head = 0
        self.used, self.peak, self.evictions = other.used, other.peak, other.evictions
        if other.rules is not None:
            self.rules = other.rules.shifted(offset)


class LRU(BlockStore):
    """Least recently used goes first."""

    __slots__ = ()
    refresh_on_hit = True


class FIFO(BlockStore):
    """Oldest insertion goes first; hits do not refresh a block."""

    __slots__ = ()
    refresh_on_hit = False


class Gate:
    """An admission filter: which of the blocks offered to a tier it stores."""

    __slots__ = ("rejected",)

    def __init__(self) -> None:
        self.rejected = 0  # blocks offered and not admitted

    def filter(
        self, keys: Sequence[Key], sizes: Sequence[float], held: Container[Key]
    ) -> tuple[list[Key], list[float], list[Key], list[float]]:
        """(admitted keys, sizes, refused keys, sizes), each in the order offered."""
        raise NotImplementedError


POLICIES: dict[str, type[BlockStore]] = {"lru": LRU, "fifo": FIFO}


class SecondHit(Gate):
    """Admission on the second sighting: a block offered to a tier for the first time is
    only remembered (in a ghost list of at most ``limit`` keys, oldest forgotten first);
    offered again while remembered, or already held, it is admitted."""

    __slots__ = ("ghost", "limit")

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.ghost: OrderedDict[Key, None] = OrderedDict()
        self.limit = max(int(limit), 1)

    def filter(
        self, keys: Sequence[Key], sizes: Sequence[float], held: Container[Key]
    ) -> tuple[list[Key], list[float], list[Key], list[float]]:
        """(admitted keys, sizes, refused keys, sizes), each in the order offered."""
        ghost = self.ghost
        ok_k: list[Key] = []
        ok_s: list[float] = []
        no_k: list[Key] = []
        no_s: list[float] = []
        for key, size in zip(keys, sizes):  # lengths checked by the stores
            if key in held:
                ok_k.append(key)
                ok_s.append(size)
            elif key in ghost:
                del ghost[key]
                ok_k.append(key)
                ok_s.append(size)
            else:
                ghost[key] = None
                if len(ghost) > self.limit:
                    ghost.popitem(False)
                no_k.append(key)
                no_s.append(size)
        self.rejected += len(no_k)
        return ok_k, ok_s, no_k, no_s


def make_store(policy: str, capacity: float) -> BlockStore:
    """A store of the named policy; an unknown name lists the choices."""
    try:
        cls = POLICIES[policy]
    except KeyError:
        raise ValueError(
            f"unknown eviction policy {policy!r}; choose one of {sorted(POLICIES)}"
        ) from None
    return cls(capacity)
