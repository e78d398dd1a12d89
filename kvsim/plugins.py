"""User-written policies: the six interfaces, the registry of names, and plugin loading.

A plugin is a Python module that defines policy classes and registers them by name::

    from kvsim.plugins import EvictionPolicy, register

    @register("lfu")
    class LFU(EvictionPolicy):
        def victim(self, tier): ...

A scenario that lists the module under ``plugins:`` (or a command given ``--plugin
MODULE``) may then use the name wherever a built-in one goes (``tiers.gpu.eviction: lfu``).
An installed package can also offer policies through the entry-point group
``kvsim.policies``. The classes are plain Python: kvsim's compiled core calls them
through these interfaces (it never subclasses them), so they run on the default
``pip install .`` as on the pure-Python core. docs/extending.md walks through writing one.

Every policy gets read-only views (:class:`RequestView`, :class:`EngineView`,
:class:`TierView`, :class:`Block`, and :class:`SimView` through :meth:`Policy.setup`);
what a policy returns is checked (:mod:`kvsim.sim.hooks`), and a broken rule, an
exception inside a plugin, an import error or a missing method stops the run with one
line naming the plugin (exit 2).

This module holds only the interfaces and the registry: it imports nothing of the
simulation, so a plugin can be imported anywhere (a sweep worker, a Dask worker).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from kvsim.errors import InputError, shown

ENTRY_POINT_GROUP = "kvsim.policies"

# ---- what policies see -------------------------------------------------------------------


class Block(NamedTuple):
    """One block as an eviction or admission policy sees it."""

    key: Any  # the store's key (an int)
    nbytes: float  # bytes it holds in this store (after the tier's codec)
    depth: int  # its place in its prompt's block chain (0: the first block; -1: unknown)
    # prefill seconds one full block at this depth costs a lone request (NaN: unknown)
    recompute_s: float
    parent: Any  # the store's key of the block before it in its chain (None at depth 0)
    tenant: int  # its tenant (-1: none, or a public prefix)
    now: float  # simulated time of the call (s)


class RequestView:
    """A request, read-only: what routers, schedulers, load and prefetch policies see."""

    __slots__ = ("_job",)

    def __init__(self, job: Any) -> None:
        self._job = job

    @property
    def id(self) -> int:
        return int(self._job.req.id)

    @property
    def arrival(self) -> float:
        """Arrival time (s)."""
        return float(self._job.req.arrival)

    @property
    def prompt_tokens(self) -> int:
        return int(self._job.req.input_tokens)

    @property
    def output_tokens(self) -> int:
        return int(self._job.req.output_tokens)

    @property
    def tenant(self) -> int:
        return int(self._job.req.tenant)

    @property
    def session(self) -> int:
        """Session id (-1: none)."""
        s = getattr(self._job.req, "session", None)
        return -1 if s is None else int(s)

    @property
    def blocks(self) -> tuple[Any, ...]:
        """The cache keys of its prompt's blocks, in prefix order."""
        return tuple(self._job.keys)

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens its engine's lookup found cached (0 before the lookup)."""
        return int(self._job.cached)

    @property
    def remaining_tokens(self) -> int:
        """Prompt tokens still to compute."""
        j = self._job
        return int(j.req.input_tokens - j.cached - j.done)

    def __repr__(self) -> str:
        return f"RequestView(id={self.id}, prompt_tokens={self.prompt_tokens})"


class TierView:
    """One block store (a tier of one engine, or one remote server), read-only."""

    __slots__ = ("_store", "name")

    def __init__(self, store: Any, name: str) -> None:
        self._store = store
        self.name = name  # gpu | host | nvme | remote

    @property
    def capacity(self) -> float:
        """Bytes it may hold."""
        return float(self._store.capacity)

    @property
    def used(self) -> float:
        """Bytes held now."""
        return float(self._store.used)

    @property
    def reserved(self) -> float:
        """Bytes held for blocks on their way in (restores in flight)."""
        return float(self._store.reserved)

    def __len__(self) -> int:
        return len(self._store.blocks)

    def __contains__(self, key: Any) -> bool:
        return key in self._store.blocks

    def __iter__(self) -> Iterator[Any]:
        """Resident keys, in the order they were stored."""
        return iter(self._store.blocks)

    def nbytes(self, key: Any) -> float:
        """Bytes a resident block holds (KeyError if it is not resident)."""
        return float(self._store.blocks[key].size)

    def __repr__(self) -> str:
        return f"TierView({self.name}, {len(self)} blocks, {self.used:.4g}/{self.capacity:.4g} B)"


class EngineView:
    """One prefill engine, read-only and live: its load and its local tiers."""

    __slots__ = ("_engine", "_tiers")

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        names = ("gpu", "host", "nvme")
        self._tiers = {
            n: TierView(s, n)
            for n, s in zip(names, engine.local.tiers, strict=True)
            if s is not None  # (an empty store is falsy)
        }

    @property
    def index(self) -> int:
        return int(self._engine.index)

    @property
    def up(self) -> bool:
        return bool(self._engine.up)

    @property
    def outstanding(self) -> int:
        """Requests routed here and not finished (queued, loading or computing)."""
        return int(self._engine.outstanding)

    @property
    def queued(self) -> int:
        """Requests waiting for a step."""
        return int(self._engine.queued)

    @property
    def queued_tokens(self) -> int:
        """Prompt tokens still to compute of the waiting requests."""
        e = self._engine
        return sum(j.req.input_tokens - j.cached - j.done for j in e.waiting.jobs())

    @property
    def running(self) -> int:
        """Requests computing (picked for a step, chunks left)."""
        return len(self._engine.running)

    @property
    def tiers(self) -> dict[str, TierView]:
        """Its local tiers by name (gpu, host, nvme; those enabled)."""
        return self._tiers

    def prefix_blocks(self, request: RequestView | Sequence[Any]) -> int:
        """Blocks of the longest prefix of a request (or a key chain) held in its tiers."""
        keys = request.blocks if isinstance(request, RequestView) else request
        return int(self._engine.local.prefix_blocks(keys))

    def __repr__(self) -> str:
        return f"EngineView({self.index}, outstanding={self.outstanding})"


class SimView:
    """The simulation as every policy may see it (given once, to :meth:`Policy.setup`)."""

    def __init__(
        self,
        clock: Callable[[], float],
        engines: list[EngineView],
        remote: Any,
        block_tokens: int,
        block_bytes: float,
        recompute: Callable[[int], float],
    ) -> None:
        self._clock = clock
        self.engines = engines  # every engine, up or not
        self._remote = remote
        self.block_tokens = block_tokens
        self.block_bytes = block_bytes  # bytes of a full block's KV (raw)
        self._recompute = recompute

    @property
    def now(self) -> float:
        """Simulated time (s)."""
        return self._clock()

    def remote_holds(self, key: Any) -> bool:
        """Is the block (a request cache key) usable from the remote store now?"""
        return self._remote is not None and bool(self._remote.has(key))

    def remote_prefix_blocks(self, request: RequestView | Sequence[Any]) -> int:
        """Blocks of the longest prefix of a request (or a key chain) in the remote store."""
        if self._remote is None:
            return 0
        keys = request.blocks if isinstance(request, RequestView) else request
        n = 0
        for k in keys:
            if not self._remote.has(k):
                break
            n += 1
        return n

    def recompute_s(self, depth: int) -> float:
        """Seconds of prefill one full block at ``depth`` costs a lone request."""
        return self._recompute(depth)


# ---- the interfaces ----------------------------------------------------------------------


class Policy:
    """Base of every plugin policy. One instance is made per use (per store for eviction
    and admission, per engine for scheduling, one per simulation otherwise), with no
    arguments; ``setup`` is then called once with the :class:`SimView`."""

    kind: ClassVar[str] = ""
    required: ClassVar[tuple[str, ...]] = ()

    def setup(self, sim: SimView) -> None:
        """Called once before the run (keep ``sim`` to look at the clock or the engines)."""


class EvictionPolicy(Policy):
    """Which resident block of a store goes first when room is needed (per tier:
    ``tiers.<tier>.eviction``, ``remote.eviction``). The store tells it what comes and
    goes; it answers :meth:`victim`."""

    kind = "eviction"
    required = ("victim",)

    def inserted(self, block: Block) -> None:
        """A block was stored."""

    def hit(self, block: Block) -> None:
        """A resident block was used (a hit) or stored again (a refresh)."""

    def removed(self, key: Any) -> None:
        """A block left the store (evicted, deleted, or the store was emptied)."""

    def victim(self, tier: TierView) -> Any:
        """The key of a resident block to evict now."""
        raise NotImplementedError


class AdmissionPolicy(Policy):
    """Whether a block offered to a tier is stored there (``tiers.<tier>.admission``,
    ``remote.admission``); a refused block goes on down as an evicted one would."""

    kind = "admission"
    required = ("admit",)

    def admit(self, block: Block, tier: TierView) -> bool:
        raise NotImplementedError


class RoutingPolicy(Policy):
    """Which engine a new request joins (``cluster.router``)."""

    kind = "router"
    required = ("route",)

    def route(self, request: RequestView, engines: list[EngineView]) -> EngineView | int:
        """One of ``engines`` (those up), or its index."""
        raise NotImplementedError


class SchedulingPolicy(Policy):
    """The order of an engine's waiting queue (``engine.scheduler``): a request's
    priority is computed when it joins the queue; smaller goes first, ties in arrival
    order. Requests already computing keep their place, as under fcfs."""

    kind = "scheduler"
    required = ("priority",)

    def priority(self, request: RequestView, engine: EngineView) -> float:
        raise NotImplementedError


class LoadPolicy(Policy):
    """How much of an available hit to restore (``cluster.load_policy``). ``sources``
    names the tier of each block of the usable prefix (gpu, host, nvme, remote);
    ``estimate(k)`` is the live estimate (s) of restoring the first ``k`` and computing
    the rest. ``blocking``: the engine waits for the restore (as sync) or serves others
    (as async); ``lower_tiers``: look below GPU at all."""

    kind = "load_policy"
    required = ("restore_blocks",)
    blocking: ClassVar[bool] = True
    lower_tiers: ClassVar[bool] = True

    def restore_blocks(
        self, request: RequestView, sources: list[str], estimate: Callable[[int], float]
    ) -> int:
        raise NotImplementedError


class PrefetchPolicy(Policy):
    """Which of a request's NVMe and remote blocks are fetched into host memory when it
    reaches its engine (``prefetch.policy``). ``wait``: the request stays out of the queue
    until its prefetch is in (as wait_complete); otherwise it stops when the request is
    picked (as best_effort)."""

    kind = "prefetch"
    required = ("fetch_blocks",)
    wait: ClassVar[bool] = False

    def fetch_blocks(self, request: RequestView, sources: list[str]) -> int:
        """How many of the first blocks of the usable prefix to fetch (those in NVMe or
        remote are moved; ``sources`` names each block's tier)."""
        raise NotImplementedError


INTERFACES: dict[str, type[Policy]] = {
    c.kind: c
    for c in (
        EvictionPolicy,
        AdmissionPolicy,
        RoutingPolicy,
        SchedulingPolicy,
        LoadPolicy,
        PrefetchPolicy,
    )
}

# ---- the registry ------------------------------------------------------------------------

# built-in names of each kind (a plugin may not take one)
BUILTIN: dict[str, tuple[str, ...]] = {
    "eviction": ("lru", "fifo"),
    "admission": ("all", "second_hit"),
    "router": ("round_robin", "least_loaded", "cache_affinity"),
    "scheduler": ("fcfs", "lpm", "sjf"),
    "load_policy": ("sync", "async", "recompute", "auto"),
    "prefetch": ("none", "best_effort", "wait_complete", "timeout"),
}


# how messages name each kind
LABELS: dict[str, str] = {
    "eviction": "eviction policy",
    "admission": "admission policy",
    "router": "router",
    "scheduler": "scheduler",
    "load_policy": "load policy",
    "prefetch": "prefetch policy",
}


class Entry(NamedTuple):
    cls: type
    plugin: str  # the module (or entry point) it came from, for messages
    spec: str | None  # the plugins: entry that loaded it (None: registered otherwise)


# kind -> name -> the plugin (its plugins: spec; None: registered by other code) -> entry
_REGISTRY: dict[str, dict[str, dict[str | None, Entry]]] = {kind: {} for kind in INTERFACES}
_loading: list[tuple[str, str | None]] = []  # (plugin, spec) being imported now
# the plugins the scenario being validated lists (None: not validating one)
_scope: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "kvsim_plugin_scope", default=None
)
_entry_points_loaded = False


class PluginError(InputError):
    """A plugin that cannot be loaded or broke a rule (exit 2, one line)."""


def _kind_of(cls: type) -> str:
    for base in cls.__mro__:
        kind = getattr(base, "kind", "")
        if isinstance(kind, str) and kind in INTERFACES:
            return kind
    raise TypeError(
        f"{cls.__name__} is not a kvsim policy: subclass one of "
        + ", ".join(c.__name__ for c in INTERFACES.values())
        + " from kvsim.plugins (or give it a kind attribute)"
    )


def register(name: str, kind: str | None = None) -> Callable[[type], type]:
    """Class decorator: register a policy class under ``name`` (its kind from its base
    class, or ``kind``). A name may not be a built-in one, nor taken by another class."""

    def deco(cls: type) -> type:
        add(name, cls, kind)
        return cls

    return deco


def add(name: str, cls: type, kind: str | None = None) -> None:
    """Register ``cls`` under ``name`` (what :func:`register` does). Two plugins may use
    one name (a scenario sees only its own plugins'); one plugin may not use it twice."""
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        raise ValueError(f"a policy name must be a non-empty printable string, got {name!r}")
    k = kind if kind is not None else _kind_of(cls)
    if k not in INTERFACES:
        raise ValueError(f"unknown policy kind {k!r}; choose one of {sorted(INTERFACES)}")
    if name in BUILTIN[k]:
        raise ValueError(f"{k} {name!r} is a built-in name; choose another")
    base = INTERFACES[k]
    missing = [
        m
        for m in base.required
        if not callable(getattr(cls, m, None)) or getattr(cls, m) is getattr(base, m)
    ]
    if missing:
        raise TypeError(f"{k} {name!r} ({cls.__name__}) does not define {missing[0]}()")
    plugin, spec = _loading[-1] if _loading else (getattr(cls, "__module__", "?"), None)
    by_plugin = _REGISTRY[k].setdefault(name, {})
    old = by_plugin.get(spec)
    if old is not None and not _same_class(old.cls, cls) and spec is None:
        raise ValueError(f"{k} {name!r} is already registered by {old.plugin}")
    by_plugin[spec] = Entry(cls, plugin, spec)  # (a plugin imported again replaces itself)


def _same_class(a: type, b: type) -> bool:
    """The same class, or the same class from a module imported again."""
    return a is b or (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def _visible(entry: Entry, scope: frozenset[str] | None) -> bool:
    """May a scenario listing the plugins ``scope`` use this policy? Only if it lists
    the plugin that registered it (every worker imports just the scenario's plugins, so
    it knows the name too); entry points and policies registered by the caller's own
    code are visible to every scenario (None: no scenario in view, all are)."""
    return scope is None or entry.spec is None or entry.spec in scope


def lookup(kind: str, name: str, specs: Sequence[str] | None = None) -> Entry | None:
    """The plugin policy a scenario listing ``specs`` (default: the one being validated)
    means by ``name``; None: not a plugin name it can use. ValueError when two of its
    plugins register the name."""
    if name in BUILTIN[kind]:
        return None
    if name not in _REGISTRY[kind] and not _entry_points_loaded:
        load_entry_points()
    scope = frozenset(canonical(s) for s in specs) if specs is not None else _scope.get()
    seen = [e for e in _REGISTRY[kind].get(name, {}).values() if _visible(e, scope)]
    own = [e for e in seen if e.spec is not None]
    if len(own) > 1:
        raise ValueError(
            f"{LABELS[kind]} {name!r} is registered by two plugins of this scenario: "
            f"{own[0].plugin} and {own[1].plugin}"
        )
    return (own or seen or [None])[-1]


def names(kind: str) -> list[str]:
    """Every name of a kind: built-in, then plugins' (entry points included; while a
    scenario is validated, those of its own plugins)."""
    load_entry_points()
    scope = _scope.get()
    mine = [n for n, by in _REGISTRY[kind].items() if any(_visible(e, scope) for e in by.values())]
    return [*BUILTIN[kind], *sorted(mine)]


def check_name(kind: str, name: str) -> str:
    """A scenario's policy name, if known (ValueError listing the choices otherwise)."""
    if name in BUILTIN[kind] or lookup(kind, name) is not None:
        return name
    others = _REGISTRY[kind].get(name)
    if others:
        plugin = next(iter(others.values())).plugin
        raise ValueError(
            f"{LABELS[kind]} {name!r} comes from plugin {plugin}, which this scenario "
            "does not list: add it to plugins: (or give --plugin)"
        )
    known = names(kind)
    hint = (
        ""
        if len(known) > len(BUILTIN[kind])
        else "; a plugin's name needs its module in plugins: or --plugin"
    )
    raise ValueError(f"unknown {LABELS[kind]} {name!r}; choose one of {known}{hint}")


# ---- loading -----------------------------------------------------------------------------


def load_entry_points() -> None:
    """Import what installed packages offer under ``kvsim.policies`` (once per process).
    An entry point names a policy class (registered under the entry point's name) or a
    module (which registers its own)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {ep.name} = {ep.value}"
        _loading.append((where, None))
        try:
            obj = ep.load()
            if isinstance(obj, type):
                add(ep.name, obj)
        except Exception as e:
            raise PluginError(_failure(e), where=f"plugin {where}") from None
        finally:
            _loading.pop()


def _failure(e: BaseException) -> str:
    if isinstance(e, ImportError | SyntaxError | FileNotFoundError):
        return f"cannot import it ({type(e).__name__}: {e})"
    return f"failed while loading ({type(e).__name__}: {e})"


def is_file_spec(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def canonical(spec: str) -> str:
    """A plugins: entry as kvsim keeps it: a .py file by its absolute path."""
    return str(Path(spec).expanduser().resolve()) if is_file_spec(spec) else spec


@contextlib.contextmanager
def scope(specs: Sequence[Any]) -> Iterator[None]:
    """Validate a scenario that lists these plugins (see :func:`_visible`)."""
    token = _scope.set(frozenset(canonical(s) for s in specs if isinstance(s, str)))
    try:
        yield
    finally:
        _scope.reset(token)


def load_plugins(specs: Sequence[str], where: str | None = None) -> None:
    """Import each plugin (a module name importable from the current folder or
    ``sys.path``, or a ``.py`` file path) so that its policies are registered; an import
    that fails is a :class:`PluginError` naming the plugin (after ``where``)."""
    for spec in specs:
        if not isinstance(spec, str) or not spec.strip():
            raise PluginError(
                f"a plugin is a module name or a .py path, got {shown(spec)}", where=where
            )
        _loading.append((spec, canonical(spec)))
        try:
            if is_file_spec(spec):
                _import_file(Path(spec))
            else:
                _import_module(spec)
        except PluginError:
            raise
        except BaseException as e:  # SystemExit, KeyboardInterrupt too: one line, exit 2
            if isinstance(e, KeyboardInterrupt):
                raise
            here = f"plugin {spec}" if where is None else f"{where}: plugin {spec}"
            raise PluginError(_failure(e), where=here) from None
        finally:
            _loading.pop()


def _import_module(name: str) -> None:
    if name in sys.modules:
        return
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)  # `kvsim` (a console script) has no cwd on its path
    importlib.import_module(name)


def _import_file(path: Path) -> None:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"kvsim_plugin_{path.stem}_{digest}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"not a Python module: {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise


@contextlib.contextmanager
def registered(name: str, cls: type, kind: str | None = None) -> Iterator[None]:
    """Register a policy for the duration of a ``with`` block (tests, notebooks)."""
    k = kind if kind is not None else _kind_of(cls)
    by_plugin = _REGISTRY[k].setdefault(name, {})
    old = by_plugin.pop(None, None)
    _loading.append((getattr(cls, "__module__", "?"), None))
    try:
        add(name, cls, k)
    finally:
        _loading.pop()
    try:
        yield
    finally:
        by_plugin.pop(None, None)
        if old is not None:
            by_plugin[None] = old
        if not by_plugin:
            _REGISTRY[k].pop(name, None)


def make(kind: str, name: str, specs: Sequence[str]) -> tuple[Any, str]:
    """A new instance of the plugin policy ``name`` of a scenario listing the plugins
    ``specs``, and the plugin it came from."""
    entry = lookup(kind, name, specs)
    if entry is None:  # validated names only reach here
        raise KeyError(name)
    try:
        return entry.cls(), entry.plugin
    except Exception as e:
        raise PluginError(
            f"{entry.cls.__name__}() failed ({type(e).__name__}: {e})",
            where=f"plugin {entry.plugin} ({kind} {name!r})",
        ) from None
