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
``Lookup.count`` (kvsim/sim/lookup.py) counts into
``summary["tiers"][t]["hits"|"misses"]``: the tiers asked, in lookup order (gpu, host,
nvme, peer, remote), each over the blocks no earlier tier served (in chain order); a
block of the located prefix is a hit in the tier that serves it, every other block a miss
(a block past the prefix misses in every tier asked). Hits are the located prefix before
the load policy's cut.

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
reserving room in the GPU tier (``WorkingPool.take``: evictions, and the demotions they cause)
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

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from kvsim.errors import InputError
from kvsim.sim.recorder import COLUMNS as COLUMNS  # re-exported: the file's columns
from kvsim.sim.recorder import TIERS

#: a user's tier kind's name (kvsim.sim.tiers): a lower-case identifier
TIER_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")

FILE = "accesses.parquet"


def write(df: pd.DataFrame, path: Any) -> None:
    """``accesses.parquet`` (always Parquet, whatever ``--format``: it is the largest
    output, and ``kvsim trace mrc`` reads it)."""
    df.to_parquet(path, index=False)


def check(frame: pd.DataFrame, where: str) -> None:
    """A recorded accesses table as a replay may trust it, or InputError naming ``where``
    (the file) and the first bad row (counted from 0, as ``frame.iloc`` counts): the
    integer columns (``engine``, ``key``, ``request``) integers, ``tier`` one of
    :data:`TIERS` or a tier kind's name, ``bytes`` finite and >= 0, ``time`` finite, >= 0
    and never before the row above it (the row order is the event order)."""
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
    named = np.array([bool(TIER_NAME.fullmatch(t)) for t in tiers.tolist()], dtype=bool)
    _refuse_first(
        ~(np.isin(tiers, TIERS) | named),
        lambda i: f"tier {tiers[i]!r} is not one of {list(TIERS)} nor a tier kind's name",
        where,
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
