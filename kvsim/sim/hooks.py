"""Where policy names become policies: built-in ones, and plugins wrapped in guard rails.

:class:`Hooks` is the one factory the simulation asks for every policy a scenario names
(eviction and admission per tier, the router, the scheduler, the load and prefetch
policies). A built-in name gives the compiled class; a plugin name (see
:mod:`kvsim.plugins`) gives the compiled core's delegating class with a hook from this
module. A hook turns the core's calls into the plugin's interface (read-only views,
blocks with their prefix depth and recompute cost), checks each answer against the rule
it must keep (a victim is resident, a route names an engine that is up, a load restores
no more blocks than hit...), and turns any failure into one :class:`PluginError` naming
the plugin, the method and the broken rule. This module is plain Python: the calls into
plugins are interpreted anyway.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

from kvsim.cache.eviction import (
    POLICIES,
    BlockStore,
    Delegated,
    DelegatedGate,
    Gate,
    SecondHit,
)
from kvsim.physics.step import lone_seconds
from kvsim.plugins import (
    BUILTIN,
    Block,
    EngineView,
    PluginError,
    RequestView,
    SimView,
    TierView,
    load_plugins,
    make,
)
from kvsim.sim.policy import LOAD_POLICIES
from kvsim.sim.policy import LoadPolicy as CoreLoadPolicy
from kvsim.sim.router import ROUTERS, Router
from kvsim.sim.router import Delegated as DelegatedRouter

if TYPE_CHECKING:
    from kvsim.sim.shared import Shared

TIER_NAMES = ("gpu", "host", "nvme", "remote")


class Hook:
    """One plugin policy instance, and how to name it in a message."""

    def __init__(self, policy: Any, plugin: str, kind: str, name: str, at: str = "") -> None:
        self.policy = policy
        self.where = f"plugin {plugin} ({kind} {name!r}{' on ' + at if at else ''})"

    def call(self, method: str, *args: Any) -> Any:
        """The plugin's method, with its exceptions turned into one PluginError."""
        fn = getattr(self.policy, method, None)
        if fn is None or not callable(fn):
            raise PluginError(f"it has no method {method}()", where=self.where)
        try:
            return fn(*args)
        except PluginError:
            raise
        except Exception as e:
            raise PluginError(
                f"{method}() raised {type(e).__name__}: {e}", where=self.where
            ) from None

    def broken(self, method: str, rule: str) -> PluginError:
        return PluginError(f"{method}() broke a rule: {rule}", where=self.where)


def _is_bool(value: Any) -> bool:
    """True or False (NumPy's too), not a number that happens to be 0 or 1."""
    return isinstance(value, bool) or type(value).__name__ == "bool_"


def _flag(hook: Hook, attr: str, value: Any) -> bool:
    """A policy's class attribute that must be True or False."""
    if not _is_bool(value):
        raise PluginError(
            f"its attribute {attr} broke a rule: must be True or False, got {value!r}",
            where=hook.where,
        )
    return bool(value)


def _count(hook: Hook, method: str, value: Any, most: int, what: str) -> int:
    """A plugin's answer that must be a whole number in [0, most]."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise hook.broken(method, f"returned {value!r}; expected an int (a number of blocks)")
    n = int(value)
    if n < 0:
        raise hook.broken(method, f"returned {n}; a number of blocks is never negative")
    if n > most:
        raise hook.broken(method, f"returned {n}, more blocks than the {most} {what}")
    return n


class StoreHook(Hook):
    """A plugin policy of one block store (a tier of one engine, or a remote server)."""

    def __init__(
        self, hooks: Hooks, policy: Any, plugin: str, kind: str, name: str, tier: str, shards: int
    ) -> None:
        super().__init__(policy, plugin, kind, name, tier)
        self.hooks = hooks
        self.tier = tier
        self.shards = shards  # a remote server keeps `shards` keys per block
        self.view: TierView | None = None

    def _view(self, store: BlockStore | None) -> TierView | None:
        if self.view is None and store is not None:
            self.view = TierView(store, self.tier)
        return self.view


class EvictionHook(StoreHook):
    """What a :class:`~kvsim.cache.eviction.Delegated` store calls."""

    def _block(self, store: BlockStore, key: Any) -> Block:
        return self.hooks.block(key, store.blocks[key].size, self.shards)

    def inserted(self, store: BlockStore, key: Any) -> None:
        self.call("inserted", self._block(store, key))

    def hit(self, store: BlockStore, key: Any) -> None:
        self.call("hit", self._block(store, key))

    def removed(self, store: BlockStore, key: Any) -> None:
        self.call("removed", key)

    def victim(self, store: BlockStore) -> Any:
        key = self.call("victim", self._view(store))
        try:
            resident = key in store.blocks
        except TypeError:  # unhashable
            resident = False
        if not resident:
            raise self.broken(
                "victim", f"returned {key!r}, which is not a block resident in {self.tier}"
            )
        return key


class AdmissionHook(StoreHook):
    """What a :class:`~kvsim.cache.eviction.DelegatedGate` calls."""

    store: BlockStore | None = None  # the tier's store (None: the remote store's servers)

    def admit(self, key: Any, nbytes: float) -> bool:
        view = self._view(self.store)
        ok = self.call("admit", self.hooks.block(key, nbytes, self.shards), view)
        if not _is_bool(ok):
            raise self.broken("admit", f"returned {ok!r}; expected True or False")
        return bool(ok)


class RouterHook(Hook):
    """What a :class:`~kvsim.sim.router.Delegated` router calls."""

    def __init__(self, hooks: Hooks, policy: Any, plugin: str, name: str) -> None:
        super().__init__(policy, plugin, "router", name)
        self.hooks = hooks

    def route(self, job: Any, engines: Sequence[Any]) -> Any:
        views = [self.hooks.engine_view(e) for e in engines]
        got = self.call("route", RequestView(job), views)
        if isinstance(got, EngineView):
            index: Any = got.index
        elif isinstance(got, Integral) and not isinstance(got, bool):
            index = int(got)
        else:
            raise self.broken("route", f"returned {got!r}; expected an EngineView or its index")
        for e in engines:
            if e.index == index:
                return e
        up = [e.index for e in engines]
        raise self.broken(
            "route", f"returned engine {index}, which is not an engine that is up ({up})"
        )


class LoadHook(CoreLoadPolicy):
    """A plugin load policy as the core's :class:`~kvsim.sim.policy.LoadPolicy`."""

    def __init__(self, policy: Any, plugin: str, name: str) -> None:
        self.hook = Hook(policy, plugin, "load_policy", name)
        self.name = name
        self.blocking = _flag(self.hook, "blocking", getattr(policy, "blocking", True))
        self.lower_tiers = _flag(self.hook, "lower_tiers", getattr(policy, "lower_tiers", True))

    def restore_blocks(
        self, src: Sequence[int], estimate: Callable[[int], float], job: object = None
    ) -> int:
        n = len(src)
        sources = [TIER_NAMES[t] for t in src]
        got = self.hook.call("restore_blocks", RequestView(job), sources, estimate)
        return _count(self.hook, "restore_blocks", got, n, "hit")


class PrefetchHook(Hook):
    """A plugin prefetch policy: how much of a request's prefix to fetch into host."""

    def __init__(self, policy: Any, plugin: str, name: str) -> None:
        super().__init__(policy, plugin, "prefetch", name)
        self.wait = _flag(self, "wait", getattr(policy, "wait", False))

    def fetch_blocks(self, job: Any, src: Sequence[int]) -> int:
        sources = [TIER_NAMES[t] for t in src]
        got = self.call("fetch_blocks", RequestView(job), sources)
        return _count(self, "fetch_blocks", got, len(src), "in the usable prefix")


class SchedulerHook(Hook):
    """A plugin scheduler: a request's priority when it joins an engine's queue."""

    def __init__(self, hooks: Hooks, policy: Any, plugin: str, name: str) -> None:
        super().__init__(policy, plugin, "scheduler", name)
        self.hooks = hooks

    def bind(self, engine: Any) -> Callable[[Any], float]:
        view = self.hooks.engine_view(engine)

        def priority(job: Any) -> float:
            got = self.call("priority", RequestView(job), view)
            if isinstance(got, bool) or not isinstance(got, Real) or not math.isfinite(got):
                raise self.broken("priority", f"returned {got!r}; expected a finite number")
            return float(got)

        return priority


class Hooks:
    """Every policy of one simulation, by the names its scenario gives."""

    def __init__(self, ctx: Shared) -> None:
        self.ctx = ctx
        # a Scenario built elsewhere (unpickled in a worker) has not imported them here
        load_plugins(ctx.scenario.plugins, "plugins")
        self.made: list[Hook] = []  # every plugin instance (setup() is called on each)
        # block key -> (prefix depth, the key before it), for eviction and admission
        # plugins (None: there are none)
        self.depths: dict[Any, tuple[int, Any]] | None = None
        self._views: dict[int, EngineView] = {}
        self._recompute: list[float] = []
        self.tenant_of: Callable[[Any], int] = lambda key: -1

    def _make(self, kind: str, name: str) -> tuple[Any, str]:
        policy, plugin = make(kind, name, self.ctx.scenario.plugins)
        self.made.append(Hook(policy, plugin, kind, name))
        return policy, plugin

    # ---- the factories ---------------------------------------------------------------

    def store(self, name: str, capacity: float, tier: str, shards: int = 1) -> BlockStore:
        """A block store with the named eviction policy."""
        cls = POLICIES.get(name)
        if cls is not None:
            return cls(capacity)
        policy, plugin = self._make("eviction", name)
        self.depths = {} if self.depths is None else self.depths
        hook = EvictionHook(self, policy, plugin, "eviction", name, tier, shards)
        return Delegated(capacity, hook)

    def gate(
        self,
        name: str,
        capacity: float,
        tier: str,
        store: BlockStore | None = None,
        shards: int = 1,
    ) -> Gate | None:
        """A tier's admission filter (``store``: the tier's, for the plugin's view): None
        (admit all), second-hit with a ghost list as long as the tier holds full blocks,
        or a plugin."""
        if name == "all":
            return None
        if name == "second_hit":
            ctx = self.ctx
            return SecondHit(int(capacity // (ctx.block_tokens * ctx.kv_bytes)))
        policy, plugin = self._make("admission", name)
        self.depths = {} if self.depths is None else self.depths
        hook = AdmissionHook(self, policy, plugin, "admission", name, tier, shards)
        hook.store = store
        return DelegatedGate(hook)

    def router(self, name: str, engines: Sequence[Any], slack: int) -> Router:
        cls = ROUTERS.get(name)
        if cls is not None:
            return cls(engines, slack)
        policy, plugin = self._make("router", name)
        return DelegatedRouter(engines, RouterHook(self, policy, plugin, name))

    def load_policy(self, name: str) -> CoreLoadPolicy:
        builtin = LOAD_POLICIES.get(name)
        if builtin is not None:
            return builtin
        policy, plugin = self._make("load_policy", name)
        return LoadHook(policy, plugin, name)

    def prefetch(self, name: str) -> PrefetchHook | None:
        """None for the built-in prefetch policies."""
        if name in BUILTIN["prefetch"]:
            return None
        policy, plugin = self._make("prefetch", name)
        return PrefetchHook(policy, plugin, name)

    def scheduler(self, name: str) -> SchedulerHook | None:
        """None for the built-in schedulers."""
        if name in BUILTIN["scheduler"]:
            return None
        policy, plugin = self._make("scheduler", name)
        return SchedulerHook(self, policy, plugin, name)

    # ---- what plugins see ------------------------------------------------------------

    def engine_view(self, engine: Any) -> EngineView:
        view = self._views.get(id(engine))
        if view is None:
            view = self._views[id(engine)] = EngineView(engine)
        return view

    def note(self, keys: Sequence[Any]) -> None:
        """A request's keys: each block's depth is its place in the chain (an id means
        one prefix, so the first request to show a key gives its depth and parent)."""
        depths = self.depths
        assert depths is not None
        parent = None
        for i, k in enumerate(keys):
            if k not in depths:
                depths[k] = (i, parent)
            parent = k

    def recompute_s(self, depth: int) -> float:
        """Prefill seconds of one full block at ``depth`` (lone request; memoised)."""
        if depth < 0:
            return math.nan
        table = self._recompute
        ctx = self.ctx
        b = ctx.block_tokens
        while len(table) <= depth:
            d = len(table)
            table.append(lone_seconds(ctx.steps, b, d * b, ctx.per_step))
        return table[depth]

    def block(self, key: Any, nbytes: float, shards: int = 1) -> Block:
        block_key = key // shards if shards > 1 else key
        depths = self.depths
        depth, parent = depths.get(block_key, (-1, None)) if depths is not None else (-1, None)
        if parent is not None and shards > 1:  # the same shard of the block before
            parent = parent * shards + key % shards
        return Block(
            key,
            float(nbytes),
            depth,
            self.recompute_s(depth),
            parent,
            self.tenant_of(block_key),
            float(self.ctx.env.now),
        )

    def setup(self, engines: Sequence[Any], remote: Any) -> None:
        """Give every plugin its :class:`SimView` (once the simulation is built)."""
        if not self.made:
            return
        ctx = self.ctx
        env = ctx.env
        view = SimView(
            lambda: float(env.now),
            [self.engine_view(e) for e in engines],
            remote,
            ctx.block_tokens,
            ctx.block_tokens * ctx.kv_bytes,
            self.recompute_s,
        )
        for hook in self.made:
            if callable(getattr(hook.policy, "setup", None)):
                hook.call("setup", view)
