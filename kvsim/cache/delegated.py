"""The block store and the admission gate that a plugin policy drives.

This module owns :class:`Delegated` (a :class:`~kvsim.cache.eviction.BlockStore` whose
victims a plugin's :class:`~kvsim.plugins.api.EvictionPolicy` chooses: the events it
queues, as the codes ``INSERTED`` ... ``EXPIRED``, and tells the policy in runs) and
:class:`DelegatedGate` (admission by a plugin's
:class:`~kvsim.plugins.api.AdmissionPolicy`). :mod:`kvsim.sim.hooks` binds the policy's
methods and checks its answers. It is compiled with the stores (pyproject's ``[tool.kvsim]
compiled``): the only interpreted frames are the policy's.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any, Final, cast

import kvsim.interrupts as _interrupts
from kvsim.cache.eviction import BlockStore, Entry, Gate, Key, Spilled
from kvsim.plugins.api import Block

# what a plugin policy hears, as the codes a Delegated store queues (kvsim.sim.hooks
# turns them into the policy's methods): events of a held block, then removals by reason
INSERTED: Final = 0
HIT: Final = 1
REFRESHED: Final = 2
EVICTED: Final = 3
DELETED: Final = 4
EXPIRED: Final = 5
EVENTS: Final = ("inserted", "hit", "refreshed", "evicted", "deleted", "expired")
_REMOVALS: Final = {"evicted": EVICTED, "deleted": DELETED, "expired": EXPIRED}
_new_tuple: Any = tuple.__new__  # a Block without its constructor's interpreted frame


class Delegated(BlockStore):
    """A store whose victims a plugin policy chooses. ``hook`` (a
    :class:`kvsim.sim.hooks.EvictionHook`) knows the policy: the first event binds its
    methods here (``fns``, by event code; None: it ignores the event), and the hook
    checks the answers the fast path below cannot accept as they are and turns what
    plugin code raises into one PluginError.

    The events are queued (``kinds``: event codes, ``queued``: the keys, oldest first)
    and told to the policy in order, in runs of one kind, before each victim is asked
    for and at the end of each store operation: a policy sees every event before it
    chooses, with one interpreted call per run (a batch method, ``inserted_many``...)
    instead of one per block. Lookup hits (:meth:`touch`) are one run of their own. This
    loop is compiled with the stores: the only interpreted frames are the policy's."""

    __slots__ = (
        "bound",
        "clock",
        "fns",
        "forgets",
        "hook",
        "kinds",
        "many",
        "queued",
        "reason",
        "static",
        "victim_fn",
        "view",
    )

    def __init__(self, capacity: float, hook: Any) -> None:
        super().__init__(capacity)
        self.hook = hook
        self.kinds: list[int] = []
        self.queued: list[Key] = []
        self.bound = False  # hook.bind has set what follows
        self.fns: list[Any] = []  # event code -> the policy's method (None: not called)
        self.many: list[bool] = []  # event code -> is it a batch method
        self.reason = True  # its one-block removed() takes the reason
        # key -> (depth, recompute_s, parent, tenant) of a block: what never changes
        self.static: dict[Key, Any] = {}
        self.clock: Any = None  # () -> simulated time
        self.victim_fn: Any = None  # the policy's victim (or its evict)
        # it chose by evict(): it forgets its victims itself, and hears no removal of them
        self.forgets = False
        self.view: Any = None  # the TierView victim() is given

    def keys(self) -> list[Key]:
        return list(self.blocks)

    def touch(self, keys: Sequence[Key]) -> None:
        if self.watch is not None:
            self.watch.hit(self, keys)
        if keys:
            if not self.bound:
                self.hook.bind(self)
            self._run(HIT, list(keys))
            self._stamp(keys)

    def _stamp(self, keys: Sequence[Key]) -> None:
        """Tenancy TTL: the time of each block's last use (quotas are the built-in
        stores' only)."""
        rules = self.rules
        if rules is not None and rules.clock is not None:
            now = rules.clock()
            stamps = rules.stamps
            for key in keys:
                if key in self.blocks:
                    stamps[key] = now

    def _tell(self) -> None:
        """Tell the policy the queued events, in order, a run of one kind at a time."""
        if not self.bound:
            self.hook.bind(self)
        kinds, keys = self.kinds, self.queued
        n = len(keys)
        i = 0
        while i < n:
            kind = kinds[i]
            j = i + 1
            while j < n and kinds[j] == kind:
                j += 1
            self._run(kind, keys[i:j])
            i = j
        kinds.clear()
        keys.clear()

    def _blocks(self, keys: list[Key]) -> list[Any]:
        """The :class:`kvsim.plugins.Block` of each held key: what never changes of it
        from ``static`` (the hook works it out the first time), its bytes, the time."""
        static = self.static
        held = self.blocks
        now = float(self.clock())
        out: list[Any] = []
        for k in keys:
            fixed = static.get(k)
            size = held[k].size
            if fixed is None:
                fixed = self.hook.fixed(self, k, size)
            out.append(_new_tuple(Block, (k, size, fixed[0], fixed[1], fixed[2], fixed[3], now)))
        return out

    def _run(self, kind: int, keys: list[Key]) -> None:
        """One run of events of one kind, through the policy's method for it."""
        fn = self.fns[kind]
        if fn is None:
            return
        before = _interrupts._signals
        try:
            if kind <= REFRESHED:
                blocks = self._blocks(keys)
                if self.many[kind]:
                    fn(blocks)
                else:
                    for b in blocks:
                        fn(b)
            elif self.many[kind]:
                fn(keys, EVENTS[kind])
            elif self.reason:
                why = EVENTS[kind]
                for k in keys:
                    fn(k, why)
            else:
                for k in keys:
                    fn(k)
        except BaseException as e:  # whatever plugin code raises
            raise self.hook.failed(self, kind, e, before)  # noqa: B904 (it sets the cause)
        if _interrupts._signals != before:  # Ctrl-C came, and the plugin swallowed it
            raise KeyboardInterrupt

    def _victim(self) -> Key:
        """The policy's victim, once it has heard every event so far."""
        if not self.bound:
            self.hook.bind(self)
        if self.queued:
            self._tell()
        before = _interrupts._signals
        try:
            got = self.victim_fn(self.view)
        except BaseException as e:  # whatever plugin code raises
            raise self.hook.failed(self, -1, e, before)  # noqa: B904 (it sets the cause)
        if _interrupts._signals != before:
            raise KeyboardInterrupt
        if type(got) is int and got in self.blocks:  # the usual answer: nothing to check
            return got
        return cast(Key, self.hook.checked_victim(self, got))

    def insert_many(self, keys: Sequence[Key], sizes: Sequence[float]) -> Spilled:
        if len(keys) != len(sizes):
            raise ValueError(f"{len(keys)} keys but {len(sizes)} sizes")
        if self.watch is not None:
            return self._watched_insert(keys, sizes)
        blocks = self.blocks
        kinds, queued = self.kinds, self.queued
        cap = self.capacity - self.reserved
        out_keys: list[Key] = []
        out_sizes: list[float] = []
        for key, nbytes in zip(keys, sizes):  # lengths checked above
            if key in blocks:  # stored again while held
                kinds.append(REFRESHED)
                queued.append(key)
                continue
            if nbytes > cap:
                out_keys.append(key)
                out_sizes.append(nbytes)
                continue
            while self.used + nbytes > cap and blocks:
                victim = self._victim()  # (the events queued so far are told first)
                out_keys.append(victim)
                out_sizes.append(self._evict(victim))
            blocks[key] = Entry(key, nbytes)
            self.used += nbytes
            self.written += nbytes
            if self.used > self.peak:
                self.peak = self.used
            kinds.append(INSERTED)
            queued.append(key)
        if self.rules is not None:
            self._stamp(keys)
        if queued:
            self._tell()
        return out_keys, out_sizes

    def reserve(self, nbytes: float) -> Spilled:
        if self.watch is not None:
            return self._watched_reserve(nbytes)
        self.reserved += nbytes
        out_keys: list[Key] = []
        out_sizes: list[float] = []
        while self.blocks and self.used + self.reserved > self.capacity:
            victim = self._victim()
            out_keys.append(victim)
            out_sizes.append(self._evict(victim))
        if self.queued:
            self._tell()
        return out_keys, out_sizes

    def _evict(self, key: Key) -> float:
        """Evict the policy's victim (its removal queued, unless it chose by evict());
        its bytes."""
        self.evictions += 1
        if not self.forgets:
            return self._drop(key)
        size = self.blocks.pop(key).size
        self.used -= size
        if self.rules is not None:
            self.rules.stamps.pop(key, None)
        return size

    def _drop(self, key: Key, reason: str = "evicted") -> float:
        """Remove a held block; its removal (``reason``) is queued for the policy."""
        size = self.blocks.pop(key).size
        self.used -= size
        if self.rules is not None:
            self.rules.stamps.pop(key, None)
        self.kinds.append(_REMOVALS[reason])
        self.queued.append(key)
        return size

    def remove(self, key: Key, reason: str = "deleted") -> bool:
        got = super().remove(key, reason)
        if self.queued:
            self._tell()
        return got

    def _clear(self) -> None:
        for key in list(self.blocks):
            self.kinds.append(DELETED)
            self.queued.append(key)
        if self.queued:
            self._tell()
        super()._clear()


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
