"""Block stores with a pluggable eviction policy: the capacity bookkeeping of every tier.

A store maps block keys to their size in bytes and never holds more than its capacity:
:meth:`BlockStore.insert_many` makes room first and returns what it pushed out (or a new
block that can never fit), so the caller can demote it to the next tier. The
policies differ only in which block goes first. ``POLICIES`` is the one place that maps
scenario names to classes.

The eviction order is a log, not a linked list: ``order`` lists every use of a block (its
insertion, and under LRU each refresh), oldest first, and a block's live entry is its last
one. ``stale[key]`` counts the entries of a key that are not live (it was refreshed since,
or removed), so the oldest block is the first entry whose key has no stale count. A use
appends to a list and an eviction reads from its head: plain ``list`` and ``dict``
operations, about half the instructions of ``OrderedDict``'s (the stores are the hottest
code of a replay; benchmarks/README.md). The log is rebuilt from its live entries when
the stale ones outnumber them by more than 1,024.
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
    """Capacity-bounded map of block key -> bytes, evicting oldest first.

    ``refresh_on_hit`` says whether a use moves a block to the back of the line (LRU) or
    not (FIFO). Invariant: ``used`` (the sum of held sizes) never exceeds ``capacity``;
    each key has ``stale.get(key, 0)`` entries in ``order[head:]``, plus one (the live,
    last one) when it is held.
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
        "stale",
        "used",
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
        # key -> bytes, in the order first stored; read-only outside this class
        self.blocks: dict[Key, float] = {}
        self.order: list[Key] = []  # uses from index ``head`` on, oldest first
        self.head = 0
        self.stale: dict[Key, int] = {}  # key -> its entries in ``order`` that are not live
        self.rules: Rules | None = None

    def __contains__(self, key: Key) -> bool:
        return key in self.blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __iter__(self) -> Iterator[Key]:
        """Held keys, the next to be evicted first (as :meth:`keys`)."""
        return iter(self.keys())

    def keys(self) -> list[Key]:
        """Held keys, the next to be evicted first."""
        left = dict(self.stale)
        order = self.order
        out: list[Key] = []
        for i in range(self.head, len(order)):
            key = order[i]
            n = left.get(key, 0)
            if n:
                left[key] = n - 1
            else:
                out.append(key)
        return out

    def _pop_oldest(self) -> Key:
        """Take the oldest live entry off ``order`` and return its key (still held: the
        caller removes it). Stale entries on the way are dropped."""
        order, stale = self.order, self.stale
        head = self.head
        while True:
            key = order[head]
            head += 1
            n = stale.get(key, 0)
            if not n:
                break
            if n > 1:
                stale[key] = n - 1
            else:
                del stale[key]
        self.head = head
        return key

    def _tidy(self) -> None:
        """Keep ``order`` short: drop what was read off its head, or, when stale entries
        outnumber the live ones, rebuild it from the live ones (amortised O(1) a use)."""
        order = self.order
        if len(order) - self.head > 2 * len(self.blocks) + 1024:
            self.order = self.keys()
            self.head = 0
            self.stale = {}
        elif self.head > 1024 and 2 * self.head > len(order):
            del order[: self.head]
            self.head = 0

    def touch(self, keys: Sequence[Key]) -> None:
        """Record a use of blocks that are present (hits), in order."""
        rules = self.rules
        refresh = self.refresh_on_hit
        order, stale = self.order, self.stale
        if rules is None:
            if refresh:
                for key in keys:
                    order.append(key)
                    stale[key] = stale.get(key, 0) + 1
                self._tidy()
            return
        now = rules.clock() if rules.clock is not None else None
        for key in keys:
            if refresh:
                order.append(key)
                stale[key] = stale.get(key, 0) + 1
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
        if self.rules is not None:
            return self._insert_ruled(keys, sizes)
        # the hottest loop of a simulation: counters kept local
        blocks, order, stale = self.blocks, self.order, self.stale
        refresh = self.refresh_on_hit
        cap = self.capacity - self.reserved
        used = self.used
        peak = self.peak
        out_keys: list[Key] = []
        out_sizes: list[float] = []
        unfit = 0
        written = 0.0
        for key, nbytes in zip(keys, sizes):  # lengths checked above
            if nbytes <= cap:
                held = len(blocks)
                blocks.setdefault(key, nbytes)  # one lookup: stored unless already held
                if len(blocks) > held:  # a new block: make room behind it
                    order.append(key)
                    used += nbytes
                    written += nbytes
                    while used > cap and len(blocks) > 1:
                        victim = self._pop_oldest()  # never the new block: it is the last
                        size = blocks[victim]
                        del blocks[victim]
                        used -= size
                        out_keys.append(victim)
                        out_sizes.append(size)
                    if used > peak:
                        peak = used
                    continue
            elif key not in blocks:  # it can never fit
                out_keys.append(key)
                out_sizes.append(nbytes)
                unfit += 1
                continue
            if refresh:  # a held block, used again
                order.append(key)
                stale[key] = stale.get(key, 0) + 1
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
                    evicted.append((victim, blocks[victim]))
                    self._drop(victim)
                    self.evictions += 1
            while self.used + nbytes > cap and blocks:
                victim = self._pop_oldest()
                evicted.append((victim, self._forget(victim)))
                self.evictions += 1
            blocks[key] = nbytes
            self.order.append(key)
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
        self.reserved += nbytes
        out_keys: list[Key] = []
        out_sizes: list[float] = []
        blocks = self.blocks
        if self.rules is None:  # the oldest first, as insert_many evicts
            limit = self.capacity - self.reserved
            used = self.used
            while blocks and used > limit:
                victim = self._pop_oldest()
                size = blocks[victim]
                del blocks[victim]
                used -= size
                out_keys.append(victim)
                out_sizes.append(size)
            self.used = used
            self.evictions += len(out_keys)
        else:
            while blocks and self.used + self.reserved > self.capacity:
                victim = self._pop_oldest()
                out_keys.append(victim)
                out_sizes.append(self._forget(victim))
                self.evictions += 1
        self._tidy()
        return out_keys, out_sizes

    def unreserve(self, nbytes: float) -> None:
        """Give back a reservation (its blocks arrived, or never will)."""
        self.reserved = max(self.reserved - nbytes, 0.0)

    def _forget(self, key: Key) -> float:
        """Remove a held block whose live entry in ``order`` is gone already; its bytes."""
        size = self.blocks.pop(key)
        self.used -= size
        rules = self.rules
        if rules is not None:
            t = rules.tenant_of(key)
            rules.used[t] -= size
            del rules.order[t][key]
            rules.stamps.pop(key, None)
        return size

    def _drop(self, key: Key) -> float:
        """Remove a held block (its live entry in ``order`` turns stale); its bytes."""
        self.stale[key] = self.stale.get(key, 0) + 1
        return self._forget(key)

    def remove(self, key: Key) -> bool:
        """Drop a block if present; True when it was there."""
        if key not in self.blocks:
            return False
        self._drop(key)
        return True

    def clear(self) -> None:
        self.blocks.clear()
        self.order = []
        self.head = 0
        self.stale = {}
        self.used = 0.0
        self.reserved = 0.0
        if self.rules is not None:
            self.rules.used.clear()
            self.rules.order.clear()
            self.rules.stamps.clear()

    def copy_shifted(self, other: BlockStore, offset: int) -> None:
        """Become a copy of ``other`` whose keys are its keys + ``offset`` (a mirrored
        server's index, given to a server of its own)."""
        self.blocks = {cast(int, k) + offset: v for k, v in other.blocks.items()}
        self.order = [cast(int, k) + offset for k in other]
        self.head = 0
        self.stale = {}
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


class Delegated(BlockStore):
    """A store whose victims a plugin policy chooses. ``hook`` (a
    :class:`kvsim.sim.hooks.EvictionHook`) hears every block stored, used and removed,
    names the victim when room is needed, and checks what the policy answers."""

    __slots__ = ("hook",)

    def __init__(self, capacity: float, hook: Any) -> None:
        super().__init__(capacity)
        self.hook = hook

    def keys(self) -> list[Key]:
        return list(self.blocks)

    def touch(self, keys: Sequence[Key]) -> None:
        for key in keys:
            self.hook.hit(self, key)

    def insert_many(self, keys: Sequence[Key], sizes: Sequence[float]) -> Spilled:
        if len(keys) != len(sizes):
            raise ValueError(f"{len(keys)} keys but {len(sizes)} sizes")
        blocks = self.blocks
        hook = self.hook
        cap = self.capacity - self.reserved
        out_keys: list[Key] = []
        out_sizes: list[float] = []
        for key, nbytes in zip(keys, sizes):  # lengths checked above
            if key in blocks:
                hook.hit(self, key)
                continue
            if nbytes > cap:
                out_keys.append(key)
                out_sizes.append(nbytes)
                continue
            while self.used + nbytes > cap and blocks:
                victim = hook.victim(self)
                out_keys.append(victim)
                out_sizes.append(self._drop(victim))
                self.evictions += 1
            blocks[key] = nbytes
            self.used += nbytes
            self.written += nbytes
            if self.used > self.peak:
                self.peak = self.used
            hook.inserted(self, key)
        return out_keys, out_sizes

    def reserve(self, nbytes: float) -> Spilled:
        self.reserved += nbytes
        out_keys: list[Key] = []
        out_sizes: list[float] = []
        while self.blocks and self.used + self.reserved > self.capacity:
            victim = self.hook.victim(self)
            out_keys.append(victim)
            out_sizes.append(self._drop(victim))
            self.evictions += 1
        return out_keys, out_sizes

    def _drop(self, key: Key) -> float:
        size = self.blocks.pop(key)
        self.used -= size
        self.hook.removed(self, key)
        return size

    def clear(self) -> None:
        for key in list(self.blocks):
            self.hook.removed(self, key)
        super().clear()


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


class DelegatedGate(Gate):
    """Admission by a plugin policy (``hook``: a :class:`kvsim.sim.hooks.AdmissionHook`);
    a block already held is always admitted (a refresh)."""

    __slots__ = ("hook",)

    def __init__(self, hook: Any) -> None:
        super().__init__()
        self.hook = hook

    def filter(
        self, keys: Sequence[Key], sizes: Sequence[float], held: Container[Key]
    ) -> tuple[list[Key], list[float], list[Key], list[float]]:
        ok_k: list[Key] = []
        ok_s: list[float] = []
        no_k: list[Key] = []
        no_s: list[float] = []
        for key, size in zip(keys, sizes):  # lengths checked by the stores
            if key in held or self.hook.admit(key, size):
                ok_k.append(key)
                ok_s.append(size)
            else:
                no_k.append(key)
                no_s.append(size)
        self.rejected += len(no_k)
        return ok_k, ok_s, no_k, no_s


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
