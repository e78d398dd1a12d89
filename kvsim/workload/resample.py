"""Bootstraps of a trace: another sample of the same traffic, drawn by a seed.

Two ways, chosen by ``workload.resample``:

- ``sessions`` (:func:`session_resample`, what ``auto`` picks when several seeds run a
  trace): the trace's **units** (whole sessions, or whole prefix chains where a trace has
  no session ids) are drawn with replacement and laid at the trace's own unit start
  times, each keeping its requests' offsets. Prefix reuse inside a unit and through the
  public prefixes units share (system prompts, shared documents) is kept, so the hit
  ratio of a draw stays that of the trace.
- ``windows`` (:func:`block_resample`): the trace's span is cut into ``windows`` windows
  of equal length; as many are drawn with replacement and laid end to end, each keeping
  its requests' offsets inside it. A window drawn again has its prompts' block ids salted
  (a different but equally shaped prefix tree), so a repeat does not hit the cache its
  first copy filled; prefix reuse across the windows of a first copy is kept, reuse
  across window edges is cut (a draw's hit ratio runs below the trace's).

Either way request ids are renumbered in the new arrival order, and a draw holds about as
many requests as the trace, not exactly as many; with ``keep_count`` (a trace cut at
``limit`` requests) the draw holds exactly as many as the trace, so that ``limit: 100``
replays 100.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter

import numpy as np

from kvsim.rng import stream
from kvsim.workload.request import MAX_HASH, Request

WINDOWS = 40
_SALT = 0x5851F42D4C957F2D  # an odd 63-bit constant: id XOR copy * salt is a bijection
STRATUM_UNITS = 8  # units a slot draws among, at least (session_resample)
FAN = 3  # a block with this many distinct next blocks is where chains branch off


def block_resample(
    requests: Iterable[Request],
    rng: np.random.Generator,
    windows: int = WINDOWS,
    *,
    keep_count: bool = False,
) -> Iterator[Request]:
    """The requests of one block-bootstrap draw (see the module docstring); with
    ``keep_count``, exactly as many as ``requests``."""
    reqs = list(requests)
    if len(reqs) < 2:
        yield from reqs
        return
    t0, t1 = reqs[0].arrival, reqs[-1].arrival
    k = max(1, min(windows, len(reqs)))
    length = (t1 - t0) / k if t1 > t0 else 0.0
    groups: list[list[Request]] = [[] for _ in range(k)]
    for i, r in enumerate(reqs):
        w = int((r.arrival - t0) / length) if length > 0 else i * k // len(reqs)
        groups[min(w, k - 1)].append(r)
    picks = rng.integers(0, k, size=k)
    copies = [0] * k
    rid = 0
    count = len(reqs) if keep_count else None

    def draws() -> Iterator[int]:
        yield from (int(w) for w in picks)
        while count is not None:  # more windows until the draw holds `count` requests
            yield from (int(w) for w in rng.integers(0, k, size=k))

    # a session's turns inside one drawn window stay one session; the same session in
    # another window, or in a repeat of this one, is another (numbered as first seen), so
    # that repeats do not merge into one session spanning the whole draw
    sessions: dict[tuple[int, int, int], int] = {}
    for j, w in enumerate(draws()):
        if count is not None and rid >= count:
            return
        copy = copies[w]
        copies[w] += 1
        for r in groups[w]:
            if count is not None and rid >= count:
                return
            offset = r.arrival - t0 - w * length if length > 0 else 0.0
            ids = r.hash_ids
            if copy:
                mask = (copy * _SALT) % MAX_HASH
                ids = tuple(h ^ mask for h in ids)
            s = r.session
            if s >= 0:
                s = sessions.setdefault((r.tenant, s, j), len(sessions))
            yield r._replace(id=rid, arrival=t0 + j * length + offset, hash_ids=ids, session=s)
            rid += 1


def session_resample(
    requests: Iterable[Request],
    rng: np.random.Generator,
    *,
    keep_count: bool = False,
) -> Iterator[Request]:
    """The requests of one session-bootstrap draw: the trace's units (:func:`units`) drawn
    with replacement, one per unit start time of the trace (a slot), each laid at its
    slot with its requests' offsets kept. A unit drawn again has its private blocks
    salted (public ones kept, so a shared system prompt still hits) and every copy of a
    session gets its own session id. With ``keep_count``, exactly as many requests as
    ``requests`` (further rounds of slots, a trace span later, until there are enough).

    A slot draws among the units that start near it: the units, in start order, are cut
    into up to :data:`WINDOWS` strata of at least :data:`STRATUM_UNITS`, and a slot
    draws from its own stratum. Drawing from all units put whole long sessions at the
    trace's last start times, where the trace has only their first turns (it ends
    there): on the Mooncake conversation trace 4-5% of a draw's requests fell after the
    trace's end (16% on the shipped sample), the replay ran 70% longer and its load
    inside the trace's span ran that much lighter."""
    reqs = list(requests)
    n = len(reqs)
    if n < 2:
        yield from reqs
        return
    members, public = units(reqs)
    starts = [reqs[m[0]].arrival for m in members]  # ascending: units open in arrival order
    span = reqs[-1].arrival - reqs[0].arrival
    shift = span + span / (n - 1)  # a further round of slots starts a mean gap after the end
    k = len(members)
    strata = max(1, min(WINDOWS, k // STRATUM_UNITS))
    bounds = np.arange(strata + 1) * k // strata
    of = np.repeat(np.arange(strata), np.diff(bounds))  # each slot's stratum
    low, high = bounds[of], bounds[of + 1]
    copies = [0] * k
    laid: list[tuple[float, int, Request]] = []
    session = 0
    rounds = 0
    while rounds == 0 or (keep_count and len(laid) < n):
        for j, u in enumerate(rng.integers(low, high).tolist()):
            copy = copies[u]
            copies[u] += 1
            mask = (copy * _SALT) % MAX_HASH
            at = starts[j] + rounds * shift - starts[u]
            placed = False
            for i in members[u]:
                r = reqs[i]
                ids = r.hash_ids
                if copy:
                    ns = r.tenant << 64
                    ids = tuple(h if (h | ns) in public else h ^ mask for h in ids)
                s = -1
                if r.session >= 0:
                    s, placed = session, True
                laid.append((r.arrival + at, len(laid), r._replace(hash_ids=ids, session=s)))
            session += placed
        rounds += 1
    laid.sort()
    for rid, (arrival, _, r) in enumerate(laid[:n] if keep_count else laid):
        yield r._replace(id=rid, arrival=arrival)


def units(reqs: Sequence[Request]) -> tuple[list[list[int]], set[int]]:
    """The trace's bootstrap units and its public blocks.

    Units (lists of request indices, in order of their first request): a request with a
    session id belongs to its (tenant, session); one without belongs to a **prefix
    chain**: it joins the chain of the earlier request it shares its longest prefix
    with, when the shared part reaches past its public prefix (:func:`public_prefix`);
    otherwise (it shares only public blocks, or nothing) it starts a chain of its own.
    On the Mooncake conversation trace (no session ids) chains look like conversations:
    each turn mostly extends the previous one's prompt, minutes apart.

    Public blocks (keys ``id | tenant << 64``): those in a request's ``shared_blocks``
    and those that appear in more than one unit (a system prompt, a shared document).
    A repeated copy of a unit keeps them, so that reuse across units is kept."""
    lead = public_prefix(reqs) if any(r.session < 0 for r in reqs) else None
    owner: dict[int, int] = {}  # block key -> the first unit it appeared in
    public: set[int] = set()
    chain: list[bool] = []  # per unit: a prefix chain (else a session)
    members: list[list[int]] = []
    sessions: dict[tuple[int, int], int] = {}
    for i, r in enumerate(reqs):
        keys = _keys(r)
        # blocks seen before: a leading run (an id stands for its whole prefix, so a seen
        # block's prefix was seen too), found by bisection
        lo, hi = 0, len(keys)
        while lo < hi:
            mid = (lo + hi) // 2
            if keys[mid] in owner:
                lo = mid + 1
            else:
                hi = mid
        d = lo
        u: int | None
        if r.session >= 0:
            u = sessions.get((r.tenant, r.session))
            if u is None:
                u = sessions[(r.tenant, r.session)] = len(members)
        else:
            assert lead is not None
            u = owner[keys[d - 1]] if d > lead[i] else None
            if u is None or not chain[u]:  # a chain never joins a session
                u = len(members)
        if u == len(members):
            members.append([])
            chain.append(r.session < 0)
        members[u].append(i)
        if d:  # seen blocks first seen in another unit are in two units: public
            seen = keys[:d]
            owners = [owner[seen[0]]] if d == 1 else itemgetter(*seen)(owner)
            public.update(itertools.compress(seen, map(u.__ne__, owners)))
        owner.update(dict.fromkeys(keys[d:], u))
        public.update(keys[: r.shared_blocks])
    return members, public


def _keys(r: Request) -> tuple[int, ...]:
    """A request's block keys: its ids in its tenant's namespace (``id | tenant << 64``)."""
    if not r.tenant:
        return r.hash_ids
    t = r.tenant << 64
    return tuple(h | t for h in r.hash_ids)


def public_prefix(reqs: Sequence[Request]) -> list[int]:
    """Per request, how many of its leading blocks are public: its ``shared_blocks``, and
    past them the leading blocks that many prefix chains branch off: a block followed, in
    the whole trace, by at least :data:`FAN` distinct next blocks, or one that leads by
    a straight run (each block with a single next block) into such a block (a shared
    document whose last block is where the chains branch). A conversation's own blocks
    branch at most in two (a turn's partial last block, and the next turn's full one)."""
    parent: dict[int, int] = {}  # block key -> the block before it (an id names a prefix)
    for r in reqs:
        keys = _keys(r)
        parent.update(zip(keys[1:], keys, strict=False))
    children = collections.Counter(parent.values())
    public = {a for a, c in children.items() if c >= FAN}
    for f in list(public):  # up from each branching block, through blocks with one next
        a = parent.get(f)
        while a is not None and children[a] == 1 and a not in public:
            public.add(a)  # (a block seen twice stops a malformed trace's loop)
            a = parent.get(a)

    out = []
    for r in reqs:
        keys = _keys(r)
        p = min(r.shared_blocks, len(keys))
        while p < len(keys) and keys[p] in public:
            p += 1
        out.append(p)
    return out


def prefix_reuse(requests: Iterable[Request]) -> float:
    """The share of prompt blocks already seen earlier in ``requests`` (per tenant): the
    block hit ratio of an infinite prefix cache, the reuse a workload offers (NaN for no
    blocks)."""
    seen: set[int] = set()
    total = hits = 0
    for r in requests:
        t = r.tenant << 64
        for h in r.hash_ids:
            key = h | t
            hits += key in seen
            seen.add(key)
        total += len(r.hash_ids)
    return hits / total if total else float("nan")


def resampled(
    requests: Iterable[Request], how: str, seed: int, keep_count: bool
) -> Iterator[Request]:
    """``requests`` as ``workload.resample: how`` replays them under ``seed`` (``none`` or
    ``auto``: as they are); ``keep_count`` for a trace cut at ``limit`` requests."""
    if how == "sessions":
        return session_resample(requests, stream(seed, "resample"), keep_count=keep_count)
    if how == "windows":
        return block_resample(requests, stream(seed, "resample"), keep_count=keep_count)
    return iter(requests)
