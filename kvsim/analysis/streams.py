"""Access streams: the block operations one store sees, from a trace or a recorded run.

This module owns the stream model behind ``kvsim trace mrc --policy`` and
``kvsim trace reuse`` (replayed by :mod:`kvsim.analysis.replay`, measured by
:mod:`kvsim.analysis.reuse`): one mechanism for every policy, so that curves of
different policies are comparable on the very same stream.

A :class:`Stream` is what one block store sees, as a list of operations:

- ``lookup(keys)``: a request asks for a chain of blocks; the hit is the longest prefix
  of the keys held (a prefix cache serves nothing past its first missing block), and the
  hit blocks are touched (a use, as ``BlockStore.touch``);
- ``store(keys, sizes)``: blocks stored or stored again, in order (``insert_many``);
- ``remove(keys)``: blocks deleted (or expired) whatever the policy.

A trace gives, per request, ``lookup(chain)`` then ``store(chain)`` with sizes in tokens
(the last block partial): exactly what one engine with a single LRU tier does, so the
replay of ``lru`` equals :func:`kvsim.analysis.mrc.miss_ratio_curve` and counts hit
tokens with the simulator's rule (the prompt's last token is always computed). A
recorded ``accesses.parquet`` (``kvsim run --record-accesses``) gives one stream per
engine and tier: lookups from consecutive hit/miss rows of one request, stores from
insert/refresh rows, removes from delete/expire rows; evict rows are what a policy
decides, so the replay ignores them. Its hit ratio is in blocks, hits / (hits + misses),
as the summary's ``tiers.<tier>.hits/misses`` count.

The lookup rule (one rule, :func:`_found`): a lookup finds the blocks the store holds
within its *located prefix*, the longest prefix of the chain whose every block is held
by the store or was found in another tier. A trace has no other tier (one store is the
whole cache): the located prefix is the held prefix. A recorded lookup carries, per
block, whether the run found it in another tier (``Stream.located``, from the hit rows
of the same lookup in the other tiers: :func:`lookup_located`), as
``Lookup.count`` (kvsim.sim.lookup) counts: a block of the located prefix is a hit in the tier that
holds it, so a block after a hole in this tier (a block another tier served: FIFO's
holes in a chain) is still a hit here, and a block past the run's located prefix is not.
At the run's own capacity and policy the store holds what the run's did, so on the GPU
tier the replay gives back the run's counts exactly (tests/test_mrc_replay.py). A lower
tier can count a few more hits than the run: a block whose write into the tier has not
landed is held by the store but not used by the run's lookup, and the file has no row
for the landing (README says so; the command prints it). At other capacities the other
tiers are taken as the run had them (a block this tier no longer holds is not assumed
found below it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from kvsim.errors import InputError
from kvsim.results.accesses import TIER_NAME, check
from kvsim.workload.request import Request, check_request

LOOKUP, STORE, DELETE, EXPIRE = 0, 1, 2, 3
REASONS = {DELETE: "deleted", EXPIRE: "expired"}
TIERS = ("gpu", "host", "nvme", "remote")
COLUMNS = ("time", "engine", "tier", "key", "bytes", "event", "request")
EVENTS = {
    "hit": LOOKUP,
    "miss": LOOKUP,
    "insert": STORE,
    "refresh": STORE,
    "delete": DELETE,
    "expire": EXPIRE,
    "evict": -1,  # what the recorded policy decided: an output, not an input
}
NEVER = 1 << 62  # the next use of a block that is never asked for again


@dataclass
class Stream:
    """The operations one store sees. Operation ``i`` is ``kinds[i]`` over the keys
    ``keys[starts[i]:ends[i]]`` (a trace's lookup and store of one request share their
    range). ``tokens``: sizes are tokens of a trace, and a lookup's hit tokens follow the
    simulator's rule (the prompt's last token is always computed)."""

    kinds: list[int]
    starts: list[int]
    ends: list[int]
    times: list[float]
    keys: list[int]
    sizes: list[float]
    tokens: bool = False
    block_tokens: int = 0  # a trace's block size (0: a recorded stream)
    label: str = ""  # what it is, for messages and titles (e.g. "engine 0")
    prompt_tokens: int = 0  # a trace's prompt tokens (every lookup's sizes)
    # a recorded stream: per key position of a lookup, whether the run found the block
    # in another tier (None: a trace, one store, nothing found elsewhere)
    located: list[bool] | None = None
    _next: list[int] | None = field(default=None, repr=False)

    def ops(self) -> Iterator[tuple[int, int, int]]:
        """(kind, start, end) of each operation, in order."""
        return zip(self.kinds, self.starts, self.ends, strict=True)

    def working_set(self) -> float:
        """Sizes of the distinct blocks stored (each at its first size, as a store keeps
        it): the smallest capacity that never evicts."""
        seen: dict[int, float] = {}
        keys, sizes = self.keys, self.sizes
        for k, s, e in self.ops():
            if k == STORE:
                for p in range(s, e):
                    seen.setdefault(keys[p], sizes[p])
        return float(sum(seen.values()))

    def largest_block(self) -> float:
        return float(max(self.sizes, default=0.0))

    def next_use(self) -> list[int]:
        """For each key position, the position of the next lookup that asks for that key
        (:data:`NEVER` if none): the order Belady's policy evicts in. A position is later
        in the stream than every position of an earlier operation, and deeper in its
        chain than the positions before it in the same lookup, so the farthest next use
        is also the deepest block of a lookup on a tie of operations."""
        if self._next is not None:
            return self._next
        n = len(self.keys)
        keys = np.asarray(self.keys, dtype=np.int64)
        asked = np.zeros(n, dtype=bool)
        for k, s, e in self.ops():
            if k == LOOKUP:
                asked[s:e] = True
        # a position's next lookup is in a later operation (a trace's store shares its
        # lookup's positions: the next lookup after either is the same)
        order = np.lexsort((np.arange(n), keys))
        sk = keys[order]
        big = np.int64(n)
        idx = np.where(asked[order], np.arange(n, dtype=np.int64), big)
        # nxt[j]: the smallest i > j in sorted order that is a lookup position
        nxt = np.minimum.accumulate(np.append(idx, big)[1:][::-1])[::-1]
        ok = nxt < n
        ok[ok] = sk[nxt[ok]] == sk[ok]
        out = np.full(n, NEVER, dtype=np.int64)
        out[order[ok]] = order[nxt[ok]]
        self._next = out.tolist()
        return self._next


# ---- streams from a trace ----------------------------------------------------------------


class TraceStreamBuilder:
    """A trace's stream, built while the requests pass by (so that one read of a trace
    gives both the one-pass LRU curve and the stream the other policies replay)."""

    def __init__(self, block_tokens: int) -> None:
        self.block = block_tokens
        self.kinds: list[int] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.times: list[float] = []
        self.keys: list[int] = []
        self.sizes: list[float] = []

    def add(self, r: Request) -> None:
        block = self.block
        ids = r.hash_ids
        n = len(ids)
        tail = r.input_tokens - (n - 1) * block
        if not 0 < tail <= block:
            check_request(r, block)  # hash_ids do not fit input_tokens: says so
        keys = self.keys
        s = len(keys)
        keys.extend(ids)
        self.sizes.extend([block] * (n - 1))
        self.sizes.append(tail)
        e = len(keys)
        self.kinds += (LOOKUP, STORE)
        self.starts += (s, s)
        self.ends += (e, e)
        self.times += (r.arrival, r.arrival)

    def passing(self, requests: Iterable[Request]) -> Iterator[Request]:
        """The requests, each added to the stream as it goes by."""
        for r in requests:
            self.add(r)
            yield r

    def stream(self) -> Stream:
        prompt = int(sum(self.sizes))
        return Stream(
            self.kinds, self.starts, self.ends, self.times, self.keys, self.sizes,
            True, self.block, "trace", prompt,
        )  # fmt: skip


def trace_stream(requests: Iterable[Request], block_tokens: int) -> Stream:
    """A trace as one engine with one tier sees it: per request, ``lookup(chain)`` then
    ``store(chain)``, sizes in tokens (the last block holds the prompt's remainder)."""
    builder = TraceStreamBuilder(block_tokens)
    for r in requests:
        builder.add(r)
    return builder.stream()


# ---- streams from a recorded run ---------------------------------------------------------


def read_accesses(source: str | Path | Any) -> Any:
    """An ``accesses.parquet`` (or a run folder holding one, or a DataFrame) as a
    DataFrame with the columns a replay reads; InputError naming what is missing, or the
    file and row of a value a replay cannot trust (:func:`kvsim.results.accesses.check`)."""

    if isinstance(source, pd.DataFrame):
        frame, where = source, "accesses"
    else:
        path = Path(source)
        if path.is_dir():
            path = path / "accesses.parquet"
        where = str(path)
        if not path.is_file():
            raise InputError("not found (kvsim run --record-accesses writes it)", where=where)

        try:
            names = pq.read_schema(path).names
        except Exception as e:  # not a parquet file
            raise InputError(f"cannot read as Parquet ({type(e).__name__})", where=where) from None
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            raise InputError(
                f"missing column(s) {', '.join(missing)}: not an accesses table "
                "(kvsim run --record-accesses)",
                where=where,
            )
        frame = pd.read_parquet(path, columns=list(COLUMNS))
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}", where=where)
    unknown = sorted(set(frame["event"].astype(str).unique()) - set(EVENTS))
    if unknown:
        raise InputError(
            f"unknown event(s) {unknown[:5]}; expected {sorted(EVENTS)}", where=f"{where}: event"
        )
    check(frame, where)
    frame.attrs["where"] = where
    return frame


def accesses_streams(
    source: str | Path | Any, tier: str = "gpu", engine: int | None = None
) -> list[Stream]:
    """The streams one tier's stores saw in a recorded run, in the file's row order (the
    event order): one per engine (``engine``: that engine's alone), or for ``remote`` the
    one shared store (every engine's lookups and the store's own events)."""
    frame = read_accesses(source)
    where = frame.attrs.get("where", "accesses")
    if tier == "peer" or not (tier in TIERS or TIER_NAME.fullmatch(tier)):
        raise InputError(
            f"unknown tier {tier!r}; choose one of {list(TIERS)}, or a tier kind's name",
            where="--tier",
        )
    tiers = frame["tier"].astype(str).to_numpy()
    mine = tiers == tier
    if not mine.any():
        there = sorted(set(tiers.tolist()))
        raise InputError(
            f"no rows for tier {tier!r} (the file has {there or 'no rows'})", where=where
        )
    engines = frame["engine"].to_numpy().astype(np.int64)
    if tier == "remote":
        if engine is not None:
            raise InputError(
                "the remote store is shared by every engine: replay it whole (no --engine)",
                where="--engine",
            )
        groups = [(mine, "remote store")]
    else:
        present = sorted(set(engines[mine].tolist()))
        if engine is not None:
            if engine not in present:
                raise InputError(
                    f"no {tier} rows for engine {engine} (engines there: {present})",
                    where="--engine",
                )
            present = [engine]
        groups = [(mine & (engines == e), f"engine {e}") for e in present]
    names = frame["event"].astype(str)
    event = names.map(EVENTS).to_numpy().astype(np.int64)
    key = frame["key"].to_numpy().astype(np.int64)
    size = frame["bytes"].to_numpy().astype(np.float64)
    request = frame["request"].to_numpy().astype(np.int64)
    time = frame["time"].to_numpy().astype(np.float64)
    located = lookup_located(tiers, names.to_numpy() == "hit", event == LOOKUP, key, request, time)
    out = []
    for rows, label in groups:
        keep = rows & (event >= 0)
        out.append(
            _stream_of_rows(
                event[keep], key[keep], size[keep], request[keep], time[keep], f"{tier}, {label}",
                located[keep],
            )
        )  # fmt: skip
    return out


#: The order a lookup asks the tiers in (``Lookup.count`` (kvsim.sim.lookup); peer before remote).
LOOKUP_ORDER = {"gpu": 0, "host": 1, "nvme": 2, "peer": 3, "remote": 4}


def lookup_located(
    tiers: np.ndarray,
    hit: np.ndarray,
    lookup: np.ndarray,
    key: np.ndarray,
    request: np.ndarray,
    time: np.ndarray,
) -> np.ndarray:
    """For each row of a recorded file: a miss row whose block the same lookup found in
    another tier (a hit row of that block in a tier of the same lookup); False otherwise.

    One lookup's rows are written together (``AccessRecorder.lookup``): a run of hit/miss
    rows of one request and time, its tiers in lookup order (gpu first). A new lookup
    starts where a row is not part of the run, its request or time changes, its tier
    comes before the previous row's in lookup order, or its tier asks a key again."""
    n = len(tiers)
    out = np.zeros(n, dtype=bool)
    if not n or not lookup.any():
        return out

    rank = pd.Series(tiers).map(LOOKUP_ORDER).fillna(5).to_numpy(dtype=np.int64)
    cut = np.ones(n, dtype=bool)
    cut[1:] = (
        ~lookup[:-1]
        | (request[1:] != request[:-1])
        | (time[1:] != time[:-1])
        | (rank[1:] < rank[:-1])
    )
    cut &= lookup
    inst = np.cumsum(cut)
    idx = np.flatnonzero(lookup)
    rows = pd.DataFrame({"i": inst[idx], "r": rank[idx], "k": key[idx], "h": hit[idx]})
    again = rows.duplicated(["i", "r", "k"]).to_numpy()
    if again.any():  # a tier asked a key again: the request looked up again (rare)
        bad = set(rows["i"].to_numpy()[again].tolist())
        ids = rows["i"].to_numpy().copy()
        fresh = int(inst[-1]) + 1
        seen: set[tuple[int, int]] = set()
        cur = -1
        triples = zip(ids.tolist(), rows["r"].tolist(), rows["k"].tolist(), strict=True)
        for j, (i, r, k) in enumerate(triples):
            if i not in bad:
                continue
            if i != cur:
                cur, seen, now = i, set(), i
            if (r, k) in seen:
                seen, now, fresh = set(), fresh, fresh + 1
            seen.add((r, k))
            ids[j] = now
        rows["i"] = ids
    anywhere = rows.groupby(["i", "k"], sort=False)["h"].transform("max").to_numpy(dtype=bool)
    out[idx] = anywhere & ~hit[idx]  # a block is a hit in one tier: elsewhere for the rest
    return out


def _stream_of_rows(
    event: np.ndarray, key: np.ndarray, size: np.ndarray, request: np.ndarray,
    time: np.ndarray, label: str, located: np.ndarray,
) -> Stream:  # fmt: skip
    """Rows of one store, in order, as operations: a lookup is a run of hit/miss rows of
    one request (a key asked again starts a new one), a store a run of insert/refresh
    rows, a remove a run of delete (or expire) rows. ``located``: per row, whether the
    run found the block in another tier (:func:`lookup_located`)."""
    n = len(event)
    if n == 0:
        return Stream([], [], [], [], [], [], label=label, located=[])
    cut = np.ones(n, dtype=bool)
    cut[1:] = (event[1:] != event[:-1]) | ((event[1:] == LOOKUP) & (request[1:] != request[:-1]))
    starts = np.flatnonzero(cut).tolist()
    ends = [*starts[1:], n]
    keys = key.tolist()
    kinds: list[int] = []
    s_out: list[int] = []
    e_out: list[int] = []
    for s, e in zip(starts, ends, strict=True):
        k = int(event[s])
        if k == LOOKUP and e - s > 1 and len(set(keys[s:e])) < e - s:
            seen: set[int] = set()  # a key asked again: the request looked up again
            first = s
            for p in range(s, e):
                if keys[p] in seen:
                    kinds.append(k)
                    s_out.append(first)
                    e_out.append(p)
                    seen = set()
                    first = p
                seen.add(keys[p])
            kinds.append(k)
            s_out.append(first)
            e_out.append(e)
        else:
            kinds.append(k)
            s_out.append(s)
            e_out.append(e)
    times = time[s_out].tolist()
    return Stream(
        kinds, s_out, e_out, times, keys, size.tolist(), label=label, located=located.tolist()
    )
