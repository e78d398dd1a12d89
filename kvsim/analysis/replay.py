"""Replays: how any eviction policy serves an access stream, at each capacity.

This module owns replaying a :class:`~kvsim.analysis.streams.Stream` through a fresh
store per capacity (:func:`replay`, :func:`replay_streams`, :func:`replay_accesses`),
the policies a replay takes (:class:`PolicySpec`, :func:`check_policy`) and Belady's
bound. Policies are the simulator's own stores: ``lru`` and ``fifo`` from
:data:`kvsim.cache.eviction.POLICIES`, a plugin through
:class:`kvsim.cache.delegated.Delegated` and :class:`kvsim.sim.hooks.EvictionHook` (a
stand-in for the simulation's hooks gives each block its depth, parent and recompute
cost), and ``opt``: Belady's policy (:func:`_replay_opt`), the bound.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvsim.analysis.streams import LOOKUP, REASONS, STORE, Stream, accesses_streams
from kvsim.cache.delegated import Delegated
from kvsim.cache.eviction import POLICIES
from kvsim.errors import InputError
from kvsim.plugins.api import Block, SimView
from kvsim.plugins.loading import scope
from kvsim.plugins.registry import disabled
from kvsim.plugins.resolve import check_params, lookup, make, names
from kvsim.sim.hooks import EvictionHook

BUILTIN_POLICIES = ("lru", "fifo", "opt")


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
        with scope(list(spec.specs)):  # those of the plugins given, not of the process
            known = [*BUILTIN_POLICIES, *names("eviction")[2:]]
        raise InputError(
            f"unknown eviction policy {spec.name!r}; choose one of {known} (a plugin's "
            "policy needs its module: --plugin MODULE)",
            where="--policy",
        )
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
    cls = POLICIES.get(spec.name)
    if cls is not None:
        return cls(capacity)
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
