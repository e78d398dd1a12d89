"""The access log of a run (``kvsim run --record-accesses``): every lookup of every tier
and every event of every block store, in simulation order, as ``accesses.parquet``.

Columns (:data:`COLUMNS`; the file's row order IS the event order, never sorted):

- ``time`` (float64, s): the simulated time of the event.
- ``engine`` (int32): the engine whose lookup or store it is; -1 for the shared remote
  store's own events (a lookup of the remote tier carries the engine that asked).
- ``tier`` (str): ``gpu | host | nvme | remote``, and ``peer`` for lookups of the other
  engines' host tiers (``tiers.peer``: no store of its own; the holder's host store
  records its own events under the holder's engine).
- ``key`` (int64): the block key as lookups use it (a request's cache key; see Remote).
- ``bytes`` (float64): the block's bytes as the tier stores them (its codec applied; one
  shard's bytes in a sharded remote store). A lookup row carries what the block takes (a
  hit) or would take (a miss) in that tier: raw bytes x the tier's codec ratio.
- ``event`` (str): ``hit | miss`` (lookups), ``insert`` (a block new to the store),
  ``refresh`` (a block stored again while held), ``evict``, ``delete`` (tenant deletions,
  an engine or server failure), ``expire`` (``tenancy.ttl``).
- ``request`` (int64): the request whose lookup, reservation or admission caused the row;
  -1 otherwise (see Requests).

Lookups: one ``hit``/``miss`` row per block a lookup asked a tier for, exactly what
``Engine._count_lookup`` counts into ``summary["tiers"][t]["hits"|"misses"]``: the tiers
asked, in lookup order (gpu, host, nvme, peer, remote), each over the blocks no earlier tier
served (in chain order); a block of the located prefix is a hit in the tier that serves it,
every other block a miss (a block past the prefix misses in every tier asked). Hits are
the located prefix before the load policy's cut.

Store events come from :attr:`kvsim.cache.eviction.BlockStore.watch`: one watcher per store
(each engine's gpu, host and nvme stores, every remote server's index), in the order they
happen, except that a stored block's ``insert`` row comes before the ``evict`` rows of the
blocks evicted to make room for it.

Remote: a server's store keys are shard keys ``b * S + r`` (S shards per block). The log
records block ``b`` once per block: the events of shard 0 (keys ``k % S == 0``, logged as
``k // S``), wherever it lives. Unsharded (S = 1) every key is logged, from every server
(several unsharded servers partition the blocks by ``b % servers``: each holds its own
capacity, so a one-store replay of the remote rows stands for one server only when there is
one server). Per-rank shards with one server per rank: shard 0 is always on server 0, so
the remote rows are server 0's index exactly (while the store mirrors its servers, the
summary's remote ``evictions`` count every server's copy: ``servers`` x the evict rows).
Other per-rank layouts log shard 0 from the servers that hold it. A server that loses the
shard 0 of blocks logs ``delete`` rows; one that loses other shards logs nothing (the
blocks turn unusable: later lookups miss).

Requests: a lookup's rows carry its request. So do the store events caused synchronously
by that lookup (hits that write a block through to a lower tier), by a request's working KV
reserving room in the GPU tier (``Engine._take``: evictions, and the demotions they cause)
and by its admission when its prefill finishes (``Engine._finish``: insertion into HBM,
evictions, demotions). Everything else carries -1: remote puts that land later, prefetches,
promotions, prestored blocks, TTL expiry, tenant deletions, failures.

Keys must fit int64: with ``tenancy.isolation: tenant`` a tenant t > 0's keys are
``hash + t x 2**64``, which do not; recording such a run stops with a one-line error.

Reading it back (``kvsim trace mrc``/``reuse``, :func:`check`): a file whose integer
columns are not integers, whose tier is unknown, whose ``bytes`` are negative, NaN or
infinite, or whose ``time`` goes backwards from one row to the next (or is negative, NaN
or infinite) is refused with one line naming the file and the row (from 0).

Cost: nothing when not asked (the stores' ``watch`` stays None; ``Engine`` tests one
attribute per lookup, reservation and admission). When asked, the rows are kept in compact
columns (``array``: 8 bytes per float or key, 1 per tier and event code, 4 per engine) and
turned into a DataFrame once, at the end.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvsim.errors import InputError

#: The file's columns, in order.
COLUMNS = ("time", "engine", "tier", "key", "bytes", "event", "request")
#: Tier names by code (kvsim.cache.local's tier codes: GPU 0, HOST 1, NVME 2, REMOTE 3,
#: PEER 4).
TIERS = ("gpu", "host", "nvme", "remote", "peer")
#: Event names by code.
EVENTS = ("hit", "miss", "insert", "refresh", "evict", "delete", "expire")
HIT, MISS, INSERT, REFRESH, EVICT = 0, 1, 2, 3, 4
_REMOVED = {"evicted": EVICT, "deleted": 5, "expired": 6}
FILE = "accesses.parquet"


class AccessRecorder:
    """The run's access log, column by column (see the module docstring)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.time = array("d")
        self.engine = array("i")
        self.tier = array("b")
        self.key = array("q")
        self.nbytes = array("d")
        self.event = array("b")
        self.req = array("q")
        # the request whose lookup, reservation or admission is being handled (set and
        # reset around them by Engine), -1 when none
        self.request = -1

    def __len__(self) -> int:
        return len(self.time)

    # ---- attaching --------------------------------------------------------------------

    def attach(self, engines: Sequence[Any], remote: Any) -> None:
        """Watch every store: each engine's gpu/host/nvme stores, each remote server's
        index (its shard-0 keys, as block keys)."""
        for e in engines:
            for tier, store in enumerate(e.local.tiers):
                if store is not None:
                    store.watch = StoreWatch(self, e.index, tier)
        if remote is not None:
            shards = remote.shards
            for store in remote.stores:
                store.watch = (
                    StoreWatch(self, -1, 3) if shards == 1 else ShardWatch(self, -1, 3, shards)
                )

    # ---- rows -------------------------------------------------------------------------

    def _rows(
        self,
        engine: int,
        tier: int,
        keys: Sequence[Any],
        sizes: Sequence[float],
        events: Sequence[int] | int,
        request: int,
    ) -> None:
        n = len(keys)
        if n == 1:  # the common case (a store call's run of keys up to an eviction)
            try:
                self.key.append(keys[0])
            except (OverflowError, TypeError):
                self._bad_key(keys)
            self.time.append(self.clock())
            self.engine.append(engine)
            self.tier.append(tier)
            self.nbytes.append(sizes[0])
            self.event.append(events if isinstance(events, int) else events[0])
            self.req.append(request)
            return
        if not n:
            return
        try:
            self.key.extend(keys)
        except (OverflowError, TypeError):
            self._bad_key(keys)
        self.time.extend(array("d", [self.clock()]) * n)
        self.engine.extend(array("i", [engine]) * n)
        self.tier.extend(array("b", [tier]) * n)
        self.nbytes.extend(sizes)
        if isinstance(events, int):
            self.event.extend(array("b", [events]) * n)
        else:
            self.event.extend(events)
        self.req.extend(array("q", [request]) * n)

    def _bad_key(self, keys: Sequence[Any]) -> None:
        """Drop the keys of the partial rows (the columns stay aligned); stop the run."""
        del self.key[len(self.time) :]
        bad = next(
            (k for k in keys if not isinstance(k, int) or not -(2**63) <= k < 2**63), keys[0]
        )
        raise InputError(
            f"block key {bad} does not fit accesses.parquet's int64 key column "
            "(tenancy.isolation: tenant keys tenant t's blocks as hash + t x 2**64); "
            "record a run without tenant isolation",
            where="--record-accesses",
        )

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
    ) -> None:
        """One lookup's rows (``Engine._count_lookup``): for each tier code in ``asked``
        (lookup order), a row per block that reached it. ``src``: the tier serving each
        block of the located prefix; ``raw``: each block's raw bytes."""
        n = len(keys)
        m = len(src)
        left = list(range(n))  # blocks no earlier tier served, in chain order
        for t in asked:
            scale = ratio[t] / (shards if t == 3 else 1)
            ks = [keys[i] for i in left]
            ev = array("b", [HIT if i < m and src[i] == t else MISS for i in left])
            self._rows(engine, t, ks, [raw[i] * scale for i in left], ev, request)
            left = [i for i in left if i >= m or src[i] != t]

    def stored(
        self,
        engine: int,
        tier: int,
        keys: Sequence[Any],
        sizes: Sequence[float],
        held: Sequence[bool],
    ) -> None:
        if len(held) == 1:
            self._rows(engine, tier, keys, sizes, REFRESH if held[0] else INSERT, self.request)
            return
        ev = array("b", [REFRESH if h else INSERT for h in held])
        self._rows(engine, tier, keys, sizes, ev, self.request)

    def removed(
        self, engine: int, tier: int, keys: Sequence[Any], sizes: Sequence[float], reason: str
    ) -> None:
        self._rows(engine, tier, keys, sizes, _REMOVED[reason], self.request)

    # ---- output -----------------------------------------------------------------------

    def frame(self) -> pd.DataFrame:
        """The log as a DataFrame in :data:`COLUMNS` order (tier and event categorical);
        the columns kept so far are released."""
        df = pd.DataFrame(
            {
                "time": np.frombuffer(self.time, dtype=np.float64).copy(),
                "engine": np.frombuffer(self.engine, dtype=np.int32).copy(),
                "tier": pd.Categorical.from_codes(
                    np.frombuffer(self.tier, dtype=np.int8), categories=list(TIERS)
                ),
                "key": np.frombuffer(self.key, dtype=np.int64).copy(),
                "bytes": np.frombuffer(self.nbytes, dtype=np.float64).copy(),
                "event": pd.Categorical.from_codes(
                    np.frombuffer(self.event, dtype=np.int8), categories=list(EVENTS)
                ),
                "request": np.frombuffer(self.req, dtype=np.int64).copy(),
            },
            columns=list(COLUMNS),
        )
        for name in ("time", "engine", "tier", "key", "nbytes", "event", "req"):
            setattr(self, name, array(getattr(self, name).typecode))
        return df


class StoreWatch:
    """What a local tier's store (or an unsharded remote server) tells the recorder."""

    __slots__ = ("engine", "rec", "tier")

    def __init__(self, rec: AccessRecorder, engine: int, tier: int) -> None:
        self.rec = rec
        self.engine = engine
        self.tier = tier

    def hit(self, store: Any, keys: Sequence[Any]) -> None:
        """Lookup rows come from Engine._count_lookup (a touch is not a lookup: a
        restore's or a peer's touch of blocks it found is already counted there)."""

    def stored(
        self, store: Any, keys: Sequence[Any], sizes: Sequence[float], held: Sequence[bool]
    ) -> None:
        self.rec.stored(self.engine, self.tier, keys, sizes, held)

    def removed(self, store: Any, keys: Sequence[Any], sizes: Sequence[float], reason: str) -> None:
        self.rec.removed(self.engine, self.tier, keys, sizes, reason)


class ShardWatch(StoreWatch):
    """A sharded remote server's store: only shard 0's keys, logged as block keys."""

    __slots__ = ("shards",)

    def __init__(self, rec: AccessRecorder, engine: int, tier: int, shards: int) -> None:
        super().__init__(rec, engine, tier)
        self.shards = shards

    def stored(
        self, store: Any, keys: Sequence[Any], sizes: Sequence[float], held: Sequence[bool]
    ) -> None:
        S = self.shards
        idx = [i for i, k in enumerate(keys) if k % S == 0]
        if idx:
            self.rec.stored(
                self.engine,
                self.tier,
                [keys[i] // S for i in idx],
                [sizes[i] for i in idx],
                [held[i] for i in idx],
            )

    def removed(self, store: Any, keys: Sequence[Any], sizes: Sequence[float], reason: str) -> None:
        S = self.shards
        idx = [i for i, k in enumerate(keys) if k % S == 0]
        if idx:
            self.rec.removed(
                self.engine,
                self.tier,
                [keys[i] // S for i in idx],
                [sizes[i] for i in idx],
                reason,
            )


def write(df: pd.DataFrame, path: Any) -> None:
    """``accesses.parquet`` (always Parquet, whatever ``--format``: it is the largest
    output, and ``kvsim trace mrc`` reads it)."""
    df.to_parquet(path, index=False)


def check(frame: pd.DataFrame, where: str) -> None:
    """A recorded accesses table as a replay may trust it, or InputError naming ``where``
    (the file) and the first bad row (counted from 0, as ``frame.iloc`` counts): the
    integer columns (``engine``, ``key``, ``request``) integers, ``tier`` one of
    :data:`TIERS`, ``bytes`` finite and >= 0, ``time`` finite, >= 0 and never before the
    row above it (the row order is the event order)."""
    for name in ("engine", "key", "request"):
        if not pd.api.types.is_integer_dtype(frame[name].dtype):
            raise InputError(
                f"column {name} holds {frame[name].dtype}, expected integers "
                "(kvsim run --record-accesses writes int64/int32)",
                where=where,
            )
        missing = np.flatnonzero(frame[name].isna().to_numpy())
        if missing.size:
            raise InputError(f"{name} is missing", where=f"{where}: row {int(missing[0])}")
    for name in ("time", "bytes"):
        if not pd.api.types.is_numeric_dtype(frame[name].dtype) or pd.api.types.is_bool_dtype(
            frame[name].dtype
        ):
            raise InputError(
                f"column {name} holds {frame[name].dtype}, expected numbers", where=where
            )
    tiers = frame["tier"].astype(str).to_numpy()
    _refuse_first(
        ~np.isin(tiers, TIERS), lambda i: f"tier {tiers[i]!r} is not one of {list(TIERS)}", where
    )
    size = frame["bytes"].to_numpy(dtype=np.float64, na_value=np.nan)
    _refuse_first(
        ~(np.isfinite(size) & (size >= 0)),
        lambda i: f"bytes is {float(size[i])!r}; expected a finite size >= 0",
        where,
    )
    time = frame["time"].to_numpy(dtype=np.float64, na_value=np.nan)
    _refuse_first(
        ~(np.isfinite(time) & (time >= 0)),
        lambda i: f"time is {float(time[i])!r} s; expected a finite time >= 0",
        where,
    )
    back = np.flatnonzero(time[1:] < time[:-1])
    if back.size:
        i = int(back[0]) + 1
        now, before = float(time[i]), float(time[i - 1])
        raise InputError(
            f"time {now!r} s is before row {i - 1}'s {before!r} s: rows out of time order "
            "(the row order is the event order; kvsim run --record-accesses writes them so)",
            where=f"{where}: row {i}",
        )


def _refuse_first(bad: np.ndarray, reason: Callable[[int], str], where: str) -> None:
    """InputError at the first row ``bad`` marks (rows counted from 0, as ``iloc``)."""
    rows = np.flatnonzero(bad)
    if rows.size:
        i = int(rows[0])
        raise InputError(reason(i), where=f"{where}: row {i}")
