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

import inspect
import math
import operator
import sys
from collections.abc import Callable, Sequence
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

import kvsim.interrupts as _interrupts
from kvsim.cache.delegated import EVENTS, Delegated, DelegatedGate
from kvsim.cache.eviction import POLICIES, BlockStore, Gate, SecondHit
from kvsim.interrupts import interrupted, signals
from kvsim.physics.step import lone_seconds
from kvsim.plugins.api import Block, EngineView, EvictionPolicy, RequestView, SimView, TierView
from kvsim.plugins.failures import PluginError, at, code_place, describe, place_of, show
from kvsim.plugins.loading import load_plugins
from kvsim.plugins.registry import BUILTIN
from kvsim.plugins.resolve import make
from kvsim.sim.constants import Constants
from kvsim.sim.policy import LOAD_POLICIES
from kvsim.sim.policy import LoadPolicy as CoreLoadPolicy
from kvsim.sim.router import ROUTERS, Router
from kvsim.sim.router import Delegated as DelegatedRouter

if TYPE_CHECKING:
    from kvsim.config.schema import PolicyRef

MAX_DEPTH = 1 << 24  # the deepest block SimView.recompute_s answers for


class _Refused(Exception):
    """An answer that breaks its rule (the rule, as the message says it)."""


class Hook:
    """One plugin policy instance, and how to name it in a message. Everything that runs
    plugin code (its methods, its attributes, the checks of what it returns, which may
    call its own ``__int__`` or ``__eq__``) runs through :meth:`call`, :meth:`attr` or
    :meth:`answer`: whatever comes out, SystemExit, KeyboardInterrupt, GeneratorExit,
    StopIteration included, is one :class:`PluginError` naming the plugin, the method and
    the place in its code; only a real interrupt (a signal) is let through."""

    def __init__(self, policy: Any, plugin: str, kind: str, name: str, at: str = "") -> None:
        self.policy = policy
        self.where = f"plugin {plugin} ({kind} {name!r}{' on ' + at if at else ''})"
        try:  # its module's file, where messages look for the place (a class attribute)
            file = getattr(sys.modules.get(type(policy).__module__), "__file__", None)
        except BaseException:  # (a metaclass of its own may refuse)
            file = None
        self.files = [file] if isinstance(file, str) else []

    def call(self, method: str, *args: Any, optional: bool = False) -> Any:
        """The plugin's method (``optional``: None if it has none)."""
        before = _interrupts._signals  # (the hot path of eviction plugins: no call)
        try:
            fn = getattr(self.policy, method, None)
            if fn is None or not callable(fn):
                if optional:
                    return None
                raise PluginError(f"it has no method {method}()", where=self.where)
            got = fn(*args)
        except BaseException as e:  # whatever plugin code raises
            if type(e) is PluginError or interrupted(e, before):
                raise  # (kvsim's own: a misuse of what it gave the plugin; a real signal)
            raise self.raised(f"{method}()", e) from e
        if _interrupts._signals != before:  # Ctrl-C came, and the plugin swallowed it
            raise KeyboardInterrupt
        return got

    def attr(self, name: str, default: Any) -> Any:
        """One of the plugin's attributes (a property is plugin code)."""
        before = signals()
        try:
            return getattr(self.policy, name, default)
        except BaseException as e:
            if interrupted(e, before):
                raise
            raise self.raised(f"its attribute {name}", e) from e

    def answer(self, method: str, value: Any, check: Callable[[Any], Any]) -> Any:
        """``check(value)``: what the plugin returned, as kvsim uses it (``_Refused``: it
        breaks the rule)."""
        before = signals()
        try:
            return check(value)
        except _Refused as r:
            raise self.broken(method, str(r)) from None
        except BaseException as e:
            if interrupted(e, before):
                raise
            raise self.broken(
                method, f"returned {show(value)}, which cannot be read ({describe(e)})"
            ) from e

    def raised(self, what: str, e: BaseException) -> PluginError:
        return PluginError(
            f"{what} raised {describe(e)}{at(place_of(e, self.files))}", where=self.where
        )

    def broken(self, method: str, rule: str) -> PluginError:
        place = code_place(self.policy, method)
        return PluginError(f"{method}() broke a rule: {rule}{at(place)}", where=self.where)


def _is_bool(value: Any) -> bool:
    """True or False (NumPy's too), not a number that happens to be 0 or 1."""
    return type(value) is bool or isinstance(value, np.bool_)


def _truth(value: Any) -> bool:
    if not _is_bool(value):
        raise _Refused(f"returned {show(value)}; expected True or False")
    return bool(value)


def _flag(hook: Hook, attr: str, default: bool) -> bool:
    """A policy's class attribute that must be True or False."""
    value = hook.attr(attr, default)
    if not _is_bool(value):
        raise PluginError(
            f"its attribute {attr} broke a rule: must be True or False, got {show(value)}",
            where=hook.where,
        )
    return bool(value)


def _whole(value: Any) -> int | None:
    """An int (NumPy's too; not a bool), or None."""
    if _is_bool(value) or not isinstance(value, Integral):
        return None
    return operator.index(value)  # (an exact int, whatever the type)


def _counter(most: int, what: str) -> Callable[[Any], int]:
    """The check of a plugin's answer that must be a whole number in [0, most]."""

    def check(value: Any) -> int:
        n = _whole(value)
        if n is None:
            raise _Refused(f"returned {show(value)}; expected an int (a number of blocks)")
        if n < 0:
            raise _Refused(f"returned {show(n)}; a number of blocks is never negative")
        if n > most:
            raise _Refused(f"returned {show(n)}, more blocks than the {most} {what}")
        return n

    return check


def _priority(value: Any) -> float:
    """A priority: a finite real number (NumPy's too; not a bool) within a float's range."""
    if _is_bool(value) or not isinstance(value, Real):
        raise _Refused(f"returned {show(value)}; expected a finite number")
    try:
        x = float(value)
    except OverflowError:
        raise _Refused(
            f"returned {show(value)}; expected a finite number (it is beyond a float's range)"
        ) from None
    if not math.isfinite(x):
        raise _Refused(f"returned {show(value)}; expected a finite number")
    return x


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
    """What a :class:`~kvsim.cache.delegated.Delegated` store asks of its plugin policy's
    side: on its first event, :meth:`bind` gives it the policy's methods by event code
    (the batch method ``inserted_many``, ``hit_many``, ``refreshed_many`` or
    ``removed_many`` when the policy has one, else the one-block method; None for an
    event the policy does not hear: a one-block method it inherits unchanged from
    :class:`kvsim.plugins.EvictionPolicy`, which does nothing). The store then calls the
    policy itself (compiled: no interpreted frame but the policy's); the hook works out
    what never changes of a block the first time it is seen (:meth:`fixed`), checks a
    victim the store cannot take as it is (:meth:`checked_victim`), and turns what the
    policy raises into one PluginError (:meth:`failed`). A ``removed`` that takes only
    the key (the interface before reasons) is called without the reason."""

    def __init__(
        self, hooks: Any, policy: Any, plugin: str, kind: str, name: str, tier: str, shards: int
    ) -> None:
        super().__init__(hooks, policy, plugin, kind, name, tier, shards)
        # what never changes of a block, per key, shared by the stores with as many
        # shards (a stand-in ``hooks`` that only has ``block``: one per hook)
        statics = getattr(hooks, "_static", None)
        self._static: dict[Any, tuple[int, float, Any, int]] = (
            statics.setdefault(shards, {}) if isinstance(statics, dict) else {}
        )

    def bind(self, store: Delegated) -> None:
        """Give the store the policy's methods (its attributes are plugin code: read once)."""
        fns: list[Any] = []
        many: list[bool] = []
        base = EvictionPolicy
        cls = type(self.policy)
        for event in EVENTS[: REMOVED_FROM + 1]:
            name = "removed" if event == "evicted" else event
            fn = self.attr(name + "_many", None)
            if fn is not None and callable(fn):
                fns.append(fn)
                many.append(True)
                continue
            fn = self.attr(name, None)
            if fn is None or not callable(fn):
                fn = None if name == "refreshed" else _missing(self, name)
            elif getattr(cls, name, None) is getattr(base, name):
                fn = None  # the interface's own: it does nothing
            fns.append(fn)
            many.append(False)
        fns += [fns[-1]] * (len(EVENTS) - len(fns))  # every reason: removed
        many += [many[-1]] * (len(EVENTS) - len(many))
        store.fns = fns
        store.many = many
        store.reason = _takes_reason(fns[-1]) if not many[-1] else True
        evict = self.attr("evict", None)
        victim = self.attr("victim", None)
        store.forgets = evict is not None and callable(evict)
        if store.forgets:
            store.victim_fn = evict
        else:
            store.victim_fn = (
                victim if victim is not None and callable(victim) else _missing(self, "victim")
            )
        store.view = self._view(store)
        store.static = self._static
        hooks = self.hooks
        env = getattr(hooks, "env", None)
        if env is not None:
            store.clock = lambda: env.now
        else:  # a replay's stand-in: its own time
            store.clock = lambda: getattr(hooks, "now", 0.0)
        store.bound = True

    def fixed(self, store: Delegated, key: Any, nbytes: float) -> tuple[int, float, Any, int]:
        """What never changes of a block seen for the first time (depth, recompute
        seconds, parent, tenant), kept once its depth is known."""
        b = self.hooks.block(key, nbytes, self.shards)
        fixed = (b.depth, b.recompute_s, b.parent, b.tenant)
        if b.depth >= 0:  # (an unknown depth may be learnt later)
            self._static[key] = fixed
        return fixed

    def failed(self, store: Delegated, event: int, e: BaseException, before: int) -> BaseException:
        """What to raise for ``e`` out of the policy's method for ``event`` (an event
        code; -1: victim): kvsim's own errors and a real interrupt as they are, anything
        else as one PluginError naming the method."""
        if type(e) is PluginError or interrupted(e, before):
            return e
        if event < 0:
            method = "evict" if store.forgets else "victim"
        else:
            method = "removed" if event >= REMOVED_FROM else EVENTS[event]
            if store.many[event]:
                method += "_many"
        err = self.raised(f"{method}()", e)
        err.__cause__ = e
        return err

    def checked_victim(self, store: Delegated, got: Any) -> int:
        """A victim that is not plainly an int key held (a NumPy int, or a broken rule)."""

        def check(value: Any) -> int:
            key = _whole(value)  # keys are ints: the core never sees the plugin's object
            if key is None:  # the type first: 58.0 is no key, resident or not
                raise _Refused(
                    f"returned {show(value)}; a key must be an int (a block's key, as the "
                    "tier's events give it)"
                )
            if key not in store.blocks:
                raise _Refused(
                    f"returned {show(value)}, which is not a block resident in {self.tier}"
                )
            return key

        return int(self.answer("evict" if store.forgets else "victim", got, check))


REMOVED_FROM = EVENTS.index("evicted")  # the first removal event (all go to removed)


def _missing(hook: Hook, method: str) -> Callable[..., Any]:
    """A stand-in for a method the policy lacks: calling it stops the run, naming it."""

    def missing(*args: Any) -> Any:
        raise PluginError(f"it has no method {method}()", where=hook.where)

    return missing


def _takes_reason(fn: Any) -> bool:
    """Does a policy's ``removed`` take (key, reason)? False only when its signature
    takes just the key (a plugin written before reasons)."""
    if fn is None:
        return True
    try:
        sig = inspect.signature(fn)
    except Exception:  # (a builtin or a callable object without one: assume the new form)
        return True
    try:
        sig.bind(0, "evicted")
        return True
    except TypeError:
        pass
    try:
        sig.bind(0)
        return False
    except TypeError:
        return True


class AdmissionHook(StoreHook):
    """What a :class:`~kvsim.cache.delegated.DelegatedGate` calls."""

    store: BlockStore | None = None  # the tier's store (None: the remote store's servers)

    def admit(self, key: Any, nbytes: float) -> bool:
        view = self._view(self.store)
        ok = self.call("admit", self.hooks.block(key, nbytes, self.shards), view)
        return bool(self.answer("admit", ok, _truth))


class RouterHook(Hook):
    """What a :class:`~kvsim.sim.router.Delegated` router calls."""

    def __init__(self, hooks: Hooks, policy: Any, plugin: str, name: str) -> None:
        super().__init__(policy, plugin, "router", name)
        self.hooks = hooks

    def route(self, job: Any, engines: Sequence[Any]) -> Any:
        views = [self.hooks.engine_view(e) for e in engines]
        got = self.call("route", RequestView(job), views)

        def check(value: Any) -> Any:
            index = value.index if isinstance(value, EngineView) else _whole(value)
            if type(index) is not int:
                raise _Refused(f"returned {show(value)}; expected an EngineView or its index")
            for e in engines:
                if e.index == index:
                    return e
            up = [e.index for e in engines]
            raise _Refused(
                f"returned engine {show(index)}, which is not an engine that is up ({up})"
            )

        return self.answer("route", got, check)


class LoadHook(CoreLoadPolicy):
    """A plugin load policy as the core's :class:`~kvsim.sim.policy.LoadPolicy`."""

    def __init__(self, policy: Any, plugin: str, name: str, tiers: Sequence[str]) -> None:
        self.hook = Hook(policy, plugin, "load_policy", name)
        self.tiers = tuple(tiers)  # the run's tier names by code (kvsim.sim.tiers)
        self.name = name
        self.blocking = _flag(self.hook, "blocking", True)
        self.lower_tiers = _flag(self.hook, "lower_tiers", True)

    def restore_blocks(
        self, src: Sequence[int], estimate: Callable[[int], float], job: object = None
    ) -> int:
        n = len(src)
        sources = [self.tiers[t] for t in src]
        hook = self.hook
        misuse: list[PluginError] = []  # kept even if the plugin catches what it is given

        def checked(k: Any) -> float:
            """``estimate(k)``, for k blocks of the hit (0..n)."""
            try:
                blocks = _whole(k)
            except BaseException:  # a plugin's own int type
                blocks = None
            if blocks is None or not 0 <= blocks <= n:
                misuse.append(
                    hook.broken(
                        "restore_blocks",
                        f"called estimate({show(k)}); it takes a whole number of blocks "
                        f"from 0 to the {n} hit",
                    )
                )
                raise misuse[-1]
            return estimate(blocks)

        try:
            got = hook.call("restore_blocks", RequestView(job), sources, checked)
        except PluginError:
            if misuse:
                raise misuse[0] from None
            raise
        if misuse:
            raise misuse[0]
        return int(hook.answer("restore_blocks", got, _counter(n, "hit")))


class PrefetchHook(Hook):
    """A plugin prefetch policy: how much of a request's prefix to fetch into host."""

    def __init__(self, policy: Any, plugin: str, name: str, tiers: Sequence[str]) -> None:
        super().__init__(policy, plugin, "prefetch", name)
        self.tiers = tuple(tiers)  # the run's tier names by code (kvsim.sim.tiers)
        self.wait = _flag(self, "wait", False)

    def fetch_blocks(self, job: Any, src: Sequence[int]) -> int:
        sources = [self.tiers[t] for t in src]
        got = self.call("fetch_blocks", RequestView(job), sources)
        return int(self.answer("fetch_blocks", got, _counter(len(src), "in the usable prefix")))


class SchedulerHook(Hook):
    """A plugin scheduler: a request's priority when it joins an engine's queue (and, for
    a policy with ``dynamic = True``, at each pick)."""

    def __init__(self, hooks: Hooks, policy: Any, plugin: str, name: str) -> None:
        super().__init__(policy, plugin, "scheduler", name)
        self.hooks = hooks
        self.dynamic = _flag(self, "dynamic", False)

    def bind(self, engine: Any) -> Callable[[Any], float]:
        view = self.hooks.engine_view(engine)

        def priority(job: Any) -> float:
            got = self.call("priority", RequestView(job), view)
            return float(self.answer("priority", got, _priority))

        return priority


class Hooks:
    """Every policy of one simulation, by the names its scenario gives."""

    def __init__(self, run: Constants, env: simpy.Environment) -> None:
        self.run = run
        self.env = env
        # a Scenario built elsewhere (unpickled in a worker) has not imported them here
        load_plugins(run.scenario.plugins, "plugins")
        self.made: list[Hook] = []  # every plugin instance (setup() is called on each)
        # block key -> (prefix depth, the key before it), for eviction and admission
        # plugins (None: there are none)
        self.depths: dict[Any, tuple[int, Any]] | None = None
        self._views: dict[int, EngineView] = {}
        self._recompute: dict[int, float] = {}  # block depth -> seconds (memoised)
        self.tenant_of: Callable[[Any], int] = lambda key: -1
        # shards -> store key -> (depth, recompute_s, parent, tenant) (EvictionHook.fixed)
        self._static: dict[int, dict[Any, tuple[int, float, Any, int]]] = {}

    def _make(self, kind: str, ref: PolicyRef) -> tuple[Any, str]:
        policy, plugin = make(kind, ref.name, self.run.scenario.plugins, ref.params)
        self.made.append(Hook(policy, plugin, kind, ref.name))
        return policy, plugin

    # ---- the factories ---------------------------------------------------------------
    # (each takes a scenario's policy field: a PolicyRef, its name and its params)

    def store(self, ref: PolicyRef, capacity: float, tier: str, shards: int = 1) -> BlockStore:
        """A block store with the named eviction policy."""
        cls = POLICIES.get(ref.name)
        if cls is not None:
            return cls(capacity)
        policy, plugin = self._make("eviction", ref)
        self.depths = {} if self.depths is None else self.depths
        hook = EvictionHook(self, policy, plugin, "eviction", ref.name, tier, shards)
        return Delegated(capacity, hook)

    def gate(
        self,
        ref: PolicyRef,
        capacity: float,
        tier: str,
        store: BlockStore | None = None,
        shards: int = 1,
    ) -> Gate | None:
        """A tier's admission filter (``store``: the tier's, for the plugin's view): None
        (admit all), second-hit with a ghost list as long as the tier holds full blocks,
        or a plugin."""
        if ref.name == "all":
            return None
        if ref.name == "second_hit":
            ctx = self.run
            return SecondHit(int(capacity // (ctx.block_tokens * ctx.kv_bytes)))
        policy, plugin = self._make("admission", ref)
        self.depths = {} if self.depths is None else self.depths
        hook = AdmissionHook(self, policy, plugin, "admission", ref.name, tier, shards)
        hook.store = store
        return DelegatedGate(hook)

    def router(self, ref: PolicyRef, engines: Sequence[Any], slack: int) -> Router:
        cls = ROUTERS.get(ref.name)
        if cls is not None:
            return cls(engines, slack)
        policy, plugin = self._make("router", ref)
        return DelegatedRouter(engines, RouterHook(self, policy, plugin, ref.name))

    def load_policy(self, ref: PolicyRef) -> CoreLoadPolicy:
        builtin = LOAD_POLICIES.get(ref.name)
        if builtin is not None:
            return builtin
        policy, plugin = self._make("load_policy", ref)
        return LoadHook(policy, plugin, ref.name, self.run.names)

    def prefetch(self, ref: PolicyRef) -> PrefetchHook | None:
        """None for the built-in prefetch policies."""
        if ref.name in BUILTIN["prefetch"]:
            return None
        policy, plugin = self._make("prefetch", ref)
        return PrefetchHook(policy, plugin, ref.name, self.run.names)

    def scheduler(self, ref: PolicyRef) -> SchedulerHook | None:
        """None for the built-in schedulers."""
        if ref.name in BUILTIN["scheduler"]:
            return None
        policy, plugin = self._make("scheduler", ref)
        return SchedulerHook(self, policy, plugin, ref.name)

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
        s = self._recompute.get(depth)
        if s is None:
            ctx = self.run
            b = ctx.block_tokens
            s = self._recompute[depth] = lone_seconds(ctx.steps, b, depth * b, ctx.per_step)
        return s

    def plugin_recompute_s(self, depth: Any) -> float:
        """:meth:`recompute_s` as plugins call it (SimView.recompute_s): a depth from -1
        to 2**24 (a prompt of 16M blocks), never a huge one that would take forever."""
        d = _whole(depth)
        if d is None or not -1 <= d <= MAX_DEPTH:
            raise ValueError(
                f"recompute_s(depth): depth is a block's place in its chain, an int from -1 "
                f"to {MAX_DEPTH}, got {show(depth)}"
            )
        return self.recompute_s(d)

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
            float(self.env.now),
        )

    def setup(self, engines: Sequence[Any], remote: Any) -> None:
        """Give every plugin its :class:`SimView` (once the simulation is built)."""
        if not self.made:
            return
        ctx = self.run
        env = self.env
        view = SimView(
            lambda: float(env.now),
            [self.engine_view(e) for e in engines],
            remote,
            ctx.block_tokens,
            ctx.block_tokens * ctx.kv_bytes,
            self.plugin_recompute_s,
        )
        for hook in self.made:
            hook.call("setup", view, optional=True)
