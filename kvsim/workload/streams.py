"""Cache replays: access streams, and how any eviction policy serves them at a capacity.

This module owns the replay model behind ``kvsim trace mrc --policy`` and
``kvsim trace reuse``: one mechanism for every policy, so that curves of different
policies are comparable on the very same stream.

A :class:`Stream` is what one block store sees, as a list of operations:

- ``lookup(keys)``: a request asks for a chain of blocks; the hit is the longest prefix
  of the keys held (a prefix cache serves nothing past its first missing block), and the
  hit blocks are touched (a use, as ``BlockStore.touch``);
- ``store(keys, sizes)``: blocks stored or stored again, in order (``insert_many``);
- ``remove(keys)``: blocks deleted (or expired) whatever the policy.

A trace gives, per request, ``lookup(chain)`` then ``store(chain)`` with sizes in tokens
(the last block partial): exactly what one engine with a single LRU tier does, so the
replay of ``lru`` equals :func:`kvsim.workload.mrc.miss_ratio_curve` and counts hit
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
``Engine._count_lookup`` counts: a block of the located prefix is a hit in the tier that
holds it, so a block after a hole in this tier (a block another tier served: FIFO's
holes in a chain) is still a hit here, and a block past the run's located prefix is not.
At the run's own capacity and policy the store holds what the run's did, so on the GPU
tier the replay gives back the run's counts exactly (tests/test_mrc_replay.py). A lower
tier can count a few more hits than the run: a block whose write into the tier has not
landed is held by the store but not used by the run's lookup, and the file has no row
for the landing (README says so; the command prints it). At other capacities the other
tiers are taken as the run had them (a block this tier no longer holds is not assumed
found below it).

Policies are the simulator's own stores: ``lru`` and ``fifo`` from
:func:`kvsim.cache.eviction.make_store`, a plugin through
:class:`kvsim.cache.eviction.Delegated` and :class:`kvsim.sim.hooks.EvictionHook` (a
stand-in for the simulation's hooks gives each block its depth, parent and recompute
cost), and ``opt``: Belady's policy (:func:`_replay_opt`), the bound.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.errors import InputError
from kvsim.workload.request import Request, check_request

LOOKUP, STORE, DELETE, EXPIRE = 0, 1, 2, 3
REASONS = {DELETE: "deleted", EXPIRE: "expired"}
BUILTIN_POLICIES = ("lru", "fifo", "opt")
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
    import pandas as pd

    if isinstance(source, pd.DataFrame):
        frame, where = source, "accesses"
    else:
        path = Path(source)
        if path.is_dir():
            path = path / "accesses.parquet"
        where = str(path)
        if not path.is_file():
            raise InputError("not found (kvsim run --record-accesses writes it)", where=where)
        import pyarrow.parquet as pq

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
    from kvsim.results.accesses import check

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
    if tier not in TIERS:
        raise InputError(f"unknown tier {tier!r}; choose one of {list(TIERS)}", where="--tier")
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


#: The order a lookup asks the tiers in (``Engine._count_lookup``; peer before remote).
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
    import pandas as pd

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


# ---- replays -----------------------------------------------------------------------------


class _ReplayHooks:
    """What :class:`kvsim.sim.hooks.EvictionHook` asks of the simulation's hooks, for a
    replay: each block as a plugin sees it (depth and parent from a trace's chains,
    -1 and None on a recorded stream; recompute seconds from ``recompute``, NaN without
    one; the time of the operation being replayed)."""

    def __init__(
        self, depths: Mapping[int, tuple[int, Any]], recompute: Callable[[int], float] | None
    ) -> None:
        self.depths = depths
        self.recompute = recompute
        self.now = 0.0
        self._costs: dict[int, float] = {}

    def recompute_s(self, depth: int) -> float:
        if self.recompute is None or depth < 0:
            return math.nan
        s = self._costs.get(depth)
        if s is None:
            s = self._costs[depth] = float(self.recompute(depth))
        return s

    def block(self, key: Any, nbytes: float, shards: int = 1) -> Any:
        from kvsim.plugins import Block

        depth, parent = self.depths.get(key, (-1, None))
        return Block(key, float(nbytes), depth, self.recompute_s(depth), parent, -1, self.now)


def _depths(stream: Stream) -> dict[int, tuple[int, Any]]:
    """A trace's block key -> (depth, the key before it), from the first lookup that
    shows it (as the simulation's hooks note them); nothing for a recorded stream, whose
    lookups below the GPU tier start mid-chain."""
    out: dict[int, tuple[int, Any]] = {}
    if not stream.tokens:
        return out
    keys = stream.keys
    for k, s, e in stream.ops():
        if k != LOOKUP:
            continue
        parent = None
        for p in range(s, e):
            b = keys[p]
            if b not in out:
                out[b] = (p - s, parent)
            parent = b
    return out


@dataclass(frozen=True)
class PolicySpec:
    """An eviction policy to replay: ``lru``, ``fifo``, ``opt`` or a plugin's name (from
    the plugin modules ``specs``, made with ``params``)."""

    name: str
    params: Mapping[str, Any] | None = None
    specs: tuple[str, ...] = ()

    def __str__(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in self.params.items())})"

    def __hash__(self) -> int:
        return hash((self.name, str(self), self.specs))


def check_policy(policy: str | PolicySpec) -> PolicySpec:
    """A policy name as a replay takes it; InputError (``--policy``) for an unknown one."""
    spec = policy if isinstance(policy, PolicySpec) else PolicySpec(policy)
    if spec.name in BUILTIN_POLICIES:
        if spec.params:
            raise InputError(f"{spec.name!r} takes no parameters", where="--policy")
        return spec
    from kvsim.plugins import disabled, lookup

    if disabled():
        raise InputError(
            f"eviction policy {spec.name!r} is plugin code, which --no-plugins does not run",
            where="--policy",
        )
    try:
        entry = lookup("eviction", spec.name, list(spec.specs))
    except ValueError as e:
        raise InputError(str(e), where="--policy") from None
    if entry is None:
        from kvsim.plugins import names, scope

        with scope(list(spec.specs)):  # those of the plugins given, not of the process
            known = [*BUILTIN_POLICIES, *names("eviction")[2:]]
        raise InputError(
            f"unknown eviction policy {spec.name!r}; choose one of {known} (a plugin's "
            "policy needs its module: --plugin MODULE)",
            where="--policy",
        )
    from kvsim.plugins import check_params

    try:  # (with none given too: a required parameter missing is named)
        check_params("eviction", spec.name, spec.params, list(spec.specs))
    except ValueError as e:
        param = getattr(e, "param", None)
        raise InputError(
            f"{spec.name}: {f'{param}: ' if param else ''}{e}", where="--policy"
        ) from None
    return spec


def _store(spec: PolicySpec, capacity: float, hooks: _ReplayHooks) -> Any:
    """A fresh store of the policy (a plugin: a new instance of its class)."""
    from kvsim.cache.eviction import POLICIES, Delegated

    cls = POLICIES.get(spec.name)
    if cls is not None:
        return cls(capacity)
    from kvsim.plugins import make
    from kvsim.sim.hooks import EvictionHook

    if spec.params:
        policy, plugin = make("eviction", spec.name, list(spec.specs), spec.params)
    else:
        policy, plugin = make("eviction", spec.name, list(spec.specs))
    hook = EvictionHook(hooks, policy, plugin, "eviction", spec.name, "replay", 1)
    return Delegated(capacity, hook)


def _result(stream: Stream, capacity: float, hit: int, asked: int, tokens: int) -> dict:
    out: dict[str, Any] = {
        "capacity": capacity,
        "hit_blocks": hit,
        "miss_blocks": asked - hit,
    }
    if stream.tokens:
        prompt = stream.prompt_tokens
        out["hit_tokens"] = tokens
        out["hit_ratio"] = float(tokens) / prompt if prompt else 0.0
    else:
        out["hit_ratio"] = hit / asked if asked else 0.0
    return out


def _found(keys: list[int], s: int, e: int, held: Any, located: list[bool] | None) -> list[int]:
    """The lookup rule (module docstring): the positions in ``s:e`` of the blocks that
    ``held`` holds within the located prefix (the blocks held, or found by the run in
    another tier; ``located`` None: held only, a trace's prefix)."""
    p = s
    if located is None:
        while p < e and keys[p] in held:
            p += 1
        return list(range(s, p))
    out = []
    while p < e:
        if keys[p] in held:
            out.append(p)
        elif not located[p]:
            break
        p += 1
    return out


def _replay_store(stream: Stream, store: Any, hooks: _ReplayHooks | None) -> tuple[int, int, int]:
    """(hit blocks, asked blocks, hit tokens) of a stream through a store."""
    keys, sizes = stream.keys, stream.sizes
    blocks = store.blocks
    touch, insert, remove = store.touch, store.insert_many, store.remove
    last_token = stream.tokens
    located = stream.located
    hit = asked = tokens = 0
    times = stream.times
    for i, (kind, s, e) in enumerate(stream.ops()):
        if hooks is not None:
            hooks.now = times[i]
        if kind == LOOKUP:
            if located is None:  # a trace: the found blocks are a prefix, tokens count
                p = s
                while p < e and keys[p] in blocks:
                    p += 1
                if p > s:
                    touch(keys[s:p])
                    hit += p - s
                    if last_token:
                        tokens += int(sum(sizes[s:p])) - (p == e)
            else:
                found = _found(keys, s, e, blocks, located)
                j = 0
                while j < len(found):  # touched in runs, as the run's lookup does
                    q = j + 1
                    while q < len(found) and found[q] == found[q - 1] + 1:
                        q += 1
                    touch(keys[found[j] : found[q - 1] + 1])
                    j = q
                hit += len(found)
            asked += e - s
        elif kind == STORE:
            insert(keys[s:e], sizes[s:e])
        else:
            reason = REASONS[kind]
            for p in range(s, e):
                remove(keys[p], reason)
    return hit, asked, tokens


def _replay_opt(stream: Stream, capacity: float) -> tuple[int, int, int]:
    """Belady's policy: when room is needed, evict the held block whose next lookup is
    farthest (a block never asked again first); a new block whose next lookup is farther
    than every held block's it would displace is not stored at all (bypass).

    Next uses are positions (:meth:`Stream.next_use`), so on a tie of lookups the
    deepest block goes first. Since a lookup that asks for a block asks for its parent
    too (on a trace), a parent's next use is never after its child's: Belady never holds
    a child without its parent when both are asked, every block it holds is usable, and
    with all blocks the same size its block hits are the optimum (it is the optimum of
    the relaxed problem that counts every held block asked as a hit). With blocks of
    different sizes (a trace's partial last block, bytes of a recorded stream) it is
    the usual heuristic bound, not proven optimal; a recorded lower tier's lookups may
    start mid-chain, where the parent rule does not hold."""
    keys, sizes = stream.keys, stream.sizes
    nxt = stream.next_use()
    held: dict[int, int] = {}  # key -> its next use
    held_size: dict[int, float] = {}
    heap: list[tuple[int, int]] = []  # (-next use, key); stale entries skipped
    used = 0.0
    hit = asked = tokens = 0
    last_token = stream.tokens
    located = stream.located
    push, pop = heapq.heappush, heapq.heappop
    for kind, s, e in stream.ops():
        if kind == LOOKUP:
            found = _found(keys, s, e, held, located)
            for p in found:
                k = keys[p]
                q = nxt[p]
                held[k] = q
                push(heap, (-q, k))
            if found:
                hit += len(found)
                if last_token:  # a trace's are a prefix
                    p = s + len(found)
                    tokens += int(sum(sizes[s:p])) - (p == e)
            asked += e - s
        elif kind == STORE:
            for p in range(s, e):
                k = keys[p]
                q = nxt[p]
                old = held.get(k)
                if old is not None:
                    if old != q:
                        held[k] = q
                        push(heap, (-q, k))
                    continue
                w = sizes[p]
                if w > capacity:
                    continue
                stored = True
                while used + w > capacity:
                    while True:
                        neg, v = heap[0]
                        if held.get(v) == -neg:
                            break
                        pop(heap)
                    if -neg <= q:  # the new block is needed last: keep it out
                        stored = False
                        break
                    pop(heap)
                    del held[v]
                    used -= held_size.pop(v)
                if stored:
                    held[k] = q
                    held_size[k] = w
                    used += w
                    push(heap, (-q, k))
                    if len(heap) > 2 * len(held) + 1024:
                        heap = [(-n, b) for b, n in held.items()]
                        heapq.heapify(heap)
        else:
            for p in range(s, e):
                k = keys[p]
                if k in held:
                    del held[k]
                    used -= held_size.pop(k)
    return hit, asked, tokens


def replay(
    stream: Stream,
    policy: str | PolicySpec,
    capacities: Sequence[float],
    recompute: Callable[[int], float] | None = None,
) -> list[dict]:
    """The stream through a fresh store of the policy at each capacity (tokens for a
    trace, bytes for a recorded stream): per capacity ``capacity``, ``hit_blocks``,
    ``miss_blocks``, ``hit_ratio`` (a trace: hit tokens / prompt tokens, with
    ``hit_tokens``; a recorded stream: hit blocks / blocks asked). ``recompute``: a
    block depth's recompute seconds, for plugins that read ``Block.recompute_s``."""
    spec = check_policy(policy)
    out = []
    depths: dict[int, tuple[int, Any]] | None = None
    for c in capacities:
        if spec.name == "opt":
            counts = _replay_opt(stream, float(c))
        elif spec.name in ("lru", "fifo"):
            counts = _replay_store(stream, _store(spec, float(c), _ReplayHooks({}, None)), None)
        else:
            if depths is None:
                depths = _depths(stream)
            hooks = _ReplayHooks(depths, recompute)
            store = _store(spec, float(c), hooks)
            _setup(store.hook, stream, hooks)
            counts = _replay_store(stream, store, hooks)
        out.append(_result(stream, c, *counts))
    return out


def _setup(hook: Any, stream: Stream, hooks: _ReplayHooks) -> None:
    """Call the plugin's ``setup`` with a view of the replay: its clock, no engines, no
    remote store, the block size (a trace's), recompute seconds by depth."""
    from kvsim.plugins import SimView

    view = SimView(
        lambda: hooks.now, [], None, stream.block_tokens, float(stream.block_tokens),
        hooks.recompute_s,
    )  # fmt: skip
    hook.call("setup", view, optional=True)


def replay_streams(
    streams: Sequence[Stream],
    policy: str | PolicySpec,
    capacities: Sequence[float],
    recompute: Callable[[int], float] | None = None,
) -> list[dict]:
    """Several stores (one per engine), each of every capacity, hits and misses summed
    per capacity; the hit ratio of the sum."""
    total: list[dict] | None = None
    for stream in streams:
        rows = replay(stream, policy, capacities, recompute)
        if total is None:
            total = rows
            continue
        for t, r in zip(total, rows, strict=True):
            for k in ("hit_blocks", "miss_blocks", "hit_tokens"):
                if k in t:
                    t[k] += r[k]
    if total is None:
        return [{"capacity": c, "hit_blocks": 0, "miss_blocks": 0, "hit_ratio": 0.0}
                for c in capacities]  # fmt: skip
    for t in total:
        asked = t["hit_blocks"] + t["miss_blocks"]
        t["hit_ratio"] = t["hit_blocks"] / asked if asked else 0.0
    return total


def replay_accesses(
    source: str | Path | Any,
    tier: str,
    engine: int | None,
    policy: str | PolicySpec,
    capacities: Sequence[float],
) -> list[dict]:
    """A recorded run's stream of one tier (``engine``: one engine's; None: every
    engine's in its own store, summed) through ``policy`` at each capacity (bytes): per
    capacity ``capacity_bytes``, ``hit_ratio`` (hits / blocks asked, as the summary's
    ``tiers.<tier>.hits/misses`` count), ``hit_blocks``, ``miss_blocks``."""
    streams = accesses_streams(source, tier, engine)
    rows = replay_streams(streams, policy, capacities)
    return [
        {
            "capacity_bytes": r["capacity"],
            "hit_ratio": r["hit_ratio"],
            "hit_blocks": r["hit_blocks"],
            "miss_blocks": r["miss_blocks"],
        }
        for r in rows
    ]


# ---- reuse distances ---------------------------------------------------------------------


@dataclass(frozen=True)
class ReuseHistogram:
    """LRU stack distances of the blocks asked: for each block a lookup asks for, the
    distinct blocks used (asked or stored) since its last use, itself included. An LRU
    store of C equal blocks holds it exactly when the distance is at most C (ignoring
    the prefix rule). ``bins[i]`` counts distances in [2**i, 2**(i+1)); ``cold``: first
    uses (no distance)."""

    bins: list[int]
    cold: int

    @property
    def references(self) -> int:
        return sum(self.bins) + self.cold

    def rows(self) -> list[dict[str, Any]]:
        """One row a bin: ``low``, ``high`` (distances low..high), ``count``, ``share``
        (of all references); then ``cold`` as a row with ``low`` None."""
        n = self.references
        out: list[dict[str, Any]] = [
            {"low": 1 << i, "high": (1 << (i + 1)) - 1, "count": c, "share": c / n if n else 0.0}
            for i, c in enumerate(self.bins)
        ]
        out.append(
            {"low": None, "high": None, "count": self.cold, "share": self.cold / n if n else 0.0}
        )
        return out


def reuse_histogram(streams: Iterable[Stream]) -> ReuseHistogram:
    """Stack distances of every stream's lookups (each stream its own store), binned by
    powers of two. A trace's store of a request's chain right after its lookup changes no
    distance, so a trace counts its lookups alone. One Fenwick tree over use positions
    (each distinct block marked at its last use): O(log n) a use."""
    bins = [0] * 64
    cold = 0
    for stream in streams:
        keys = stream.keys
        uses = sum(
            e - s for k, s, e in stream.ops() if k == LOOKUP or (k == STORE and not stream.tokens)
        )
        size = uses + 1
        tree = [0] * (size + 1)
        last: dict[int, int] = {}
        t = 0
        marked = 0  # distinct blocks marked in the tree
        for k, s, e in stream.ops():
            if k == STORE and stream.tokens:
                continue
            if k not in (LOOKUP, STORE):
                continue
            asked = k == LOOKUP
            for p in range(s, e):
                b = keys[p]
                t += 1
                q = last.get(b)
                if q is None:
                    marked += 1
                    if asked:
                        cold += 1
                else:
                    if asked:  # distinct blocks marked after q: marked - prefix(q) + 1
                        x, before = q, 0
                        while x > 0:
                            before += tree[x]
                            x &= x - 1
                        d = marked - before + 1  # marks after q, and itself
                        bins[d.bit_length() - 1] += 1
                    x = q
                    while x <= size:
                        tree[x] -= 1
                        x += x & -x
                last[b] = t
                x = t
                while x <= size:
                    tree[x] += 1
                    x += x & -x
    while len(bins) > 1 and bins[-1] == 0:
        bins.pop()
    return ReuseHistogram(bins, cold)
