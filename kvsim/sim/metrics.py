"""The run's metrics collector: what the engines and the stores report, in one place.

What this module owns: :class:`Metrics`, built once per run by the simulation and handed
to the engines (``Shared.metrics``), and :class:`MetricsListener`, what a listener of it
may hear. The collector keeps every finished or dropped request's record (a
:class:`~kvsim.sim.rows.RowTable` of the run's columns, kvsim.sim.rows) and passes the
run's events on to its listeners:

- ``records(n)``: n more records were kept (the simulation's progress bar and memory
  check listen, every 1,000 records);
- ``lookup(...)``: a lookup's tiers asked and blocks found (``Lookup.count``);
- ``stored(...)`` / ``removed(...)``: blocks inserted into, refreshed in, or evicted,
  deleted or expired from any block store (the stores' watches, :class:`StoreWatch`).

The access recorder (``run --record-accesses``, :mod:`kvsim.sim.recorder`) is one such
listener. Block events cost nothing unless some listener hears them: the engines test
:attr:`Metrics.blocks` once per lookup, reservation and admission, and the stores are
watched only then. :attr:`Metrics.cause` is the request whose lookup, reservation or
admission is being handled (-1: none), the cause the listeners are told.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kvsim.cache.local import REMOTE
from kvsim.sim.rows import DEFAULT, RECORD, Column, RowTable

_EVERY = 1000  # records between records() calls


class MetricsListener(Protocol):
    """What every listener of the collector hears."""

    #: it also hears block events (a :class:`BlockListener`): the stores are watched for it
    blocks: bool

    def records(self, n: int) -> None:
        """``n`` more requests were recorded."""
        ...


class BlockListener(MetricsListener, Protocol):
    """A listener of block events too (``blocks`` true): each lookup (per tier ``asked``,
    in lookup order, the blocks that reached it; ``src``, the tier serving each block of
    the located prefix), and what the stores did to blocks (``held``: it had them, a
    refresh; ``reason``: evicted, deleted or expired), each with its ``cause``."""

    def lookup(
        self,
        engine: int,
        request: int,
        keys: Sequence[Any],
        raw: Sequence[float],
        src: Sequence[int],
        asked: Sequence[int],
        ratio: Sequence[float],
        shards: int,
    ) -> None: ...

    def stored(
        self,
        engine: int,
        tier: int,
        keys: Sequence[Any],
        sizes: Sequence[float],
        held: Sequence[bool],
        cause: int,
    ) -> None: ...

    def removed(
        self,
        engine: int,
        tier: int,
        keys: Sequence[Any],
        sizes: Sequence[float],
        reason: str,
        cause: int,
    ) -> None: ...


class Metrics:
    """The run's records and its listeners (see the module docstring)."""

    def __init__(
        self,
        columns: Sequence[Column] = DEFAULT,
        listeners: Sequence[MetricsListener] = (),
        fields: Sequence[str] = RECORD,
    ) -> None:
        """``fields``: what the requests' ``record()`` returns (Job.RECORD, DecodeJob's)."""
        self.rows = RowTable(columns, fields)
        self.listeners: list[MetricsListener] = []
        self._block: list[Any] = []  # the BlockListeners (they hear *event, as is)
        self.blocks = False  # some listener hears block events (the engines test this)
        self.cause = -1  # the request whose lookup, reservation or admission runs now
        for x in listeners:
            self.add(x)

    def add(self, listener: MetricsListener) -> None:
        """One more listener (before the run: the stores are watched at ``attach``)."""
        self.listeners.append(listener)
        if listener.blocks:
            self._block.append(listener)
            self.blocks = True

    # ---- requests -----------------------------------------------------------------------

    def request(self, job: Any) -> None:
        """A request finished or was dropped: keep its record."""
        rows = self.rows
        rows.add(job)
        if len(rows) % _EVERY == 0:
            for x in self.listeners:
                x.records(_EVERY)

    def done(self) -> None:
        """The run is over: the records since the last ``records`` call."""
        n = len(self.rows) % _EVERY
        for x in self.listeners:
            x.records(n)

    # ---- blocks -------------------------------------------------------------------------

    def attach(self, engines: Sequence[Any], remote: Any) -> None:
        """Watch every store when a listener hears block events: each engine's local tiers'
        stores, each remote server's index (its shard-0 keys, as block keys)."""
        if not self.blocks:
            return
        for e in engines:
            for tier, store in enumerate(e.local.tiers):
                if store is not None:
                    store.watch = StoreWatch(self, e.index, tier)
        if remote is not None:
            shards = remote.shards
            for store in remote.stores:
                store.watch = (
                    StoreWatch(self, -1, REMOTE)
                    if shards == 1
                    else ShardWatch(self, -1, REMOTE, shards)
                )

    def lookup(self, *event: Any) -> None:
        """A lookup (:meth:`BlockListener.lookup`'s arguments), to the block listeners."""
        for x in self._block:
            x.lookup(*event)

    def stored(self, *event: Any) -> None:
        """Blocks stored (:meth:`BlockListener.stored`'s, but the cause: ``cause``)."""
        for x in self._block:
            x.stored(*event, cause=self.cause)

    def removed(self, *event: Any) -> None:
        """Blocks removed (:meth:`BlockListener.removed`'s, but the cause: ``cause``)."""
        for x in self._block:
            x.removed(*event, cause=self.cause)


class StoreWatch:
    """What a local tier's store (or an unsharded remote server) tells the collector."""

    __slots__ = ("engine", "metrics", "tier")

    def __init__(self, metrics: Metrics, engine: int, tier: int) -> None:
        self.metrics = metrics
        self.engine = engine
        self.tier = tier

    def hit(self, store: Any, keys: Sequence[Any]) -> None:
        """Lookup events come from Lookup.count (a touch is not a lookup: a restore's or a
        peer's touch of blocks it found is already counted there)."""

    def stored(
        self, store: Any, keys: Sequence[Any], sizes: Sequence[float], held: Sequence[bool]
    ) -> None:
        self.metrics.stored(self.engine, self.tier, keys, sizes, held)

    def removed(self, store: Any, keys: Sequence[Any], sizes: Sequence[float], reason: str) -> None:
        self.metrics.removed(self.engine, self.tier, keys, sizes, reason)


class ShardWatch(StoreWatch):
    """A sharded remote server's store: only shard 0's keys, told as block keys."""

    __slots__ = ("shards",)

    def __init__(self, metrics: Metrics, engine: int, tier: int, shards: int) -> None:
        super().__init__(metrics, engine, tier)
        self.shards = shards

    def _shard0(self, keys: Sequence[Any], *columns: Sequence[Any]) -> list[list[Any]]:
        """The keys of shard 0 (as block keys) and, per column, their entries ([] when
        there are none)."""
        S = self.shards
        idx = [i for i, k in enumerate(keys) if k % S == 0]
        if not idx:
            return []
        return [[keys[i] // S for i in idx], *([c[i] for i in idx] for c in columns)]

    def stored(
        self, store: Any, keys: Sequence[Any], sizes: Sequence[float], held: Sequence[bool]
    ) -> None:
        part = self._shard0(keys, sizes, held)
        if part:
            self.metrics.stored(self.engine, self.tier, *part)

    def removed(self, store: Any, keys: Sequence[Any], sizes: Sequence[float], reason: str) -> None:
        part = self._shard0(keys, sizes)
        if part:
            self.metrics.removed(self.engine, self.tier, *part, reason)


class OnRecords:
    """A listener that calls ``tick(n)`` as records are kept (the simulation's progress
    and memory check); it hears no block events."""

    blocks = False

    def __init__(self, tick: Callable[[int], None]) -> None:
        self.tick = tick

    def records(self, n: int) -> None:
        self.tick(n)
