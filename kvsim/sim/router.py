"""Routers: which engine a new request joins. ``ROUTERS`` maps scenario names to classes.

All routers are deterministic: ties go to the lowest engine index. ``engines`` holds the
engines that are up (the simulation updates it when one fails or comes back).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

from kvsim.cache.eviction import Key


class RoutedEngine(Protocol):
    """What a router may look at: load, and how much of a prompt the engine holds locally."""

    index: int
    outstanding: int

    def local_prefix_blocks(self, blocks: Sequence[Key], at_least: int = 0) -> int:
        """The longest locally held prefix in blocks (-1 if shorter than ``at_least``)."""
        ...


class Router:
    """Base: ``pick`` returns the engine for a request's block chain."""

    def __init__(self, engines: Sequence[RoutedEngine], slack: int = 0) -> None:
        if not engines:
            raise ValueError("a router needs at least one engine")
        if slack < 0:
            raise ValueError(f"affinity slack must be >= 0, got {slack}")
        self.engines = list(engines)
        self.slack = slack

    def pick(self, blocks: Sequence[Key], job: object = None) -> RoutedEngine:
        """The engine for a request (``job``, for routers that look beyond its blocks)."""
        raise NotImplementedError


class RoundRobin(Router):
    """Engines in turn, whatever their load."""

    def __init__(self, engines: Sequence[RoutedEngine], slack: int = 0) -> None:
        super().__init__(engines, slack)
        self._next = 0

    def pick(self, blocks: Sequence[Key], job: object = None) -> RoutedEngine:
        n = len(self.engines)  # the engines that are up
        e = self.engines[self._next % n]
        self._next = (self._next + 1) % n
        return e


class LeastLoaded(Router):
    """The engine with the fewest outstanding (queued, loading or running) requests."""

    def pick(self, blocks: Sequence[Key], job: object = None) -> RoutedEngine:
        return min(self.engines, key=lambda e: e.outstanding)


class CacheAffinity(Router):
    """The engine holding the longest prefix locally, unless it is busier than the least
    loaded engine by more than ``slack`` requests; then the least loaded one."""

    def pick(self, blocks: Sequence[Key], job: object = None) -> RoutedEngine:
        engines = self.engines
        loads = [e.outstanding for e in engines]  # (each read once: a lookup by name)
        least = loads[0]
        for load in loads:
            if load < least:
                least = load
        limit = least + self.slack
        best, best_hit, best_load = engines[0], -1, 0
        for i in range(len(engines)):
            load = loads[i]
            if load > limit:
                continue
            e = engines[i]
            # the hit it needs to win: more than the best so far, or as much with less load
            need = best_hit if load < best_load else best_hit + 1
            hit = e.local_prefix_blocks(blocks, need)
            if hit >= need and (hit > best_hit or load < best_load):
                best, best_hit, best_load = e, hit, load
        return best


class Delegated(Router):
    """A plugin router: ``hook`` (a :class:`kvsim.sim.hooks.RouterHook`) asks the
    plugin and checks that the engine it names is one that is up."""

    def __init__(self, engines: Sequence[RoutedEngine], hook: Any) -> None:
        super().__init__(engines)
        self.hook = hook

    def pick(self, blocks: Sequence[Key], job: object = None) -> RoutedEngine:
        return cast(RoutedEngine, self.hook.route(job, self.engines))


ROUTERS: dict[str, type[Router]] = {
    "round_robin": RoundRobin,
    "least_loaded": LeastLoaded,
    "cache_affinity": CacheAffinity,
}


def make_router(name: str, engines: Sequence[RoutedEngine], slack: int = 0) -> Router:
    """A router by scenario name; an unknown name lists the choices."""
    try:
        cls = ROUTERS[name]
    except KeyError:
        raise ValueError(f"unknown router {name!r}; choose one of {sorted(ROUTERS)}") from None
    return cls(engines, slack)
