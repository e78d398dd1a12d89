"""The access log's recorder: what a run with ``--record-accesses`` keeps as it runs.

What this module owns: :class:`AccessRecorder`, a listener of the run's metrics collector
(:class:`~kvsim.sim.metrics.Metrics`: the engines' lookups and every block store's
events), kept in compact columns and turned into a DataFrame once, at the end, with the
log's column, tier and event codes. The file's format, and reading it back, are
:mod:`kvsim.results.accesses`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvsim.cache.local import REMOTE
from kvsim.errors import InputError

#: The file's columns, in order.
COLUMNS = ("time", "engine", "tier", "key", "bytes", "event", "request")
#: Tier names by code for the built-in tiers (kvsim.cache.local's tier codes: GPU 0, HOST
#: 1, NVME 2, REMOTE 3, PEER 4); a run with a user's tier kind names its own.
TIERS = ("gpu", "host", "nvme", "remote", "peer")
#: Event names by code.
EVENTS = ("hit", "miss", "insert", "refresh", "evict", "delete", "expire")
HIT, MISS, INSERT, REFRESH, EVICT = 0, 1, 2, 3, 4
_REMOVED = {"evicted": EVICT, "deleted": 5, "expired": 6}


class AccessRecorder:
    """The run's access log, column by column (see the module docstring): a listener of
    the metrics collector (kvsim.sim.metrics.MetricsListener) that hears block events."""

    blocks = True

    def __init__(self, clock: Callable[[], float], tiers: Sequence[str] = TIERS) -> None:
        self.clock = clock
        self.tiers = tuple(tiers)  # tier names by code (the log's categories)
        self.time = array("d")
        self.engine = array("i")
        self.tier = array("b")
        self.key = array("q")
        self.nbytes = array("d")
        self.event = array("b")
        self.req = array("q")

    def __len__(self) -> int:
        return len(self.time)

    def records(self, n: int) -> None:
        """Requests recorded: not the log's business."""

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
        """One lookup's rows (``Lookup.count``): for each tier code in ``asked``
        (lookup order), a row per block that reached it. ``src``: the tier serving each
        block of the located prefix; ``raw``: each block's raw bytes."""
        n = len(keys)
        m = len(src)
        left = list(range(n))  # blocks no earlier tier served, in chain order
        for t in asked:
            scale = ratio[t] / (shards if t == REMOTE else 1)
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
        cause: int,
    ) -> None:
        if len(held) == 1:
            self._rows(engine, tier, keys, sizes, REFRESH if held[0] else INSERT, cause)
            return
        ev = array("b", [REFRESH if h else INSERT for h in held])
        self._rows(engine, tier, keys, sizes, ev, cause)

    def removed(
        self,
        engine: int,
        tier: int,
        keys: Sequence[Any],
        sizes: Sequence[float],
        reason: str,
        cause: int,
    ) -> None:
        self._rows(engine, tier, keys, sizes, _REMOVED[reason], cause)

    # ---- output -----------------------------------------------------------------------

    def frame(self) -> pd.DataFrame:
        """The log as a DataFrame in :data:`COLUMNS` order (tier and event categorical);
        the columns kept so far are released."""
        df = pd.DataFrame(
            {
                "time": np.frombuffer(self.time, dtype=np.float64).copy(),
                "engine": np.frombuffer(self.engine, dtype=np.int32).copy(),
                "tier": pd.Categorical.from_codes(
                    np.frombuffer(self.tier, dtype=np.int8), categories=list(self.tiers)
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
